"""Is it safe to tear the box down for these runs? The one rule, asked by every part that answers it.

The ``manifest.receipt`` audit, the report's "Safe to tear down?" banner and ``runaudit down`` all call
:func:`receipt_status`, so they cannot disagree. A receipt (``_trust/pulls/<pull>/PULL_VERIFIED.json``)
is current for a run when, in this order:

1. the newest pull manifest naming the run (or the one asked for) is usable as a whole;
2. a receipt sits beside it, written by a local ``runaudit verify`` (``runaudit.receipt/2``), valid
   against its schema, bound to exactly that manifest's bytes and pull id, with the run in its roster;
3. the bytes are still there: every file the manifest lists for the run is present, a regular file
   reached through no symlink, of the listed size, and either has the stat key (device, inode, size,
   mtime, ctime) the receipt recorded when it was verified, or hashes fresh to the manifest's SHA-256.

Anything else is a problem line naming the run, the file and the command that would fix it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from runaudit import manifest as manifests
from runaudit.atomic import fsync_dir
from runaudit.hashing import hash_files, stat_key
from runaudit.mounts import in_memory
from runaudit.safeio import kind_of, open_regular
from runaudit.schema import schema_problems

RECEIPT_VERSION = "runaudit.receipt/2"
ACCEPTANCE_VERSION = "runaudit.acceptance/2"
# Where a verified copy of a capsule sits under the project root: runs/ on a consumer, export/ on the producer.
HOLDERS = ("runs", "export")


def verify_command(root: Path, pull_id: str) -> str:
    return f"runaudit verify --root {root} --pull-id {pull_id}"


def judge(receipt: Any, path: Path, manifest: manifests.ManifestFile, run_id: str) -> str | None:
    """Why ``receipt`` (read from ``path``) does not cover ``run_id`` of ``manifest``, or None when it does."""
    if isinstance(receipt, manifests.Unreadable):
        return f"{path} cannot be read as a receipt: {receipt.reason}"
    problems = schema_problems("receipt", receipt)
    if problems:
        return f"{path} is not a valid receipt ({problems[0]})"
    if receipt["schema_version"] != RECEIPT_VERSION:
        return f"{path} is a {receipt['schema_version']} record, not a {RECEIPT_VERSION} receipt"
    if receipt["pull_id"] != manifest.pull_id:
        return f"{path} names pull {receipt['pull_id']!r}, not the folder's {manifest.pull_id!r}"
    if receipt["manifest_sha256"] != manifest.sha256:
        return (
            f"{path} is stale: it binds manifest {receipt['manifest_sha256'][:16]}…, the current "
            f"{manifests.MANIFEST} is {manifest.sha256[:16]}…"
        )
    if run_id not in receipt["roster"]:
        return f"{path} does not cover run {run_id} (its roster is {receipt['roster']})"
    return None


def bytes_problems(
    root: Path,
    manifest: manifests.ManifestFile,
    receipt: Mapping[str, Any],
    run_id: str,
) -> list[str]:
    """Why the copy the receipt verified is no longer the bytes it verified (empty when it still is).

    A file whose stat key changed since verification is hashed again, never looked up in the stat-keyed
    hash cache: a forged entry there made the report's answer differ from ``runaudit down``'s.
    """
    holder = root / receipt["holder"]
    if detour := manifests.folder_detour(holder, run_id) or in_memory(holder / run_id):
        return [detour]
    recorded: Mapping[str, Any] = receipt["stat_keys"]
    problems: list[str] = []
    changed: dict[Path, dict[str, Any]] = {}
    entries = manifest.entries_of(run_id)
    # A folder inside the capsule swapped for a link reaches a regular file with the right bytes that
    # lives elsewhere (a mount of the box): every folder on the way must be a plain folder.
    folders = {str(PurePosixPath(entry["path"]).parent) for entry in entries} - {run_id}
    linked = {
        folder
        for folder in folders
        for part in _prefixes(folder)
        if part != run_id and (holder / part).is_symlink()
    }
    problems += [f"{holder / folder} is reached through a symlink" for folder in sorted(linked)]
    for entry in entries:
        if str(PurePosixPath(entry["path"]).parent) in linked:
            continue
        path = holder / entry["path"]
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            problems.append(f"{path} is gone")
            continue
        except OSError as exc:
            problems.append(f"{path} cannot be read: {exc.strerror or exc}")
            continue
        if not stat.S_ISREG(info.st_mode):
            problems.append(f"{path} is {kind_of(info.st_mode)}, not the regular file that was verified")
        elif info.st_size != entry["bytes"]:
            problems.append(f"{path} has {info.st_size} bytes, the manifest lists {entry['bytes']}")
        elif stat_key(info) != recorded.get(entry["path"]):
            changed[path] = entry
    if changed:  # touched, copied or restored since verification: only fresh bytes can say it is the same
        try:
            digests = hash_files(changed)
        except (OSError, RuntimeError) as exc:
            return [*problems, f"run {run_id}: a changed file could not be hashed again: {exc}"]
        problems += [
            f"{path} changed since it was verified and its bytes now differ from the producer's"
            for path, entry in changed.items()
            if digests[path].sha256 != entry["sha256"]
        ]
    return problems


def _prefixes(folder: str) -> list[str]:
    """``a/b/c`` -> ``a``, ``a/b``, ``a/b/c``."""
    parts = folder.split("/")
    return ["/".join(parts[: index + 1]) for index in range(len(parts))]


@dataclass(frozen=True)
class RunReceipt:
    """What was found for one run: its governing pull, the receipt (path and document) and any problem."""

    run_id: str
    pull_id: str | None
    path: Path | None
    document: Mapping[str, Any] | None
    problems: tuple[str, ...]
    # The governing manifest's entries for the run (path "<run-id>/...", bytes, sha256), when current: what
    # any other copy of the run (the box's, for ``runaudit down``) must equal to be covered by this receipt.
    entries: tuple[Mapping[str, Any], ...] = ()

    @property
    def current(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class ReceiptStatus:
    ok: bool
    problems: list[str]
    runs: dict[str, RunReceipt] = field(default_factory=dict)


class Reads:
    """The manifests and receipts one answer reads, each read and parsed once however many runs it covers:
    a pull of 100 runs had its manifest and receipt (with a stat key per file) parsed again for every run,
    22 s before a byte was checked."""

    def __init__(self) -> None:
        self._manifests: dict[Path, manifests.ManifestFile] = {}
        self._receipts: dict[tuple[Path, str], tuple[Any, Path] | None] = {}

    def manifest(self, path: Path) -> manifests.ManifestFile:
        if path not in self._manifests:
            self._manifests[path] = manifests.read_manifest(path)
        return self._manifests[path]

    def receipt(self, manifest: manifests.ManifestFile) -> tuple[Any, Path] | None:
        key = (manifest.path, manifest.sha256)
        if key not in self._receipts:
            self._receipts[key] = manifests.receipt_of(manifest)
        return self._receipts[key]


def run_receipt(
    root: Path,
    run_id: str,
    *,
    pull_id: str | None = None,
    check_bytes: bool = True,
    reads: Reads | None = None,
) -> RunReceipt:
    """The receipt that governs ``run_id`` and everything that keeps it from making teardown safe."""
    reads = reads or Reads()
    manifest = manifests.locate(root, run_id, pull_id, read=reads.manifest)
    if manifest is None:
        return RunReceipt(run_id, pull_id, None, None, (f"run {run_id}: no pull manifest names it",))
    if problems := manifests.manifest_problems(manifest):
        return RunReceipt(
            run_id,
            manifest.pull_id,
            None,
            None,
            (f"run {run_id}: {manifest.path} is not usable: {problems[0]}",),
        )
    found = reads.receipt(manifest)
    if found is None:
        problem = (
            f"run {run_id}: pull {manifest.pull_id} has no receipt "
            f"(verify it: {verify_command(root, manifest.pull_id)})"
        )
        return RunReceipt(run_id, manifest.pull_id, None, None, (problem,))
    receipt, path = found
    document = receipt if isinstance(receipt, dict) else None
    if judged := judge(receipt, path, manifest, run_id):
        return RunReceipt(run_id, manifest.pull_id, path, document, (f"run {run_id}: {judged}",))
    if check_bytes and (lost := bytes_problems(root, manifest, receipt, run_id)):
        fix = f"re-verify before any teardown: {verify_command(root, manifest.pull_id)}"
        lines = tuple(f"run {run_id}: {line}; {fix}" for line in lost[:5])
        if len(lost) > 5:
            lines += (f"run {run_id}: ... ({len(lost)} problems in all)",)
        return RunReceipt(run_id, manifest.pull_id, path, document, lines)
    return RunReceipt(run_id, manifest.pull_id, path, document, (), tuple(manifest.entries_of(run_id)))


def receipt_status(
    root: Path, run_ids: Iterable[str], *, pull_id: str | None = None, check_bytes: bool = True
) -> ReceiptStatus:
    """Is there a current receipt, over bytes still present, for every run of this roster?"""
    run_ids = list(dict.fromkeys(run_ids))
    if not run_ids:
        return ReceiptStatus(False, ["the roster is empty: no teardown can rest on it"])
    reads = Reads()
    found = {
        run_id: run_receipt(root, run_id, pull_id=pull_id, check_bytes=check_bytes, reads=reads)
        for run_id in run_ids
    }
    problems = [line for item in found.values() for line in item.problems]
    return ReceiptStatus(not problems, problems, found)


def flush_to_disk(holder: Path, paths: Iterable[str]) -> list[str]:
    """Write back every manifest path under ``holder`` that is a regular file, and the folders that hold them,
    before verification takes their stat keys and hashes them; return what could not be written back.

    A receipt says the bytes are on this machine: pages not yet written back are lost with a power cut after
    the box is gone. And the stat key only sees a change that the kernel stamps: a write through a shared
    writable mapping to a page that is already dirty takes no fault and changes neither mtime nor ctime, so
    a NaN written that way after verification kept the receipt current. Written back, each page is clean and
    its next write through any mapping faults and stamps the file (ext4, XFS, btrfs; tmpfs stamps no write
    through a mapping, so there a receipt is only as good as the processes that hold its files open).

    A write-back that fails (a full or failing disk, a quota met on NFS) leaves the right bytes in the page
    cache and other bytes on the disk, so the audits would hash the cache and pass: each failure is a
    problem, and no receipt rests on such a copy. The kernel reports such a failure once: the pages are
    then marked clean with the right bytes still in them, so the next ``verify`` found every ``fsync``
    clean, hashed the cache and wrote a receipt over bytes the disk did not hold. Each file's written-back
    pages are therefore dropped from the cache (``POSIX_FADV_DONTNEED``), and the audits hash what the disk
    gives back. What cannot be opened is left to the audits, which report it.
    """
    listed = list(paths)
    failures: dict[str, list[Path]] = {}  # by the kernel's reason: a failing disk fails every path alike
    for rel in listed:
        try:
            with open_regular(holder / rel) as handle:
                failure = _fsync(handle.fileno())
        except OSError:
            continue
        if failure is not None:
            failures.setdefault(failure.strerror or str(failure), []).append(holder / rel)
    for folder in _folders_of(listed):
        try:
            fsync_dir(holder / folder)
        except OSError as exc:
            if exc.errno not in _NO_FOLDER_SYNC:
                failures.setdefault(exc.strerror or str(exc), []).append(holder / folder)
    return [_unwritten(paths, reason) for reason, paths in failures.items()]


# A folder that cannot be opened (gone: the audits say so) or that its filesystem cannot sync on its own.
_NO_FOLDER_SYNC = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EINVAL})


def _fsync(fd: int) -> OSError | None:
    """``fsync(fd)``'s failure, told apart from the failures to open that the caller leaves to the audits;
    once written back, the file's pages leave the cache, so that its next reader reads the disk."""
    try:
        os.fsync(fd)
    except OSError as exc:
        return exc
    if hasattr(os, "posix_fadvise"):  # macOS has none: there the audits may read the cache
        with contextlib.suppress(OSError):  # advice a filesystem may refuse: the audits then read the cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return None


