"""``runaudit pull``: bring a pull's capsules home, resumably, and let the custody audits decide.

1. Read the producer's ``_trust/pulls/<id>/PULL_MANIFEST.json`` from the box and check it as a whole
   (schema, every file and empty-folder path, roster, totals) before anything is written; then keep it
   as the local copy (a manifest is immutable: a local copy with other bytes is refused).
2. For each roster run, compare the local ``runs/<id>`` with the manifest: only files that are missing,
   of another size, or of another SHA-256 are fetched, with ``rsync --partial`` (an interrupted pull
   keeps what arrived; the same command resumes it). Nothing is written through a symlinked folder, and
   nothing over another pull's copy (:func:`overwritten`): the manifest is kept only after that check.
3. The ``_trust`` selections and split manifests the runs bind: each id must be a safe id before a path
   is built from it; they arrive in a staging folder, and only regular files at exactly the expected
   names are moved into ``_trust/selections/`` and ``_trust/splits/``. ``pull`` writes nothing else under
   ``_trust/``: receipts are written only by a local ``verify``.
4. ``runaudit verify``: the custody audits on every roster run; ``PULL_VERIFIED.json`` is written only
   when all of them pass. A transfer never decides success; the manifest and the audits do.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runaudit import manifest as manifests
from runaudit.atomic import write_bytes_atomic
from runaudit.hashing import hash_files, progress_bar, stat_key
from runaudit.ids import is_safe_id
from runaudit.runners.box import Box, add_box_arguments, box_from_args
from runaudit.runners.custody import Verification, write_receipt
from runaudit.runners.ssh import Remote
from runaudit.runners.transfer import remote_path, rsync
from runaudit.safeio import JSON_CAP, is_regular, read_regular
from runaudit.usage import Refusal, existing_dir

# The _trust records a capsule binds by id (and by hash, which the capsule audits check): folder, suffix.
BOUND_RECORDS = {"selections": ".json", "splits": ".parquet"}


@dataclass
class PullResult:
    pull_id: str
    fetched: dict[str, list[str]] = field(default_factory=dict)  # run id -> files fetched this time
    checked: int = 0
    verification: Verification | None = None

    @property
    def ok(self) -> bool:
        return self.verification is not None and self.verification.ok


def fetch_manifest(box: Box, root: Path, pull_id: str) -> manifests.ManifestFile:
    """The box's manifest, checked, then copied once into the local ``_trust/pulls/<id>/``."""
    manifest, data = box_manifest(box, root, pull_id)
    keep_manifest(manifest, data)
    return manifest


def box_manifest(box: Box, root: Path, pull_id: str) -> tuple[manifests.ManifestFile, bytes]:
    """The box's manifest and its bytes, checked as a whole and against any local copy; nothing written."""
    if not is_safe_id(pull_id):
        raise Refusal(f"pull id {pull_id!r} is not a safe id")
    source = box.path("_trust", "pulls", pull_id, manifests.MANIFEST)
    with Remote(box.endpoint) as remote:
        try:
            data = remote.read_file(source)
        except FileNotFoundError:
            raise Refusal(
                f"pull {pull_id}: {box.endpoint.label}:{source} does not exist; build it on the box first "
                "(runaudit manifest --root ROOT --roster FILE --pull-id ID)"
            ) from None
    target = manifests.pulls_dir(root) / pull_id / manifests.MANIFEST
    manifest = manifests.parse_manifest(target, data)
    if problems := manifests.manifest_problems(manifest):
        raise Refusal(
            f"pull {pull_id}: the manifest from the box is not usable: {problems[0]}; nothing was written"
        )
    for folder in (manifests.pulls_dir(root).parent, manifests.pulls_dir(root), target.parent):
        if folder.is_symlink():
            raise Refusal(f"pull {pull_id}: {folder} is a symlink; refusing to write through it")
    if os.path.lexists(target):
        try:
            same = read_regular(target, JSON_CAP) == data
        except OSError:
            same = False
        if not same:
            raise Refusal(
                f"pull {pull_id}: {target} already holds another manifest than the box's; a manifest is "
                "immutable, so a changed one needs a new pull id"
            )
    return manifest, data


def keep_manifest(manifest: manifests.ManifestFile, data: bytes) -> None:
    """Write the box's manifest as the local copy, once: a local copy is never rewritten."""
    if not os.path.lexists(manifest.path):
        write_bytes_atomic(manifest.path, data)


