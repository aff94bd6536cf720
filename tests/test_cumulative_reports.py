"""Reports are cumulative (issue 16): every verdict is kept with where and when it ran, a newer verdict of
the same audit, subject and place replacing the older; yet only this session's own custody verdicts can
answer "safe to tear down?".
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import report_records

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.reports.schema import report_problems
from runaudit.runners.remote_audit import write_merged


def _report(outcome) -> dict:
    assert outcome.report is not None, outcome.result.stdout.str()[-3000:]
    assert report_problems(outcome.report) == []
    return outcome.report


def _from_box(report: dict, audits: set[str]) -> dict:
    """A box's report: the given audits of ``report``, as ``runaudit audit`` fetches it from the box."""
    remote = copy.deepcopy(report)
    remote["verdicts"] = [item for item in remote["verdicts"] if item["audit"] in audits]
    return remote


def test_a_local_session_keeps_the_boxes_verdicts(run_audits, demo_project: Path, pytester) -> None:
    science = _report(run_audits(DEMO_RUN_ID, demo_project, "-m", "science"))
    reports = pytester.path / "reports"
    write_merged(reports, DEMO_RUN_ID, _from_box(science, {"history.finite"}), "box-a")
    custody = _report(run_audits(DEMO_RUN_ID, demo_project, "-m", "custody"))
    places = {(item["audit"], item["where"]) for item in custody["verdicts"]}
    assert ("history.finite", "box-a") in places  # the box's verdict survived the local rewrite
    assert ("history.finite", "local") in places  # and so did the earlier local science session
    assert ("capsule.ids", "local") in places
    assert custody["teardown"]["answer"] == "yes", custody["teardown"]


def test_a_second_box_audit_keeps_that_boxes_earlier_verdicts(
    run_audits, demo_project: Path, pytester
) -> None:
    science = _report(run_audits(DEMO_RUN_ID, demo_project, "-m", "science"))
    reports = pytester.path / "reports"
    (reports / f"{DEMO_RUN_ID}.json").unlink()
    first = _from_box(science, {"history.finite", "history.loss_bound"})
    write_merged(reports, DEMO_RUN_ID, first, "box-a")
    again = _from_box(science, {"history.finite"})
    for item in again["verdicts"]:
        item["message"] = "re-run on the box"
    merged = json.loads(write_merged(reports, DEMO_RUN_ID, again, "box-a").read_text())
    found = {item["audit"]: item["message"] for item in merged["verdicts"] if item["where"] == "box-a"}
    assert found["history.finite"] == "re-run on the box"  # replaced by the newer verdict
    assert "history.loss_bound" in found  # kept: the second audit did not run it


def test_a_subset_after_a_whole_gate_is_never_a_yes(run_audits, demo_project: Path) -> None:
    whole = _report(run_audits(DEMO_RUN_ID, demo_project, "-m", "custody"))
    assert whole["teardown"]["answer"] == "yes"
    subset = run_audits(DEMO_RUN_ID, demo_project, "-m", "custody", "-k", "capsule")
    report = _report(subset)
    assert report["teardown"]["answer"] == "no" and report["teardown"]["reason"].startswith("incomplete")
    assert subset.result.ret == 1
    earlier = [item for item in report["verdicts"] if item["audit"].startswith("manifest.")]
    assert earlier and {item["session"] for item in earlier} == {whole["session"]} != {report["session"]}
    assert {item["when"] for item in earlier} == {whole["started_utc"]}  # kept, dated


def test_a_session_that_audited_nothing_rewrites_the_report_never_leaving_a_yes(
    run_audits, demo_project: Path
) -> None:
    """A ``-k`` that names no audit, or an ``-o python_files`` that collects none, wrote no report: the
    earlier session's "yes" stayed in the file that CI publishes."""
    whole = _report(run_audits(DEMO_RUN_ID, demo_project, "-m", "custody"))
    assert whole["teardown"]["answer"] == "yes"
    for nothing in (("-k", "no_audit_is_named_so"), ("-o", "python_files=no_module_*.py")):
        empty = run_audits(DEMO_RUN_ID, demo_project, "-m", "custody", *nothing)
        assert empty.result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
        report = _report(empty)
        assert report["session"] != whole["session"]
        assert report["teardown"]["answer"] == "no" and report["custody_ok"] is False
        kept = {item["session"] for item in report["verdicts"]}
        assert kept == {whole["session"]}  # every verdict shown is the earlier session's, dated


