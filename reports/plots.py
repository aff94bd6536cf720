"""The page's figures, drawn by matplotlib as inline SVG (its SVG backend, no pyplot; imported on first use).

Why matplotlib rather than hand-written SVG: axes, ticks, legends and text layout are solved problems
there, it escapes every text node it writes, and the same code draws the same figure on every machine.
Text stays text (``svg.fonttype = none``: small, searchable, selectable), ``$`` never turns into
mathtext (``text.parse_math = False``: metric names are user data), and each figure gets its own id
prefix and hash salt, so several inline SVGs on one page never share an id.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from runaudit.reports.history import History

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

INK = "#1b1b1b"
MUTED = "#8c8c8c"
ALERT = "#c0392b"
PALETTE = ("#1f5fa8", "#d9822b", "#2a9d6f", "#7b4fa0", "#b8455a", "#4a7f8c")
WIDTH = 9.0  # inches at 72 dpi: 648 px, scaled down by CSS on narrow screens
PANEL_HEIGHT = 2.0
COLUMNS = 3

_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_ID = re.compile(r'(\bid="|xlink:href="#|href="#|url\(#)([A-Za-z0-9_.:-]+)')


@dataclass(frozen=True)
class Mark:
    """An anomaly found by a history audit, to be drawn on the curve of ``column``."""

    audit: str
    column: str | None
    epochs: tuple[int, ...]


def _rc(key: str) -> dict[RcKeyType, Any]:
    return {
        "svg.fonttype": "none",
        "svg.hashsalt": key,
        "text.parse_math": False,
        "text.usetex": False,
        "font.size": 8,
        "axes.titlesize": 9,
        "axes.edgecolor": MUTED,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }


def _style(key: str) -> contextlib.AbstractContextManager[Any]:
    import matplotlib  # deferred: only the controller draws, once per report

    return matplotlib.rc_context(_rc(key))


def _figure(
    width: float, height: float, layout: Literal["constrained", "compressed", "tight"] | None = "constrained"
) -> Any:
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend

    return Figure(figsize=(width, height), layout=layout)


def short(label: str, limit: int = 32) -> str:
    """A plot label cut to fit beside its axis; the page's notes and tables carry the full text."""
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _svg(figure: Any, key: str) -> str:
    """The figure as one ``<svg>`` element whose ids are all prefixed with ``key``."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = _METADATA.sub("", _PROLOG.sub("", buffer.getvalue(), count=1))
    text = _ID.sub(lambda match: f"{match.group(1)}{key}-{match.group(2)}", text)
    return text.replace("<svg ", f'<svg role="img" aria-label="{key}" ', 1)


def finite(values: Any) -> list[float] | None:
    """A list of finite numbers, or None when ``values`` is anything else (evidence is untrusted)."""
    if not isinstance(values, list) or not values:
        return None
    if not all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in values):
        return None
    numbers = [float(item) for item in values]
    return numbers if all(math.isfinite(item) for item in numbers) else None


def number(value: Any) -> float | None:
    numbers = finite([value])
    return numbers[0] if numbers else None


def training_curves(history: History, marks: Sequence[Mark], key: str = "history") -> str:
    """Small multiples, one panel per logged column, anomalies drawn as red crosses and guide lines."""
    names = list(history.series)
    rows = math.ceil(len(names) / COLUMNS)
    with _style(key):
        figure = _figure(WIDTH, PANEL_HEIGHT * rows, layout=None)  # a fixed grid lays out in half the time
        figure.subplots_adjust(
            left=0.07,
            right=0.98,
            top=1 - 0.3 / figure.get_figheight(),
            bottom=0.45 / figure.get_figheight(),
            wspace=0.3,
            hspace=0.75,
        )
        axes = figure.subplots(rows, COLUMNS, squeeze=False).ravel()
        for index, name in enumerate(names):
            _curve(axes[index], history, name, PALETTE[index % len(PALETTE)], marks)
        for ax in axes[len(names) :]:
            ax.set_visible(False)
        return _svg(figure, key)


def _curve(ax: Any, history: History, name: str, color: str, marks: Sequence[Mark]) -> None:
    values = history.series[name]
    ax.plot(history.x, values, color=color, linewidth=1.2)
    ax.set_title(name, loc="left")
    ax.set_xlabel(history.axis)
    present = [value for value in values if not math.isnan(value)]
    if name in ("lr", "grad_norm") and present and min(present) > 0:
        from matplotlib import ticker

        ax.set_yscale("log")  # plain-number tick labels: math text is off, so no 10^k notation
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:.3g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    for mark in marks:
        if (mark.column or "train_loss") != name:
            continue
        for row, x in history.positions(list(mark.epochs)):
            ax.axvline(x, color=ALERT, linewidth=0.8, alpha=0.5)
            if not math.isnan(values[row]):
                ax.plot([x], [values[row]], marker="X", color=ALERT, markersize=7, linestyle="none")
        ax.plot([], [], marker="X", color=ALERT, linestyle="none", label=short(mark.audit))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", frameon=False)


def seed_bands(bands: Sequence[dict[str, Any]], key: str = "seed-bands") -> str:
    """Per metric: each arm's seeds as dots, mean ± std as a bar, n written beside it."""
    with _style(key):
        figure = _figure(WIDTH, PANEL_HEIGHT * 1.3)
        axes = figure.subplots(1, len(bands), squeeze=False).ravel()
        for ax, band in zip(axes, bands, strict=True):
            for position, (_, values, mean, std) in enumerate(band["arms"]):
                ax.errorbar([position], [mean], yerr=[std], fmt="o", color=INK, capsize=6, markersize=4)
                spread = [position + 0.12 + 0.04 * (i % 3) for i in range(len(values))]
                ax.plot(spread, values, "o", color=PALETTE[position % len(PALETTE)], markersize=4, alpha=0.8)
                ax.annotate(
                    f"n={len(values)}",
                    (position, mean),
                    xytext=(-28, 0),
                    textcoords="offset points",
                    color=MUTED,
                )
            ax.set_xticks(range(len(band["arms"])), [short(arm, 16) for arm, *_ in band["arms"]])
            ax.set_xlim(-0.6, len(band["arms"]) - 0.4)
            ax.set_title(short(f"{band['metric']} ({band['kind']} variance)", 48), loc="left")
        return _svg(figure, key)


