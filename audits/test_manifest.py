"""Manifest gate (custody): the pulled bytes match the producer's exact roster, sizes and SHA-256.

Missing and unexpected files both fail; a receipt binds one manifest version and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runaudit import manifest as manifests
from runaudit.capsule import UNLISTED
from runaudit.fixtures.custody import Custody
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.ids import duplicates, is_safe_id
from runaudit.receipts import run_receipt
from runaudit.run import Run

pytestmark = pytest.mark.custody

SHOWN = 5


def _examples(items: list[Any]) -> str:
    shown = ", ".join(map(str, items[:SHOWN]))
    return f"{shown}, ... ({len(items)} in all)" if len(items) > SHOWN else shown


def test_present(run: Run, custody: Custody, audit: AuditRecorder) -> None:
    """A pull manifest names the run, no manifest or receipt sits inside the capsule, and the manifest
    validates against its schema, declares the ``pull_id`` of its folder and has totals equal to what its
    entries add up to; anything else fails.

    Without a manifest nothing proves that the pulled bytes are complete.
    """
    inside = [
        rel for rel in custody.tree.files if rel.rsplit("/", 1)[-1] in (manifests.MANIFEST, manifests.RECEIPT)
    ]
    audit.require(
        not inside,
        f"run {run.run_id}: custody record(s) inside the capsule: {_examples(inside)}; "
        "pull manifests and receipts live under <root>/_trust/pulls/<pull-id>/",
    )
    manifest = custody.manifest
    where = f"{run.root}/_trust/pulls/{run.pull or '*'}/{manifests.MANIFEST}"
    if manifest is None:
        audit.fail(
            f"run {run.run_id}: no pull manifest names this run ({where}); build one on the producer with "
            "`runaudit manifest` — without it nothing proves the pulled bytes are complete"
        )
    audit.evidence(pull_id=manifest.pull_id, manifest=manifest.path, manifest_sha256=manifest.sha256)
    audit.require(manifest.problem is None, f"run {run.run_id}: {manifest.problem}")
    problems = custody.manifest_problems
    audit.require(
        not problems, f"run {run.run_id}: {manifest.path}: {_examples(problems)}", problems=problems
    )


def test_roster(run: Run, custody: Custody, audit: AuditRecorder) -> None:
    """The manifest's roster is non-empty, of safe unique ids, names the run and equals the capsules its files
    belong to, and the run's local files and empty folders equal the listed ones exactly; a missing or an
    unexpected path fails.
    """
    manifest = custody.require_manifest(audit)
    roster = manifest.roster
    where = f"run {run.run_id}: pull {manifest.pull_id}"
    audit.require(bool(roster), f"{where}: the roster is empty; an empty roster proves nothing")
    unsafe = [name for name in roster if not is_safe_id(name)]
    audit.require(
        not unsafe and not duplicates(roster),
        f"{where}: roster has unsafe or repeated ids {unsafe + duplicates(roster)}",
    )
    audit.require(run.run_id in roster, f"{where}: the roster {roster} does not name this run")
    listed_capsules = {str(entry.get("path", "")).split("/", 1)[0] for entry in manifest.entries}
    audit.require(
        listed_capsules == set(roster),
        f"{where}: files are listed for capsules {sorted(listed_capsules)}, roster is {sorted(roster)}",
    )
    expected = {str(entry["path"]) for entry in manifest.entries_of(run.run_id)}
    local = set(custody.tree.files)
    missing = sorted(expected - local)
    unexpected = sorted(local - expected)
    expected_empty = set(manifest.empty_dirs_of(run.run_id))
    local_empty = set(custody.tree.empty_dirs)
    missing += sorted(f"{path}/" for path in expected_empty - local_empty)
    unexpected += sorted(f"{path}/" for path in local_empty - expected_empty)
    audit.evidence(listed=len(expected), local=len(local), missing=missing[:100], unexpected=unexpected[:100])
    audit.require(
        not missing and not unexpected,
        f"{where}: local copy differs from the manifest roster: {len(missing)} missing"
        + (f" ({_examples(missing)})" if missing else "")
        + f", {len(unexpected)} unexpected"
        + (f" ({_examples(unexpected)})" if unexpected else ""),
    )


def test_path_safety(run: Run, custody: Custody, audit: AuditRecorder) -> None:
    """Every path the manifest lists is relative, free of ``..``, ``.``, empty, backslash or NUL components,
    made of safe ids, listed once, free of case-fold collisions and resolves inside the capsule, no local
    file is a symlink or special file, and neither the capsule folder nor its holder is a symlink; else fails.
    An unsafe path fails even in a manifest that breaks its contract; that all are safe passes only in one
    that holds to it (else not_run, citing ``manifest.present``).
    """
    manifest = custody.require_manifest(audit, whole=False)
    paths = [entry.get("path") for entry in manifest.entries]
    folders = manifest.empty_dirs
    problems = [problem for path in [*paths, *folders] for problem in manifests.path_problems(path)]
    problems += manifests.collection_problems([str(path) for path in paths], [str(path) for path in folders])
    if custody.tree.detour:
        problems.append(custody.tree.detour)
    problems += [f"{rel} is a symlink" for rel in custody.tree.symlinks]
    problems += [f"{rel} is a special file" for rel in custody.tree.specials]
    problems += [f"{rel}/ was not listed ({UNLISTED})" for rel in custody.tree.unlisted]
    capsule = _resolved(run.holder / run.run_id)
    for entry in manifest.entries_of(run.run_id):
        if manifests.path_problems(entry["path"]):
            continue
        target = _resolved(run.holder / str(entry["path"]))
        if target is None or capsule is None:
            problems.append(f"{entry['path']} cannot be resolved: a symlink on its way loops")
        elif capsule not in target.parents:
            problems.append(f"{entry['path']} resolves to {target}, outside {capsule}")
    audit.evidence(problems=problems[:100])
    audit.require(
        not problems,
        f"run {run.run_id}: pull {manifest.pull_id} has {len(problems)} unsafe path(s): {_examples(problems)}",
    )
    # Every path is safe, yet a manifest that breaks its contract passes nothing.
    custody.require_manifest(audit)


def _resolved(path: Path) -> Path | None:
    """``path`` with every symlink followed, or None where they loop (``test -> test``)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a loop, later versions OSError
        return None


