"""History gate (science): what train.csv says about how the run trained (docs/checks.md §2.8).

Each finding is disclosed with the epochs where it shows and the column it was read from; a recognised
column that train.csv does not log makes the audit that needs it ``not_run``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from runaudit.capsule import TRACKERS
from runaudit.claims import metric_claims, run_claim
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.history import History, load_history
from runaudit.reader import CapsuleReader, Unavailable
from runaudit.run import Run
from runaudit.siblings import group_of, reader, seed_of

if TYPE_CHECKING:
    from runaudit.trackers import TrackerRun, TrackerUnreadable

pytestmark = pytest.mark.science

TRAINING = run_claim("training")
SELECTION = run_claim("checkpoint_selection")
LOSS_FLOOR_TOLERANCE = 1e-6  # float noise around a zero loss is not a negative loss
SPIKE_FACTOR = 10.0  # a jump of one order of magnitude
SPIKE_WINDOW = 5
RECOVERED_FACTOR = 2.0
GRAD_WINDOW = 10
GRAD_MIN_WINDOW = 5
GRAD_Z = 6.0
MAD_TO_SD = 1.4826
CONSTANT_SCHEDULES = frozenset({"constant", "none", "fixed"})
CYCLIC_SCHEDULES = ("restart", "cyclic", "sgdr", "one_cycle", "onecycle")
RESTART_TOLERANCE = 0.01
UNCOMPARED = frozenset({"epoch", "step", "lr", "wall_time_s"})  # equal across sound reruns by design


def _history(audit: AuditRecorder, run: Run, capsule: CapsuleReader) -> History:
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules carry no training history")
    return audit.need(load_history, capsule)


def _shown(epochs: list[int], limit: int = 8) -> str:
    text = ", ".join(map(str, epochs[:limit]))
    return f"{text}, ... ({len(epochs)} in all)" if len(epochs) > limit else text


def _loss_columns(history: History) -> list[str]:
    """Columns holding a loss bounded below by zero (cross-entropy, BCE, MSE ...) unless declared."""
    return [
        name
        for name in history.values
        if name == "train_loss" or name.endswith("_loss") or "cross_entropy" in name
    ]


def test_finite(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-01: any NaN or inf among the values ``train.csv`` logs is disclosed, per column with its epochs."""
    history = _history(audit, run, capsule)
    findings = {
        column: history.epochs_where(history.logged[column] & ~np.isfinite(history.values[column]))
        for column in history.values
    }
    findings = {column: epochs for column, epochs in findings.items() if epochs}
    checked = int(sum(mask.sum() for mask in history.logged.values()))
    if not findings:
        audit.note(f"{checked} logged values in {len(history.values)} columns are finite", checked=checked)
        return
    column, epochs = next(iter(findings.items()))
    audit.disclose(
        f"run {run.run_id}: train.csv logs non-finite values: "
        + "; ".join(f"{name} at epoch(s) {_shown(where)}" for name, where in findings.items())
        + " (the same step on a replay means poisoned data; a varying step, numerics or LR)",
        affects=[TRAINING, *metric_claims(run)],
        column=column,
        epochs=epochs,
        findings=findings,
    )


