"""Train the digits CNN through the capsule writer, resuming from its last checkpoint on every start.

The writer keeps ``train.csv`` and the checkpoints (docs/capsule.md): a row per epoch, ``latest.pth``
(weights, optimizer, schedule, RNG) after each, ``best.pth`` whenever validation accuracy improves. A
crash at any point resumes after the last complete checkpoint, with no duplicated or missing rows.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from runaudit.atomic import write_atomic
from runaudit.examples.digits import data as digits_data
from runaudit.examples.digits.model import build
from runaudit.writer import RunWriter

# Set by a SIGTERM handler that the command line installs (Slurm's --signal warning, a spot notice): the
# handler only sets it, and the loop stops at the next step boundary, after that epoch's checkpoint. Saving
# inside the handler could tear a checkpoint the loop is writing.
STOP = threading.Event()


class Preempted(Exception):
    """Training stopped early on request, after saving; a relaunch of the same command resumes."""

    def __init__(self, epoch: int, step: int) -> None:
        super().__init__(f"stopped after epoch {epoch} (step {step}) on request; relaunch to resume")
        self.epoch, self.step = epoch, step


DEFAULT_CONFIG: dict[str, Any] = {
    "data": {"dataset": digits_data.DATASET_ID, "split_seed": 0, "val_fraction": 0.2, "test_fraction": 0.2},
    "model": {"channels": [16, 32], "hidden": 64, "dropout": 0.1},
    "train": {
        "epochs": 24,
        "batch_size": 64,
        "lr": 0.003,
        "weight_decay": 0.0001,
        "schedule": "cosine",
        "seed": 0,
        "zero_inputs": False,
        "throttle_s": 0.0,
    },
    "eval": {"conditions": {"clean": 0.0, "noise": 0.3}, "noise_seed": 7, "selection_seed": 1234},
}


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    write_atomic(path, lambda handle: torch.save(payload, handle))


def build_training(
    config: dict[str, Any], n_train: int
) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """The model, optimizer and schedule a run starts from (the smoke adapter builds the same)."""
    settings = config["train"]
    model = build(config)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings["lr"], weight_decay=settings["weight_decay"]
    )
    steps_per_epoch = math.ceil(n_train / settings["batch_size"])
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=settings["epochs"] * steps_per_epoch
    )
    return model, optimizer, scheduler


def training_loss(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(inputs), labels)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    inputs: torch.Tensor,
    labels: torch.Tensor,
) -> tuple[float, float]:
    """One optimizer step; returns the loss and the gradient norm."""
    optimizer.zero_grad(set_to_none=True)
    loss = training_loss(model, inputs, labels)
    loss.backward()
    norm = float(nn.utils.clip_grad_norm_(model.parameters(), max_norm=math.inf))
    optimizer.step()
    scheduler.step()
    return loss.item(), norm


def resume_parts(
    optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler
) -> dict[str, Any]:
    """What a resume needs beside the weights and counters: optimizer, schedule and RNG."""
    return {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": {"torch": torch.get_rng_state()},
    }


def restore_parts(
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> None:
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])


def training_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    **counters: Any,
) -> dict[str, Any]:
    """Everything a resume anchor holds (the layout the writer's ``latest.pth`` has): weights, optimizer,
    schedule, RNG, and the run's counters."""
    return {"model": model.state_dict(), **resume_parts(optimizer, scheduler), **counters}


def restore_training(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> dict[str, Any]:
    """Load ``path`` (weights only) into the objects and the RNG; returns the whole saved state."""
    state: dict[str, Any] = torch.load(path, weights_only=True)
    restore_parts(state, model, optimizer, scheduler)
    return state


def _evaluate(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits, labels).item()
        accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    return accuracy, loss


def _tensorboard(run: RunWriter, settings: dict[str, Any]) -> Any:
    """A TensorBoard writer into the run's ``trackers/tensorboard/digits`` (sealed with the capsule), with
    the training settings recorded as its hyperparameters."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run.folder / "trackers" / "tensorboard" / "digits"))
    writer.add_hparams({name: settings[name] for name in ("lr", "epochs", "batch_size", "seed")}, {})
    return writer


def _wandb(run: RunWriter, settings: dict[str, Any]) -> Any:
    """A W&B offline run (no account, no network) in the project's cache; its record log is sealed with
    the capsule by :func:`_seal_wandb`."""
    import wandb

    scratch = run.root / "cache" / "wandb" / run.run_id
    scratch.mkdir(parents=True, exist_ok=True)
    chart = wandb.init(
        project="digits",
        dir=str(scratch),
        mode="offline",
        config={name: settings[name] for name in ("lr", "epochs", "batch_size", "seed")},
        settings=wandb.Settings(silent=True, console="off"),
    )
    chart.define_metric("val_accuracy", summary="max")
    return chart


def _seal_wandb(run: RunWriter, chart: Any) -> None:
    """Finish the W&B run and copy its ``run-<id>.wandb`` into ``trackers/wandb/<offline-run>/``."""
    import shutil

    import wandb

    chart.finish()
    # finish() can return while W&B's service still holds the log's last block: teardown ends the service,
    # which closes the file, so the copy below holds every record (a copy taken earlier had no history).
    wandb.teardown()
    folder = Path(chart.dir).parent  # <scratch>/wandb/offline-run-<stamp>-<id>/files -> the run folder
    target = run.folder / "trackers" / "wandb" / folder.name
    target.mkdir(parents=True, exist_ok=True)
    for log in folder.glob("run-*.wandb"):
        shutil.copy2(log, target / log.name)


def train(run: RunWriter, config: dict[str, Any], *, log: Callable[[str], None] = lambda line: None) -> None:
    """Train (or resume) ``run`` to ``config['train']['epochs']`` epochs."""
    settings = config["train"]
    torch.manual_seed(settings["seed"])
    torch.use_deterministic_algorithms(True)

    dataset = digits_data.load()
    split = digits_data.stratified_split(
        dataset.labels,
        seed=config["data"]["split_seed"],
        fractions=(config["data"]["val_fraction"], config["data"]["test_fraction"]),
    )
    train_x = torch.from_numpy(dataset.inputs(split["train"]))
    if settings["zero_inputs"]:  # a deliberately broken variant: the model never sees its input
        train_x = torch.zeros_like(train_x)
    train_y = torch.from_numpy(dataset.labels[split["train"]])
    val_x = torch.from_numpy(dataset.inputs(split["val"]))
    val_y = torch.from_numpy(dataset.labels[split["val"]])

    model, optimizer, scheduler = build_training(config, len(train_x))
    tracker = _tensorboard(run, settings) if settings.get("tensorboard") else None
    saved = run.resume_state()
    if saved is not None:
        restore_parts(saved, model, optimizer, scheduler)
        log(f"resumed after epoch {run.epoch} (step {run.step})")
    epoch, step = run.epoch, run.step

    chart = _wandb(run, settings) if settings.get("wandb") else None
    try:
        while epoch < settings["epochs"]:
            epoch += 1
            started = time.perf_counter()
            model.train()
            order = torch.randperm(
                len(train_x), generator=torch.Generator().manual_seed(settings["seed"] * 100_003 + epoch)
            )
            losses, norms = [], []
            for start in range(0, len(order), settings["batch_size"]):
                batch = order[start : start + settings["batch_size"]]
                loss, norm = train_step(model, optimizer, scheduler, train_x[batch], train_y[batch])
                step += 1
                losses.append(loss)
                norms.append(norm)
            val_accuracy, val_loss = _evaluate(model, val_x, val_y)
            row = {
                "train_loss": float(np.mean(losses)),
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": float(np.mean(norms)),
                "val_accuracy": val_accuracy,
                "val_cross_entropy": val_loss,
            }
            run.log(epoch=epoch, step=step, **row, wall_time_s=round(time.perf_counter() - started, 4))
            if (
                tracker is not None
            ):  # the same numbers, as a TensorBoard user logs them: tag per value, by step
                for tag, value in row.items():
                    tracker.add_scalar(tag, value, step)
                tracker.flush()
            if chart is not None:
                chart.log(row, step=step)
            run.checkpoint(
                model, epoch=epoch, step=step, value=val_accuracy, state=resume_parts(optimizer, scheduler)
            )
            log(
                f"epoch {epoch}/{settings['epochs']} loss {float(np.mean(losses)):.4f} val_accuracy {val_accuracy:.4f}"
            )
            if STOP.is_set():  # a scheduler's warning: this epoch is saved, the next start resumes after it
                log(f"stopping after epoch {epoch} (step {step}): asked to stop; the checkpoint is saved")
                raise Preempted(epoch, step)
            if settings["throttle_s"]:
                STOP.wait(settings["throttle_s"])
    finally:
        if tracker is not None:
            tracker.close()
        if chart is not None:
            _seal_wandb(run, chart)
