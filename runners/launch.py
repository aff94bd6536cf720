"""``runaudit launch``: start a training command on the box, detached, and prove it is alive.

Each launch is a new *attempt* in the run's job-state folder on the box (``~/.runaudit/jobs/...``,
per instance, never shared storage). The attempt holds ``env`` (mode 600: the environment travels in
this file, never in a command line, and the wrapper deletes it once read), ``job.sh`` (the wrapper),
and what the wrapper writes: ``pid`` (with its ``/proc`` start time, so identity survives PID reuse),
``log`` and ``exit_code``.

The wrapper runs in a tmux session on a socket private to the project root; without tmux it falls back
to ``setsid nohup ... </dev/null``. The command never reads stdin. ``launch`` returns once the alive
probe (at most ``--alive-timeout``, default 60 s) sees the run's own sign of life from this attempt (a
``train.csv`` row, or ``active/<id>/.heartbeat`` touched by the writer), or the job ends; a start-up
crash is reported with its exit code and the log's last lines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runaudit.clock import attempt_id, utc_now
from runaudit.runners.box import Box, add_box_arguments, add_workdir_argument, box_from_args, require_run_id
from runaudit.runners.ssh import Remote, TransportError
from runaudit.runners.watch import PROGRESS_FILE, classify, probe
from runaudit.usage import Refusal
from runaudit.workspace import HEARTBEAT_FILE

ALIVE_TIMEOUT_S = 60.0
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROXY_HOOK_FAILED = 97

# The wrapper keeps its own stdin/stdout on the tmux pane: if every holder of the pane's terminal
# closed it, tmux would take the pane for dead and SIGHUP the job. Only the command is redirected.
JOB_SCRIPT = """#!/bin/bash
# runaudit launch: run {run_id}, attempt {attempt}. Written by runaudit; never edit it while it runs.
A={attempt_dir}
echo "$$ $(sed 's/^.*) //' /proc/$$/stat 2>/dev/null | cut -d' ' -f20)" >"$A/pid.tmp" && mv "$A/pid.tmp" "$A/pid"
# Baselines `watch` compares the end against: the boot id (a reboot), the GPU Xid count in the kernel
# log, the cgroup's OOM-kill count.
cat /proc/sys/kernel/random/boot_id >"$A/boot_id" 2>/dev/null
dmesg >/dev/null 2>&1 && dmesg 2>/dev/null | grep -c 'NVRM: Xid' >"$A/xid_start"
for f in "/sys/fs/cgroup$(sed -n 's/^0::\\(.*\\)$/\\1/p' /proc/$$/cgroup)/memory.events" \\
         "/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory:\\(.*\\)$/\\1/p' /proc/$$/cgroup)/memory.oom_control" \\
         /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
  n=$(awk '$1 == "oom_kill" {{print $2}}' "$f" 2>/dev/null)
  if [ -n "$n" ]; then echo "$f" >"$A/oom_file"; echo "$n" >"$A/oom_start"; break; fi
done
finish() {{ printf '%s\\n' "$1" >"$A/exit_code.tmp" && mv "$A/exit_code.tmp" "$A/exit_code"; exit "$1"; }}
set -a; . "$A/env" >>"$A/log" 2>&1 || finish 98; set +a; rm -f "$A/env"
{hook}cd {workdir} >>"$A/log" 2>&1 || finish 96
{pythonpath}{command} </dev/null >>"$A/log" 2>&1
finish $?
"""

HOOK_BLOCK = """if ! {{ {hook}
}} >>"$A/log" 2>&1 </dev/null; then
  echo "runaudit: the profile's PROXY_HOOK failed: "{quoted} >>"$A/log"
  {on_failure}
