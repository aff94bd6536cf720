"""Leakage gate (science): did the test score partly measure training data? (docs/checks.md §2.5)

The split manifest (``_trust/splits/<split_id>.parquet``) is probed, not the preparation code: the same
bytes, case-aliased paths, near-copies, groups or times on both sides of a split boundary are disclosed
with the share of the test split already seen in training. Names that merely collide are not leakage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pytest

from runaudit.capsule import checkpoint_file
from runaudit.claims import metric_claims, run_claim
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.near_duplicates import MAX_RADIUS, find_near_duplicates
from runaudit.reader import CapsuleReader, Unavailable
from runaudit.run import Run
from runaudit.splits import (
    SPLITS,
    SplitManifest,
    bound_sha256,
    joined,
    load_manifest,
    names_split,
    overlap,
    pair_name,
    same_split,
    within_split_repeats,
)

pytestmark = pytest.mark.science

SPLIT = run_claim("split")
SELECTION = run_claim("checkpoint_selection")
SHOWN = 3


def _affected(run: Run, pairs: Iterable[str]) -> list[str]:
    """Every number measured on a split that already occurs, in part, in an earlier one."""
    later = {pair.split("|")[1] for pair in pairs}
    claims = [SPLIT, *metric_claims(run, [test for test in run.tests if test.split in later])]
    return [*claims, SELECTION] if "val" in later else claims


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{100 * fraction:.1f} %"


def _split_block(run: Run) -> Mapping[str, Any]:
    split = run.get("split")
    return split if isinstance(split, Mapping) else {}


def _manifest(audit: AuditRecorder, run: Run) -> SplitManifest:
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules bind a model run; its split is audited there")
    return audit.need(load_manifest, run)


def _counts(counts: Mapping[str, int]) -> str:
    flagged = {pair: count for pair, count in counts.items() if count}
    return ", ".join(f"{pair} {count}" for pair, count in flagged.items()) or "none"


def test_normcase_duplicates(run: Run, audit: AuditRecorder) -> None:
    """LEK-01: items of the split manifest ingested twice through case-aliased paths (``Train/`` and
    ``train/``: the same case-folded path with the same bytes), within a split or across splits, are
    disclosed; case-only collisions with distinct bytes are distinct files, not a finding.
    """
    manifest = _manifest(audit, run)
    casefold = manifest.casefolded
    same_bytes = joined(casefold, manifest.table.column("sha256"))
    aliased = within_split_repeats(manifest, casefold)
    doubled = within_split_repeats(manifest, same_bytes)
    across = overlap(manifest, same_bytes)
    collisions = overlap(manifest, casefold)
    case_only = {pair: collisions.counts[pair] - across.counts.get(pair, 0) for pair in collisions.counts}
    audit.evidence(
        overlap=across.counts,
        fraction_test_seen=across.fraction_test_seen,
        examples=across.examples,
        files=manifest.counts,
        repeated_casefold_paths=aliased,
        repeated_with_identical_bytes=doubled,
        case_only_collisions=case_only,
    )
    found = {split: count for split, count in doubled.items() if count}
    if not found and not across.total:
        extra = sum(aliased.values()) + sum(case_only.values())
        audit.note(
            f"{manifest.rel}: every case-folded path is ingested once"
            + (
                f" ({extra} case-only collision(s) hold distinct bytes: distinct files, not a double read)"
                if extra
                else ""
            )
        )
        return
    parts = [
        f"{split}: {count} item(s) re-ingested under a case-aliased path" for split, count in found.items()
    ]
    if across.total:
        parts.append(f"across splits {_counts(across.counts)} (same bytes, paths equal after case folding)")
    audit.disclose(
        f"run {run.run_id}: {manifest.rel}: double ingestion through case-insensitive aliases (Train/ + train/): "
        f"{'; '.join(parts)}; {_percent(across.fraction_test_seen)} of the test split was seen in training"
        + (f", e.g. {across.examples[0]}" if across.examples else ""),
        affects=_affected(run, [pair for pair, count in across.counts.items() if count]) or [SPLIT],
    )


def test_cross_split_bytes(run: Run, audit: AuditRecorder) -> None:
    """LEK-02, LEK-03: the same SHA-256 in two splits of the split manifest, renamed copies included, is
    disclosed with the share of the test split seen in training; a file-name collision with different bytes
    is not leakage.
    """
    import pyarrow.compute as pc

    manifest = _manifest(audit, run)
    same = overlap(manifest, "sha256")
    names = overlap(manifest, pc.replace_substring_regex(manifest.table.column("path"), r"^.*[/\\]", ""))
    audit.evidence(
        overlap=same.counts,
        fraction_test_seen=same.fraction_test_seen,
        examples=same.examples,
        name_collisions=names.counts,
        split_sizes=manifest.counts,
    )
    if not same.total:
        audit.note(
            f"{manifest.rel}: no bytes shared across splits"
            + (f" ({names.total} file-name collision(s), all with distinct bytes)" if names.total else "")
        )
        return
    leaked = [pair for pair, count in same.counts.items() if count]
    audit.disclose(
        f"run {run.run_id}: {manifest.rel}: byte-identical items cross the split boundary ({_counts(same.counts)}): "
        f"{_percent(same.fraction_test_seen)} of the test split is in train, e.g. {same.examples[0]}",
        affects=_affected(run, leaked),
    )


def test_near_duplicates(run: Run, audit: AuditRecorder) -> None:
    """LEK-04: pHash neighbours across splits are disclosed when a pair of splits' neighbour rate beats the
    in-split lookalike rate (at its upper 95 % bound) in a one-sided binomial test at p < 0.001, within a
    Hamming threshold calibrated per dataset (at most 5 bits, at most 1 % in-split twins among up to 2,000
    items sampled with seed 0).

    More than 1 % in-split twins at distance 0 makes the probe not_run: lookalikes cannot then be told
    from copies by perceptual hash.
    """
    manifest = _manifest(audit, run)
    if not manifest.has("phash"):
        audit.not_run(
            f"{manifest.rel} has no phash values (runaudit index-splits records a perceptual hash per image)"
        )
    found = find_near_duplicates(manifest)
    audit.evidence(
        threshold=found.threshold,
        max_radius=MAX_RADIUS,
        calibration_rates=found.calibration_rates,
        hashed=found.hashed,
    )
    if found.threshold is None:
        audit.not_run(
            f"{manifest.rel}: more than 1 % of items have a distinct in-split twin at pHash distance 0; "
            "near-duplicates cannot be told from lookalikes by perceptual hash"
        )
    audit.evidence(
        overlap=found.counts,
        fraction_test_seen=found.fraction_test_seen,
        examples=found.examples,
        in_split_rate=found.in_split_rate,
        expected_rate=found.expected_rate,
        p_values=found.p_values,
    )
    if not found.flagged:
        audit.note(
            f"{manifest.rel}: cross-split pHash neighbours within {found.threshold} bits ({_counts(found.counts)}) "
            "stay at the rate of in-split lookalikes"
        )
        return
    audit.disclose(
        f"run {run.run_id}: {manifest.rel}: near-duplicates across splits within {found.threshold} bits of pHash "
        f"(calibrated on in-split pairs): {_counts({pair: found.counts[pair] for pair in found.flagged})} items, "
        f"far above the in-split lookalike rate; {_percent(found.fraction_test_seen)} of the test split has a "
        f"near-copy in train, e.g. {found.examples[0]}",
        affects=_affected(run, found.flagged),
    )


def _grouping_declared(run: Run) -> bool:
    split = _split_block(run)
    return split.get("scheme") == "group" or bool(split.get("group_key"))


def test_group_overlap(run: Run, audit: AuditRecorder) -> None:
    """LEK-08: a group of the split manifest (patient, scene, speaker) with items in two splits is
    disclosed; not_applicable when no group is declared or recorded.
    """
    manifest = _manifest(audit, run)
    if not manifest.has("group"):
        if _grouping_declared(run):
            audit.not_run(f"run.json declares a group split, but {manifest.rel} has no group values")
        audit.not_applicable(f"the run declares no group key and {manifest.rel} records no groups")
    shared = overlap(manifest, "group")
    groups = manifest.table.column("group")
    shared_groups = sorted(
        {
            str(value)
            for pair, mask in shared.seen.items()
            for value in groups.take(manifest.split_rows[pair.split("|")[1]][mask][:50]).to_pylist()
        }
    )
    audit.evidence(
        overlap=shared.counts,
        fraction_test_seen=shared.fraction_test_seen,
        examples=shared_groups[:5],
        group_key=_split_block(run).get("group_key"),
    )
    if not shared.total:
        audit.note(f"{manifest.rel}: no group spans two splits")
        return
    leaked = [pair for pair, count in shared.counts.items() if count]
    audit.disclose(
        f"run {run.run_id}: {manifest.rel}: groups span splits ({_counts(shared.counts)} items), e.g. group(s) "
        f"{', '.join(shared_groups[:SHOWN])}: {_percent(shared.fraction_test_seen)} of the test split shares a "
        "group (patient, scene, speaker) with train",
        affects=_affected(run, leaked),
    )


def test_temporal_order(run: Run, audit: AuditRecorder) -> None:
    """LEK-06: items at or before the latest time of an earlier split are disclosed, since the manifest's
    times must satisfy ``max(train) < min(val) ≤ max(val) < min(test)``; not_applicable for a
    non-temporal run.
    """
    from runaudit.splits import time_values

    manifest = _manifest(audit, run)
    split = _split_block(run)
    if not manifest.has("time"):
        if split.get("scheme") == "temporal" or split.get("time_key"):
            audit.not_run(f"run.json declares a temporal split, but {manifest.rel} has no time values")
        audit.not_applicable(
            f"a non-temporal task: the run declares no time key and {manifest.rel} records no times"
        )
    times = time_values(manifest)
    if times is None:
        audit.not_run(f"{manifest.rel}: the time column holds neither timestamps nor numbers")
    untimed = {name: int(np.sum(~np.isfinite(values))) for name, values in times.items()}
    if any(untimed.values()):
        audit.evidence(untimed=untimed)
        audit.not_run(
            f"{manifest.rel}: rows with no finite time (null, NaN or ±inf): {_counts(untimed)}; their order "
            "against the other splits cannot be checked"
        )
    present = {name: values for name, values in times.items() if len(values)}
    if not present:
        audit.not_run(f"{manifest.rel}: no split holds a row to order in time")
    latest = {name: float(values.max()) for name, values in present.items()}
    earliest = {name: float(values.min()) for name, values in present.items()}
    violations: dict[str, int] = {}
    for earlier, later in (("train", "val"), ("val", "test"), ("train", "test")):
        if earlier in present and later in present:
            violations[pair_name(earlier, later)] = int(np.sum(present[later] <= latest[earlier]))
    test_times = present.get("test")
    fraction = (
        float(np.mean(test_times <= latest["train"]))
        if test_times is not None and "train" in latest
        else None
    )
    audit.evidence(
        overlap=violations,
        fraction_test_seen=fraction,
        earliest=earliest,
        latest=latest,
        time_type=str(manifest.table.column("time").type),
    )
    if not any(violations.values()):
        audit.note(
            f"{manifest.rel}: "
            + " < ".join(
                f"{name} [{earliest[name]:g}, {latest[name]:g}]" for name in SPLITS if name in present
            )
        )
        return
    audit.disclose(
        f"run {run.run_id}: {manifest.rel}: splits overlap in time ({_counts(violations)} items at or before the "
        f"end of the earlier split; expected max(train) < min(val) ≤ max(val) < min(test)): the model saw the "
        f"future of {_percent(fraction)} of the test split",
        affects=_affected(run, [pair for pair, count in violations.items() if count]),
    )


def test_selection_on_test(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """LEK-10, SCH-20: a checkpoint whose declared selection ran on a test split (or on a split run.json
    declares nowhere), or ``train.csv`` columns naming a test split among their words (``test_acc``,
    ``Test/Accuracy``, ``eval_test_loss``) logged during training, are disclosed.

    A test score used to choose, not only to measure, is optimistic.
    """
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules select no checkpoint")
    checkpoints = run.get("checkpoints")
    if not isinstance(checkpoints, Mapping):
        audit.not_run("run.json declares no checkpoints (reported by capsule.run_json_schema)")
    test_splits = {test.split for test in run.tests if test.split} | {"test"}
    split = run.get("split")
    counts = split.get("counts") if isinstance(split, Mapping) else None
    known = {*test_splits, "train", "val", *(counts if isinstance(counts, Mapping) else ())}
    findings, affected = [], {SELECTION}
    for role in ("best", "last"):
        checkpoint = checkpoints.get(role)
        selection = checkpoint.get("selection") if isinstance(checkpoint, Mapping) else None
        if not isinstance(selection, Mapping):
            continue
        chosen = str(selection.get("split"))
        named = checkpoint_file(role, run.path).name
        if tested := [name for name in test_splits if same_split(name, chosen)]:
            findings.append(f"{named} was selected by {selection.get('metric')} on the {chosen} split")
            affected.update(metric_claims(run, [test for test in run.tests if test.split in tested]))
        elif not any(same_split(name, chosen) for name in known):
            findings.append(
                f"{named} was selected on a split {chosen!r} that run.json declares nowhere (a test split "
                "under another name reads the same)"
            )
            affected.update(metric_claims(run))
    try:
        header, rows = capsule.csv_rows("train.csv")
    except Unavailable as exc:
        if not findings:  # the checkpoints read no test split; whether training did is unknown
            audit.not_run(f"{exc} (reported by {exc.owner})")
        header, rows = [], []
    test_columns = [name for name in header if any(names_split(name, split) for split in test_splits)]
    if test_columns:
        findings.append(
            f"train.csv logs {', '.join(test_columns)} during training ({len(rows)} evaluations of the test split)"
        )
        affected.update(metric_claims(run))
    audit.evidence(test_splits=sorted(test_splits), test_columns=test_columns)
    if not findings:
        audit.note("checkpoint selection read no test split; train.csv logs no column naming a test split")
        return
    audit.disclose(
        f"run {run.run_id}: selection read the test split: {'; '.join(findings)} (the test score is then "
        "optimistic: it was used to choose, not only to measure)",
        affects=sorted(affected),
    )


def test_val_split_exists(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """LEK-14: no positive ``split.counts.val`` in ``run.json`` (any ``val_*`` column of ``train.csv`` was
    then computed on training or test data), or validation sample ids also in another split, is disclosed
    (topic ``val_split``).
    """
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules carry no training history")
    split = _split_block(run)
    counts = split.get("counts")
    if not isinstance(counts, Mapping):
        counts = {}
    if not split:
        audit.not_run("run.json declares no split block (reported by capsule.run_json_schema)")
    header, _ = audit.need(capsule.csv_rows, "train.csv")
    val_columns = [name for name in header if name.startswith("val_")]
    n_val = counts.get("val")
    findings = []
    if not isinstance(n_val, int) or n_val <= 0:
        findings.append(
            f"run.json declares {n_val!r} validation items, yet train.csv logs {', '.join(val_columns)}: "
            "those columns were computed on training or test data"
            if val_columns
            else f"run.json declares {n_val!r} validation items: no disjoint split guided training"
        )
    overlaps = {}
    try:
        manifest = load_manifest(run)
    except Unavailable:
        manifest = None  # a finding stands on run.json alone; the manifest's state is split_provenance's
    if manifest is None and not findings:  # the ids went unchecked: never a pass (an all-null manifest was)
        audit.need(load_manifest, run)
    if manifest is not None:
        shared = overlap(manifest, "sample_id")
        overlaps = {pair: count for pair, count in shared.counts.items() if "val" in pair and count}
        if overlaps:
            findings.append(
                f"{manifest.rel}: validation sample ids also sit in other splits ({_counts(overlaps)})"
            )
    audit.evidence(val_items=n_val, val_columns=val_columns, overlap=overlaps)
    if not findings:
        audit.note(f"{n_val} validation items feed {', '.join(val_columns) or 'no val_ column'}")
        return
    audit.disclose(
        f"run {run.run_id}: no disjoint validation split: {'; '.join(findings)}",
        affects=[SELECTION, SPLIT],
        topic="val_split",
    )


def test_split_provenance(run: Run, audit: AuditRecorder) -> None:
    """LEK-13, LEK-16: a split scheme other than ``official``, a missing, unreadable or changed split
    manifest, manifest counts that differ from ``run.json``'s, or no ``manifest_sha256`` binding it is
    disclosed.

    Numbers on a non-official split are not comparable with results on the field's standard split.
    """
    if run.kind == "hardware":
        audit.not_applicable("hardware capsules bind a model run; its split is audited there")
    split = _split_block(run)
    if not split:
        audit.not_run("run.json declares no split block (reported by capsule.run_json_schema)")
    scheme = split.get("scheme")
    findings = []
    try:
        manifest = load_manifest(run)
    except Unavailable as exc:
        findings.append(str(exc))
        manifest = None
    declared_counts = dict(split.get("counts", {})) if isinstance(split.get("counts"), Mapping) else {}
    if manifest is not None:
        if declared_counts and manifest.counts != {name: declared_counts.get(name) for name in SPLITS}:
            findings.append(f"{manifest.rel} counts {manifest.counts}, run.json declares {declared_counts}")
        if bound_sha256(run) is None:
            findings.append(f"run.json binds no manifest_sha256: {manifest.rel} may change without notice")
    audit.evidence(scheme=scheme, split_id=split.get("split_id"), counts=declared_counts)
    if scheme != "official":
        findings.insert(
            0,
            f"the split scheme is {scheme!r}, not the dataset's official split: numbers are not comparable with "
            "results on the field's standard split",
        )
    if not findings:
        audit.note(f"official split {split.get('split_id')}, manifest bound by sha256")
        return
    audit.disclose(
        f"run {run.run_id}: split provenance: {'; '.join(findings)}",
        affects=[SPLIT, *metric_claims(run)],
        topic="split_scheme" if len(findings) == 1 and scheme != "official" else None,  # the scheme alone
    )
