"""Close a run (docs/capsule.md §1): active → export/.partial → audits → one atomic rename, or quarantine.

No byte is written twice on one filesystem: the candidate hard-links the sealed files of ``active/<id>``
(a copy happens only when ``export/`` is on another filesystem, and only after checking it fits). Nothing
is overwritten: a sealed ``export/<id>`` is never replaced; a candidate that fails its custody audits
moves whole to ``quarantine/<id>--<attempt-id>/`` with ``QUARANTINE_REASON.txt`` and the audit report
beside it, and ``active/<id>`` stays as it was, so the run can be fixed and closed again. Once sealed,
the sealed names leave ``active/<id>``: the workspace can never rewrite a sealed byte through a shared inode.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, Any

from runaudit.atomic import fsync_dir, write_bytes_atomic, write_json_atomic
from runaudit.capsule import CHECKPOINT_FILES, CHECKPOINT_ROLES, TRACKERS, checkpoint_file
from runaudit.clock import attempt_id, utc_now
from runaudit.hashing import sha256_file, stat_key
from runaudit.ids import is_safe_id, run_id_problem
from runaudit.manifest import CAPSULE_FILES_CAP, load_json
from runaudit.runners.suite import failures, run_suites
from runaudit.safeio import JSON_CAP, open_regular, read_regular
from runaudit.usage import Refusal, existing_dir
from runaudit.verdict import printable
from runaudit.workspace import LOCK_FILE, try_lock

CLOSURE_GATES = ("test_capsule.py", "test_checkpoint.py")
# Every checkpoint format a role may take is sealed (best.pth or best.safetensors, docs/capsule.md §2); a
# role found in two formats is sealed as found and fails the closure audits (capsule.closed_world).
SEALED = ("config.yaml", "train.csv", *CHECKPOINT_FILES)
# Every top-level name of active/<id> that enters the capsule (run.json is written anew from the draft).
SEALED_ENTRIES = (*SEALED, "test", TRACKERS)
REASON_FILE = "QUARANTINE_REASON.txt"
# Marks the name a sealed file is moved to in active/<id> for the moment the release checks it.
RELEASE_ASIDE = "runaudit-release"
REPORT_FILE = "AUDIT_REPORT.json"
COPY_MARGIN_BYTES = 64 << 20
COMPARE_BLOCK = 1 << 20


class CloseError(Refusal):
    """Closing was refused before anything moved; the message is the line the user sees."""


@dataclass(frozen=True)
class CloseResult:
    run_id: str
    sealed: bool
    path: Path  # export/<id> when sealed, quarantine/<id>--<attempt> when not
    reason: str
    report: dict[str, Any] | None


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One closer at a time per export folder (the check-then-rename must not race)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".close.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def missing_gate_modules(active: Path) -> list[str]:
    """The modules the closure audits import that this interpreter cannot find: torch only when a ``.pth``
    is to be sealed (a safetensors capsule is audited without it)."""
    from importlib.util import find_spec

    wanted = ["pyarrow", "jsonschema", "numpy", "PIL", "yaml"]
    if any((active / name).suffix == ".pth" and (active / name).is_file() for name in SEALED):
        wanted.append("torch")
    return [name for name in wanted if find_spec(name) is None]


def seal_bindings(draft: dict[str, Any], candidate: Path, root: Path) -> dict[str, Any]:
    """The producer's declaration plus the identity hashes of the bytes being sealed.

    A binding the producer already declared is kept as declared, so that a stale one is caught by the
    audits instead of being silently recomputed.
    """
    sealed: dict[str, Any] = json.loads(json.dumps(draft))
    sealed["state"] = "closed"
    sealed["closed_utc"] = utc_now()
    if (candidate / "config.yaml").is_file() and isinstance(sealed.get("config"), dict):
        sealed["config"].setdefault("sha256", sha256_file(candidate / "config.yaml"))
    for role in CHECKPOINT_ROLES:
        checkpoint = sealed.get("checkpoints", {}).get(role)
        path = candidate / checkpoint_file(role, candidate).name
        if isinstance(checkpoint, dict) and path.is_file():
            checkpoint.setdefault("sha256", sha256_file(path))
    for selection in sealed.get("selections", []):
        path = root / "_trust" / "selections" / f"{selection.get('selection_id')}.json"
        if isinstance(selection, dict) and is_safe_id(selection.get("selection_id")) and path.is_file():
            selection.setdefault("sha256", sha256_file(path))
    return sealed


def working_folder(parent: Path, name: str, *, make: bool = True) -> Path:
    """``parent/name``, a real folder, made where missing: runaudit's own ``export/.partial/`` and
    ``quarantine/``.

    A link (or a file) in their place would build the candidate, or move a refused one, wherever it
    points: it is refused, never followed. (``export/`` itself may be a link the user made to another
    disk; the candidate is then copied there.)
    """
    path = parent / name
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
    elif not os.path.lexists(path):
        return path  # checked before it is needed: made only when a candidate moves there
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        found = "a symlink" if stat.S_ISLNK(mode) else "not a folder"
        raise CloseError(
            f"close: {path} is {found}; runaudit builds and quarantines candidates only in folders of its "
            "own. Nothing was sealed or quarantined"
        )
    return path


def quarantine(candidate: Path, root: Path, run_id: str, reason: str, report: dict[str, Any] | None) -> Path:
    target = working_folder(root, "quarantine") / f"{run_id}--{attempt_id()}"
    try:
        os.rename(candidate, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        # export/ links to another disk, so its .partial/ is there and quarantine/ is not: a rename
        # between them raised a traceback and left the refused attempt in .partial/. It is copied over.
        try:
            shutil.copytree(candidate, target, symlinks=True)
        except OSError as error:  # shutil.Error too
            shutil.rmtree(target, ignore_errors=True)
            raise CloseError(
                f"close {run_id}: the refused attempt could not be copied to {target} ({_one_line(error)}); "
                "nothing was sealed"
            ) from None
        shutil.rmtree(candidate)
    fsync_dir(target.parent)
    write_bytes_atomic(target / REASON_FILE, (reason.rstrip() + "\n").encode("utf-8"))
    if report is not None:
        write_json_atomic(target / REPORT_FILE, report)
    return target


def _sealed_entries(active: Path) -> list[str]:
    """The top-level names of ``active/<id>`` that enter the capsule, as they are on disk: a symlink or a
    special file in a sealed name is carried as itself (and fails the closure audits), never followed."""
    return [name for name in SEALED_ENTRIES if os.path.lexists(active / name)]


def _too_many_files(active: Path, names: list[str]) -> int | None:
    """How many regular files the sealed entries hold once past :data:`CAPSULE_FILES_CAP`, as the pull
    manifest would list them (links and special files are not counted: the closure audits refuse them), or
    None within the cap. No folder is listed after the one that passes the cap, so a run of millions of
    files costs a folder's listing past it, not all of them. A folder that cannot be listed is passed over:
    building the candidate refuses it."""
    count, folders = 1, []  # run.json, written anew
    for name in names:
        path = active / name
        if path.is_dir() and not path.is_symlink():
            folders.append(str(path))
        elif path.is_file() and not path.is_symlink():
            count += 1
    while folders and count <= CAPSULE_FILES_CAP:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        count += 1
        except OSError:
            continue
    return count if count > CAPSULE_FILES_CAP else None


def _can_link(active: Path, candidate: Path) -> bool:
    """Whether the sealed files can be hard-linked into the candidate: the same filesystem, and one that
    allows it (some network and FUSE filesystems refuse hard links)."""
    if os.stat(active).st_dev != os.stat(candidate).st_dev:
        return False
    probe = candidate / ".link-probe"
    try:
        os.link(active / "run.json", probe, follow_symlinks=False)
    except OSError:
        return False
    probe.unlink()
    return True


def _bytes_below(folder: Path, names: list[str]) -> int:
    total = 0
    for name in names:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            total += sum(item.lstat().st_size for item in path.rglob("*"))
        else:
            total += path.lstat().st_size
    return total


def require_room(needed: int, free: int, where: Path) -> None:
    """A copy across filesystems starts only when it fits with room to spare (runaudit's own report and
    the sealed run.json come after it): a copy that fills the disk would stop the run's own writes too."""
    margin = max(COPY_MARGIN_BYTES, needed // 100)
    if needed + margin > free:
        raise CloseError(
            f"{where} is on another filesystem than active/, so closing must copy {needed / 2**20:.1f} MiB there, "
            f"and it has {free / 2**20:.1f} MiB free (needed with margin: {(needed + margin) / 2**20:.1f} MiB); "
            "nothing was copied. Free space there, or keep export/ beside active/ (a rename needs no space)"
        )


def _place(active: Path, candidate: Path, names: list[str], *, link: bool) -> None:
    """Hard-link (same filesystem: no second copy of any byte) or copy the sealed entries into the candidate."""
    transfer: Callable[[str, str], object] = os.link if link else shutil.copy2
    for name in names:
        source, target = active / name, candidate / name
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True, copy_function=transfer)
        elif link:
            os.link(source, target, follow_symlinks=False)
        else:
            shutil.copy2(source, target, follow_symlinks=False)


