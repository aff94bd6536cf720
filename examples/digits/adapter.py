"""The demo's smoke adapter: the digits project's own training code, handed to runaudit's smoke gate.

``pytest -p runaudit.examples.digits.adapter -m smoke`` loads it as a plugin. Every fixture calls the
code the demo's trainer and evaluator run (``train.py``, ``evaluate.py``, ``build.py``) on a few real
digits: nothing here re-implements a step, a checkpoint or an input path, or the smoke would audit a copy.
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from runaudit.adapter import Batch, EvalInputsFn, EvalModelFn, InputPaths, Training
from runaudit.examples.digits import data as digits_data
from runaudit.examples.digits.build import produce
from runaudit.examples.digits.evaluate import TEST_ID, condition_inputs, predict
from runaudit.examples.digits.model import build
from runaudit.examples.digits.train import (
    DEFAULT_CONFIG,
    build_training,
    restore_training,
    save_checkpoint,
    train_step,
    training_loss,
    training_state,
)

CONFIG = DEFAULT_CONFIG
TRAIN_BATCH, EVAL_BATCH, PARITY_SAMPLES, PROBE_ITEMS = 16, 64, 8, 600


def tiny_config() -> dict[str, Any]:
    """The demo's configuration cut to one epoch: what the smoke's capsule round trip trains."""
    config = copy.deepcopy(CONFIG)
    config["train"]["epochs"] = 1
    return config


@pytest.fixture(scope="session")
def digits() -> tuple[digits_data.Digits, dict[str, np.ndarray]]:
    dataset = digits_data.load()
    split = digits_data.stratified_split(
        dataset.labels,
        seed=CONFIG["data"]["split_seed"],
        fractions=(CONFIG["data"]["val_fraction"], CONFIG["data"]["test_fraction"]),
    )
    return dataset, split


def _batch(dataset: digits_data.Digits, indices: np.ndarray) -> Batch:
    return Batch(torch.from_numpy(dataset.inputs(indices)), torch.from_numpy(dataset.labels[indices]))


@pytest.fixture(scope="session")
def smoke_state(digits: tuple[digits_data.Digits, dict[str, np.ndarray]]) -> Callable[[], Training]:
    _, split = digits

    def fresh() -> Training:
        torch.manual_seed(CONFIG["train"]["seed"])  # as train() does at the start of every process
        model, optimizer, scheduler = build_training(CONFIG, len(split["train"]))
        return Training(model, optimizer, scheduler)

    return fresh


@pytest.fixture(scope="session")
def smoke_train_batch(digits: tuple[digits_data.Digits, dict[str, np.ndarray]]) -> Batch:
    dataset, split = digits
    return _batch(dataset, split["train"][:TRAIN_BATCH])


@pytest.fixture(scope="session")
def smoke_eval_batch(digits: tuple[digits_data.Digits, dict[str, np.ndarray]]) -> Batch:
    dataset, split = digits
    indices = split["test"][:EVAL_BATCH]
    clean = condition_inputs(dataset.inputs(indices), 0.0, np.random.default_rng(0))
    return Batch(torch.from_numpy(clean), torch.from_numpy(dataset.labels[indices]))


@pytest.fixture(scope="session")
def smoke_loss() -> Callable[[torch.nn.Module, Batch], torch.Tensor]:
    return lambda model, batch: training_loss(model, batch.inputs, batch.targets)


@pytest.fixture(scope="session")
def smoke_step() -> Callable[[Training, Batch], float]:
    def step(state: Training, batch: Batch) -> float:
        loss, _ = train_step(state.model, state.optimizer, state.scheduler, batch.inputs, batch.targets)
        state.step += 1
        return loss

    return step


@pytest.fixture(scope="session")
def smoke_predict() -> Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]:
    return predict


@pytest.fixture(scope="session")
def smoke_save() -> Callable[[Training, Path], None]:
    def save(state: Training, path: Path) -> None:
        best = {"epoch": 0, "step": 0, "value": -math.inf}
        payload = training_state(
            state.model,
            state.optimizer,
            state.scheduler,
            epoch=state.epoch,
            step=state.step,
            best=best,
            history=[],
        )
        save_checkpoint(path, payload)

    return save


@pytest.fixture(scope="session")
def smoke_load(smoke_state: Callable[[], Training]) -> Callable[[Path], Training]:
    def load(path: Path) -> Training:
        state = smoke_state()
        saved = restore_training(path, state.model, state.optimizer, state.scheduler)
        state.epoch, state.step = saved["epoch"], saved["step"]
        return state

    return load


@pytest.fixture(scope="session")
def smoke_input_paths(digits: tuple[digits_data.Digits, dict[str, np.ndarray]]) -> InputPaths:
    """The trainer feeds ``dataset.inputs``; the evaluator feeds the clean condition of ``condition_inputs``."""
    dataset, split = digits

    def trained(index: int) -> np.ndarray:
        item: np.ndarray = dataset.inputs(np.array([index]))[0]
        return item

    def scored(index: int) -> np.ndarray:
        conditioned = condition_inputs(dataset.inputs(np.array([index])), 0.0, np.random.default_rng(0))
        item: np.ndarray = conditioned[0]
        return item

    return InputPaths(
        raw=[int(index) for index in split["test"][:PARITY_SAMPLES]], train=trained, eval=scored
    )


@pytest.fixture(scope="session")
def smoke_probe_data(digits: tuple[digits_data.Digits, dict[str, np.ndarray]]) -> Batch:
    """Raw pixels (0–16) and labels of training items: is the class linearly in the input at all?"""
    dataset, split = digits
    indices = split["train"][:PROBE_ITEMS]
    return Batch(dataset.images[indices], dataset.labels[indices])


@pytest.fixture(scope="session")
def smoke_capsule() -> Callable[[Path, str], None]:
    def write(root: Path, run_id: str) -> None:
        produce(root, run_id, tiny_config(), log=lambda line: None)

    return write


# -- evaluation.fresh: the sealed run's best checkpoint, re-scored on the evaluator's own inputs -------


def evaluation_arrays(config: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, np.ndarray], np.ndarray]:
    """Every test item under every condition, built as ``evaluate()`` builds them for ``config``: each
    sample id's position, the inputs of each condition (one row per position) and the labels.

    The noise of every condition comes from one generator drawn over the whole test array, condition after
    condition in the config's order, so an item's noise depends on every item and condition before it: the
    whole arrays are regenerated in the evaluator's order, with its own ``condition_inputs``, and items are
    picked from them after.
    """
    # Key order kept: it is the order the noise is drawn in.
    return _evaluation_arrays(json.dumps(_dates_as_text(config)))


def _dates_as_text(value: Any) -> Any:
    """``value`` with every date in it, as a key or a value, written as ISO text (``2024-01-01``).

    YAML reads ``2024-01-01`` as a date and ``2024-01-01 12:00:00`` as a datetime, and a valid config may
    hold either (a run's stamp, a data snapshot's day). JSON has no date type, so ``json.dumps`` refused the
    whole config and the fresh evaluation failed on a value it never reads; ``default=`` alone would still
    refuse a date used as a key. Recursion is bounded: config.yaml nests at most ``CONFIG_DEPTH`` levels.
    """
    if isinstance(value, datetime.date):  # a datetime is a date too
        return value.isoformat()
    if isinstance(value, Mapping):
        return {
            key.isoformat() if isinstance(key, datetime.date) else key: _dates_as_text(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_dates_as_text(item) for item in value]
    return value


@functools.lru_cache(maxsize=4)
def _evaluation_arrays(config_json: str) -> tuple[dict[str, int], dict[str, np.ndarray], np.ndarray]:
    config = json.loads(config_json)
    dataset = digits_data.load()
    split = digits_data.stratified_split(
        dataset.labels,
        seed=config["data"]["split_seed"],
        fractions=(config["data"]["val_fraction"], config["data"]["test_fraction"]),
    )
    indices = split["test"]
    clean = dataset.inputs(indices)
    noise_rng = np.random.default_rng(config["eval"]["noise_seed"])
    conditioned = {
        condition: condition_inputs(clean, noise_std, noise_rng)
        for condition, noise_std in config["eval"]["conditions"].items()
    }
    positions = {dataset.sample_ids[index]: position for position, index in enumerate(indices)}
    return positions, conditioned, dataset.labels[indices]


@pytest.fixture(scope="session")
def smoke_eval_model() -> EvalModelFn:
    """A checkpoint (``best.pth``) in a fresh network built from the run's config, as ``evaluate()`` loads it."""

    def load(path: Path, config: Mapping[str, Any]) -> torch.nn.Module:
        model = build(dict(config))
        model.load_state_dict(torch.load(path, weights_only=True)["model"])
        return model

    return load


@pytest.fixture(scope="session")
def smoke_eval_inputs() -> EvalInputsFn:
    """The evaluator's inputs and labels of ``sample_ids`` under one condition of the demo's one test."""

    def inputs(
        test_id: str, condition_id: str, sample_ids: Sequence[str], config: Mapping[str, Any]
    ) -> Batch:
        if test_id != TEST_ID:
            raise KeyError(f"the digits evaluator writes test {TEST_ID!r}, not {test_id!r}")
        positions, conditioned, labels = evaluation_arrays(config)
        if condition_id not in conditioned:
            raise KeyError(f"the config declares no condition {condition_id!r} (eval.conditions)")
        unknown = [sample_id for sample_id in sample_ids if sample_id not in positions]
        if unknown:
            raise KeyError(f"{len(unknown)} sample id(s) are not in the test split, e.g. {unknown[0]!r}")
        rows = np.array([positions[sample_id] for sample_id in sample_ids], dtype=np.int64)
        return Batch(torch.from_numpy(conditioned[condition_id][rows]), torch.from_numpy(labels[rows]))

    return inputs
