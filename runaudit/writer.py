"""Write a capsule from your own training loop: the one way every producer writes (docs/capsule.md).

A dozen lines in a plain PyTorch loop::

    from runaudit.writer import Dataset, Split, open_run

    with open_run("runs", "mlp-s0", task="classification", config=config, metrics=["accuracy"],
                  data=Dataset.of("my-data", "1", x, y), split=Split("my-split", "random", 800, 100, 100),
                  seed=0, epochs=10, batch_size=32) as run:
        for epoch in range(run.epoch + 1, 11):
            ...  # train one epoch
            run.log(epoch=epoch, step=step, train_loss=loss, val_accuracy=val_accuracy)
            run.checkpoint(model, epoch=epoch, step=step, value=val_accuracy, state={"optimizer": ...})
        with run.test(sample_ids=test_ids) as test:
            test.score("clean", test_ids, accuracy=correct, target=y_test, pred=predicted)
            for sample_id in test.selected:
                test.render("clean", sample_id, input=image_of(sample_id), prediction=plot_of(sample_id))
    run.close()  # seals active/mlp-s0 as export/mlp-s0 through `runaudit close`, or says why not

What the writer guarantees, so that the closure audits hold by construction:

- ``active/<run_id>`` has one writer at a time (an advisory lock the kernel drops when the process dies);
  reopening a run resumes it: ``config.yaml`` must be the same, ``train.csv`` keeps the rows up to the
  last checkpoint (none before the first: later rows are logged again by the resumed loop), and
  :meth:`RunWriter.resume_state` gives back what the last checkpoint saved.
- a checkpoint is one commit: its files are staged, the writer's state naming them is written, then they
  are renamed into place, so a crash at any moment leaves the last checkpoint whole (its best and latest
  files, the state and train.csv agreeing) or the new one, finished by the next open.
- reopening a finished run to go on with it withdraws its ``run.json`` and ``last`` at the first change:
  a crash before the next :meth:`RunWriter.finish` cannot leave the earlier finish to be sealed.
- every file lands atomically (temp sibling, fsync, rename); a ``train.csv`` row is one append: a row
  torn by a crash is dropped on reopen, one whose write failed is cut off at once.
- ``best`` follows the declared selection (metric, split, mode) and carries its lineage (epoch, step,
  value); ``last`` is the final state; ``latest.pth``, the resume anchor, stays in ``active/``.
- ``metrics.json`` is derived from the per-item rows of ``results.parquet`` with the aggregation that
  ``capsule.metrics_rederived`` re-derives it with; the visual selection is fixed once per test set
  (K = min(100, n_test)) and every condition × role × selected sample is rendered, or nothing is written.
- ``run.json`` is filled from what can be known (source commit and tree, environment, seeds and
  determinism flags, training counters); the bindings of the sealed bytes are added by ``runaudit close``.

Bad use raises :class:`WriterError`, one line saying what was expected and what was found. torch is
imported only to save or load a ``.pth``; safetensors only for ``.safetensors``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import operator
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from runaudit.atomic import fsync_dir, write_atomic, write_bytes_atomic, write_json_atomic
from runaudit.ids import duplicates, is_safe_id, run_id_problem
from runaudit.manifest import load_json
from runaudit.provenance import determinism, environment, source_identity
from runaudit.safeio import JSON_CAP, is_regular, read_regular
from runaudit.scoring import Metric, RunFacts, TestWriter, as_numpy
from runaudit.usage import WriterError
from runaudit.workspace import LOCK_FILE, STATE_FILE, touch_heartbeat, try_lock

__all__ = [
    "Dataset",
    "Metric",
    "RunWriter",
    "SealRefused",
    "Selection",
    "Split",
    "TestWriter",
    "WriterError",
    "open_run",
]

CHECKPOINT_FORMATS = {"torch": ".pth", "safetensors": ".safetensors"}
TASKS = (
    "classification",
    "detection",
    "segmentation",
    "reconstruction",
    "generation",
    "language_model",
    "rl",
    "other",
)
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "mixed")
AGGREGATIONS = ("mean", "median", "sum_ratio", "iqm")
HISTORY_REQUIRED = ("epoch", "step", "train_loss")
RESERVED_STATE_KEYS = frozenset({"model", "epoch", "step", "selection"})
SELECTION_CAP = 100  # docs/capsule.md §7: K = min(100, n_test)
SAVES_KEPT = 20  # the recent checkpoint saves kept in the state file, for the cadence audit
STATE_HINT = "it is the writer's bookkeeping of this run: restore it, or start a new run id"
HISTORY_CAP = 1 << 30  # train.csv of a long step-level run; past this the file is not the writer's
LATEST = "latest.pth"
STAGED = ".staged"  # a checkpoint file written but not yet the run's: ``.<name>.staged`` beside it


class SealRefused(WriterError):
    """``runaudit close`` quarantined the run; the message holds its reasons and where the attempt is."""


# -- what the user declares ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """The dataset's identity: an id, a version and the SHA-256 of its content (no paths into caches)."""

    dataset_id: str
    version: str
    content_sha256: str

    @classmethod
    def of(cls, dataset_id: str, version: str, *content: Any) -> Dataset:
        """The identity of in-memory content: numpy arrays, tensors, bytes or files, hashed in order."""
        digest = hashlib.sha256()
        for item in content:
            digest.update(_content_bytes(item))
        return cls(dataset_id, str(version), digest.hexdigest())


@dataclass(frozen=True)
class Split:
    """The split's identity and counts; ``manifest`` (columns of docs/capsule.md §8, or a parquet file) is
    written to ``_trust/splits/<split_id>.parquet`` once and bound by its SHA-256."""

    split_id: str
    scheme: Literal["official", "random", "stratified", "group", "temporal", "custom"]
    train: int
    val: int
    test: int
    manifest: Mapping[str, Any] | Path | None = None
    group_key: str | None = None
    time_key: str | None = None


