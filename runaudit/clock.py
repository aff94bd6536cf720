"""UTC time as every record runaudit writes spells it.

Records are read by people comparing runs across machines and time zones, and by tools that sort them:
timestamps are UTC to the second with a ``Z`` (``2026-12-03T11:33:46Z``); names that carry a time use the
compact, sortable, path-safe stamp (``20261203T113346Z``).
"""

from __future__ import annotations

import datetime as dt
import secrets


def utc_now() -> str:
    """Now, as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return utc_text(dt.datetime.now(dt.UTC))


def utc_text(moment: dt.datetime) -> str:
    """``moment`` (aware) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def stamp(moment: dt.datetime | None = None) -> str:
    """``moment`` (default now) as ``YYYYMMDDTHHMMSSZ``, for file and folder names."""
    return f"{(moment or dt.datetime.now(dt.UTC)).astimezone(dt.UTC):%Y%m%dT%H%M%SZ}"


def attempt_id() -> str:
    """A unique, sortable id for one attempt at something (``20260101T000000Z-abc123``)."""
    return f"{stamp()}-{secrets.token_hex(3)}"
