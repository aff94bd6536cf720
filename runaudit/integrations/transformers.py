"""A Hugging Face ``TrainerCallback`` that writes a capsule, and ``score_test`` after training.

``pip install 'runaudit[transformers]'`` (transformers, accelerate for the Trainer, safetensors)::

    from runaudit.integrations.transformers import CapsuleCallback, score_test
    from runaudit.writer import Dataset, Split

    capsule = CapsuleCallback(".", "bert-s0", task="classification", config=config,
                              metrics=["accuracy"], data=Dataset.of("digits", "1", x, y),
                              split=Split("digits-s0", "stratified", 1257, 270, 270), seed=0)
    trainer = Trainer(model, args, train_dataset=train, eval_dataset=val,
                      compute_metrics=accuracy, callbacks=[capsule])
    trainer.train()
    score_test(trainer, test, sample_ids=test_ids, render=render)   # seals export/bert-s0

The constructor takes :func:`runaudit.writer.open_run`'s keyword arguments. ``checkpoint_format``
defaults to ``safetensors`` (what Hugging Face users save), ``epochs`` to the Trainer's planned epochs,
``batch_size`` to the effective batch (per-device × accumulation × processes), and ``selection`` to the
Trainer's ``metric_for_best_model`` (``eval_`` prefix dropped) and ``greater_is_better``: the capsule's
``best`` and the Trainer's best are then the same checkpoint. Both given and different is refused, and so
is a ``metric_for_best_model`` that is not a protocol metric (the Trainer's default ``loss`` under
``load_best_model_at_end`` included: set ``metric_for_best_model`` to the protocol metric).

What it reads from the Trainer, and what it writes:

- ``on_log``: the training loss (``loss``), ``learning_rate`` (as ``lr``) and ``grad_norm``;
- ``on_evaluate``: one ``train.csv`` row: ``epoch`` (1-based, the epoch in progress), ``step`` (the
  global step), ``train_loss`` (the last one logged since the previous row: log at least as often as you
  evaluate, e.g. ``logging_strategy`` = ``eval_strategy``), ``lr``, ``grad_norm`` and every ``eval_*``
  metric as ``val_*`` (throughput figures excepted; the columns are fixed by the first row). The
  selection metric must be among them: ``compute_metrics`` returns it;
- ``on_save``: :meth:`RunWriter.checkpoint` with the selection metric's value of the evaluation at that
  step (none: the resume point only). Save where you evaluate (``save_strategy`` = ``eval_strategy``).

Resume is the Trainer's: ``trainer.train(resume_from_checkpoint=True)`` restores model, optimizer,
scheduler and RNG from ``output_dir/checkpoint-<step>``; the callback reopens the run, and refuses a
resume whose step is not its own last checkpoint's (it names the folder to resume from). Keep the two
newest checkpoints (``save_total_limit`` of None, 0 or >= 2, >= 3 where ``metric_for_best_model`` tracks
a best checkpoint; less is refused): the Trainer deletes older ones before the callback commits the
newest, so a process killed in between needs the one before it.

After ``train()``, :func:`score_test` scores the test on the capsule's ``best`` weights through
``trainer.predict`` and finishes, or seals, the run.

Misuse raises :class:`runaudit.writer.WriterError`, one line, and lets go of the run's folder (it stays
as it is; reopening resumes it). An error raised elsewhere in ``train()`` leaves the run open in its
callback (the Trainer calls no callback on an exception); a new ``CapsuleCallback`` for the same run in
the same process takes it over. One process writes: ``world_size`` > 1 is refused.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

try:
    import transformers
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ModuleNotFoundError:  # not installed (another ImportError is a broken install: raised as it is)
    raise ImportError(
        "runaudit.integrations.transformers needs transformers: pip install 'runaudit[transformers]'"
    ) from None
import numpy as np

from runaudit.integrations._common import (
    Columns,
    Items,
    RenderFn,
    checked_options,
    epoch_of,
    release,
    scalar,
)
from runaudit.usage import WriterError
from runaudit.writer import RunWriter, Selection, open_run

# eval_* figures that describe the evaluation's speed, not the model: never train.csv columns.
THROUGHPUT = frozenset({"runtime", "samples_per_second", "steps_per_second", "model_preparation_time"})
# Per item: (predictions, label_ids) -> {metric: one value per item}.
ItemMetricsFn = Callable[[Any, Any], Mapping[str, Any]]
# (root, run_id) -> the callback of this process holding that run's writer. The Trainer has no exception
# hook: a train() that raised elsewhere (a notebook cell) leaves its callback holding the run, and a new
# callback for the same run takes it over instead of being refused as "another process".
_HOLDERS: weakref.WeakValueDictionary[tuple[Path, str], CapsuleCallback] = weakref.WeakValueDictionary()


class CapsuleCallback(TrainerCallback):
    """Write ``<root>/active/<run_id>`` from ``Trainer.train()``; see the module's docstring."""

    def __init__(
        self, root: str | Path, run_id: str, *, checkpoint_format: str = "safetensors", **options: Any
    ) -> None:
        self.root, self.run_id = Path(root), run_id
        self.options = checked_options(
            {"checkpoint_format": checkpoint_format, **options}, filled=("epochs", "batch_size")
        )
        self.sealed: Path | None = None  # export/<run_id> once closed
        self.folder: Path | None = None  # active/<run_id> once finished
        self._run: RunWriter | None = None
        self._training = False
        self._loss: float | None = None  # the last training loss logged since the last row
        self._logged: dict[str, float | None] = {}  # lr, grad_norm
        self._evaluated: tuple[int, float | None] | None = None  # (step, selection value)
        self._columns = Columns()

    @property
    def run(self) -> RunWriter:
        """The open writer (opened when training begins, or by :func:`score_test`)."""
        if self._run is None:
            raise WriterError(f"run {self.run_id}: the callback has no open run (train first)")
        return self._run

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """Let go of the run's folder when a hook fails (the Trainer has no exception hook of its own)."""
        try:
            yield
        except BaseException:
            release(self._run)
            self._run = None
            raise

    def _open(self, args: TrainingArguments, state: TrainerState | None) -> RunWriter:
        if self._run is not None:
            return self._run
        if args.world_size > 1:
            raise WriterError(
                f"run {self.run_id}: runaudit's Trainer callback writes from one process; world_size is "
                f"{args.world_size}"
            )
        # The Trainer rotates checkpoints before on_save: the one before the newest is what a process killed
        # in between resumes from, and a tracked best checkpoint takes one more place.
        needed = 3 if args.metric_for_best_model or args.load_best_model_at_end else 2
        if args.save_total_limit is not None and 0 < args.save_total_limit < needed:
            raise WriterError(
                f"run {self.run_id}: save_total_limit is {args.save_total_limit}; the Trainer deletes the "
                "checkpoint a resume needs before the capsule commits the newest, so keep None, 0 or "
                f">= {needed}"
                + (" (a tracked best checkpoint keeps a place of its own)" if needed == 3 else "")
            )
        options = dict(self.options)
        if "epochs" not in options:
            planned = getattr(state, "num_train_epochs", None) or args.num_train_epochs
            options["epochs"] = max(1, math.ceil(float(planned)))
        if "batch_size" not in options:
            options["batch_size"] = args.train_batch_size * args.gradient_accumulation_steps * args.world_size
        options["selection"] = self._selection(args, options.get("selection"))
        key = (self.root.resolve(), self.run_id)
        holder = _HOLDERS.get(key)
        if holder is not None and holder is not self and holder._run is not None:
            release(holder._run)
            holder._run = None
        self._run = open_run(self.root, self.run_id, **options)
        _HOLDERS[key] = self
        return self._run

    def _selection(self, args: TrainingArguments, given: Selection | None) -> Selection | None:
        wanted = args.metric_for_best_model
        if wanted is None:
            return given
        name = wanted.removeprefix("eval_")
        mode: Literal["max", "min"] = "max" if args.greater_is_better else "min"
        names = [getattr(item, "name", item) for item in self.options["metrics"]]
        if name not in names:
            raise WriterError(
                f"run {self.run_id}: metric_for_best_model {wanted!r} is not a protocol metric "
                f"({', '.join(map(str, names))}); set metric_for_best_model to the one that picks best"
            )
        if given is not None and (given.metric, given.mode, given.split) != (name, mode, "val"):
            raise WriterError(
                f"run {self.run_id}: selection={given} differs from the Trainer's metric_for_best_model "
                f"{wanted!r} (greater_is_better={args.greater_is_better}); give one of them"
            )
        return Selection(name, mode)

    # -- training --------------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        with self._failing():
            run = self._open(args, state)
            if run.resumed and state.global_step != run.step:
                raise WriterError(
                    f"run {self.run_id}: its last checkpoint is at step {run.step}, but the Trainer starts at "
                    f"step {state.global_step}: train(resume_from_checkpoint="
                    f"'{Path(str(args.output_dir)) / f'checkpoint-{run.step}'}')"
                )
            self._training = True
            self._loss, self._evaluated = None, None

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not self._training or not logs or "loss" not in logs:
            return
        with self._failing():
            self._loss = scalar("train_loss", logs["loss"])
            self._logged = {
                "lr": scalar("lr", logs.get("learning_rate")),
                "grad_norm": scalar("grad_norm", logs.get("grad_norm")),
            }

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not self._training:
            return  # trainer.evaluate() outside train(): not part of the history
        with self._failing():
            run = self.run
            found = {
                f"val_{name.removeprefix('eval_')}": scalar(name, value)
                for name, value in (metrics or {}).items()
                if name.startswith("eval_")
                and name.removeprefix("eval_") not in THROUGHPUT
                and isinstance(value, (int, float, np.number))
            }
            column = f"val_{run.selection.metric}"
            if found.get(column) is None:
                raise WriterError(
                    f"run {self.run_id}: evaluation at step {state.global_step} gave no eval_{run.selection.metric} "
                    f"(the selection metric); compute_metrics must return {run.selection.metric!r}. Found: "
                    f"{', '.join(sorted(metrics or {})) or '(nothing)'}"
                )
            if self._loss is None:
                raise WriterError(
                    f"run {self.run_id}: no training loss was logged before the evaluation at step "
                    f"{state.global_step}; log at least as often as you evaluate (logging_strategy = "
                    "eval_strategy, or logging_steps <= eval_steps)"
                )
            row = self._columns.row(run, {**found, **self._logged})
            run.log(epoch=epoch_of(state.epoch or 0.0), step=state.global_step, train_loss=self._loss, **row)
            self._loss = None
            self._evaluated = (state.global_step, row.get(column))

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        **kwargs: Any,
    ) -> None:
        if not self._training:
            return
        with self._failing():
            if model is None:
                raise WriterError(f"run {self.run_id}: the Trainer handed on_save no model to checkpoint")
            value = None
            if self._evaluated is not None and self._evaluated[0] == state.global_step:
                value = self._evaluated[1]
            self.run.checkpoint(
                model,
                epoch=epoch_of(state.epoch or 0.0),
                step=state.global_step,
                value=value,
            )

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._training = False  # the run stays open for score_test


