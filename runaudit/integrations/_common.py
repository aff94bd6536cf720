"""What the Lightning and Hugging Face callbacks share: options, train.csv rows, RNG state, per-item tests.

Framework-free (numpy, and torch for RNG state); each callback module adds its framework's hooks.
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from runaudit.usage import WriterError
from runaudit.writer import HISTORY_REQUIRED, RunWriter, open_run

# One render per selected sample: (sample_id, condition) -> {role: image} (PNG bytes, PIL image or array).
RenderFn = Callable[[str, str], Mapping[str, Any]]
# Keys a per-item test output may hold besides ``sample_id``, the metrics, ``condition`` and ``render``.
ITEM_COLUMNS = ("target", "pred", "output", "valid", "forward_finite")


def checked_options(options: Mapping[str, Any], *, filled: Sequence[str] = ()) -> dict[str, Any]:
    """``options`` as :func:`runaudit.writer.open_run` keyword arguments, refused now when one is unknown
    or a required one is missing (``filled`` names those the callback fills from the framework)."""
    parameters = {
        name: parameter
        for name, parameter in inspect.signature(open_run).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise WriterError(
            f"unknown open_run option(s) {', '.join(unknown)}; the callback takes open_run's keywords "
            f"({', '.join(parameters)})"
        )
    required = [
        name
        for name, parameter in parameters.items()
        if parameter.default is inspect.Parameter.empty and name not in options and name not in filled
    ]
    if required:
        raise WriterError(f"the callback needs open_run's {', '.join(required)} (keyword arguments)")
    return dict(options)


def scalar(name: str, value: Any) -> float | None:
    """A logged number (tensor, numpy or Python) as a float; None stays None."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    array = np.asarray(value, dtype=np.float64)
    if array.size != 1:
        raise WriterError(f"train.csv {name}: one number per row, found shape {array.shape}")
    return float(array.reshape(()))


class Columns:
    """The extra ``train.csv`` columns a callback logs, fixed by the first row (as the writer fixes them):
    a name first seen later is not recorded, a fixed one not logged on a row is an empty cell."""

    def __init__(self) -> None:
        self.names: list[str] | None = None

    def row(self, run: RunWriter, values: Mapping[str, float | None]) -> dict[str, float | None]:
        if self.names is None:
            fixed = [name for name in run.columns if name not in (*HISTORY_REQUIRED, "resume")]
            self.names = fixed if run.columns else sorted(values)
        return {name: values.get(name) for name in self.names}


