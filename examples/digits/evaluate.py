"""Evaluate the best checkpoint on the test split under every condition, through the capsule writer.

The writer stores the per-item rows as ``results.parquet``, derives ``metrics.json`` from them, and keeps
the renders of the test set's fixed selection (docs/capsule.md §4-§7).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from runaudit.examples.digits import render
from runaudit.examples.digits.data import Digits
from runaudit.examples.digits.model import build
from runaudit.writer import Metric, RunWriter

TEST_ID = "main"
ROLES = ("input", "prediction")
METRICS = (
    Metric("accuracy", "higher", "mean", precision=4),
    Metric("cross_entropy", "lower", "mean", precision=4),
)
PROTOCOL_ID = "digits-top1-v1"


def condition_inputs(clean: np.ndarray, noise_std: float, rng: np.random.Generator) -> np.ndarray:
    """The evaluation input path: clean inputs under one condition's noise, kept in [0, 1]."""
    noise = rng.normal(0.0, noise_std, size=clean.shape).astype(np.float32) if noise_std else 0.0
    return np.clip(clean + noise, 0.0, 1.0).astype(np.float32)


def predict(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The scoring forward: eval mode, no autograd (the smoke adapter checks exactly this)."""
    model.eval()
    with torch.no_grad():
        return model(inputs)


def evaluate(run: RunWriter, config: dict[str, Any], dataset: Digits, test_indices: np.ndarray) -> None:
    """Score the best checkpoint on the test split under each condition; the writer stores the test."""
    model = build(config)
    model.load_state_dict(run.best_weights())
    clean = dataset.inputs(test_indices)
    targets = dataset.labels[test_indices]
    sample_ids = [dataset.sample_ids[index] for index in test_indices]
    conditions: dict[str, float] = config["eval"]["conditions"]
    noise_rng = np.random.default_rng(config["eval"]["noise_seed"])
    with run.test(
        TEST_ID,
        sample_ids=sample_ids,
        conditions=list(conditions),
        roles=ROLES,
        selection_seed=config["eval"]["selection_seed"],
    ) as test:
        position = {sample_id: index for index, sample_id in enumerate(sample_ids)}
        for condition, noise_std in conditions.items():
            inputs = condition_inputs(clean, noise_std, noise_rng)
            logits = predict(model, torch.from_numpy(inputs))
            finite = torch.isfinite(logits).all(dim=1).numpy()
            losses = nn.functional.cross_entropy(logits, torch.from_numpy(targets), reduction="none").numpy()
            predictions = logits.argmax(dim=1).numpy()
            test.score(
                condition,
                sample_ids,
                valid=finite,
                forward_finite=finite,
                accuracy=(predictions == targets).astype(np.float64),
                cross_entropy=losses.astype(np.float64),
                target=targets,
                pred=predictions,
                output=logits.numpy(),
            )
            probabilities = torch.softmax(logits, dim=1).numpy()
            for sample_id in test.selected:
                index = position[sample_id]
                test.render(
                    condition,
                    sample_id,
                    input=render.input_png(inputs[index, 0]),
                    prediction=render.prediction_png(probabilities[index], int(targets[index])),
                )
