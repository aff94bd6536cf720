"""``runaudit profiles [NAME]``: every platform profile at a glance, or one in full before you rent.

The listing validates every built-in profile (one line per bad file); the detail view shows the
teardown plan, storage tiers with their survival, the facts preflight measures live, and stamps.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from runaudit import clock
from runaudit.platforms import STALE_AFTER_MONTHS, Profile, ProfileError, load_profile, profile_names
from runaudit.runners.down import plan_lines


def summary_line(profile: Profile, today: dt.date) -> str:
    meter = profile.meter_stop
    labels: dict[bool | str, str] = {True: "reversible", False: "irreversible"}
    undo = labels.get(meter.reversible, str(meter.reversible))
    stale = len(profile.stale_stamps(today))
    stamps = f"{stale} stale stamp(s)" if stale else "stamps fresh"
    return (
        f"{profile.name:<24} {profile.kind:<12} meter stop: {meter.verb} ({undo}); trust {profile.trust}; "
        f"{stamps}; {len(profile.measured_live())} fact(s) measured live"
    )


def detail_lines(profile: Profile, today: dt.date) -> list[str]:
    lines = [f"{profile.display_name} [{profile.name}] from {profile.path}", f"  {profile.summary}"]
    lines += plan_lines(profile, "<target>", today)[1:]
    for tier in profile.tiers:
        lines.append(
            f"  tier {tier['name']}: {tier['path']} — survives stop: {tier['survives_stop']}, "
            f"survives teardown: {tier['survives_teardown']}"
        )
    for name in ("DATA_DIR", "DURABLE_DIR", "PROXY_HOOK", "DETACH", "PY"):
        setting = profile.setting(name)
        shown = (
            "(explicitly none)"
            if setting.disabled
            else (setting.raw if setting.raw is not None else "(unset)")
        )
        lines.append(f"  {name}: {shown}")
    detach = profile.detach
    lines.append(f"  detach: {detach['primitive']} (fallback {detach['fallback']})")
    lines += [f"  measured live by preflight: {field}" for field in profile.measured_live()]
    lines += [
        f"  stamp {stamp.fact}: verified {stamp.verified}, {stamp.trust}, {stamp.source}"
        + (" — STALE" if stamp.age_months(today) > STALE_AFTER_MONTHS and stamp.governing else "")
        for stamp in profile.stamps
    ]
    if profile.members:
        lines.append(f"  members: {', '.join(f'{profile.platform}:{name}' for name in profile.members)}")
    return lines


def _main(args: argparse.Namespace) -> int:
    today = clock.today()
    if args.name:
        for line in detail_lines(load_profile(args.name), today):
            print(line)
        return 0
    broken = 0
    for name in profile_names():
        try:
            print(summary_line(load_profile(name), today))
        except ProfileError as exc:
            broken += 1
            print(f"runaudit profiles: error: {exc}", file=sys.stderr)
    return 2 if broken else 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser("profiles", help="list the platform profiles, or show one in full")
    parser.add_argument("name", nargs="?", help="a profile (autodl, china:gpushare ...) or a .toml file")
    parser.set_defaults(handler=_main)
