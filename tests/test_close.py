"""``runaudit close``: seal a real produced run, or quarantine it with its reason; never delete, never overwrite."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runaudit.cli import main
from runaudit.examples.digits.build import produce
from runaudit.examples.digits.train import DEFAULT_CONFIG

RUN_ID = "digits-e2"


def tree_digest(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below ``folder`` (directories by their presence)."""
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file()
        else "dir"
        for path in sorted(folder.rglob("*"))
    }


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project root whose ``active/<RUN_ID>`` was trained (2 epochs), evaluated and declared by the demo."""
    root = tmp_path_factory.mktemp("produced")
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"]["epochs"] = 2
    produce(root, RUN_ID, config, log=lambda line: None)
    return root


@pytest.fixture
def root(produced: Path, tmp_path: Path) -> Path:
    target = tmp_path / "root"
    shutil.copytree(produced, target, symlinks=True)
    return target


def close(root: Path, run_id: str = RUN_ID) -> int:
    return main(["close", run_id, "--root", str(root)])


def quarantined(root: Path) -> list[Path]:
    folder = root / "quarantine"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_close_seals_the_run_with_its_bindings(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    active = root / "active" / RUN_ID
    before = tree_digest(active)
    assert close(root) == 0
    sealed = root / "export" / RUN_ID
    assert f"close {RUN_ID}: sealed {sealed}" in capsys.readouterr().out
    declared = json.loads((sealed / "run.json").read_text())
    assert declared["state"] == "closed" and declared["closed_utc"].endswith("Z")
    assert declared["config"]["sha256"] == sha256_of(sealed / "config.yaml")
    assert declared["checkpoints"]["best"]["sha256"] == sha256_of(sealed / "best.pth")
    assert declared["checkpoints"]["last"]["sha256"] == sha256_of(sealed / "last.pth")
    (selection,) = declared["selections"]
    assert selection["sha256"] == sha256_of(
        root / "_trust" / "selections" / f"{selection['selection_id']}.json"
    )
    # latest.pth is the resume anchor of active/ and never enters a capsule; the rest is copied byte for byte.
    assert not (sealed / "latest.pth").exists()
    for rel in ("config.yaml", "train.csv", "best.pth", "last.pth", "test/main/metrics.json"):
        assert sha256_of(sealed / rel) == before[rel]
    assert tree_digest(active) == before  # nothing moved out of active/, nothing changed there
    assert not (root / "export" / ".partial" / RUN_ID).exists()
    assert quarantined(root) == []


def test_failing_candidate_is_quarantined_with_its_reason(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    active = root / "active" / RUN_ID
    (active / "test" / "main" / "scratch.txt").write_text("a note left in the test folder\n")
    before = tree_digest(active)
    assert close(root) == 1
    (attempt,) = quarantined(root)
    assert attempt.name.startswith(f"{RUN_ID}--")
    reason = (attempt / "QUARANTINE_REASON.txt").read_text()
    assert "capsule.closed_world" in reason and "test/main/scratch.txt" in reason
    report = json.loads((attempt / "AUDIT_REPORT.json").read_text())
    assert {item["audit"] for item in report["verdicts"] if item["verdict"] == "failed"} == {
        "capsule.closed_world"
    }
    assert report["custody_ok"] is False
    # The candidate moved whole: its bytes are kept for inspection, nothing was sealed or deleted.
    assert (attempt / "test" / "main" / "scratch.txt").is_file() and (attempt / "best.pth").is_file()
    assert not (root / "export" / RUN_ID).exists()
    assert not (root / "export" / ".partial" / RUN_ID).exists()
    assert tree_digest(active) == before
    assert f"quarantined at {attempt}" in capsys.readouterr().err


def test_existing_export_is_refused_before_anything_moves(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sealed = root / "export" / RUN_ID
    sealed.mkdir(parents=True)
    (sealed / "run.json").write_text('{"run_id": "digits-e2", "state": "closed"}\n')
    before_export, before_active = tree_digest(root / "export"), tree_digest(root / "active")
    assert close(root) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "already sealed" in lines[0] and "never overwritten" in lines[0], lines
    assert tree_digest(root / "export") == before_export
    assert tree_digest(root / "active") == before_active
    assert quarantined(root) == []


def test_stale_candidate_is_quarantined_not_deleted(root: Path) -> None:
    stale = root / "export" / ".partial" / RUN_ID
    stale.mkdir(parents=True)
    (stale / "best.pth").write_bytes(b"half-copied checkpoint from an interrupted close")
    assert close(root) == 0
    (attempt,) = quarantined(root)
    assert (attempt / "best.pth").read_bytes() == b"half-copied checkpoint from an interrupted close"
    assert "stale candidate" in (attempt / "QUARANTINE_REASON.txt").read_text()
    assert (root / "export" / RUN_ID / "run.json").is_file()


@pytest.mark.parametrize(
    ("run_id", "named"),
    [("../escape", "not a safe id"), ("never-produced", "no active run to close")],
    ids=["unsafe-id", "no-active-run"],
)
def test_refusals_are_one_line(
    root: Path, capsys: pytest.CaptureFixture[str], run_id: str, named: str
) -> None:
    before = tree_digest(root)
    assert close(root, run_id) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("runaudit close: error:") and named in lines[0], lines
    assert tree_digest(root) == before


def test_an_interpreter_without_torch_is_an_environment_error_not_a_quarantine(
    root: Path, tmp_path: Path
) -> None:
    """Found on a box: closing with a Python that lacked torch quarantined a good run as if it were bad."""
    hidden = tmp_path / "site"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(
        "import sys\nsys.modules['torch'] = None  # as if not installed\n"
    )
    before = tree_digest(root / "active" / RUN_ID)
    done = subprocess.run(
        [sys.executable, "-m", "runaudit", "close", RUN_ID, "--root", str(root)],
        env={**os.environ, "PYTHONPATH": str(hidden)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "no module named torch" in said[0] and "--python" in said[0], said
    assert tree_digest(root / "active" / RUN_ID) == before
    assert not (root / "export" / RUN_ID).exists() and not (root / "export" / ".partial" / RUN_ID).exists()
    assert quarantined(root) == []
