"""A sweep of the demo on a real single-node Slurm (tests/slurm.py), through ``runaudit cluster``'s sbatch
array: three cells train, one is preempted half way (``scontrol requeue``: SIGTERM, a save at the step
boundary, requeue, resume from ``latest.pth``), each is sealed, and an audit array runs the custody gate
on every cell."""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from slurm import Slurm, running_slurm
from starter_env import HOSTILE_PYTEST_ENV

from runaudit.cli import main
from runaudit.examples.digits.__main__ import train_command

EPOCHS = 4
ROSTER = ("digits-c0", "digits-c1", "digits-c2")
PREEMPTED = 1  # the array index preempted half way
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    with running_slurm(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def rows(root: Path, run_id: str) -> list[dict[str, str]]:
    path = root / "active" / run_id / "train.csv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def wait_for(ready: Callable[[], bool], what: str, slurm: Slurm, root: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            logs = "".join(
                f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}" for path in root.glob("*.out")
            )
            raise AssertionError(f"no {what} within {TIMEOUT_S} s:\n{logs}\n{slurm.logs()}")
        time.sleep(0.5)


def sweep(purpose: str, roster: Path, root: Path, out: Path, *command: str) -> Path:
    args = [
        "cluster",
        "--scheduler",
        "slurm",
        "--purpose",
        purpose,
        "--roster",
        str(roster),
        "--root",
        str(root),
    ]
    args += ["--name", f"digits-{purpose}", "--cpus", "1", "--time", "00:30:00", "--python", sys.executable]
    assert main([*args, "--out", str(out), *(["--", *command] if command else [])]) == 0
    return out


def test_a_sweep_trains_survives_a_preemption_seals_and_audits_on_slurm(slurm: Slurm, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    roster = tmp_path / "roster.txt"
    roster.write_text("# three cells of the demo\n" + "\n".join(ROSTER) + "\n", encoding="utf-8")
    train = train_command("{root}", "{run_id}", epochs=EPOCHS, throttle_s=1)
    script = sweep("launch", roster, root, tmp_path / "train.sbatch", *train)
    job = slurm.submit(script)

    # The preemption drill: once the cell has two epochs on disk, the scheduler takes it back.
    victim = ROSTER[PREEMPTED]
    wait_for(lambda: len(rows(root, victim)) >= 2, f"two epochs of {victim}", slurm, root)
    slurm.run("scontrol", "requeue", f"{job}_{PREEMPTED}")
    # Slurm holds a requeued batch job about two minutes before it may start again; release it at once.
    wait_for(
        lambda: "PENDING" in " ".join(slurm.queued(f"{job}_{PREEMPTED}")), "the requeued task", slurm, root
    )
    slurm.run("scontrol", "update", f"JobId={job}_{PREEMPTED}", "StartTime=now")
    wait_for(lambda: not slurm.queued(job), "end of the training array", slurm, root)

    log = next(root.glob(f"digits-launch-{job}_{PREEMPTED}.out")).read_text()
    stopped = log.index("stopping after epoch ")  # the SIGTERM was honoured at a step boundary ...
    assert log.find("resumed after epoch", stopped) > stopped  # ... and the requeued task resumed from it
    saved = int(log[stopped:].removeprefix("stopping after epoch ").split(" ", 1)[0])
    for run_id in ROSTER:
        history = rows(root, run_id)
        assert [int(row["epoch"]) for row in history] == list(range(1, EPOCHS + 1)), (run_id, history)
        resumed = [int(row["epoch"]) for row in history if row["resume"] in ("true", "1", "yes")]
        assert resumed == ([saved + 1] if run_id == victim else []), (run_id, resumed)

    for run_id in ROSTER:
        assert main(["close", run_id, "--root", str(root)]) == 0, run_id

    # Submitted from a shell that keeps pytest settings for the user's own tests: sbatch exports them to
    # every task, and none may reach the gate (a -k there deselected every audit).
    audit = slurm.submit(
        sweep("audit", roster, root, tmp_path / "audit.sbatch"), environment=HOSTILE_PYTEST_ENV
    )
    wait_for(lambda: not slurm.queued(audit), "end of the audit array", slurm, root)
    for run_id in ROSTER:
        report = json.loads((root / "reports" / f"{run_id}.json").read_text(encoding="utf-8"))
        gates = [item for item in report["verdicts"] if item["audit"].startswith(("capsule.", "checkpoint."))]
        held = {item["verdict"] for item in gates}
        assert "passed" in held and held <= {"passed", "not_applicable"}, [
            (item["audit"], item["verdict"], item["message"]) for item in gates if item["verdict"] != "passed"
        ]
