"""Verdict semantics (audits.md): how an outcome settles, what --strict escalates, when custody holds.

Only modules inside audits/ are audits, so the verdicts no real audit produces yet (a disclosure, a
declared choice, a crash) are settled here through ``settle`` and ``status_of`` on real pytest reports;
--strict on real not-run audits goes through the harness as users run it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.fixtures.verdicts import PROPERTY, AuditRecorder, settle, status_of
from runaudit.reports.document import custody_ok
from runaudit.run import Run, freeze

NODE = "audits/test_history.py::test_loss_bound"


def new_record(gate_class: str = "science") -> dict[str, Any]:
    return {
        "audit": "history.loss_bound",
        "gate_class": gate_class,
        "subject": "",
        "verdict": None,
        "message": "",
        "evidence": {},
        "affects": [],
    }


def declaring_run(*topics: str) -> Run:
    declarations = [{"topic": topic, "choice": "single", "note": "one seed by design"} for topic in topics]
    return Run(
        path=Path("/runs/r1"),
        root=Path("/runs"),
        origin="runs",
        root_source="--root",
        declared=freeze({"run_id": "r1", "declarations": declarations}),
        problem=None,
    )


def settled(
    record: dict[str, Any], body: Callable[[], Any], *, when: str = "call", strict: bool = False
) -> pytest.TestReport:
    """Run ``body`` as one phase of an audit, build pytest's report for it, and settle the verdict."""
    call = pytest.CallInfo.from_call(body, when=when)
    if call.excinfo is None:
        outcome, longrepr = "passed", None
    elif isinstance(call.excinfo.value, pytest.skip.Exception):
        outcome, longrepr = "skipped", (NODE, 1, f"Skipped: {call.excinfo.value.msg}")
    else:
        outcome, longrepr = "failed", call.excinfo.exconly()
    report = pytest.TestReport(
        NODE, (NODE, 1, "test_loss_bound"), {}, outcome, longrepr, when, user_properties=[(PROPERTY, record)]
    )
    settle(record, report, call, strict=strict)
    return report


def disclose(recorder: AuditRecorder) -> Callable[[], None]:
    return lambda: recorder.disclose(
        "one seed: no variance claim", affects=["test/main:accuracy"], topic="seeds"
    )


def test_a_disclosure_passes_with_its_own_status_word() -> None:
    record = new_record()
    report = settled(record, disclose(AuditRecorder(record, declaring_run())))
    assert report.passed and record["verdict"] == "disclosed"
    assert record["affects"] == ["test/main:accuracy"]
    assert status_of(report) == ("disclosed", "D", ("DISCLOSED", {"yellow": True}))


def test_strict_turns_a_disclosure_into_a_failure() -> None:
    record = new_record()
    report = settled(record, disclose(AuditRecorder(record, declaring_run())), strict=True)
    assert report.failed and record["verdict"] == "disclosed" and record["strict"] is True
    assert str(report.longrepr) == "--strict: disclosed: one seed: no variance claim"


def test_strict_leaves_a_declared_choice_alone() -> None:
    record = new_record()
    report = settled(record, disclose(AuditRecorder(record, declaring_run("seeds"))), strict=True)
    assert report.passed and record["verdict"] == "disclosed"
    assert record["declared"] == {"topic": "seeds", "choice": "single", "note": "one seed by design"}
    assert "strict" not in record


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_not_run_is_a_skip_that_strict_fails(strict: bool) -> None:
    record = new_record()
    report = settled(
        record, lambda: AuditRecorder(record, None).not_run("train.csv has no grad_norm"), strict=strict
    )
    assert record["verdict"] == "not_run" and record["message"] == "train.csv has no grad_norm"
    assert report.failed is strict
    assert status_of(report) == (None if strict else ("not run", "n", ("NOT RUN", {"yellow": True})))


def test_not_applicable_is_never_escalated() -> None:
    record = new_record()
    report = settled(record, lambda: AuditRecorder(record, None).not_applicable("task is rl"), strict=True)
    assert report.skipped and record["verdict"] == "not_applicable"


def test_a_plain_skip_is_not_run_never_passed() -> None:
    record = new_record()
    report = settled(record, lambda: pytest.skip("no sibling runs"))
    assert report.skipped and record["verdict"] == "not_run" and record["message"] == "no sibling runs"


@pytest.mark.parametrize(
    "violation",
    [lambda: pytest.fail("run r1: loss went negative", pytrace=False), lambda: _assert_false()],
    ids=["audit.fail", "assert"],
)
def test_a_violation_is_failed(violation: Callable[[], None]) -> None:
    record = new_record("custody")
    report = settled(record, violation)
    assert report.failed and record["verdict"] == "failed"
    assert status_of(report) is None  # pytest's own FAILED


def _assert_false() -> None:
    assert 1 + 1 == 3, "arithmetic"


def test_a_crash_inside_an_audit_is_error_not_failed() -> None:
    record = new_record("custody")
    report = settled(record, lambda: 1 / 0)
    assert report.failed and record["verdict"] == "error"
    assert record["message"] == "ZeroDivisionError: division by zero"
    assert status_of(report) == ("error", "E", ("ERROR", {"red": True}))


def test_a_fixture_crash_in_setup_is_error() -> None:
    record = new_record("custody")
    settled(record, lambda: {}["capsule"], when="setup")
    assert record["verdict"] == "error" and record["message"].startswith("KeyError")


def test_a_teardown_crash_turns_a_pass_into_error() -> None:
    record = new_record("custody")
    settled(record, lambda: None)
    assert record["verdict"] == "passed"
    settled(record, lambda: 1 / 0, when="teardown")
    assert record["verdict"] == "error"


@pytest.mark.parametrize(
    ("verdicts", "holds"),
    [
        ([], False),
        ([("science", "passed")], False),
        ([("custody", "passed"), ("custody", "not_applicable")], True),
        ([("custody", "passed"), ("custody", "not_run")], False),
        ([("custody", "passed"), ("custody", "error")], False),
        ([("custody", "passed"), ("science", "disclosed")], True),
    ],
    ids=[
        "nothing-ran",
        "science-only",
        "custody-held",
        "custody-not-run",
        "custody-error",
        "with-disclosure",
    ],
)
def test_custody_holds_only_when_custody_audits_ran_and_held(
    verdicts: list[tuple[str, str]], holds: bool
) -> None:
    records = [
        {"audit": f"{gate}.check{index}", "subject": "", "gate_class": gate, "verdict": verdict}
        for index, (gate, verdict) in enumerate(verdicts)
    ]
    doc = {"verdicts": records, "custody_gate": {"expected": {}, "session": "completed"}}
    assert custody_ok(doc) is holds


def test_strict_fails_real_not_run_audits(run_audits, project: Path) -> None:
    shutil.copytree(project / "active" / DEMO_RUN_ID, project / "active" / "live-run")
    lenient = run_audits("live-run", project, "-m", "custody", "-k", "capsule")
    strict = run_audits("live-run", project, "-m", "custody", "-k", "capsule", "--strict")
    assert lenient.result.ret == 0 and strict.result.ret == 1
    # --strict changes the outcome, not the verdict: the report still says what happened.
    assert strict.verdicts("not_run") == lenient.verdicts("not_run") != set()
    assert strict.report["strict"] is True
    strict.result.stdout.fnmatch_lines(["*--strict: not_run: run not closed*"])