def _stat_keys(folder: Path) -> dict[str, list[int]]:
    """The stat key of every entry below ``folder`` (links and folders too), walked without following links.

    The candidate's files are hard links to ``active/<id>``: a writer that ignores the workspace lock and
    changes one in place while the audits read it changes the sealed bytes too, and its key with them.
    """
    keys: dict[str, list[int]] = {}
    pending = [folder]
    while pending:
        with os.scandir(pending.pop()) as listing:
            for entry in listing:
                info = entry.stat(follow_symlinks=False)
                keys[os.path.relpath(entry.path, folder)] = stat_key(info)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))
    return keys


def _changed_while_audited(candidate: Path, audited: dict[str, list[int]]) -> list[str]:
    """Entries of the candidate that are not what the audits read: what is sealed is what was audited."""
    try:
        now = _stat_keys(candidate)
    except OSError as exc:
        return [f"the candidate could not be listed again after its audits ({_one_line(exc)})"]
    changed = sorted(rel for rel in audited.keys() | now.keys() if audited.get(rel) != now.get(rel))
    if not changed:
        return []
    return [
        f"{len(changed)} file(s) changed while the candidate was audited ({printable(', '.join(changed[:3]))}): a writer "
        f"ignored {LOCK_FILE}; close again once it has stopped"
    ]


