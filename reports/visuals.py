"""A strip of the selected renders, embedded as PNG data URIs so the page stays one file.

The first samples of each test's fixed selection (never ranked by score, so the first few are a fair
look) for every condition × role. Every path component must be a safe id and no symlink is followed;
each image is decoded (bounded in pixels), shrunk to a thumbnail and re-encoded, within a byte budget.
Files are read through :mod:`runaudit.safeio` (regular files only, within a cap): a FIFO or a device
pulled from a box in a PNG's or a selection's place is skipped, never waited on.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runaudit.ids import is_safe_id
from runaudit.manifest import load_json
from runaudit.safeio import read_regular

SAMPLES = 6
THUMBNAIL = 96  # px, the longer side
MAX_SOURCE_BYTES = 8 * 1024 * 1024
MAX_PIXELS = 16_000_000
BUDGET = 400 * 1024  # bytes of data URIs per page
MAX_SELECTION_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Thumb:
    src: str | None  # a data: URI, or None with the reason in ``note``
    note: str


@dataclass(frozen=True)
class Strip:
    test_id: str
    samples: tuple[str, ...]
    rows: tuple[tuple[str, str, tuple[Thumb, ...]], ...]  # (condition, role, one thumb per sample)
    note: str


def _selected(root: Path, selection_id: Any) -> list[str] | str:
    if not is_safe_id(selection_id):
        return "the test names no usable selection"
    path = root / "_trust" / "selections" / f"{selection_id}.json"
    try:
        data = read_regular(path, MAX_SELECTION_BYTES)
    except OSError:  # absent, a link, a FIFO or device, or larger than a selection can be
        return f"_trust/selections/{selection_id}.json is absent or not a regular file"
    try:
        ids = load_json(data).get("sample_ids")
    except (ValueError, AttributeError):
        ids = None
    if not isinstance(ids, list):
        return f"_trust/selections/{selection_id}.json lists no sample_ids"
    return [item for item in ids if is_safe_id(item)][:SAMPLES]


def _thumbnail(data: bytes) -> bytes:
    from PIL import Image  # deferred: only the page embeds images

    with Image.open(io.BytesIO(data), formats=["PNG"]) as image:
        if image.width * image.height > MAX_PIXELS:
            raise ValueError(f"{image.width}×{image.height} px is too large to embed")
        image.load()
        if max(image.size) > THUMBNAIL:
            image.thumbnail((THUMBNAIL, THUMBNAIL))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
    return buffer.getvalue()


class _Budget:
    def __init__(self, total: int, capsule: Path) -> None:
        self.left = total
        self.capsule = capsule.resolve()

    def embed(self, path: Path) -> Thumb:
        if self.left <= 0:
            return Thumb(None, "byte budget spent")
        if not path.resolve().is_relative_to(self.capsule):
            return Thumb(None, "resolves outside the capsule: not read")
        try:
            source = read_regular(path, MAX_SOURCE_BYTES)
        except FileNotFoundError:
            return Thumb(None, "missing")
        except OSError:  # a link, a FIFO or device, or too large: nothing of it is embedded
            return Thumb(None, f"not a regular file of at most {MAX_SOURCE_BYTES >> 20} MiB: not read")
        try:
            data = _thumbnail(source)
        except Exception as exc:  # Pillow signals bad data with several exception types
            return Thumb(None, f"does not decode ({type(exc).__name__})")
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        self.left -= len(uri)
        return Thumb(uri, "")


def strips(doc: Mapping[str, Any], run_path: Path, root: Path) -> list[Strip]:
    budget = _Budget(BUDGET, run_path)
    found = []
    for test in doc["tests"]:
        test_id = test["test_id"]
        samples = _selected(root, test["selection_id"])
        if isinstance(samples, str) or not is_safe_id(test_id):
            found.append(Strip(test_id, (), (), samples if isinstance(samples, str) else "unsafe test id"))
            continue
        rows = []
        for condition in filter(is_safe_id, test["conditions"]):
            for role in filter(is_safe_id, test["roles"]):
                folder = run_path / "test" / test_id / "vis" / condition / role
                rows.append(
                    (condition, role, tuple(budget.embed(folder / f"{sample}.png") for sample in samples))
                )
        note = f"the first {len(samples)} samples of selection {test['selection_id']}"
        found.append(Strip(test_id, tuple(samples), tuple(rows), note))
    return found
