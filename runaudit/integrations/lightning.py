"""A Lightning callback that writes a capsule: ``callbacks=[CapsuleCallback(root, run_id, ...)]``.

``pip install 'runaudit[lightning]'`` (Lightning 2.x, imported as ``lightning.pytorch``)::

    from runaudit.integrations.lightning import CapsuleCallback
    from runaudit.writer import Dataset, Split

    capsule = CapsuleCallback(".", "wine-mlp-s0", task="classification", config=config,
                              metrics=["accuracy"], data=Dataset.of("wine", "1", x, y),
                              split=Split("wine-s0", "random", 108, 35, 35), seed=0, batch_size=16)
    trainer = L.Trainer(max_epochs=10, callbacks=[capsule])
    trainer.fit(module, train_loader, val_loader)
    trainer.test(module, test_loader)    # scores the best checkpoint, then seals export/wine-mlp-s0

The constructor takes :func:`runaudit.writer.open_run`'s keyword arguments (``epochs`` defaults to the
trainer's ``max_epochs``; ``batch_size`` is the loader's, recorded times ``accumulate_grad_batches``, or
times the one value a ``GradientAccumulationScheduler`` holds over the run: one that changes it by epoch is
refused) and these of its own: ``train_loss`` (the logged name of the training loss), ``test_id``,
``conditions``, ``roles``, ``ground_truth``, ``selection_id``, ``render`` and ``seal``.

What it expects the LightningModule to log (``self.log``) and return:

- ``train_loss`` in ``training_step`` (with ``on_epoch=True`` its epoch mean is used, else the last step's);
- ``val_<metric>`` in ``validation_step`` for the selection metric (default: the first protocol metric).
  Every ``val_*`` name the trainer holds after validation (``trainer.callback_metrics``; Lightning's
  ``*_step``/``*_epoch`` forks excepted) becomes a ``train.csv`` column, fixed by the first row;
- ``test_step`` returns a dict: ``sample_id`` (one id per item), one key per protocol metric with one
  value per item (``accuracy=(pred == y)``), optionally ``target``, ``pred``, ``output``, ``valid``,
  ``forward_finite`` (one entry per item), ``condition`` (default: the condition of that test dataloader,
  ``conditions[dataloader_idx]``) and ``render`` (``{role: images}``, one image per item), unless
  ``render=(sample_id, condition) -> {role: image}`` is given to the callback.

What it does, at each hook:

- ``setup`` (fit): opens ``<root>/active/<run_id>``. When the run already has a checkpoint (a crash, a
  pre-emption), it resumes it: the weights, optimizers, schedulers, loop progress, callbacks' and
  precision states of the last checkpoint go back through Lightning's own restore path, and the RNG
  states too, so ``fit`` continues after the last checkpointed epoch. Pass no ``ckpt_path`` to such a
  ``fit``: the run's own ``latest.pth`` is the resume point (a ``ckpt_path`` given while the run has a
  checkpoint is refused). A ``ckpt_path`` on a fresh run (fine-tuning) is Lightning's to load.
- train epoch end: one ``train.csv`` row (``epoch`` 1-based, global ``step``, ``train_loss``, ``lr``
  (the first optimizer's, as the epoch started) and the ``val_*`` metrics of that epoch's last validation), then :meth:`RunWriter.checkpoint` with the
  selection metric's value (an epoch without validation saves the resume point only). The row is written
  before the checkpoint, so a crash between them loses nothing the resumed fit does not log again.
- ``test`` start: loads the ``best`` checkpoint's weights into the module (the capsule's results are the
  best checkpoint's, whatever weights the module held); each test batch's outputs are gathered;
  test end: one writer test scored over them and the selected samples rendered, then ``finish()``
  (``seal=False``) or ``close()``, which seals ``export/<run_id>`` through ``runaudit close``
  (:attr:`CapsuleCallback.sealed`).
- on an exception the writer lets go of the folder, which stays as it is for a resume.

Misuse (an unknown option, a selection metric never logged, a test output without ``sample_id``) raises
:class:`runaudit.writer.WriterError`, one line. One process writes: a trainer with ``world_size`` > 1 is
refused (its test outputs would be one rank's shard).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from importlib.metadata import version
from numbers import Integral
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
    from lightning.pytorch.trainer.states import TrainerFn
except ModuleNotFoundError:  # not installed (another ImportError is a broken install: raised as it is)
    raise ImportError(
        "runaudit.integrations.lightning needs Lightning: pip install 'runaudit[lightning]'"
    ) from None

from runaudit.integrations._common import (
    Columns,
    Items,
    RenderFn,
    checked_options,
    release,
    rng_state,
    scalar,
    set_rng_state,
)
from runaudit.usage import WriterError
from runaudit.writer import RunWriter, open_run, weights_only_plain

# What the resume point keeps of Lightning's own checkpoint, besides the weights the writer saves itself.
OPTIMIZERS, SCHEDULERS, LIGHTNING = "optimizer", "lr_scheduler", "lightning"
NOT_RESUME_STATE = frozenset({"state_dict", "optimizer_states", "lr_schedulers", "epoch", "global_step"})


class CapsuleCallback(pl.Callback):
    """Write ``<root>/active/<run_id>`` from a Lightning ``fit`` and ``test``; see the module's docstring."""

    def __init__(
        self,
        root: str | Path,
        run_id: str,
        *,
        train_loss: str = "train_loss",
        test_id: str = "main",
        conditions: Sequence[str] = ("clean",),
        roles: Sequence[str] = ("input", "prediction"),
        ground_truth: bool = True,
        selection_id: str | None = None,
        render: RenderFn | None = None,
        seal: bool = True,
        **options: Any,
    ) -> None:
        self.root, self.run_id = Path(root), run_id
        self.options = checked_options(options, filled=("epochs",))
        self.train_loss = train_loss
        self.test_id, self.conditions, self.roles = test_id, list(conditions), list(roles)
        self.ground_truth, self.selection_id = ground_truth, selection_id
        self.render, self.seal = render, seal
        self.sealed: Path | None = None  # export/<run_id> once closed
        self.folder: Path | None = None  # active/<run_id> once finished
        self._run: RunWriter | None = None
        self._validated: dict[str, float | None] | None = None  # the last validation of this epoch
        self._lr: float | None = None  # the first optimizer's learning rate as this epoch started
        self._columns = Columns()
        self._items = Items(self.conditions)

    # -- the run --------------------------------------------------------------------------------------

    @property
    def run(self) -> RunWriter:
        """The open writer (opened at fit or test start)."""
        if self._run is None:
            raise WriterError(f"run {self.run_id}: the callback has no open run (fit or test first)")
        return self._run

    def _open(self, trainer: pl.Trainer) -> RunWriter:
        if self._run is not None:
            return self._run
        if trainer.fast_dev_run:
            raise WriterError(
                f"run {self.run_id}: Trainer(fast_dev_run=...) runs a few batches to debug, not a run to write "
                "and seal under its run id: leave the callback out of such a trainer"
            )
        if trainer.world_size > 1:
            raise WriterError(
                f"run {self.run_id}: runaudit's Lightning callback writes from one process; this trainer has "
                f"world_size {trainer.world_size}"
            )
        options = dict(self.options)
        if "epochs" not in options:
            if not trainer.max_epochs or trainer.max_epochs < 0:
                raise WriterError(
                    f"run {self.run_id}: the trainer has no max_epochs; pass epochs= (the planned epochs)"
                )
            options["epochs"] = trainer.max_epochs
        given = options.get("batch_size")
        if isinstance(given, int) and not isinstance(given, bool):  # anything else: open_run's one line
            options["batch_size"] = given * self._accumulation(trainer, options["epochs"])
        self._run = open_run(self.root, self.run_id, **options)
        return self._run

    def _accumulation(self, trainer: pl.Trainer, epochs: Any) -> int:
        """The batches one optimizer step accumulates over the whole run, so that run.json's batch size is
        what one step sees. A ``GradientAccumulationScheduler`` sets the trainer's value at each epoch's start
        (before fit it still holds the default 1, which was recorded); one whose value changes within the
        epochs the trainer runs (the larger of ``epochs`` and ``max_epochs``; every epoch it schedules when
        ``max_epochs`` is unbounded) leaves no one batch size to record, and is refused. A schedule changes
        value only at its own epochs, so those are the epochs looked at, however many the run has."""
        schedulers = [
            callback
            for callback in trainer.callbacks
            if isinstance(callback, pl.callbacks.GradientAccumulationScheduler)
        ]
        if not schedulers:
            return int(trainer.accumulate_grad_batches)
        planned = operator.index(epochs) if isinstance(epochs, Integral) else 1
        unbounded = trainer.max_epochs is None or trainer.max_epochs < 0  # trained until max_steps
        horizon = None if unbounded else max(planned, trainer.max_epochs, 1)
        starts = {0, *(epoch for scheduler in schedulers for epoch in scheduler.scheduling)}
        factors = sorted(
            {
                scheduler.get_accumulate_grad_batches(epoch)
                for scheduler in schedulers
                for epoch in starts
                if horizon is None or epoch < horizon
            }
        )
        if len(factors) != 1:
            raise WriterError(
                f"run {self.run_id}: a GradientAccumulationScheduler changes the batches one optimizer step "
                f"accumulates within the run ({', '.join(map(str, factors))}), and run.json records one batch "
                "size; keep accumulate_grad_batches fixed for a run written by this callback"
            )
        return int(factors[0])

    @property
    def _selection_column(self) -> str:
        return f"val_{self.run.selection.metric}"

    # -- fit --------------------------------------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        run = self._open(trainer)
        if run.resumed:
            self._resume(trainer, run)

    def _resume(self, trainer: pl.Trainer, run: RunWriter) -> None:
        saved = run.resume_state()
        if saved is None:
            return
        checkpoint: dict[str, Any] = dict(saved.get(LIGHTNING) or {})
        checkpoint["state_dict"] = saved["model"]
        checkpoint["optimizer_states"] = list(saved.get(OPTIMIZERS) or [])
        checkpoint["lr_schedulers"] = list(saved.get(SCHEDULERS) or [])
        checkpoint["epoch"], checkpoint["global_step"] = saved["epoch"], saved["step"]
        # Lightning restores from this pre-loaded checkpoint after the setup hooks, exactly as from a
        # ckpt_path file (module, callbacks, precision, loops, optimizers and schedulers).
        self._connector(trainer)._loaded_checkpoint = checkpoint
        if isinstance(saved.get("rng"), Mapping):
            set_rng_state(saved["rng"])

    def _connector(self, trainer: pl.Trainer) -> Any:
        """Lightning's checkpoint connector: what ModelCheckpoint saves through and ckpt_path restores
        through (``dump_checkpoint``, ``_loaded_checkpoint``). Private to Lightning, hence checked."""
        connector = getattr(trainer, "_checkpoint_connector", None)
        if not hasattr(connector, "dump_checkpoint") or not hasattr(connector, "_loaded_checkpoint"):
            raise WriterError(
                f"run {self.run_id}: this Lightning ({version('lightning')}) has no checkpoint connector to "
                "save and resume through; runaudit's callback needs Lightning 2.x"
            )
        return connector

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.run.resumed and trainer.ckpt_path:
            raise WriterError(
                f"run {self.run_id}: resumes from its own last checkpoint (epoch {self.run.epoch}); fit was "
                f"also given ckpt_path={trainer.ckpt_path}: pass no ckpt_path"
            )

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The epoch's learning rate as it starts (Lightning steps epoch schedulers before the epoch-end hooks).
        groups = trainer.optimizers[0].param_groups if trainer.optimizers else []
        self._lr = scalar("lr", groups[0].get("lr")) if groups else None

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self._run is None or trainer.state.fn != TrainerFn.FITTING:
            return
        metrics = trainer.callback_metrics
        found = {
            name: scalar(name, value)
            for name, value in metrics.items()
            if name.startswith("val_") and not name.endswith(("_step", "_epoch"))
        }
        if found.get(self._selection_column) is None:
            raise WriterError(
                f"run {self.run_id}: validation logged no {self._selection_column} (the selection metric); "
                f"log it in validation_step: self.log({self._selection_column!r}, value). Logged: "
                f"{', '.join(sorted(metrics)) or '(nothing)'}"
            )
        self._validated = found

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        run = self.run
        epoch, step = trainer.current_epoch + 1, trainer.global_step
        checkpoint = self._connector(trainer).dump_checkpoint(weights_only=False)
        value = None
        if self._validated is not None:
            metrics = trainer.callback_metrics
            loss = metrics.get(f"{self.train_loss}_epoch", metrics.get(self.train_loss))
            if loss is None:
                raise WriterError(
                    f"run {self.run_id}: training logged no {self.train_loss}; log it in training_step: "
                    f"self.log({self.train_loss!r}, loss, on_epoch=True). Logged: {', '.join(sorted(metrics))}"
                )
            row = self._columns.row(run, {**self._validated, "lr": self._lr})
            run.log(epoch=epoch, step=step, train_loss=scalar(self.train_loss, loss) or 0.0, **row)
            value = row.get(self._selection_column)
            self._validated = None
        run.checkpoint(
            checkpoint["state_dict"],
            epoch=epoch,
            step=step,
            value=value,
            state=self._resume_state(checkpoint),
        )

    def _resume_state(self, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
        """Lightning's own checkpoint, minus the weights (the writer saves those) and whatever
        ``torch.load(weights_only=True)`` could not read back (hyper-parameters holding objects)."""
        kept: dict[str, Any] = {}
        for name, value in checkpoint.items():
            if name in NOT_RESUME_STATE:
                continue
            if name == "callbacks" and isinstance(value, Mapping):
                kept[name] = {key: state for key, state in value.items() if weights_only_plain(state)}
            elif weights_only_plain(value):
                kept[name] = value
        return {
            OPTIMIZERS: list(checkpoint.get("optimizer_states", [])),
            SCHEDULERS: list(checkpoint.get("lr_schedulers", [])),
            "rng": rng_state(),
            LIGHTNING: kept,
        }

    # -- test -------------------------------------------------------------------------------------------

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        run = self._open(trainer)
        pl_module.load_state_dict(run.best_weights())
        self._items = Items(self.conditions)

    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not isinstance(outputs, Mapping):
            raise WriterError(
                f"run {self.run_id}: test_step must return a dict with sample_id and the per-item metrics; "
                f"it returned {type(outputs).__name__}"
            )
        condition = outputs.get("condition")
        if condition is None:
            if dataloader_idx >= len(self.conditions):
                raise WriterError(
                    f"run {self.run_id}: test dataloader {dataloader_idx} has no condition "
                    f"(conditions={self.conditions}); one condition per test dataloader, in order"
                )
            condition = self.conditions[dataloader_idx]
        self._items.add(self.run, str(condition), outputs)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        run = self.run
        options = {"selection_id": self.selection_id} if self.selection_id else {}
        self._items.score(
            run,
            test_id=self.test_id,
            roles=self.roles,
            ground_truth=self.ground_truth,
            render=self.render,
            options=options,
        )
        self._items = Items(self.conditions)
        self.folder = run.finish()
        self._run = None  # finished: a later fit or test reopens (resumes) the run
        if self.seal:
            self.sealed = run.close()  # SealRefused names the reasons and the quarantined attempt

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        release(self._run)
        self._run = None
