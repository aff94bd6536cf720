"""``runaudit report-index``: the sweep matrix, fail-closed on unusable reports, one line on user mistakes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from report_records import HOSTILE, build, demo_run, record

from runaudit.cli import main as runaudit_main
from runaudit.reports import index


def write_reports(folder: Path, project: Path, runs: dict[str, list[dict[str, Any]]]) -> None:
    for run_id, records in runs.items():
        doc = build(demo_run(project), records)
        if run_id != doc["run_id"]:  # renamed: the demo's receipt covers no run of that name
            doc["run_id"] = run_id
            doc["teardown"] = {"answer": "not yet", "reason": f"no pull receipt binds run {run_id}"}
        (folder / f"{run_id}.json").write_text(json.dumps(doc))


def cells(page: str, run_id: str) -> list[str]:
    """The verdict marks of one row of the written index, in column order."""
    row = next(line for line in page.splitlines() if f">{run_id}<" in line)
    return re.findall(r'<td class="c k\d"[^>]*>([^<]*)</td>', row)


def test_the_index_holds_the_worst_verdict_per_run_and_audit(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = record("capsule.ids", "passed", gate_class="custody")
    write_reports(
        tmp_path,
        project,
        {
            "run-a": [ids, record("leakage.group_overlap", "passed")],
            "run-b": [
                ids,
                record("leakage.group_overlap", "passed", subject="one"),
                record("leakage.group_overlap", "disclosed", HOSTILE, subject="two", affects=["run:data"]),
            ],
            "run-c": [record("capsule.ids", "failed", "bad id", gate_class="custody")],
        },
    )
    assert runaudit_main(["report-index", "--report-dir", str(tmp_path), "--root", str(project)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"runaudit: wrote {tmp_path / 'index.html'} (3 runs × 2 audits)"
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert cells(page, "run-a") == ["✓", "✓"]
    assert cells(page, "run-b") == ["✓", "D"]  # the worst subject decides the cell
    assert cells(page, "run-c") == ["✗", ""]  # never run is an empty cell, not a pass
    assert HOSTILE not in page and "&lt;script&gt;" in page  # the message rides in the cell's title, escaped
    model = index.sweep(tmp_path)
    assert [column.audit for column in model["columns"]] == ["capsule.ids", "leakage.group_overlap"]
    assert [row.tallies for row in model["rows"]] == [(0, 0, 0), (0, 1, 0), (1, 0, 0)]


def test_an_unusable_report_is_listed_with_its_reason_and_fails_the_verb(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_reports(tmp_path, project, {"good": [record("capsule.ids", "passed", gate_class="custody")]})
    (tmp_path / "torn.json").write_text('{"schema_version": "runaudit.report/1", ')
    (tmp_path / "alien.json").write_text(json.dumps({"schema_version": "someone-else/9"}))
    assert runaudit_main(["report-index", "--report-dir", str(tmp_path), "--root", str(project)]) == 1
    captured = capsys.readouterr()
    assert "(1 runs × 1 audits)" in captured.out
    problems = captured.err.splitlines()
    assert len(problems) == 2 and all(line.startswith("runaudit report-index: ") for line in problems)
    assert (
        "torn.json: not valid JSON" in captured.err
        and "alien.json: not a runaudit.report/1 document" in captured.err
    )
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "torn.json" in page and "alien.json" in page


@pytest.mark.parametrize("layout", ["no folder", "empty folder"])
def test_nothing_to_index_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    if layout == "empty folder":
        (tmp_path / "reports").mkdir()
    assert runaudit_main(["report-index", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pytest --run=<id> first" in err
    assert "Traceback" not in err


def test_a_yes_whose_receipt_no_longer_holds_is_taken_back(project: Path, tmp_path: Path) -> None:
    """A report's answer is as of its session: the copy changed since, and the index kept its YES where
    ``runaudit down`` refuses."""
    write_reports(tmp_path, project, {"demo": [record("capsule.ids", "passed", gate_class="custody")]})
    (row,) = index.sweep(tmp_path, root=project)["rows"]
    assert (row.teardown, row.problem) == ("yes", None)
    best = project / "export" / "demo" / "best.pth"
    data = bytearray(best.read_bytes())
    data[len(data) // 2] ^= 0xFF
    best.write_bytes(bytes(data))
    (row,) = index.sweep(tmp_path, root=project)["rows"]
    assert row.teardown == "not yet" and row.problem is not None
    assert row.problem.startswith("its YES no longer holds: run demo: ") and "best.pth" in row.problem
