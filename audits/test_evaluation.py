"""Evaluation gate: the stored numbers came from the sealed checkpoint (docs/checks.md, "Fresh re-evaluation").

Every other audit reads what the run wrote. ``evaluation.fresh`` runs the project's own evaluation again:
the best checkpoint, loaded through the smoke adapter (runaudit/adapter.py), re-scores the test
selection's items on CPU, and what it gives must be what ``results.parquet`` stores. A best.pth swapped
for another epoch's, re-bound by hash so that custody holds, or results written by another model, pass
every reading audit and fail here.

It carries the ``smoke`` gate marker: like the smoke gate, it runs the project's code through its adapter
(torch on CPU, CUDA hidden, trackers off, one thread) and fails on what it finds, which custody, the
teardown gate that needs no project code, cannot do. ``-m smoke`` therefore selects it before a launch too,
so it is also marked ``live`` and says ``not_applicable`` on an active run itself: the pre-launch gate
(``pytest --run=<active> -m smoke --strict``) is not failed by an audit that only a sealed run can feed.
torch is imported only once the adapter has answered, so a session without an adapter never imports it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from runaudit.adapter import (
    EVAL_INPUTS,
    EVAL_MODEL,
    ITEM_METRICS,
    ITEM_PREDICTIONS,
    PREDICT,
    Batch,
    ItemMetricsFn,
    ItemPredictionsFn,
)
from runaudit.fixtures.custody import Custody
from runaudit.fixtures.smoke import Adapter
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.reader import CapsuleReader
from runaudit.run import DeclaredTest, Run

pytestmark = [pytest.mark.smoke, pytest.mark.live]

# Tolerance (see test_fresh): multiples of a machine epsilon, relative to the item's largest magnitude.
STORED_ULPS = 64  # float32 round-off accumulated through a network, another batch size or another device
COMPUTE_ULPS = 8  # a coarser compute precision rounds a few times per layer
DTYPE_EPSILON = {"halffloat": 2.0**-10, "float": 2.0**-23, "double": 2.0**-52}  # Arrow's float type names
FLOAT_NAMES = {"halffloat": "float16", "float": "float32", "double": "float64"}
FP32 = "fp32"
PRECISION_EPSILON = {
    FP32: 2.0**-23,
    "tf32": 2.0**-10,
    "fp16": 2.0**-10,
    "bf16": 2.0**-7,
    "mixed": 2.0**-7,  # fp16 or bf16 autocast: the coarser
    "fp8": 2.0**-3,
}
TF32 = "tf32"  # what an fp32 run evaluated on CUDA may have computed in: cuDNN convolutions default to it
SHOWN = 3  # mismatching items named in the message; the evidence keeps more
KEPT = 20
VALUES_SHOWN = 4  # leading values of an output vector shown


@dataclass
class Tally:
    """One condition's comparison."""

    items: int = 0
    mismatched: int = 0
    unstored: int = 0  # a selected item whose stored value is null: nothing to compare
    ties: int = 0  # a differing argmax whose two classes score within the tolerance
    worst: float = 0.0  # the largest |fresh - stored| / scale seen


@dataclass(frozen=True)
class Mismatch:
    condition: str
    sample_id: str
    stored: str
    fresh: str

    def line(self) -> str:
        return f"{self.condition}/{self.sample_id}: stored {self.stored}, fresh {self.fresh}"


@dataclass
class Comparison:
    """What the stored rows are compared on, and the verdict's running counts."""

    column: str  # "output", "pred" or "m.<metric>, ..."
    ratio: float  # the tolerance as a share of each item's scale
    tallies: dict[str, Tally] = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def items(self) -> int:
        return sum(tally.items for tally in self.tallies.values())

    @property
    def mismatched(self) -> int:
        return sum(tally.mismatched for tally in self.tallies.values())


def _best(run: Run, custody: Custody, audit: AuditRecorder) -> tuple[str, Mapping[str, Any]]:
    """The best checkpoint's file name and declaration, once it is the bound file and loads safely.

    The file is handed to the project's loader only then: a file that failed its own contract is reported
    by its owner, and this audit says ``not_run``.
    """
    declared = run.get("checkpoints")
    best = declared.get("best") if isinstance(declared, Mapping) else None
    if not isinstance(best, Mapping) or not isinstance(best.get("selection"), Mapping):
        audit.not_run(
            f"run {run.run_id}: run.json declares no checkpoints.best with its selection "
            "(reported by capsule.run_json_schema)"
        )
    checkpoint = custody.checkpoint("best")
    if checkpoint.ambiguous:
        audit.not_run(
            f"run {run.run_id} holds both {' and '.join(checkpoint.found)} (reported by capsule.closed_world)"
        )
    name = checkpoint.name
    if f"{run.run_id}/{name}" not in custody.tree.files:
        audit.not_run(f"{name} is absent from run {run.run_id} (reported by capsule.required_paths)")
    if custody.hashed(f"{run.run_id}/{name}").sha256 != best.get("sha256"):
        audit.not_run(f"{name} is not the checkpoint run.json binds (reported by checkpoint.safe_load)")

    from runaudit.checkpoints import CheckpointRefused

    if isinstance(custody.inspect(name), CheckpointRefused):
        audit.not_run(f"{name} did not load safely (reported by checkpoint.safe_load)")
    return name, best