def _unwritten(paths: list[Path], reason: str) -> str:
    if len(paths) == 1:
        what = f"{paths[0]} could not be written to its disk"
    else:
        what = f"{len(paths)} files and folders, {paths[0]} first, could not be written to their disk"
    return f"{what} ({reason}): the bytes verified may exist only in memory"


def _folders_of(paths: Iterable[str]) -> list[str]:
    """Every folder on the way to ``paths`` (relative, POSIX), the holder itself (".") first, once, sorted.

    The holder is keyed too: ``export/`` swapped for a good copy while the audits hashed, and back after,
    changes no folder below it."""
    return sorted({str(parent) for rel in paths for parent in PurePosixPath(rel).parents})


def folder_snapshot(holder: Path, paths: Iterable[str]) -> dict[str, list[int] | str]:
    """The key of every folder on the way to each manifest path under ``holder``, now: device, inode, mtime
    and ctime (ns).

    A file's own stat key says nothing of the folders that lead to it: a folder renamed away and back while
    verification hashed (another with the good bytes swapped in meanwhile) leaves each file's key as it was,
    but a rename changes the ctime of the folder it moves and of the folders it leaves and enters.
    """
    keys: dict[str, list[int] | str] = {}
    for rel in _folders_of(paths):
        try:
            info = os.lstat(holder / rel)
        except OSError as exc:
            keys[rel] = f"cannot be read: {exc.strerror or exc}"
            continue
        keys[rel] = [info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns]
    return keys


def snapshot(holder: Path, paths: Iterable[str]) -> dict[str, list[int] | str]:
    """The stat key of each manifest path under ``holder`` now (or why it has none), for a receipt."""
    keys: dict[str, list[int] | str] = {}
    for rel in paths:
        try:
            info = os.lstat(holder / rel)
        except OSError as exc:
            keys[rel] = f"cannot be read: {exc.strerror or exc}"
            continue
        keys[rel] = stat_key(info) if stat.S_ISREG(info.st_mode) else f"is {kind_of(info.st_mode)}"
    return keys
