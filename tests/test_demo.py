"""The bundled demo is a real run: trained, sealed, clearly above chance, and clean under every capsule audit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.verdict import shell_word


def test_demo_capsule_passes_every_capsule_audit(run_audits, demo_project: Path) -> None:
    outcome = run_audits(DEMO_RUN_ID, demo_project, "-m", "custody")
    assert outcome.result.ret == 0, outcome.result.stdout.str()
    assert outcome.report is not None
    capsule = [item for item in outcome.report["verdicts"] if item["audit"].startswith("capsule.")]
    assert capsule and {item["verdict"] for item in capsule} == {"passed"}
    assert outcome.report["custody_ok"] is True


def test_demo_model_is_clearly_above_chance(demo_project: Path) -> None:
    metrics = json.loads(
        (demo_project / "export" / DEMO_RUN_ID / "test" / "main" / "metrics.json").read_text()
    )
    accuracy = {
        row["condition_id"]: row["value"] for row in metrics["metrics"] if row["metric"] == "accuracy"
    }
    assert accuracy["clean"] > 0.9  # chance is 0.1 on ten classes
    assert accuracy["noise"] > 0.5


def test_run_demo_builds_audits_and_reports_from_a_bare_root(tmp_path: Path) -> None:
    """``pytest --run=demo --root <empty dir>``, as the README says: train, seal, audit, report."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--run=demo", f"--root={tmp_path}", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"building the demo run under {tmp_path}" in done.stderr
    for written in ("demo.json", "demo.html"):  # shell-quoted, as a user would paste it
        assert f"runaudit: wrote {shell_word(str(tmp_path / 'reports' / written))}" in done.stdout
    report = json.loads((tmp_path / "reports" / "demo.json").read_text())
    assert report["custody_ok"] is True and report["summary"]["failed"] == 0
    assert (tmp_path / "export" / DEMO_RUN_ID / "run.json").is_file()
    assert not (tmp_path / "quarantine").exists()


def test_run_demo_with_a_cache_it_cannot_write_is_one_line(tmp_path: Path) -> None:
    """A cache folder that cannot be created (a read-only mount, a container's ``--user`` with no HOME, a
    full disk) ended ``--run=demo`` in a 70-line INTERNALERROR; it is one usage line naming the folder."""
    (tmp_path / "a-file").write_text("not a folder")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--run=demo", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "a-file")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 4, said  # pytest's usage error
    assert "INTERNALERROR" not in said and "Traceback" not in said, said
    [line] = [line for line in said.splitlines() if "--run=demo" in line]
    assert f"cannot build the demo under {tmp_path / 'a-file'}" in line and "XDG_CACHE_HOME" in line


@pytest.mark.parametrize("given", ["0", "0.8", "-0.1", "nan", "a fifth"])
def test_a_test_fraction_that_leaves_no_split_is_one_usage_line(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo trainer's ``--test-fraction`` must leave a test split and room for validation and training."""
    from runaudit.examples.digits.__main__ import main

    argv = ["digits", "produce", "--root", str(tmp_path), "--run-id", "x", "--test-fraction", given]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "--test-fraction: expected a number between 0 and 0.8, found" in line and given in line
    assert not any(tmp_path.iterdir())  # refused before anything was written
