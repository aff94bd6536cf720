"""The versioned JSON report (``runaudit.report/1``) built from the settled verdict records."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import socket
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from runaudit.fixtures.run import Run
from runaudit.fixtures.verdicts import Verdict

import runaudit

SCHEMA_VERSION = "runaudit.report/1"
CUSTODY_OK = frozenset({Verdict.PASSED, Verdict.NOT_APPLICABLE})
PACKAGES = ("pytest", "pytest-xdist", "torch", "numpy", "pyarrow", "scipy", "jsonschema")


def report_stem(run_id: str) -> str:
    """A file name for the run's report that cannot escape the report folder."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", run_id).lstrip(".")
    return stem or "run"


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


def build(
    run: Run,
    records: Iterable[Mapping[str, Any]],
    *,
    started_utc: str,
    command: list[str],
    strict: bool,
) -> dict[str, Any]:
    verdicts = sorted(
        (
            {
                "audit": record["audit"],
                "gate_class": record["gate_class"],
                "subject": record["subject"],
                "verdict": record["verdict"],
                "message": record["message"],
                "evidence": record["evidence"],
                "affects": record["affects"],
                **({"declared": record["declared"]} if "declared" in record else {}),
                "where": record.get("where", "local"),
            }
            for record in records
        ),
        key=lambda item: (item["audit"], item["subject"]),
    )
    counts = Counter(item["verdict"] for item in verdicts)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "root": str(run.root),
        "run_path": str(run.path),
        "origin": run.origin,
        "started_utc": started_utc,
        "harness_version": runaudit.__version__,
        "command": command,
        "strict": strict,
        "environment": environment(),
        "verdicts": verdicts,
        "summary": {verdict.value: counts.get(verdict.value, 0) for verdict in Verdict},
        "custody_ok": custody_ok(verdicts),
    }