def _local_file(
    run: Run, custody: Custody, audit: AuditRecorder, entry: dict[str, Any] | None
) -> tuple[str, Path]:
    custody.require_manifest(audit)
    if entry is None:
        audit.not_run(f"pull manifest lists no files for run {run.run_id} (reported by manifest.roster)")
    rel = str(entry["path"])
    if manifests.path_problems(rel):
        audit.not_run(f"{rel} is not a safe path (reported by manifest.path_safety)")
    if rel in custody.tree.symlinks:
        audit.not_run(f"{rel} is a symlink locally (reported by manifest.path_safety)")
    if rel not in custody.tree.files:
        audit.not_run(f"{rel} is absent locally (reported by manifest.roster)")
    return rel, run.holder / rel


def test_size(run: Run, custody: Custody, audit: AuditRecorder, manifest_file: dict[str, Any] | None) -> None:
    """The local file's size in bytes equals the one the manifest lists for it; any other size fails."""
    rel, _ = _local_file(run, custody, audit, manifest_file)
    if manifest_file is None:  # _local_file reports a missing entry as not run
        raise RuntimeError("a manifest subject without an entry reached the check")
    found = custody.tree.files[rel]
    expected = manifest_file.get("bytes")
    audit.evidence(expected=expected, found=found)
    audit.require(
        found == expected, f"run {run.run_id}: {rel} has {found} bytes, the manifest lists {expected}"
    )


def test_sha256(
    run: Run, custody: Custody, audit: AuditRecorder, manifest_file: dict[str, Any] | None
) -> None:
    """The local file's SHA-256 equals the one the manifest lists for it; different bytes fail.

    Within one trust boundary a stat-keyed cache skips unchanged bytes (the evidence says ``hashed: cache``
    or ``fresh``); ``runaudit verify``, ``runaudit accept`` and ``--runaudit-fresh-hashes`` hash every byte.
    """
    rel, _ = _local_file(run, custody, audit, manifest_file)
    if manifest_file is None:  # _local_file reports a missing entry as not run
        raise RuntimeError("a manifest subject without an entry reached the check")
    if custody.tree.files[rel] != manifest_file.get("bytes"):
        audit.not_run(f"{rel} has the wrong size (reported by manifest.size)")
    digest = custody.hashed(rel)
    expected = manifest_file.get("sha256")
    audit.evidence(expected=expected, found=digest.sha256, hashed=digest.source)
    audit.require(
        digest.sha256 == expected,
        f"run {run.run_id}: {rel} has sha256 {digest.sha256[:16]}…, the manifest lists {str(expected)[:16]}…: "
        "the bytes differ from the producer's",
    )
    audit.note(f"sha256 matches ({'cached by stat key' if digest.source == 'cache' else 'hashed fresh'})")


def test_receipt(run: Run, custody: Custody, audit: AuditRecorder) -> None:
    """A receipt is current for the run (bound to the manifest's SHA-256 and pull id, the run in its roster,
    every listed file still regular, of its size, with its recorded stat key or SHA-256), else fails;
    before any ``runaudit verify`` it says not_run. A file changed since verification is hashed again, never
    read from the stat-keyed cache: this is the question ``runaudit down`` asks.
    """
    manifest = custody.require_manifest(audit)
    if manifests.receipt_of(manifest) is None:
        audit.not_run(
            f"pull {manifest.pull_id} has no {manifests.RECEIPT} yet: the pull has not been verified "
            "(`runaudit verify` writes it once every custody audit passes)"
        )
    # Without the stat-keyed hash cache, as `runaudit down` asks (a file changed since verification is hashed
    # again): the cache may stand in for manifest.sha256's hashes, never for the answer teardown rests on.
    found = run_receipt(run.root, run.run_id, pull_id=manifest.pull_id)
    audit.evidence(receipt=found.path, pull_id=found.pull_id, manifest_sha256=manifest.sha256)
    audit.require(found.current, "; ".join(found.problems), problems=list(found.problems))
