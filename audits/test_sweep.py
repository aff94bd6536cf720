"""Sweep gate: every sealed run of a comparison group passes its own gate (``pytest --run=<group>``).

Each member is audited by a ``pytest --run=<member>`` session of its own, which writes that run's report
and answers teardown for it; this gate holds one verdict per member, so a sweep is audited by one command
and ``-n auto`` spreads its members over pytest-xdist's workers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from runaudit.fixtures.sweep import MemberSession
from runaudit.fixtures.verdicts import AuditRecorder

pytestmark = pytest.mark.sweep
SHOWN = 3  # failing audits named in the member's verdict; its own report lists every one


def test_member(member_session: MemberSession, audit: AuditRecorder) -> None:
    """The member's own session (its whole gate but smoke and preflight) wrote its report, in which no
    verdict of that session failed, errored or was escalated, and something was checked; what it did not
    run and what it disclosed ride here too, under the member's run id. No other capsule folder declares
    the member's run id (a copy would be neither audited nor counted). A capsule folder whose run.json does
    not read is a case of its own and fails: it may be a member no one audited. A group of more members
    than ``--runaudit-max-members`` (256 unless told) is one case, failed, and no member is audited."""
    session = member_session
    if session.refused is not None:
        audit.fail(session.refused)
    audit.evidence(command=session.command, exit_code=session.exit_code, report=str(session.report_path))
    if session.copies:
        audit.evidence(copies=[str(path) for path in session.copies])
        audit.fail(
            f"{session.run_id}: {len(session.copies)} other folder(s) declare this run id "
            f"({', '.join(map(str, session.copies))}); only the one audited here counts in the group: "
            "give each copy a run id of its own in its run.json, or remove it"
        )
    if session.report is None:
        said = " | ".join(session.output_tail) or "no output"
        audit.fail(f"{session.run_id}: {session.command} wrote no report (exit {session.exit_code}): {said}")
    verdicts = _this_session(session.report)
    if verdicts is None:
        audit.fail(f"{session.run_id}: {session.report_path} holds no list of verdicts")
    counts = Counter(str(item.get("verdict")) for item in verdicts)
    teardown = session.report.get("teardown")
    audit.evidence(
        verdicts=dict(counts), teardown=teardown.get("answer") if isinstance(teardown, dict) else None
    )
    page = session.report_path.with_suffix(".html")
    shown_at = page if page.is_file() else session.report_path
    broken = [
        item for item in verdicts if item.get("verdict") in ("failed", "error") or item.get("escalated")
    ]
    if broken:
        shown = "; ".join(_line(item) for item in broken[:SHOWN])
        more = f" and {len(broken) - SHOWN} more" if len(broken) > SHOWN else ""
        audit.fail(
            f"{session.run_id}: {len(broken)} of {len(verdicts)} audit(s) did not hold: {shown}{more} "
            f"(see {shown_at})"
        )
    if session.exit_code != 0:
        said = " | ".join(session.output_tail) or "no output"
        audit.fail(f"{session.run_id}: {session.command} ended with exit {session.exit_code}: {said}")
    if not counts["passed"]:
        audit.fail(f"{session.run_id}: its session passed no audit ({dict(counts)}); see {shown_at}")
    held = f"{session.run_id}: {counts['passed']} audit(s) passed, none failed; report {shown_at}"
    # A declared choice stays the member's own declared line (never escalated there): it is not repeated.
    owed = [
        item
        for item in verdicts
        if item.get("verdict") in ("disclosed", "not_run") and not item.get("declared")
    ]
    if not owed:
        audit.note(held)
        return
    named = [item["affects"] for item in owed if isinstance(item.get("affects"), list)]
    affects = {f"{session.run_id}: {name}" for names in named for name in names}
    shown = "; ".join(_line(item) for item in owed[:SHOWN])
    more = f" and {len(owed) - SHOWN} more" if len(owed) > SHOWN else ""
    audit.disclose(
        f"{held}; {len(owed)} disclosed or not run: {shown}{more}", affects=affects or {session.run_id}
    )


def _this_session(report: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The verdicts the member's session itself reached here: a report keeps earlier sessions' verdicts
    for audits it did not run, and those a box ran (``where``), which this gate does not judge again."""
    verdicts = report.get("verdicts")
    if not isinstance(verdicts, list):
        return None
    session = report.get("session")
    return [
        item
        for item in verdicts
        if isinstance(item, dict) and item.get("session") == session and item.get("where", "local") == "local"
    ]


def _line(item: dict[str, Any]) -> str:
    subject = f"[{item['subject']}]" if item.get("subject") else ""
    return f"{item.get('audit')}{subject} {item.get('verdict')}: {item.get('message')}"
