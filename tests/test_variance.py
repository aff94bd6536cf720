"""Variance audits over sibling runs (copies of the real demo capsule, declared as seeds of two arms).

The seed document's worked numbers must come out exactly: a baseline at 42.63 / 49.30 / 47.26 over three
seeds and a single-seed probe at 49.12 read +6.49 / +2.72 / −0.18 against the baseline's worst, mean and
best, and the minimum detectable effect at sd 3.42 and n = 3 is 7.75.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from science_support import (
    WORKED_BASELINE,
    WORKED_PROBE,
    declare_worked_group,
    edit_config,
    edit_json,
    set_metric,
    verdict,
)

VARIANCE = ("-m", "science", "-k", "test_variance")
BASELINE, PROBE = WORKED_BASELINE, WORKED_PROBE


@pytest.fixture
def worked(project: Path, capsule_dir: Path) -> Path:
    """Three baseline seeds and one single-seed probe in comparison group 'worked'; returns the probe."""
    return declare_worked_group(capsule_dir, project)


def test_the_seed_documents_worked_numbers(run_audits, project: Path, worked: Path) -> None:
    outcome = run_audits(worked, project, *VARIANCE)

    draw = verdict(outcome, "variance.baseline_draw", "main/accuracy")
    assert draw["verdict"] == "disclosed"
    evidence = draw["evidence"]
    assert (round(evidence["vs_worst"], 2), round(evidence["vs_mean"], 2), round(evidence["vs_best"], 2)) == (
        6.49,
        2.72,
        -0.18,
    )
    assert evidence["probe"] == 49.12 and sorted(evidence["baseline_values"]) == [42.63, 47.26, 49.30]
    assert "+6.49 vs its worst, +2.723 vs its mean, -0.18 vs its best" in draw["message"]
    assert draw["affects"] == ["test/main:accuracy"]

    mde = verdict(outcome, "variance.mde", "main/accuracy")
    assert mde["verdict"] == "disclosed" and "underpowered, not null" in mde["message"]
    assert round(mde["evidence"]["mde"], 2) == 7.75
    assert round(mde["evidence"]["sd"], 2) == 3.42
    assert (mde["evidence"]["n"], mde["evidence"]["df"]) == (3, 4)
    assert round(mde["evidence"]["t_crit"], 3) == 2.776
    assert round(mde["evidence"]["effect"], 2) == 2.72

    seeds = verdict(outcome, "variance.seed_count")
    assert seeds["verdict"] == "disclosed" and "declared" not in seeds
    assert "arm probe has 1 seed (single seed: no variance band)" in seeds["message"]
    assert "baseline" not in seeds["message"]
    assert seeds["evidence"]["arms"]["baseline"]["n"] == 3

    band = verdict(outcome, "variance.seed_band", "main/accuracy")
    assert band["verdict"] == "disclosed" and band["evidence"]["variance_kind"] == "seed"
    baseline_band = band["evidence"]["arms"]["baseline"]
    assert (
        baseline_band["n"] == 3
        and round(baseline_band["mean"], 2) == 46.40
        and round(baseline_band["std"], 2) == 3.42
    )

    for sibling in BASELINE:  # configs differ only in the declared ablation and the seed
        assert verdict(outcome, "variance.one_variable", sibling)["verdict"] == "passed"


def test_an_undeclared_config_difference_is_disclosed(run_audits, project: Path, worked: Path) -> None:
    edit_config(project / "export" / "base-s2", lambda config: config["train"].update(lr=0.01))
    outcome = run_audits(worked, project, *VARIANCE)
    found = verdict(outcome, "variance.one_variable", "base-s2")
    assert found["verdict"] == "disclosed" and found["evidence"]["extra"] == ["train.lr"]
    assert verdict(outcome, "variance.one_variable", "base-s1")["verdict"] == "passed"


def test_a_declared_ablation_that_changed_nothing_is_disclosed(
    run_audits, project: Path, worked: Path
) -> None:
    edit_config(worked, lambda config: config["model"].update(hidden=64))  # back to the baseline's value
    found = verdict(run_audits(worked, project, *VARIANCE), "variance.one_variable", "base-s1")
    assert found["verdict"] == "disclosed" and found["evidence"]["unchanged"] == ["model.hidden"]


def test_an_effect_beyond_the_mde_passes(run_audits, project: Path, worked: Path) -> None:
    set_metric(worked, "accuracy", "clean", 60.0)
    outcome = run_audits(worked, project, *VARIANCE)
    mde = verdict(outcome, "variance.mde", "main/accuracy")
    assert mde["verdict"] == "passed" and round(mde["evidence"]["effect"], 2) == 13.60
    assert verdict(outcome, "variance.seed_band", "main/accuracy")["verdict"] == "passed"


def test_rl_runs_need_five_seeds_and_an_iqm_interval(run_audits, project: Path, worked: Path) -> None:
    for run_id in [*BASELINE, PROBE[0]]:
        edit_json(project / "export" / run_id / "run.json", lambda run: run.update(task="rl"))
    outcome = run_audits(worked, project, *VARIANCE)
    iqm = verdict(outcome, "variance.rl_iqm", "main/accuracy")
    assert iqm["verdict"] == "disclosed" and "an IQM interval needs ≥ 5" in iqm["message"]
    baseline = iqm["evidence"]["arms"]["baseline"]
    assert baseline["n"] == 3 and baseline["iqm"] == pytest.approx(
        (42.63 + 49.30 + 47.26) / 3
    )  # n/4 < 1: none cut
    assert baseline["ci"][0] <= baseline["iqm"] <= baseline["ci"][1]
    assert "5 per arm are needed" in verdict(outcome, "variance.seed_count")["message"]


def test_pairing_on_unequal_item_sets_discloses_the_drop(run_audits, project: Path, worked: Path) -> None:
    import pyarrow.parquet as pq

    path = project / "export" / "base-s1" / "test" / "main" / "results.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(10), path)  # ten clean-condition items the baseline never scored
    paired = verdict(run_audits(worked, project, *VARIANCE), "variance.paired_bootstrap", "main/accuracy")
    assert paired["verdict"] == "disclosed" and paired["evidence"]["dropped"] == 10
    assert "10 item(s) not scored by both arms were dropped" in paired["message"]
    n_test = json.loads((project / "export" / "base-s1" / "test" / "main" / "metrics.json").read_text())[
        "n_test"
    ]
    assert paired["evidence"]["n"] == n_test - 10 and paired["evidence"]["baseline_runs"] == 3