def score_test(
    trainer: transformers.Trainer,
    dataset: Any,
    *,
    sample_ids: Sequence[Any],
    item_metrics: ItemMetricsFn | None = None,
    render: RenderFn | None = None,
    test_id: str = "main",
    roles: Sequence[str] = ("input", "prediction"),
    ground_truth: bool = True,
    selection_id: str | None = None,
    seal: bool = True,
) -> Path:
    """Score the test on the capsule's ``best`` weights, then finish the run (and seal it: ``seal=True``).

    ``dataset`` is the test set (condition ``clean``) or ``{condition: dataset}``, each holding the same
    items in the order of ``sample_ids``. The ``best`` weights are loaded into ``trainer.model``, each
    dataset goes through ``trainer.predict``, and per item: ``output`` is the prediction row (the first
    array when the model returns several); for ``task="classification"`` with 2-D predictions ``pred`` is
    their argmax and ``target`` the label ids. ``item_metrics(predictions, label_ids)`` gives every
    protocol metric's per-item values; without it only ``accuracy`` can be scored (``pred == target``).
    ``render(sample_id, condition)`` gives ``{role: image}`` for each selected sample.

    Returns ``export/<run_id>`` once sealed, else ``active/<run_id>``.
    """
    callback = next(
        (item for item in trainer.callback_handler.callbacks if isinstance(item, CapsuleCallback)), None
    )
    if callback is None:
        raise WriterError("score_test: the trainer has no runaudit CapsuleCallback in its callbacks")
    with callback._failing():
        run = callback._open(trainer.args, trainer.state)
        if trainer.model is None:
            raise WriterError(f"run {run.run_id}: score_test needs the trainer's model")
        trainer.model.load_state_dict(run.best_weights())
        datasets = dict(dataset) if isinstance(dataset, Mapping) else {"clean": dataset}
        items = Items(list(datasets))
        for condition, data in datasets.items():
            output = trainer.predict(data)
            predictions = np.asarray(_first(output.predictions))
            labels = None if output.label_ids is None else np.asarray(_first(output.label_ids))
            batch: dict[str, Any] = {"sample_id": list(sample_ids), "output": predictions}
            if run.task == "classification" and predictions.ndim == 2:
                batch["pred"] = predictions.argmax(-1)
                if labels is not None:
                    batch["target"] = labels
            if item_metrics is not None:
                batch.update(item_metrics(predictions, labels))
            elif ground_truth and "pred" in batch and labels is not None:
                batch["accuracy"] = batch["pred"] == labels
            items.add(run, condition, batch)
        options = {"selection_id": selection_id} if selection_id else {}
        items.score(
            run, test_id=test_id, roles=roles, ground_truth=ground_truth, render=render, options=options
        )
        callback.folder = run.finish()
    callback._run = None
    if seal:
        callback.sealed = run.close()
        return callback.sealed
    return callback.folder


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (tuple, list)) else value