def rng_state() -> dict[str, Any]:
    """Python's, numpy's and torch's global RNG states, in types ``torch.load(weights_only=True)`` reads."""
    import torch

    version, internal, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Give back what :func:`rng_state` took (a part it did not take is left as it is)."""
    import torch

    if "python" in state:
        python = state["python"]
        random.setstate((python["version"], tuple(python["internal"]), python["gauss"]))
    if "numpy" in state:
        saved = state["numpy"]
        keys = np.asarray(saved["keys"].numpy(), dtype=np.uint32)
        np.random.set_state((saved["kind"], keys, saved["position"], saved["has_gauss"], saved["cached"]))
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def release(run: RunWriter | None) -> None:
    """Let go of the run after a failure: its folder stays as it is, and reopening it resumes it."""
    if run is not None:
        run.release()


def epoch_of(progress: float) -> int:
    """A fractional epoch count (1.5 = half way through the second epoch) as the 1-based epoch in progress."""
    return max(1, math.ceil(round(float(progress), 6)))


# -- per-item test outputs ----------------------------------------------------------------------------------


class Items:
    """Per-item test outputs gathered batch by batch, then scored and rendered through the writer.

    A batch is a mapping: ``sample_id`` (one id per item: strings or integers), one key per protocol
    metric (one value per item; a ``sum_ratio`` metric as a ``(numerators, denominators)`` pair),
    optionally ``target``, ``pred``, ``output``, ``valid``, ``forward_finite`` (one entry per item) and
    ``render``, ``{role: images}`` with one image per item (kept for the selected samples). Other keys
    are ignored.
    """

    def __init__(self, conditions: Sequence[str]) -> None:
        self.conditions = list(conditions)
        self.columns: dict[str, dict[str, list[Any]]] = {name: {} for name in self.conditions}
        self.ids: dict[str, list[str]] = {name: [] for name in self.conditions}
        self.images: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in self.conditions}

    def add(self, run: RunWriter, condition: str, batch: Mapping[str, Any]) -> None:
        if condition not in self.columns:
            raise WriterError(
                f"test output for condition {condition!r}, which the callback does not declare "
                f"({', '.join(self.conditions)})"
            )
        if "sample_id" not in batch:
            raise WriterError(
                "a test output must be a dict with 'sample_id' (one id per item) and one per-item value per "
                f"protocol metric ({', '.join(spec.name for spec in run.metrics)}); found keys "
                f"{', '.join(map(str, batch)) or '(none)'}"
            )
        ids = sample_ids(batch["sample_id"])
        count = len(ids)
        columns = self.columns[condition]
        ratios = {spec.name for spec in run.metrics if spec.aggregation == "sum_ratio"}
        for name in [*(spec.name for spec in run.metrics), *ITEM_COLUMNS]:
            value = batch.get(name)
            if value is None:
                continue
            if name in ratios:
                numerators, denominators = value
                columns.setdefault(f"{name}/num", []).append(_per_item(name, numerators, count))
                columns.setdefault(f"{name}/den", []).append(_per_item(name, denominators, count))
            else:
                columns.setdefault(name, []).append(_per_item(name, value, count))
        for role, images in dict(batch.get("render") or {}).items():
            per_item = [_numpy(image) for image in images] if not isinstance(images, bytes) else [images]
            if len(per_item) != count:
                raise WriterError(f"test output render {role!r}: {len(per_item)} images for {count} samples")
            for sample_id, image in zip(ids, per_item, strict=True):
                self.images[condition].setdefault(sample_id, {})[role] = image
        self.ids[condition].extend(ids)

    def score(
        self,
        run: RunWriter,
        *,
        test_id: str,
        roles: Sequence[str],
        ground_truth: bool,
        render: RenderFn | None,
        options: Mapping[str, Any],
    ) -> None:
        """One writer test over everything gathered: every condition scored, every selected sample rendered."""
        first = self.conditions[0]
        if not self.ids[first]:
            raise WriterError(f"test {test_id}: no per-item output was gathered (an empty test set?)")
        ratios = {spec.name for spec in run.metrics if spec.aggregation == "sum_ratio"}
        with run.test(
            test_id,
            sample_ids=self.ids[first],
            conditions=self.conditions,
            roles=roles,
            ground_truth=ground_truth,
            **options,
        ) as test:
            for condition in self.conditions:
                gathered = {
                    name: np.concatenate(parts, axis=0) for name, parts in self.columns[condition].items()
                }
                values: dict[str, Any] = {}
                for name, array in gathered.items():
                    base = name.split("/", 1)[0]
                    if base in ratios:
                        values[base] = (gathered[f"{base}/num"], gathered[f"{base}/den"])
                    else:
                        values[name] = array
                test.score(condition, self.ids[condition], **values)
            for condition in self.conditions:
                for sample_id in test.selected:
                    images = (
                        render(sample_id, condition)
                        if render is not None
                        else self.images[condition].get(sample_id)
                    )
                    if not images:
                        raise WriterError(
                            f"test {test_id}: no render for selected sample {sample_id!r} under {condition}; pass "
                            "render=(sample_id, condition) -> {role: image}, or give 'render' in the test outputs"
                        )
                    test.render(condition, sample_id, **dict(images))


def sample_ids(value: Any) -> list[str]:
    """Sample ids as strings: a tensor or array of integers, a list of strings or integers, or one id."""
    value = _numpy(value)
    if isinstance(value, (str, int)):
        return [str(value)]
    items = value.tolist() if hasattr(value, "tolist") else list(value)
    found = [str(_numpy(item).item() if hasattr(_numpy(item), "item") else item) for item in items]
    if not found:
        raise WriterError("a test output's sample_id holds no id")
    return found


def _numpy(value: Any) -> Any:
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu().numpy()
    return value


def _per_item(name: str, value: Any, count: int) -> Any:
    array = np.asarray(_numpy(value))
    if array.ndim == 0:
        array = array.reshape(1)
    if array.shape[0] != count:
        raise WriterError(f"test output {name!r}: {array.shape[0]} values for {count} sample ids")
    return array
