"""Reading files that a capsule or a box supplied: regular files only, never through a link, never unbounded.

A FIFO where ``run.json`` should be blocks ``open()`` forever, a character device streams without end,
and a symlink names bytes outside the project. Every reader of run or box data therefore opens with
``O_NOFOLLOW | O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer), checks with
``fstat`` on the open descriptor that it is a regular file (no window between a check and the open),
and reads at most a cap. Each refusal is an :class:`UnsafeFile`, an ``OSError`` whose message names
the file and what was found, so callers that already turn ``OSError`` into a verdict need nothing new.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from io import FileIO
from pathlib import Path
from typing import TypeVar

from runaudit.usage import Refusal

T = TypeVar("T")

# Contract documents (run.json, metrics.json, manifests, receipts, selections) are kilobytes; a manifest
# of a large sweep is a few MiB. Anything past these caps is refused rather than parsed.
JSON_CAP = 64 << 20
TEXT_CAP = 256 << 20

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC


class UnsafeFile(OSError):
    """The path is not a regular file (link, FIFO, device, socket, folder) or is larger than allowed."""


def kind_of(mode: int) -> str:
    """A person's word for what a path holds, from its ``st_mode``."""
    for test, word in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return word
    return "a special file"


@contextmanager
def open_regular(path: Path | str) -> Iterator[FileIO]:
    """Open ``path`` for binary reading only if it is a regular file reached without a final symlink."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFile(f"{path} is a symlink; expected a regular file") from None
        raise exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(f"{path} is {kind_of(info.st_mode)}; expected a regular file")
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_regular(path: Path | str, cap: int = JSON_CAP) -> bytes:
    """The bytes of a regular file, refused past ``cap`` bytes (checked on the open file, then while reading)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > cap:
            raise UnsafeFile(f"{path} holds {size} bytes; more than the {cap}-byte limit for this file")
        data = _read_at_most(handle, cap + 1, size)
    if len(data) > cap:  # it grew while being read
        raise UnsafeFile(f"{path} grew past the {cap}-byte limit while it was read")
    return data


def _read_at_most(handle: FileIO, limit: int, expected: int) -> bytes:
    """Up to ``limit`` bytes of ``handle``, in pieces the size of what ``fstat`` said plus a little: one
    ``read(limit)`` reserves the whole limit first (1 GiB for a 160 KB split manifest, a MemoryError under
    a modest address-space ceiling)."""
    pieces, taken = [], 0
    while taken < limit:
        piece = handle.read(min(limit - taken, max(expected - taken, 0) + (1 << 16)))
        if not piece:
            break
        pieces.append(piece)
        taken += len(piece)
    return b"".join(pieces)


def read_text(path: Path | str, cap: int = TEXT_CAP) -> str:
    """:func:`read_regular` decoded as UTF-8 (a ``UnicodeDecodeError`` is the caller's to report)."""
    return read_regular(path, cap).decode("utf-8")


def parse_file(path: Path, cap: int, parse: Callable[[str, str], T], what: str) -> T:
    """``parse(text, source)`` of the regular UTF-8 file at ``path`` (a list a user wrote: a roster, a
    queue); one that cannot be read is one :class:`Refusal` line naming ``what`` and why."""
    try:
        text = read_text(path, cap)
    except (OSError, UnicodeDecodeError) as exc:
        raise Refusal(f"cannot read the {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse(text, str(path))


def is_regular(path: Path | str) -> bool:
    """True when ``path`` itself (not a link's target) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def cache_file(root: Path, name: str) -> Path | None:
    """``<root>/cache/runaudit/<name>``, or None when a folder on the way is a link or not a folder.

    The project's caches are regenerable and only save time, so one that cannot be used is skipped, never
    a failed audit: a ``cache/`` linked elsewhere would make a session write outside the project, and a
    file in a folder's place would fail every save.
    """
    folder = root
    for part in ("cache", "runaudit"):
        folder = folder / part
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if not stat.S_ISDIR(mode):
            return None
    return folder / name
