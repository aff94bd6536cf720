"""UTC time as every record runaudit writes spells it.

Records are read by people comparing runs across machines and time zones, and by tools that sort them:
timestamps are UTC to the second with a ``Z`` (``2026-12-03T11:33:46Z``); names that carry a time use the
compact, sortable, path-safe stamp (``20261203T113346Z``).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets


def utc_now() -> str:
    """Now, as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return utc_text(dt.datetime.now(dt.UTC))


def today() -> dt.date:
    """The UTC date that fact stamps (a profile's ``verified = "2026-06"``) are judged against: one date for
    ``down``, ``profiles`` and the preflight gate, whatever the machine's time zone (tests fix it here)."""
    return dt.datetime.now(dt.UTC).date()


def utc_text(moment: dt.datetime) -> str:
    """``moment`` (aware) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def stamp(moment: dt.datetime | None = None) -> str:
    """``moment`` (default now) as ``YYYYMMDDTHHMMSSZ``, for file and folder names."""
    return f"{(moment or dt.datetime.now(dt.UTC)).astimezone(dt.UTC):%Y%m%dT%H%M%SZ}"


def attempt_id() -> str:
    """A unique, sortable id for one attempt at something (``20260101T000000Z-abc123``)."""
    return f"{stamp()}-{secrets.token_hex(3)}"


DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]*)$", re.IGNORECASE)
UNIT_SECONDS = {
    **dict.fromkeys(("", "s", "sec", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
}


def parse_duration(value: str) -> float:
    """Seconds in ``30s``, ``15m``, ``3h``, ``2d`` or ``15 days`` (a bare number is seconds)."""
    match = DURATION.match(value.strip())
    unit = match.group(2).lower() if match else None
    if match is None or unit not in UNIT_SECONDS:
        raise ValueError(f"{value!r} is not a duration (e.g. 30s, 15m, 3h, 2d)")
    return float(match.group(1)) * UNIT_SECONDS[unit]