def _release_sealed_names(active: Path, final: Path, log: Callable[[str], None]) -> None:
    """Unlink from ``active/<id>`` every sealed name that still shares its inode with the capsule, so that the
    workspace can never rewrite a sealed byte (a ``torch.save`` over ``active/<id>/best.pth`` truncates the
    file it names). The bytes stay in ``export/<id>``; ``latest.pth`` and everything unsealed stay put. The
    run is sealed already: a name that cannot be released is said, never raised.

    Both trees are walked through descriptors of the folders themselves, opened once: a path swapped for a
    link to ``active/<id>`` after close checked it (export/ or export/<id>) would make every file "share its
    inode" with itself, and each was deleted. Two descriptors of one folder release nothing.
    """
    kept: list[str] = []
    try:
        with _folder(active) as mine, _folder(final) as theirs:
            if _same_file(os.fstat(mine), os.fstat(theirs)):
                log(f"close {final.name}: {final} is {active} (a link on the way); released nothing")
                return
            released = _release_below(mine, theirs, SEALED_ENTRIES, active, kept)
    except OSError as exc:
        log(f"close {final.name}: released nothing from {active} ({_one_line(exc)}); they still share bytes")
        return
    if released:
        log(f"close {final.name}: {released} sealed file(s) left {active}; they live on only in {final}")
    if kept:
        log(f"close {final.name}: could not release {len(kept)} name(s) from {active}, e.g. {kept[0]}")