def _compute_precision(run: Run) -> str:
    """The precision the stored numbers were computed in: ``training.precision``, fp32 when undeclared, and
    tf32 for an fp32 run whose ``environment`` names a CUDA device."""
    training = run.get("training")
    declared = training.get("precision") if isinstance(training, Mapping) else None
    precision = declared if declared in PRECISION_EPSILON else FP32
    environment = run.get("environment")
    on_cuda = isinstance(environment, Mapping) and bool(
        environment.get("cuda") or environment.get("gpu") or environment.get("gpu_count")
    )
    return TF32 if precision == FP32 and on_cuda else str(precision)


def _ratio(stored_epsilon: float, precision: str) -> float:
    """``max(64 · max(ε_stored, ε_fp32), 8 · ε_compute)``: the tolerance as a share of an item's scale."""
    return max(
        STORED_ULPS * max(stored_epsilon, PRECISION_EPSILON[FP32]),
        COMPUTE_ULPS * PRECISION_EPSILON[precision],
    )


def _float_type(arrow_type: Any) -> str | None:
    """Arrow's name of the float type of a column of floats or of lists of floats; None for any other."""
    import pyarrow as pa

    value_type = arrow_type
    if (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ):
        value_type = arrow_type.value_type
    name = str(value_type)
    return name if name in DTYPE_EPSILON else None


def _rows(
    audit: AuditRecorder, table: Any, test: DeclaredTest, selected: Sequence[str]
) -> dict[str, list[int]]:
    """Condition -> the table's row of each selected sample, in selection order."""
    wanted = set(selected)
    found: dict[tuple[str, str], int] = {}
    keys = zip(table.column("condition_id").to_pylist(), table.column("sample_id").to_pylist(), strict=True)
    for row, (condition, sample) in enumerate(keys):
        if sample in wanted:
            found.setdefault((condition, sample), row)
    rows: dict[str, list[int]] = {}
    for condition in test.conditions:
        absent = [sample for sample in selected if (condition, sample) not in found]
        if absent:
            audit.not_run(
                f"{test.folder}/results.parquet has no {condition} row for {len(absent)} selected sample(s), "
                f"e.g. {absent[0]} (reported by capsule.selection)"
            )
        rows[condition] = [found[condition, sample] for sample in selected]
    return rows


def _numbers(outputs: Any) -> np.ndarray:
    """The evaluation forward's outputs as float64, one row per item."""
    detach = getattr(outputs, "detach", None)
    if callable(detach):  # a torch tensor, of any dtype and device
        outputs = detach().to("cpu").double().numpy()
    array = np.asarray(outputs, dtype=np.float64)
    return array.reshape(len(array), -1) if array.ndim else array.reshape(1, 1)


def _listed(values: Any) -> list[Any]:
    """Per-item values (numbers or labels) as a flat list of Python scalars."""
    detach = getattr(values, "detach", None)
    if callable(detach):
        values = detach().to("cpu").numpy()
    listed: list[Any] = np.asarray(values).reshape(-1).tolist()
    return listed


def _per_item(fresh: Mapping[str, Any], metric_columns: Sequence[str]) -> dict[str, np.ndarray]:
    """``m.<metric>`` -> the adapter's per-item values, for every stored metric column it computes."""
    return {
        column: _numbers(fresh[column[2:]]).reshape(-1) for column in metric_columns if column[2:] in fresh
    }


def _shown(values: np.ndarray) -> str:
    head = ", ".join(f"{value:.6g}" for value in values[:VALUES_SHOWN])
    more = ", …" if len(values) > VALUES_SHOWN else ""
    return f"[{head}{more}]"


