"""Verdicts a reader must see, shaped for the page: failures first, then disclosures by what they affect.

A disclosure is shown under every conclusion its ``affects`` names, with its evidence numbers beside it
(Deepchecks' reviewers asked for exactly that: the verdict and why it follows, side by side). A not-run
audit is listed as a disclosure too, never hidden as a pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GATE_ORDER = ("custody", "science", "smoke", "preflight", "claims", "sweep")
EVIDENCE_ROWS = 24  # evidence lines shown per finding; the JSON twin keeps everything
LIST_ITEMS = 8
TEXT_CHARS = 200
NESTING = 3
NOT_RUN_GROUP = "(audits that did not run)"
UNNAMED_GROUP = "(no conclusion named)"


@dataclass(frozen=True)
class Finding:
    verdict: str
    audit: str
    subject: str
    message: str
    where: str
    declared: Mapping[str, str] | None
    escalated: bool
    evidence: tuple[tuple[str, str], ...]
    evidence_left_out: int

    @property
    def name(self) -> str:
        return f"{self.audit}[{self.subject}]" if self.subject else self.audit

    @property
    def label(self) -> str:
        """A short tag for a one-line summary: the declared choice, else the audit's own name."""
        if self.declared:
            return f"declared {self.declared['topic']}={self.declared['choice']}"
        return self.name + (" (not run)" if self.verdict == "not_run" else "")


@dataclass(frozen=True)
class Group:
    conclusion: str
    anchor: str
    findings: tuple[Finding, ...]


def anchor(conclusion: str) -> str:
    """A fragment id for a conclusion that is safe whatever the conclusion's text holds."""
    return "affects-" + hashlib.sha256(conclusion.encode("utf-8")).hexdigest()[:12]


def shown(value: Any) -> str:
    """One evidence value as short text: numbers at 6 significant digits, long lists and strings cut."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        items = ", ".join(shown(item) for item in value[:LIST_ITEMS])
        more = f", … ({len(value)} in all)" if len(value) > LIST_ITEMS else ""
        return f"[{items}{more}]"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def evidence_rows(evidence: Mapping[str, Any]) -> tuple[tuple[tuple[str, str], ...], int]:
    """Evidence flattened to ``(dotted.key, value)`` rows, at most :data:`EVIDENCE_ROWS`, and how many more."""
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any, depth: int) -> None:
        if isinstance(value, Mapping) and value and depth < NESTING:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item, depth + 1)
        else:
            rows.append((prefix, shown(value)))

    walk("", evidence, 0)
    if rows == [("", "{}")]:
        rows = []
    return tuple(rows[:EVIDENCE_ROWS]), max(0, len(rows) - EVIDENCE_ROWS)


def finding(item: Mapping[str, Any]) -> Finding:
    rows, left_out = evidence_rows(item["evidence"])
    return Finding(
        verdict=item["verdict"],
        audit=item["audit"],
        subject=item["subject"],
        message=item["message"],
        where=item["where"],
        declared=item.get("declared"),
        escalated=bool(item.get("escalated")),
        evidence=rows,
        evidence_left_out=left_out,
    )


def gate_rank(item: Mapping[str, Any]) -> tuple[int, str, str]:
    gate = item["gate_class"]
    return (GATE_ORDER.index(gate) if gate in GATE_ORDER else len(GATE_ORDER), item["audit"], item["subject"])


def failures(doc: Mapping[str, Any]) -> list[Finding]:
    """Failed and crashed audits, custody first: these are what stop a teardown or a claim."""
    broken = [item for item in doc["verdicts"] if item["verdict"] in ("failed", "error")]
    return [finding(item) for item in sorted(broken, key=gate_rank)]


def _conclusion_rank(conclusion: str) -> tuple[int, str]:
    if conclusion.startswith("test/"):
        return 0, conclusion
    if conclusion.startswith("run:"):
        return 1, conclusion
    return {UNNAMED_GROUP: 3, NOT_RUN_GROUP: 4}.get(conclusion, 2), conclusion


def disclosure_groups(doc: Mapping[str, Any]) -> list[Group]:
    """Disclosed and not-run verdicts, grouped under each conclusion their ``affects`` names."""
    grouped: dict[str, list[Finding]] = {}
    for item in sorted(doc["verdicts"], key=gate_rank):
        if item["verdict"] not in ("disclosed", "not_run"):
            continue
        conclusions = item["affects"] or [NOT_RUN_GROUP if item["verdict"] == "not_run" else UNNAMED_GROUP]
        for conclusion in conclusions:
            grouped.setdefault(conclusion, []).append(finding(item))
    return [
        Group(conclusion, anchor(conclusion), tuple(grouped[conclusion]))
        for conclusion in sorted(grouped, key=_conclusion_rank)
    ]