@contextmanager
def _folder(path: Path | str, *, within: int | None = None) -> Iterator[int]:
    """A descriptor of the folder ``path`` names (relative to ``within``), never of a link's target."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=within)
    try:
        yield fd
    finally:
        os.close(fd)


def _release_below(mine: int, theirs: int, names: Iterable[str], where: Path, kept: list[str]) -> int:
    """Release ``names`` of folder ``mine`` that are the same file as ``theirs``'s, folders depth first;
    how many files were released. ``where`` names ``mine`` in messages."""
    if _same_file(os.fstat(mine), os.fstat(theirs)):  # swapped in between a folder's stat and its open
        kept.append(f"{where} (the capsule's own folder)")
        return 0
    released, sealed_files = 0, set()
    for name in names:
        try:
            sealed = os.stat(name, dir_fd=theirs, follow_symlinks=False)
            if not stat.S_ISDIR(sealed.st_mode):
                sealed_files.add((sealed.st_dev, sealed.st_ino))
            twin = os.stat(name, dir_fd=mine, follow_symlinks=False)
            if _same_file(sealed, twin):  # one folder (a bind mount) or one file: released only as a file
                if not stat.S_ISDIR(sealed.st_mode) and _unlink_if_still(name, mine, sealed, where, kept):
                    released += 1
            elif stat.S_ISDIR(sealed.st_mode) and stat.S_ISDIR(twin.st_mode):
                with _folder(name, within=mine) as below_mine, _folder(name, within=theirs) as below_theirs:
                    released += _release_below(
                        below_mine, below_theirs, sorted(os.listdir(below_theirs)), where / name, kept
                    )
                with contextlib.suppress(OSError):  # emptied, or holding what the workspace still has
                    os.rmdir(name, dir_fd=mine)
        except FileNotFoundError:
            continue
        except OSError as exc:
            kept.append(f"{where / name} ({exc.strerror}; it still shares the sealed bytes)")
    return released + _sweep_asides(mine, sealed_files, where, kept)


def _sweep_asides(folder: int, sealed_files: set[tuple[int, int]], where: Path, kept: list[str]) -> int:
    """Unlink the aside names of ``folder`` that are still one of ``sealed_files``: what a release killed
    between its move aside and its unlink left (see :func:`_unlink_if_still`); how many. Anything else under
    such a name is a writer's, and stays."""
    swept = 0
    for aside in os.listdir(folder):
        if not aside.startswith(f".{RELEASE_ASIDE}-"):
            continue
        try:
            found = os.stat(aside, dir_fd=folder, follow_symlinks=False)
            if (found.st_dev, found.st_ino) in sealed_files:
                os.unlink(aside, dir_fd=folder)
                swept += 1
        except FileNotFoundError:
            continue
        except OSError as exc:
            kept.append(f"{where / aside} ({exc.strerror}; it still shares the sealed bytes)")
    return swept


