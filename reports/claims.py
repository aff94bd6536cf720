"""Each headline number with the gates behind it: "accuracy 0.9805 — custody ok, 1 disclosure: …".

A number is *verified* when the custody audits that bear on it held and its re-derivation from
``results.parquet`` passed; when those gates did not run it reads "unverified", never "ok". The findings
that ride with it are the disclosures (and not-run audits) whose ``affects`` name it or the whole run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runaudit.reports.findings import Finding, finding
from runaudit.verdict import Verdict

REDERIVATION = "capsule.metrics_rederived"


@dataclass(frozen=True)
class Claim:
    test_id: str
    metric: str
    condition_id: str
    value: str
    custody: str  # "ok", "failed" or "unverified"
    custody_note: str
    findings: tuple[Finding, ...]
    science_audited: bool

    @property
    def conclusion(self) -> str:
        """The key disclosures use in ``affects`` for this number."""
        return f"test/{self.test_id}:{self.metric}"

    @property
    def sentence(self) -> str:
        custody = f"custody {self.custody}" + (f" ({self.custody_note})" if self.custody_note else "")
        if self.findings:
            word = "disclosure" if len(self.findings) == 1 else "disclosures"
            riding = f"{len(self.findings)} {word}: " + "; ".join(item.label for item in self.findings)
        else:
            riding = "no disclosures" if self.science_audited else "science not audited"
        return f"{self.metric} [{self.condition_id}] {self.value} — {custody}, {riding}"


def affects_claim(affects: Iterable[str], test_id: str, metric: str) -> bool:
    """A finding rides with a number when it names that number, its whole test, or an aspect of the run."""
    named = {f"test/{test_id}", f"test/{test_id}:*", f"test/{test_id}:{metric}"}
    return any(key in named or key.startswith("run:") for key in affects)


def _names_other_test(subject: str, test_id: str, test_ids: Sequence[str]) -> bool:
    for other in test_ids:
        if other != test_id and (
            subject == other
            or subject.startswith((f"{other}/", f"test/{other}/"))
            or subject == f"test/{other}"
        ):
            return True
    return False


def _custody(
    verdicts: Sequence[Mapping[str, Any]], test_id: str, metric: str, test_ids: Sequence[str]
) -> tuple[str, str]:
    custody = [
        item
        for item in verdicts
        if item["gate_class"] == "custody" and not _names_other_test(item["subject"], test_id, test_ids)
    ]
    if not custody:
        return "unverified", "no custody audit ran"
    broken = sorted({item["audit"] for item in custody if not Verdict(item["verdict"]).holds})
    rederived = [
        item for item in custody if item["audit"] == REDERIVATION and item["subject"] == f"{test_id}/{metric}"
    ]
    if any(Verdict(item["verdict"]).broken for item in custody):
        return "failed", ", ".join(broken)
    if not rederived or rederived[0]["verdict"] != "passed":
        why = rederived[0]["verdict"].replace("_", " ") if rederived else "did not run"
        return "unverified", f"{REDERIVATION} {why}"
    if broken:
        return "unverified", f"not run: {', '.join(broken)}"
    return "ok", ""


def _value(row: Mapping[str, Any]) -> str:
    value, precision = row["value"], row["precision"]
    if value is None:
        return "(no finite value)"
    return f"{value:.{precision}f}" if precision is not None else f"{value:.6g}"


def claims(doc: Mapping[str, Any]) -> list[Claim]:
    verdicts = doc["verdicts"]
    test_ids = [test["test_id"] for test in doc["tests"]]
    science_audited = any(item["gate_class"] == "science" for item in verdicts)
    found = []
    for row in doc["headlines"]:
        test_id, metric = row["test_id"], row["metric"]
        custody, note = _custody(verdicts, test_id, metric, test_ids)
        riding = tuple(
            finding(item)
            for item in verdicts
            if Verdict(item["verdict"]).rides
            and item["gate_class"] != "custody"
            and affects_claim(item["affects"], test_id, metric)
        )
        found.append(
            Claim(test_id, metric, row["condition_id"], _value(row), custody, note, riding, science_audited)
        )
    return found
