"""Train the digits CNN into ``active/<run-id>/``, resuming from ``latest.pth`` on every start.

The checkpoint is the single source of truth: it holds the model, optimizer, scheduler, RNG, counters,
the best-so-far record and the whole history, and ``train.csv`` is rewritten from it after each save.
A crash at any point therefore resumes where the last complete checkpoint left off, with no duplicated
or missing history rows.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn

from runaudit.atomic import write_atomic, write_bytes_atomic
from runaudit.examples.digits import data as digits_data
from runaudit.examples.digits.model import build

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

HISTORY_COLUMNS = (
    "epoch",
    "step",
    "train_loss",
    "lr",
    "grad_norm",
    "val_accuracy",
    "val_cross_entropy",
    "wall_time_s",
    "resume",
)


class ConfigMismatch(RuntimeError):
    """The run folder was started with another configuration; a changed config needs a new run id."""


@dataclass(frozen=True)
class TrainingOutcome:
    epochs_run: int
    steps_run: int
    best: dict[str, Any]
    last: dict[str, Any]
    resumed_from: int  # epoch the run resumed after, 0 for a fresh start


def config_bytes(config: dict[str, Any]) -> bytes:
    return yaml.safe_dump(config, sort_keys=True).encode("utf-8")


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    write_atomic(path, lambda handle: torch.save(payload, handle))


def history_csv(history: list[dict[str, Any]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=HISTORY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(history)
    return buffer.getvalue().encode("utf-8")


def _pin_config(workdir: Path, config: dict[str, Any]) -> None:
    target = workdir / "config.yaml"
    wanted = config_bytes(config)
    if target.exists():
        if target.read_bytes() != wanted:
            raise ConfigMismatch(
                f"{target} holds another configuration than the one requested; "
                "resume with the same config or start a new run id"
            )
        return
    write_bytes_atomic(target, wanted)


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


def training_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    **counters: Any,
) -> dict[str, Any]:
    """Everything ``latest.pth`` holds: weights, optimizer, schedule, RNG, and the run's counters."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": {"torch": torch.get_rng_state()},
        **counters,
    }


def restore_training(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> dict[str, Any]:
    """Load ``path`` (weights only) into the objects and the RNG; returns the whole saved state."""
    state: dict[str, Any] = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    return state


def _evaluate(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits, labels).item()
        accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    return accuracy, loss


def train(
    workdir: Path, config: dict[str, Any], *, log: Callable[[str], None] = lambda line: None
) -> TrainingOutcome:
    """Train (or resume) the run in ``workdir`` to ``config['train']['epochs']`` epochs."""
    workdir.mkdir(parents=True, exist_ok=True)
    _pin_config(workdir, config)
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

    epoch, step, history = 0, 0, []
    best: dict[str, Any] = {"epoch": 0, "step": 0, "value": -math.inf}
    latest = workdir / "latest.pth"
    if latest.exists():
        state = restore_training(latest, model, optimizer, scheduler)
        epoch, step, history, best = (
            state["epoch"],
            state["step"],
            list(state["history"]),
            dict(state["best"]),
        )
        write_bytes_atomic(workdir / "train.csv", history_csv(history))
        log(f"resumed from {latest} after epoch {epoch} (step {step})")
    resumed_from = epoch

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
        history.append(
            {
                "epoch": epoch,
                "step": step,
                "train_loss": float(np.mean(losses)),
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": float(np.mean(norms)),
                "val_accuracy": val_accuracy,
                "val_cross_entropy": val_loss,
                "wall_time_s": round(time.perf_counter() - started, 4),
                "resume": epoch == resumed_from + 1 and resumed_from > 0,
            }
        )
        if val_accuracy > best["value"]:
            best = {"epoch": epoch, "step": step, "value": val_accuracy}
            save_checkpoint(
                workdir / "best.pth",
                {
                    "model": model.state_dict(),
                    "epoch": epoch,
                    "step": step,
                    "selection": {"metric": "accuracy", "split": "val", "mode": "max", "value": val_accuracy},
                },
            )
        state = training_state(
            model, optimizer, scheduler, epoch=epoch, step=step, best=best, history=history
        )
        save_checkpoint(latest, state)
        write_bytes_atomic(workdir / "train.csv", history_csv(history))
        log(
            f"epoch {epoch}/{settings['epochs']} loss {history[-1]['train_loss']:.4f} val_accuracy {val_accuracy:.4f}"
        )
        if settings["throttle_s"]:
            time.sleep(settings["throttle_s"])

    # last.pth is the frozen final training state: the bytes of the last complete latest.pth.
    write_bytes_atomic(workdir / "last.pth", latest.read_bytes())
    final = torch.load(latest, weights_only=True)
    return TrainingOutcome(
        epochs_run=final["epoch"],
        steps_run=final["step"],
        best=dict(final["best"]),
        last={"epoch": final["epoch"], "step": final["step"]},
        resumed_from=resumed_from,
    )
