"""Everything one run's page shows, gathered from the report document and the capsule it describes.

The capsule is found where the document says (``run_path``, ``root``). A document whose capsule is not
on this machine (verdicts merged from a box) still renders: its curves and thumbnails say they are absent.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from runaudit.reports import claims, coverage, figures, findings, visuals
from runaudit.resolve import GROUP

FOLD = 8  # an audit whose subjects all passed shows as one row once it has more subjects than this


@dataclass(frozen=True)
class Folded:
    """Many passed subjects of one audit (e.g. one ``manifest.sha256`` per file) as one row."""

    audit: str
    gate_class: str
    subjects: tuple[str, ...]
    where: str


def verdict_rows(verdicts: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any] | Folded]:
    """Every verdict in gate order, with long runs of passed subjects folded; anything else row by row."""
    rows: list[Mapping[str, Any] | Folded] = []
    for audit, group in itertools.groupby(
        sorted(verdicts, key=findings.gate_rank), key=lambda item: item["audit"]
    ):
        items = list(group)
        if len(items) > FOLD and all(item["verdict"] == "passed" for item in items):
            where = ", ".join(sorted({item["where"] for item in items}))
            rows.append(
                Folded(audit, items[0]["gate_class"], tuple(item["subject"] for item in items), where)
            )
        else:
            rows.extend(items)
    return rows


def _figure(figure: figures.Figure) -> figures.Figure:
    """Mark matplotlib's SVG as markup: it escaped every text node it wrote (see reports/plots.py)."""
    if figure.svg is None:
        return figure
    return figures.Figure(figure.key, figure.title, figure.status, Markup(figure.svg), figure.notes)


def context(doc: Mapping[str, Any]) -> dict[str, Any]:
    run_path, root = Path(doc["run_path"]), Path(doc["root"])
    # A comparison group's page (--run=<group>) has no capsule of its own to draw curves or images from.
    capsule = doc["origin"] != GROUP
    groups = findings.disclosure_groups(doc)
    custody = Counter(item["verdict"] for item in doc["verdicts"] if item["gate_class"] == "custody")
    return {
        "doc": doc,
        "custody_counts": sorted(custody.items()),
        "claims": claims.claims(doc),
        "failures": findings.failures(doc),
        "groups": groups,
        "group_anchors": {group.conclusion: group.anchor for group in groups},
        "figures": [_figure(figure) for figure in figures.figures(doc, run_path)] if capsule else [],
        "matrices": coverage.matrices(doc),
        "strips": visuals.strips(doc, run_path, root) if capsule else [],
        "verdict_rows": verdict_rows(doc["verdicts"]),
        "where": sorted(Counter(item["where"] for item in doc["verdicts"]).items()),
    }
