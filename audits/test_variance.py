"""Variance gate (science): is a delta an effect or noise? (docs/checks.md §2.6)

Siblings are the runs sharing ``comparison.group`` under the same root; each run is one seed draw of its
``comparison.arm``. The audited run's arm is compared with its reference arm: the only other arm, or the
one whose runs declare ``ablated: []``. Values are the headline numbers each run declares (metrics.json,
the test's primary condition); paired statistics read the per-item values of results.parquet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from runaudit.claims import metric_claims
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.items import (
    KeyedScores,
    MissingColumn,
    align,
    keyed_scores,
    mean_of,
    primary_condition,
)
from runaudit.reader import CapsuleReader, Unavailable, dotted
from runaudit.run import DeclaredMetric, DeclaredTest, Run
from runaudit.siblings import (
    ComparisonGroup,
    ablated,
    arm_of,
    comparison_group,
    declared_value,
    reader,
    seed_of,
)
from runaudit.statistics import (
    decimals_supported,
    iqm_interval,
    minimum_detectable_effect,
    paired_delta,
    standard_error,
)

pytestmark = pytest.mark.science

SEEDS_NEEDED = 3
SEEDS_NEEDED_RL = 5
VARIANCE_KIND = "seed"  # across-run spread of one arm: initialisation and optimisation noise


@dataclass
class Arm:
    name: str
    runs: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def sd(self) -> float | None:
        return float(np.std(self.values, ddof=1)) if self.n >= 2 else None

    def band(self) -> dict[str, Any]:
        return {"values": self.values, "mean": self.mean, "std": self.sd, "n": self.n, "runs": self.runs}


def _group(run: Run) -> ComparisonGroup:
    """The run's comparison group; a run that declares none is a group of one."""
    return comparison_group(run) or ComparisonGroup("", (run,))


def _declared_single_seed(run: Run) -> bool:
    declaration = run.declaration("seeds")
    return declaration is not None and declaration.choice == "single"


def _subject(
    audit: AuditRecorder, run: Run, declared_metric: tuple[DeclaredTest, DeclaredMetric] | None
) -> tuple[DeclaredTest, DeclaredMetric, str]:
    if run.declared is None:
        audit.not_run(f"run.json is unreadable (reported by capsule.run_json_schema): {run.problem}")
    if declared_metric is None:
        if any(test.metrics_apply for test in run.tests):
            audit.not_run(
                f"run {run.run_id} declares no protocol metrics (reported by capsule.run_json_schema)"
            )
        audit.not_applicable("no declared test has applicable metrics (no machine-readable ground truth)")
    test, metric = declared_metric
    condition = primary_condition(test)
    if condition is None:
        audit.not_run(f"test {test.test_id} declares no condition (reported by capsule.run_json_schema)")
    return test, metric, condition


def _arms(
    audit: AuditRecorder, group: ComparisonGroup, test: DeclaredTest, metric: DeclaredMetric, condition: str
) -> dict[str, Arm]:
    """Declared values per arm (the audited run's arm first); unreadable siblings go to the evidence."""
    arms: dict[str, Arm] = {}
    skipped = []
    for name, members in group.arms.items():
        arm = arms.setdefault(name, Arm(name))
        for member in members:
            try:
                value = declared_value(member, test.test_id, metric.name, condition)
            except Unavailable as exc:
                if member is group.run:
                    audit.not_run(f"{exc} (reported by {exc.owner})")
                skipped.append(f"{member.run_id}: {exc}")
                continue
            arm.runs.append(member.run_id)
            arm.values.append(value)
    audit.evidence(metric=metric.name, condition=condition, group=group.group or None, skipped_runs=skipped)
    return {name: arm for name, arm in arms.items() if arm.n}


@dataclass(frozen=True)
class Compared:
    """One (test, metric) subject across the comparison group: the declared value of every run, per arm."""

    test: DeclaredTest
    metric: DeclaredMetric
    condition: str
    group: ComparisonGroup
    arms: dict[str, Arm]

    @property
    def own(self) -> Arm | None:
        return self.arms.get(self.group.arm)

    @property
    def claim(self) -> str:
        return f"test/{self.test.test_id}:{self.metric.name}"