def overwritten(root: Path, manifest: manifests.ManifestFile, stale: list[str]) -> list[str]:
    """Why fetching ``stale`` would overwrite another pull's copy of a run: one line per run it would.

    The same run id pulled again with other bytes (another box that used the id, or the run minted anew)
    wrote over ``runs/<id>``, and the only copy of the run the first pull had verified, whose box had been
    torn down on the strength of that receipt, was gone. A local file holds another pull's copy while its
    bytes are what that pull's manifest lists for it: its stat key is the one that pull's receipt recorded,
    or else its SHA-256 is the listed one (a copy restored from a backup has new stat keys). On a disk that
    folds case, ``runs/Demo`` and ``runs/demo`` are one folder, so a run id that differs from a folder
    already there only in case is refused too.
    """
    runs = root / "runs"
    present = os.listdir(runs) if runs.is_dir() else []
    lines = []
    for run_id in manifest.roster:
        twin = next(
            (name for name in present if name != run_id and name.casefold() == run_id.casefold()), None
        )
        if twin is not None:
            lines.append(
                f"run {run_id}: runs/{twin} is another run whose id differs only in case, and a disk that "
                "folds case holds both in one folder; give one of them another id"
            )
            continue
        wanted = [path for path in stale if path.split("/", 1)[0] == run_id]
        for other, listed, keys in _listed_elsewhere(root, run_id, manifest.pull_id) if wanted else ():
            if kept := _holding(runs, [path for path in wanted if path in listed], listed, keys):
                lines.append(
                    f"run {run_id}: runs/{kept[0]} and {len(kept) - 1} more file(s) hold the bytes pull {other} "
                    f"brought home, and pull {manifest.pull_id} lists other bytes for them: a pull never "
                    f"overwrites another's copy (if it is the same run sealed again, move runs/{run_id} aside "
                    "first; if it is another run, seal it under an id of its own)"
                )
                break
    return lines


def _listed_elsewhere(
    root: Path, run_id: str, pull_id: str
) -> list[tuple[str, dict[str, Mapping[str, Any]], Mapping[str, Any]]]:
    """Every other usable pull manifest naming ``run_id``: its pull id, its entries of the run by path, and
    the stat keys its receipt recorded (none without a receipt)."""
    found: list[tuple[str, dict[str, Mapping[str, Any]], Mapping[str, Any]]] = []
    for path in sorted(manifests.pulls_dir(root).glob(f"*/{manifests.MANIFEST}")):
        if path.parent.name == pull_id or not is_safe_id(path.parent.name) or not is_regular(path):
            continue
        other = manifests.read_manifest(path)
        if run_id not in other.roster or manifests.manifest_problems(other):
            continue
        receipt = manifests.receipt_of(other)
        document = receipt[0] if receipt is not None else None
        keys = document.get("stat_keys") if isinstance(document, dict) else None
        listed: dict[str, Mapping[str, Any]] = {entry["path"]: entry for entry in other.entries_of(run_id)}
        found.append((other.pull_id, listed, keys if isinstance(keys, dict) else {}))
    return found


def _holding(
    runs: Path, paths: list[str], listed: Mapping[str, Mapping[str, Any]], keys: Mapping[str, Any]
) -> list[str]:
    """The ``paths`` whose local file holds the bytes ``listed`` names for it."""
    held: list[str] = []
    unkeyed: dict[Path, str] = {}
    for path in paths:
        try:
            info = os.lstat(runs / path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_size != listed[path]["bytes"]:
            continue
        if stat_key(info) == keys.get(path):
            held.append(path)
        else:
            unkeyed[runs / path] = path
    digests = hash_files(unkeyed) if unkeyed else {}
    held += [path for local, path in unkeyed.items() if digests[local].sha256 == listed[path]["sha256"]]
    return sorted(held)


def stale_files(runs: Path, manifest: manifests.ManifestFile) -> tuple[list[str], int]:
    """Manifest paths whose local copy is missing or differs in size or SHA-256; and how many were checked."""
    stale: list[str] = []
    same_size: dict[Path, dict[str, Any]] = {}
    for entry in manifest.entries:
        local = runs / entry["path"]
        if local.is_symlink() or not local.is_file() or local.stat().st_size != entry["bytes"]:
            stale.append(entry["path"])
        else:
            same_size[local] = entry
    total = sum(entry["bytes"] for entry in same_size.values())
    bar = progress_bar(total, f"sha256 of {len(same_size)} local files")
    digests = hash_files(same_size, on_bytes=bar.update if bar is not None else None)
    if bar is not None:
        bar.close()
    stale += [entry["path"] for local, entry in same_size.items() if digests[local].sha256 != entry["sha256"]]
    return sorted(stale), len(manifest.entries)


def bound_records(runs: Path, roster: list[str]) -> list[str]:
    """``_trust/`` records the pulled runs bind by id and hash, as ``<folder>/<id><suffix>``.

    Ids come from the box's run.json, so an id that is not a safe id (``../pulls/x/PULL_VERIFIED``) names
    nothing: it is dropped before any path is built, and the capsule audits report it. A record already
    here is never replaced.
    """
    wanted: set[str] = set()
    for run_id in roster:
        try:
            declared = manifests.load_json(read_regular(runs / run_id / "run.json", JSON_CAP))
        except (OSError, ValueError):
            continue  # the capsule audits report an unreadable run.json
        if not isinstance(declared, dict):
            continue
        selections = declared.get("selections")
        if not isinstance(selections, list):
            selections = []
        ids = {"selections": [item.get("selection_id") for item in selections if isinstance(item, dict)]}
        split = declared.get("split")
        if not isinstance(split, dict):
            split = {}
        ids["splits"] = [split.get("split_id")]
        wanted |= {
            f"{folder}/{record_id}{BOUND_RECORDS[folder]}"
            for folder, found in ids.items()
            for record_id in found
            if is_safe_id(record_id)
        }
    trust = runs.parent / "_trust"
    return sorted(rel for rel in wanted if not os.path.lexists(trust / rel))


def fetch_bound_records(box: Box, root: Path, records: list[str]) -> list[str]:
    """Fetch ``records`` into a staging folder and move in only regular files at exactly those names.

    Whatever else the box's rsync sends (symlinked folders, extra files, special files) stays in the
    staging folder, which is removed. Returns the records that arrived.
    """
    trust = root / "_trust"
    for folder in (trust, *(trust / name for name in BOUND_RECORDS)):
        if folder.is_symlink():
            raise Refusal(f"{folder} is a symlink; refusing to write _trust records through it")
    trust.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=trust))
    arrived = []
    try:
        rsync(
            box.endpoint,
            remote_path(box.endpoint, box.path("_trust") + "/"),
            f"{staging}/",
            files=records,
            missing_ok=True,
        )
        for rel in records:
            subfolder, name = rel.split("/")
            if (staging / subfolder).is_symlink() or not is_regular(staging / rel):
                continue
            (trust / subfolder).mkdir(exist_ok=True)
            if not os.path.lexists(trust / rel):
                os.replace(staging / rel, trust / rel)
                arrived.append(rel)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return arrived


