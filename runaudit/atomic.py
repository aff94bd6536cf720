"""Atomic file writes: a temp sibling, fsync, rename, fsync of the folder.

A reader sees the old bytes or the new bytes, never a torn file, and a crash leaves at most a ``*.tmp``
sibling, which the capsule and manifest audits flag as residue.
"""

from __future__ import annotations

import json
import os
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


def write_atomic(path: Path, write: Callable[[BinaryIO], Any]) -> Path:
    """Call ``write(handle)`` on a temp sibling of ``path``, then move it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    return write_atomic(path, lambda handle: handle.write(data))


def write_json_atomic(path: Path, document: Any) -> Path:
    text = json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    return write_bytes_atomic(path, text.encode("utf-8"))
