"""Which figures the page draws, from which verdict evidence (the conventions in the common brief).

A figure is drawn only from evidence that exists and has the agreed shape. Without it the section says
"not audited" (no audit of that family ran) or repeats the audit's own not-run reason: never an empty
green box. Evidence is untrusted input here, so malformed entries are named and skipped.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runaudit.host import idle_cores
from runaudit.reports import figure_cache, plots
from runaudit.reports.history import History, read_history
from runaudit.verdict import Verdict

MAX_PANELS = 4
# The verdicts whose evidence a figure marks: a disclosure or a violation.
FLAGGED = frozenset({Verdict.DISCLOSED, Verdict.FAILED, Verdict.ERROR})


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    status: str
    svg: str | None = None
    notes: tuple[str, ...] = ()


def _drawn(notes: list[str], draw: Callable[..., str], *args: Any) -> str | None:
    """The figure's SVG; one that cannot be drawn says why on the page instead of taking the report down."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # layout niceties must not become errors under filterwarnings=error
            return figure_cache.drawn(draw, *args)
    except Exception as exc:  # matplotlib raises many types; the page names it
        notes.append(f"figure not drawn: {type(exc).__name__}: {exc}")
        return None


def _family(verdicts: Sequence[Mapping[str, Any]], prefix: str) -> list[Mapping[str, Any]]:
    return [item for item in verdicts if item["audit"].startswith(prefix)]


def status_line(verdicts: Sequence[Mapping[str, Any]], prefix: str) -> str:
    """ "not audited" when no audit of the family ran, else its verdict counts."""
    family = _family(verdicts, prefix)
    if not family:
        return f"not audited: no {prefix}* audit in this report"
    counts = Counter(item["verdict"] for item in family)
    return f"{prefix}* audits: " + ", ".join(
        f"{n} {verdict.replace('_', ' ')}" for verdict, n in sorted(counts.items())
    )


def _name(item: Mapping[str, Any]) -> str:
    return f"{item['audit']}[{item['subject']}]" if item["subject"] else item["audit"]


