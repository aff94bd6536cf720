"""One declared test, written by the capsule writer (docs/capsule.md §4-§7): per-item rows per condition,
the renders of the fixed selection, then ``results.parquet``, ``metrics.json`` (derived from the rows)
and ``vis/`` in one rename, or nothing at all.
"""

from __future__ import annotations

import io
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from runaudit.atomic import fsync_dir, write_atomic, write_json_atomic
from runaudit.hashing import sha256_file
from runaudit.statistics import headline_value
from runaudit.usage import WriterError

NO_GROUND_TRUTH = "unavailable_no_machine_readable_gt"


@dataclass(frozen=True)
class Metric:
    """A protocol metric (docs/capsule.md §3): ``direction`` is mandatory in the contract, so it is explicit
    here too; ``precision`` is the number of decimals ``metrics.json`` keeps."""

    name: str
    direction: Literal["higher", "lower"] = "higher"
    aggregation: Literal["mean", "median", "sum_ratio", "iqm"] = "mean"
    precision: int = 4
    unit: str | None = None

    def declaration(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "name": self.name,
            "direction": self.direction,
            "aggregation": self.aggregation,
            "precision": self.precision,
        }
        if self.unit is not None:
            found["unit"] = self.unit
        return found


@dataclass(frozen=True)
class RunFacts:
    """What a test needs from its run: where it lives, its protocol, its current best checkpoint, and
    where to record the test's declaration once it is written."""

    run_id: str
    folder: Path
    metrics: tuple[Metric, ...]
    protocol_id: str
    best_file: Callable[[], Path]
    recorded: Callable[[str, dict[str, Any]], None]


