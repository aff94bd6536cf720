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
import re
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from runaudit.atomic import write_bytes_atomic
from runaudit.safeio import read_regular

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
    """The cached figure at ``path`` when it is one this code could have drawn, else None (drawn anew).

    Read as run data is: a regular file, never through a link, without blocking (a FIFO under a key's
    name hung the session), up to :data:`FIGURE_CAP`.
    """
    try:
        text = read_regular(path, FIGURE_CAP).decode("utf-8")
        os.utime(path)  # most recently used: kept longest
    except (OSError, UnicodeDecodeError):
        return None
    return text if drawn_by_matplotlib(text) else None


FIGURE_CAP = 8 << 20  # bytes of one cached figure; a curve of every epoch of a long run is under 1 MiB
# A cached figure goes into the page as markup, so whoever can write the cache folder could put a script,
# a ``<meta http-equiv=refresh>`` or a style that hides the verdicts there (a full-page "Safe to tear
# down? YES" overlay did). Only what matplotlib's SVG backend writes for runaudit's curves is taken:
# these elements and attributes, its one style rule, links inside the figure only, and no markup that an
# XML parser and the page's HTML parser read differently (comments, CDATA, declarations).
FIGURE_ELEMENTS = frozenset({"svg", "g", "path", "use", "defs", "clipPath", "rect", "text", "style"})
FIGURE_ATTRIBUTES = frozenset(
    {
        "aria-label", "clip-path", "d", "height", "id", "role", "style", "transform", "type", "version",
        "viewBox", "width", "x", "y", "href",
    }
)  # fmt: skip
MATPLOTLIB_STYLE = "*{stroke-linejoin: round; stroke-linecap: butt}"
# What may point outside the figure, in an attribute or a text: a url() but to the figure's own ids, CSS's
# at-rules, old script hooks.
_FOREIGN_URL = re.compile(r"url\(\s*(?!#)|@|expression|javascript:", re.IGNORECASE)


def drawn_by_matplotlib(text: str) -> bool:
    """Whether ``text`` is an SVG of the shape runaudit's curves have, and nothing else (see above)."""
    if not text.startswith("<svg ") or "<!" in text or "<?" in text or "]]>" in text:
        return False
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError:
        return False
    for element in root.iter():
        if _local(element.tag) not in FIGURE_ELEMENTS:
            return False
        if _local(element.tag) == "style" and (element.text or "").strip() != MATPLOTLIB_STYLE:
            return False
        for name, value in element.attrib.items():
            if _local(name) not in FIGURE_ATTRIBUTES or _FOREIGN_URL.search(value):
                return False
            if _local(name) == "href" and not value.startswith("#"):
                return False
        if _FOREIGN_URL.search(element.text or "") or _FOREIGN_URL.search(element.tail or ""):
            return False
    return True


def _local(name: str) -> str:
    """An element or attribute name without its XML namespace (``{http://www.w3.org/2000/svg}g`` -> ``g``)."""
    return name.rpartition("}")[2]


# A cache file's name: the key (a SHA-256) and ``.svg``. Only these are evicted: a cache folder pointed at
# one of the user's own (``RUNAUDIT_FIGURE_CACHE``) lost 90 of its 600 SVG files to the trimming.
CACHE_FILE = re.compile(r"[0-9a-f]{64}\.svg")


def _evict(folder: Path) -> None:
    try:
        cached = [path for path in folder.glob("*.svg") if CACHE_FILE.fullmatch(path.name)]
        kept = sorted(cached, key=lambda path: path.stat().st_mtime_ns, reverse=True)
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
