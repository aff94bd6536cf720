"""Drawn figures kept by content, so that re-auditing an unchanged run does not redraw its curves.

Drawing with matplotlib costs over a second (its import alone half of that), which would dominate a
custody-only ``pytest --run``. A figure is a pure function of what it is drawn from and of the code that
draws it, so the key is the SHA-256 of both: the arguments' ``repr``, the drawing module's bytes and the
matplotlib version. Editing either draws afresh. The cache holds re-creatable SVG only, never a verdict;
it lives under ``$RUNAUDIT_FIGURE_CACHE`` (``off`` disables it) or ``$XDG_CACHE_HOME/runaudit/figures``,
keeps the most recently used ``LIMIT`` files, and refuses symlinks. Any cache trouble means drawing anew.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from runaudit.atomic import write_bytes_atomic

LIMIT = 512  # figures kept; a few hundred KiB each at most


def cache_dir() -> Path | None:
    configured = os.environ.get("RUNAUDIT_FIGURE_CACHE")
    if configured == "off":
        return None
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runaudit" / "figures"


@functools.cache
def _code_identity(module_name: str) -> bytes:
    file = getattr(sys.modules.get(module_name), "__file__", None)
    source = Path(file).read_bytes() if file else b""
    try:
        version = metadata.version("matplotlib")
    except metadata.PackageNotFoundError:
        version = "absent"
    return hashlib.sha256(source + b"\0" + version.encode()).digest()


def key_of(draw: Callable[..., str], args: tuple[Any, ...]) -> str:
    digest = hashlib.sha256(_code_identity(draw.__module__))
    digest.update(f"{draw.__module__}.{draw.__qualname__}\0{args!r}".encode())
    return digest.hexdigest()


def is_cached(draw: Callable[..., str], args: tuple[Any, ...]) -> bool:
    folder = cache_dir()
    return folder is not None and (folder / f"{key_of(draw, args)}.svg").is_file()


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            text = handle.read().decode("utf-8")
        os.utime(path)  # most recently used: kept longest
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.startswith("<svg ") else None


def _evict(folder: Path) -> None:
    try:
        kept = sorted(folder.glob("*.svg"), key=lambda path: path.stat().st_mtime_ns, reverse=True)
        for stale in kept[LIMIT:]:
            stale.unlink(missing_ok=True)
    except OSError:
        pass  # another process trimmed it first


def drawn(draw: Callable[..., str], *args: Any) -> str:
    """``draw(*args)``, from the cache when these arguments were drawn by this same code before."""
    folder = cache_dir()
    if folder is None:
        return draw(*args)
    path = folder / f"{key_of(draw, args)}.svg"
    cached = _read(path)
    if cached is not None:
        return cached
    svg = draw(*args)
    try:
        write_bytes_atomic(path, svg.encode("utf-8"))
    except OSError:
        return svg  # a read-only or full cache folder costs a redraw next time, nothing more
    _evict(folder)
    return svg
