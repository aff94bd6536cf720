"""The denoiser's smoke adapter: its trainer object *is* the training state the gate steps and resumes.

``pytest -p runaudit.examples.denoise.adapter -m smoke``. Compared with the digits adapter, this one
passes the project's own object where the gate expects a state (it has ``model``, ``optimizer``,
``scheduler``, ``epoch``, ``step`` and its noise ``generators``), uses the trainer's own step and
checkpoint methods, and declares a reconstruction target for the linear probe.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from runaudit.adapter import Batch, InputPaths
from runaudit.examples.denoise.build import produce
from runaudit.examples.denoise.evaluate import denoise, noisy_inputs
from runaudit.examples.denoise.train import DEFAULT_CONFIG, DenoiseTrainer, clean_images, reconstruction_loss

CONFIG = DEFAULT_CONFIG
SIGMA, EVAL_SEED = CONFIG["train"]["sigma"], CONFIG["eval"]["noise_seed"]
TRAIN_BATCH, EVAL_BATCH, PARITY_SAMPLES, PROBE_ITEMS = 16, 64, 8, 400


@pytest.fixture(scope="session")
def images() -> dict[str, torch.Tensor]:
    return clean_images(CONFIG)


@pytest.fixture(scope="session")
def smoke_state() -> Callable[[], DenoiseTrainer]:
    return lambda: DenoiseTrainer(CONFIG)


@pytest.fixture(scope="session")
def smoke_train_batch(images: dict[str, torch.Tensor]) -> Batch:
    """Clean digits through the training input path (the trainer's noise, drawn from a fresh trainer)."""
    clean = images["train"][:TRAIN_BATCH]
    return Batch(DenoiseTrainer(CONFIG).corrupt(clean), clean)


@pytest.fixture(scope="session")
def smoke_eval_batch(images: dict[str, torch.Tensor]) -> Batch:
    clean = images["test"][:EVAL_BATCH]
    return Batch(noisy_inputs(clean, SIGMA, seed=EVAL_SEED), clean)


@pytest.fixture(scope="session")
def smoke_loss() -> Callable[[torch.nn.Module, Batch], torch.Tensor]:
    return lambda model, batch: reconstruction_loss(model(batch.inputs), batch.targets)


@pytest.fixture(scope="session")
def smoke_step() -> Callable[[DenoiseTrainer, Batch], float]:
    """The trainer's own step; it corrupts the clean targets itself, with its own generator."""
    return lambda trainer, batch: trainer.train_step(batch.targets)


@pytest.fixture(scope="session")
def smoke_predict() -> Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]:
    return denoise


@pytest.fixture(scope="session")
def smoke_save() -> Callable[[DenoiseTrainer, Path], None]:
    return lambda trainer, path: trainer.save(path)


@pytest.fixture(scope="session")
def smoke_load() -> Callable[[Path], DenoiseTrainer]:
    return lambda path: DenoiseTrainer.resume(CONFIG, path)


@pytest.fixture(scope="session")
def smoke_input_paths(images: dict[str, torch.Tensor]) -> InputPaths:
    """Both input paths with their noise off: what remains (scale, clipping, layout) must agree."""
    quiet = {**CONFIG, "train": {**CONFIG["train"], "sigma": 0.0}}
    return InputPaths(
        raw=list(images["test"][:PARITY_SAMPLES]),
        train=lambda clean: DenoiseTrainer(quiet).corrupt(clean),
        eval=lambda clean: noisy_inputs(clean, 0.0, seed=EVAL_SEED),
    )


@pytest.fixture(scope="session")
def smoke_probe_data(images: dict[str, torch.Tensor]) -> Batch:
    """Noisy digits and their clean versions: does a linear map already recover some of the signal?"""
    clean = images["test"][:PROBE_ITEMS]
    return Batch(noisy_inputs(clean, SIGMA, seed=EVAL_SEED), clean)


@pytest.fixture(scope="session")
def smoke_capsule() -> Callable[[Path, str], None]:
    """A one-epoch run written by the project's own producer (the capsule writer), for the round trip."""

    def write(root: Path, run_id: str) -> None:
        config = {**CONFIG, "train": {**CONFIG["train"], "epochs": 1}}
        produce(root, run_id, config)

    return write
