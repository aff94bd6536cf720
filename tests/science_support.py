"""Helpers for the science-gate tests: edit a real capsule the way a defect would, and lay datasets out."""

from __future__ import annotations

import copy
import csv
import functools
import hashlib
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from capsules import COMPACT_DEMO_CONFIG, COMPACT_TEST_FRACTION

from runaudit.examples.digits import data as digits_data
from runaudit.examples.digits.build import produce


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=2))
    return document


def edit_csv(path: Path, change: Callable[[list[dict[str, str]]], None]) -> None:
    """Rewrite train.csv row by row (``change`` edits the list of row dicts in place)."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    change(rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue())


def edit_config(capsule: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change config.yaml and re-bind its hash in run.json, as a producer would have declared it."""
    config = yaml.safe_load((capsule / "config.yaml").read_text())
    change(config)
    data = yaml.safe_dump(config, sort_keys=True).encode()
    (capsule / "config.yaml").write_bytes(data)
    edit_json(capsule / "run.json", lambda run: run["config"].update(sha256=hashlib.sha256(data).hexdigest()))


def copy_capsule(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def set_metric(capsule: Path, metric: str, condition: str, value: float) -> None:
    def change(document: dict[str, Any]) -> None:
        for row in document["metrics"]:
            if row["metric"] == metric and row["condition_id"] == condition:
                row["value"] = value

    edit_json(capsule / "test" / "main" / "metrics.json", change)


@functools.cache
def digits() -> digits_data.Digits:
    return digits_data.load()


def digit_png(index: int, images: np.ndarray | None = None) -> bytes:
    """One sklearn digit as an 8×8 grey PNG (0..240)."""
    from PIL import Image

    pixels = (digits().images if images is None else images)[index]
    buffer = io.BytesIO()
    Image.fromarray((pixels * 15.0).round().clip(0, 255).astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_list(path: Path, rows: Iterable[dict[str, Any]], columns: list[str]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def bind_split(
    capsule: Path, split_id: str, sha256: str, counts: dict[str, int], scheme: str, **extra: Any
) -> None:
    """Point the run at another split manifest, as its producer would have declared it."""
    edit_json(
        capsule / "run.json",
        lambda run: run.update(
            split={
                "split_id": split_id,
                "scheme": scheme,
                "manifest_sha256": sha256,
                "counts": counts,
                **extra,
            }
        ),
    )


def verdict(outcome: Any, audit: str, subject: str | None = None) -> dict[str, Any]:
    """The one verdict of ``audit`` (and ``subject``) in a harness run's report."""
    found = [item for item in outcome.find(audit) if subject is None or item["subject"] == subject]
    assert len(found) == 1, (audit, subject, [item["subject"] for item in outcome.find(audit)])
    return found[0]


def declare_sibling(
    source: Path, project: Path, run_id: str, arm: str, seed: int, accuracy: float, ablated: list[str]
) -> Path:
    """A copy of the demo capsule declared as one seed of ``arm`` in comparison group "worked", with its
    clean accuracy set to ``accuracy`` (and, for an ablation, the model's hidden width changed)."""
    capsule = copy_capsule(source, project / "export" / run_id)

    def declare(run: dict) -> None:
        run.update(run_id=run_id, comparison={"group": "worked", "arm": arm, "ablated": ablated})
        run["seed"]["values"] = [seed]
        run.pop("declarations")

    edit_json(capsule / "run.json", declare)
    edit_json(capsule / "test" / "main" / "metrics.json", lambda metrics: metrics.update(run_id=run_id))
    set_metric(capsule, "accuracy", "clean", accuracy)

    def configure(config: dict) -> None:
        config["train"]["seed"] = seed
        if ablated:
            config["model"]["hidden"] = 128

    edit_config(capsule, configure)
    return capsule


# The seed document's worked example: three baseline seeds and one single-seed probe (clean accuracy).
WORKED_BASELINE = {"base-s1": (1, 42.63), "base-s2": (2, 49.30), "base-s3": (3, 47.26)}
WORKED_PROBE = ("probe-s4", 4, 49.12)


def declare_worked_group(capsule_dir: Path, project: Path) -> Path:
    """Comparison group "worked" under ``project``: the baseline seeds and the probe (which it returns)."""
    for run_id, (seed, accuracy) in WORKED_BASELINE.items():
        declare_sibling(capsule_dir, project, run_id, "baseline", seed, accuracy, [])
    run_id, seed, accuracy = WORKED_PROBE
    return declare_sibling(capsule_dir, project, run_id, "probe", seed, accuracy, ["model.hidden"])


def produce_demo_seeds(root: Path, run_ids: Iterable[str], *, arm: str, epochs: int = 2) -> None:
    """Train one real demo run per id under ``root/active/`` (seeds 1, 2, ...), as one seed each of
    ``arm``, on the test split of the tests' demo, in this process.

    The same training and writer as the demo's command line (``train_demo_seeds``), without an interpreter
    of its own per seed: each would import torch and its compiler afresh, ~2.5 s of CPU on the 2-core
    development machine, where this worker has them already.
    """
    for seed, run_id in enumerate(run_ids, start=1):
        config = copy.deepcopy(COMPACT_DEMO_CONFIG)
        config["train"].update(seed=seed, epochs=epochs)
        produce(root, run_id, config, arm=arm, log=lambda line: None)


def train_demo_seeds(root: Path, run_ids: Iterable[str], *options: str, epochs: int = 2) -> None:
    """Train one real demo run per id under ``root/active/`` (seeds 1, 2, ...), side by side, through the
    demo's own command line, on the test split of the tests' demo; ``options`` go to each (``--tensorboard``,
    ``--wandb``: trackers that write from the training process, which must be one of its own)."""
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runaudit.examples.digits",
                "produce",
                "--root",
                str(root),
                "--run-id",
                run_id,
                "--seed",
                str(seed),
                "--epochs",
                str(epochs),
                "--test-fraction",
                str(COMPACT_TEST_FRACTION),  # the demo project's own split
                *options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for seed, run_id in enumerate(run_ids, start=1)
    ]
    for child in children:
        _, err = child.communicate(timeout=600)
        assert child.returncode == 0, err.decode()
