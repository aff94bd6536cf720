"""``runaudit clocks --root ROOT``: the danger clocks that started when ``runaudit down`` stopped a box.

A stopped box is not a safe box: platforms release a box left stopped after days (AutoDL: 15 days, the
disks deleted), and a balance in arrears stops or deletes it. Each profile lists these danger clocks.
A teardown record (``_trust/teardowns/<target>-<stamp>.json``) says when ``down`` approved stopping a
box and under which profile; from that moment each clock whose delay is a duration counts down. A clock
whose delay is not a duration ("immediate", "member setting") is shown as the profile states it. Only a
reversible meter stop leaves a box for a clock to take; a deleting teardown has nothing left to lose.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from runaudit.clock import parse_duration, utc_text
from runaudit.platforms import ProfileError, load_profile
from runaudit.safeio import JSON_CAP, read_regular
from runaudit.usage import existing_dir


def countdown(record: dict[str, object], now: dt.datetime, record_file: str) -> list[str]:
    """One line per danger clock the record's profile had when ``down`` approved, counted from then.

    The record carries the plan it was approved under (meter stop and danger clocks): a profile named by
    its file (``--profile my.toml``) was looked up again from wherever ``clocks`` ran, and AutoDL's 15-day
    release clock was lost ("no such profile file"), or read from another ``my.toml``. A record written
    before it carried the plan is read through its profile's name, as then. A record that cannot be read
    is one line naming ``record_file``, and a delay too long to put a date on is one line for that clock:
    either ended the verb in a traceback that hid every other record's clocks.
    """
    target = str(record.get("target"))
    try:
        name, verb, reversible, clocks = _plan(record)
        since = _approved(record.get("approved_utc"))
    except (ProfileError, ValueError) as exc:
        return [f"{record_file}: cannot be read ({exc})"]
    if reversible is not True:
        return [f"{target}: {name}'s '{verb}' leaves no box for a clock to take"]
    lines = []
    for clock in clocks:
        said = f"{target} ({name}): {clock['trigger']} → {clock['effect']} after {clock['delay']}"
        try:
            due = since + dt.timedelta(seconds=parse_duration(clock["delay"]))
        except ValueError:
            lines.append(said)
            continue
        except OverflowError:
            lines.append(f"{said}: due after the year 9999, too far off to count down")
            continue
        left = due - now
        if left.total_seconds() <= 0:
            lines.append(
                f"{said}: due {utc_text(due)}, PASSED {int(-left.total_seconds() // 86400)} day(s) ago if the box stayed stopped"
            )
        else:
            lines.append(f"{said}: due {utc_text(due)}, {left.days} day(s) {left.seconds // 3600} h left")
    return lines


def _approved(value: object) -> dt.datetime:
    """The moment ``down`` approved, in UTC, from a record's ``approved_utc``.

    A time with no UTC offset names no moment (which zone's midnight?), and counting from one ended
    ``clocks`` in a traceback: it cannot be read, like any text that is not a time.
    """
    expected = "expected a UTC time such as 2026-12-01T00:00:00Z"
    try:
        approved = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"approved_utc is {value!r}, not a time: {expected}") from None
    if approved.utcoffset() is None:
        raise ValueError(f"approved_utc is {value!r}, a time with no UTC offset: {expected}")
    try:
        return approved.astimezone(dt.UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before the first day a date can name
        raise ValueError(
            f"approved_utc is {value!r}, which falls outside years 1 to 9999 in UTC: {expected}"
        ) from None


CLOCK_FIELDS = ("trigger", "effect", "delay")


def _plan(record: dict[str, object]) -> tuple[str, str, object, list[dict[str, str]]]:
    """(profile name, meter-stop verb, whether it is reversible, danger clocks) the record was approved under."""
    name, meter_stop, clocks = (
        str(record.get("profile")),
        record.get("meter_stop"),
        record.get("danger_clocks"),
    )
    if meter_stop is None and clocks is None:  # a record from before the plan rode with it
        profile = load_profile(name)
        return (
            profile.name,
            profile.meter_stop.verb,
            profile.meter_stop.reversible,
            list(map(dict, profile.danger_clocks)),
        )
    if not (
        isinstance(meter_stop, dict)
        and isinstance(meter_stop.get("verb"), str)
        and isinstance(clocks, list)
        and all(
            isinstance(clock, dict) and all(isinstance(clock.get(key), str) for key in CLOCK_FIELDS)
            for clock in clocks
        )
    ):
        raise ValueError("its meter_stop or danger_clocks are not what runaudit down writes")
    return name, meter_stop["verb"], meter_stop.get("reversible"), clocks


def _main(args: argparse.Namespace) -> int:
    folder = args.root / "_trust" / "teardowns"
    records = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not records:
        print(f"no teardown record under {folder}: no box was stopped by runaudit down")
        return 0
    now = dt.datetime.now(dt.UTC)
    for path in records:
        try:
            record = json.loads(read_regular(path, JSON_CAP))
        except (OSError, ValueError) as exc:
            print(f"{path.name}: cannot be read ({exc})")
            continue
        for line in countdown(record if isinstance(record, dict) else {}, now, path.name):
            print(line)
    return 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "clocks", help="the danger clocks counting down on the boxes runaudit down stopped"
    )
    parser.add_argument("--root", type=existing_dir, default=Path.cwd(), help="project root (default: .)")
    parser.set_defaults(handler=_main)
