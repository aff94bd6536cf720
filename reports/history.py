"""The training history (``train.csv``) as series to plot, parsed leniently by :func:`runaudit.history.parse_history`.

The capsule audits judge the file; the page only draws it. A missing or unreadable file yields the
reason instead of a plot. Non-finite values stay NaN (a gap in the line); the history audits say why.
The file is read as a regular file within a cap (:mod:`runaudit.safeio`): a FIFO or a device in its place
yields a reason too, instead of a report (or its pre-drawing child process) that never finishes.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runaudit.history import parse_history
from runaudit.reader import Unavailable, csv_lines
from runaudit.safeio import UnsafeFile, read_regular

MAX_BYTES = 64 * 1024 * 1024
MAX_POINTS = 4000  # per series; longer histories are thinned evenly, anomalies are drawn separately
RECOGNISED = ("train_loss", "grad_norm", "lr", "loss_scale")


@dataclass(frozen=True)
class History:
    axis: str  # "epoch" when there is one row per epoch, else "step"
    x: tuple[float, ...]
    epochs: tuple[int | None, ...]
    series: dict[str, tuple[float, ...]]

    def positions(self, epochs: list[int]) -> list[tuple[int, float]]:
        """Row index and x of the last logged row of each listed epoch."""
        last: dict[int, int] = {}
        for index, epoch in enumerate(self.epochs):
            if epoch is not None:
                last[epoch] = index
        return [(last[epoch], self.x[last[epoch]]) for epoch in epochs if epoch in last]


def _plotted(header: Sequence[str]) -> list[str]:
    wanted = [name for name in RECOGNISED if name in header]
    wanted[1:1] = sorted(name for name in header if name.startswith("val_"))
    return wanted


def read_history(run_path: Path) -> History | str:
    """The plottable columns of ``train.csv``, or one line saying why there is nothing to plot."""
    path = run_path / "train.csv"
    try:
        data = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        return "train.csv is absent"
    except UnsafeFile as exc:  # a link, FIFO or device, or past the cap: the message says which
        return f"train.csv is not plotted: {exc}"
    except OSError as exc:
        return f"train.csv cannot be read ({exc.strerror or exc})"
    return _plottable(data)


@functools.lru_cache(maxsize=1)
def _plottable(data: bytes) -> History | str:
    """The curves of ``train.csv``'s bytes. The page asks twice in a session (the curves drawn ahead, then
    the figure), and a per-step log of a million rows takes seconds to parse; the cache is keyed by the
    bytes themselves, so a changed file is parsed afresh."""
    try:
        rows = csv_lines(data)
    except (ValueError, csv.Error) as exc:  # UnicodeDecodeError is a ValueError
        return f"train.csv is not readable CSV ({exc})"
    if not rows:
        return "train.csv has no epoch column or no rows"
    try:
        parsed = parse_history(rows[0], rows[1:])
    except Unavailable:
        return "train.csv has no epoch column or no rows"
    columns = _plotted(rows[0])
    if not columns:
        return "train.csv has no recognised numeric column to plot"
    epochs = [int(value) if math.isfinite(value) and value == int(value) else None for value in parsed.epochs]
    steps = parsed.values.get("step")
    axis = "epoch" if len(set(epochs)) == len(epochs) or steps is None else "step"
    x = parsed.epochs if axis == "epoch" or steps is None else steps
    stride = max(1, math.ceil(parsed.rows / MAX_POINTS))
    keep = sorted({*range(0, parsed.rows, stride), parsed.rows - 1})
    return History(
        axis=axis,
        x=tuple(float(x[i]) for i in keep),
        epochs=tuple(epochs[i] for i in keep),
        series={name: tuple(_finite(parsed.values[name][i]) for i in keep) for name in columns},
    )


def _finite(value: float) -> float:
    return float(value) if math.isfinite(value) else math.nan
