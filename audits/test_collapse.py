"""Collapse gate (science): does the model ignore its input? (docs/checks.md §2.7)

Two kinds of evidence. Read from what the evaluation kept: the ``output`` vectors, ``pred`` and ``target``
of results.parquet and the rendered selection. Live, through the project's smoke adapter
(runaudit/adapter.py) before any GPU is rented: ``input_cosine``, ``live_output_cosine`` and
``linear_probe`` carry the ``smoke`` marker too, so ``-m smoke`` runs them, and ``live``, so an active
run keeps them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from runaudit.adapter import EVAL_BATCH, PREDICT, PROBE_DATA
from runaudit.claims import metric_claims
from runaudit.fixtures.smoke import Adapter
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.items import SHUFFLE, MissingColumn, align, keyed_scores, primary_condition
from runaudit.probes import OUTPUT_VALUES_CAP, mean_offdiagonal_cosine, scaled
from runaudit.reader import CapsuleReader
from runaudit.renders import RenderBudget, opened_render
from runaudit.run import DeclaredMetric, DeclaredTest, Run
from runaudit.statistics import ItemScores, paired_delta

if TYPE_CHECKING:
    from PIL import Image

pytestmark = pytest.mark.science

COSINE_FLAG = 0.98
COSINE_SAMPLE = 2000
COSINE_SEED = 0
PILED_SHARE = 0.5  # one class takes at least half of the predictions ...
PILED_RATIO = 2.0  # ... and at least twice its share of the targets
VIS_SIDE = 32
VIS_IDENTICAL = 0.01  # mean absolute pixel difference, as a share of the full range
VIS_IDENTICAL_SHARE = 0.9
# Renders are compared as a viewer shows them: what is transparent shows this grey level (white, the page a
# browser puts behind an image). A render that shows nothing but this background compares as blank.
VIS_BACKGROUND = 255
VIS_ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})  # modes with an alpha channel
VIS_WIDE_GREY_MODES = frozenset({"I;16", "I;16B", "I;16L", "I"})  # 16-bit grey PNGs open as these


def _rows(
    audit: AuditRecorder, capsule: CapsuleReader, test: DeclaredTest, columns: list[str]
) -> dict[str, Any]:
    """The valid, finite rows of the primary condition, one per sample, as Arrow columns.

    Read only from a table that holds to its contract: a table of millions of rows where hundreds are
    declared, or of the wrong types, is capsule.results_table's failure, and this probe says not_run.
    """
    rel = f"{test.folder}/results.parquet"
    table = audit.need(capsule.results, test)
    absent = [name for name in columns if name not in table.column_names]
    if absent:
        audit.not_run(f"{rel} has no {', '.join(absent)} column (optional, docs/capsule.md §5)")
    condition = primary_condition(test)
    frame = {
        name: np.asarray(table.column(name).to_numpy(zero_copy_only=False))
        for name in {"condition_id", "sample_id", "valid", "forward_finite"} & set(table.column_names)
    }
    keep = frame["condition_id"] == condition
    for flag in ("valid", "forward_finite"):
        if flag in frame:
            keep &= frame[flag].astype(bool)
    _, first = np.unique(frame["sample_id"][keep], return_index=True)
    rows = np.flatnonzero(keep)[np.sort(first)]
    if len(rows) < 2:
        audit.not_run(f"{rel}: condition {condition} has {len(rows)} valid sample(s); a probe needs two")
    return {"condition": condition, **{name: table.column(name).take(rows) for name in columns}}


def test_output_cosine(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """COL-01: the ``output`` vectors of distinct samples (valid, finite rows of the primary condition, at
    most 2,000 drawn with seed 0) are disclosed when their mean off-diagonal cosine is ≥ 0.98.

    The mean-centred cosine and the spread around the shared mean are kept in the evidence beside it.
    """
    import pyarrow.compute as pc

    test = audit.declared(run, declared_test)
    rows = _rows(audit, capsule, test, ["output"])
    vectors = rows["output"].combine_chunks() if hasattr(rows["output"], "combine_chunks") else rows["output"]
    if len(vectors) > COSINE_SAMPLE:
        chosen = np.random.default_rng(COSINE_SEED).choice(len(vectors), COSINE_SAMPLE, replace=False)
        vectors = vectors.take(np.sort(chosen))
    lengths = set(pc.unique(pc.list_value_length(vectors)).drop_null().to_pylist())
    if vectors.null_count or len(lengths) != 1:
        audit.not_run(
            f"{test.folder}/results.parquet: output vectors are missing or of unequal length {sorted(lengths)}"
        )
    (width,) = lengths
    if width == 0:
        audit.not_run(f"{test.folder}/results.parquet: the output vectors are empty: nothing to compare")
    if len(vectors) * width > OUTPUT_VALUES_CAP:
        audit.not_run(
            f"{test.folder}/results.parquet: {len(vectors)} output vectors of {width:,} values each, past the "
            f"{OUTPUT_VALUES_CAP:,} values this probe compares (a 17 KB table of zeros decoded to 1.15 GB and "
            "its cosines took minutes)"
        )
    # Arrow to numpy without a Python object per value: to_pylist() of 287 M floats took 11.7 GB.
    matrix = (
        pc.list_flatten(vectors)
        .to_numpy(zero_copy_only=False)
        .astype(np.float64)
        .reshape(len(vectors), width)
    )
    matrix = scaled(matrix)  # the spread below squares the values too
    cosine = mean_offdiagonal_cosine(matrix)
    centered = mean_offdiagonal_cosine(matrix, centered=True)
    mean = matrix.mean(axis=0)
    spread = float(np.linalg.norm(matrix - mean, axis=1).mean() / max(np.linalg.norm(mean), 1e-300))
    audit.evidence(
        cosine=cosine,
        cosine_centered=centered,
        n=len(matrix),
        relative_spread=spread,
        condition=rows["condition"],
    )
    if cosine < COSINE_FLAG:
        audit.note(
            f"mean off-diagonal cosine {cosine:.3f} over {len(matrix)} distinct samples (flag ≥ {COSINE_FLAG})"
        )
        return
    audit.disclose(
        f"run {run.run_id}: {test.folder}/results.parquet: outputs of {len(matrix)} distinct samples have mean "
        f"off-diagonal cosine {cosine:.4f} (≥ {COSINE_FLAG}); their spread around the shared mean is "
        f"{spread:.3f} of its norm: the model maps different inputs to nearly the same output",
        affects=metric_claims(run, [test]),
    )


def test_real_vs_shuffle(
    run: Run,
    capsule: CapsuleReader,
    audit: AuditRecorder,
    declared_metric: tuple[DeclaredTest, DeclaredMetric] | None,
) -> None:
    """COL-03: a declared ``shuffle`` condition, paired per item with the primary one, is disclosed when the
    scores are bit-identical or the 95 % interval of the difference includes 0 or favours the shuffle.

    Then the conditioning input does not drive the score.
    """
    if declared_metric is None:
        audit.declared(run, run.tests[0] if run.tests else None)
        audit.not_applicable("no declared test has applicable metrics")
    test, metric = declared_metric
    if SHUFFLE not in test.conditions:
        audit.not_applicable(f"test {test.test_id} declares no {SHUFFLE} condition")
    real = primary_condition(test)
    rel = f"{test.folder}/results.parquet"
    table = audit.need(capsule.results, test)
    try:
        (real_scores, shuffled), dropped = align(
            *(keyed_scores(table, metric, name) for name in (real, SHUFFLE))
        )
    except MissingColumn as exc:
        audit.not_run(f"{test.folder}/{exc} (reported by capsule.results_table)")
    if len(real_scores) < 2:
        audit.not_run(
            f"{rel}: {real} and {SHUFFLE} share {len(real_scores)} valid sample(s); pairing needs two"
        )
    identical = bool(np.array_equal(real_scores.values, shuffled.values))
    if metric.aggregation is None:
        audit.not_run(f"metric {metric.name} declares no aggregation (reported by capsule.run_json_schema)")
    delta, (low, high) = paired_delta(real_scores, shuffled, metric.aggregation)
    audit.evidence(
        metric=metric.name,
        delta=delta,
        ci=[low, high],
        n=len(real_scores),
        dropped=dropped,
        identical=identical,
    )
    better = delta > 0 if metric.direction == "higher" else delta < 0
    if not identical and (low > 0 or high < 0) and better:
        audit.note(
            f"{real} beats {SHUFFLE} on {metric.name} by {delta:+.4g} (95 % CI [{low:+.4g}, {high:+.4g}])"
        )
        return
    audit.disclose(
        f"run {run.run_id}: test {test.test_id}: {metric.name} under {real} and {SHUFFLE} "
        + (
            "are bit-identical per item"
            if identical
            else f"differ by {delta:+.4g} (95 % CI [{low:+.4g}, {high:+.4g}])"
        )
        + ": the conditioning input does not drive the score",
        affects=[f"test/{test.test_id}:{metric.name}"],
    )


def test_prediction_histogram(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """COL-06: ``pred`` is disclosed when one class takes at least 50 % of the predictions and at least
    twice the largest class's share of the targets, or when there are at most half as many distinct
    predictions as target classes.
    """
    test = audit.declared(run, declared_test)
    rows = _rows(audit, capsule, test, ["pred", "target"])
    predictions = np.asarray(rows["pred"].to_pylist(), dtype=object).astype(str)
    targets = np.asarray(rows["target"].to_pylist(), dtype=object).astype(str)
    classes, counts = np.unique(predictions, return_counts=True)
    top = int(np.argmax(counts))
    piled, share = str(classes[top]), float(counts[top] / len(predictions))
    target_share = float(np.mean(targets == piled))
    largest_target = float(np.max(np.unique(targets, return_counts=True)[1]) / len(targets))
    unique_targets = len(np.unique(targets))
    audit.evidence(
        n=len(predictions),
        unique_predictions=len(classes),
        unique_targets=unique_targets,
        top_class=piled,
        top_share=share,
        top_class_target_share=target_share,
        largest_target_share=largest_target,
        histogram=dict(zip(classes.tolist(), counts.tolist(), strict=True)),
    )
    piled_up = share >= PILED_SHARE and share >= PILED_RATIO * largest_target
    too_few = len(classes) * 2 <= unique_targets
    if not piled_up and not too_few:
        audit.note(
            f"{len(classes)} classes predicted for {unique_targets} present; the largest takes {share:.1%}"
        )
        return
    audit.disclose(
        f"run {run.run_id}: {test.folder}/results.parquet: predictions pile on class {piled} ({share:.1%} of "
        f"{len(predictions)}, where the targets hold {target_share:.1%} of it); {len(classes)} distinct "
        f"prediction(s) for {unique_targets} target classes",
        affects=metric_claims(run, [test]),
    )


def test_trivial_baseline(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """COL-09: top-1 accuracy from ``pred`` is disclosed unless it beats always predicting the majority
    target class on the same items with the paired 95 % interval's lower bound above 0.
    """
    test = audit.declared(run, declared_test)
    if not test.metrics_apply:
        audit.not_applicable(f"test {test.test_id} has no machine-readable ground truth")
    rows = _rows(audit, capsule, test, ["pred", "target"])
    predictions = np.asarray(rows["pred"].to_pylist(), dtype=object).astype(str)
    targets = np.asarray(rows["target"].to_pylist(), dtype=object).astype(str)
    classes, counts = np.unique(targets, return_counts=True)
    majority = str(classes[int(np.argmax(counts))])
    model = ItemScores((predictions == targets).astype(np.float64))
    trivial = ItemScores((targets == majority).astype(np.float64))
    delta, (low, high) = paired_delta(model, trivial, "mean")
    audit.evidence(
        metric="top1_from_pred",
        model=float(model.values.mean()),
        trivial=float(trivial.values.mean()),
        baseline="majority class",
        majority_class=majority,
        delta=delta,
        ci=[low, high],
        n=len(model),
    )
    if low > 0:
        audit.note(
            f"top-1 {model.values.mean():.4f} beats the majority-class baseline {trivial.values.mean():.4f} "
            f"by {delta:+.4f} (95 % CI [{low:+.4f}, {high:+.4f}])"
        )
        return
    audit.disclose(
        f"run {run.run_id}: {test.folder}/results.parquet: top-1 {model.values.mean():.4f} is not above always "
        f"predicting the majority class {majority} ({trivial.values.mean():.4f}; difference {delta:+.4f}, "
        f"95 % CI [{low:+.4f}, {high:+.4f}]): the model is no better than a trivial output",
        affects=metric_claims(run, [test]),
    )


def _thumbnails(capsule: CapsuleReader, rels: list[str], budget: RenderBudget) -> np.ndarray:
    """One row per render: its greyscale thumbnail as a viewer shows it (:func:`_as_shown`), in [0, 1]."""
    from PIL import Image

    images = []
    for rel in rels:
        with capsule.open(rel) as handle, opened_render(handle, budget) as image:
            grey = _as_shown(image).resize((VIS_SIDE, VIS_SIDE), Image.Resampling.BILINEAR)
            images.append(np.asarray(grey, dtype=np.float32).ravel() / 255.0)
    return np.stack(images)


def _as_shown(image: Image.Image) -> Image.Image:
    """``image`` in 8-bit grey as a viewer shows it: transparency composited onto :data:`VIS_BACKGROUND`,
    and 16-bit grey scaled from its full range.

    ``convert("L")`` alone drops alpha, so 400 renders transparent everywhere (400 blank pictures to a
    person) compared as the pictures under the alpha and "differed"; and it clips 16-bit grey at 255, so a
    render whose values all lie above 255 compared as white.
    """
    from PIL import Image

    if image.mode in VIS_WIDE_GREY_MODES:
        values = np.asarray(image, dtype=np.float32)  # exact: 16-bit values fit float32's 24-bit mantissa
        grey = values * (255.0 / 65535.0)
        if "transparency" in image.info:  # a tRNS grey value: those pixels show the background
            grey[values == image.info["transparency"]] = VIS_BACKGROUND
        return Image.fromarray(np.rint(grey).astype(np.uint8))
    if image.mode not in VIS_ALPHA_MODES and "transparency" not in image.info:
        return image.convert("L")
    shown = Image.new("RGBA", image.size, (VIS_BACKGROUND, VIS_BACKGROUND, VIS_BACKGROUND, 255))
    shown.alpha_composite(image.convert("RGBA"))
    return shown.convert("L")


def test_vis_identical(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, declared_test: DeclaredTest | None
) -> None:
    """COL-10: renders of different samples in one condition and role are disclosed as near-identical when
    at least 90 % of pairs of their greyscale 32×32 thumbnails differ by under 1 % of the range on average.

    A thumbnail is the render as a viewer shows it, transparency composited onto white: renders transparent
    everywhere show nothing, and are disclosed as identical blank pictures.
    """
    test = audit.declared(run, declared_test)
    rels = capsule.inventory.pngs.get(test.test_id, ())
    if not rels:
        audit.not_run(f"test {test.test_id} has no renders (reported by capsule.vis_coverage)")
    groups: dict[tuple[str, str], list[str]] = {}
    for rel in rels:
        *_, condition, role, _name = rel.split("/")
        groups.setdefault((condition, role), []).append(rel)
    shares, findings, budget = {}, [], RenderBudget()
    for (condition, role), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        try:
            thumbnails = _thumbnails(capsule, sorted(members), budget)
        except Exception as exc:  # Pillow signals bad data with several exception types
            audit.not_run(
                f"{test.folder}/vis/{condition}/{role}: a render does not decode ({exc}; capsule.vis_decode)"
            )
        # Each pair's mean absolute difference, row by row in the order of the upper triangle: one n × n ×
        # pixels temporary instead cost ~0.3 s of every session on 100 renders, thirty times this.
        pairs = np.concatenate(
            [
                np.abs(thumbnails[row + 1 :] - thumbnails[row]).mean(axis=1)
                for row in range(len(thumbnails) - 1)
            ]
        )
        share = float(np.mean(pairs < VIS_IDENTICAL))
        shares[f"{condition}/{role}"] = {"samples": len(members), "identical_pair_share": share}
        if share >= VIS_IDENTICAL_SHARE:
            blank = np.abs(thumbnails - VIS_BACKGROUND / 255.0).mean(axis=1) < VIS_IDENTICAL
            blank_note = "; all blank, only the background shows" if blank.all() else ""
            findings.append(f"{condition}/{role} ({share:.0%} of {len(pairs)} pairs{blank_note})")
    audit.evidence(groups=shares, threshold=VIS_IDENTICAL)
    if not findings:
        audit.note(f"renders differ across samples in {len(shares)} condition/role folder(s)")
        return
    audit.disclose(
        f"run {run.run_id}: {test.folder}/vis: the selected samples render near-identically in "
        f"{', '.join(findings)}: different inputs, the same picture",
        affects=metric_claims(run, [test]),
    )


# -- live probes through the smoke adapter --------------------------------------------------------

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
        array: np.ndarray = (tensor.double() if tensor.is_floating_point() else tensor).numpy()
        return array
    return np.asarray(values)


def _live_rows(values: Any) -> np.ndarray:
    """A batch as an n × d float64 matrix, one flattened sample per row."""
    array = _live_array(values)
    return array.reshape(len(array), -1).astype(np.float64)


def _live_cosines(audit: AuditRecorder, label: str, what: str, rows: np.ndarray) -> dict[str, float]:
    """Raw and mean-centred cosines, the centred one counting rows equal up to rounding as identical."""
    if not np.isfinite(rows).all():
        audit.not_run(f"{label}: the {what} hold NaN or ±inf; cosines compare finite vectors only")
    rows = scaled(rows)  # no square overflows; every ratio below is unchanged
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
    found = _live_cosines(audit, adapter.label, "evaluation inputs", rows)
    per_feature_std = float(rows.std(axis=0).mean())
    audit.evidence(**found, per_feature_std=per_feature_std)
    summary = (
        f"mean off-diagonal cosine {found['cosine']:.4f} over {found['n']} distinct inputs "
        f"(mean-centred {found['cosine_centered']:.4f}, per-feature std {per_feature_std:.3g})"
    )
    if found["cosine"] >= COSINE_FLAG:
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
    found = _live_cosines(audit, adapter.label, "model's outputs", rows)
    audit.evidence(**found)
    summary = (
        f"outputs of {found['n']} distinct inputs: mean off-diagonal cosine {found['cosine']:.4f}, "
        f"mean-centred {found['cosine_centered']:.4f}"
    )
    if found["cosine"] >= COSINE_FLAG and found["cosine_centered"] >= COSINE_FLAG:
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
    from runaudit.linear_probe import PERMUTATIONS, linear_probe

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
