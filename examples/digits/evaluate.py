"""Evaluate ``best.pth`` on the test split under every condition; write the test folder and ``_trust/``.

Writes ``test/<test-id>/{metrics.json, results.parquet, vis/<condition>/<role>/<sample>.png}`` through a
staging folder that replaces the previous evaluation in one rename, the fixed selection (created once per
test set, then reused by every model) and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from runaudit.atomic import write_json_atomic
from runaudit.examples.digits import render
from runaudit.examples.digits.data import Digits
from runaudit.examples.digits.model import build

TEST_ID = "main"
ROLES = ("input", "prediction")
METRICS: tuple[dict[str, Any], ...] = (
    {"name": "accuracy", "direction": "higher", "aggregation": "mean", "precision": 4},
    {"name": "cross_entropy", "direction": "lower", "aggregation": "mean", "precision": 4},
)
PROTOCOL_ID = "digits-top1-v1"


def selection_for(
    root: Path, selection_id: str, *, dataset_id: str, split_id: str, test_ids: list[str], seed: int
) -> tuple[dict[str, Any], str]:
    """The fixed visual roster of this test set: created once, reused by every later model."""
    path = root / "_trust" / "selections" / f"{selection_id}.json"
    k = min(100, len(test_ids))
    chosen = np.random.default_rng(seed).choice(sorted(test_ids), size=k, replace=False)
    wanted = {
        "selection_id": selection_id,
        "dataset_id": dataset_id,
        "split_id": split_id,
        "n_test": len(test_ids),
        "k": k,
        "sample_ids": sorted(str(item) for item in chosen),
        "method": "seeded_random",
        "seed": seed,
        "performance_ranked": False,
    }
    if path.exists():
        existing = json.loads(path.read_bytes())
        if existing.get("sample_ids") != wanted["sample_ids"]:
            raise RuntimeError(f"{path} already fixes another roster for this test set; it is never re-drawn")
    else:
        write_json_atomic(path, wanted)
    return json.loads(path.read_bytes()), hashlib.sha256(path.read_bytes()).hexdigest()


def condition_inputs(clean: np.ndarray, noise_std: float, rng: np.random.Generator) -> np.ndarray:
    """The evaluation input path: clean inputs under one condition's noise, kept in [0, 1]."""
    noise = rng.normal(0.0, noise_std, size=clean.shape).astype(np.float32) if noise_std else 0.0
    return np.clip(clean + noise, 0.0, 1.0).astype(np.float32)


def predict(model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The scoring forward: eval mode, no autograd (the smoke adapter checks exactly this)."""
    model.eval()
    with torch.no_grad():
        return model(inputs)


def evaluate(
    workdir: Path,
    config: dict[str, Any],
    dataset: Digits,
    test_indices: np.ndarray,
    *,
    run_id: str,
    selection: dict[str, Any],
) -> dict[str, Any]:
    """Score best.pth on the test split; returns the test's run.json declaration."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    best_bytes = (workdir / "best.pth").read_bytes()
    state = torch.load(workdir / "best.pth", weights_only=True)
    model = build(config)
    model.load_state_dict(state["model"])

    clean = dataset.inputs(test_indices)
    targets = dataset.labels[test_indices]
    sample_ids = [dataset.sample_ids[index] for index in test_indices]
    conditions: dict[str, float] = config["eval"]["conditions"]
    noise_rng = np.random.default_rng(config["eval"]["noise_seed"])
    staging = workdir / f".staging-{TEST_ID}"
    if staging.exists():
        shutil.rmtree(staging)
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "condition_id",
            "sample_id",
            "item_index",
            "valid",
            "forward_finite",
            "m.accuracy",
            "m.cross_entropy",
            "target",
            "pred",
            "output",
        )
    }
    metrics = []
    n_scored = len(test_indices)
    chosen = set(selection["sample_ids"])
    for condition, noise_std in conditions.items():
        inputs = condition_inputs(clean, noise_std, noise_rng)
        logits = predict(model, torch.from_numpy(inputs))
        finite = torch.isfinite(logits).all(dim=1).numpy()
        losses = nn.functional.cross_entropy(logits, torch.from_numpy(targets), reduction="none").numpy()
        probabilities = torch.softmax(logits, dim=1).numpy()
        predictions = logits.argmax(dim=1).numpy()
        correct = (predictions == targets).astype(np.float64)
        columns["condition_id"] += [condition] * len(sample_ids)
        columns["sample_id"] += sample_ids
        columns["item_index"] += [int(index) for index in test_indices]
        columns["valid"] += finite.tolist()
        columns["forward_finite"] += finite.tolist()
        columns["m.accuracy"] += correct.tolist()
        columns["m.cross_entropy"] += losses.astype(np.float64).tolist()
        columns["target"] += targets.tolist()
        columns["pred"] += predictions.tolist()
        columns["output"] += logits.numpy().astype(np.float32).tolist()
        n_scored = min(n_scored, int(finite.sum()))
        for spec, values in (("accuracy", correct), ("cross_entropy", losses.astype(np.float64))):
            declared = next(item for item in METRICS if item["name"] == spec)
            metrics.append(
                {
                    "metric": spec,
                    "condition_id": condition,
                    "value": round(float(values[finite].mean()), declared["precision"]),
                    "direction": declared["direction"],
                    "aggregation": declared["aggregation"],
                    "precision": declared["precision"],
                }
            )
        for position, sample_id in enumerate(sample_ids):
            if sample_id not in chosen:
                continue
            folder = staging / "vis" / condition
            (folder / "input").mkdir(parents=True, exist_ok=True)
            (folder / "prediction").mkdir(parents=True, exist_ok=True)
            (folder / "input" / f"{sample_id}.png").write_bytes(render.input_png(inputs[position, 0]))
            (folder / "prediction" / f"{sample_id}.png").write_bytes(
                render.prediction_png(probabilities[position], int(targets[position]))
            )
    table = pa.table(
        {
            "condition_id": pa.array(columns["condition_id"], pa.string()),
            "sample_id": pa.array(columns["sample_id"], pa.string()),
            "item_index": pa.array(columns["item_index"], pa.int64()),
            "valid": pa.array(columns["valid"], pa.bool_()),
            "forward_finite": pa.array(columns["forward_finite"], pa.bool_()),
            "m.accuracy": pa.array(columns["m.accuracy"], pa.float64()),
            "m.cross_entropy": pa.array(columns["m.cross_entropy"], pa.float64()),
            "target": pa.array(columns["target"], pa.int64()),
            "pred": pa.array(columns["pred"], pa.int64()),
            "output": pa.array(columns["output"], pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, staging / "results.parquet")
    declaration = {
        "test_id": TEST_ID,
        "split": "test",
        "n_test": len(sample_ids),
        "conditions": list(conditions),
        "roles": list(ROLES),
        "selection_id": selection["selection_id"],
        "ground_truth_status": "available",
        "metric_applicability": "applicable",
    }
    write_json_atomic(
        staging / "metrics.json",
        {
            "schema_version": "runaudit.metrics/1",
            "run_id": run_id,
            "test_id": TEST_ID,
            "split": "test",
            "n_test": len(sample_ids),
            "n_scored": n_scored,
            "protocol_id": PROTOCOL_ID,
            "checkpoint_sha256": hashlib.sha256(best_bytes).hexdigest(),
            "ground_truth_status": "available",
            "metric_applicability": "applicable",
            "metrics": metrics,
        },
    )
    target = workdir / "test" / TEST_ID
    if target.exists():
        shutil.rmtree(target)  # a previous evaluation in the mutable workspace, replaced whole
    target.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(target)
    return declaration
