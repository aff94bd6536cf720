"""Which pull receipt (``_trust/pulls/<pull-id>/PULL_VERIFIED.json``) a teardown decision rests on.

A receipt binds a run when the manifest beside it lists the run in its roster. It is *current* only
while the manifest's bytes still hash to the receipt's ``manifest_sha256``: a manifest rewritten after
verification leaves a stale receipt, which the banner shows as such instead of as a green light.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

RECEIPT = "PULL_VERIFIED.json"
MANIFEST = "PULL_MANIFEST.json"
MAX_RECORD_BYTES = 64 * 1024 * 1024  # a custody record larger than this is not read into memory


def _read(path: Path) -> tuple[Any, bytes] | None:
    """A JSON record and its bytes, or None when it is absent, a symlink, too large or not JSON."""
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_RECORD_BYTES:
        return None
    data = path.read_bytes()
    try:
        return json.loads(data), data
    except ValueError:
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _judge(folder: Path, root: Path, run_id: str) -> dict[str, Any] | None:
    """The receipt in ``folder`` as the report shows it, or None when none there binds ``run_id``."""
    if not (folder / RECEIPT).is_file():
        return None
    manifest = _read(folder / MANIFEST)
    roster = manifest[0].get("roster") if manifest and isinstance(manifest[0], dict) else None
    if not isinstance(roster, list) or run_id not in roster:
        return None
    receipt = _read(folder / RECEIPT)
    document = receipt[0] if receipt and isinstance(receipt[0], dict) else {}
    problem = None
    if not document:
        problem = f"{RECEIPT} is not a readable JSON object"
    elif document.get("manifest_sha256") != hashlib.sha256(manifest[1]).hexdigest():
        problem = f"{MANIFEST} changed after it was verified: the receipt is stale"
    verifier = document.get("verifier")
    return {
        "pull_id": folder.name,
        "path": (folder / RECEIPT).relative_to(root).as_posix(),
        "verified_utc": _text(document.get("verified_utc")),
        "manifest_sha256": _text(document.get("manifest_sha256")),
        "verifier": _text(verifier.get("node")) if isinstance(verifier, dict) else None,
        "current": problem is None,
        "problem": problem,
    }


def binding_receipt(root: Path, run_id: str) -> dict[str, Any] | None:
    """The newest current receipt binding ``run_id``; else the newest stale one; else None."""
    pulls = root / "_trust" / "pulls"
    if not pulls.is_dir():
        return None
    found = [
        judged
        for folder in sorted(pulls.iterdir())
        if folder.is_dir()
        and not folder.is_symlink()
        and (judged := _judge(folder, root, run_id)) is not None
    ]
    found.sort(key=lambda item: (item["current"], item["verified_utc"] or ""), reverse=True)
    return found[0] if found else None
