"""``runaudit queue`` on a box over a real sshd: launched as one detached job, it trains and seals each run
in turn, survives a command that reads stdin, records every step, refuses a second runner and resumes."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sshbox import SshBox

from runaudit.cli import main
from runaudit.examples.digits.__main__ import train_command
from runaudit.runners.launch import launch
from runaudit.runners.watch import watch

NAME = "nightly"


def steps(box_root: Path) -> list[tuple[str, str, str]]:
    with (box_root / "queues" / f"{NAME}.csv").open(newline="", encoding="utf-8") as handle:
        return [(row["run_id"], row["state"], row["exit_code"]) for row in csv.DictReader(handle)]


def ended(sshbox: SshBox, box_root: Path, box_state: Path, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = watch(sshbox.box(box_root, box_state), NAME, progress_file=f"queues/{NAME}.csv").state
        if state in ("finished", "dead"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"the queue did not end within {timeout_s} s: {steps(box_root)}")


def test_a_queue_trains_and_seals_each_run_and_resumes(
    sshbox: SshBox, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = box_root / f"{NAME}.txt"
    train = " ".join(train_command("{root}", "{run_id}", epochs=2))
    queue.write_text(
        "# a night of runs\n"
        f"q-first {train}\n"
        "q-reads-stdin bash -c 'read answer; echo \"got [$answer]\"; exit 3'   # would hang on a terminal\n",
        encoding="utf-8",
    )
    runner = [sys.executable, "-m", "runaudit", "queue", "run", str(queue), "--root", str(box_root)]
    args = [*sshbox.cli_args(box_root, box_state), "--progress-file", f"queues/{NAME}.csv", NAME]
    assert main(["launch", *args, "--", *runner]) == 0
    assert ": running after" in capsys.readouterr().out  # its log's first row is its sign of life

    # One runner per queue: a second one, started while the first works, is refused in one line.
    second = subprocess.run(runner, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    assert second.returncode == 2 and "one runner per queue" in second.stderr, second.stderr

    assert ended(sshbox, box_root, box_state) == "dead"  # exit 1: one run of two did not end sealed
    assert steps(box_root) == [
        ("q-first", "started", ""),
        ("q-first", "sealed", "0"),
        ("q-reads-stdin", "started", ""),
        ("q-reads-stdin", "failed", "3"),
    ]
    assert (box_root / "export" / "q-first" / "run.json").is_file()

    # Started again, the sealed run is skipped and the failed one tried anew.
    assert launch(
        sshbox.box(box_root, box_state), NAME, runner, progress_file=f"queues/{NAME}.csv"
    ).state in (
        "running",
        "finished",
        "dead",
    )
    ended(sshbox, box_root, box_state)
    assert steps(box_root)[4:] == [
        ("q-first", "skipped", ""),
        ("q-reads-stdin", "started", ""),
        ("q-reads-stdin", "failed", "3"),
    ]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("../x python3 train.py\n", "not a safe id"),
        ("a python3 t.py\na python3 t.py\n", "listed twice"),
        ("lonely\n", "expected RUN_ID COMMAND"),
        ("# nothing\n", "lists no run"),
        (None, "cannot read the queue"),
    ],
    ids=["unsafe-id", "twice", "no-command", "empty", "fifo"],
)
def test_a_bad_queue_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, named: str
) -> None:
    queue = tmp_path / "q.txt"
    if text is None:
        os.mkfifo(queue)  # a reader that opened it would wait forever for a writer
    else:
        queue.write_text(text, encoding="utf-8")
    assert main(["queue", "run", str(queue), "--root", str(tmp_path)]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert named in line and str(queue) in line, line
    assert not (tmp_path / "queues").exists()