@dataclass(frozen=True)
class Selection:
    """Which checkpoint is ``best``: the validation metric it maximises or minimises."""

    metric: str
    mode: Literal["max", "min"]
    split: str = "val"


# -- the writer -----------------------------------------------------------------------------------------


@dataclass
class _Lineage:
    epoch: int
    step: int
    value: float | None = None

    def document(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step, "value": self.value}


@dataclass
class _History:
    """``train.csv``, appended one row per :meth:`RunWriter.log` call."""

    path: Path
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    resumed: bool = False
    torn: bool = False  # a failed row could not be cut off: only a reopen (which drops it) goes on
    kept: list[dict[str, str]] = field(default_factory=list)  # the rows up to the last checkpoint
    torn_end: bool = False  # the file ends in a row a crash tore

    def load(self, upto_step: int | None) -> None:
        """The rows already written; those past ``upto_step`` (the last checkpoint's; before the first
        checkpoint, all) are logged again by the resumed loop, so they go once training goes on
        (:meth:`settle`). Until then they stay: a finished run reopened and let go, finished again or scored
        keeps every row its run.json counts, and the row that shows its best was chosen wrongly."""
        if not self.path.is_file():
            return
        try:
            text = read_regular(self.path, HISTORY_CAP).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise WriterError(f"{self.path}: the run's train.csv cannot be continued ({exc})") from None
        complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]  # a torn last row
        reader = csv.DictReader(io.StringIO(complete))
        self.columns = list(reader.fieldnames or [])
        self.rows = [dict(row) for row in reader]
        self.kept = [
            row for row in self.rows if upto_step is not None and _int_cell(row.get("step")) <= upto_step
        ]
        self.resumed = bool(self.kept)
        self.torn_end = complete != text

    def settle(self, *, training: bool) -> None:
        """Cut a torn last row off the file and, when ``training`` goes on, the rows past the last
        checkpoint: the resumed loop logs them again."""
        cut = training and len(self.kept) < len(self.rows)
        if cut:
            self.rows = list(self.kept)
        if cut or self.torn_end:
            write_bytes_atomic(self.path, self._render(self.rows, header=True))
            self.torn_end = False
        if training:
            self.kept = self.rows

    def append(self, values: Mapping[str, Any]) -> None:
        if not self.columns:
            self.columns = [
                *HISTORY_REQUIRED,
                *(key for key in values if key not in HISTORY_REQUIRED),
                "resume",
            ]
            write_bytes_atomic(self.path, self._render([], header=True))
        unknown = [key for key in values if key not in self.columns]
        if unknown:
            raise WriterError(
                f"{self.path}: train.csv's columns were fixed by its first row ({', '.join(self.columns)}); "
                f"found new column(s) {', '.join(unknown)}: log them from the first row on (None is an empty cell)"
            )
        row = {key: _cell(key, values.get(key)) for key in self.columns if key != "resume"}
        row["resume"] = "true" if self.resumed else "false"
        last = self.rows[-1] if self.rows else None
        for name in ("epoch", "step"):
            if last is not None and _int_cell(row[name]) < _int_cell(last[name]):
                raise WriterError(
                    f"{self.path}: {name} {row[name]} comes after {name} {last[name]}; train.csv's counters never "
                    "go back (a resumed loop starts after run.epoch and run.step)"
                )
        if self.torn:
            raise WriterError(f"{self.path}: a row could not be written nor cut off; reopen the run to go on")
        self._append(self._render([row], header=False), row)
        self.resumed = False
        self.rows.append(row)

    def _append(self, data: bytes, row: Mapping[str, str]) -> None:
        """One write per row, unbuffered: a crash tears at most this row, and a write that fails (a full
        disk, a file size limit) is cut off at once, before a later row can join its torn end."""
        handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            before = os.fstat(handle).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(handle, view) :]
                os.fsync(handle)
            except OSError as exc:
                try:
                    os.ftruncate(handle, before)
                except OSError:
                    self.torn = True
                raise WriterError(
                    f"{self.path}: the row of epoch {row['epoch']}, step {row['step']} was not written "
                    f"({exc.strerror or exc}); train.csv holds the rows before it"
                ) from None
        finally:
            os.close(handle)

    def _render(self, rows: Iterable[Mapping[str, str]], *, header: bool) -> bytes:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, lineterminator="\n", extrasaction="ignore")
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue().encode("utf-8")

    def last(self, column: str) -> int:
        return max((_int_cell(row.get(column)) for row in self.rows), default=0)

    def value_at(self, column: str, epoch: int, step: int) -> float | None:
        for row in self.rows:
            if (
                _int_cell(row.get("epoch")) == epoch
                and _int_cell(row.get("step")) == step
                and row.get(column)
            ):
                return float(row[column])
        return None


