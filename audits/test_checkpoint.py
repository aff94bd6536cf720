"""Checkpoint gate (custody): each declared checkpoint is the bound one, loads safely, holds finite weights
and descends from the selection its run declares.

A role's checkpoint is ``<role>.pth`` (``torch.load(weights_only=True)``) or ``<role>.safetensors`` (header
and buffer read without torch or pickle), whichever the capsule holds (:func:`runaudit.capsule.checkpoint_file`).
A safetensors file holds weights only: its selection lineage is the one ``run.json`` declares, and it carries
no resume state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from runaudit.capsule import Checkpoint
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


def _present(run: Run, custody: Custody, audit: AuditRecorder, role: str | None) -> Checkpoint:
    """The role's checkpoint file, present as a regular file in only one format; else not_run with its owner."""
    if role is None:
        audit.not_applicable(f"run {run.run_id} is a {run.kind} capsule: it binds no checkpoints")
    checkpoint = custody.checkpoint(role)
    if checkpoint.ambiguous:
        audit.not_run(
            f"run {run.run_id} holds both {' and '.join(checkpoint.found)}: which one run.json binds is "
            "ambiguous (reported by capsule.closed_world)"
        )
    if f"{run.run_id}/{checkpoint.name}" not in custody.tree.files:
        owner = "capsule.required_paths" if role == "best" else "capsule.closed_world"
        named = checkpoint.name if checkpoint.present else checkpoint.alternatives
        audit.not_run(f"{named} is absent from run {run.run_id} (reported by {owner})")
    return checkpoint


def _inspection(run: Run, custody: Custody, audit: AuditRecorder, role: str | None) -> tuple[str, Any]:
    """The checkpoint's name and its :class:`~runaudit.checkpoints.Inspection`; not_run if it did not load."""
    from runaudit.checkpoints import CheckpointRefused

    name = _present(run, custody, audit, role).name
    inspection = custody.inspect(name)
    if isinstance(inspection, CheckpointRefused):
        audit.not_run(f"{name} did not load safely (reported by checkpoint.safe_load)")
    return name, inspection