def pull(
    box: Box,
    root: Path,
    pull_id: str,
    *,
    bwlimit_kbps: int | None = None,
    log: Callable[[str], None] = print,
) -> PullResult:
    manifest, data = box_manifest(box, root, pull_id)
    runs = root / "runs"
    for run_id in manifest.roster:
        if detour := manifests.folder_detour(runs, run_id):
            raise Refusal(f"pull {pull_id}: {detour}; refusing to write through it")
        if links := manifests.local_tree(runs, run_id).symlinks:
            raise Refusal(
                f"pull {pull_id}: {runs / links[0]} is a symlink inside the local copy; remove it, then pull again"
            )
    result = PullResult(pull_id)
    stale, result.checked = stale_files(runs, manifest)
    if clashes := overwritten(root, manifest, stale):
        raise Refusal(f"pull {pull_id}: {' | '.join(clashes)}; nothing was fetched")
    keep_manifest(manifest, data)
    for run_id in manifest.roster:
        wanted = [path.split("/", 1)[1] for path in stale if path.split("/", 1)[0] == run_id]
        for folder in manifest.empty_dirs_of(run_id):
            (runs / folder).mkdir(parents=True, exist_ok=True)
        if not wanted:
            log(f"pull {pull_id}: {run_id}: every file already matches the manifest")
            continue
        log(f"pull {pull_id}: {run_id}: fetching {len(wanted)} of {len(manifest.entries_of(run_id))} files")
        rsync(
            box.endpoint,
            remote_path(box.endpoint, box.path("export", run_id) + "/"),
            f"{runs / run_id}/",
            files=wanted,
            refetch=True,
            bwlimit_kbps=bwlimit_kbps,
            progress=sys.stderr if sys.stderr.isatty() else None,
        )
        result.fetched[run_id] = wanted
    records = bound_records(runs, manifest.roster)
    if records:
        log(f"pull {pull_id}: fetching {len(records)} _trust record(s) the runs bind: {', '.join(records)}")
        fetch_bound_records(box, root, records)
    result.verification = write_receipt(root, pull_id, log=log)
    return result


def _main(args: argparse.Namespace) -> int:
    box = box_from_args(args)
    result = pull(
        box, args.root, args.pull_id, bwlimit_kbps=args.bwlimit, log=lambda line: print(line, file=sys.stderr)
    )
    fetched = sum(len(files) for files in result.fetched.values())
    if result.ok:
        print(f"pull {args.pull_id}: {fetched} file(s) fetched, {result.checked} verified; receipt written")
        return 0
    assert result.verification is not None
    for line in result.verification.problems:
        print(line, file=sys.stderr)
    print(
        f"pull {args.pull_id}: {fetched} file(s) fetched; the custody audits did not pass, so NO receipt: "
        "the bytes here are not proven to be the producer's",
        file=sys.stderr,
    )
    return 1


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "pull", help="rsync a pull's capsules home (resumable), then verify them and write the receipt"
    )
    add_box_arguments(parser)
    parser.add_argument(
        "--root", type=existing_dir, required=True, help="local project root (capsules go to runs/)"
    )
    parser.add_argument("--pull-id", required=True)
    parser.add_argument("--bwlimit", type=int, metavar="KBPS", help="cap rsync's bandwidth (KiB/s)")
    parser.set_defaults(handler=_main)
