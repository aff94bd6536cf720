"""Atomic file writes: a temp sibling, fsync, rename, fsync of the folder.

A reader sees the old bytes or the new bytes, never a torn file, and a crash leaves at most a ``*.tmp``
sibling, which the capsule and manifest audits flag as residue.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, write: Callable[[BinaryIO], Any], *, exclusive: bool = False) -> Path:
    """Call ``write(handle)`` on a temp sibling of ``path``, then move it into place; ``exclusive``: only
    where nothing is at ``path`` yet, else :class:`FileExistsError` (a link, which the kernel refuses
    atomically when the name is taken: a check first lost one of two records written in one second)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temp name keeps a bounded head of the name: "." + a 255-byte name + the random part would not fit.
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:200]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            # mkstemp makes the file 0600 whatever the umask: a report served from a CI artifact folder or
            # shared with a group could be read by its writer alone. The mode a plain open() would give it.
            os.fchmod(handle.fileno(), 0o666 & ~umask())
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            _claim(temp, path)
        else:
            os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


# How a filesystem with no hard links (vfat, exFAT, s3fs, gcsfuse) refuses one.
NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def _claim(temp: str, path: Path) -> None:
    """Give ``temp``'s bytes the name ``path`` only where nothing holds it yet, else FileExistsError.

    A hard link claims the name and the whole content at once. A filesystem with no hard links refuses
    one, and every exclusive write there failed (``down`` then refused with no way out): the name is then
    claimed with ``O_EXCL``, just as atomically, and the bytes copied in, which a reader may see arrive.
    """
    try:
        os.link(temp, path)
    except OSError as exc:
        if exc.errno not in NO_HARD_LINKS:
            raise
        with open(temp, "rb") as source, open(path, "xb") as target:
            shutil.copyfileobj(source, target)
            target.flush()
            os.fsync(target.fileno())
    os.unlink(temp)


def umask() -> int:
    """The process's umask, read where the kernel shows it (Linux 4.7+) rather than set and set back, which
    another thread could see in between."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def write_bytes_atomic(path: Path, data: bytes, *, exclusive: bool = False) -> Path:
    return write_atomic(path, lambda handle: handle.write(data), exclusive=exclusive)


def write_json_atomic(path: Path, document: Any, *, exclusive: bool = False) -> Path:
    """``document`` as indented UTF-8 JSON, written atomically.

    A string holding a lone surrogate (a file name that was not UTF-8, reaching Python as surrogate
    escapes) has no UTF-8 form; the document is then written with ASCII escapes instead (``"\\udcff"``),
    which reads back as exactly the same strings, rather than not at all.
    """
    text = json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = (json.dumps(document, indent=2, sort_keys=False) + "\n").encode("ascii")
    return write_bytes_atomic(path, data, exclusive=exclusive)