def _compared(
    audit: AuditRecorder, run: Run, declared_metric: tuple[DeclaredTest, DeclaredMetric] | None
) -> Compared:
    test, metric, condition = _subject(audit, run, declared_metric)
    group = _group(run)
    return Compared(test, metric, condition, group, _arms(audit, group, test, metric, condition))


def _reference(audit: AuditRecorder, compared: Compared) -> Arm:
    """The arm the audited run is compared with, or not_applicable / not_run saying why there is none."""
    group, arms = compared.group, compared.arms
    if not group.group:
        audit.not_applicable("run.json declares no comparison group; no delta is claimed")
    if len(group.arms) < 2:
        audit.not_applicable(
            f"comparison group {group.group} holds one arm ({group.arm}); no delta is claimed"
        )
    reference = group.reference_arm()
    if reference is None:
        audit.not_run(
            f"comparison group {group.group}: cannot tell the baseline among arms "
            f"{', '.join(arm for arm in group.arms if arm != group.arm)}; "
            "declare ablated: [] on the baseline arm's runs"
        )
    if reference not in arms:
        audit.not_run(f"no run of baseline arm {reference} declares a readable value (see skipped_runs)")
    return arms[reference]


def _need_band(audit: AuditRecorder, run: Run, arms: Mapping[str, Arm], names: list[str]) -> list[Arm]:
    """The named arms that have two or more seeds; not_applicable/not_run when none has."""
    banded = [arms[name] for name in names if name in arms and arms[name].n >= 2]
    if banded:
        return banded
    if _declared_single_seed(run):
        audit.not_applicable("run.json declares a single seed (declarations: seeds); no seed band is claimed")
    audit.not_run(
        f"arm(s) {', '.join(names)} have one seed each; a band needs two (reported by variance.seed_count)"
    )


def test_seed_count(run: Run, audit: AuditRecorder) -> None:
    """VAR-01: an arm of the comparison group (the run alone when it declares none) with fewer than 3
    distinct seeds (5 for ``task: rl``) is disclosed (topic ``seeds``), naming arms whose runs repeat a seed.
    """
    if run.declared is None:
        audit.not_run(f"run.json is unreadable (reported by capsule.run_json_schema): {run.problem}")
    group = _group(run)
    needed = SEEDS_NEEDED_RL if run.task == "rl" else SEEDS_NEEDED
    arms: dict[str, dict[str, Any]] = {}
    for name, members in group.arms.items():
        seeds = [seed_of(member) for member in members]
        distinct = len({seed for seed in seeds if seed is not None}) + seeds.count(None)
        arms[name] = {"runs": [member.run_id for member in members], "seeds": seeds, "n": distinct}
    short = {name: arm["n"] for name, arm in arms.items() if arm["n"] < needed}
    repeated = {name: arm["seeds"] for name, arm in arms.items() if arm["n"] < len(arm["runs"])}
    audit.evidence(arms=arms, needed=needed, group=group.group or None)
    if not short:
        audit.note(
            ", ".join(f"{name}: {arm['n']} seeds" for name, arm in arms.items()) + f" (≥ {needed} each)"
        )
        return
    audit.disclose(
        f"run {run.run_id}: "
        + "; ".join(
            f"arm {name} has {n} seed{'s' if n != 1 else ''}"
            + (" (single seed: no variance band)" if n == 1 else "")
            for name, n in short.items()
        )
        + f"; {needed} per arm are needed before a delta can be told from seed noise"
        + (f" (runs repeat a seed in {', '.join(repeated)})" if repeated else ""),
        affects=metric_claims(run),
        topic="seeds",
    )


def _overlaps(one: Arm, other: Arm) -> bool:
    low_one, high_one = one.mean - (one.sd or 0.0), one.mean + (one.sd or 0.0)
    low_other, high_other = other.mean - (other.sd or 0.0), other.mean + (other.sd or 0.0)
    return low_one <= high_other and low_other <= high_one


def _band_text(arm: Arm) -> str:
    return f"{arm.mean:.4g} ± {arm.sd:.2g} (n={arm.n})" if arm.sd is not None else f"{arm.mean:.4g} (n=1)"


