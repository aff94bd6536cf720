"""``runaudit sweep status``: every planned cell of a sweep with its state and flags; none silently missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from capsules import pulled_home

from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID

# run id -> (state, flags) expected once the fixture below has laid the project out
EXPECTED = {
    DEMO_RUN_ID: ("verified", []),
    "c-planned": ("planned", ["no capsule", "no report"]),
    "c-training": ("launched", ["no capsule", "no report"]),
    "c-trained": ("trained", ["no capsule", "1 close(s) quarantined", "no report"]),
    "c-failing": ("closed", ["report holds 2 failed, 1 error"]),
    "c-pulled": ("pulled", ["no report"]),
    "c-fifo-report": ("closed", ["report unreadable"]),
    "c-deep-report": ("closed", ["report unreadable"]),
    # A summary count holding ESC sequences and a forged "verified" line reached the terminal raw.
    "c-forged-summary": ("closed", ["report unreadable"]),
    "c-a": ("planned", ["no capsule", "no report"]),  # run "c-a--b"'s failed close is not its own
}


@pytest.fixture
def sweep_root(project: Path) -> Path:
    """The demo project (the demo sealed and verified), its report, and a cell at every other stage."""
    clean = {"passed": 850, "failed": 0, "error": 0, "disclosed": 0, "not_run": 2, "not_applicable": 0}
    (project / "reports").mkdir()
    (project / "reports" / f"{DEMO_RUN_ID}.json").write_text(json.dumps({"summary": clean}))
    (project / "active" / "c-training").mkdir(parents=True)
    (project / "active" / "c-training" / "train.csv").write_text("epoch,step,train_loss\n1,10,0.5\n")
    (project / "active" / "c-trained").mkdir(parents=True)
    (project / "active" / "c-trained" / "run.json").write_text("{}")
    (project / "quarantine" / "c-trained--20261203T000000Z-ab12").mkdir(parents=True)
    for sealed in ("c-failing", "c-fifo-report", "c-deep-report", "c-forged-summary"):
        (project / "export" / sealed).mkdir()
    forged = {"failed": "\x1b[2K\rc-forged-summary verified", "error": 0}
    (project / "reports" / "c-forged-summary.json").write_text(json.dumps({"summary": forged}))
    (project / "reports" / "c-deep-report.json").write_text("[" * 100_000)  # RecursionError, not ValueError
    (project / "quarantine" / "c-a--b--20261203T000000Z-cd34").mkdir(parents=True)
    summary = {"passed": 10, "failed": 2, "error": 1, "disclosed": 0, "not_run": 0, "not_applicable": 0}
    (project / "reports" / "c-failing.json").write_text(json.dumps({"summary": summary}))
    os.mkfifo(project / "reports" / "c-fifo-report.json")  # a hostile report: never opened for reading
    (project / "runs" / "c-pulled").mkdir(parents=True)
    return project


def test_every_planned_cell_has_a_line_with_its_state_and_flags(
    sweep_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roster = tmp_path / "roster.txt"
    roster.write_text("\n".join(EXPECTED) + "\n")
    assert main(["sweep", "status", "--root", str(sweep_root), "--roster", str(roster), "--json"]) == 1
    cells = json.loads(capsys.readouterr().out)
    assert [cell["run_id"] for cell in cells] == list(EXPECTED)  # roster order, none left out
    for cell in cells:
        state, flags = EXPECTED[cell["run_id"]]
        assert cell["state"] == state, cell
        assert [flag.split(" (", 1)[0] for flag in cell["flags"]] == flags, cell
    assert [cell["run_id"] for cell in cells if cell["complete"]] == [DEMO_RUN_ID]


def test_a_sweep_whose_every_cell_is_verified_passes(
    sweep_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roster = tmp_path / "roster.txt"
    roster.write_text(f"# the one finished cell\n{DEMO_RUN_ID}\n")
    assert main(["sweep", "status", "--root", str(sweep_root), "--roster", str(roster)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == [DEMO_RUN_ID, "verified", "ok"]
    assert lines[-1].startswith("sweep roster.txt: 1 of 1 cell(s) verified")


def test_a_cell_verified_where_it_was_produced_says_it_has_no_copy_home_yet(
    sweep_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo verifies its capsule in place (``export/``), as a cluster's scratch is verified: the sweep is
    complete there, but the line must not read as a copy brought home, which ``runaudit down`` refuses."""
    roster = tmp_path / "roster.txt"
    roster.write_text(f"{DEMO_RUN_ID}\n")
    status = ["sweep", "status", "--root", str(sweep_root), "--roster", str(roster)]
    assert main(status) == 0
    (line, _) = capsys.readouterr().out.splitlines()
    assert f"verified in place in export/{DEMO_RUN_ID}" in line and "runaudit down" in line
    assert main([*status, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["verified_in"] == "export"

    pulled_home(sweep_root, DEMO_RUN_ID)
    assert main(status) == 0
    (line, _) = capsys.readouterr().out.splitlines()
    assert line.split() == [DEMO_RUN_ID, "verified", "ok"]


def test_the_report_index_lists_every_planned_cell_without_a_report(
    run_audits,
    pytester: pytest.Pytester,
    sweep_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_audits(DEMO_RUN_ID, sweep_root, "-m", "custody", "-k", "capsule").report is not None
    reports = pytester.path / "reports"  # where run_audits has the session write its real report
    roster = tmp_path / "roster.txt"
    roster.write_text(f"{DEMO_RUN_ID}\nc-planned\nc-trained\n")
    args = ["report-index", "--root", str(sweep_root), "--report-dir", str(reports), "--roster", str(roster)]
    assert main(args) == 1  # a sweep with cells that were never reported is not complete
    err = capsys.readouterr().err
    assert "c-planned: planned, but no report (the cell is planned)" in err
    assert "c-trained: planned, but no report (the cell is trained)" in err
    page = (reports / "index.html").read_text(encoding="utf-8")
    assert all(run_id in page for run_id in (DEMO_RUN_ID, "c-planned", "c-trained"))


def test_a_fifo_in_place_of_the_roster_is_one_line_not_a_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roster = tmp_path / "roster.txt"
    os.mkfifo(roster)  # a reader that opened it would wait forever for a writer
    assert main(["sweep", "status", "--root", str(tmp_path), "--roster", str(roster)]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "cannot read the roster" in line and str(roster) in line, line
