"""Collapse gate (science): does the model ignore its input?

The live probes here run through the project's smoke adapter (fixtures/adapter.py), before training:
they carry the ``smoke`` marker too, so ``-m smoke`` runs them, and ``live``, so an active run keeps them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from runaudit.fixtures.adapter import EVAL_BATCH, PREDICT, PROBE_DATA
from runaudit.fixtures.probes import mean_offdiagonal_cosine
from runaudit.fixtures.smoke import Adapter
from runaudit.fixtures.verdicts import AuditRecorder

pytestmark = pytest.mark.science

LIVE_COSINE_FLAG = 0.98  # mean off-diagonal cosine at or above this flags (verify-spec COL-01, COL-02)
LIVE_ROUNDING = 1e-6  # outputs that differ from their mean by less than this, relatively, are identical
LIVE_AFFECTS = ["run:model"]
LIVE_PROBE_MIN_ITEMS = 20


def _live_probe(function: Any) -> Any:
    """A science audit (its gate class) that runs through the smoke adapter: marked smoke and live too."""
    for mark in (pytest.mark.science, pytest.mark.smoke, pytest.mark.live):
        function = mark(function)
    return function


def _live_array(values: Any) -> np.ndarray:
    """A tensor or array-like as a numpy array (floating tensors as float64, class ids as they are)."""
    if hasattr(values, "detach"):
        tensor = values.detach().cpu()
        return (tensor.double() if tensor.is_floating_point() else tensor).numpy()
    return np.asarray(values)


def _live_rows(values: Any) -> np.ndarray:
    """A batch as an n × d float64 matrix, one flattened sample per row."""
    array = _live_array(values)
    return array.reshape(len(array), -1).astype(np.float64)


def _live_cosines(rows: np.ndarray) -> dict[str, float]:
    """Raw and mean-centred cosines, the centred one counting rows equal up to rounding as identical."""
    centred = rows - rows.mean(axis=0, keepdims=True)
    scale = float(np.sqrt(np.mean(np.sum(rows**2, axis=1)))) or 1.0
    deviation = np.linalg.norm(centred, axis=1)
    centred[deviation <= LIVE_ROUNDING * scale] = 0.0
    return {
        "cosine": mean_offdiagonal_cosine(rows),
        "cosine_centered": mean_offdiagonal_cosine(centred),
        "relative_spread": float(np.sqrt(np.mean(deviation**2))) / scale,
        "n": len(rows),
    }


@_live_probe
def test_input_cosine(adapter: Adapter, audit: AuditRecorder) -> None:
    """COL-02: distinct inputs that are nearly the same vector carry an invariant, not the signal."""
    rows = _live_rows(adapter.fixture(EVAL_BATCH).inputs)
    if len(rows) < 2:
        audit.not_run(
            f"{adapter.label}: {EVAL_BATCH} holds {len(rows)} sample(s); the probe needs two or more"
        )
    found = _live_cosines(rows)
    per_feature_std = float(rows.std(axis=0).mean())
    audit.evidence(**found, per_feature_std=per_feature_std)
    summary = (
        f"mean off-diagonal cosine {found['cosine']:.4f} over {found['n']} distinct inputs "
        f"(mean-centred {found['cosine_centered']:.4f}, per-feature std {per_feature_std:.3g})"
    )
    if found["cosine"] >= LIVE_COSINE_FLAG:
        audit.disclose(
            f"{adapter.label}: the evaluation inputs are nearly one vector: {summary}; the input path "
            "leaves an invariant, not the signal",
            affects=LIVE_AFFECTS,
        )
        return
    audit.note(f"{adapter.label}: {summary}")


@_live_probe
def test_live_output_cosine(adapter: Adapter, audit: AuditRecorder) -> None:
    """COL-01 on the live model: distinct inputs must not map to one output.

    At initialisation a healthy network's outputs share a large common offset (raw cosine near 0.99),
    so the verdict needs the mean-centred cosine too: collapsed outputs are identical once centred.
    """
    state = adapter.new_state()
    predict, inputs = adapter.fixture(PREDICT), adapter.fixture(EVAL_BATCH).inputs
    rows = _live_rows(adapter.call(PREDICT, predict, state.model, inputs))
    if len(rows) < 2:
        audit.not_run(
            f"{adapter.label}: {EVAL_BATCH} gives {len(rows)} output(s); the probe needs two or more"
        )
    found = _live_cosines(rows)
    audit.evidence(**found)
    summary = (
        f"outputs of {found['n']} distinct inputs: mean off-diagonal cosine {found['cosine']:.4f}, "
        f"mean-centred {found['cosine_centered']:.4f}"
    )
    if found["cosine"] >= LIVE_COSINE_FLAG and found["cosine_centered"] >= LIVE_COSINE_FLAG:
        audit.disclose(
            f"{adapter.label}: the model ignores its input: {summary} (relative spread "
            f"{found['relative_spread']:.2g})",
            affects=LIVE_AFFECTS,
        )
        return
    audit.note(f"{adapter.label}: {summary}")


@_live_probe
def test_linear_probe(adapter: Adapter, audit: AuditRecorder) -> None:
    """COL-04: a held-out linear probe on the raw inputs beats label permutations, or there is no signal."""
    from runaudit.fixtures.linear_probe import PERMUTATIONS, linear_probe

    data = adapter.fixture(PROBE_DATA)
    rows, targets = _live_rows(data.inputs), _live_array(data.targets)
    if len(rows) < LIVE_PROBE_MIN_ITEMS or len(targets) != len(rows):
        audit.not_run(
            f"{adapter.label}: {PROBE_DATA} holds {len(rows)} inputs and {len(targets)} targets; "
            f"the probe needs {LIVE_PROBE_MIN_ITEMS} or more pairs"
        )
    result = linear_probe(rows, targets)
    audit.evidence(
        metric=result.metric,
        score=result.score,
        chance=result.chance,
        null_max=result.null_max,
        p_value=result.p_value,
        n_train=result.n_train,
        n_test=result.n_test,
        permutations=PERMUTATIONS,
    )
    summary = (
        f"a ridge probe on the raw inputs scores {result.metric} {result.score:.3f} on {result.n_test} "
        f"held-out items; refitted on permuted targets it scores {result.chance:.3f} (best {result.null_max:.3f})"
    )
    if not result.signal:
        audit.disclose(
            f"{adapter.label}: no linear signal about the target in the raw input: {summary}; "
            "a model at chance here is not the model's fault",
            affects=LIVE_AFFECTS,
        )
        return
    audit.note(f"{adapter.label}: signal present: {summary}")
