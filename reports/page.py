"""Everything one run's page shows, gathered from the report document and the capsule it describes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup
from runaudit.fixtures.run import Run
from runaudit.reports import claims, coverage, figures, findings, visuals


def _figure(figure: figures.Figure) -> figures.Figure:
    """Mark matplotlib's SVG as markup: it escaped every text node it wrote (see reports/plots.py)."""
    if figure.svg is None:
        return figure
    return figures.Figure(figure.key, figure.title, figure.status, Markup(figure.svg), figure.notes)


def context(doc: Mapping[str, Any], run: Run) -> dict[str, Any]:
    groups = findings.disclosure_groups(doc)
    custody = Counter(item["verdict"] for item in doc["verdicts"] if item["gate_class"] == "custody")
    return {
        "doc": doc,
        "custody_counts": sorted(custody.items()),
        "claims": claims.claims(doc),
        "failures": findings.failures(doc),
        "groups": groups,
        "group_anchors": {group.conclusion: group.anchor for group in groups},
        "figures": [_figure(figure) for figure in figures.figures(doc, run.path)],
        "matrices": coverage.matrices(doc),
        "strips": visuals.strips(doc, run.path, run.root),
        "verdicts": sorted(doc["verdicts"], key=findings.gate_rank),
        "where": sorted(Counter(item["where"] for item in doc["verdicts"]).items()),
    }