def test_seed_band(
    run: Run, audit: AuditRecorder, declared_metric: tuple[DeclaredTest, DeclaredMetric] | None
) -> None:
    """VAR-02: the declared value's mean ± sample standard deviation over seeds, per arm with its n, is
    disclosed when the audited arm's band overlaps another arm's (the difference is inside seed noise).

    A declared single seed (``declarations: seeds``) makes it not_applicable.
    """
    compared = _compared(audit, run, declared_metric)
    arms, own = compared.arms, compared.own
    _need_band(audit, run, arms, list(arms))
    audit.evidence(variance_kind=VARIANCE_KIND, arms={name: arm.band() for name, arm in arms.items()})
    overlapping = [arm for arm in arms.values() if own is not None and arm is not own and _overlaps(own, arm)]
    bands = "; ".join(f"{name} {_band_text(arm)}" for name, arm in arms.items())
    if not overlapping:
        audit.note(f"{compared.metric.name} ({VARIANCE_KIND} variance): {bands}")
        return
    audit.disclose(
        f"run {run.run_id}: {compared.metric.name} mean ± std over {VARIANCE_KIND}s: {bands}: arm "
        f"{compared.group.arm}'s band overlaps {', '.join(arm.name for arm in overlapping)}: the difference is "
        "inside seed noise",
        affects=[compared.claim],
    )


def _item_scores(table: Any, metric: DeclaredMetric, condition: str, where: str) -> KeyedScores:
    """Per-item values of a table the reader already held to its contract (or, for a sibling, to its
    footer): a missing optional column is the contract's to report."""
    try:
        return keyed_scores(table, metric, condition)
    except MissingColumn as exc:
        raise Unavailable(f"{where}: {exc}", "capsule.results_table") from None


def test_paired_bootstrap(
    run: Run,
    capsule: CapsuleReader,
    audit: AuditRecorder,
    declared_metric: tuple[DeclaredTest, DeclaredMetric] | None,
) -> None:
    """VAR-03, VAR-04, VAR-06: method − baseline over the items both score in ``results.parquet`` (the
    baseline averaged over its runs) is disclosed when its 95 % bootstrap interval includes 0, or when items
    were dropped to pair the arms.

    Pairing per item makes the comparison valid even at one seed per arm.
    """
    compared = _compared(audit, run, declared_metric)
    reference = _reference(audit, compared)
    metric, condition, arm = compared.metric, compared.condition, compared.group.arm
    rel = f"{compared.test.folder}/results.parquet"
    method = audit.need(
        lambda: _item_scores(capsule.results(compared.test), metric, condition, f"run {run.run_id}: {rel}")
    )
    baselines, skipped = [], []
    for member in compared.group.arms[reference.name]:
        try:
            where = f"run {member.run_id}: {rel}"
            table = reader(member).results_to_pair(compared.test.test_id)
            baselines.append(_item_scores(table, metric, condition, where))
        except Unavailable as exc:
            skipped.append(f"{exc} (reported by {exc.owner})")
    if not baselines:
        audit.not_run(f"no run of baseline arm {reference.name} has readable per-item values: {skipped[0]}")
    (method_scores, *baseline_scores), dropped = align(method, *baselines)
    if len(method_scores) < 2:
        audit.not_run(
            f"{rel}: run {run.run_id} and arm {reference.name} share {len(method_scores)} scored item(s)"
        )
    if metric.aggregation is None:
        audit.not_run(f"metric {metric.name} declares no aggregation (reported by capsule.run_json_schema)")
    delta, (low, high) = paired_delta(method_scores, mean_of(baseline_scores), metric.aggregation)
    audit.evidence(
        method_arm=arm,
        baseline_arm=reference.name,
        baseline_runs=len(baselines),
        delta=delta,
        ci=[low, high],
        n=len(method_scores),
        dropped=dropped,
        skipped=skipped,
    )
    inside = low <= 0 <= high
    interval = f"95 % CI [{low:+.4g}, {high:+.4g}]"
    if not inside and not dropped:
        audit.note(
            f"{metric.name}: {arm} − {reference.name} = {delta:+.4g} over {len(method_scores)} paired items, {interval}"
        )
        return
    findings = []
    if inside:
        findings.append(f"the {interval} of {delta:+.4g} includes 0: noise, not an effect")
    if dropped:
        findings.append(f"{dropped} item(s) not scored by both arms were dropped to pair them")
    audit.disclose(
        f"run {run.run_id}: {metric.name} {arm} − {reference.name} over {len(method_scores)} paired test "
        f"items: {'; '.join(findings)}",
        affects=[compared.claim],
    )


