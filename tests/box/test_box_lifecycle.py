"""A real training run on the "box", driven only through SSH: push, launch, lose the connection, watch,
kill the trainer, relaunch and resume from latest.pth, close on the box, audit on the box."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sshbox import CHECKOUT, SshBox

from runaudit.cli import main
from runaudit.examples.digits.__main__ import train_command
from runaudit.runners.ssh import Remote
from runaudit.runners.watch import Status, watch

RUN = "digits-box"
EPOCHS = 6


def wait_for(check: Callable[[], Status | None], what: str, timeout_s: float = 240) -> Status:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def history(root: Path) -> list[dict[str, str]]:
    with (root / "active" / RUN / "train.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_a_detached_run_survives_ssh_resumes_after_a_kill_and_closes_on_the_box(
    sshbox: SshBox, box_root: Path, box_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = sshbox.cli_args(box_root, box_state)
    box = sshbox.box(box_root, box_state)
    code = box_root / "code"
    train = train_command(str(box_root), RUN, epochs=EPOCHS, throttle_s=1.5)

    assert main(["push", *args, str(CHECKOUT), "--dest", str(code)]) == 0
    assert "(equal on both sides)" in capsys.readouterr().out

    # Launch detached. The launching SSH session ends when the command returns.
    assert main(["launch", *args, "--workdir", str(code), RUN, "--", *train]) == 0
    assert f"launch {RUN} on {sshbox.endpoint().label}: running" in capsys.readouterr().out
    # A second writer is refused while the first is alive.
    assert main(["launch", *args, "--workdir", str(code), RUN, "--", *train]) == 2
    assert "is still running" in capsys.readouterr().err

    # A new connection: the run kept going without us.
    two_epochs = wait_for(
        lambda: (
            s
            if (s := watch(box, RUN)).state == "running" and int(s.signals.get("progress_rows", 0)) >= 2
            else None
        ),
        "two epochs on disk",
    )

    # Kill the trainer itself (as an OOM killer would); its wrapper records the exit code.
    with Remote(sshbox.endpoint()) as remote:
        assert remote.run(f"pkill -KILL -P {two_epochs.signals['pid']}").ok
    wait_for(lambda: s if (s := watch(box, RUN)).state == "dead" else None, "the kill to show")
    assert main(["watch", *args, RUN]) == 1
    assert "dead — the job was killed by SIGKILL (exit code 137)" in capsys.readouterr().err
    done_before_kill = len(history(box_root))
    assert 2 <= done_before_kill < EPOCHS

    # Relaunch the identical command: the trainer resumes from latest.pth.
    assert main(["launch", *args, "--workdir", str(code), RUN, "--", *train]) == 0
    wait_for(lambda: s if (s := watch(box, RUN)).state == "finished" else None, "the relaunch to finish", 300)
    assert main(["watch", *args, RUN]) == 0
    assert "finished — the wrapper recorded exit code 0" in capsys.readouterr().out

    rows = history(box_root)
    assert [int(row["epoch"]) for row in rows] == list(range(1, EPOCHS + 1))
    steps = [int(row["step"]) for row in rows]
    assert steps == [steps[0] * epoch for epoch in range(1, EPOCHS + 1)]  # counters continue, never reset
    resumed = [
        int(row["epoch"]) for row in rows if row["resume"] in ("true", "1", "yes")
    ]  # docs/capsule.md §6
    assert resumed == [done_before_kill + 1]
    log = (
        Path(box.run_state(RUN)) / Path(box.run_state(RUN), "current").read_text().strip() / "log"
    ).read_text()
    assert f"after epoch {done_before_kill} (step {steps[done_before_kill - 1]})" in log

    # Close on the box: the box's own runaudit seals active/ as export/.
    assert main(["close", *args, "--workdir", str(code), RUN]) == 0
    out = capsys.readouterr()
    assert f"close {RUN}: sealed" in out.out and "ran on" in out.err
    assert (box_root / "export" / RUN / "run.json").is_file()

    # Audit on the box; the verdicts come home labelled with where they ran.
    local = tmp_path / "local"
    local.mkdir()
    assert (
        main(
            [
                "audit",
                *args,
                "--workdir",
                str(code),
                "--root",
                str(local),
                RUN,
                "--",
                "-m",
                "custody",
                "-k",
                "capsule",
            ]
        )
        == 1  # every capsule audit held, but -k capsule is a subset of the custody gate: never a yes
    )
    report = json.loads((local / "reports" / f"{RUN}.json").read_text())
    assert report["teardown"]["answer"] == "no"
    capsule = [item for item in report["verdicts"] if item["audit"].startswith("capsule.")]
    assert capsule and {item["where"] for item in report["verdicts"]} == {sshbox.endpoint().label}
    assert {item["verdict"] for item in capsule} == {"passed"}
    assert (local / "reports" / f"{RUN}.html").is_file()
