"""``runaudit down``: the teardown gate. It stops nothing unless every byte is proven home.

In order, and refusing at the first failure:

1. a current receipt (``PULL_VERIFIED.json`` bound to the current manifest) for every roster run;
2. the profile's teardown plan is shown: the meter-stop verb, what it deletes, whether it can be undone,
   the other steps and the billables that outlive it, and every danger clock;
3. an irreversible verb whose governing fact is stamped more than six months ago needs
   ``--facts-reverified`` (re-check the provider's docs first);
4. ``--confirm <target>`` must repeat ``--target`` exactly.

Only then, and only if the profile defines a command for its meter-stop verb, is that command run;
otherwise ``down`` says what to do in the console and how to prove it landed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runaudit.runners import RunnerError, existing_dir
from runaudit.runners.custody import receipt_status
from runaudit.runners.manifest import parse_roster
from runaudit.runners.profiles import Profile, load_profile


class Refused(RunnerError):
    """``down`` did nothing; the message says why and what would unblock it."""


def plan_lines(profile: Profile, target: str, today: dt.date) -> list[str]:
    """What tearing down ``target`` under ``profile`` does, in the words a person must approve."""
    meter = profile.meter_stop
    lines = [f"down {target} on {profile.display_name} ({profile.name}, trust: {profile.trust})"]
    lines.append(f"  meter stop: {meter.describe()}")
    lines += [f"  also: {action.describe()}" for action in profile.teardown]
    lines += [f"  still billed afterwards: {item}" for item in profile.extra_billables]
    lines += [
        f"  danger clock: {clock['trigger']} -> after {clock['delay']}: {clock['effect']}"
        for clock in profile.danger_clocks
    ]
    if meter.proof:
        lines.append(f"  proof it landed: {meter.proof}")
    lines += [
        f"  STALE: {stamp.fact} last verified {stamp.verified} ({stamp.source}); re-verify before relying on it"
        for stamp in profile.stale_stamps(today)
    ]
    return lines


def gate(
    root: Path,
    roster: list[str],
    profile: Profile,
    target: str,
    confirm: str | None,
    *,
    facts_reverified: bool = False,
    today: dt.date | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """Raise :class:`Refused` unless every condition of the module docstring holds."""
    status = receipt_status(root, roster)
    if not status.ok:
        raise Refused(
            f"down refused: no current receipt for every roster run ({'; '.join(status.problems)}); "
            "pull and verify first (runaudit pull); nothing was stopped"
        )
    if profile.needs_member:
        members = ", ".join(f"{profile.platform}:{name}" for name in profile.members)
        raise Refused(f"down refused: {profile.name}'s teardown differs per member; pass one of {members}")
    today = today or dt.date.today()
    for line in plan_lines(profile, target, today):
        say(line)
    meter = profile.meter_stop
    stale = {stamp.fact for stamp in profile.stale_stamps(today)}
    if meter.reversible is False and meter.fact in stale and not facts_reverified:
        raise Refused(
            f"down refused: '{meter.verb}' is irreversible and its governing fact {meter.fact} is older than "
            "six months; re-verify it with the provider, then pass --facts-reverified"
        )
    if confirm is None:
        raise Refused(
            f"down refused: nothing done; to approve '{meter.verb}' on {target}, re-run with --confirm {target}"
        )
    if confirm != target:
        raise Refused(
            f"down refused: --confirm {confirm!r} does not name the target {target!r}; nothing done"
        )


def teardown(profile: Profile, target: str, *, say: Callable[[str], None] = print) -> int:
    """Run the profile's meter-stop command, if it has one; otherwise say what the person must do."""
    meter = profile.meter_stop
    if not meter.command:
        how = meter.how or "the platform's console"
        say(f"down {target}: approved; {profile.name} defines no command for '{meter.verb}': do it via {how}")
        if meter.proof:
            say(f"down {target}: then prove it landed: {meter.proof}")
        return 0
    argv = [part.replace("{target}", target) for part in meter.command]
    say(f"down {target}: running {argv[0]} for '{meter.verb}'")
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=300)
    except FileNotFoundError:
        raise RunnerError(
            f"down {target}: the teardown command {argv[0]!r} is not installed; nothing was stopped"
        ) from None
    except subprocess.TimeoutExpired:
        raise RunnerError(
            f"down {target}: the teardown command did not answer within 300 s; its effect is unknown, "
            f"check the platform ({meter.proof or 'console'})"
        ) from None
    if done.returncode != 0:
        say(f"down {target}: the teardown command exited {done.returncode}; the meter may still be running")
        return 1
    say(
        f"down {target}: the command succeeded; a success reply is not proof: {meter.proof or 'check the console'}"
    )
    return 0


def _roster(args: argparse.Namespace) -> list[str]:
    if args.roster is not None:
        try:
            text = args.roster.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Refused(f"down refused: cannot read the roster {args.roster}: {exc}") from None
        return parse_roster(text, str(args.roster))
    return parse_roster("\n".join(args.run), "--run")


def _main(args: argparse.Namespace) -> int:
    profile = load_profile(args.profile)
    say = functools.partial(print, file=sys.stderr)
    gate(
        args.root,
        _roster(args),
        profile,
        args.target,
        args.confirm,
        facts_reverified=args.facts_reverified,
        say=say,
    )
    return teardown(profile, args.target, say=say)


def add_verb(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "down", help="the teardown gate: refuses without a receipt for every run and an explicit --confirm"
    )
    parser.add_argument(
        "--root", type=existing_dir, required=True, help="local project root holding the receipts"
    )
    roster = parser.add_mutually_exclusive_group(required=True)
    roster.add_argument("--roster", type=Path, help="file: one run id per line (# comments)")
    roster.add_argument(
        "--run", action="append", default=[], metavar="RUN_ID", help="a roster run (repeatable)"
    )
    parser.add_argument("--profile", required=True, help="the platform profile (e.g. runpod, china:gpushare)")
    parser.add_argument(
        "--target", required=True, help="what would be stopped: the instance, pod or box name"
    )
    parser.add_argument("--confirm", metavar="TARGET", help="approve the teardown by repeating --target")
    parser.add_argument(
        "--facts-reverified",
        action="store_true",
        help="you re-checked the stale teardown facts with the provider",
    )
    parser.set_defaults(handler=_main)
