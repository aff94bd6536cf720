"""The denoiser's trainer: one object that steps, saves and resumes everything a run needs back.

Unlike the digits demo's functions, the state lives on an object, the learning rate decays every step,
and the training noise comes from the trainer's own generator, so a checkpoint that forgot that
generator would resume on other noise (the smoke's resume round trip compares it). :func:`fit` trains
through the capsule writer, which keeps ``train.csv`` and the checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runaudit.atomic import write_atomic
from runaudit.examples.denoise.evaluate import mean_psnr
from runaudit.examples.denoise.model import Denoiser
from runaudit.examples.digits import data as digits_data
from runaudit.writer import RunWriter

DEFAULT_CONFIG: dict[str, Any] = {
    "data": {"split_seed": 0, "val_fraction": 0.2, "test_fraction": 0.2},
    "model": {"channels": 16},
    "train": {"epochs": 8, "batch_size": 64, "lr": 0.003, "decay_per_step": 0.998, "sigma": 0.3, "seed": 0},
    "eval": {"sigmas": {"low": 0.2, "high": 0.4}, "noise_seed": 11},
}


def reconstruction_loss(denoised: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(denoised, clean)


def digits_split(config: dict[str, Any]) -> tuple[digits_data.Digits, dict[str, Any]]:
    """The digits and the indices of each split."""
    dataset = digits_data.load()
    split = digits_data.stratified_split(
        dataset.labels,
        seed=config["data"]["split_seed"],
        fractions=(config["data"]["val_fraction"], config["data"]["test_fraction"]),
    )
    return dataset, split


def clean_images(config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The digits of each split as clean images in [0, 1], shape (n, 1, 8, 8)."""
    dataset, split = digits_split(config)
    return {name: torch.from_numpy(dataset.inputs(indices)) for name, indices in split.items()}


class DenoiseTrainer:
    def __init__(self, config: dict[str, Any]) -> None:
        settings = config["train"]
        torch.manual_seed(settings["seed"])
        self.config = config
        self.model = Denoiser(config["model"]["channels"])
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=settings["lr"])
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(
            self.optimizer, gamma=settings["decay_per_step"]
        )
        self.noise = torch.Generator().manual_seed(settings["seed"] + 1)
        self.epoch, self.step = 0, 0
        self.history: list[dict[str, float]] = []

    @property
    def generators(self) -> dict[str, torch.Generator]:
        return {"noise": self.noise}

    def corrupt(self, clean: torch.Tensor) -> torch.Tensor:
        """The training input path: fresh Gaussian noise from the trainer's generator, clipped to [0, 1]."""
        noise = torch.randn(clean.shape, generator=self.noise) * self.config["train"]["sigma"]
        return (clean + noise).clamp(0.0, 1.0)

    def train_step(self, clean: torch.Tensor) -> float:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = reconstruction_loss(self.model(self.corrupt(clean)), clean)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return float(loss.item())

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "noise": self.noise.get_state()},
            "epoch": self.epoch,
            "step": self.step,
            "history": self.history,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch"])
        self.noise.set_state(state["rng"]["noise"])
        self.epoch, self.step, self.history = state["epoch"], state["step"], list(state["history"])

    def save(self, path: Path) -> None:
        write_atomic(path, lambda handle: torch.save(self.state_dict(), handle))

    @classmethod
    def resume(cls, config: dict[str, Any], path: Path) -> DenoiseTrainer:
        """A trainer in the state ``path`` holds (loaded weights only), as a restarted process builds it."""
        trainer = cls(config)
        trainer.load_state_dict(torch.load(path, weights_only=True))
        return trainer


def fit(
    run: RunWriter, config: dict[str, Any], *, log: Callable[[str], None] = lambda line: None
) -> DenoiseTrainer:
    """Train to ``config['train']['epochs']``, resuming from the run's last checkpoint when it has one."""
    trainer = DenoiseTrainer(config)
    saved = run.resume_state()
    if saved is not None:
        trainer.load_state_dict(saved)
    images = clean_images(config)
    settings = config["train"]
    batches = math.ceil(len(images["train"]) / settings["batch_size"])
    while trainer.epoch < settings["epochs"]:
        order = torch.randperm(len(images["train"]), generator=torch.Generator().manual_seed(trainer.epoch))
        losses = [trainer.train_step(images["train"][order[index::batches]]) for index in range(batches)]
        trainer.epoch += 1
        psnr = mean_psnr(trainer.model, images["val"], settings["sigma"], seed=config["eval"]["noise_seed"])
        trainer.history.append(
            {"epoch": trainer.epoch, "train_loss": sum(losses) / batches, "val_psnr": psnr}
        )
        run.log(epoch=trainer.epoch, step=trainer.step, train_loss=sum(losses) / batches, val_psnr=psnr)
        state = trainer.state_dict()
        run.checkpoint(
            trainer.model,
            epoch=trainer.epoch,
            step=trainer.step,
            value=psnr,
            state={key: state[key] for key in ("optimizer", "scheduler", "rng", "history")},
        )
        log(f"epoch {trainer.epoch}/{settings['epochs']} loss {losses[-1]:.5f} val_psnr {psnr:.2f} dB")
    return trainer
