"""The versioned JSON report (``runaudit.report/1``) built from the settled verdict records."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import shlex
import socket
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import runaudit
from runaudit.fixtures.run import Run
from runaudit.fixtures.verdicts import Verdict
from runaudit.reports import facts
from runaudit.reports.receipt import binding_receipt

SCHEMA_VERSION = "runaudit.report/1"
CUSTODY_OK = frozenset({Verdict.PASSED, Verdict.NOT_APPLICABLE})
INDEX_STEM = "index"  # <report-dir>/index.html is the sweep index (reports/index.py)
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


def report_stem(run_id: str) -> str:
    """A file name for the run's report that cannot escape the report folder nor be the sweep index."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", run_id).lstrip(".") or "run"
    return f"{stem}_run" if stem.casefold() == INDEX_STEM else stem


def environment() -> dict[str, Any]:
    versions = {}
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


def custody_ok(verdicts: Iterable[Mapping[str, Any]]) -> bool:
    """True only when custody audits ran and every one held: a gate that checked nothing fails."""
    custody = [item["verdict"] for item in verdicts if item["gate_class"] == "custody"]
    return bool(custody) and all(verdict in CUSTODY_OK for verdict in custody)


def teardown(doc: Mapping[str, Any]) -> dict[str, str]:
    """The answer to "safe to tear the box down?": yes only on held custody audits and a current receipt."""
    if doc["origin"] == "active":
        return {
            "answer": "no",
            "reason": f"{doc['run_id']} is live in active/: close it, pull it and verify it first",
        }
    custody = [item for item in doc["verdicts"] if item["gate_class"] == "custody"]
    if not custody:
        return {"answer": "no", "reason": "no custody audit ran (pytest --run=<id> -m custody)"}
    broken = sorted({item["audit"] for item in custody if item["verdict"] not in CUSTODY_OK})
    if broken:
        shown = ", ".join(broken[:5]) + (f", ... ({len(broken)} in all)" if len(broken) > 5 else "")
        return {"answer": "no", "reason": f"{len(broken)} custody audit(s) did not hold: {shown}"}
    receipt = doc.get("receipt")
    if receipt is None:
        return {
            "answer": "not yet",
            "reason": "every custody audit held, but no pull receipt binds this run (pull and verify it first)",
        }
    if not receipt["current"]:
        return {"answer": "not yet", "reason": f"receipt {receipt['pull_id']}: {receipt['problem']}"}
    return {
        "answer": "yes",
        "reason": f"every custody audit held and receipt {receipt['pull_id']} binds the current manifest",
    }


def derive(doc: dict[str, Any]) -> dict[str, Any]:
    """Set what follows from the verdicts (summary, custody_ok, teardown): at build, and after a merge."""
    counts = Counter(item["verdict"] for item in doc["verdicts"])
    doc["summary"] = {verdict.value: counts.get(verdict.value, 0) for verdict in Verdict}
    doc["custody_ok"] = custody_ok(doc["verdicts"])
    doc["teardown"] = teardown(doc)
    return doc


def reproduce_line(invocation_dir: Path, args: Sequence[str]) -> str:
    """The shell line that re-runs these audits exactly, from where they were run."""
    return f"cd {shlex.quote(str(invocation_dir))} && python -m pytest {shlex.join(args)}".rstrip()


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
) -> dict[str, Any]:
    headlines, headline_problems = facts.headline_metrics(run)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "root": str(run.root),
        "run_path": str(run.path),
        "origin": run.origin,
        "started_utc": started_utc,
        "harness_version": runaudit.__version__,
        "command": ["pytest", *args],
        "invocation_dir": str(invocation_dir),
        "reproduce": reproduce_line(invocation_dir, args),
        "strict": strict,
        "environment": environment(),
        "run_context": facts.run_context(run),
        "verdicts": sorted(map(_verdict, records), key=lambda item: (item["audit"], item["subject"])),
        "receipt": binding_receipt(run),
        "tests": facts.declared_tests(run),
        "headlines": headlines,
        "headline_problems": headline_problems,
    }
    return derive(doc)