def _unmeasured_notes(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why an audit of the family measured nothing: its own not-run or not-applicable reason."""
    return [
        f"{_name(item)} {item['verdict'].replace('_', ' ')}: {item['message']}"
        for item in items
        if not Verdict(item["verdict"]).measured
    ]


def _epochs(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return None
    return tuple(value)


def history_figure(doc: Mapping[str, Any], run_path: Path) -> Figure:
    family = _family(doc["verdicts"], "history.")
    marks, notes = [], _unmeasured_notes(family)
    for item in family:
        if Verdict(item["verdict"]) not in FLAGGED or "epochs" not in item["evidence"]:
            continue
        epochs, column = _epochs(item["evidence"]["epochs"]), item["evidence"].get("column")
        if epochs is None or not (column is None or isinstance(column, str)):
            notes.append(f"{_name(item)}: evidence epochs/column malformed, not marked")
            continue
        marks.append(plots.Mark(_name(item), column, epochs))
        where = f" on {column}" if column else ""
        notes.append(f"{_name(item)}{where} at epoch(s) {', '.join(map(str, epochs[:12]))}")
    status = status_line(doc["verdicts"], "history.")
    history = read_history(run_path)
    if not isinstance(history, History):
        return Figure(
            "history", "Training curves", f"{status}; curves not drawn: {history}", None, tuple(notes)
        )
    if not family:
        status = "anomalies not audited (no history.* audit in this report); curves from train.csv"
    unplotted = sorted({mark.column for mark in marks if mark.column and mark.column not in history.series})
    notes += [f"column {column} is not a plotted train.csv column" for column in unplotted]
    svg = _drawn(notes, plots.training_curves, history, marks)
    return Figure("history", "Training curves", status, svg, tuple(notes))


def _arms(evidence: Mapping[str, Any]) -> list[tuple[str, list[float], float, float]] | None:
    arms = evidence.get("arms")
    if not isinstance(arms, Mapping) or not arms:
        return None
    parsed = []
    for arm, summary in arms.items():
        values = plots.finite(summary.get("values")) if isinstance(summary, Mapping) else None
        if values is None:
            return None
        mean = plots.number(summary.get("mean"))
        std = plots.number(summary.get("std"))
        parsed.append((arm, values, sum(values) / len(values) if mean is None else mean, std or 0.0))
    return parsed


def seed_band_figure(doc: Mapping[str, Any]) -> Figure:
    family = _family(doc["verdicts"], "variance.seed_band")
    bands, notes = [], _unmeasured_notes(family)
    for item in family:
        if not Verdict(item["verdict"]).measured:
            continue
        arms = _arms(item["evidence"])
        if arms is None:
            notes.append(f"{_name(item)}: evidence has no usable arms, not drawn")
            continue
        metric = item["evidence"].get("metric") or item["subject"] or "metric"
        bands.append(
            {"metric": str(metric), "kind": str(item["evidence"].get("variance_kind", "seed")), "arms": arms}
        )
    if len(bands) > MAX_PANELS:
        notes.append(f"{len(bands) - MAX_PANELS} more seed band(s) in the verdict table")
    svg = _drawn(notes, plots.seed_bands, bands[:MAX_PANELS]) if bands else None
    return Figure("seed-bands", "Seed bands", status_line(doc["verdicts"], "variance."), svg, tuple(notes))


def _label(item: Mapping[str, Any]) -> str:
    return str(item["evidence"].get("metric") or item["subject"] or item["audit"])


def _effect(item: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    evidence = item["evidence"]
    mde, effect = plots.number(evidence.get("mde")), plots.number(evidence.get("effect"))
    if mde is None or effect is None:
        return None
    where = "inside" if abs(effect) < abs(mde) else "outside"
    note = (
        f"{_label(item)}: effect {effect:.4g} {where} MDE {abs(mde):.4g} "
        f"(n={evidence.get('n')}, sd={evidence.get('sd')}, df={evidence.get('df')})"
    )
    return {"label": _label(item), "mde": abs(mde), "effect": effect}, note


def _draw_against_baseline(item: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
    evidence = item["evidence"]
    baseline, probe = plots.finite(evidence.get("baseline_values")), plots.number(evidence.get("probe"))
    if baseline is None or probe is None:
        return None
    note = f"{_label(item)}: one draw {probe:.4g} against the baseline's {', '.join(f'{v:.4g}' for v in baseline)}"
    return {"label": _label(item), "baseline": baseline, "probe": probe}, note


POWER = (
    (
        "variance.mde",
        "Effect vs minimum detectable effect",
        _effect,
        plots.effect_sizes,
        "no finite mde/effect",
    ),
    (
        "variance.baseline_draw",
        "Single-seed draw vs the baseline's seeds",
        _draw_against_baseline,
        plots.baseline_draws,
        "no baseline_values/probe",
    ),
)


def power_figures(doc: Mapping[str, Any]) -> list[Figure]:
    """The minimum detectable effect, and single-seed draws against the baseline's seeds."""
    found = []
    for prefix, title, parse, draw, missing in POWER:
        family = _family(doc["verdicts"], prefix)
        items, notes = [], _unmeasured_notes(family)
        for item in family:
            if not Verdict(item["verdict"]).measured:
                continue  # its reason is already among the notes
            parsed = parse(item)
            if parsed is None:
                notes.append(f"{_name(item)}: evidence has {missing}, not drawn")
                continue
            items.append(parsed[0])
            notes.append(parsed[1])
        svg = _drawn(notes, draw, items) if items else None
        found.append(
            Figure(prefix.replace(".", "-"), title, status_line(doc["verdicts"], prefix), svg, tuple(notes))
        )
    return found


def _overlap(value: Any) -> dict[str, int] | None:
    if not isinstance(value, Mapping):
        return None
    counts = {str(pair): count for pair, count in value.items()}
    if not all(
        isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in counts.values()
    ):
        return None
    return counts


def leakage_figure(doc: Mapping[str, Any]) -> Figure:
    family = _family(doc["verdicts"], "leakage.")
    items, notes = [], _unmeasured_notes(family)
    for item in family:
        if "overlap" not in item["evidence"] or not Verdict(item["verdict"]).measured:
            continue
        overlap = _overlap(item["evidence"]["overlap"])
        if overlap == {}:
            continue  # the audit compared no split pairs (e.g. only a validation split was checked)
        if overlap is None:
            notes.append(f"{_name(item)}: evidence overlap is not a map of split pairs to counts, not drawn")
            continue
        items.append({"label": _name(item), "overlap": overlap})
        seen = plots.number(item["evidence"].get("fraction_test_seen"))
        examples = item["evidence"].get("examples")
        line = f"{_name(item)}: {item['verdict']}"
        if seen is not None:
            line += f"; {seen:.2%} of the test split seen in training"
        if isinstance(examples, list) and examples:
            line += "; e.g. " + ", ".join(str(example) for example in examples[:5])
        notes.append(line)
    svg = _drawn(notes, plots.overlap_counts, items[: MAX_PANELS * 2]) if items else None
    return Figure(
        "leakage",
        "Leakage: items shared between splits",
        status_line(doc["verdicts"], "leakage."),
        svg,
        tuple(notes),
    )


def predraw_curves(run_path: Path, *, busy: int = 1) -> subprocess.Popen[bytes] | None:
    """Draw the run's unmarked training curves into the figure cache in a child, on another core.

    Started as the session starts, it overlaps the audits; the page then finds the curves in the cache
    unless a history audit marked an anomaly on them (then they are drawn again, with the marks).
    None when there is nothing to gain: no idle core beside the session's ``busy`` processes (a fresh
    interpreter costs ~0.8 s of CPU, which a busy machine pays from the session), no cache, no curves,
    or already drawn.
    """
    if idle_cores(busy) < 1 or figure_cache.cache_dir() is None:
        return None
    history = read_history(run_path)
    if not isinstance(history, History) or figure_cache.is_cached(plots.training_curves, (history, [])):
        return None
    script = "import sys; from runaudit.reports import figures; figures.draw_unmarked_curves(sys.argv[1])"
    return subprocess.Popen(
        [sys.executable, "-c", script, str(run_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def draw_unmarked_curves(run_path: str) -> None:
    history = read_history(Path(run_path))
    if isinstance(history, History):
        _drawn([], plots.training_curves, history, [])


def figures(doc: Mapping[str, Any], run_path: Path) -> list[Figure]:
    return [history_figure(doc, run_path), seed_band_figure(doc), *power_figures(doc), leakage_figure(doc)]