@custody
def test_safe_load(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """The checkpoint's SHA-256 equals the one ``run.json`` binds, and it loads: a ``.pth`` with
    ``torch.load(weights_only=True, mmap=True)`` within 100 levels of nesting and 10,000,000 objects; a
    ``.safetensors`` without torch or pickle, its header strict JSON of at most 100,000,000 bytes whose
    tensors have known dtypes, non-negative integer shapes and offsets sized to them that tile the buffer
    with no overlap, gap or trailing byte. Another hash or a refused load fails.

    There is no fallback to full unpickling, which runs arbitrary code; ``--allow-pickle`` opts in
    explicitly for trusted ``.pth`` files and is recorded.
    """
    from runaudit.checkpoints import CheckpointRefused

    name = _present(run, custody, audit, checkpoint).name
    digest = custody.hashed(f"{run.run_id}/{name}")
    bound = _declared(run, checkpoint).get("sha256")
    audit.evidence(
        sha256=digest.sha256,
        hashed=digest.source,
        bound=bound,
        one_pass=custody.in_one_pass(f"{run.run_id}/{name}"),
    )
    if not isinstance(bound, str):
        why = (
            "run.json is unreadable (reported by capsule.run_json_schema)"
            if run.declared is None
            else f"run.json declares no checkpoints.{checkpoint}.sha256"
        )
        audit.fail(f"run {run.run_id}: {name} cannot be matched to the checkpoint this run declares: {why}")
    audit.require(
        digest.sha256 == bound,
        f"run {run.run_id}: {name} has sha256 {digest.sha256[:16]}…, run.json binds {str(bound)[:16]}…: "
        "it is not the checkpoint this run declares",
    )
    inspection = custody.inspect(name)
    if isinstance(inspection, CheckpointRefused):
        audit.fail(f"run {run.run_id}: {inspection}")
    audit.evidence(
        tensors=inspection.tensors,
        numel=inspection.numel,
        unsafe_load=inspection.unsafe_load,
        format=inspection.format,
    )
    if inspection.format == "safetensors":
        shown = dict(list(inspection.metadata.items())[:20])
        audit.evidence(metadata={key[:100]: value[:200] for key, value in shown.items()})
        audit.note(
            f"{name}: header bounds-checked, {inspection.tensors} tensors memory-mapped; read without torch or pickle"
        )
    elif inspection.unsafe_load:
        audit.note(
            f"{name} loaded with full unpickling because --allow-pickle was given (trusted by the user)"
        )
    else:
        audit.note(f"{name} loads with weights_only=True, memory-mapped")


@custody
def test_tensors(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """The checkpoint holds at least one tensor and a weights mapping (a bare state dict, or one under
    ``state_dict``, ``model_state_dict``, ``model``, ``ema``, ``model_ema``, ``weights`` or ``net``; a
    safetensors file is a bare state dict); else fails.
    """
    name, inspection = _inspection(run, custody, audit, checkpoint)
    audit.evidence(tensors=inspection.tensors, numel=inspection.numel, top_keys=inspection.top_keys[:50])
    audit.require(inspection.tensors > 0, f"run {run.run_id}: {name} holds no tensors at all")
    audit.require(
        inspection.weights_key is not None,
        f"run {run.run_id}: {name} holds {inspection.tensors} tensor(s) but no weights mapping "
        f"(a state_dict, or one under model/state_dict/model_state_dict/ema); top-level keys {inspection.top_keys[:8]}",
    )
    audit.note(
        f"{inspection.tensors} tensors, {inspection.numel} values, weights at {inspection.weights_key or '<root>'}"
    )


@custody
def test_finite(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """Every floating tensor in the checkpoint is free of NaN and inf (in a safetensors file, read from the
    bit patterns, bf16 and float8 included); any tensor holding one fails.
    """
    name, inspection = _inspection(run, custody, audit, checkpoint)
    audit.evidence(nonfinite=inspection.nonfinite[:100])
    audit.require(
        not inspection.nonfinite,
        f"run {run.run_id}: {name} has {len(inspection.nonfinite)} floating tensor(s) holding NaN or inf: "
        + ", ".join(inspection.nonfinite[:5]),
    )


def _train_csv_best(
    audit: AuditRecorder, capsule: CapsuleReader, metric: str, mode: str
) -> tuple[float, list[int]]:
    """The best ``val_<metric>`` in train.csv and the epochs it was logged at; not_run when train.csv breaks
    its contract (``capsule.train_csv`` reports it): the selection is never replayed on rows it failed."""
    from runaudit.history import load_history

    history = audit.need(load_history, capsule)
    column = f"val_{metric}"
    if not history.has(column):
        audit.not_run(f"train.csv has no {column} column: the selection cannot be replayed")
    epochs, logged = history.series(column)
    values = {
        int(epoch): float(value) for epoch, value in zip(epochs, logged, strict=True) if math.isfinite(value)
    }
    if not values:
        audit.not_run(f"train.csv has no finite {column} values")
    best = max(values.values()) if mode == "max" else min(values.values())
    return best, sorted(epoch for epoch, value in values.items() if value == best)


@custody
def test_selection(
    run: Run, custody: Custody, capsule: CapsuleReader, audit: AuditRecorder, checkpoint: str | None
) -> None:
    """The best checkpoint's stored epoch, step and selection value equal ``run.json``'s, its epoch is an
    arg-best of ``val_<metric>`` in ``train.csv`` under the declared ``mode``, and the declared value equals
    that best (relative tolerance ``1e-9``); any mismatch fails.

    A ``best.safetensors`` holds weights only: its lineage is the one ``run.json`` declares, replayed against
    ``train.csv``, and an ``epoch`` or ``step`` in its ``__metadata__`` must agree with it.
    """
    if checkpoint == "last":
        audit.not_applicable(
            "selection lineage concerns the best checkpoint; the last one is the final state"
        )
    name, inspection = _inspection(run, custody, audit, checkpoint)
    declared = _declared(run, "best")
    selection = declared.get("selection")
    if not isinstance(selection, Mapping) or selection.get("mode") not in ("max", "min"):
        audit.not_run(
            "run.json declares no checkpoints.best.selection with a max/min mode (capsule.run_json_schema)"
        )
    problems = []
    if inspection.format == "safetensors":
        stored = {
            "epoch": declared.get("epoch"),
            "step": declared.get("step"),
            "value": selection.get("value"),
        }
        problems += _metadata_disagreements(name, inspection.metadata, declared)
        source = "run.json"
    else:
        meta = inspection.meta
        stored_selection = meta.get("selection") if isinstance(meta.get("selection"), Mapping) else {}
        stored = {
            "epoch": meta.get("epoch"),
            "step": meta.get("step", meta.get("global_step")),
            "value": stored_selection.get("value", meta.get("value", meta.get("best_value"))),
        }
        source = name
    audit.evidence(
        checkpoint=stored,
        lineage_from=source,
        run_json={k: declared.get(k) for k in ("epoch", "step")},
        selection=dict(selection),
    )
    if stored["epoch"] is None or stored["step"] is None:
        audit.not_run(
            f"{source} carries no epoch/step for {name}: its lineage cannot be checked "
            + (
                "(capsule.run_json_schema)"
                if source == "run.json"
                else "(save epoch and step in the checkpoint)"
            )
        )
    problems += [
        f"{name} says {key} {stored[key]}, run.json says {expected}"
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
            f"but {name} is from epoch {stored['epoch']}"
        )
    if not _same(selection.get("value"), best):
        problems.append(f"run.json selection value {selection.get('value')} differs from train.csv's {best}")
    audit.require(not problems, f"run {run.run_id}: {name} lineage does not hold: {'; '.join(problems)}")


def _metadata_disagreements(name: str, metadata: Mapping[str, str], declared: Mapping[str, Any]) -> list[str]:
    """An ``epoch`` or ``step`` that a safetensors ``__metadata__`` states, where it differs from run.json."""
    problems = []
    for key in ("epoch", "step"):
        if key not in metadata:
            continue
        try:
            stated: Any = int(metadata[key])
        except ValueError:
            stated = metadata[key]
        if not _same(stated, declared.get(key)):
            problems.append(
                f"{name} __metadata__ says {key} {str(stated)[:40]!r}, run.json says {declared.get(key)}"
            )
    return problems


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return math.isclose(float(left), float(right), rel_tol=1e-9, abs_tol=1e-12)
    return bool(left == right)


@custody
def test_distinct_last(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """A last checkpoint byte-identical to the best one is accepted only when ``run.json`` places both at the
    same epoch and step; otherwise the copy fails.
    """
    if checkpoint != "last":
        audit.not_applicable("applies to the last checkpoint")
    last_name = _present(run, custody, audit, checkpoint).name
    best_name = _present(run, custody, audit, "best").name  # absent or in two formats: nothing to compare
    best = custody.hashed(f"{run.run_id}/{best_name}")
    last = custody.hashed(f"{run.run_id}/{last_name}")
    if best.sha256 != last.sha256:
        audit.note(f"{last_name} is a distinct frozen artifact")
        return
    same_point = all(
        _declared(run, "best").get(key) == _declared(run, "last").get(key) for key in ("epoch", "step")
    )
    audit.require(
        same_point,
        f"run {run.run_id}: {last_name} is byte-identical to {best_name}, yet run.json places them at different "
        "epochs/steps",
    )
    audit.note(f"{last_name} is byte-identical to {best_name} (the best epoch was the last)")


@pytest.mark.science
def test_resume_state(run: Run, custody: Custody, audit: AuditRecorder, checkpoint: str | None) -> None:
    """``last.pth`` holds optimizer, scheduler, epoch, step and RNG state, plus the grad scaler under fp16
    training and the EMA weights when ``best`` is EMA; whatever is missing is disclosed.

    Without them a resume from ``last.pth`` would not continue the same run. A ``last.safetensors`` holds
    weights only, so the audit does not apply to it.
    """
    if checkpoint != "last":
        audit.not_applicable("resume state is carried by the last checkpoint")
    if _present(run, custody, audit, checkpoint).format == "safetensors":
        audit.not_applicable(
            "last.safetensors holds weights only (safetensors stores tensors, never optimizer, scheduler or "
            "RNG state): it is not a resume point"
        )
    name, inspection = _inspection(run, custody, audit, checkpoint)
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
            f"{name} lacks {', '.join(missing)}: a resume from it would not continue the same run",
            affects=["run:resume"],
        )
