"""``runaudit watch RUN_ID --follow``: stay with a run until it ends, say each change, and say why it ended.

A run of days is watched by probing again every ``--interval`` seconds (a new SSH connection each time,
so a dropped link costs one probe, never the watch). One line is printed per change of state or of the
``train.csv`` row count. The watch ends when the run finishes, dies or stalls, or when ``--max-wait``
runs out; a transport failure is ``unknown`` and the watch keeps trying. The end is classified from the
box's own records (:func:`runaudit.runners.watch.why_it_ended`).

Then, on the user's word: ``--then close,manifest`` seals the finished run on the box and hashes it for
the pull (the seed's train → close → manifest), and ``--on-exit CMD`` runs a local command (a
notification) with the outcome in its environment, never in its command line.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from runaudit.ids import is_safe_id
from runaudit.runners.box import Box, add_workdir_argument, box_from_args, require_run_id
from runaudit.runners.remote_close import close_on_box, manifest_on_box
from runaudit.runners.watch import EXIT_STATUS, PROGRESS_FILE, STALL_AFTER_S, Status, watch
from runaudit.usage import Refusal

ENDED = ("finished", "dead", "stalled")
STEPS = ("close", "manifest")
INTERVAL_S = 60.0


@dataclass(frozen=True)
class Followed:
    status: Status
    waited_s: float
    ended: bool  # False: --max-wait ran out first


def follow(
    box: Box,
    run_id: str,
    *,
    interval_s: float = INTERVAL_S,
    max_wait_s: float = 0.0,
    stall_after_s: float = STALL_AFTER_S,
    progress_file: str = PROGRESS_FILE,
    say: Callable[[str], None] = print,
) -> Followed:
    """Probe until the run ends (or ``max_wait_s`` > 0 runs out), saying each change once."""
    began = time.monotonic()
    said: tuple[str, str] | None = None
    while True:
        status = watch(box, run_id, stall_after_s=stall_after_s, progress_file=progress_file)
        waited = time.monotonic() - began
        seen = (status.state, status.signals.get("progress_rows", ""))
        if seen != said:
            say(f"[{waited:6.0f} s] {status.line()}")
            said = seen
        if status.state in ENDED:
            return Followed(status, waited, True)
        if max_wait_s and waited + interval_s > max_wait_s:
            return Followed(status, waited, False)
        time.sleep(interval_s)


def meter_lines(status: Status, box: Box) -> list[str]:
    """After a finish: how long the box has idled with its meter running, what stops it, the profile's
    danger clocks, and what to do next, in order."""
    now, ended = status.signals.get("now", ""), status.signals.get("exit_mtime", "")
    idle = (
        f"{(int(now) - int(ended)) / 60:.0f} min" if now.isdigit() and ended.isdigit() else "since it ended"
    )
    lines = [f"the run finished; the box has idled {idle} with its meter running"]
    if box.profile is not None:
        lines.append(f"the meter stops with: {box.profile.meter_stop.describe()}")
        lines += [
            f"danger clock: {clock['trigger']} → {clock['effect']} after {clock['delay']}"
            for clock in box.profile.danger_clocks
        ]
    lines.append(
        "next: runaudit close, runaudit manifest, runaudit pull (it verifies), then runaudit down on a YES "
        "(README: A run on a rented box, step by step)"
    )
    return lines


def seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, found {value!r}") from None
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, found {value!r}")
    return number


def parse_steps(value: str) -> tuple[str, ...]:
    steps = tuple(step.strip() for step in value.split(",") if step.strip())
    unknown = [step for step in steps if step not in STEPS]
    if unknown or not steps:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(STEPS)}; got {value!r}"
        )
    if "manifest" in steps and "close" not in steps:
        raise argparse.ArgumentTypeError("manifest hashes the sealed capsule: --then close,manifest")
    return steps


def run_steps(box: Box, run_id: str, steps: tuple[str, ...], *, pull_id: str, workdir: str | None) -> int:
    """The chained verbs on the box, in order, each relaying its own answer; the first failure stops it."""
    for step in steps:
        if step == "close":
            result = close_on_box(box, run_id, workdir)
        else:
            # The run alone: a box that sealed earlier runs holds them too, each pulled by its own manifest.
            result = manifest_on_box(box, [run_id], pull_id, None, workdir, subset=True)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        print(
            f"watch {run_id}: then {step} on {box.endpoint.label}: exit status {result.exit_code}",
            file=sys.stderr,
        )
        if result.exit_code != 0:
            return result.exit_code
    return 0


def run_hook(command: str, run_id: str, status: Status) -> None:
    """The user's own command, through the shell; what came from the box travels only in its environment."""
    env = {
        **os.environ,
        "RUNAUDIT_RUN_ID": run_id,
        "RUNAUDIT_STATE": status.state,
        "RUNAUDIT_REASON": status.reason,
        "RUNAUDIT_WHERE": status.where,
    }
    done = subprocess.run(["/bin/sh", "-c", command], env=env, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        print(f"watch {run_id}: the --on-exit command exited with code {done.returncode}", file=sys.stderr)


def _follow_main(one_shot: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    if not args.follow:
        if args.then or args.on_exit or args.max_wait:
            raise Refusal("watch: --then, --on-exit and --max-wait go with --follow")
        return one_shot(args)
    require_run_id(args.run_id)
    pull_id = args.pull_id or args.run_id
    if not is_safe_id(pull_id):
        raise Refusal(f"watch: pull id {pull_id!r} is not a safe id")
    box = box_from_args(args)
    followed = follow(
        box,
        args.run_id,
        interval_s=args.interval,
        max_wait_s=args.max_wait,
        stall_after_s=args.stall_after,
        progress_file=args.progress_file,
        say=lambda line: print(line, flush=True),
    )
    status = followed.status
    code = EXIT_STATUS[status.state]
    if not followed.ended:
        print(
            f"watch {args.run_id}: still {status.state} after {followed.waited_s:.0f} s (--max-wait)",
            file=sys.stderr,
        )
    elif status.state == "finished":
        if args.then:
            code = run_steps(box, args.run_id, args.then, pull_id=pull_id, workdir=args.workdir)
        for line in meter_lines(status, box):
            print(f"watch {args.run_id}: {line}")
    if args.on_exit:
        run_hook(args.on_exit, args.run_id, status)
    return code


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.choices["watch"]
    group = parser.add_argument_group("following a run to its end")
    group.add_argument(
        "--follow", action="store_true", help="probe again until the run finishes, dies or stalls"
    )
    group.add_argument(
        "--interval",
        type=seconds,
        default=INTERVAL_S,
        metavar="SECONDS",
        help="between probes (default: %(default)s)",
    )
    group.add_argument(
        "--max-wait",
        type=seconds,
        default=0.0,
        metavar="SECONDS",
        help="give up after this long (default: never)",
    )
    group.add_argument(
        "--then",
        type=parse_steps,
        metavar="close[,manifest]",
        help="once the run finished: seal it on the box, then write its pull manifest",
    )
    group.add_argument("--pull-id", help="the manifest's pull id with --then ...,manifest (default: RUN_ID)")
    group.add_argument(
        "--on-exit",
        metavar="CMD",
        help="a local shell command run when the watch ends; RUNAUDIT_RUN_ID, RUNAUDIT_STATE, "
        "RUNAUDIT_REASON and RUNAUDIT_WHERE hold the outcome",
    )
    add_workdir_argument(parser)
    parser.set_defaults(handler=functools.partial(_follow_main, parser.get_default("handler")))