fi
"""


@dataclass(frozen=True)
class Launch:
    run_id: str
    attempt: str
    attempt_dir: str
    detach: str
    session: str | None
    state: str
    reason: str
    waited_s: float


def session_name(run_id: str) -> str:
    """tmux refuses '.' and ':' in session names; a hash suffix keeps distinct ids distinct."""
    return f"runaudit-{run_id.replace('.', '_')}-{hashlib.sha256(run_id.encode()).hexdigest()[:6]}"


def environment(names: Sequence[str], env_file: Path | None, base: Mapping[str, str]) -> dict[str, str]:
    """The job's environment: forwarded local variables by name, then an env file's NAME=VALUE lines."""
    values = dict(base)
    for name in names:
        if not ENV_NAME.match(name):
            raise Refusal(f"--env {name!r}: not a variable name")
        if name not in os.environ:
            raise Refusal(f"--env {name}: not set in this environment, so there is nothing to forward")
        values[name] = os.environ[name]
    if env_file is not None:
        try:
            lines = env_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise Refusal(f"--env-file {env_file}: cannot read it ({exc.strerror})") from None
        for number, line in enumerate(lines, start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, value = line.partition("=")
            if not sep or not ENV_NAME.match(name.strip()):
                raise Refusal(f"--env-file {env_file}:{number}: expected NAME=VALUE")
            values[name.strip()] = value
    return values


def env_file_text(values: Mapping[str, str]) -> str:
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())


def job_script(
    box: Box, run_id: str, attempt: str, attempt_dir: str, workdir: str | None, command: Sequence[str]
) -> str:
    hook_setting = box.profile.setting("PROXY_HOOK").value() if box.profile else None
    hook = ""
    if hook_setting:
        mandatory = bool(box.profile and box.profile.network.get("proxy_mandatory"))
        hook = HOOK_BLOCK.format(
            hook=hook_setting,
            quoted=shlex.quote(hook_setting),
            on_failure=f"finish {PROXY_HOOK_FAILED}"
            if mandatory
            else "echo 'runaudit: the hook is optional for this profile; continuing' >>\"$A/log\"",
        )
    return JOB_SCRIPT.format(
        run_id=run_id,
        attempt=attempt,
        attempt_dir=shlex.quote(attempt_dir),
        hook=hook,
        workdir=shlex.quote(workdir or str(box.root)),
        pythonpath=f"export PYTHONPATH={shlex.quote(workdir)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        if workdir
        else "",
        command=shlex.join(command),
    )


def _refuse_if_alive(remote: Remote, box: Box, run_id: str, progress_file: str) -> None:
    signals = probe(remote, box, run_id, progress_file=progress_file)
    if signals.get("launched") == "no":
        return
    state, reason = classify(signals)
    if state in ("running", "stalled"):
        raise Refusal(
            f"launch {run_id}: attempt {signals.get('attempt')} is still {state} on {box.endpoint.label} "
            f"({reason}); a second writer would corrupt it. Watch it, or stop it yourself first"
        )


def _prepare(remote: Remote, box: Box, run_id: str, attempt: str) -> tuple[str, bool]:
    """Create the attempt folder; return its absolute path and whether tmux exists on the box."""
    folder = shlex.quote(f"{box.run_state(run_id)}/{attempt}")
    made = remote.run(
        f"mkdir -p -m 700 {folder} && date +%s > {folder}/started && cd {folder} && pwd -P "
        "&& (command -v tmux >/dev/null 2>&1 && echo tmux=yes || echo tmux=no)"
    )
    lines = made.stdout.strip().splitlines()
    if not made.ok or len(lines) < 2:
        raise Refusal(f"launch {run_id}: cannot create the attempt folder on the box: {made.tail()}")
    return lines[0], lines[1] == "tmux=yes"


def _start(remote: Remote, box: Box, detach: str, session: str, script: str) -> None:
    if detach == "tmux":
        command = (
            f"tmux -L {shlex.quote(box.tmux_socket)} new-session -d -s {shlex.quote(session)} "
            + shlex.quote(f"bash {shlex.quote(script)}")
        )
    else:
        command = f"cd / && setsid nohup bash {shlex.quote(script)} </dev/null >/dev/null 2>&1 &"
    started = remote.run(command, timeout=30)
    if not started.ok:
        raise Refusal(f"launch: starting the job with {detach} failed: {started.tail()}")


def sign_of_life(signals: Mapping[str, str]) -> str | None:
    """What shows that this attempt's run itself is alive, or None: a ``train.csv`` row or a heartbeat
    written since the attempt started. Log output is not one: a job that prints its usage error and dies
    writes a log too."""
    started = int(signals.get("started", "0") or 0)
    if (
        int(signals.get("progress_rows", "0") or 0) > 0
        and int(signals.get("progress_mtime", "0") or 0) >= started
    ):
        return f"train.csv has {signals['progress_rows']} row(s)"
    if int(signals.get("heartbeat_mtime", "0") or 0) >= started > 0:
        return f"its heartbeat ({HEARTBEAT_FILE}) was touched"
    return None


def _alive_probe(
    remote: Remote, box: Box, run_id: str, *, timeout_s: float, progress_file: str
) -> tuple[str, str, float]:
    """Poll live signals until the run shows its own sign of life, ends, or the grace is over."""
    began = time.monotonic()
    while True:
        signals = probe(remote, box, run_id, progress_file=progress_file)
        state, reason = classify(signals)
        waited = time.monotonic() - began
        tail = signals.get("log_tail", "")
        if state == "dead":
            return state, f"start-up failed: {reason}; log tail: {tail or '(empty log)'}", waited
        if state == "finished":
            return state, f"{reason}; log tail: {tail}" if tail else reason, waited
        if state == "running" and (alive := sign_of_life(signals)):
            return state, f"{reason}; {alive}", waited
        if waited >= timeout_s:
            return (
                "no-sign-of-life",
                f"{reason}, but no train.csv row and no heartbeat within {timeout_s:.0f} s "
                f"(raise --alive-timeout for a slow start); log tail: {tail or '(empty log)'}",
                waited,
            )
        time.sleep(1.0)


def launch(
    box: Box,
    run_id: str,
    command: Sequence[str],
    *,
    workdir: str | None = None,
    env: Mapping[str, str] | None = None,
    detach: str | None = None,
    alive_timeout_s: float = ALIVE_TIMEOUT_S,
    progress_file: str = PROGRESS_FILE,
) -> Launch:
    require_run_id(run_id)
    if not command:
        raise Refusal("launch: no command given (put it after --)")
    wanted = detach or (box.profile.setting("DETACH").value("tmux") if box.profile else "tmux")
    if wanted not in ("tmux", "nohup"):
        raise Refusal(
            f"launch: detach primitive {wanted!r} is not launched over SSH; use `runaudit cluster` or the platform's own hook"
        )
    values = {
        "PYTHONUNBUFFERED": "1",
        "RUNAUDIT_RUN_ID": run_id,
        "RUNAUDIT_ROOT": str(box.root),
        **(env or {}),
    }
    attempt = attempt_id()
    session = session_name(run_id)
    with Remote(box.endpoint) as remote:
        _refuse_if_alive(remote, box, run_id, progress_file)
        attempt_dir, has_tmux = _prepare(remote, box, run_id, attempt)
        used = wanted if has_tmux or wanted == "nohup" else "nohup"
        if used != wanted:
            print(
                f"launch {run_id}: tmux is not installed on the box; falling back to setsid nohup",
                file=sys.stderr,
            )
        script = f"{attempt_dir}/job.sh"
        remote.write_file(f"{attempt_dir}/env", env_file_text(values).encode(), mode=0o600)
        remote.write_file(
            script,
            job_script(box, run_id, attempt, attempt_dir, workdir, command).encode(),
            mode=0o700,
        )
        tmux_session = session if used == "tmux" else None
        record = {
            "run_id": run_id,
            "attempt": attempt,
            "detach": used,
            "session": tmux_session,
            "tmux_socket": box.tmux_socket if used == "tmux" else None,
            "workdir": workdir or str(box.root),
            "root": str(box.root),  # the project root: runaudit down of another root on the box finds it here
            "command": list(command),
            "env_names": sorted(values),
            "launched_utc": utc_now(),
            "launched_from": box.endpoint.label,
        }
        remote.write_file(f"{attempt_dir}/launch.json", (json.dumps(record, indent=2) + "\n").encode())
        if used == "tmux":
            remote.write_file(f"{attempt_dir}/session", f"{session}\n".encode())
        remote.write_file(f"{box.run_state(run_id)}/current", f"{attempt}\n".encode())
        _start(remote, box, used, session, script)
        try:
            state, reason, waited = _alive_probe(
                remote, box, run_id, timeout_s=alive_timeout_s, progress_file=progress_file
            )
        except TransportError as exc:
            raise TransportError(f"launch {run_id}: the job was started, then {exc}") from None
    return Launch(run_id, attempt, attempt_dir, used, tmux_session, state, reason, waited)


def _main(args: argparse.Namespace) -> int:
    command = args.command
    if command[:1] and command[0].startswith("-"):
        raise Refusal(
            f"launch: {command[0]!r} after RUN_ID; options go before it: runaudit launch [options] RUN_ID -- COMMAND"
        )
    box = box_from_args(args)
    env = environment(args.env, args.env_file, {})
    result = launch(
        box,
        args.run_id,
        command,
        workdir=args.workdir,
        env=env,
        detach=args.detach,
        alive_timeout_s=args.alive_timeout,
        progress_file=args.progress_file,
    )
    where = f"tmux session {result.session}" if result.session else "setsid nohup"
    line = (
        f"launch {result.run_id} on {box.endpoint.label}: {result.state} after {result.waited_s:.0f} s "
        f"(attempt {result.attempt}, {where}) — {result.reason}"
    )
    ok = result.state in ("running", "finished")
    print(line, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "launch",
        usage="runaudit launch [options] RUN_ID -- COMMAND ...",
        help="start a command on the box, detached (tmux, else setsid nohup), and probe that it is alive",
        description="Options come before RUN_ID; everything after it is the command. The environment "
        "travels in a mode-600 file on the box, never in a command line.",
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    add_box_arguments(parser)
    add_workdir_argument(parser)
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME", help="forward this local variable (by name)"
    )
    parser.add_argument("--env-file", type=Path, help="a local file of NAME=VALUE lines for the job")
    parser.add_argument(
        "--detach", choices=["tmux", "nohup"], help="default: the profile's DETACH, else tmux"
    )
    parser.add_argument(
        "--alive-timeout",
        type=float,
        default=ALIVE_TIMEOUT_S,
        metavar="SECONDS",
        help="how long the alive probe waits for a train.csv row or the writer's heartbeat "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--progress-file", default=PROGRESS_FILE, help="default: %(default)s under --remote-root"
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="the command, after RUN_ID (and an optional --)"
    )
    parser.set_defaults(handler=_main)