class RunWriter:
    """One run being written under ``<root>/active/<run_id>``; :func:`open_run` is its constructor."""

    def __init__(
        self,
        root: str | Path,
        run_id: str,
        *,
        task: str,
        config: Mapping[str, Any] | Path,
        metrics: Sequence[Metric | str],
        data: Dataset,
        split: Split,
        seed: int | Sequence[int],
        epochs: int,
        batch_size: int,
        selection: Selection | None = None,
        precision: str = "fp32",
        schedule: str | None = None,
        checkpoint_format: str = "torch",
        protocol_id: str | None = None,
        comparison: Mapping[str, Any] | None = None,
        worker_seeding: bool = False,
        entrypoint: str | None = None,
        source_dir: str | Path | None = None,
    ) -> None:
        """Open (or resume) ``<root>/active/<run_id>`` for writing.

        ``metrics`` are the protocol's metrics (a bare name is a ``higher``-is-better mean at 4 decimals);
        ``selection`` picks ``best`` (default: the first metric on ``val``, max or min by its direction);
        ``checkpoint_format`` is ``torch`` (``.pth``) or ``safetensors``; ``epochs`` and ``batch_size`` are
        the planned epochs and the effective batch. ``entrypoint`` and ``source_dir`` default to the running
        script and its folder (its git commit, dirty flag and tree hash go into ``run.json``).
        """
        if problem := run_id_problem(run_id):
            raise WriterError(problem)
        _choose("task", task, TASKS)
        _choose("precision", precision, PRECISIONS)
        _choose("checkpoint_format", checkpoint_format, tuple(CHECKPOINT_FORMATS))
        self.root = Path(root).resolve()
        self.run_id = run_id
        self.folder = self.root / "active" / run_id
        self.task = task
        self.metrics = tuple(_metric(item) for item in metrics)
        if not self.metrics:
            raise WriterError(f"run {run_id}: declare at least one protocol metric (metrics=[...])")
        if repeated := duplicates(spec.name for spec in self.metrics):
            raise WriterError(f"run {run_id}: metrics named more than once: {', '.join(repeated)}")
        for spec in self.metrics:
            _checked_id("metric", spec.name)
            _choose(f"metric {spec.name} direction", spec.direction, ("higher", "lower"))
            _choose(f"metric {spec.name} aggregation", spec.aggregation, AGGREGATIONS)
            if not 0 <= spec.precision <= 12:
                raise WriterError(
                    f"metric {spec.name}: precision must be 0-12 decimals, found {spec.precision}"
                )
        self.data = data
        self.split = split
        _checked_id("dataset id", data.dataset_id)
        _checked_id("split id", split.split_id)
        self.seeds = [seed] if isinstance(seed, int) else [int(value) for value in seed]
        self.epochs, self.batch_size = (
            _counter(run_id, "epochs", epochs),
            _counter(run_id, "batch_size", batch_size),
        )
        self.selection = selection or _default_selection(self.metrics[0])
        if self.selection.metric not in {spec.name for spec in self.metrics}:
            raise WriterError(
                f"run {run_id}: the selection metric {self.selection.metric!r} is not a protocol metric "
                f"({', '.join(spec.name for spec in self.metrics)})"
            )
        self.precision, self.schedule = precision, schedule
        self.suffix = CHECKPOINT_FORMATS[checkpoint_format]
        self.protocol_id = protocol_id or f"{data.dataset_id}-{'-'.join(spec.name for spec in self.metrics)}"
        _checked_id("protocol id", self.protocol_id)
        self.comparison = dict(comparison) if comparison is not None else None
        self.worker_seeding = worker_seeding
        self.entrypoint = entrypoint
        self.source_dir = Path(source_dir) if source_dir is not None else None
        self.declarations: list[dict[str, str]] = []
        self.saves: list[dict[str, Any]] = []
        self.tests: dict[str, dict[str, Any]] = {}
        self.selections: dict[str, int] = {}
        self.best: _Lineage | None = None
        self.latest: _Lineage | None = None
        self.best_written_without_metric = False
        self._lock: IO[bytes] | None = None
        self._finished = False
        self._changed = False

        if (self.root / "export" / run_id).exists():
            raise WriterError(
                f"run {run_id}: {self.root / 'export' / run_id} is already sealed; a re-run mints a new run id"
            )
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriterError(f"run {run_id}: cannot create {self.folder}: {exc.strerror or exc}") from None
        self._acquire()
        try:
            self._pin_config(config)
            self._restore()
            self.split_manifest_sha256 = self._bind_split_manifest()
        except BaseException:
            self.release()
            raise
        touch_heartbeat(self.folder)

    # -- opening and resuming --------------------------------------------------------------------------

    def _acquire(self) -> None:
        try:
            handle = try_lock(self.folder)
        except OSError as exc:
            raise WriterError(
                f"run {self.run_id}: cannot lock {self.folder / LOCK_FILE}: {exc.strerror}"
            ) from None
        if handle is None:
            raise WriterError(
                f"run {self.run_id}: another process is writing or closing {self.folder}; one writer per run"
            )
        self._lock = handle

    def release(self) -> None:
        """Let go of the folder without finishing it (after a failure): it stays as it is, and reopening
        the run resumes it."""
        lock = getattr(self, "_lock", None)  # absent when the constructor refused its arguments
        if lock is not None:
            lock.close()  # closing drops the flock
            self._lock = None

    def _pin_config(self, config: Mapping[str, Any] | Path) -> None:
        import yaml

        if isinstance(config, (str, Path)):
            try:
                wanted = Path(config).read_bytes()
            except OSError as exc:
                raise WriterError(
                    f"run {self.run_id}: config {config} cannot be read: {exc.strerror or exc}"
                ) from None
            if not isinstance(yaml.safe_load(wanted), dict):
                raise WriterError(
                    f"run {self.run_id}: {config} must hold one YAML mapping (the resolved config)"
                )
        else:
            wanted = yaml.safe_dump(_plain(config), sort_keys=True).encode("utf-8")
        target = self.folder / "config.yaml"
        if target.is_file():
            if target.read_bytes() != wanted:
                raise WriterError(
                    f"run {self.run_id}: {target} holds another configuration than the one given; resume with "
                    "the same config or start a new run id"
                )
            return
        write_bytes_atomic(target, wanted)

    def _restore(self) -> None:
        state_path = self.folder / STATE_FILE
        saved = _saved_state_file(state_path) if os.path.lexists(state_path) else {}
        if saved.get("suffix", self.suffix) != self.suffix:
            raise WriterError(
                f"run {self.run_id}: its checkpoints are {saved['suffix']} files; resume with the same format"
            )
        for name in ("best", "latest"):
            if isinstance(saved.get(name), dict):
                try:
                    lineage = _Lineage(**saved[name])
                except TypeError:
                    lineage = None
                if lineage is None or not _is_lineage(lineage):
                    raise WriterError(f"{state_path}: its {name} record is not the writer's; {STATE_HINT}")
                setattr(self, name, lineage)
        kinds = {"tests": dict, "selections": dict, "declarations": list, "saves": list, "staged": list}
        for name, kind in kinds.items():
            if not isinstance(saved.get(name, kind()), kind):
                raise WriterError(f"{state_path}: its {name} record is not the writer's; {STATE_HINT}")
        self.best_written_without_metric = bool(saved.get("best_without_metric"))
        self.tests = dict(saved.get("tests", {}))
        self.selections = dict(saved.get("selections", {}))
        self.declarations = list(saved.get("declarations", []))
        self.saves = [item for item in saved.get("saves", []) if isinstance(item, dict)]
        self._settle_staged(saved.get("staged", []), state_path)
        self.history = _History(self.folder / "train.csv")
        self.history.load(self.latest.step if self.latest is not None else None)
        self._changed = False  # see _open_for_writing

    def _settle_staged(self, committed: Any, state_path: Path) -> None:
        """Finish the checkpoint whose state was written but whose files were not all renamed into place;
        discard files staged by one whose state never was (the last checkpoint is then whole as it was)."""
        names = {f"best{self.suffix}", LATEST}
        if not all(isinstance(name, str) for name in committed) or not set(committed) <= names:
            raise WriterError(f"{state_path}: its staged record is not the writer's; {STATE_HINT}")
        for name in sorted(names):
            staged = self.folder / f".{name}{STAGED}"
            if name in committed and os.path.lexists(staged):
                if not is_regular(staged):
                    raise WriterError(f"{staged}: not the regular file the writer staged; {STATE_HINT}")
                os.replace(staged, self.folder / name)
            elif name not in committed:
                staged.unlink(missing_ok=True)
        fsync_dir(self.folder)
        if committed:
            self._save_state()

    def _save_state(self, staged: Sequence[str] = ()) -> None:
        """Write the writer's bookkeeping; ``staged``: the checkpoint files this state commits, still
        under their staged names (:meth:`_settle_staged` renames them if the process dies first)."""
        state = {
            "suffix": self.suffix,
            "best": self.best.document() if self.best else None,
            "latest": self.latest.document() if self.latest else None,
            "best_without_metric": self.best_written_without_metric,
            "tests": self.tests,
            "selections": self.selections,
            "declarations": self.declarations,
            "saves": self.saves,
            "staged": list(staged),
        }
        write_json_atomic(self.folder / STATE_FILE, state)

    def _bind_split_manifest(self) -> str | None:
        manifest = self.split.manifest
        if manifest is None:
            return None
        target = self.root / "_trust" / "splits" / f"{self.split.split_id}.parquet"
        wanted = (
            Path(manifest).read_bytes() if isinstance(manifest, (str, Path)) else _parquet_bytes(manifest)
        )
        if target.is_file():
            existing = target.read_bytes()
            if not _same_table(existing, wanted):
                raise WriterError(
                    f"run {self.run_id}: {target} already fixes split {self.split.split_id} with other bytes; "
                    "a split manifest is written once and never replaced"
                )
            return hashlib.sha256(existing).hexdigest()
        write_bytes_atomic(target, wanted)
        return hashlib.sha256(wanted).hexdigest()

    # -- training ----------------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch of the last checkpoint (0 for a fresh run): the loop resumes after it."""
        return self.latest.epoch if self.latest is not None else 0

    @property
    def step(self) -> int:
        """The global step of the last checkpoint (0 for a fresh run)."""
        return self.latest.step if self.latest is not None else 0

    @property
    def columns(self) -> tuple[str, ...]:
        """``train.csv``'s columns, fixed by its first row (empty before it): what :meth:`log` accepts."""
        return tuple(self.history.columns)

    @property
    def resumed(self) -> bool:
        return self.latest is not None

    def log(self, *, epoch: int, step: int, train_loss: float, **values: float | int | bool | None) -> None:
        """One row of ``train.csv``. Validation metrics go in as ``val_<metric>`` (what ``best`` is
        checked against); the first row fixes the columns."""
        self._open_for_writing()
        epoch, step = _counter(self.run_id, "epoch", epoch), _counter(self.run_id, "step", step)
        if "resume" in values:
            raise WriterError(f"run {self.run_id}: train.csv's resume column is the writer's to set")
        self.history.settle(training=True)
        self.history.append({"epoch": epoch, "step": step, "train_loss": train_loss, **values})
        touch_heartbeat(self.folder)

    def heartbeat(self) -> None:
        """Say "still alive" between logged rows: call it inside an epoch longer than `runaudit watch`'s
        --stall-after (it only touches ``.heartbeat``; no row is written)."""
        self._open_for_writing()
        touch_heartbeat(self.folder)

    def checkpoint(
        self,
        model: Any,
        *,
        epoch: int,
        step: int,
        value: float | None = None,
        best: bool = False,
        state: Mapping[str, Any] | None = None,
    ) -> bool:
        """Save the resume anchor (``latest.pth``: weights, ``state``, epoch, step) and, when ``value`` of
        the selection metric improves on the best so far (or ``best=True`` without a metric, once),
        the ``best`` checkpoint with its lineage. Returns whether this became ``best``.

        ``model`` is a module or its state dict; ``state`` holds whatever else a resume needs (optimizer,
        scheduler, RNG states; objects with a ``state_dict`` are saved as it) and comes back from
        :meth:`resume_state` and :meth:`restore`.
        """
        self._open_for_writing()
        self.history.settle(training=True)
        epoch, step = _counter(self.run_id, "epoch", epoch), _counter(self.run_id, "step", step)
        if value is not None:
            value = _number(self.run_id, "checkpoint value", value)
        weights = _state_dict(model)
        extra = {name: _saved_state(value) for name, value in (state or {}).items()}
        clash = sorted(RESERVED_STATE_KEYS & set(extra))
        if clash:
            raise WriterError(f"run {self.run_id}: checkpoint state may not use the writer's keys {clash}")
        for name, kept in extra.items():
            if not loads_without_pickle(kept):
                raise WriterError(
                    f"run {self.run_id}: checkpoint state {name!r} holds {_kind_of(kept)}, which "
                    "torch.load(weights_only=True) cannot read back to resume; save tensors, numbers, strings "
                    "and lists or dicts of them (numpy arrays as torch.from_numpy(...))"
                )
        if value is not None and not math.isfinite(float(value)):
            raise WriterError(f"run {self.run_id}: selection value {value!r} at epoch {epoch} is not finite")
        improves = value is not None and (
            self.best is None
            or self.best.value is None
            or (
                float(value) > self.best.value
                if self.selection.mode == "max"
                else float(value) < self.best.value
            )
        )
        if best and value is None:
            if self.best_written_without_metric or self.best is not None:
                raise WriterError(
                    f"run {self.run_id}: a second best checkpoint without a metric (epoch {epoch}); pass "
                    f"value= of {self.selection.metric} so that the writer chooses, as checkpoint.selection checks"
                )
            self.best_written_without_metric = True
            improves = True
        began = time.monotonic()
        staged: list[str] = []
        chosen = self.best
        earlier = (self.best, self.latest, self.saves)
        try:
            if improves:
                logged = self.history.value_at(f"val_{self.selection.metric}", epoch, step)
                if (
                    value is not None
                    and logged is not None
                    and not math.isclose(logged, float(value), rel_tol=1e-9)
                ):
                    raise WriterError(
                        f"run {self.run_id}: best value {value} at epoch {epoch} differs from train.csv's "
                        f"val_{self.selection.metric} {logged}; log and select the same number"
                    )
                lineage = _Lineage(epoch, step, None if value is None else float(value))
                selection = {
                    "metric": self.selection.metric,
                    "split": self.selection.split,
                    "mode": self.selection.mode,
                    "value": lineage.value,
                }
                staged.append(f"best{self.suffix}")
                self._save_weights(self._staged(staged[-1]), weights, epoch, step, selection)
                chosen = lineage
            anchor = {"model": weights, "epoch": epoch, "step": step, **extra}
            staged.append(LATEST)
            _torch_save(self._staged(LATEST), anchor)
            # When and how long each save took: preflight.checkpoint_cadence weighs them against the
            # interruption rate (Young/Daly), while the run trains.
            saved = {
                "at": round(time.time(), 3),
                "seconds": round(time.monotonic() - began, 4),
                "epoch": epoch,
                "step": step,
            }
            self.best, self.latest = chosen, _Lineage(epoch, step)
            self.saves = [*self.saves, saved][-SAVES_KEPT:]
            self._save_state(staged)  # the commit: from here a reopen finishes what follows
        except OSError as exc:
            # The state is the commit: where it was not written the disk is at the last checkpoint, and so
            # is the writer now; staged files stay for the next open (or checkpoint) to settle by the state.
            self.best, self.latest, self.saves = earlier
            raise WriterError(
                f"run {self.run_id}: the checkpoint of epoch {epoch}, step {step} was not written "
                f"({exc.strerror or exc}); the run is at its last checkpoint, epoch {self.epoch}"
            ) from None
        for name in staged:
            os.replace(self._staged(name), self.folder / name)
        fsync_dir(self.folder)
        self._save_state()
        return improves

    def _staged(self, name: str) -> Path:
        return self.folder / f".{name}{STAGED}"

    def resume_state(self) -> dict[str, Any] | None:
        """What the last :meth:`checkpoint` saved (``model`` weights, ``epoch``, ``step`` and the ``state``
        keys), loaded with ``weights_only=True``; None for a fresh run."""
        latest = self.folder / LATEST
        if self.latest is None:
            return None
        if not is_regular(latest):
            raise WriterError(
                f"run {self.run_id}: its state names a checkpoint at epoch {self.latest.epoch}, but {latest} is "
                "not a regular file; restore it, or start a new run id"
            )
        import torch

        loaded: dict[str, Any] = torch.load(latest, weights_only=True, map_location="cpu")
        return loaded

    def restore(self, model: Any, **objects: Any) -> bool:
        """Load the last checkpoint into ``model`` and each named object (``optimizer=optimizer``: its
        ``load_state_dict`` gets what :meth:`checkpoint` saved under that name). False for a fresh run."""
        saved = self.resume_state()
        if saved is None:
            return False
        model.load_state_dict(saved["model"])
        for name, target in objects.items():
            if name not in saved:
                raise WriterError(f"run {self.run_id}: the last checkpoint saved no {name!r} to restore")
            target.load_state_dict(saved[name])
        return True

    def best_weights(self) -> dict[str, Any]:
        """The weights of the ``best`` checkpoint (to score the test with), loaded without pickle."""
        path = self._best_file()
        if self.suffix == ".safetensors":
            from safetensors.torch import load_file

            return dict(load_file(str(path)))
        import torch

        loaded: dict[str, Any] = torch.load(path, weights_only=True, map_location="cpu")["model"]
        return loaded

    def _save_weights(
        self,
        path: Path,
        weights: Mapping[str, Any],
        epoch: int,
        step: int,
        selection: Mapping[str, Any] | None,
    ) -> None:
        if self.suffix == ".pth":
            payload: dict[str, Any] = {"model": weights, "epoch": epoch, "step": step}
            if selection is not None:
                payload["selection"] = dict(selection)
            _torch_save(path, payload)
            return
        from safetensors.torch import save_file

        metadata = {"epoch": str(epoch), "step": str(step)}
        if selection is not None:
            metadata["selection"] = json.dumps(dict(selection))
        tensors = _unshared({name: tensor.detach().contiguous().cpu() for name, tensor in weights.items()})
        temp = path.with_name(f".{path.name}.tmp")
        try:
            save_file(tensors, str(temp), metadata=metadata)
            with temp.open("rb") as handle:
                os.fsync(handle.fileno())
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
        fsync_dir(path.parent)

    def declare(self, topic: str, choice: str, note: str | None = None) -> None:
        """A choice made on purpose (docs/audits.md, declarations): disclosed once, never escalated."""
        self._open_for_writing()
        entry = {"topic": topic, "choice": choice, **({"note": note} if note else {})}
        self.declarations = [item for item in self.declarations if item["topic"] != topic] + [entry]
        self._save_state()

    # -- evaluation ------------------------------------------------------------------------------------------

    def test(
        self,
        test_id: str = "main",
        *,
        sample_ids: Sequence[str],
        conditions: Sequence[str] = ("clean",),
        roles: Sequence[str] = ("input", "prediction"),
        split: str = "test",
        selection_seed: int = 0,
        selection_id: str | None = None,
        ground_truth: bool = True,
    ) -> TestWriter:
        """A test to score (docs/capsule.md §4-§7): per-item rows, then the renders of ``selected`` samples.

        The visual selection of this test set is drawn once (seeded, K = min(100, n_test)) and reused by
        every later run on it.
        """
        self._open_for_writing()
        _checked_id("test id", test_id)
        for kind, names in (("condition", conditions), ("role", roles)):
            if not names or len(set(names)) != len(names):
                raise WriterError(f"test {test_id}: {kind}s must be a non-empty list of unique ids")
            for name in names:
                _checked_id(kind, name)
        ids = [str(item) for item in sample_ids]
        if not ids or len(set(ids)) != len(ids):
            raise WriterError(f"test {test_id}: sample_ids must be non-empty and unique ({len(ids)} given)")
        unsafe = [item for item in ids if not is_safe_id(item)]
        if unsafe:  # a selected sample names its render file: an id, never a path (docs/capsule.md §2)
            raise WriterError(
                f"test {test_id}: {len(unsafe)} sample id(s) are not safe ids (^[A-Za-z0-9][A-Za-z0-9._-]*$), "
                f"e.g. {unsafe[0]!r}"
            )
        chosen_id = selection_id or f"{self.split.split_id}-{split}"
        _checked_id("selection id", chosen_id)
        selected = self._selection(chosen_id, ids, selection_seed)
        return TestWriter(
            self._facts(),
            test_id,
            ids,
            list(conditions),
            list(roles),
            split,
            chosen_id,
            selected,
            ground_truth,
        )

    def _selection(self, selection_id: str, sample_ids: list[str], seed: int) -> list[str]:
        import numpy as np

        path = self.root / "_trust" / "selections" / f"{selection_id}.json"
        k = min(SELECTION_CAP, len(sample_ids))
        if path.is_file():
            existing = json.loads(path.read_bytes())
            chosen = existing.get("sample_ids")
            if existing.get("n_test") != len(sample_ids) or not set(chosen or ()) <= set(sample_ids):
                raise WriterError(
                    f"{path} fixes the selection of another test set ({existing.get('n_test')} items); it is "
                    "never re-drawn: give this test set another selection_id"
                )
        else:
            drawn = np.random.default_rng(seed).choice(sorted(sample_ids), size=k, replace=False)
            chosen = sorted(str(item) for item in drawn)
            write_json_atomic(
                path,
                {
                    "selection_id": selection_id,
                    "dataset_id": self.data.dataset_id,
                    "split_id": self.split.split_id,
                    "n_test": len(sample_ids),
                    "k": k,
                    "sample_ids": chosen,
                    "method": "seeded_random",
                    "seed": seed,
                    "performance_ranked": False,
                },
            )
        self.selections[selection_id] = len(chosen)
        return list(chosen)

    def _facts(self) -> RunFacts:
        return RunFacts(
            self.run_id, self.folder, self.metrics, self.protocol_id, self._best_file, self._recorded
        )

    def _recorded(self, test_id: str, record: dict[str, Any]) -> None:
        self.tests[test_id] = record
        self._save_state()

    def _best_file(self) -> Path:
        path = self.folder / f"best{self.suffix}"
        if self.best is None or not path.is_file():
            raise WriterError(
                f"run {self.run_id}: score a test after a best checkpoint exists (checkpoint(..., value=...))"
            )
        return path

    # -- finishing --------------------------------------------------------------------------------------

    def finish(self) -> Path:
        """Write ``run.json`` and ``last``, check the run is whole, and let go of the folder: it is then
        ready for ``runaudit close``. Returns the folder."""
        self._open_for_writing()
        if self.best is None or self.latest is None:
            raise WriterError(f"run {self.run_id}: no best checkpoint was saved (checkpoint(..., value=...))")
        if not self.history.rows:
            raise WriterError(f"run {self.run_id}: train.csv has no rows (log(...) once per epoch or step)")
        if not self.tests:
            raise WriterError(f"run {self.run_id}: no test was scored (run.test(...))")
        best_sha256 = _sha256(self._best_file())
        stale = [test_id for test_id, test in self.tests.items() if test["checkpoint_sha256"] != best_sha256]
        if stale:
            raise WriterError(
                f"run {self.run_id}: test(s) {', '.join(stale)} were scored with another checkpoint than the "
                "current best; score after the last best checkpoint"
            )
        latest = self.resume_state()
        assert latest is not None  # self.latest is set, and checkpoint() wrote the file
        last = self.folder / f"last{self.suffix}"
        if self.suffix == ".pth":
            write_bytes_atomic(last, (self.folder / LATEST).read_bytes())
        else:
            self._save_weights(last, latest["model"], self.latest.epoch, self.latest.step, None)
        write_json_atomic(self.folder / "run.json", self._declaration())
        self._finished = True
        self.release()
        return self.folder

    def close(self, *, python: str | None = None) -> Path:
        """:meth:`finish`, then seal through ``runaudit close`` (the same path as the command line):
        returns ``export/<run_id>``, or raises :class:`SealRefused` with the reasons."""
        if not self._finished:
            self.finish()
        command = [python or sys.executable, "-m", "runaudit", "close", self.run_id, "--root", str(self.root)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        sealed = self.root / "export" / self.run_id
        if done.returncode == 0 and sealed.is_dir():
            return sealed
        said = (done.stdout + done.stderr).strip()
        raise SealRefused(f"run {self.run_id}: runaudit close did not seal it:\n{said}")

    def __del__(self) -> None:
        self.release()  # a writer dropped unfinished lets go of its folder, as a dead process does

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None and not self._finished:
            self.finish()
        self.release()  # after a failure the folder stays as it is: reopening resumes it

    def _open_for_writing(self) -> None:
        """Refuse a finished writer. Before a reopened run's first change: withdraw a finished run's
        ``run.json`` and ``last`` (until :meth:`finish` writes them anew the run is unfinished, never sealed
        as its earlier finish), then cut ``train.csv`` to the rows kept at open. Opening alone changes
        nothing: a finished run reopened and let go is sealed as it was."""
        if self._finished or self._lock is None:
            raise WriterError(f"run {self.run_id}: the writer was finished; reopen the run to continue it")
        if not self._changed:
            if os.path.lexists(self.folder / "run.json"):
                for name in ("run.json", *(f"last{suffix}" for suffix in CHECKPOINT_FORMATS.values())):
                    (self.folder / name).unlink(missing_ok=True)
                fsync_dir(self.folder)
            self.history.settle(training=False)
            self._changed = True

    def _declaration(self) -> dict[str, Any]:
        assert self.best is not None and self.latest is not None
        split: dict[str, Any] = {
            "split_id": self.split.split_id,
            "scheme": self.split.scheme,
            "counts": {"train": self.split.train, "val": self.split.val, "test": self.split.test},
        }
        if self.split_manifest_sha256:
            split["manifest_sha256"] = self.split_manifest_sha256
        for key in ("group_key", "time_key"):
            if getattr(self.split, key):
                split[key] = getattr(self.split, key)
        best: dict[str, Any] = {"epoch": self.best.epoch, "step": self.best.step, "weights": "raw"}
        if self.best.value is not None:
            best["selection"] = {
                "metric": self.selection.metric,
                "split": self.selection.split,
                "mode": self.selection.mode,
                "value": self.best.value,
            }
        declaration: dict[str, Any] = {
            "schema_version": "runaudit.run/1",
            "run_id": self.run_id,
            "kind": "software",
            "task": self.task,
            "source": source_identity(self.source_dir, self.entrypoint),
            "config": {},
            "data": {
                "dataset_id": self.data.dataset_id,
                "version": self.data.version,
                "content_sha256": self.data.content_sha256,
            },
            "split": split,
            "protocol": {
                "protocol_id": self.protocol_id,
                "metrics": [spec.declaration() for spec in self.metrics],
            },
            "tests": [test["declaration"] for test in self.tests.values()],
            "selections": [{"selection_id": name, "k": k} for name, k in self.selections.items()],
            "seed": {"values": self.seeds, **determinism(), "worker_seeding": self.worker_seeding},
            "environment": environment(),
            "training": {
                "epochs_planned": self.epochs,
                "epochs_run": max(self.history.last("epoch"), self.latest.epoch),
                "steps_run": max(self.history.last("step"), self.latest.step),
                "effective_batch": self.batch_size,
                "precision": self.precision,
                **({"schedule": self.schedule} if self.schedule else {}),
            },
            "checkpoints": {
                "best": best,
                "last": {"epoch": self.latest.epoch, "step": self.latest.step, "weights": "raw"},
            },
        }
        if self.comparison is not None:
            declaration["comparison"] = {"ablated": [], **self.comparison}
        if self.declarations:
            declaration["declarations"] = list(self.declarations)
        return declaration


# -- small conversions ---------------------------------------------------------------------------------


def _saved_state_file(path: Path) -> dict[str, Any]:
    """The writer's own bookkeeping of a run it is resuming; anything else there is one line, never a guess."""
    try:
        saved = load_json(read_regular(path, JSON_CAP))
    except (OSError, ValueError) as exc:
        raise WriterError(f"{path}: unreadable ({exc}); {STATE_HINT}") from None
    if not isinstance(saved, dict):
        raise WriterError(f"{path}: expected the writer's JSON object; {STATE_HINT}")
    return saved


def _metric(item: Metric | str) -> Metric:
    return item if isinstance(item, Metric) else Metric(str(item))


def _default_selection(metric: Metric) -> Selection:
    return Selection(metric.name, "max" if metric.direction == "higher" else "min")


def _choose(what: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise WriterError(f"{what} must be one of {', '.join(allowed)}; found {value!r}")


def _checked_id(what: str, value: str) -> None:
    if not is_safe_id(value):
        raise WriterError(f"{what} {value!r} is not a safe id (^[A-Za-z0-9][A-Za-z0-9._-]*$)")


def _is_lineage(lineage: _Lineage) -> bool:
    """Integers >= 0 for the epoch and step, a number or None for the value, as the writer records them."""
    counters = (lineage.epoch, lineage.step)
    value = lineage.value
    return all(type(item) is int and item >= 0 for item in counters) and (
        value is None or type(value) in (int, float)
    )


def _counter(run_id: str, name: str, value: Any) -> int:
    """An epoch, step or count given to the writer: an integer >= 0 (numpy's and torch's integers too),
    never a string, a bool or a fraction."""
    try:
        number = operator.index(as_numpy(value))
    except TypeError:
        number = -1
    if isinstance(value, bool) or number < 0:
        raise WriterError(f"run {run_id}: {name} must be an integer >= 0, found {value!r}")
    return number


def _number(run_id: str, name: str, value: Any) -> float:
    """One real number (a tensor or numpy scalar of one element too), never a string or a bool."""
    try:
        number = float(as_numpy(value))
    except (TypeError, ValueError):
        number = None
    if isinstance(value, bool) or number is None:
        raise WriterError(f"run {run_id}: {name} must be a number, found {str(value)[:80]!r}")
    return number


def _int_cell(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


# Digits of an integer train.csv keeps: past a float's range no reader compares it with anything (and
# Python refuses to print an int of more than 4,300 digits: a bare ValueError from the user's loop).
INT_DIGITS = 20


def _cell(name: str, value: Any) -> str:
    """One ``train.csv`` cell; a value that is not one number is a :class:`WriterError` naming the column
    (a tensor of several elements raised torch's own error from ``.item()``)."""
    if value is None:
        return ""
    value = as_numpy(value)
    if hasattr(value, "item"):
        size = getattr(value, "size", 1)
        if size != 1:
            raise WriterError(f"train.csv {name}: one number per row, found an array of {size} elements")
        value = value.item()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) >= 10**INT_DIGITS:
            raise WriterError(
                f"train.csv {name}: an integer of at most {INT_DIGITS} digits, found a larger one"
            )
        return str(value)
    if isinstance(value, float):
        return repr(value)
    raise WriterError(f"train.csv {name}: a number, a bool or None, found {type(value).__name__}")


def _plain(value: Any) -> Any:
    """A config as plain YAML types (tuples become lists, numpy scalars Python numbers)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return value


def _state_dict(model: Any) -> dict[str, Any]:
    weights = model.state_dict() if hasattr(model, "state_dict") else model
    if not isinstance(weights, Mapping) or not weights:
        raise WriterError("checkpoint: pass the model or its (non-empty) state dict")
    return dict(weights)


def _unshared(weights: Mapping[str, Any]) -> dict[str, Any]:
    """Tensors that share storage (tied embeddings) as copies: safetensors refuses shared storage."""
    seen: set[int] = set()
    found: dict[str, Any] = {}
    for name, tensor in weights.items():
        storage = tensor.untyped_storage()
        found[name] = tensor.clone() if storage.data_ptr() in seen and storage.nbytes() else tensor
        seen.add(storage.data_ptr())
    return found


def _saved_state(value: Any) -> Any:
    """An optimizer, scheduler or scaler as its state dict; anything else as given."""
    return value.state_dict() if hasattr(value, "state_dict") and callable(value.state_dict) else value


def weights_only_plain(value: Any) -> bool:
    """Whether ``value`` is made only of what ``torch.load(weights_only=True)`` reads back without asking:
    tensors, numbers, strings, dtypes and devices, and lists, tuples and dicts of them."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.Tensor)):
        return True
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return True
    if isinstance(value, (list, tuple)):
        return all(weights_only_plain(item) for item in value)
    if type(value) is dict or type(value).__name__ == "OrderedDict":
        return all(weights_only_plain(key) and weights_only_plain(item) for key, item in value.items())
    return False


def loads_without_pickle(value: Any) -> bool:
    """Whether a resume can load ``value`` with ``weights_only=True``: plain values at once, anything else
    by saving and loading it in memory (torch allows more than :func:`weights_only_plain` knows)."""
    if weights_only_plain(value):
        return True
    import pickle

    import torch

    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, TypeError, AttributeError):
        return False
    return True


def _kind_of(value: Any) -> str:
    """The first part of ``value`` that is not plain, by its type (``a numpy.ndarray``)."""
    parts = value.items() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    for part in parts:
        for item in part if isinstance(value, Mapping) else (part,):
            if not weights_only_plain(item):
                return _kind_of(item)
    kind = type(value)
    return (
        f"a {kind.__name__}" if kind.__module__ == "builtins" else f"a {kind.__module__}.{kind.__qualname__}"
    )


def _torch_save(path: Path, payload: Mapping[str, Any]) -> None:
    import torch

    write_atomic(path, lambda handle: torch.save(dict(payload), handle))


def _sha256(path: Path) -> str:
    from runaudit.hashing import sha256_file

    return sha256_file(path)


def _content_bytes(item: Any) -> bytes:
    item = as_numpy(item)
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, Path):
        return item.read_bytes()
    if isinstance(item, str):
        return item.encode("utf-8")
    if hasattr(item, "tobytes") and hasattr(item, "dtype"):
        header = f"{item.dtype.str}{tuple(item.shape)}".encode()
        return header + bytes(item.tobytes())
    raise WriterError(f"Dataset.of: cannot hash a {type(item).__name__} (arrays, tensors, bytes or paths)")


def _parquet_bytes(columns: Mapping[str, Sequence[Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table(dict(columns)), sink)  # lists, numpy arrays or typed pyarrow arrays
    return sink.getvalue()


def _same_table(left: bytes, right: bytes) -> bool:
    """Two parquet files hold the same table (writers of another pyarrow version may differ in bytes)."""
    if left == right:
        return True
    import pyarrow.parquet as pq

    try:  # the file reader, as runaudit.reader reads tables; an unreadable file holds no same table
        return bool(pq.ParquetFile(io.BytesIO(left)).read().equals(pq.ParquetFile(io.BytesIO(right)).read()))
    except Exception:  # pyarrow raises several unrelated types for a bad file
        return False


open_run = RunWriter  # opening a run is making its writer: ``open_run(root, run_id, ...)``
