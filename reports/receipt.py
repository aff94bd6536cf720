"""The pull receipt (``_trust/pulls/<pull-id>/PULL_VERIFIED.json``) a teardown decision rests on.

The page asks exactly what ``runaudit down`` asks (:func:`runaudit.receipts.receipt_status`), so the
banner's "yes" and the teardown verb can never disagree; the receipt's own fields are quoted beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runaudit.receipts import run_receipt
from runaudit.run import Run


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def binding_receipt(run: Run) -> dict[str, Any] | None:
    """The receipt of the manifest governing the run, whether it is current, and why not; else None."""
    return receipt_block(run.root, run.run_id)


def receipt_block(root: Path, run_id: str) -> dict[str, Any] | None:
    """:func:`binding_receipt` of run ``run_id`` under ``root``, asked now: a report merged later (the box's
    verdicts added by ``runaudit audit``) asks again instead of carrying a session's answer forward."""
    # Without the stat-keyed hash cache, as `runaudit down` asks: a file touched since verification is hashed
    # again. With it, a forged cache entry made the banner say yes where down says no.
    found = run_receipt(root, run_id)
    if found.path is None or found.pull_id is None:
        return None
    document = found.document or {}
    verifier = document.get("verifier")
    try:
        shown = found.path.relative_to(root).as_posix()
    except ValueError:
        shown = str(found.path)
    return {
        "pull_id": found.pull_id,
        "path": shown,
        "verified_utc": _text(document.get("verified_utc")),
        "manifest_sha256": _text(document.get("manifest_sha256")),
        "verifier": _text(verifier.get("node")) if isinstance(verifier, dict) else None,
        "current": found.current,
        "problem": "; ".join(found.problems) or None,
        "holder": _text(document.get("holder")),
    }