def test_mde(
    run: Run, audit: AuditRecorder, declared_metric: tuple[DeclaredTest, DeclaredMetric] | None
) -> None:
    """VAR-05: an effect (arm mean − baseline mean) smaller than the minimum detectable effect
    ``t_crit(df) · sd · √(2/n)``, ``df = 2(n − 1)``, two-sided α = 0.05, with ``sd`` and ``n`` of the noisier
    arm, is disclosed as underpowered, not null.
    """
    compared = _compared(audit, run, declared_metric)
    reference = _reference(audit, compared)
    arm = compared.group.arm
    banded = _need_band(audit, run, compared.arms, [arm, reference.name])
    noisier = max(banded, key=_band_sd)
    power = minimum_detectable_effect(_band_sd(noisier), noisier.n)
    effect = compared.arms[arm].mean - reference.mean
    audit.evidence(
        mde=power.mde,
        effect=effect,
        sd=power.sd,
        n=power.n,
        t_crit=power.t_crit,
        df=power.df,
        sd_from=noisier.name,
    )
    summary = (
        f"{compared.metric.name} effect {effect:+.4g} ({arm} − {reference.name}) vs MDE {power.mde:.4g} "
        f"(t_crit {power.t_crit:.3f} × sd {power.sd:.3g} of {noisier.name} × √(2/{power.n}), df {power.df})"
    )
    if abs(effect) >= power.mde:
        audit.note(summary)
        return
    audit.disclose(
        f"run {run.run_id}: {summary}: the effect is inside the minimum detectable effect — underpowered, not "
        "null; more seeds are needed before claiming or dismissing it",
        affects=[compared.claim],
    )


def _band_sd(arm: Arm) -> float:
    """The sd of an arm :func:`_need_band` kept: two or more seeds, so never None."""
    if arm.sd is None:  # an invariant, not a finding: a crash (error), never a failed science audit
        raise RuntimeError(f"arm {arm.name} reached the band comparison without a seed sd")
    return arm.sd


def test_baseline_draw(
    run: Run, audit: AuditRecorder, declared_metric: tuple[DeclaredTest, DeclaredMetric] | None
) -> None:
    """VAR-07: a single-seed arm's value is always disclosed (topic ``seeds``) against the baseline's worst,
    mean and best seeds, as one draw whose rank in its own seed distribution is unknown.
    """
    compared = _compared(audit, run, declared_metric)
    reference = _reference(audit, compared)
    arm, probe = compared.group.arm, compared.own
    if probe is None:  # _arms reads the audited run's own value or reports the audit not run
        raise RuntimeError(f"run {run.run_id}: no value of its own after _arms")
    if probe.n >= 2:
        audit.not_applicable(f"arm {arm} has {probe.n} seeds; seed_band and mde compare its band")
    if reference.n < 2:
        audit.not_run(
            f"baseline arm {reference.name} has one seed: there is no draw distribution to place the probe in "
            "(reported by variance.seed_count)"
        )
    higher = compared.metric.direction != "lower"
    best = max(reference.values) if higher else min(reference.values)
    worst = min(reference.values) if higher else max(reference.values)
    value = probe.values[0]
    vs_mean, vs_best, vs_worst = value - reference.mean, value - best, value - worst
    audit.evidence(
        probe=value,
        baseline_values=reference.values,
        vs_mean=vs_mean,
        vs_best=vs_best,
        vs_worst=vs_worst,
        baseline_arm=reference.name,
        probe_arm=arm,
    )
    audit.disclose(
        f"run {run.run_id}: single-seed {arm} {compared.metric.name} {value:.4g} against baseline "
        f"{reference.name} {' / '.join(f'{item:.4g}' for item in reference.values)} reads {vs_worst:+.4g} vs its "
        f"worst, {vs_mean:+.4g} vs its mean, {vs_best:+.4g} vs its best: one draw, whose place in its own seed "
        "distribution is unknown",
        affects=[compared.claim],
        topic="seeds",
    )


