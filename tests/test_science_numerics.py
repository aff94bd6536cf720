"""The numerical kernels behind the science audits, checked against references that cannot share their bugs."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from science_support import digit_png

from runaudit.hamming import brute_force, neighbours, plan, popcount
from runaudit.perceptual_hash import phash64, phash_file
from runaudit.statistics import (
    ItemScores,
    decimals_supported,
    minimum_detectable_effect,
    paired_delta,
    standard_error,
)


def _pairs(found: tuple[np.ndarray, np.ndarray, np.ndarray]) -> set[tuple[int, int, int]]:
    return set(zip(*(part.tolist() for part in found), strict=True))


@pytest.mark.parametrize("radius", [0, 1, 3, 5, 8, 12])
def test_multi_index_search_finds_exactly_the_brute_force_pairs(radius: int) -> None:
    rng = np.random.default_rng(radius)
    reference = rng.integers(0, 2**64, size=3000, dtype=np.uint64, endpoint=False)
    queries = reference[rng.choice(3000, 600, replace=False)].copy()
    for row in range(len(queries)):  # plant neighbours at every distance up to radius + 2
        for bit in rng.choice(64, size=row % (radius + 3), replace=False):
            queries[row] ^= np.uint64(1) << np.uint64(bit)
    found = neighbours(queries, reference, radius)
    assert _pairs(found) == _pairs(brute_force(queries, reference, radius))
    assert (found[2] <= radius).all()


def test_search_in_small_probe_blocks_finds_the_same_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    from runaudit import hamming

    rng = np.random.default_rng(7)
    reference = rng.integers(0, 2**64, size=2000, dtype=np.uint64, endpoint=False)
    queries = reference[:500] ^ (np.uint64(1) << rng.integers(0, 64, size=500).astype(np.uint64))
    whole = _pairs(neighbours(queries, reference, 8))
    monkeypatch.setattr(hamming, "PROBES_PER_BLOCK", 64)  # hundreds of blocks
    assert _pairs(neighbours(queries, reference, 8)) == whole == _pairs(brute_force(queries, reference, 8))


def test_same_set_search_skips_each_item_itself() -> None:
    hashes = np.array([0, 1, 3, 2**63, 0], dtype=np.uint64)  # items 0 and 4 are equal hashes
    expected = {(0, 1, 1), (0, 3, 1), (0, 4, 0), (1, 2, 1), (1, 4, 1), (3, 4, 1)}
    expected |= {(reference, query, distance) for query, reference, distance in expected}
    assert _pairs(neighbours(hashes, hashes, 1, same_set=True)) == expected
    assert popcount(np.array([2**64 - 1], dtype=np.uint64))[0] == 64


def test_band_plans_guarantee_recall_by_pigeonhole() -> None:
    for radius in range(16):
        for size in (10, 10_000, 1_000_000):
            layout = plan(radius, size)
            assert sum(layout.widths) == 64
            assert (
                len(layout.widths) * (layout.flips + 1) > radius
            )  # a pair within radius agrees in some band


def test_phash_is_stable_under_re_encoding_and_far_between_different_pictures() -> None:
    first = Image.open(io.BytesIO(digit_png(0)))
    buffer = io.BytesIO()
    first.convert("RGB").save(buffer, format="JPEG", quality=95)
    recoded = Image.open(io.BytesIO(buffer.getvalue()))
    assert bin(phash64(first) ^ phash64(recoded)).count("1") <= 4
    distances = [
        bin(phash64(first) ^ phash64(Image.open(io.BytesIO(digit_png(index))))).count("1")
        for index in (1, 2, 3, 4)
    ]
    assert min(distances) > 8
    assert 0 <= phash64(first) < 2**64


def test_phash_file_returns_none_for_what_is_not_an_image(tmp_path) -> None:
    text = tmp_path / "notes.png"
    text.write_text("a text file named like an image")
    assert phash_file(text) is None
    image = tmp_path / "zero.png"
    image.write_bytes(digit_png(0))
    assert phash_file(image) == phash64(Image.open(image))


def test_minimum_detectable_effect_reproduces_the_seed_example() -> None:
    sd = float(np.std([42.63, 49.30, 47.26], ddof=1))
    result = minimum_detectable_effect(sd, 3)
    assert round(result.mde, 2) == 7.75 and result.df == 4 and round(result.t_crit, 4) == 2.7764


def test_paired_bootstrap_is_seeded_and_covers_the_true_difference() -> None:
    rng = np.random.default_rng(0)
    baseline = rng.random(5000)
    method = baseline + 0.05 + rng.normal(0, 0.1, 5000)
    first = paired_delta(ItemScores(method), ItemScores(baseline), "mean")
    assert first == paired_delta(ItemScores(method), ItemScores(baseline), "mean")
    delta, (low, high) = first
    assert low < 0.05 < high and low < delta < high and high - low < 0.01
    median_delta, (median_low, median_high) = paired_delta(ItemScores(method), ItemScores(baseline), "median")
    assert median_low <= median_delta <= median_high


def test_ratio_metrics_resample_their_sufficient_statistics() -> None:
    numerators = np.array([1.0, 2.0, 3.0, 4.0] * 50)
    denominators = np.array([2.0, 2.0, 4.0, 8.0] * 50)
    scores = ItemScores(numerators / denominators, numerators, denominators)
    assert scores.aggregate("sum_ratio") == pytest.approx(10 / 16)
    assert standard_error(scores, "sum_ratio") > 0
    assert standard_error(ItemScores(np.array([0.0, 1.0] * 100)), "mean") == pytest.approx(
        0.5 / np.sqrt(200), rel=0.01
    )


@pytest.mark.parametrize(("error", "decimals"), [(0.016, 3), (3.42, 1), (0.0073, 4), (0.5, 2), (0.0, None)])
def test_decimals_supported_by_a_standard_error(error: float, decimals: int | None) -> None:
    assert decimals_supported(error) == decimals