def test_loss_bound(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-02: a loss bounded below by 0 (``train_loss``, ``*_loss``, ``*cross_entropy*``) logged below
    ``-1e-6`` is disclosed (topic ``loss_bound``).

    A negative cross-entropy, BCE or MSE is a loss-math bug, such as scaled BCE targets.
    """
    history = _history(audit, run, capsule)
    columns = _loss_columns(history)
    findings: dict[str, dict[str, Any]] = {}
    for column in columns:
        values = history.values[column]
        below = history.logged[column] & (values < -LOSS_FLOOR_TOLERANCE)
        if below.any():
            findings[column] = {"epochs": history.epochs_where(below), "minimum": float(np.nanmin(values))}
    if not findings:
        audit.note(f"{', '.join(columns)} stay at or above 0", columns=columns)
        return
    column, found = next(iter(findings.items()))
    audit.disclose(
        f"run {run.run_id}: train.csv: a loss bounded below by 0 goes negative: "
        + "; ".join(
            f"{name} reaches {item['minimum']:.6g} at epoch(s) {_shown(item['epochs'])}"
            for name, item in findings.items()
        )
        + " (a loss-math bug such as scaled BCE targets; declare topic loss_bound if the loss is unbounded)",
        affects=[TRAINING, *metric_claims(run)],
        topic="loss_bound",
        column=column,
        epochs=found["epochs"],
        findings=findings,
    )


def _selection_target(run: Run) -> tuple[str | None, str | None]:
    """(metric, mode) the best checkpoint was selected by: run.json's selection, else the first metric."""
    checkpoints = run.get("checkpoints")
    best = checkpoints.get("best") if isinstance(checkpoints, Mapping) else None
    selection = best.get("selection") if isinstance(best, Mapping) else None
    if isinstance(selection, Mapping) and selection.get("metric") and selection.get("mode") in ("max", "min"):
        return str(selection["metric"]), str(selection["mode"])
    if run.metrics:
        metric = run.metrics[0]
        return metric.name, "max" if metric.direction == "higher" else "min"
    return None, None


def test_best_at_first_epoch(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-03: a best ``val_<metric>`` (the declared selection metric and mode, else the first protocol
    metric) at the first of at least two finite evaluations, never improved on, is disclosed (topic
    ``best_at_first_epoch``).
    """
    history = _history(audit, run, capsule)
    metric, mode = _selection_target(run)
    if metric is None:
        audit.not_run("run.json names no selection metric and no protocol metric (capsule.run_json_schema)")
    column = f"val_{metric}"
    if not history.has(column):
        audit.not_run(f"train.csv does not log {column} (recognised, optional: docs/capsule.md §6)")
    epochs, values = history.series(column)
    finite = np.isfinite(values)
    epochs, values = epochs[finite], values[finite]
    if len(values) < 2:
        audit.not_applicable(f"train.csv evaluates {column} {len(values)} time(s); no trajectory to judge")
    best = int(np.argmax(values) if mode == "max" else np.argmin(values))
    audit.evidence(column=column, mode=mode, best_epoch=int(epochs[best]), best_value=float(values[best]))
    if best != 0:
        audit.note(f"best {column} {values[best]:.6g} at epoch {int(epochs[best])} of {int(epochs[-1])}")
        return
    audit.disclose(
        f"run {run.run_id}: train.csv: the best {column} ({values[0]:.6g}) is at the first evaluation "
        f"(epoch {int(epochs[0])}) and never improves through epoch {int(epochs[-1])} "
        f"(final {values[-1]:.6g}): instability, a too-high LR, or a strong init evaluated early",
        affects=[SELECTION, *metric_claims(run)],
        topic="best_at_first_epoch",
        epochs=[int(epochs[0])],
    )


def _trailing_medians(values: np.ndarray, width: int, start: int) -> np.ndarray:
    """For each index from ``start`` on, the median of the up to ``width`` values before it (nan before
    ``start``, and where a window holds a nan). Full windows are taken at once, as one sliding view: a
    per-step log of a million rows took seconds per audit row by row."""
    medians = np.full(len(values), np.nan)
    for index in range(start, min(width, len(values))):  # the windows still filling
        medians[index] = np.median(values[:index])
    if len(values) > width:
        medians[width:] = np.median(np.lib.stride_tricks.sliding_window_view(values[:-1], width), axis=1)
    return medians


def _robust_z(values: np.ndarray) -> np.ndarray:
    """Each value's robust z against the median/MAD of the window before it (nan while it fills)."""
    scores = np.full(len(values), np.nan)
    medians = _trailing_medians(values, GRAD_WINDOW, GRAD_MIN_WINDOW)
    spreads = np.full(len(values), np.nan)
    for index in range(GRAD_MIN_WINDOW, min(GRAD_WINDOW, len(values))):
        spreads[index] = np.median(np.abs(values[:index] - medians[index]))
    if len(values) > GRAD_WINDOW:
        windows = np.lib.stride_tricks.sliding_window_view(values[:-1], GRAD_WINDOW)
        spreads[GRAD_WINDOW:] = np.median(np.abs(windows - medians[GRAD_WINDOW:, None]), axis=1)
    ready = slice(GRAD_MIN_WINDOW, None)
    floor = np.maximum(np.maximum(MAD_TO_SD * spreads[ready], 0.01 * np.abs(medians[ready])), 1e-12)
    scores[ready] = (values[ready] - medians[ready]) / floor
    return scores


def test_grad_spikes(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-05: a ``grad_norm`` above robust z 6 against the median and MAD (×1.4826) of the up to 10 values
    before it (at least 5; the spread floored at 1 % of the median) is disclosed.
    """
    history = _history(audit, run, capsule)
    if not history.has("grad_norm"):
        audit.not_run("train.csv does not log grad_norm (recognised, optional: docs/capsule.md §6)")
    epochs, values = history.series("grad_norm")
    finite = np.isfinite(values)
    epochs, values = epochs[finite], values[finite]
    if len(values) <= GRAD_MIN_WINDOW:
        audit.not_applicable(f"grad_norm has {len(values)} finite value(s); a spike needs a window before it")
    scores = _robust_z(values)
    spikes = np.flatnonzero(scores > GRAD_Z)
    audit.evidence(column="grad_norm", window=GRAD_WINDOW, threshold_z=GRAD_Z, max_z=float(np.nanmax(scores)))
    if not spikes.size:
        audit.note(f"no grad_norm spike above robust z {GRAD_Z:g} (max {np.nanmax(scores):.2f})")
        return
    where = sorted({int(epochs[index]) for index in spikes})
    audit.disclose(
        f"run {run.run_id}: train.csv: grad_norm spikes above robust z {GRAD_Z:g} at epoch(s) {_shown(where)} "
        f"(largest {values[spikes].max():.4g} vs a window median of "
        f"{np.median(values[max(0, spikes[0] - GRAD_WINDOW) : spikes[0]]):.4g})",
        affects=[TRAINING],
        epochs=where,
        spikes=[
            {"epoch": int(epochs[index]), "value": float(values[index]), "z": float(scores[index])}
            for index in spikes
        ],
    )


def test_loss_spikes(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-06: a ``train_loss`` jump to ≥ 10× the median of the up to 5 rows before it is disclosed, as
    recovered when a later value comes back within 2× that median, else as diverged.
    """
    history = _history(audit, run, capsule)
    epochs, values = history.series("train_loss")
    befores = _trailing_medians(values, SPIKE_WINDOW, 1)
    # The least finite value after each row: a spike recovered when any later value came back under 2×.
    finite_after = np.where(np.isfinite(values), values, np.inf)[::-1]
    least_after = np.concatenate([np.minimum.accumulate(finite_after)[::-1][1:], [np.inf]])
    with np.errstate(invalid="ignore"):
        jumped = (
            np.isfinite(befores) & (befores > 0) & np.isfinite(values) & (values >= SPIKE_FACTOR * befores)
        )
    spikes: list[dict[str, Any]] = [
        {
            "epoch": int(epochs[index]),
            "value": float(values[index]),
            "before": float(befores[index]),
            "recovered": bool(least_after[index] <= RECOVERED_FACTOR * befores[index]),
        }
        for index in np.flatnonzero(jumped)
    ]
    if not spikes:
        audit.note(f"no train_loss jump of {SPIKE_FACTOR:g}× over {len(values)} logged rows")
        return
    diverged = [spike for spike in spikes if not spike["recovered"]]
    audit.disclose(
        f"run {run.run_id}: train.csv: train_loss jumps ≥{SPIKE_FACTOR:g}× at epoch(s) "
        f"{_shown([spike['epoch'] for spike in spikes])} (e.g. {spikes[0]['before']:.4g} → {spikes[0]['value']:.4g}); "
        + (f"{len(diverged)} never recovered (diverged)" if diverged else "each recovered"),
        affects=[TRAINING, *metric_claims(run)] if diverged else [TRAINING],
        column="train_loss",
        epochs=[spike["epoch"] for spike in spikes],
        spikes=spikes,
    )


def _planned_epochs(run: Run) -> int | None:
    training = run.get("training")
    planned = training.get("epochs_planned") if isinstance(training, Mapping) else None
    return planned if isinstance(planned, int) and not isinstance(planned, bool) else None


def test_counters(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-10: an ``epoch`` or ``step`` that decreases between rows (noted when right after a ``resume``
    row), or a last epoch beyond ``training.epochs_planned``, is disclosed.

    This is the resume-bug signature: state restored without its counters.
    """
    history = _history(audit, run, capsule)
    resets = []
    for column in ("epoch", "step"):
        values = history.values[column]
        for index in np.flatnonzero(np.diff(values) < 0) + 1:
            resets.append(
                {
                    "column": column,
                    "row": int(index) + 2,
                    "epoch": int(values[index]) if column == "epoch" else int(history.epochs[index]),
                    "from": float(values[index - 1]),
                    "to": float(values[index]),
                    "after_resume": bool(history.resume is not None and history.resume[index]),
                }
            )
    planned = _planned_epochs(run)
    last = float(np.nanmax(history.epochs))
    beyond = planned is not None and last > planned
    audit.evidence(epochs_planned=planned, last_epoch=last)
    if not resets and not beyond:
        audit.note(
            f"epoch and step never decrease over {history.rows} rows; last epoch {last:g} ≤ planned {planned}"
        )
        return
    problems = [
        f"{item['column']} goes {item['from']:g} → {item['to']:g} at train.csv line {item['row']}"
        + (" right after a resume" if item["after_resume"] else "")
        for item in resets
    ]
    if beyond:
        problems.append(f"the last epoch {last:g} exceeds the {planned} planned")
    audit.disclose(
        f"run {run.run_id}: train.csv counters are not monotone: {'; '.join(problems[:5])} "
        "(the resume bug signature: state restored without its counters)",
        affects=[TRAINING, *metric_claims(run)],
        column=resets[0]["column"] if resets else "epoch",
        epochs=sorted({item["epoch"] for item in resets}) or [int(last)],
        resets=resets,
    )


def _schedule(run: Run) -> str | None:
    training = run.get("training")
    schedule = training.get("schedule") if isinstance(training, Mapping) else None
    return schedule.lower() if isinstance(schedule, str) and schedule else None


def test_lr_schedule(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-11: a logged ``lr`` constant over 3 or more rows under a ``training.schedule`` other than
    ``constant``/``none``/``fixed``, or (for a non-cyclic schedule) back within 1 % of its initial value
    right after a resume, is disclosed.

    A constant log means the config scalar was logged or the scheduler never stepped; a restart after a
    resume means the scheduler state was not restored and warmup or decay was replayed.
    """
    history = _history(audit, run, capsule)
    if not history.has("lr"):
        audit.not_run("train.csv does not log lr (recognised, optional: docs/capsule.md §6)")
    schedule = _schedule(run)
    if schedule is None:
        audit.not_run("run.json declares no training.schedule to hold the logged LR against")
    epochs, values = history.series("lr")
    findings: list[str] = []
    where: list[int] = []
    if (
        schedule not in CONSTANT_SCHEDULES
        and len(values) >= 3
        and np.ptp(values) <= 1e-12 * max(abs(values[0]), 1e-30)
    ):
        findings.append(
            f"the logged LR stays at {values[0]:.6g} for all {len(values)} rows under the declared "
            f"{schedule} schedule (the config scalar was logged, or the scheduler never stepped)"
        )
        where = [int(epochs[0])]
    restarts: list[int] = []
    if history.resume is not None and not any(word in schedule for word in CYCLIC_SCHEDULES):
        lr, logged = history.values["lr"], history.logged["lr"]
        start = values[0]
        for index in np.flatnonzero(history.resume & logged):
            previous = np.flatnonzero(logged[:index])
            if not previous.size:
                continue
            tolerance = RESTART_TOLERANCE * max(abs(start), 1e-30)
            if abs(lr[index] - start) <= tolerance and abs(lr[previous[-1]] - start) > 5 * tolerance:
                restarts.append(int(history.epochs[index]))
        if restarts:
            findings.append(
                f"after resuming at epoch(s) {_shown(restarts)} the LR restarts from its initial {start:.6g} "
                "(the scheduler state was not restored: warmup/decay replayed)"
            )
            where = restarts
    audit.evidence(column="lr", schedule=schedule, resume_logged=history.resume is not None)
    if not findings:
        audit.note(f"the logged LR follows a varying {schedule} schedule over {len(values)} rows")
        return
    audit.disclose(
        f"run {run.run_id}: train.csv: {'; '.join(findings)}",
        affects=[TRAINING, *metric_claims(run)],
        epochs=where,
    )


def test_early_finish(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """HIS-16: ``training.epochs_run`` below ``epochs_planned`` without ``training.early_stop: true`` is
    disclosed (topic ``early_stop``) as a probable early failure.
    """
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules carry no training history")
    training = run.get("training")
    if not isinstance(training, Mapping):
        audit.not_run("run.json declares no training block (reported by capsule.run_json_schema)")
    planned, done = training.get("epochs_planned"), training.get("epochs_run")
    if not isinstance(planned, int) or not isinstance(done, int):
        audit.not_run(
            "run.json training lacks epochs_planned/epochs_run (reported by capsule.run_json_schema)"
        )
    audit.evidence(epochs_planned=planned, epochs_run=done, early_stop=training.get("early_stop"))
    if done >= planned:
        audit.note(f"ran {done} of {planned} planned epochs")
        return
    if training.get("early_stop") is True:
        audit.note(f"stopped early at {done} of {planned} planned epochs, as run.json declares (early_stop)")
        return
    audit.disclose(
        f"run {run.run_id}: run.json: ran {done} of {planned} planned epochs without a declared early stop "
        "(a probable early failure; set training.early_stop if it was deliberate)",
        affects=[TRAINING, *metric_claims(run)],
        topic="early_stop",
        epochs=[done],
    )


def _deterministic(run: Run) -> bool:
    seed = run.get("seed")
    return isinstance(seed, Mapping) and seed.get("deterministic") is True


def _config_sha(run: Run) -> str | None:
    config = run.get("config")
    return config.get("sha256") if isinstance(config, Mapping) else None


def test_stale_repeat(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, sibling_run: Run | None
) -> None:
    """HIS-17: a ``train.csv`` series byte-identical to a sibling's (``epoch``, ``step``, ``lr``,
    ``wall_time_s`` and ``resume`` not compared) is disclosed unless both runs declare determinism with
    the same seed and config hash.

    An identical history from a different seed or config means a stale artifact, or one run reported twice.
    """
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules carry no training history")
    if sibling_run is None:
        group = group_of(run)
        audit.not_applicable(
            f"no other run shares comparison group {group} under {run.root}"
            if group
            else "run.json declares no comparison group; there is no sibling to compare"
        )
    header, rows = audit.need(capsule.csv_rows, "train.csv")
    other_header, other_rows = audit.need(reader(sibling_run).csv_rows, "train.csv")
    compared = [
        name for name in header if name not in UNCOMPARED and name in other_header and name != "resume"
    ]

    def column(name: str, names: list[str], table: list[list[str]]) -> list[str]:
        position = names.index(name)
        return [row[position].strip() for row in table if len(row) == len(names)]

    identical = [
        name
        for name in compared
        if (cells := column(name, header, rows))
        and any(cells)
        and cells == column(name, other_header, other_rows)
    ]
    audit.evidence(sibling=sibling_run.run_id, compared=compared, identical=identical)
    if not identical:
        audit.note(f"no train.csv series equals {sibling_run.run_id}'s ({len(compared)} columns compared)")
        return
    expected = (
        _deterministic(run)
        and _deterministic(sibling_run)
        and seed_of(run) == seed_of(sibling_run)
        and _config_sha(run) == _config_sha(sibling_run)
    )
    if expected:
        audit.note(
            f"{', '.join(identical)} equal {sibling_run.run_id}'s, as a deterministic rerun of the same "
            "seed and config should"
        )
        return
    epochs = [int(cell) for cell in column("epoch", header, rows) if cell.lstrip("-").isdigit()]
    audit.disclose(
        f"run {run.run_id}: train.csv {', '.join(identical)} is byte-identical to sibling {sibling_run.run_id}'s "
        f"although the runs differ in seed or config or do not declare determinism: a stale artifact was "
        "loaded, or one run was reported twice",
        affects=[TRAINING, *metric_claims(run)],
        column=identical[0],
        epochs=epochs,
    )


def _tracker_logs(run: Run, capsule: CapsuleReader) -> dict[str, TrackerRun] | TrackerUnreadable:
    """Every tracker run the capsule seals, read once per session, or why one cannot be: the audit is one
    case per tracker run and each case holds its run against all the others (300 tiny run folders, all
    re-read by every case, took 96 s)."""
    from runaudit.trackers import TrackerUnreadable, read_runs

    def read() -> dict[str, TrackerRun] | TrackerUnreadable:
        try:
            return read_runs(run.path)
        except TrackerUnreadable as exc:  # kept, so that each case reports it without reading again
            return exc

    return capsule.once("trackers", TRACKERS, read)


def _compared(
    capsule: CapsuleReader, runs: Mapping[str, TrackerRun], name: str, history: History
) -> tuple[list[str], list[str]]:
    """:func:`~runaudit.trackers.scalar_findings` of one tracker run, once per session."""
    from runaudit.trackers import scalar_findings

    return capsule.once("tracker_scalars", name, lambda: scalar_findings(runs[name], history))


def test_tracker_agrees(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, tracker_run: str | None
) -> None:
    """HIS-18: each tracker run sealed under ``trackers/`` (TensorBoard event files, a W&B offline run's
    ``.wandb`` log) shows the run train.csv holds: the same values at the same steps (or epochs), no point
    train.csv lacks, no early stop, no step logged twice with different values; it logs some train.csv column (else it is another run's log), no other
    run of the same tracker logs the same column, its hyperparameters equal config.yaml's, and a W&B summary
    keeps each metric's declared direction and shows of a train.csv column only what its values give. Read with the trackers' own reader and protobuf; a disagreement
    is disclosed: the chart and the capsule show different runs. A log whose end cuts its last record (a
    writer killed mid-record) is compared up to the cut, as the tracker charts it, and the verdict says so."""
    history = _history(audit, run, capsule)
    refused = capsule.inventory.refused_under(TRACKERS)
    if refused:  # a log that is a FIFO, a link or too deep is there but unreadable: never "no logs"
        audit.evidence(refused=list(refused[:20]))
        audit.not_run(
            f"run {run.run_id}: trackers/ holds what the capsule contract refuses: {', '.join(refused[:3])}"
            f"{' …' if len(refused) > 3 else ''} (reported by capsule.forbidden_paths and capsule.closed_world)"
        )
    if tracker_run is None:
        audit.not_applicable("the capsule seals no tracker logs (trackers/tensorboard/, trackers/wandb/)")
    from runaudit.trackers import (
        SHOWN,
        TrackerUnreadable,
        config_findings,
        direction_findings,
        kind_of,
        summary_findings,
    )

    try:
        runs = _tracker_logs(run, capsule)
    except ImportError as exc:
        audit.not_run(
            f"{exc.name} is not installed: pip install 'runaudit[trackers]' to read the tracker logs"
        )
    if isinstance(runs, TrackerUnreadable):
        audit.disclose(f"run {run.run_id}: {runs}", affects=[TRAINING, *metric_claims(run)])
        return
    compared, logged = _compared(capsule, runs, tracker_run, history)
    findings = list(compared)  # the cached list stays as it is for the other cases
    if not logged:
        names = sorted(runs[tracker_run].scalars)
        tags = ", ".join(name[:80] for name in names[:SHOWN]) + (
            f", ... ({len(names)} in all)" if len(names) > SHOWN else ""
        )
        tags = tags or "none"
        findings.append(
            f"{tracker_run}: none of its scalars ({tags}) is a train.csv column: another run's log"
        )
    duplicates = [
        (other, shared)
        for other in runs
        if other != tracker_run
        and kind_of(other) == kind_of(tracker_run)
        and (shared := sorted(set(logged) & set(_compared(capsule, runs, other, history)[1])))
    ]
    findings += [
        f"{tracker_run} and {other} both log {', '.join(shared)}: two tracker runs for one capsule"
        for other, shared in duplicates[:SHOWN]
    ]
    if len(duplicates) > SHOWN:
        findings.append(f"{tracker_run}: {len(duplicates) - SHOWN} more tracker runs log its columns too")
    with contextlib.suppress(Unavailable):  # config.yaml's own audit (capsule.config_hash) reports it
        findings += config_findings(runs[tracker_run], capsule.config())
    declared = {metric.name: metric.direction for metric in run.metrics if metric.direction}
    findings += direction_findings(runs[tracker_run], declared)
    findings += summary_findings(runs[tracker_run], history)
    audit.evidence(tracker_run=tracker_run, columns=logged, files=list(runs[tracker_run].files))
    torn = runs[tracker_run].torn
    cut = (
        f"; {', '.join(torn[:SHOWN])} (a writer killed mid-record): read up to it, as the tracker's own sync reads it"
        if torn
        else ""
    )
    if findings:
        audit.disclose(
            f"run {run.run_id}: " + "; ".join(findings) + cut, affects=[TRAINING, *metric_claims(run)]
        )
        return
    uncompared = runs[tracker_run].uncompared
    audit.note(
        f"{tracker_run}: {', '.join(logged)} agree with train.csv point for point"
        + (
            f"; config {', '.join(uncompared[:SHOWN])} not compared (past 1 MiB of JSON)"
            if uncompared
            else ""
        )
        + cut
    )
