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
    """The member's own session (its whole gate but smoke) wrote a report in which no audit failed or
    errored; its disclosures ride here too, under the member's run id."""
    session = member_session
    audit.evidence(command=session.command, exit_code=session.exit_code, report=str(session.report_path))
    if session.report is None:
        said = " | ".join(session.output_tail) or "no output"
        audit.fail(f"{session.run_id}: {session.command} wrote no report (exit {session.exit_code}): {said}")
    verdicts: list[dict[str, Any]] = [
        item for item in session.report.get("verdicts", []) if isinstance(item, dict)
    ]
    counts = Counter(str(item.get("verdict")) for item in verdicts)
    teardown = session.report.get("teardown")
    audit.evidence(
        verdicts=dict(counts), teardown=teardown.get("answer") if isinstance(teardown, dict) else None
    )
    page = session.report_path.with_suffix(".html")
    broken = [item for item in verdicts if item.get("verdict") in ("failed", "error")]
    if broken:
        shown = "; ".join(_line(item) for item in broken[:SHOWN])
        more = f" and {len(broken) - SHOWN} more" if len(broken) > SHOWN else ""
        audit.fail(
            f"{session.run_id}: {len(broken)} of {len(verdicts)} audit(s) did not hold: {shown}{more} (see {page})"
        )
    if session.exit_code != 0:
        said = " | ".join(session.output_tail) or "no output"
        audit.fail(f"{session.run_id}: {session.command} ended with exit {session.exit_code}: {said}")
    held = f"{session.run_id}: {counts['passed']} audit(s) passed, none failed; report {page}"
    disclosed = [item for item in verdicts if item.get("verdict") == "disclosed"]
    if not disclosed:
        audit.note(held)
        return
    affects = {f"{session.run_id}: {name}" for item in disclosed for name in item.get("affects", [])}
    shown = "; ".join(_line(item) for item in disclosed[:SHOWN])
    audit.disclose(f"{held}; {len(disclosed)} disclosure(s): {shown}", affects=affects or {session.run_id})


def _line(item: dict[str, Any]) -> str:
    subject = f"[{item['subject']}]" if item.get("subject") else ""
    return f"{item.get('audit')}{subject} {item.get('verdict')}: {item.get('message')}"