def _close(stored: np.ndarray, fresh: np.ndarray, ratio: float, floor: float) -> tuple[bool, float]:
    """Whether ``fresh`` equals ``stored`` within ``ratio`` of their largest magnitude (at least ``floor``),
    NaN matching NaN and an infinity itself; and the largest difference as a share of that scale."""
    same = (stored == fresh) | (np.isnan(stored) & np.isnan(fresh))
    finite = np.isfinite(stored) & np.isfinite(fresh)
    scale = max(floor, float(np.abs(np.where(finite, stored, 0.0)).max(initial=0.0)))
    scale = max(scale, float(np.abs(np.where(finite, fresh, 0.0)).max(initial=0.0)))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: such elements are judged by `same`
        difference = np.where(finite, np.abs(fresh - stored), 0.0)
    worst = float(difference.max(initial=0.0)) / scale if scale > 0 else 0.0
    ok = bool(np.all(same | (finite & (difference <= ratio * scale))))
    return ok, worst if np.all(same | finite) else math.inf


def _compare_outputs(
    comparison: Comparison, condition: str, ids: Sequence[str], stored: list[Any], fresh: np.ndarray
) -> None:
    tally = comparison.tallies.setdefault(condition, Tally())
    for sample_id, value, row in zip(ids, stored, fresh, strict=True):
        if value is None:
            tally.unstored += 1
            continue
        kept = np.asarray(value if isinstance(value, list) else [value], dtype=np.float64)
        tally.items += 1
        if kept.shape != row.shape:
            ok, worst = False, math.inf
        else:
            ok, worst = _close(kept, row, comparison.ratio, 0.0)
        tally.worst = max(tally.worst, worst)
        if not ok:
            tally.mismatched += 1
            fresh_shown = _shown(row) if kept.shape == row.shape else f"{len(row)} values"
            comparison.mismatches.append(
                Mismatch(condition, sample_id, f"{_shown(kept)} ({len(kept)} values)", fresh_shown)
            )


def _compare_predictions(
    comparison: Comparison,
    condition: str,
    ids: Sequence[str],
    stored: list[Any],
    predictions: Sequence[Any],
    scores: np.ndarray | None,
) -> None:
    """Predictions compared exactly; with the default argmax (``scores`` given), a differing class that
    scores within the tolerance of the top one is a tie, not a mismatch."""
    tally = comparison.tallies.setdefault(condition, Tally())
    for position, (sample_id, value, predicted) in enumerate(zip(ids, stored, predictions, strict=True)):
        if value is None:
            tally.unstored += 1
            continue
        tally.items += 1
        if str(value) == str(predicted):
            continue
        if scores is not None and isinstance(value, int) and 0 <= value < scores.shape[1]:
            row = scores[position]
            scale = float(np.abs(row[np.isfinite(row)]).max(initial=0.0))
            with np.errstate(invalid="ignore"):  # inf - inf is no tie
                tied = bool(row[value] == row.max() or row.max() - row[value] <= comparison.ratio * scale)
            if tied:
                tally.ties += 1
                continue
        tally.mismatched += 1
        comparison.mismatches.append(Mismatch(condition, sample_id, repr(value), repr(predicted)))


def _compare_metrics(
    comparison: Comparison,
    condition: str,
    ids: Sequence[str],
    stored: Mapping[str, list[Any]],
    fresh: Mapping[str, np.ndarray],
) -> None:
    tally = comparison.tallies.setdefault(condition, Tally())
    for position, sample_id in enumerate(ids):
        values = {metric: column[position] for metric, column in stored.items()}
        if any(value is None for value in values.values()):
            tally.unstored += 1
            continue
        tally.items += 1
        differing = []
        for metric, value in values.items():
            kept, got = np.array([value], dtype=np.float64), fresh[metric][position : position + 1]
            ok, worst = _close(kept, got, comparison.ratio, 1.0)
            tally.worst = max(tally.worst, worst)
            if not ok:
                differing.append((metric, value, float(got[0])))
        if differing:
            tally.mismatched += 1
            comparison.mismatches.append(
                Mismatch(
                    condition,
                    sample_id,
                    ", ".join(f"{metric} {value:.6g}" for metric, value, _ in differing),
                    ", ".join(f"{metric} {value:.6g}" for metric, _, value in differing),
                )
            )


