"""Checkpoint gate (custody): each declared checkpoint is the bound one, loads safely, holds finite weights
and descends from the selection its run declares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from runaudit.fixtures.custody import Custody
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.reader import CapsuleReader
from runaudit.run import Run

custody = (
    pytest.mark.custody
)  # per audit, not per module: resume_state is science, and -m custody must skip it

RESUME_PARTS = {
    "optimizer": ("optimizer", "optimizer_state_dict", "optim"),
    "scheduler": ("scheduler", "lr_scheduler", "scheduler_state_dict"),
    "epoch": ("epoch",),
    "step": ("step", "global_step"),
    "rng": ("rng", "rng_state", "rng_states"),
}


def _declared(run: Run, role: str | None) -> Mapping[str, Any]:
    checkpoints = run.get("checkpoints")
    declared = checkpoints.get(role) if isinstance(checkpoints, Mapping) else None
    return declared if isinstance(declared, Mapping) else {}


def _present(run: Run, custody: Custody, audit: AuditRecorder, role: str | None) -> str:
    if role is None:
        audit.not_applicable(f"run {run.run_id} is a {run.kind} capsule: it binds no checkpoints")
    name = f"{role}.pth"
    if f"{run.run_id}/{name}" not in custody.tree.files:
        owner = "capsule.required_paths" if role == "best" else "capsule.closed_world"
        audit.not_run(f"{name} is absent from run {run.run_id} (reported by {owner})")
    return name


def _inspection(run: Run, custody: Custody, audit: AuditRecorder, role: str | None) -> Any:
    from runaudit.checkpoints import CheckpointRefused

    name = _present(run, custody, audit, role)
    inspection = custody.inspect(name)
    if isinstance(inspection, CheckpointRefused):
        audit.not_run(f"{name} did not load safely (reported by checkpoint.safe_load)")
    return inspection


@custody
def test_safe_load(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """The checkpoint's SHA-256 equals the one ``run.json`` binds, and it loads with
    ``torch.load(weights_only=True, mmap=True)`` within 100 levels of nesting and 10,000,000 objects;
    another hash or a refused load fails.

    There is no fallback to full unpickling, which runs arbitrary code; ``--allow-pickle`` opts in
    explicitly for trusted files and is recorded.
    """
    from runaudit.checkpoints import CheckpointRefused

    name = _present(run, custody, audit, checkpoint)
    digest = custody.hashed(f"{run.run_id}/{name}")
    bound = _declared(run, checkpoint).get("sha256")
    audit.evidence(sha256=digest.sha256, hashed=digest.source, bound=bound)
    audit.require(
        digest.sha256 == bound,
        f"run {run.run_id}: {name} has sha256 {digest.sha256[:16]}…, run.json binds {str(bound)[:16]}…: "
        "it is not the checkpoint this run declares",
    )
    inspection = custody.inspect(name)
    if isinstance(inspection, CheckpointRefused):
        audit.fail(f"run {run.run_id}: {inspection}")
    audit.evidence(tensors=inspection.tensors, numel=inspection.numel, unsafe_load=inspection.unsafe_load)
    if inspection.unsafe_load:
        audit.note(
            f"{name} loaded with full unpickling because --allow-pickle was given (trusted by the user)"
        )
    else:
        audit.note(f"{name} loads with weights_only=True, memory-mapped")


@custody
def test_tensors(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """The checkpoint holds at least one tensor and a weights mapping (a bare state dict, or one under
    ``state_dict``, ``model_state_dict``, ``model``, ``ema``, ``model_ema``, ``weights`` or ``net``);
    else fails.
    """
    inspection = _inspection(run, custody, audit, checkpoint)
    audit.evidence(tensors=inspection.tensors, numel=inspection.numel, top_keys=inspection.top_keys[:50])
    audit.require(inspection.tensors > 0, f"run {run.run_id}: {checkpoint}.pth holds no tensors at all")
    audit.require(
        inspection.weights_key is not None,
        f"run {run.run_id}: {checkpoint}.pth holds {inspection.tensors} tensor(s) but no weights mapping "
        f"(a state_dict, or one under model/state_dict/model_state_dict/ema); top-level keys {inspection.top_keys[:8]}",
    )
    audit.note(
        f"{inspection.tensors} tensors, {inspection.numel} values, weights at {inspection.weights_key or '<root>'}"
    )


@custody
def test_finite(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """Every floating tensor in the checkpoint is free of NaN and inf; any tensor holding one fails."""
    inspection = _inspection(run, custody, audit, checkpoint)
    audit.evidence(nonfinite=inspection.nonfinite[:100])
    audit.require(
        not inspection.nonfinite,
        f"run {run.run_id}: {checkpoint}.pth has {len(inspection.nonfinite)} floating tensor(s) holding NaN or inf: "
        + ", ".join(inspection.nonfinite[:5]),
    )


def _train_csv_best(
    audit: AuditRecorder, capsule: CapsuleReader, metric: str, mode: str
) -> tuple[float, list[int]]:
    header, rows = audit.need(capsule.csv_rows, "train.csv")
    column = f"val_{metric}"
    if column not in header or "epoch" not in header:
        audit.not_run(f"train.csv has no {column} column: the selection cannot be replayed")
    values: dict[int, float] = {}
    for row in rows:
        try:
            value = float(row[header.index(column)])
            epoch = int(row[header.index("epoch")])
        except (ValueError, IndexError):
            continue
        if math.isfinite(value):
            values[epoch] = value
    if not values:
        audit.not_run(f"train.csv has no finite {column} values")
    best = max(values.values()) if mode == "max" else min(values.values())
    return best, sorted(epoch for epoch, value in values.items() if value == best)


@custody
def test_selection(
    run: Run, custody: Custody, capsule: CapsuleReader, audit: AuditRecorder, checkpoint: str | None
) -> None:
    """``best.pth``'s stored epoch, step and selection value equal ``run.json``'s, its epoch is an arg-best of
    ``val_<metric>`` in ``train.csv`` under the declared ``mode``, and the declared value equals that best
    (relative tolerance ``1e-9``); any mismatch fails.
    """
    if checkpoint == "last":
        audit.not_applicable("selection lineage concerns best.pth; last.pth is the final state")
    inspection = _inspection(run, custody, audit, checkpoint)
    declared = _declared(run, "best")
    selection = declared.get("selection")
    if not isinstance(selection, Mapping) or selection.get("mode") not in ("max", "min"):
        audit.not_run(
            "run.json declares no checkpoints.best.selection with a max/min mode (capsule.run_json_schema)"
        )
    meta = inspection.meta
    stored_selection = meta.get("selection") if isinstance(meta.get("selection"), Mapping) else {}
    stored = {
        "epoch": meta.get("epoch"),
        "step": meta.get("step", meta.get("global_step")),
        "value": stored_selection.get("value", meta.get("value", meta.get("best_value"))),
    }
    audit.evidence(
        checkpoint=stored, run_json={k: declared.get(k) for k in ("epoch", "step")}, selection=dict(selection)
    )
    if stored["epoch"] is None or stored["step"] is None:
        audit.not_run(
            "best.pth carries no epoch/step beside its weights: its lineage cannot be checked "
            "(save epoch and step in the checkpoint)"
        )
    problems = [
        f"best.pth says {key} {stored[key]}, run.json says {expected}"
        for key, expected in (
            ("epoch", declared.get("epoch")),
            ("step", declared.get("step")),
            ("value", selection.get("value")),
        )
        if stored[key] is not None and not _same(stored[key], expected)
    ]
    best, epochs = _train_csv_best(audit, capsule, str(selection.get("metric")), str(selection["mode"]))
    audit.evidence(train_csv_best=best, train_csv_best_epochs=epochs)
    if stored["epoch"] not in epochs:
        problems.append(
            f"the {selection['mode']} of val_{selection.get('metric')} in train.csv is {best} at epoch(s) {epochs}, "
            f"but best.pth is from epoch {stored['epoch']}"
        )
    if not _same(selection.get("value"), best):
        problems.append(f"run.json selection value {selection.get('value')} differs from train.csv's {best}")
    audit.require(not problems, f"run {run.run_id}: best.pth lineage does not hold: {'; '.join(problems)}")


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return math.isclose(float(left), float(right), rel_tol=1e-9, abs_tol=1e-12)
    return bool(left == right)


@custody
def test_distinct_last(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """A ``last.pth`` byte-identical to ``best.pth`` is accepted only when ``run.json`` places both at the
    same epoch and step; otherwise the copy fails.
    """
    if checkpoint != "last":
        audit.not_applicable("applies to last.pth")
    _present(run, custody, audit, checkpoint)
    best = custody.digest(f"{run.run_id}/best.pth")
    last = custody.hashed(f"{run.run_id}/last.pth")
    if best is None:
        audit.not_run("best.pth is absent (reported by capsule.required_paths)")
    if best.sha256 != last.sha256:
        audit.note("last.pth is a distinct frozen artifact")
        return
    same_point = all(
        _declared(run, "best").get(key) == _declared(run, "last").get(key) for key in ("epoch", "step")
    )
    audit.require(
        same_point,
        f"run {run.run_id}: last.pth is byte-identical to best.pth, yet run.json places them at different epochs/steps",
    )
    audit.note("last.pth is byte-identical to best.pth (the best epoch was the last)")


@pytest.mark.science
def test_resume_state(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """``last.pth`` holds optimizer, scheduler, epoch, step and RNG state, plus the grad scaler under fp16
    training and the EMA weights when ``best`` is EMA; whatever is missing is disclosed.

    Without them a resume from ``last.pth`` would not continue the same run.
    """
    if checkpoint != "last":
        audit.not_applicable("resume state is carried by last.pth")
    inspection = _inspection(run, custody, audit, checkpoint)
    keys = set(inspection.top_keys)
    missing = [part for part, names in RESUME_PARTS.items() if not keys & set(names)]
    training = run.get("training") if isinstance(run.get("training"), Mapping) else {}
    if training.get("precision") == "fp16" and not keys & {"scaler", "grad_scaler", "scaler_state_dict"}:
        missing.append("grad scaler (fp16 training)")
    if _declared(run, "best").get("weights") == "ema" and not keys & {"ema", "model_ema", "ema_state_dict"}:
        missing.append("EMA weights")
    audit.evidence(top_keys=sorted(keys)[:50], missing=missing)
    if missing:
        audit.disclose(
            f"last.pth lacks {', '.join(missing)}: a resume from it would not continue the same run",
            affects=["run:resume"],
        )
