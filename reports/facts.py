"""What the report quotes from the run itself: its declared tests and the headline numbers it claims.

Read leniently, never trusted: a broken ``metrics.json`` is the capsule audits' business; here it only
yields a problem line, so the report still shows every verdict. It is read as a regular file within a cap
(:mod:`runaudit.safeio`): a FIFO in its place must not stall the report after every audit has run.
"""

from __future__ import annotations

import math
from typing import Any

from runaudit.ids import is_safe_id
from runaudit.manifest import load_json, nesting_problem
from runaudit.run import Run
from runaudit.safeio import read_regular
from runaudit.verdict import jsonable, printable

MAX_METRICS_BYTES = 16 * 1024 * 1024


def declared_tests(run: Run) -> list[dict[str, Any]]:
    """Each declared test's coverage axes (conditions × roles) and the size of its fixed selection."""
    tests = []
    for test in run.tests:
        selection = run.selections.get(test.selection_id or "", {})
        k = selection.get("k")
        tests.append(
            {
                "test_id": test.test_id,
                "conditions": list(test.conditions),
                "roles": list(test.roles),
                "selection_id": test.selection_id,
                "k": k if isinstance(k, int) and not isinstance(k, bool) else None,
            }
        )
    return tests


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str:
    """A scalar quoted as text; a container is not quoted (its ``str`` could be any size)."""
    return "" if isinstance(value, (dict, list)) else printable(str(value))


def headline_metrics(run: Run) -> tuple[list[dict[str, Any]], list[str]]:
    """Every ``(test, metric, condition)`` value in the tests' metrics.json, and why any could not be read."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for test in run.tests:
        if not test.metrics_apply or not is_safe_id(test.test_id):
            continue
        rel = f"{test.folder}/metrics.json"
        path = run.path / rel
        try:
            document = load_json(read_regular(path, MAX_METRICS_BYTES))
        except (OSError, ValueError) as exc:  # UnsafeFile: a link, FIFO or device, or past the cap
            problems.append(f"{rel} could not be read ({type(exc).__name__}): its numbers are not shown")
            continue
        if too_deep := nesting_problem(document):  # walked below, and quoted: never past a sane depth
            problems.append(f"{rel} could not be read ({too_deep}): its numbers are not shown")
            continue
        listed = document.get("metrics") if isinstance(document, dict) else None
        for row in listed if isinstance(listed, list) else ():
            if not isinstance(row, dict) or not isinstance(row.get("metric"), str):
                continue
            precision = row.get("precision")
            rows.append(
                {
                    "test_id": test.test_id,
                    "metric": row["metric"],
                    "condition_id": _text(row.get("condition_id", "")),
                    "value": _number(row.get("value")),
                    "precision": precision if isinstance(precision, int) and 0 <= precision <= 12 else None,
                    "direction": row.get("direction") if isinstance(row.get("direction"), str) else None,
                }
            )
    return rows, problems


def run_context(run: Run) -> dict[str, Any]:
    """Where and from what the run was trained, as run.json declares it (shown beside the audit's own)."""
    context = {key: jsonable(run.get(key)) for key in ("source", "environment", "training", "seed")}
    return {key: value if isinstance(value, dict) else None for key, value in context.items()}