def test_fresh(
    run: Run,
    capsule: CapsuleReader,
    custody: Custody,
    adapter: Adapter,
    audit: AuditRecorder,
    declared_test: DeclaredTest | None,
) -> None:
    """The best checkpoint, re-scored on CPU through the project's adapter on the test selection's items
    under every declared condition, gives back the stored ``results.parquet`` rows; any differing item fails.

    The checkpoint is the one ``run.json`` ``checkpoints.best`` binds (its selection's); the items are the
    ``k`` sample ids of ``_trust/selections/<selection_id>.json``. The adapter loads the file into a fresh
    model (``smoke_eval_model``), builds the items' inputs as the evaluator does (``smoke_eval_inputs``,
    given the run's ``config.yaml``) and runs the evaluation forward (``smoke_predict``). Compared, in
    order of preference: the ``output`` vectors; else ``pred`` (the adapter's ``smoke_item_predictions``,
    by default the argmax over classes, where a differing class scoring within the tolerance of the top one
    is a tie); else every ``m.<metric>`` the adapter's ``smoke_item_metrics`` computes.

    Tolerance, per item: ``|fresh − stored| ≤ max(64 · max(ε_stored, ε_fp32), 8 · ε_compute) · s``, where
    ``ε`` is a format's machine epsilon (float16 2⁻¹⁰, float32 2⁻²³, float64 2⁻⁵², tf32 and fp16 2⁻¹⁰,
    bf16 and mixed 2⁻⁷, fp8 2⁻³), ``ε_stored`` that of the stored column's float type, ``ε_compute`` that
    of ``training.precision`` (fp32 when undeclared; tf32 for an fp32 run whose ``environment`` names a CUDA
    device, as cuDNN convolutions default to it), and ``s`` the item's largest finite magnitude, stored or fresh (at least 1
    for a metric value). NaN matches NaN, and an infinity only itself. For a float32 output of an fp32 CPU
    run that is 7.6·10⁻⁶ of the item's largest logit.

    On a live run (``active/``) and a hardware capsule it is ``not_applicable``. Without an adapter
    providing these fixtures it is ``not_run`` naming the first one missing; a checkpoint,
    table, selection or config that failed its own audit makes it ``not_run`` naming that audit, and a
    selection with nothing stored to compare is ``not_run`` too: it never passes having compared nothing.
    """
    if run.live:
        audit.not_applicable(
            f"run {run.run_id} is live in active/: evaluation.fresh re-scores a sealed capsule's best "
            "checkpoint, so it applies once the run is closed"
        )
    if run.kind == "hardware":
        audit.not_applicable(f"run {run.run_id} is a hardware capsule: it binds no checkpoint to re-score")
    test = audit.declared(run, declared_test)
    load = adapter.fixture(EVAL_MODEL, owned=True)
    build_inputs = adapter.fixture(EVAL_INPUTS, owned=True)
    predict = adapter.fixture(PREDICT)
    rel = f"{test.folder}/results.parquet"
    table = audit.need(capsule.results, test)
    selected = audit.need(capsule.selection, test)
    config = audit.need(capsule.config)
    name, best = _best(run, custody, audit)
    if not selected:
        audit.not_run(f"selection {test.selection_id} lists no sample ids (reported by capsule.selection)")

    metric_columns = [
        f"m.{metric.name}" for metric in run.metrics if f"m.{metric.name}" in table.column_names
    ]
    item_predictions: ItemPredictionsFn | None = None
    item_metrics: ItemMetricsFn | None = None
    if "output" in table.column_names:
        dtype = _float_type(table.schema.field("output").type)
        if dtype is None:
            audit.not_run(
                f"{rel}: its output column is {table.schema.field('output').type}, not floats or lists of "
                "floats (docs/capsule.md §5)"
            )
        column, stored_type = "output", FLOAT_NAMES[dtype]
    elif "pred" in table.column_names:
        column, stored_type = "pred", str(table.schema.field("pred").type)
        dtype = "float"  # a tie is judged on the fresh scores, float32 at best
        item_predictions = adapter.optional(ITEM_PREDICTIONS, None)
        if item_predictions is None and stored_type != "int64":
            audit.not_run(
                f"{adapter.label}: no adapter provides the fixture {ITEM_PREDICTIONS}, and {rel}'s pred column "
                f"is {stored_type}, not the class indices an argmax gives"
            )
    elif metric_columns:
        column, stored_type, dtype = ", ".join(metric_columns), "float64", "double"
        item_metrics = adapter.fixture(ITEM_METRICS, owned=True)
    else:
        audit.not_run(f"{rel} holds no output, pred or m.<metric> column to compare a fresh score with")
    precision = _compute_precision(run)
    comparison = Comparison(column, _ratio(DTYPE_EPSILON[dtype], precision))

    started = time.perf_counter()
    rows = _rows(audit, table, test, selected)
    model = adapter.call(EVAL_MODEL, load, run.path / name, config, owned=True)
    for condition in test.conditions:
        batch: Batch = adapter.call(
            EVAL_INPUTS, build_inputs, test.test_id, condition, list(selected), config, owned=True
        )
        if not hasattr(batch, "inputs"):
            adapter.broken(
                f"{EVAL_INPUTS} returned {type(batch).__name__}, not a Batch(inputs, targets)", owned=True
            )
        outputs = adapter.call(PREDICT, predict, model, batch.inputs)
        scores = adapter.call(f"reading the outputs of {PREDICT} as numbers", _numbers, outputs, owned=True)
        audit.require(
            len(scores) == len(selected),
            f"run {run.run_id}: {PREDICT} gave {len(scores)} output row(s) for the {len(selected)} selected "
            f"items of test {test.test_id} under {condition}",
        )
        if item_metrics is not None:
            fresh = adapter.call(
                ITEM_METRICS, item_metrics, outputs, getattr(batch, "targets", None), owned=True
            )
            given = adapter.call(
                f"reading what {ITEM_METRICS} returned as per-item numbers",
                _per_item,
                fresh,
                metric_columns,
                owned=True,
            )
            if not given:
                audit.not_run(
                    f"{adapter.label}: {ITEM_METRICS} computes none of the protocol metrics "
                    f"{', '.join(metric_columns)} stored in {rel}"
                )
            audit.require(
                all(len(values) == len(selected) for values in given.values()),
                f"run {run.run_id}: {ITEM_METRICS} gave per-item values of lengths "
                f"{sorted({len(values) for values in given.values()})} for {len(selected)} items",
            )
            comparison.column = ", ".join(given)
            stored_metrics = {
                metric_column: table.column(metric_column).take(rows[condition]).to_pylist()
                for metric_column in given
            }
            _compare_metrics(comparison, condition, selected, stored_metrics, given)
            continue
        stored = table.column(column).take(rows[condition]).to_pylist()
        if column == "output":
            _compare_outputs(comparison, condition, selected, stored, scores)
        elif item_predictions is not None:
            predictions = adapter.call(ITEM_PREDICTIONS, item_predictions, outputs, owned=True)
            predicted = adapter.call(
                f"reading what {ITEM_PREDICTIONS} returned", _listed, predictions, owned=True
            )
            audit.require(
                len(predicted) == len(selected),
                f"run {run.run_id}: {ITEM_PREDICTIONS} gave {len(predicted)} prediction(s) for {len(selected)} items",
            )
            _compare_predictions(comparison, condition, selected, stored, predicted, None)
        else:
            _compare_predictions(
                comparison, condition, selected, stored, scores.argmax(axis=1).tolist(), scores
            )
    elapsed = time.perf_counter() - started

    compared, mismatched = comparison.items, comparison.mismatched
    where = f"run {run.run_id}: {name} (epoch {best.get('epoch')})"
    conditions = ", ".join(test.conditions)
    tolerance = (
        f"|Δ| ≤ {comparison.ratio:.2g} of each item's scale ({stored_type} stored, {precision} compute)"
    )
    audit.evidence(
        checkpoint={
            "file": name,
            "sha256": best.get("sha256"),
            "epoch": best.get("epoch"),
            "step": best.get("step"),
        },
        compared=comparison.column,
        items=compared,
        mismatched=mismatched,
        selected=len(selected),
        tolerance={
            "ratio": comparison.ratio,
            "stored_type": stored_type,
            "compute_precision": precision,
            "rule": "max(64*max(eps_stored, eps_fp32), 8*eps_compute) * item scale",
        },
        conditions={
            condition: {
                "items": tally.items,
                "mismatched": tally.mismatched,
                "unstored": tally.unstored,
                "ties": tally.ties,
                "max_scaled_difference": tally.worst if math.isfinite(tally.worst) else None,
            }
            for condition, tally in comparison.tallies.items()
        },
        mismatches=[vars(item) for item in comparison.mismatches[:KEPT]],
        seconds=round(elapsed, 3),
    )
    if compared == 0:
        audit.not_run(
            f"{where}: none of the {len(selected)} selected items of test {test.test_id} has a stored "
            f"{comparison.column} value to compare with"
        )
    audit.require(
        mismatched == 0,
        f"{where} re-scored on CPU gives other numbers than {rel} stores for {mismatched}/{compared} selected "
        f"items under {conditions} (compared: {comparison.column}; {tolerance}): the stored results did not "
        f"come from this checkpoint through the project's evaluation; first: "
        + "; ".join(item.line() for item in comparison.mismatches[:SHOWN]),
    )
    audit.note(
        f"{where} re-scored on CPU: {compared}/{compared} selected items of test {test.test_id} under "
        f"{conditions} give the stored {comparison.column} ({tolerance})"
    )