def test_rl_iqm(
    run: Run, audit: AuditRecorder, declared_metric: tuple[DeclaredTest, DeclaredMetric] | None
) -> None:
    """VAR-08: for ``task: rl``, the interquartile mean across seeds with its bootstrap interval per arm;
    fewer than 5 seeds in the audited arm, or its interval overlapping another arm's, is disclosed (topic
    ``seeds``).
    """
    if run.task is None:  # an unreadable run.json declares nothing: whether this applies is unknown
        audit.not_run("run.json declares no task (reported by capsule.run_json_schema)")
    if run.task != "rl":
        audit.not_applicable(f"task {run.task}: the IQM-over-seeds standard applies to rl")
    compared = _compared(audit, run, declared_metric)
    arm = compared.group.arm
    summary: dict[str, dict[str, Any]] = {}
    for name, values in compared.arms.items():
        iqm, (low, high) = iqm_interval(np.asarray(values.values))
        summary[name] = {"values": values.values, "iqm": iqm, "ci": [low, high], "n": values.n}
    own = summary[arm]
    findings = []
    if own["n"] < SEEDS_NEEDED_RL:
        findings.append(f"arm {arm} has {own['n']} seed(s); an IQM interval needs ≥ {SEEDS_NEEDED_RL}")
    for name, other in summary.items():
        if name != arm and own["ci"][0] <= other["ci"][1] and other["ci"][0] <= own["ci"][1]:
            findings.append(f"the IQM intervals of {arm} and {name} overlap")
    audit.evidence(arms=summary)
    text = "; ".join(
        f"{name} IQM {item['iqm']:.4g} [{item['ci'][0]:.4g}, {item['ci'][1]:.4g}]"
        for name, item in summary.items()
    )
    if not findings:
        audit.note(f"{compared.metric.name}: {text}")
        return
    audit.disclose(
        f"run {run.run_id}: {compared.metric.name}: {text}: {'; '.join(findings)}",
        affects=[compared.claim],
        topic="seeds",
    )


def test_precision(
    run: Run,
    capsule: CapsuleReader,
    audit: AuditRecorder,
    declared_metric: tuple[DeclaredTest, DeclaredMetric] | None,
) -> None:
    """VAR-09: ``metrics.json`` showing more decimals than the standard error supports
    (``floor(−log10 SE) + 2``; SE over items per condition, and for the primary condition at least the
    across-seed error) is disclosed (topic ``precision``).

    Digits beyond the error are noise: 0.016 supports 3 decimals, 3.42 supports 1.
    """
    compared = _compared(audit, run, declared_metric)
    test, metric, own = compared.test, compared.metric, compared.own
    if metric.precision is None or metric.aggregation is None:
        audit.not_run(
            f"metric {metric.name} declares no precision/aggregation (reported by capsule.run_json_schema)"
        )
    rel = f"{test.folder}/results.parquet"
    table = audit.need(capsule.results, test)
    seed_error = own.sd / math.sqrt(own.n) if own is not None and own.sd is not None else None
    conditions, findings = {}, []
    for condition in test.conditions:
        scores = audit.need(
            lambda c=condition: _item_scores(table, metric, c, f"run {run.run_id}: {rel}")
        ).scores
        if len(scores) < 2:
            continue
        item_error = standard_error(scores, metric.aggregation)
        error = max(item_error, seed_error or 0.0) if condition == compared.condition else item_error
        if not math.isfinite(error):  # NaN compares false with everything: it read as "no finding"
            audit.not_run(
                f"{rel}: the standard error of {metric.name} on {condition} is {error}, not a number"
            )
        supported = decimals_supported(error)
        conditions[condition] = {"standard_error": error, "n": len(scores), "decimals_supported": supported}
        if supported is not None and metric.precision > supported:
            findings.append(f"{condition}: ± {error:.2g} over n={len(scores)} supports {supported}")
    audit.evidence(decimals_shown=metric.precision, conditions=conditions, seed_standard_error=seed_error)
    if not findings:
        audit.note(f"{metric.precision} decimals are within the standard error of every condition")
        return
    audit.disclose(
        f"run {run.run_id}: {test.folder}/metrics.json shows {metric.name} to {metric.precision} decimals, more "
        f"than its standard error supports ({'; '.join(findings)}): the trailing digits are noise",
        affects=[compared.claim],
        topic="precision",
    )


