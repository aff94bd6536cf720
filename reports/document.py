"""The versioned JSON report (``runaudit.report/1``) built from the settled verdict records."""

from __future__ import annotations

import importlib.metadata
import platform
import socket
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import runaudit
from runaudit.clock import attempt_id
from runaudit.reports import facts
from runaudit.reports.receipt import binding_receipt
from runaudit.resolve import GROUP
from runaudit.run import Run
from runaudit.verdict import EVIDENCE_DEPTH, Verdict, jsonable, shell_word

SCHEMA_VERSION = "runaudit.report/1"
# The report's own frame (document, verdicts, one verdict) around evidence already held to EVIDENCE_DEPTH.
REPORT_DEPTH = EVIDENCE_DEPTH + 8
SESSION_COMPLETED = "completed"
PACKAGES = (
    "pytest",
    "pytest-xdist",
    "torch",
    "numpy",
    "pyarrow",
    "scipy",
    "jsonschema",
    "jinja2",
    "matplotlib",
)


def environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "node": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "packages": versions,
    }


def _local_custody(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Custody verdicts reached here, by this document's own session.

    A box's own custody audits (merged by ``runaudit audit``) judged the box's bytes, not the local copy
    a teardown would leave behind; and a verdict an earlier local session left in the report judged the
    bytes as they were then: neither may complete a gate this session ran only in part.
    """
    session = doc.get("session")  # None in a report written before reports were cumulative
    return [
        item
        for item in doc["verdicts"]
        if item["gate_class"] == "custody"
        and item.get("where", "local") == "local"
        and item.get("session") == session
    ]


def earlier_verdicts(path: Path, doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The verdicts of the report already at ``path`` that ``doc`` does not replace, when that file is a
    readable report of the same run (same id and capsule path), else none: a damaged or foreign file
    there is replaced, never merged.

    What is carried forward is validated: the earlier report with only the verdicts kept, so that a
    cached re-audit of hundreds of files does not validate, verdict by verdict, what it has just replaced.
    """
    from runaudit.manifest import load_json
    from runaudit.reports.schema import report_problems
    from runaudit.safeio import JSON_CAP, read_regular

    try:
        found = load_json(read_regular(path, JSON_CAP))
    except (OSError, ValueError):
        return []
    if not isinstance(found, dict) or not isinstance(found.get("verdicts"), list):
        return []
    if (found.get("run_id"), found.get("run_path")) != (doc["run_id"], doc["run_path"]):
        return []
    replaced = {_place(item) for item in doc["verdicts"]}
    kept = [item for item in found["verdicts"] if not isinstance(item, dict) or _place(item) not in replaced]
    if report_problems({**found, "verdicts": kept}):
        return []
    return kept


def _place(item: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What a verdict is the verdict of: its audit, subject and place (``where``)."""
    return item.get("audit"), item.get("subject"), item.get("where", "local")


def merge_verdicts(
    earlier: Iterable[Mapping[str, Any]], arrived: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """A report's verdicts are cumulative: an arrived verdict replaces the earlier one of the same audit,
    subject and place (``where``); every other earlier verdict stays, with where and when it ran."""
    fresh = [dict(item) for item in arrived]
    replaced = {_place(item) for item in fresh}
    kept = [dict(item) for item in earlier if _place(item) not in replaced]
    return sorted([*kept, *fresh], key=_place)


def custody_gaps(doc: Mapping[str, Any]) -> list[str]:
    """Custody audits that did not reach a verdict on every subject the run gives them."""
    expected: Mapping[str, int] = (doc.get("custody_gate") or {}).get("expected", {})
    reached = Counter(
        audit for audit, _ in {(item["audit"], item["subject"]) for item in _local_custody(doc)}
    )
    return [
        f"{audit} ({reached.get(audit, 0)} of {count})"
        for audit, count in sorted(expected.items())
        if reached.get(audit, 0) < count
    ]


def custody_ok(doc: Mapping[str, Any]) -> bool:
    """True only when the whole custody gate ran to the end here and every verdict held.

    A gate that checked nothing fails; so does one that checked a subset (``-k``, ``--deselect``, explicit
    paths), or a session that ended early (Ctrl-C, ``-x``, an internal error, a crashed worker).
    """
    custody = _local_custody(doc)
    gate = doc.get("custody_gate") or {}
    complete = gate.get("session") == SESSION_COMPLETED and not custody_gaps(doc) and not gate.get("changed")
    return bool(custody) and complete and all(Verdict(item["verdict"]).holds for item in custody)


def _shown(items: list[str]) -> str:
    return ", ".join(items[:5]) + (f", ... ({len(items)} in all)" if len(items) > 5 else "")


def teardown(doc: Mapping[str, Any]) -> dict[str, str]:
    """The answer to "safe to tear the box down?": yes only on a complete, held custody gate and a current receipt."""
    if doc["origin"] == GROUP:
        return {
            "answer": "no",
            "reason": f"{doc['run_id']} is a comparison group, not a capsule: teardown is answered per run, "
            "in each member's own report (pytest --run=<run-id> -m custody)",
        }
    if doc["origin"] == "active":
        return {
            "answer": "no",
            "reason": f"{doc['run_id']} is live in active/: close it, pull it and verify it first",
        }
    custody = _local_custody(doc)
    if not custody:
        return {"answer": "no", "reason": "no custody audit ran here (pytest --run=<id> -m custody)"}
    broken = sorted({item["audit"] for item in custody if not Verdict(item["verdict"]).holds})
    if broken:
        return {"answer": "no", "reason": f"{len(broken)} custody audit(s) did not hold: {_shown(broken)}"}
    if changed := (doc.get("custody_gate") or {}).get("changed"):
        return {
            "answer": "no",
            "reason": f"{_shown(changed)} changed while the session audited the capsule: its verdicts may judge "
            "bytes its hashes never saw; audit it again once nothing writes to it",
        }
    session = (doc.get("custody_gate") or {}).get("session", "unknown")
    if session != SESSION_COMPLETED:
        return {
            "answer": "no",
            "reason": f"incomplete: the session did not complete ({session}); the verdicts that arrived prove nothing about the rest",
        }
    if gaps := custody_gaps(doc):
        return {
            "answer": "no",
            "reason": f"incomplete: {len(gaps)} custody audit(s) did not reach a verdict on every subject: "
            f"{_shown(gaps)}; run the whole gate (pytest --run=<id> -m custody)",
        }
    receipt = doc.get("receipt")
    if receipt is None:
        return {
            "answer": "not yet",
            "reason": "every custody audit held, but no pull receipt binds this run (pull and verify it first)",
        }
    if not receipt["current"]:
        return {"answer": "not yet", "reason": f"receipt {receipt['pull_id']}: {receipt['problem']}"}
    reason = f"every custody audit held and receipt {receipt['pull_id']} binds the current manifest"
    if receipt.get("holder") == "export":  # verify run where the capsule was produced: whole, but not home
        reason += (
            ", verified in place where it was produced (export/): runaudit down also needs a copy pulled into "
            "runs/ and verified there before a box that produced it goes"
        )
    return {"answer": "yes", "reason": reason}


def plain(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document as JSON that can always be written: every string valid UTF-8, no runaway nesting.

    Its strings quote run data (file names, ids, messages, paths): a name that was not UTF-8 is shown
    with escapes (``bad\\xff.txt``) rather than breaking ``json.dumps`` or the page after every audit ran.
    """
    written: dict[str, Any] = jsonable(doc, REPORT_DEPTH)
    return written


def derive(doc: dict[str, Any]) -> dict[str, Any]:
    """Set what follows from the verdicts (summary, custody_ok, teardown): at build, and after a merge."""
    counts = Counter(item["verdict"] for item in doc["verdicts"])
    doc["summary"] = {verdict.value: counts.get(verdict.value, 0) for verdict in Verdict}
    doc["custody_ok"] = custody_ok(doc)
    doc["teardown"] = teardown(doc)
    return doc


def reproduce_line(invocation_dir: Path, args: Sequence[str]) -> str:
    """The shell line that re-runs these audits exactly, from where they were run."""
    words = " ".join(shell_word(arg) for arg in args)
    return f"cd {shell_word(str(invocation_dir))} && python -m pytest {words}".rstrip()


def _verdict(record: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "audit": record["audit"],
        "gate_class": record["gate_class"],
        "subject": record["subject"],
        "verdict": record["verdict"],
        "message": record["message"],
        "evidence": record["evidence"],
        "affects": record["affects"],
        **({"declared": record["declared"]} if "declared" in record else {}),
        **({"escalated": True} if record.get("strict") else {}),
        "where": record.get("where", "local"),
    }


def build(
    run: Run,
    records: Iterable[Mapping[str, Any]],
    *,
    started_utc: str,
    args: Sequence[str],
    invocation_dir: Path,
    strict: bool,
    custody_gate: Mapping[str, Any],
) -> dict[str, Any]:
    headlines, headline_problems = facts.headline_metrics(run)
    session = attempt_id()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "root": str(run.root),
        "run_path": str(run.path),
        "origin": run.origin,
        "started_utc": started_utc,
        "session": session,
        "harness_version": runaudit.__version__,
        "command": ["pytest", *args],
        "invocation_dir": str(invocation_dir),
        "reproduce": reproduce_line(invocation_dir, args),
        "strict": strict,
        "environment": environment(),
        "run_context": facts.run_context(run),
        "verdicts": sorted(
            ({**_verdict(record), "when": started_utc, "session": session} for record in records),
            key=lambda item: (item["audit"], item["subject"]),
        ),
        "custody_gate": dict(custody_gate),
        "receipt": None if run.is_group else binding_receipt(run),
        "tests": facts.declared_tests(run),
        "headlines": headlines,
        "headline_problems": headline_problems,
    }
    return derive(plain(doc))
