"""The digits dataset, its stratified train/val/test split and the split manifest (docs/capsule.md §8)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from runaudit.writer import Dataset, Split

DATASET_ID = "sklearn-digits"
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Digits:
    images: np.ndarray  # uint8, (n, 8, 8), values 0..16
    labels: np.ndarray  # int64, (n,)
    sample_ids: tuple[str, ...]
    version: str

    @property
    def content_sha256(self) -> str:
        digest = hashlib.sha256(self.images.tobytes())
        digest.update(self.labels.astype("<i8").tobytes())
        return digest.hexdigest()

    def item_sha256(self, index: int) -> str:
        return hashlib.sha256(self.images[index].tobytes()).hexdigest()

    def inputs(self, indices: np.ndarray) -> np.ndarray:
        """Model inputs in [0, 1], shape (n, 1, 8, 8), float32."""
        inputs: np.ndarray = (self.images[indices].astype(np.float32) / 16.0)[:, None]
        return inputs


def load() -> Digits:
    """scikit-learn's digits, read from the CSV the installed scikit-learn ships with them.

    The file is found without importing scikit-learn: ``sklearn.datasets`` pulls in ``scipy.stats`` and
    costs about 1.4 s, more than two epochs of the demo. Where a release keeps it elsewhere,
    ``load_digits`` reads it. tests/test_leakage.py checks that both give the same images and labels.
    """
    spec = importlib.util.find_spec("sklearn")  # locates the package without running its __init__
    folders = spec.submodule_search_locations if spec is not None else None
    shipped = Path(next(iter(folders))) / "datasets" / "data" / "digits.csv.gz" if folders else None
    if shipped is not None and shipped.is_file():
        table = np.loadtxt(shipped, delimiter=",")
        images, labels = table[:, :-1].reshape(-1, 8, 8), table[:, -1]
    else:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images, labels = bunch.images, bunch.target
    return Digits(
        images=images.astype(np.uint8),
        labels=labels.astype(np.int64),
        sample_ids=tuple(f"d{index:04d}" for index in range(len(images))),
        version=f"sklearn-{importlib.metadata.version('scikit-learn')}",
    )


def stratified_split(
    labels: np.ndarray, *, seed: int, fractions: tuple[float, float]
) -> dict[str, np.ndarray]:
    """Per class, shuffle with ``seed`` and cut into train / val / test at ``fractions`` (val, test)."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SPLITS}
    val_fraction, test_fraction = fractions
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_val = round(len(members) * val_fraction)
        n_test = round(len(members) * test_fraction)
        parts["val"].append(members[:n_val])
        parts["test"].append(members[n_val : n_val + n_test])
        parts["train"].append(members[n_val + n_test :])
    return {name: np.sort(np.concatenate(chunks)) for name, chunks in parts.items()}


def split_manifest(data: Digits, split: dict[str, np.ndarray]) -> dict[str, object]:
    """The split manifest's columns (docs/capsule.md §8), one row per item: where it went, its address in
    the source, the SHA-256 of its bytes and its perceptual hash (for the near-duplicate audit). The
    capsule writer stores them as ``_trust/splits/<split_id>.parquet``."""
    import pyarrow as pa
    from PIL import Image

    from runaudit.perceptual_hash import phash64

    rows = sorted((int(index), name) for name, indices in split.items() for index in indices)
    return {
        "sample_id": pa.array([data.sample_ids[index] for index, _ in rows], pa.string()),
        "split": pa.array([name for _, name in rows], pa.string()),
        "path": pa.array([f"load_digits/images[{index}]" for index, _ in rows], pa.string()),
        "sha256": pa.array([data.item_sha256(index) for index, _ in rows], pa.string()),
        "phash": pa.array(
            [phash64(Image.fromarray(data.images[index] * 15)) for index, _ in rows], pa.uint64()
        ),
        "label": pa.array([int(data.labels[index]) for index, _ in rows], pa.int64()),
    }


def identities(data: Digits, split: dict[str, np.ndarray], split_seed: int) -> tuple[Dataset, Split]:
    """The dataset and split as ``run.json`` declares them, with the split manifest the writer stores."""
    from runaudit.writer import Dataset, Split

    return Dataset(DATASET_ID, data.version, data.content_sha256), Split(
        f"digits-stratified-s{split_seed}",
        "stratified",
        train=len(split["train"]),
        val=len(split["val"]),
        test=len(split["test"]),
        manifest=split_manifest(data, split),
    )
