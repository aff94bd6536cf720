"""runaudit.statistics against answers worked by hand and against scipy.stats, which cannot share its bugs.

The module keeps hand versions of statistics scipy.stats also has (benchmarks/bench_statistics.py says
why: speed, and scipy.stats' import). These tests hold them to scipy's answers: the interquartile mean to
``trim_mean``, the bootstrap to ``scipy.stats.bootstrap`` drawing from the same seed in the same blocks
(the same resamples, so the same percentile interval), the standard error to ``sem``.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from runaudit import statistics as module
from runaudit.statistics import (
    BLOCK_CELLS,
    BOOTSTRAP_SEED,
    ItemScores,
    aggregate,
    bootstrap,
    interval,
    iqm_interval,
    minimum_detectable_effect,
    paired_delta,
    standard_error,
)


def scipy_bootstrap(
    data: tuple[np.ndarray, ...], statistic: Callable[..., Any], resamples: int = 2000
) -> Any:
    """scipy's bootstrap drawing the module's stream: its seed, its blocks (as patched), percentiles."""
    return stats.bootstrap(
        data,
        statistic,
        n_resamples=resamples,
        batch=max(1, min(resamples, module.BLOCK_CELLS // len(data[0]))),
        vectorized=True,
        paired=len(data) > 1,
        axis=-1,
        method="percentile",
        random_state=np.random.default_rng(BOOTSTRAP_SEED),
    )


def scipy_interval(result: Any) -> tuple[float, float]:
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, 2.0, 3.0, 5.0], 2.5),  # cut 1 from each end: mean(2, 3)
        ([8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0], 4.5),  # cut 2: mean(3, 4, 5, 6)
        ([10.0, 1.0, 100.0, 2.0, 3.0], 5.0),  # n = 5 cuts int(1.25) = 1: mean(2, 3, 10)
        ([1.0, 2.0, 3.0], 2.0),  # n = 3 cuts nothing
        ([7.0], 7.0),
    ],
)
def test_iqm_by_hand(values: list[float], expected: float) -> None:
    assert aggregate("iqm", np.array(values)) == expected


def test_iqm_is_scipy_trim_mean_at_every_size_and_along_rows() -> None:
    rng = np.random.default_rng(1)
    for n in range(1, 60):
        for values in (rng.normal(size=(3, n)), rng.integers(0, 3, size=(3, n)).astype(np.float64)):
            np.testing.assert_allclose(
                aggregate("iqm", values), stats.trim_mean(values, 0.25, axis=-1), rtol=1e-12, atol=1e-15
            )
            assert aggregate("iqm", values[0]) == pytest.approx(stats.trim_mean(values[0], 0.25), rel=1e-12)


def test_mean_median_and_sum_ratio_by_hand() -> None:
    values = np.array([1.0, 2.0, 4.0, 9.0])
    assert aggregate("mean", values) == 4.0 and aggregate("median", values) == 3.0
    scores = ItemScores(values, numerators=np.array([1.0, 1.0, 2.0]), denominators=np.array([2.0, 4.0, 2.0]))
    assert scores.aggregate("sum_ratio") == 0.5  # 4 / 8, not the mean of the ratios
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate("mode", values)


def test_bootstrap_draws_are_the_seeded_resamples_and_the_interval_their_percentiles() -> None:
    values = np.array([0.0, 1.0, 2.0, 10.0])
    rows = np.random.default_rng(BOOTSTRAP_SEED).integers(0, 4, size=(50, 4))  # one block: 200 cells
    expected = values[rows].mean(axis=1)
    draws = bootstrap(4, lambda r: values[r].mean(axis=-1), resamples=50)
    assert np.array_equal(draws, expected)
    assert interval(draws) == pytest.approx(np.percentile(expected, [2.5, 97.5]), rel=1e-12)
    assert np.array_equal(draws, bootstrap(4, lambda r: values[r].mean(axis=-1), resamples=50))


def test_bootstrap_in_many_blocks_draws_what_scipy_bootstrap_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.random.default_rng(2).exponential(1.0, 301)
    for cells in (BLOCK_CELLS, 4 * 301 + 7):  # one block of 2000 rows; 500 blocks of 4 rows
        monkeypatch.setattr(module, "BLOCK_CELLS", cells)
        draws = bootstrap(301, lambda r: np.median(values[r], axis=-1))
        reference = scipy_bootstrap((values,), np.median)
        assert np.array_equal(draws, reference.bootstrap_distribution)
        assert interval(draws) == pytest.approx(scipy_interval(reference), rel=1e-12)


def test_bootstrap_needs_an_item() -> None:
    with pytest.raises(ValueError, match="at least one item"):
        bootstrap(0, lambda rows: rows.sum(axis=-1))


def test_a_single_item_resamples_to_itself() -> None:  # scipy.stats.bootstrap refuses n = 1
    assert iqm_interval(np.array([3.5])) == (3.5, (3.5, 3.5))
    assert paired_delta(ItemScores(np.array([1.0])), ItemScores(np.array([0.0])), "mean") == (1.0, (1.0, 1.0))


@pytest.mark.parametrize("aggregation", ["mean", "median", "iqm"])
def test_a_constant_shift_has_a_degenerate_interval(aggregation: str) -> None:
    baseline = np.random.default_rng(3).integers(0, 64, 200) / 8.0
    delta, (low, high) = paired_delta(ItemScores(baseline + 0.25), ItemScores(baseline), aggregation)
    assert delta == pytest.approx(0.25, abs=1e-14)
    assert low == pytest.approx(0.25, abs=1e-14) and high == pytest.approx(0.25, abs=1e-14)


@pytest.mark.parametrize("aggregation", ["mean", "median", "iqm"])
@pytest.mark.parametrize("n", [359, 5000])
def test_paired_delta_is_scipys_paired_percentile_bootstrap(aggregation: str, n: int) -> None:
    rng = np.random.default_rng(n)
    baseline = rng.random(n)
    method = baseline + rng.normal(0.02, 0.1, n)
    delta, ci = paired_delta(ItemScores(method), ItemScores(baseline), aggregation)
    if aggregation == "mean":  # resampling the differences is the same as resampling the pairs
        reference = scipy_bootstrap((method - baseline,), np.mean)
        expected = float(np.mean(method - baseline))
    else:
        one = np.median if aggregation == "median" else partial(stats.trim_mean, proportiontocut=0.25)
        reference = scipy_bootstrap(
            (method, baseline), lambda m, b, axis: one(m, axis=axis) - one(b, axis=axis)
        )
        expected = float(one(method) - one(baseline))
    assert delta == pytest.approx(expected, rel=1e-12)
    assert ci == pytest.approx(scipy_interval(reference), rel=1e-12, abs=1e-15)


def test_ratio_deltas_resample_numerators_and_denominators_together() -> None:
    rng = np.random.default_rng(4)
    sides = [rng.integers(0, 5, 400).astype(np.float64) for _ in range(2)] + [
        rng.integers(1, 9, 400).astype(np.float64) for _ in range(2)
    ]
    method_num, baseline_num, method_den, baseline_den = sides
    method = ItemScores(method_num / method_den, method_num, method_den)
    baseline = ItemScores(baseline_num / baseline_den, baseline_num, baseline_den)
    delta, ci = paired_delta(method, baseline, "sum_ratio")

    def ratio_delta(mn: np.ndarray, md: np.ndarray, bn: np.ndarray, bd: np.ndarray, axis: int) -> np.ndarray:
        return mn.sum(axis=axis) / md.sum(axis=axis) - bn.sum(axis=axis) / bd.sum(axis=axis)

    reference = scipy_bootstrap((method_num, method_den, baseline_num, baseline_den), ratio_delta)
    assert delta == pytest.approx(
        method_num.sum() / method_den.sum() - baseline_num.sum() / baseline_den.sum()
    )
    assert ci == pytest.approx(scipy_interval(reference), rel=1e-12)


def test_iqm_interval_is_scipys_bootstrap_of_trim_mean() -> None:
    values = np.random.default_rng(5).normal(100.0, 15.0, 7)
    iqm, ci = iqm_interval(values)
    reference = scipy_bootstrap((values,), partial(stats.trim_mean, proportiontocut=0.25))
    assert iqm == pytest.approx(stats.trim_mean(values, 0.25), rel=1e-12)
    assert ci == pytest.approx(scipy_interval(reference), rel=1e-12)


def test_interval_skips_draws_that_are_nan() -> None:  # a resample whose denominators sum to zero
    assert interval(np.r_[np.arange(101.0), np.nan, np.nan]) == pytest.approx((2.5, 97.5), rel=1e-12)
    assert interval(np.arange(11.0), confidence=0.8) == pytest.approx((1.0, 9.0), rel=1e-12)


def test_standard_error_is_scipys_sem_and_its_bootstrap_standard_error() -> None:
    values = np.random.default_rng(6).random(500)
    assert standard_error(ItemScores(values), "mean") == pytest.approx(stats.sem(values), rel=1e-12)
    assert math.isnan(standard_error(ItemScores(np.array([1.0])), "mean"))
    reference = scipy_bootstrap((values,), np.median)
    assert standard_error(ItemScores(values), "median") == pytest.approx(reference.standard_error, rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5, 10, 25])
def test_the_mde_uses_the_student_t_quantile(n: int) -> None:
    result = minimum_detectable_effect(2.0, n)
    assert result.t_crit == pytest.approx(stats.t.ppf(0.975, 2 * (n - 1)), rel=1e-10)
    assert result.mde == pytest.approx(result.t_crit * 2.0 * math.sqrt(2.0 / n), rel=1e-12)


def test_the_audits_statistics_never_import_scipy_stats(tmp_path: Path) -> None:
    """The reason the hand versions stay: scipy.stats' import alone costs the variance gate ~0.7 s."""
    probe = """
import sys
import numpy as np
from runaudit.statistics import ItemScores, iqm_interval, minimum_detectable_effect, paired_delta
from runaudit.statistics import standard_error
values = ItemScores(np.arange(40.0), np.arange(40.0), np.full(40, 2.0))
for aggregation in ("mean", "median", "iqm", "sum_ratio"):
    paired_delta(values, values, aggregation)
    standard_error(values, aggregation)
iqm_interval(np.arange(5.0))
minimum_detectable_effect(1.0, 3)
print(sorted(name for name in sys.modules if name.startswith("scipy.stats")))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_nan_makes_every_aggregate_nan_iqm_included() -> None:
    """mean, median and iqm agree: one NaN value is no value (the re-derivation and the variance gate share it)."""
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, np.nan])  # iqm would trim the NaN as a top value
    for aggregation in ("mean", "median", "iqm"):
        assert math.isnan(aggregate(aggregation, values)), aggregation
    blocks = np.stack([values, np.arange(8.0)])
    result = aggregate("iqm", blocks)
    assert math.isnan(result[0]) and result[1] == pytest.approx(np.mean(np.arange(2.0, 6.0)))