class TestWriter:
    """One declared test: per-item rows per condition, then renders; written whole on exit, or not at all."""

    __test__ = False  # not a pytest test class, whatever module imports it

    def __init__(
        self,
        run: RunFacts,
        test_id: str,
        sample_ids: list[str],
        conditions: list[str],
        roles: list[str],
        split: str,
        selection_id: str,
        selected: list[str],
        ground_truth: bool,
    ) -> None:
        self.run_id, self.folder, self.metrics = run.run_id, run.folder, run.metrics
        self.protocol_id, self.best_file, self.recorded = run.protocol_id, run.best_file, run.recorded
        self.test_id = test_id
        self.sample_ids, self.conditions, self.roles = sample_ids, conditions, roles
        self.split, self.selection_id, self.ground_truth = split, selection_id, ground_truth
        self.selected: list[str] = selected
        self._index = {sample_id: position for position, sample_id in enumerate(sample_ids)}
        self._rows: dict[str, dict[str, list[Any]]] = {}
        self._rendered: set[tuple[str, str, str]] = set()
        self.staging = run.folder / f".staging-{test_id}"
        if self.staging.exists():
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)

    def score(
        self,
        condition: str,
        sample_ids: Sequence[str],
        *,
        valid: Any = None,
        forward_finite: Any = None,
        target: Any = None,
        pred: Any = None,
        output: Any = None,
        **metrics: Any,
    ) -> None:
        """Per-item rows of ``condition`` for ``sample_ids`` (call once or per batch). Each protocol metric
        is a keyword with one value per item (``sum_ratio`` metrics: a ``(numerators, denominators)``
        pair); ``output`` is the model's output or embedding per item, ``target``/``pred`` the labels."""
        import numpy as np

        if condition not in self.conditions:
            raise WriterError(
                f"test {self.test_id}: condition {condition!r} is not declared ({', '.join(self.conditions)})"
            )
        ids = [str(item) for item in sample_ids]
        unknown = [item for item in ids if item not in self._index]
        if unknown:
            raise WriterError(
                f"test {self.test_id}: {len(unknown)} sample id(s) not in the test set, e.g. {unknown[0]!r}"
            )
        declared = {spec.name: spec for spec in self.metrics}
        if self.ground_truth:
            missing = [name for name in declared if name not in metrics]
            if missing:
                raise WriterError(
                    f"test {self.test_id} {condition}: metric(s) {', '.join(missing)} have no per-item values "
                    "(metrics.json is derived from them)"
                )
        extra = [name for name in metrics if name not in declared]
        if extra or (metrics and not self.ground_truth):
            raise WriterError(
                f"test {self.test_id}: {', '.join(extra or metrics)} "
                + ("are not protocol metrics" if extra else "given for a test without ground truth")
            )
        count = len(ids)
        columns: dict[str, Any] = {}
        finite = np.ones(count, dtype=bool)
        for name, values in metrics.items():
            if declared[name].aggregation == "sum_ratio":
                numerators, denominators = (self._vector(name, item, count, np.float64) for item in values)
                with np.errstate(divide="ignore", invalid="ignore"):
                    columns[f"m.{name}"] = numerators / denominators
                columns[f"num.{name}"], columns[f"den.{name}"] = numerators, denominators
            else:
                columns[f"m.{name}"] = self._vector(name, values, count, np.float64)
        if output is not None:
            outputs = np.asarray(as_numpy(output), dtype=np.float32).reshape(count, -1)
            finite &= np.isfinite(outputs).all(axis=1)
            columns["output"] = outputs
        for name, labels in (("target", target), ("pred", pred)):
            if labels is not None:
                columns[name] = self._vector(name, labels, count, None)
        finite_given = forward_finite is not None
        columns["forward_finite"] = (
            self._vector("forward_finite", forward_finite, count, bool) if finite_given else finite
        )
        if finite_given and (columns["forward_finite"] & ~finite).any():
            raise WriterError(
                f"test {self.test_id} {condition}: forward_finite is true for an output holding NaN or ±inf"
            )
        metric_finite = np.ones(count, dtype=bool)
        for name in metrics:
            metric_finite &= np.isfinite(columns[f"m.{name}"])
        columns["valid"] = (
            self._vector("valid", valid, count, bool)
            if valid is not None
            else columns["forward_finite"] & metric_finite
        )
        if (columns["valid"] & ~columns["forward_finite"]).any():
            raise WriterError(f"test {self.test_id} {condition}: a valid row must have a finite forward")
        rows = self._rows.setdefault(condition, {"sample_id": []})
        if set(ids) & set(rows["sample_id"]):
            raise WriterError(f"test {self.test_id} {condition}: a sample was scored twice")
        if rows["sample_id"] and set(columns) != set(rows) - {"sample_id"}:
            raise WriterError(f"test {self.test_id} {condition}: every batch must give the same columns")
        rows["sample_id"].extend(ids)
        for name, values in columns.items():
            rows.setdefault(name, []).extend(values.tolist() if hasattr(values, "tolist") else values)

    def render(self, condition: str, sample_id: str, **roles: Any) -> None:
        """The PNGs of one selected sample under ``condition``, one keyword per role
        (``input=..., prediction=...``): PNG bytes, a PIL image, or an array (H×W grey or H×W×3/4, also
        channels first; floats in [0, 1], integers in 0-255)."""
        if condition not in self.conditions:
            raise WriterError(
                f"test {self.test_id}: condition {condition!r} is not declared ({', '.join(self.conditions)})"
            )
        undeclared = [role for role in roles if role not in self.roles]
        if undeclared or not roles:
            raise WriterError(
                f"test {self.test_id}: render role(s) {', '.join(undeclared) or '(none given)'}; the test "
                f"declares {', '.join(self.roles)}"
            )
        if sample_id not in self.selected:
            raise WriterError(
                f"test {self.test_id}: sample {sample_id!r} is not in selection {self.selection_id}; render "
                "exactly test.selected"
            )
        for role, image in roles.items():
            path = self.staging / "vis" / condition / role / f"{sample_id}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png_bytes(image))
            self._rendered.add((condition, role, sample_id))

    def write(self) -> None:
        """Check the test is whole, then write ``results.parquet``, ``metrics.json`` and the renders in
        one rename (replacing an earlier evaluation of this test in ``active/``)."""
        import pyarrow.parquet as pq

        unscored = [condition for condition in self.conditions if condition not in self._rows]
        if unscored:
            raise WriterError(f"test {self.test_id}: condition(s) {', '.join(unscored)} were never scored")
        for condition, rows in self._rows.items():
            if len(rows["sample_id"]) != len(self.sample_ids):
                raise WriterError(
                    f"test {self.test_id} {condition}: {len(rows['sample_id'])} of {len(self.sample_ids)} "
                    "test samples were scored; every condition scores every sample"
                )
        wanted = {(c, r, s) for c in self.conditions for r in self.roles for s in self.selected}
        missing = sorted(wanted - self._rendered)
        if missing:
            condition, role, sample_id = missing[0]
            raise WriterError(
                f"test {self.test_id}: {len(missing)} render(s) missing, e.g. vis/{condition}/{role}/{sample_id}.png "
                "(every condition × role × selected sample)"
            )
        best_sha256 = sha256_file(self.best_file())
        table = self._table()
        write_atomic(self.staging / "results.parquet", lambda handle: pq.write_table(table, handle))
        valid_counts = [sum(rows["valid"]) for rows in self._rows.values()]
        applicable = self.ground_truth
        write_json_atomic(
            self.staging / "metrics.json",
            {
                "schema_version": "runaudit.metrics/1",
                "run_id": self.run_id,
                "test_id": self.test_id,
                "split": self.split,
                "n_test": len(self.sample_ids),
                "n_scored": min(valid_counts) if applicable else 0,
                "protocol_id": self.protocol_id,
                "checkpoint_sha256": best_sha256,
                "ground_truth_status": "available" if applicable else NO_GROUND_TRUTH,
                "metric_applicability": "applicable" if applicable else "not_applicable",
                "metrics": self._headline_rows() if applicable else [],
            },
        )
        target = self.folder / "test" / self.test_id
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.staging, target)
        fsync_dir(target.parent)
        self.recorded(
            self.test_id,
            {
                "checkpoint_sha256": best_sha256,
                "declaration": {
                    "test_id": self.test_id,
                    "split": self.split,
                    "n_test": len(self.sample_ids),
                    "conditions": self.conditions,
                    "roles": self.roles,
                    "selection_id": self.selection_id,
                    "ground_truth_status": "available" if applicable else NO_GROUND_TRUTH,
                    "metric_applicability": "applicable" if applicable else "not_applicable",
                },
            },
        )

    def _headline_rows(self) -> list[dict[str, Any]]:
        import numpy as np

        rows = []
        for condition in self.conditions:
            columns = self._rows[condition]
            valid = np.asarray(columns["valid"], dtype=bool)
            for spec in self.metrics:
                ratio = spec.aggregation == "sum_ratio"
                value = headline_value(
                    spec.aggregation,
                    np.asarray(columns[f"m.{spec.name}"], dtype=np.float64)[valid],
                    np.asarray(columns[f"num.{spec.name}"], dtype=np.float64)[valid] if ratio else None,
                    np.asarray(columns[f"den.{spec.name}"], dtype=np.float64)[valid] if ratio else None,
                )
                if not math.isfinite(value):
                    raise WriterError(
                        f"test {self.test_id} {condition}: {spec.name} over the valid items is {value}; a metric "
                        "over no valid item is not a result"
                    )
                rows.append(
                    {
                        "metric": spec.name,
                        "condition_id": condition,
                        "value": round(value, spec.precision),
                        "direction": spec.direction,
                        "aggregation": spec.aggregation,
                        "precision": spec.precision,
                    }
                )
        return rows

    def _table(self) -> Any:
        import pyarrow as pa

        names = [name for name in self._rows[self.conditions[0]] if name != "sample_id"]
        data: dict[str, list[Any]] = {"condition_id": [], "sample_id": [], "item_index": []}
        for name in names:
            data[name] = []
        for condition in self.conditions:
            rows = self._rows[condition]
            data["condition_id"] += [condition] * len(rows["sample_id"])
            data["sample_id"] += rows["sample_id"]
            data["item_index"] += [self._index[item] for item in rows["sample_id"]]
            for name in names:
                data[name] += rows[name]
        types = {"condition_id": pa.string(), "sample_id": pa.string(), "item_index": pa.int64()}
        types.update({"valid": pa.bool_(), "forward_finite": pa.bool_(), "output": pa.list_(pa.float32())})
        arrays = {}
        for name, values in data.items():
            if name in types:
                arrays[name] = pa.array(values, types[name])
            elif name.startswith(("m.", "num.", "den.")):
                arrays[name] = pa.array(values, pa.float64())
            else:  # target, pred: integers or strings, as given
                arrays[name] = pa.array(values)
        return pa.table(arrays)

    def _vector(self, name: str, values: Any, count: int, dtype: Any) -> Any:
        import numpy as np

        array = np.asarray(as_numpy(values))
        if dtype is not None:
            array = array.astype(dtype)
        if array.shape != (count,):
            raise WriterError(
                f"test {self.test_id}: {name} needs one value per sample ({count}), found shape {array.shape}"
            )
        if dtype is None and array.dtype.kind not in "iuUO":
            raise WriterError(
                f"test {self.test_id}: {name} holds {array.dtype}; labels are integers or strings"
            )
        if dtype is None and array.dtype.kind in "iu":
            array = array.astype(np.int64)
        elif dtype is None:
            array = array.astype(str)
        return array

    def __enter__(self) -> TestWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            try:
                self.write()
            finally:
                shutil.rmtree(self.staging, ignore_errors=True)
        else:
            shutil.rmtree(self.staging, ignore_errors=True)


def as_numpy(value: Any) -> Any:
    """A tensor as a numpy array (detached, on CPU); anything else as it is."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu().numpy()
    return value


def png_bytes(image: Any) -> bytes:
    if isinstance(image, (bytes, bytearray)):
        if not bytes(image[:8]) == b"\x89PNG\r\n\x1a\n":
            raise WriterError("render: bytes given are not a PNG")
        return bytes(image)
    import numpy as np
    from PIL import Image

    if not isinstance(image, Image.Image):
        array = np.asarray(as_numpy(image))
        if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3, 4):
            array = np.moveaxis(array, 0, -1)  # channels first, as torch holds images
        if array.ndim == 3 and array.shape[-1] == 1:
            array = array[..., 0]
        if array.dtype.kind == "f":
            array = np.clip(np.nan_to_num(array) * 255.0, 0, 255).round()
        if array.ndim not in (2, 3) or array.size == 0:
            raise WriterError(f"render: an image is H×W or H×W×3/4, found shape {array.shape}")
        image = Image.fromarray(array.astype(np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
