"""Special files from a box (a FIFO, a character device) where capsule or ``_trust/`` bytes should be.

``rsync -a`` recreates FIFOs, and as root device nodes. Opening a FIFO blocks until a writer comes, and
reading ``/dev/zero`` never ends, so before the readers went through :mod:`runaudit.safeio` one such file
hung ``pytest --run`` and ``runaudit verify`` forever or filled memory. Each test here bounds what it runs:
whole sessions run in a child process with a deadline and a memory ceiling (killed with its process group
on overrun), and in-process reads of a FIFO run on a thread that is released by opening the FIFO's write
end if it blocks, so a regression fails in seconds instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bounded import run_bounded

from runaudit.checkpoints import CheckpointRefused, inspect
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.ids import report_stem
from runaudit.manifest import MANIFEST, RECEIPT
from runaudit.reader import CapsuleReader, Unavailable
from runaudit.reports import facts
from runaudit.reports.history import read_history
from runaudit.resolve import Location, Root
from runaudit.run import Run

SESSION_DEADLINE_S = 180  # a demo session takes seconds; a hang is caught well within this
MEMORY_CEILING = 3 << 30  # bytes of address space: a child reading /dev/zero dies with MemoryError here
READ_DEADLINE_S = 30


# -- bounded runs -------------------------------------------------------------------------------------


def _bounded(argv: list[str], cwd: Path, what: str) -> tuple[int, str]:
    """Run ``argv`` bounded in time and memory (it may block on a special file); its status and output."""
    log = cwd / "output.log"
    environment = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    code = run_bounded(
        argv,
        cwd=cwd,
        log=log,
        deadline_s=SESSION_DEADLINE_S,
        memory_bytes=MEMORY_CEILING,
        what=what,
        env=environment,
    )
    return code, log.read_text(errors="replace")


def _audit(project: Path, capsule: Path, tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    """``pytest --run=<capsule>`` as users run it, bounded; the report it wrote and its output."""
    cwd = tmp_path / "session"
    cwd.mkdir()
    reports = tmp_path / "reports"
    argv = [sys.executable, "-m", "pytest", "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider"]
    argv += ["--run", str(capsule), "--root", str(project), "--report-dir", str(reports), *args]
    code, output = _bounded(argv, cwd, f"pytest --run={capsule}")
    report = reports / f"{report_stem(capsule.name)}.json"
    assert report.is_file(), f"no report was written (exit {code}):\n{output[-3000:]}"
    assert code != 0, output[-3000:]  # a special file in a capsule is a failure, never a clean pass
    return json.loads(report.read_text()), output


def _verdicts(report: dict[str, Any], subject: str) -> dict[str, str]:
    """``audit -> verdict`` of every verdict about ``subject``."""
    return {item["audit"]: item["verdict"] for item in report["verdicts"] if item["subject"] == subject}


def _one(report: dict[str, Any], audit: str, subject: str = "") -> dict[str, Any]:
    [item] = [i for i in report["verdicts"] if i["audit"] == audit and i["subject"] == subject]
    return item


def _make_device(path: Path) -> None:
    """``path`` becomes a character device reading like ``/dev/zero`` (major 1, minor 5)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        if os.geteuid() != 0:  # a developer's unprivileged machine; CI runs as root and never skips
            pytest.skip("creating a device node needs root")
        raise


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def _read_on_a_thread(read: Callable[[], Any], fifo: Path) -> Any:
    """``read()``'s result or exception; if it blocks on ``fifo``, unblock it and fail the test."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = read()
        except BaseException as exc:  # handed back to the test below
            outcome["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(READ_DEADLINE_S)
    if worker.is_alive():
        # A reader blocked in open(): a writer arriving and leaving gives it end-of-file, and it returns.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(READ_DEADLINE_S)
        pytest.fail(f"reading {fifo} blocked until a writer came: it was opened as if it were a file")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _demo_run(project: Path) -> Run:
    return Run.load(Location(project / "export" / DEMO_RUN_ID, Root(project, "--root"), "export"))


# -- run.json -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_file_as_run_json_fails_the_capsule_gate_within_a_bound(
    project: Path, capsule_dir: Path, tmp_path: Path, kind: str
) -> None:
    _replace(capsule_dir / "run.json", os.mkfifo if kind == "fifo" else _make_device)
    report, output = _audit(project, capsule_dir, tmp_path, "-m", "custody")
    word = "a FIFO" if kind == "fifo" else "a character device"

    about = _verdicts(report, "run.json")
    assert about.get("capsule.required_paths") == "failed", about
    assert "passed" not in about.values(), about
    assert _one(report, "capsule.run_json_schema")["verdict"] != "passed"
    forbidden = _one(report, "capsule.forbidden_paths")
    assert forbidden["verdict"] == "failed" and "run.json (special file" in forbidden["message"]
    # Everything that needs the declarations says why, in one line naming the file and what it is.
    why = f"{capsule_dir / 'run.json'} is {word}; expected a regular file"
    blocked = _one(report, "capsule.tests_declared")
    assert blocked["verdict"] == "not_run" and why in blocked["message"] and "\n" not in blocked["message"]
    assert "Traceback" not in output


def test_run_load_records_why_a_special_run_json_was_not_read(project: Path, capsule_dir: Path) -> None:
    fifo = capsule_dir / "run.json"
    _replace(fifo, os.mkfifo)
    run = _read_on_a_thread(lambda: _demo_run(project), fifo)
    assert run.declared is None
    assert run.problem == f"{fifo} is a FIFO; expected a regular file"


def test_run_json_with_a_duplicate_key_is_a_problem_not_a_silent_last_value(capsule_dir: Path) -> None:
    target = capsule_dir / "run.json"
    target.write_text(target.read_text().replace("{", '{"run_id": "other", ', 1))
    run = Run.load(Location(capsule_dir, Root(capsule_dir.parent.parent, "--root"), "export"))
    assert run.declared is None and "duplicate key" in str(run.problem)


# -- checkpoints and the files beside them ----------------------------------------------------------------


def test_fifos_as_checkpoint_train_csv_and_metrics_reach_verdicts_within_a_bound(
    project: Path, capsule_dir: Path, tmp_path: Path
) -> None:
    for rel in ("best.pth", "train.csv", "test/main/metrics.json"):
        _replace(capsule_dir / rel, os.mkfifo)
    report, output = _audit(project, capsule_dir, tmp_path)

    checkpoint = {
        audit: verdict for audit, verdict in _verdicts(report, "best.pth").items() if "checkpoint" in audit
    }
    assert {"checkpoint.safe_load", "checkpoint.tensors", "checkpoint.finite"} <= checkpoint.keys(), (
        checkpoint
    )
    assert "passed" not in checkpoint.values(), checkpoint
    assert _one(report, "checkpoint.safe_load", "last.pth")["verdict"] == "passed"  # the real one still loads
    for rel in ("best.pth", "train.csv", "test/main/metrics.json"):
        about = _verdicts(report, rel)
        assert about.get("capsule.required_paths") == "failed", (rel, about)
        assert "passed" not in about.values(), (rel, about)
    assert _one(report, "capsule.train_csv")["verdict"] != "passed"
    assert "Traceback" not in output


def test_inspect_refuses_a_fifo_checkpoint_before_torch_opens_it(capsule_dir: Path) -> None:
    fifo = capsule_dir / "best.pth"
    _replace(fifo, os.mkfifo)
    with pytest.raises(CheckpointRefused, match=r"best\.pth is a FIFO; expected a regular file"):
        _read_on_a_thread(lambda: inspect(fifo), fifo)
    # The checked open file is what torch maps: a real checkpoint still loads, weights_only and mmap.
    inspection = inspect(capsule_dir / "last.pth")
    assert inspection.tensors > 0 and not inspection.nonfinite and inspection.weights_key is not None


@pytest.mark.parametrize(
    ("rel", "read", "owner"),
    [
        ("train.csv", lambda reader: reader.csv_rows("train.csv"), "capsule.train_csv"),
        ("config.yaml", lambda reader: reader.bytes("config.yaml"), "capsule.config_hash"),
        (
            "test/main/metrics.json",
            lambda reader: reader.json("test/main/metrics.json"),
            "capsule.metrics_schema",
        ),
        (
            "test/main/results.parquet",
            lambda reader: reader.table("test/main/results.parquet"),
            "capsule.results_table",
        ),
    ],
    ids=["train.csv", "config.yaml", "metrics.json", "results.parquet"],
)
def test_a_file_swapped_for_a_fifo_after_the_inventory_is_refused_by_its_owner(
    project: Path, capsule_dir: Path, rel: str, read: Callable[[CapsuleReader], Any], owner: str
) -> None:
    reader = CapsuleReader(_demo_run(project))
    assert reader.inventory.has_file(rel)  # the listing saw a regular file ...
    _replace(capsule_dir / rel, os.mkfifo)  # ... which the box swapped before it was read
    with pytest.raises(Unavailable) as refused:
        _read_on_a_thread(lambda: read(reader), capsule_dir / rel)
    assert refused.value.owner == owner
    assert str(refused.value) == f"{capsule_dir / rel} is a FIFO; expected a regular file"


def test_a_trust_record_that_is_a_fifo_is_named_as_one(project: Path) -> None:
    run = _demo_run(project)
    [test] = run.tests
    selection = project / "_trust" / "selections" / f"{test.selection_id}.json"
    _replace(selection, os.mkfifo)
    with pytest.raises(Unavailable, match="is a FIFO; expected a regular file") as refused:
        _read_on_a_thread(lambda: CapsuleReader(run).selection(test), selection)
    assert refused.value.owner == "capsule.selection"


def test_the_report_quotes_no_numbers_from_a_fifo_and_says_why(project: Path, capsule_dir: Path) -> None:
    metrics = capsule_dir / "test" / "main" / "metrics.json"
    _replace(metrics, os.mkfifo)
    rows, problems = _read_on_a_thread(lambda: facts.headline_metrics(_demo_run(project)), metrics)
    assert rows == [] and len(problems) == 1 and "test/main/metrics.json could not be read" in problems[0]


def test_the_history_plot_names_a_fifo_train_csv(capsule_dir: Path) -> None:
    _replace(capsule_dir / "train.csv", os.mkfifo)
    why = _read_on_a_thread(lambda: read_history(capsule_dir), capsule_dir / "train.csv")
    assert why == f"train.csv is not plotted: {capsule_dir / 'train.csv'} is a FIFO; expected a regular file"


# -- runaudit verify ---------------------------------------------------------------------------------------


def test_verify_refuses_a_pull_whose_run_json_became_a_fifo_within_a_bound(
    project: Path, capsule_dir: Path, tmp_path: Path
) -> None:
    pull = project / "_trust" / "pulls" / DEMO_RUN_ID
    assert (pull / MANIFEST).is_file()  # the manifest was built while run.json was a regular file
    _replace(capsule_dir / "run.json", os.mkfifo)
    cwd = tmp_path / "verify"
    cwd.mkdir()
    script = "import sys; from runaudit.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", script, "verify", "--root", str(project), "--pull-id", DEMO_RUN_ID]
    code, output = _bounded(argv, cwd, "runaudit verify")
    assert code == 1, output[-3000:]
    assert "no receipt written" in output and "capsule.required_paths[run.json] failed" in output
    assert not (pull / RECEIPT).exists()  # the demo's earlier receipt was revoked, none written anew
