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


def countdown(record: dict[str, object], now: dt.datetime) -> list[str]:
    """One line per danger clock of the record's profile, counted from its approval."""
    target, approved = str(record.get("target")), str(record.get("approved_utc"))
    try:
        profile = load_profile(str(record.get("profile")))
        since = dt.datetime.fromisoformat(approved.replace("Z", "+00:00"))
    except (ProfileError, ValueError) as exc:
        return [f"{target}: the record cannot be read ({exc})"]
    if profile.meter_stop.reversible is not True:
        return [f"{target}: {profile.name}'s '{profile.meter_stop.verb}' leaves no box for a clock to take"]
    lines = []
    for clock in profile.danger_clocks:
        said = f"{target} ({profile.name}): {clock['trigger']} → {clock['effect']} after {clock['delay']}"
        try:
            due = since + dt.timedelta(seconds=parse_duration(clock["delay"]))
        except ValueError:
            lines.append(said)
            continue
        left = due - now
        if left.total_seconds() <= 0:
            lines.append(
                f"{said}: due {utc_text(due)}, PASSED {int(-left.total_seconds() // 86400)} day(s) ago if the box stayed stopped"
            )
        else:
            lines.append(f"{said}: due {utc_text(due)}, {left.days} day(s) {left.seconds // 3600} h left")
    return lines


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
        for line in countdown(record if isinstance(record, dict) else {}, now):
            print(line)
    return 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "clocks", help="the danger clocks counting down on the boxes runaudit down stopped"
    )
    parser.add_argument("--root", type=existing_dir, default=Path.cwd(), help="project root (default: .)")
    parser.set_defaults(handler=_main)
