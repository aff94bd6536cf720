"""The visual-coverage matrix (condition × role) of each declared test, from ``capsule.vis_coverage``.

The axes come from run.json; the counts from the audit's evidence (``missing``/``extra`` list
``<condition>/<role>/<sample>.png`` and are capped at 100 entries, so a capped list reads "at least").
Without that audit's verdict a test's matrix says "not audited" rather than showing full cells.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

AUDIT = "capsule.vis_coverage"
LISTED = 100  # the audit lists at most this many missing / extra paths


@dataclass(frozen=True)
class Cell:
    text: str
    complete: bool


@dataclass(frozen=True)
class Matrix:
    test_id: str
    conditions: tuple[str, ...]
    roles: tuple[str, ...]
    status: str
    cells: Mapping[tuple[str, str], Cell] | None  # None: not audited, nothing to draw

    def cell(self, condition: str, role: str) -> Cell | None:
        return None if self.cells is None else self.cells.get((condition, role))


def _per_cell(paths: Any) -> tuple[Counter[tuple[str, str]], bool]:
    listed = [path for path in paths if isinstance(path, str)] if isinstance(paths, list) else []
    counts: Counter[tuple[str, str]] = Counter()
    for path in listed:
        parts = path.split("/")
        if len(parts) == 3:
            counts[(parts[0], parts[1])] += 1
    return counts, len(listed) >= LISTED


def _cells(test: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[tuple[str, str], Cell]:
    conditions, roles = test["conditions"], test["roles"]
    k = test["k"]
    expected = evidence.get("expected")
    if k is None and isinstance(expected, int) and conditions and roles:
        k = expected // (len(conditions) * len(roles))
    missing, capped_missing = _per_cell(evidence.get("missing"))
    extra, capped_extra = _per_cell(evidence.get("extra"))
    cells = {}
    for condition in conditions:
        for role in roles:
            gone, more = missing[(condition, role)], extra[(condition, role)]
            found = f"{k - gone}/{k}" if k is not None else f"{gone} missing"
            notes = []
            if gone:
                notes.append(f"{'≥' if capped_missing else ''}{gone} missing")
            if more:
                notes.append(f"{'≥' if capped_extra else ''}{more} extra")
            text = found + (f" ({', '.join(notes)})" if notes else "")
            cells[(condition, role)] = Cell(text, not gone and not more and not capped_missing)
    return cells


def matrices(doc: Mapping[str, Any]) -> list[Matrix]:
    verdicts = {item["subject"]: item for item in doc["verdicts"] if item["audit"] == AUDIT}
    found = []
    for test in doc["tests"]:
        axes = (test["test_id"], tuple(test["conditions"]), tuple(test["roles"]))
        verdict = verdicts.get(test["test_id"])
        if verdict is None:
            found.append(Matrix(*axes, f"not audited: no {AUDIT} verdict for this test", None))
        elif verdict["verdict"] in ("not_run", "error"):
            found.append(Matrix(*axes, f"{verdict['verdict'].replace('_', ' ')}: {verdict['message']}", None))
        else:
            status = f"{AUDIT} {verdict['verdict']}" + (
                f": {verdict['message']}" if verdict["message"] else ""
            )
            found.append(Matrix(*axes, status, _cells(test, verdict["evidence"])))
    return found
