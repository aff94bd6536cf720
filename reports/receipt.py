"""The pull receipt (``_trust/pulls/<pull-id>/PULL_VERIFIED.json``) a teardown decision rests on.

The page asks exactly what ``runaudit down`` asks (:func:`runaudit.runners.custody.receipt_status`), so the
banner's "yes" and the teardown verb can never disagree; the receipt's own fields are quoted beside it.
"""

from __future__ import annotations

from typing import Any

from runaudit import manifest as manifests
from runaudit.fixtures.run import Run


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def binding_receipt(run: Run) -> dict[str, Any] | None:
    """The receipt of the newest manifest naming the run, whether it is current, and why not; else None."""
    from runaudit.runners.custody import receipt_status  # deferred: the runner module is only needed here

    manifest = manifests.locate(run.root, run.run_id)
    found = manifests.receipt_of(manifest) if manifest is not None else None
    if found is None:
        return None
    receipt, path = found
    document = receipt if isinstance(receipt, dict) else {}
    verifier = document.get("verifier")
    status = receipt_status(run.root, [run.run_id])
    return {
        "pull_id": manifest.pull_id,
        "path": path.relative_to(run.root).as_posix(),
        "verified_utc": _text(document.get("verified_utc")),
        "manifest_sha256": _text(document.get("manifest_sha256")),
        "verifier": _text(verifier.get("node")) if isinstance(verifier, dict) else None,
        "current": status.ok,
        "problem": "; ".join(status.problems) or None,
    }
