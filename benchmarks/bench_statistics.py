"""runaudit.statistics' hand-written kernels against the scipy.stats functions that compute the same thing.

    python benchmarks/bench_statistics.py [--repeats 5] [--resamples 2000]

Baselines are copies of the hand versions as they stood when scipy was weighed (``baseline_*``), so the
comparison survives whatever the module does later. Each pair is timed interleaved (baseline, scipy,
baseline, ...) after one warm-up, at the sizes the audits meet: the demo's 359 test items, a sweep's 10k
items per arm, 5-25 seeds for an RL IQM, and the module's 2000 resamples drawn in blocks of at most 4M
cells from one fixed seed. Prints both medians, the ratio scipy / hand, and whether the answers agree:
deterministic statistics to 1e-12 relative, bootstrap draws and intervals bit for bit, since both sides
draw ``rng.integers(0, n, (block, n))`` from the same ``default_rng(BOOTSTRAP_SEED)`` stream.

The kernels do not show scipy.stats' own price: its import, paid once per process by whichever audit
first needs it (the module otherwise needs only numpy and scipy.special). That is measured here in fresh
interpreters; what it does to the variance gate's 2 s budget is measured by bench_variance.py.
Last, the module as it is now is checked against the baselines, so that the audits' numbers never move.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from scipy import stats

from runaudit.statistics import BLOCK_CELLS, BOOTSTRAP_SEED, ItemScores, iqm_interval, paired_delta

DEMO_ITEMS = 359
SWEEP_ITEMS = 10_000
RL_SEEDS = (5, 25)

# --- the hand versions, as runaudit.statistics has them --------------------------------------------------


def baseline_iqm(values: np.ndarray) -> np.ndarray | float:
    count = np.shape(values)[-1]
    cut = int(0.25 * count)
    result = np.mean(np.sort(values, axis=-1)[..., cut : count - cut], axis=-1)
    return float(result) if np.ndim(result) == 0 else result


def baseline_bootstrap(n: int, statistic: Callable[[np.ndarray], np.ndarray], resamples: int) -> np.ndarray:
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    block = max(1, min(resamples, BLOCK_CELLS // n))
    draws = []
    for start in range(0, resamples, block):
        rows = rng.integers(0, n, size=(min(block, resamples - start), n))
        draws.append(np.asarray(statistic(rows), dtype=np.float64))
    return np.concatenate(draws)


def baseline_interval(draws: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low, high = np.nanquantile(draws, [tail, 1.0 - tail])
    return float(low), float(high)


def baseline_sem(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values)))


# --- paired statistics at resampled rows, in both calling conventions ------------------------------------


def hand_statistic(
    aggregation: str, method: np.ndarray, baseline: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """What paired_delta hands to bootstrap(): rows (b × n) in, b deltas out."""
    if aggregation == "mean":  # paired_delta resamples the differences once
        return (method - baseline)[rows].mean(axis=-1)
    if aggregation == "median":
        return np.median(method[rows], axis=-1) - np.median(baseline[rows], axis=-1)
    return baseline_iqm(method[rows]) - baseline_iqm(baseline[rows])


def scipy_statistic(aggregation: str, *samples: np.ndarray, axis: int) -> np.ndarray:
    """The same delta as scipy.stats.bootstrap calls it: resampled samples in, along ``axis``."""
    if aggregation == "mean":
        return np.mean(samples[0], axis=axis)
    if aggregation == "median":
        return np.median(samples[0], axis=axis) - np.median(samples[1], axis=axis)
    return stats.trim_mean(samples[0], 0.25, axis=axis) - stats.trim_mean(samples[1], 0.25, axis=axis)


def hand_paired(aggregation: str, method: np.ndarray, baseline: np.ndarray, resamples: int) -> tuple:
    draws = baseline_bootstrap(len(method), partial(hand_statistic, aggregation, method, baseline), resamples)
    return draws, baseline_interval(draws)


def scipy_paired(aggregation: str, method: np.ndarray, baseline: np.ndarray, resamples: int) -> tuple:
    data = (method - baseline,) if aggregation == "mean" else (method, baseline)
    result = scipy_bootstrap(data, partial(scipy_statistic, aggregation), resamples)
    interval = result.confidence_interval
    return result.bootstrap_distribution, (float(interval.low), float(interval.high))


def hand_iqm_interval(values: np.ndarray, resamples: int) -> tuple[float, float]:
    return baseline_interval(
        baseline_bootstrap(len(values), lambda rows: baseline_iqm(values[rows]), resamples)
    )


def scipy_iqm_interval(values: np.ndarray, resamples: int) -> tuple[float, float]:
    trimmed = partial(stats.trim_mean, proportiontocut=0.25)
    interval = scipy_bootstrap((values,), trimmed, resamples).confidence_interval
    return float(interval.low), float(interval.high)


def scipy_bootstrap(
    data: tuple[np.ndarray, ...], statistic: Callable[..., np.ndarray], resamples: int
) -> Any:
    """``scipy.stats.bootstrap`` drawing the module's stream: same seed, same blocks, percentile interval."""
    n = len(data[0])
    return stats.bootstrap(
        data,
        statistic,
        n_resamples=resamples,
        batch=max(1, min(resamples, BLOCK_CELLS // n)),
        vectorized=True,
        paired=len(data) > 1,
        axis=-1,
        method="percentile",
        random_state=np.random.default_rng(BOOTSTRAP_SEED),  # `rng=` exists only from scipy 1.15
    )


# --- timing --------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    hand: Callable[[], Any]
    scipy: Callable[[], Any]
    compare: Callable[[Any, Any], str]


@dataclass
class Row:
    name: str
    hand_s: float
    scipy_s: float
    agree: str


def agreement(first: Any, second: Any) -> str:
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if np.array_equal(a, b, equal_nan=True):
        return "identical"
    if np.allclose(a, b, rtol=1e-12, atol=0.0, equal_nan=True):
        return f"equal to {np.max(np.abs(a - b)):.1e}"
    return f"DIFFER (max {np.nanmax(np.abs(a - b)):.3g})"


def draws_and_interval(first: tuple, second: tuple) -> str:
    return f"draws {agreement(first[0], second[0])}, CI {agreement(first[1], second[1])}"


def measure(case: Case, repeats: int) -> Row:
    """Median seconds of each side, interleaved after one warm-up that also gives the answers compared."""
    answers = case.hand(), case.scipy()
    seconds: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for action, sink in zip((case.hand, case.scipy), seconds, strict=True):
            started = time.perf_counter()
            action()
            sink.append(time.perf_counter() - started)
    return Row(
        case.name, statistics.median(seconds[0]), statistics.median(seconds[1]), case.compare(*answers)
    )


def cases(rng: np.random.Generator, resamples: int) -> list[Case]:
    found = []
    for n in (DEMO_ITEMS, SWEEP_ITEMS):
        values = rng.exponential(0.5, n)
        found.append(
            Case(
                f"iqm, {n} items",
                partial(baseline_iqm, values),
                partial(stats.trim_mean, values, 0.25),
                agreement,
            )
        )
    for n in (DEMO_ITEMS, SWEEP_ITEMS):  # the shape aggregate("iqm") meets inside one bootstrap block
        block = min(resamples, BLOCK_CELLS // n)
        for kind, values in (("losses", rng.exponential(0.5, n)), ("0/1", (rng.random(n) < 0.8) * 1.0)):
            matrix = values[rng.integers(0, n, size=(block, n))]
            found.append(
                Case(
                    f"iqm, one block {block}×{n} ({kind})",
                    partial(baseline_iqm, matrix),
                    partial(stats.trim_mean, matrix, 0.25, axis=-1),
                    agreement,
                )
            )
    for n in (DEMO_ITEMS, SWEEP_ITEMS):
        values = rng.random(n)
        found.append(
            Case(f"sem, {n} items", partial(baseline_sem, values), partial(stats.sem, values), agreement)
        )
    for n in (DEMO_ITEMS, SWEEP_ITEMS):  # accuracy-like 0/1 items, as in bench_variance.py
        baseline = (rng.random(n) < 0.8).astype(np.float64)
        method = (rng.random(n) < 0.81).astype(np.float64)
        for aggregation in ("mean", "median", "iqm"):
            arguments = (aggregation, method, baseline, resamples)
            found.append(
                Case(
                    f"paired bootstrap {aggregation}, {n} items",
                    partial(hand_paired, *arguments),
                    partial(scipy_paired, *arguments),
                    draws_and_interval,
                )
            )
    for seeds in RL_SEEDS:
        values = rng.normal(100.0, 15.0, seeds)
        found.append(
            Case(
                f"IQM interval over {seeds} seeds",
                partial(hand_iqm_interval, values, resamples),
                partial(scipy_iqm_interval, values, resamples),
                agreement,
            )
        )
    return found


def import_cost(repeats: int) -> tuple[float, float]:
    """Median seconds to import scipy.special after numpy, and scipy.stats on top (fresh processes)."""
    probe = (
        "import time, numpy; t0 = time.perf_counter(); import scipy.special; t1 = time.perf_counter(); "
        "import scipy.stats; print(t1 - t0, time.perf_counter() - t1)"
    )
    samples = []
    for _ in range(repeats + 1):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        special, on_top = (float(part) for part in done.stdout.split())
        samples.append((special, on_top))
    del samples[0]  # the first warms the file cache
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def same(first: Any, second: Any) -> bool:
    return bool(np.allclose(first, second, rtol=1e-12, atol=1e-15))


def live_module_disagreements(rng: np.random.Generator) -> list[str]:
    """runaudit.statistics as it is now, against the baselines: the audits' numbers must not move."""
    problems = []
    for n in (DEMO_ITEMS, 2_000):
        baseline = rng.random(n)
        method = baseline + rng.normal(0.01, 0.1, n)
        for aggregation in ("mean", "median", "iqm"):
            live = paired_delta(ItemScores(method), ItemScores(baseline), aggregation)[1]
            expected = hand_paired(aggregation, method, baseline, 2000)[1]
            if not same(live, expected):
                problems.append(f"paired_delta {aggregation} at {n} items: {live} != {expected}")
    values = rng.normal(100.0, 15.0, 7)
    live_iqm = iqm_interval(values)
    expected_iqm = (baseline_iqm(values), hand_iqm_interval(values, 2000))
    if not same(np.hstack(live_iqm), np.hstack(expected_iqm)):
        problems.append(f"iqm_interval: {live_iqm} != {expected_iqm}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each side (default 5)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (the module's 2000)")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    rows = [measure(case, args.repeats) for case in cases(rng, args.resamples)]
    print(f"medians of {args.repeats}, interleaved")
    print(f"{'statistic':<40} {'hand':>11} {'scipy':>11} {'scipy/hand':>10}  answers")
    for row in rows:
        print(
            f"{row.name:<40} {row.hand_s * 1e3:8.3f} ms {row.scipy_s * 1e3:8.3f} ms "
            f"{row.scipy_s / row.hand_s:9.2f}x  {row.agree}"
        )
    special, on_top = import_cost(args.repeats)
    print(
        f"import after numpy, fresh interpreters (median of {args.repeats}): scipy.special "
        f"{special * 1e3:.0f} ms (already paid for stdtrit), scipy.stats on top of it {on_top * 1e3:.0f} ms"
    )
    problems = live_module_disagreements(rng)
    print(
        "runaudit.statistics now: "
        + ("; ".join(problems) or "the baselines' estimates and intervals (to 1e-12)")
    )
    return 1 if problems or any("DIFFER" in row.agree for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