def _unlink_if_still(name: str, folder: int, sealed: os.stat_result, where: Path, kept: list[str]) -> bool:
    """Unlink ``name`` of ``folder`` only if it is still the sealed file; whether it was.

    Linux unlinks by name, never by descriptor: a writer that ignores the lock and renames new bytes over the
    name between the check and an unlink would lose them. So the name is first moved aside (one atomic
    rename, to a name no writer knows), and what was moved is checked: the sealed file goes, anything else is
    put back under its name, or kept under the aside name where the writer has made the name again. A release
    killed between the move and the unlink leaves the sealed file under the aside name: the next close's
    release sweeps it (:func:`_sweep_asides`).
    """
    aside = f".{RELEASE_ASIDE}-{secrets.token_hex(8)}"  # short: a name near the length limit still moves
    os.rename(name, aside, src_dir_fd=folder, dst_dir_fd=folder)
    moved = os.stat(aside, dir_fd=folder, follow_symlinks=False)
    if _same_file(moved, sealed):
        os.unlink(aside, dir_fd=folder)
        return True
    # A file goes back as a link, not a rename, so that what the writer has put at the name since is never
    # replaced; a folder cannot be linked, and moved back it replaces nothing but an empty folder.
    a_folder = stat.S_ISDIR(moved.st_mode)
    try:
        if a_folder:
            os.rename(aside, name, src_dir_fd=folder, dst_dir_fd=folder)
        else:
            os.link(aside, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
    except OSError as exc:
        kept.append(f"{where / name} (changed during the release; kept as {where / aside}: {exc.strerror})")
        return False
    if not a_folder:
        os.unlink(aside, dir_fd=folder)
    kept.append(f"{where / name} (a writer replaced it during the release; its new bytes are kept)")
    return False


def _same_file(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def _unshare(final: Path, log: Callable[[str], None]) -> None:
    """Give every sealed file that still has another name (a quarantined attempt's link, a name the release
    could not remove) bytes of its own: a sealed byte is reachable only through ``export/<id>``.

    Each copy is made in ``export/.partial/`` and renamed over its file, so a close interrupted here leaves
    no stray name inside the sealed capsule (a ``.train.csv.unshared`` there failed ``capsule.closed_world``
    for good), and the close run again finishes the job.
    """
    shared = [path for path in final.rglob("*") if _shares_its_bytes(path)]
    spare = working_folder(final.parent, ".partial", make=bool(shared))
    if spare.is_dir():
        _discard_unshared(spare)
    copied = 0
    for path in shared:
        fd, temp = tempfile.mkstemp(dir=spare, prefix=UNSHARED_PREFIX)
        os.close(fd)
        try:
            shutil.copy2(path, temp, follow_symlinks=False)
            os.replace(temp, path)
        except OSError as exc:
            Path(temp).unlink(missing_ok=True)
            log(f"close {final.name}: {path} still shares its bytes with another name ({_one_line(exc)})")
            continue
        copied += 1
    if copied:
        log(
            f"close {final.name}: {copied} sealed file(s) had another name (a quarantined attempt's); copied apart"
        )


def _one_folder(active: Path, final: Path) -> bool:
    """Whether ``export/<id>`` and ``active/<id>`` are one folder, or one holds the other (links on the way)."""
    with contextlib.suppress(OSError):
        if os.path.samefile(active, final):
            return True
    mine, theirs = active.resolve(), final.resolve()
    return mine == theirs or mine in theirs.parents or theirs in mine.parents


def _sealed_by_an_earlier_close(root: Path, active: Path, final: Path, run_id: str) -> bool:
    """Whether ``export/<id>`` is what closing ``active/<id>`` as it stands seals (its writer lock held by the
    caller): the sealed run.json is its draft as a close seals it, and active/ holds no sealed name the
    capsule does not hold byte for byte. A run that reuses the id, or went on after its seal, is none of
    these. The capsule is then audited again: one changed since its seal is refused, never said sealed."""
    draft = _draft(active, run_id)
    try:
        sealed = load_json(read_regular(final / "run.json", JSON_CAP))
    except (OSError, ValueError):
        return False
    if not _seal_of(draft, sealed) or _left_to_seal(active, final):
        return False
    _require_gate_modules(final, run_id)  # active/ no longer holds the sealed checkpoints
    report, output = run_suites([final], root, modules=CLOSURE_GATES, args=("-m", "custody"))[final]
    said = output.strip().splitlines()
    problems = (
        failures(report)
        if report is not None
        else [f"they wrote no report ({said[-1] if said else 'no output'})"]
    )
    if problems:
        raise CloseError(
            f"close {run_id}: {final} was sealed by an earlier close, but no longer passes its closure "
            f"audits: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        )
    return True


def _seal_of(draft: dict[str, Any], sealed: Any) -> bool:
    """Whether ``sealed`` is ``draft`` as :func:`seal_bindings` seals it: its state, time and hashes added."""
    if not isinstance(sealed, dict):
        return False
    expected: dict[str, Any] = json.loads(json.dumps(draft))
    expected["state"], expected["closed_utc"] = "closed", sealed.get("closed_utc")
    pairs = [(expected.get("config"), sealed.get("config"))]
    pairs += [
        (expected.get("checkpoints", {}).get(role), sealed.get("checkpoints", {}).get(role))
        for role in CHECKPOINT_ROLES
        if isinstance(expected.get("checkpoints"), dict) and isinstance(sealed.get("checkpoints"), dict)
    ]
    if isinstance(expected.get("selections"), list) and isinstance(sealed.get("selections"), list):
        pairs += list(zip(expected["selections"], sealed["selections"], strict=False))
    for mine, theirs in pairs:
        if isinstance(mine, dict) and isinstance(theirs, dict) and "sha256" in theirs:
            mine.setdefault("sha256", theirs["sha256"])
    return expected == sealed


def _left_to_seal(active: Path, final: Path) -> bool:
    """Whether ``active/<id>`` holds a sealed name the capsule does not hold byte for byte. After a close that
    renamed its candidate into place nothing is left (same filesystem: released; another: equal copies);
    anything else (a regular file changed or added, a link, a special file, a listing past the capsule's
    file cap) is left, and refused as a capsule sealed already."""
    seen = 0
    pending = [Path(name) for name in _sealed_entries(active)]
    while pending:
        rel = pending.pop()
        seen += 1
        if seen > CAPSULE_FILES_CAP:
            return True
        try:
            mine, theirs = (active / rel).lstat(), (final / rel).lstat()
            if stat.S_ISDIR(mine.st_mode) and stat.S_ISDIR(theirs.st_mode):
                pending.extend(
                    rel / child.name for child in islice((active / rel).iterdir(), CAPSULE_FILES_CAP)
                )
                continue
        except OSError:  # gone from the capsule, or a folder that cannot be listed
            return True
        files = stat.S_ISREG(mine.st_mode) and stat.S_ISREG(theirs.st_mode)
        if not (files and mine.st_size == theirs.st_size and _same_bytes(active / rel, final / rel)):
            return True
    return False


def _same_bytes(left: Path, right: Path) -> bool:
    """Whether two regular files hold the same bytes (anything else in their place: not the same)."""
    try:
        with open_regular(left) as one, open_regular(right) as other:
            while True:
                block = one.read(COMPARE_BLOCK)
                if block != other.read(COMPARE_BLOCK):
                    return False
                if not block:
                    return True
    except OSError:
        return False


def _shares_its_bytes(path: Path) -> bool:
    info = path.lstat()
    return stat.S_ISREG(info.st_mode) and info.st_nlink > 1


# What :func:`_unshare` names its copies while they are made, in ``export/.partial/``: never a run id.
UNSHARED_PREFIX = ".unshared-"


def _discard_unshared(spare: Path) -> None:
    """Remove the copies an interrupted :func:`_unshare` left in ``export/.partial/``."""
    for leftover in spare.glob(f"{UNSHARED_PREFIX}*"):
        if leftover.is_file() and not leftover.is_symlink():
            leftover.unlink(missing_ok=True)


def _one_line(exc: OSError) -> str:
    """An OSError as one line; ``shutil.Error`` carries a list of every file that failed, shown as its first."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        source, _, why = exc.args[0][0]
        more = len(exc.args[0]) - 1
        return f"{source}: {why}" + (f" (and {more} more)" if more else "")
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _discard(candidate: Path) -> None:
    """Remove a candidate that was never sealed: links into active/ or copies of it, nothing else."""
    shutil.rmtree(candidate, ignore_errors=True)
    if candidate.exists():
        raise CloseError(f"{candidate} could not be removed; remove it before the next close")


def close_run(root: Path, run_id: str, *, log: Callable[[str], None] = lambda line: None) -> CloseResult:
    """Seal ``root/active/<run_id>`` as ``root/export/<run_id>``, or quarantine the attempt."""
    if problem := run_id_problem(run_id):
        raise CloseError(f"close: {problem}")
    root = root.resolve()
    active = root / "active" / run_id
    final = root / "export" / run_id
    if not active.is_dir() or active.is_symlink():
        raise CloseError(f"close {run_id}: {active} does not exist; there is no active run to close")
    if os.path.lexists(final):
        mode = os.lstat(final).st_mode
        if not stat.S_ISDIR(mode):  # a link is never followed: one to active/ released every file of the run
            found = "a symlink" if stat.S_ISLNK(mode) else "not a folder"
            raise CloseError(
                f"close {run_id}: {final} is {found} where a sealed capsule would be; nothing was sealed, "
                f"released or removed: move it away and close again"
            )
        if _one_folder(active, final):  # export/ or active/ a link to the other: every file "shared" itself
            raise CloseError(
                f"close {run_id}: {final} and {active} are one folder (export/ and active/ lead to the same "
                "place); nothing was sealed, released or removed: give export/ a folder of its own"
            )
        workspace = _locked_run(active, run_id)  # before anything is released: never under a live writer
        try:
            # A close interrupted between its rename and the release of active/'s names, or while it copied
            # apart the files a quarantined attempt still shares, left them sharing the sealed inodes: finish
            # both now, then refuse as ever.
            _release_sealed_names(active, final, log)
            _unshare(final, log)
            if _sealed_by_an_earlier_close(root, active, final, run_id):  # killed after its rename
                return CloseResult(
                    run_id, True, final, f"by an earlier close; {active} holds nothing more to seal", None
                )
        finally:
            workspace.close()
        raise CloseError(
            f"close {run_id}: {final} is already sealed; a sealed capsule is never overwritten, "
            "a re-run mints a new run id"
        )
    _require_gate_modules(active, run_id)
    workspace = _locked_run(active, run_id)
    try:
        draft = _draft(active, run_id)  # read under the lock: no writer can finish in between
        working_folder(root, "quarantine", make=False)  # refused now, before any audit, not after them
        with _locked(root / "export"):
            return _seal(root, run_id, draft, log)
    finally:
        workspace.close()


def _require_gate_modules(folder: Path, run_id: str) -> None:
    """Refuse, in one line, an interpreter that cannot run the closure audits of what ``folder`` holds."""
    missing = missing_gate_modules(folder)
    if missing:
        raise CloseError(
            f"close {run_id}: this interpreter ({sys.executable}) cannot run the closure audits: no module "
            f"named {', '.join(missing)}. That is the environment, not the run: nothing was sealed or "
            "quarantined; install runaudit's dependencies there (on a box: --python names the interpreter)"
        )


def _locked_run(active: Path, run_id: str) -> IO[bytes]:
    """The run's writer lock, held by this close (``.close()`` lets it go); refused while a writer holds it."""
    try:
        workspace = try_lock(active)
    except OSError as exc:
        raise CloseError(f"close {run_id}: cannot lock {active / LOCK_FILE} ({_one_line(exc)})") from None
    if workspace is None:
        raise CloseError(
            f"close {run_id}: a writer still holds {active} (the training process, or another close of it, "
            "is running); close it once that has finished"
        )
    return workspace


def _draft(active: Path, run_id: str) -> dict[str, Any]:
    try:
        draft = load_json(read_regular(active / "run.json", JSON_CAP))
    except FileNotFoundError:
        raise CloseError(
            f"close {run_id}: {active / 'run.json'} is missing; the producer must declare the run"
        ) from None
    except OSError as exc:  # a FIFO, device or symlink in its place, or past the cap: never read
        raise CloseError(f"close {run_id}: {exc}") from None
    except ValueError as exc:
        raise CloseError(f"close {run_id}: {active / 'run.json'} is not valid JSON ({exc})") from None
    if not isinstance(draft, dict):
        raise CloseError(f"close {run_id}: {active / 'run.json'} must hold a JSON object")
    return draft


def _seal(root: Path, run_id: str, draft: dict[str, Any], log: Callable[[str], None]) -> CloseResult:
    active, exports = root / "active" / run_id, root / "export"
    final, candidate = exports / run_id, working_folder(exports, ".partial") / run_id
    if os.path.lexists(candidate):
        _discard(candidate)  # never sealed, never read: it held links into active/ or copies of it
        log(f"close {run_id}: removed a stale candidate left by an interrupted close")
    names = _sealed_entries(active)
    if (count := _too_many_files(active, names)) is not None:
        raise CloseError(
            f"close {run_id}: {active} holds more than the {CAPSULE_FILES_CAP:,} files a capsule may "
            f"(docs/capsule.md §9: each is audited on its own; {count:,} counted before stopping); "
            f"nothing was sealed or quarantined and {active} is untouched: keep fewer tracker logs or "
            "renders there and close again"
        )
    try:
        candidate.mkdir()
        link = _can_link(active, candidate)
        if not link:
            require_room(_bytes_below(active, names), shutil.disk_usage(candidate).free, exports)
            log(f"close {run_id}: export/ is on another filesystem; copying the sealed files")
        _place(active, candidate, names, link=link)
        write_json_atomic(candidate / "run.json", seal_bindings(draft, candidate, root))
        fsync_dir(candidate)
        audited = _stat_keys(candidate)
    except (OSError, RecursionError) as exc:
        _discard(candidate)
        why = _one_line(exc) if isinstance(exc, OSError) else "a folder nests deeper than can be copied"
        raise CloseError(
            f"close {run_id}: building the candidate failed: {why}; nothing was sealed or "
            f"quarantined and {active} is untouched"
        ) from None

    log(f"close {run_id}: auditing the candidate at {candidate}")
    # Forked from this process where it can be (runners/suite.py): a close inside a session or a test
    # that already imported pytest and torch then costs its audits alone, not another interpreter.
    report, output = run_suites([candidate], root, modules=CLOSURE_GATES, args=("-m", "custody"))[candidate]
    if report is None:  # no verdict at all: the harness or the environment broke, not the capsule
        _discard(candidate)
        said = output.strip().splitlines()
        raise CloseError(
            f"close {run_id}: the closure audits wrote no report ({said[-1] if said else 'no output'}); "
            "nothing was sealed or quarantined"
        )
    problems = failures(report)
    if not problems:
        problems = _changed_while_audited(candidate, audited)
    if not problems and final.exists():
        problems = [f"{final} appeared while the candidate was audited; it is never overwritten"]
    if problems:
        reason = f"close {run_id} refused at {utc_now()}: {len(problems)} closure audit(s) did not pass\n"
        reason += "".join(f"- {line}\n" for line in problems)
        try:
            target = quarantine(candidate, root, run_id, reason, report)
        except CloseError:
            _discard(candidate)
            raise
        return CloseResult(run_id, False, target, reason, report)
    os.rename(candidate, final)
    fsync_dir(exports)
    _release_sealed_names(active, final, log)
    _unshare(final, log)
    passed = sum(1 for item in report["verdicts"] if item["verdict"] == "passed")
    return CloseResult(run_id, True, final, f"{passed} closure audits passed", report)


def _main(args: argparse.Namespace) -> int:
    result = close_run(args.root or Path.cwd(), args.run_id, log=lambda line: print(line, file=sys.stderr))
    if result.sealed:
        print(f"close {result.run_id}: sealed {result.path} ({result.reason})")
        return 0
    print(result.reason.rstrip(), file=sys.stderr)
    print(f"close {result.run_id}: quarantined at {result.path}", file=sys.stderr)
    return 1


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser("close", help="seal active/<id> as export/<id> once the closure audits pass")
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--root", type=existing_dir, help="project root (default: .; without --host)")
    parser.set_defaults(handler=_main)