def _row_chart(
    key: str,
    items: Sequence[dict[str, Any]],
    draw_row: Callable[[Any, int, dict[str, Any]], None],
    xlabel: str,
) -> str:
    """One labelled row per item along a shared x axis."""
    with _style(key):
        figure = _figure(WIDTH, 0.7 + 0.45 * len(items))
        ax = figure.subplots()
        for row, item in enumerate(items):
            draw_row(ax, row, item)
        ax.set_yticks(range(len(items)), [short(item["label"]) for item in items])
        ax.set_xlabel(xlabel)
        return _svg(figure, key)


def effect_sizes(items: Sequence[dict[str, Any]], key: str = "mde") -> str:
    """The observed effect against the minimum detectable effect (±MDE shaded around zero)."""

    def draw(ax: Any, row: int, item: dict[str, Any]) -> None:
        ax.axvline(0, color=INK, linewidth=0.8)
        ax.barh([row], [2 * item["mde"]], left=[-item["mde"]], color=MUTED, alpha=0.25, height=0.6)
        inside = abs(item["effect"]) < item["mde"]
        ax.plot([item["effect"]], [row], "D", color=ALERT if inside else PALETTE[0], markersize=6)

    label = "effect (diamond) vs ±MDE (shaded): a diamond inside the band is underpowered, not null"
    return _row_chart(key, items, draw, label)


def baseline_draws(items: Sequence[dict[str, Any]], key: str = "baseline-draws") -> str:
    """A single-seed arm against the baseline's own seeds: where its one draw falls among theirs."""

    def draw(ax: Any, row: int, item: dict[str, Any]) -> None:
        ax.plot(item["baseline"], [row] * len(item["baseline"]), "o", color=MUTED, markersize=5)
        ax.plot([item["probe"]], [row], "D", color=ALERT, markersize=6)

    return _row_chart(key, items, draw, "baseline seeds (circles) and the single-seed result (diamond)")


def overlap_counts(items: Sequence[dict[str, Any]], key: str = "leakage") -> str:
    """Items shared between splits, one bar group per leakage audit."""
    pairs = sorted({pair for item in items for pair in item["overlap"]})
    with _style(key):
        figure = _figure(WIDTH, 0.9 + 0.32 * len(pairs) * len(items))
        ax = figure.subplots()
        height = 0.8 / max(1, len(items))
        for index, item in enumerate(items):
            ys = [p + index * height for p in range(len(pairs))]
            counts = [item["overlap"].get(pair, 0) for pair in pairs]
            bars = ax.barh(
                ys,
                counts,
                height=height * 0.9,
                label=short(item["label"]),
                color=PALETTE[index % len(PALETTE)],
            )
            ax.bar_label(bars, padding=3, color=INK)
        ax.set_yticks([p + 0.4 - height / 2 for p in range(len(pairs))], [short(pair) for pair in pairs])
        ax.invert_yaxis()
        ax.set_xlabel("items found in both splits")
        ax.legend(loc="lower right", frameon=False)
        return _svg(figure, key)
