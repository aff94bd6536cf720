"""Report fixtures: verdict records in the shape the science audits write (the common brief's evidence conventions).

The science and smoke audits are built in parallel branches; until they land, the report is tested with
these records next to the real custody verdicts of the demo run. ``HOSTILE`` goes everywhere a user or
an audit can put text: messages, subjects, affects, evidence keys and values, metric names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.reports import document
from runaudit.resolve import Location, Root
from runaudit.run import Run

HOSTILE = '<script>window.__pwned=1</script>"\'&<img src=x onerror="window.__pwned=1"> ünïcødé ✓ $x$'


def record(
    audit: str,
    verdict: str,
    message: str = "",
    *,
    gate_class: str = "science",
    subject: str = "",
    affects: list[str] | None = None,
    where: str = "local",
    **evidence: Any,
) -> dict[str, Any]:
    return {
        "audit": audit,
        "gate_class": gate_class,
        "subject": subject,
        "verdict": verdict,
        "message": message,
        "evidence": evidence,
        "affects": sorted(affects or []),
        "where": where,
    }


def science_records() -> list[dict[str, Any]]:
    """One of each figure's evidence, a declared choice, a not-run probe and a verdict from a box."""
    seeds = record(
        "variance.seed_count",
        "disclosed",
        "1 seed per arm; at least 3 are needed for a band",
        affects=["test/main:accuracy", "test/main:cross_entropy"],
        arms={"cnn": 1},
    )
    seeds["declared"] = {"topic": "seeds", "choice": "single", "note": "one seed; no claim rests on a band"}
    return [
        record("history.finite", "passed", "every logged value is finite"),
        record(
            "history.loss_spikes",
            "disclosed",
            "train_loss jumped 12× at epoch 9 and recovered",
            affects=["test/main:accuracy"],
            epochs=[9],
            column="train_loss",
        ),
        record(
            "history.grad_spikes",
            "disclosed",
            "grad_norm robust z > 6 at epochs 2 and 3",
            affects=["run:training"],
            where="gpu-box-1",
            epochs=[2, 3],
            column="grad_norm",
        ),
        seeds,
        record(
            "variance.seed_band",
            "disclosed",
            "accuracy 0.971 ± 0.004 (n=3, seed variance)",
            subject="accuracy",
            affects=["test/main:accuracy"],
            metric="accuracy",
            variance_kind="seed",
            arms={
                "cnn": {"values": [0.975, 0.968, 0.97], "mean": 0.971, "std": 0.0036, "n": 3},
                "mlp": {"values": [0.951, 0.944, 0.962], "mean": 0.9523, "std": 0.0091, "n": 3},
            },
        ),
        record(
            "variance.mde",
            "disclosed",
            "effect 2.10 is inside the MDE 7.75: underpowered, not null",
            subject="accuracy",
            affects=["test/main:accuracy"],
            metric="accuracy",
            mde=7.75,
            effect=2.1,
            sd=3.42,
            n=3,
            t_crit=2.776,
            df=4,
        ),
        record(
            "variance.baseline_draw",
            "disclosed",
            "one draw 49.12 vs the baseline's 42.63/49.30/47.26: +6.49 / +2.72 / −0.18",
            subject="accuracy",
            affects=["test/main:accuracy"],
            metric="accuracy",
            probe=49.12,
            baseline_values=[42.63, 49.30, 47.26],
            vs_mean=6.49,
            vs_best=-0.18,
            vs_worst=2.72,
        ),
        record(
            "leakage.cross_split_bytes",
            "disclosed",
            "4 test items share their bytes with train items",
            affects=["test/main:accuracy", "test/main:cross_entropy"],
            overlap={"train|test": 4, "train|val": 1, "val|test": 0},
            fraction_test_seen=4 / 359,
            examples=["d0012", "d0131", "d0207", "d0301"],
        ),
        record("leakage.group_overlap", "not_run", "the split manifest has no group column"),
        record(
            "collapse.output_cosine",
            "passed",
            "mean off-diagonal cosine 0.21",
            cosine=0.21,
            cosine_centered=0.02,
            n=359,
        ),
    ]


def hostile_records() -> list[dict[str, Any]]:
    """Hostile text in every field a record carries, including plot labels and figure evidence."""
    return [
        record(
            "history.loss_bound",
            "disclosed",
            HOSTILE,
            subject=HOSTILE,
            affects=[f"test/main:{HOSTILE}", "run:<b>bold</b>"],
            where=HOSTILE,
            epochs=[4],
            column=HOSTILE,
            **{HOSTILE: HOSTILE},
        ),
        record(
            "leakage.near_duplicates",
            "disclosed",
            HOSTILE,
            affects=["test/main:accuracy"],
            overlap={HOSTILE: 3, "train|test": 1},
            examples=[HOSTILE],
        ),
        record(
            "variance.seed_band",
            "disclosed",
            HOSTILE,
            subject=HOSTILE,
            affects=["test/main:accuracy"],
            metric=HOSTILE,
            variance_kind=HOSTILE,
            arms={HOSTILE: {"values": [1.0, 2.0], "mean": 1.5, "std": 0.5, "n": 2}},
        ),
    ]


def demo_run(project: Path, origin: str = "export") -> Run:
    return Run.load(Location(project / "export" / DEMO_RUN_ID, Root(project, "--root"), origin))


def build(run: Run, records: list[dict[str, Any]]) -> dict[str, Any]:
    return document.build(
        run,
        records,
        started_utc="2026-01-02T03:04:05Z",
        args=["--run", run.run_id],
        invocation_dir=run.root,
        strict=False,
        custody_gate={"expected": {}, "session": "completed"},
    )