def test_what_an_earlier_report_carries_forward_is_validated_and_a_damaged_one_is_never_merged(
    run_audits, demo_project: Path, pytester
) -> None:
    """The earlier report is validated with only the verdicts the new one keeps: one damaged verdict that
    would be kept discards the whole file; a damaged one that the new session replaces costs nothing."""
    from runaudit.reports.document import earlier_verdicts

    arrived = _report(run_audits(DEMO_RUN_ID, demo_project, "-m", "custody"))
    path = pytester.path / "reports" / f"{DEMO_RUN_ID}.json"
    retired = {**arrived["verdicts"][0], "subject": "a-file-this-session-no-longer-has.bin"}

    def earlier_with(kept: dict, replaced: dict) -> list:
        found = copy.deepcopy(arrived)
        found["verdicts"] = [replaced, kept, *arrived["verdicts"][1:]]
        path.write_text(json.dumps(found))
        return earlier_verdicts(path, arrived)

    assert earlier_with(retired, arrived["verdicts"][0]) == [retired]
    assert earlier_with(retired, {**arrived["verdicts"][0], "verdict": "maybe"}) == [retired]
    assert earlier_with({**retired, "verdict": "maybe"}, arrived["verdicts"][0]) == []
    assert earlier_with(retired, ["not", "a", "verdict"]) == []  # kept as it is, and invalid


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: text[: len(text) // 2], id="cut-in-half"),
        pytest.param(lambda text: text.replace('"verdicts": [', '"verdicts": [NaN, ', 1), id="nan"),
        pytest.param(lambda text: text.replace('"run_id": "demo"', '"run_id": "other"', 1), id="another-run"),
    ],
)
def test_a_box_audit_replaces_a_damaged_local_report_instead_of_crashing_on_it(
    damage, demo_project: Path, tmp_path: Path
) -> None:
    """``runaudit audit`` read the local report with a bare ``json.loads``: a cut-off file ended the verb
    in a traceback after the box had audited, and a foreign one was merged into."""
    records = report_records.science_records()
    box = report_records.build(report_records.demo_run(demo_project), records)
    reports = tmp_path / "reports"
    reports.mkdir()
    target = reports / f"{DEMO_RUN_ID}.json"
    target.write_text(damage(json.dumps(report_records.build(report_records.demo_run(demo_project), []))))
    merged = json.loads(write_merged(reports, DEMO_RUN_ID, box, "box-a").read_text())
    assert report_problems(merged) == [] and merged["run_id"] == DEMO_RUN_ID
    assert len(merged["verdicts"]) == len(records) and {item["where"] for item in merged["verdicts"]} == {
        "box-a"
    }


def test_a_box_audit_merged_later_asks_the_receipt_again(run_audits, project: Path, pytester) -> None:
    """``runaudit audit`` merged the box's verdicts into a report whose YES rested on a receipt, after
    ``best.pth`` was deleted here: the page and JSON it wrote still said yes, where ``down`` refused."""
    custody = _report(run_audits(DEMO_RUN_ID, project, "-m", "custody"))
    assert custody["teardown"]["answer"] == "yes", custody["teardown"]
    (project / "export" / DEMO_RUN_ID / "best.pth").unlink()
    reports = pytester.path / "reports"
    box = _from_box(custody, {"capsule.ids"})
    merged = json.loads(write_merged(reports, DEMO_RUN_ID, box, "box-a", project).read_text())
    assert report_problems(merged) == []
    assert merged["teardown"]["answer"] == "not yet" and "best.pth is gone" in merged["teardown"]["reason"]