def _config(audit: AuditRecorder, source: CapsuleReader, owner_run: Run) -> dict[str, Any]:
    """A run's config.yaml as dotted key paths. The reader parses it once per capsule, and only as a
    bounded tree, so flattening and comparing two configs cost at most its node budget, never an alias
    bomb's expansion; an unusable config (the audited run's or a sibling's) makes this audit not_run."""

    def flat() -> dict[str, Any]:
        try:
            return dotted(source.config())
        except Unavailable as exc:
            raise Unavailable(f"run {owner_run.run_id}: {exc}", exc.owner) from None

    return audit.need(flat)


def _covered(key: str, paths: set[str]) -> bool:
    return any(key == path or key.startswith(f"{path}.") for path in paths)


def test_one_variable(
    run: Run, capsule: CapsuleReader, audit: AuditRecorder, sibling_run: Run | None
) -> None:
    """FAIR-01, REC-09: a sibling whose ``config.yaml`` differs in key paths that neither run declares
    ``ablated`` (the seed aside), a declared ablation that is identical across arms, or a different
    ``protocol_id`` is disclosed: the delta is then not the declared variable's effect alone.
    """
    if run.declared is None:
        audit.not_run(f"run.json is unreadable (reported by capsule.run_json_schema): {run.problem}")
    if sibling_run is None:
        audit.not_applicable(
            "no other run shares this run's comparison group; there is no comparison to audit"
        )
    mine, theirs = _config(audit, capsule, run), _config(audit, reader(sibling_run), sibling_run)
    differing = sorted(
        key for key in mine.keys() | theirs.keys() if mine.get(key, KeyError) != theirs.get(key, KeyError)
    )
    seeds = {
        key
        for key in differing
        if seed_of(run) is not None
        and mine.get(key) == seed_of(run)
        and theirs.get(key) == seed_of(sibling_run)
    }
    declared = set(ablated(run)) | set(ablated(sibling_run))
    extra = [key for key in differing if key not in seeds and not _covered(key, declared)]
    same_arm = arm_of(run) == arm_of(sibling_run)
    expected = set() if same_arm else set(ablated(run)) ^ set(ablated(sibling_run))
    unchanged = sorted(path for path in expected if not any(_covered(key, {path}) for key in differing))
    protocols = (run.protocol_id, sibling_run.protocol_id)
    audit.evidence(
        sibling=sibling_run.run_id,
        arms=[arm_of(run), arm_of(sibling_run)],
        differing=differing,
        seed_keys=sorted(seeds),
        declared_ablated=sorted(declared),
        extra=extra,
        unchanged=unchanged,
        protocol_ids=list(protocols),
    )
    findings = []
    if extra:
        findings.append(f"config keys {', '.join(extra[:8])} differ but no arm declares them ablated")
    if unchanged:
        findings.append(f"declared ablation {', '.join(unchanged)} is identical in both configs")
    if protocols[0] != protocols[1]:
        findings.append(f"protocol_id {protocols[0]} vs {protocols[1]}: the numbers are not comparable")
    if not findings:
        audit.note(
            f"config differs from {sibling_run.run_id} only in "
            + (", ".join(differing) if differing else "nothing")
            + f"; protocol {protocols[0]}"
        )
        return
    audit.disclose(
        f"run {run.run_id} vs sibling {sibling_run.run_id} ({'same arm' if same_arm else 'arms ' + ' / '.join((arm_of(run), arm_of(sibling_run)))}): "
        f"{'; '.join(findings)}: the delta is not the declared variable's effect alone",
        affects=metric_claims(run),
    )
