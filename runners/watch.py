"""``runaudit watch``: one look at a launched run, from live signals only, in one SSH round trip.

Signals: the launch attempt's wrapper PID (alive only if ``/proc/<pid>`` still has the start time the
wrapper recorded, so a recycled PID or the probe itself can never count), the tmux session, the exit
code the wrapper wrote, the age of the attempt's log and of the run's ``train.csv``, disk bytes and
inodes, GPU utilisation. A log line never decides anything.

States: ``running``, ``stalled`` (alive, but no log or progress-file write for ``--stall-after``),
``finished`` (the wrapper recorded exit 0), ``dead`` (no live process, and no exit 0), and ``unknown``
when the transport failed: that proves nothing about the run, so it is never reported as ``dead``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from runaudit.runners.box import Box, add_box_arguments, box_from_args, require_run_id
from runaudit.runners.ssh import UNKNOWN_STATE, Remote, TransportError
from runaudit.usage import Refusal
from runaudit.verdict import printable
from runaudit.workspace import HEARTBEAT_FILE

STALL_AFTER_S = 1800.0
EXIT_STATUS = {"running": 0, "finished": 0, "stalled": 1, "dead": 1, "unknown": 3}
PROGRESS_FILE = "active/{run_id}/train.csv"
JOINED = {"gpu": "; ", "log_tail": " | "}  # signals printed once per GPU or per log line
START_GRACE_S = 30  # a detached wrapper writes its pid within this; until then the job is starting

# POSIX sh: whether the job of the attempt folder ``$1`` lives, by the pid its wrapper wrote with its
# ``/proc`` start time (so a reused pid is not taken for the job): ``yes``; ``unverified`` where the box
# has no ``/proc`` and the pid answers a signal; ``no``; nothing while the wrapper has not written its pid.
# ``watch`` and ``down`` (a job still running blocks a teardown) share it.
JOB_ALIVE = r"""
job_alive() {
  [ -f "$1/pid" ] || return 0
  read pid start < "$1/pid"
  if [ -r "/proc/$pid/stat" ]; then
    rest=$(sed 's/^.*) //' "/proc/$pid/stat")
    st=$(echo "$rest" | cut -d' ' -f1); cur=$(echo "$rest" | cut -d' ' -f20)
    if [ "$cur" = "$start" ] && [ "$st" != "Z" ]; then echo yes; else echo no; fi
  elif [ -d /proc/self ]; then echo no
  elif kill -0 "$pid" 2>/dev/null; then echo unverified
  else echo no; fi
}
"""

# POSIX sh, read-only: prints key=value lines and a final sentinel so a truncated answer is detectable.
# A value read from the box is printed by `say`: its first line only (files) or with its line breaks
# removed, through printf (dash's echo would turn a "\n" in a log line into a forged signal line).
PROBE = r"""
say() { printf '%s=%s\n' "$1" "$(printf '%s' "$2" | tr -d '\r\n' | cut -c1-300)"; }
say now "$(date +%s)"
if [ ! -f "$S/current" ]; then echo "launched=no"; echo "probe=complete"; exit 0; fi
att=$(head -n 1 "$S/current"); A="$S/$att"; say attempt "$att"
[ -f "$A/started" ] && say started "$(head -n 1 "$A/started")"
sess=$(head -n 1 "$A/session" 2>/dev/null)
if [ -z "$sess" ]; then echo "session=n/a"
elif command -v tmux >/dev/null 2>&1 && tmux -L "$SOCK" has-session -t "=$sess" 2>/dev/null; then echo "session=yes"
else echo "session=no"; fi
if [ -f "$A/pid" ]; then
  read pid start < "$A/pid"; say pid "$pid"; say alive "$(job_alive "$A")"
fi
[ -f "$A/exit_code" ] && say exit_code "$(head -n 1 "$A/exit_code")" && say exit_mtime "$(stat -c %Y "$A/exit_code")"
if [ -f "$A/log" ]; then
  say log_mtime "$(stat -c %Y "$A/log")"; say log_bytes "$(stat -c %s "$A/log")"
  say log_last "$(tail -n 1 "$A/log")"
  tail -n 5 "$A/log" | tr -d '\r' | cut -c1-300 | sed 's/^/log_tail=/'
  say enospc_lines "$(tail -n 200 "$A/log" | grep -c 'No space left on device')"
fi
[ -f "$H" ] && say heartbeat_mtime "$(stat -c %Y "$H")"
if [ -f "$P" ]; then
  say progress_mtime "$(stat -c %Y "$P")"; say progress_rows "$(($(wc -l < "$P") - 1))"
  say progress_last "$(tail -n 1 "$P")"
fi
[ -f "$A/boot_id" ] && say boot_id_start "$(head -n 1 "$A/boot_id")"
[ -r /proc/sys/kernel/random/boot_id ] && say boot_id "$(head -n 1 /proc/sys/kernel/random/boot_id)"
if [ -f "$A/oom_file" ]; then
  say oom_start "$(head -n 1 "$A/oom_start")"
  say oom_now "$(awk '$1 == "oom_kill" {print $2}' "$(head -n 1 "$A/oom_file")" 2>/dev/null)"
fi
[ -f "$A/xid_start" ] && say xid_start "$(head -n 1 "$A/xid_start")"
if dmesg >/dev/null 2>&1; then
  say xid_count "$(dmesg 2>/dev/null | grep -c 'NVRM: Xid')"
  say xid "$(dmesg 2>/dev/null | grep 'NVRM: Xid' | tail -n 1)"
fi
df -Pk "$R" 2>/dev/null | awk 'NR==2 {print "disk_avail_kb=" $4; print "disk_used=" $5}'
df -Pi "$R" 2>/dev/null | awk 'NR==2 {print "inodes_used=" $5}'
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits 2>/dev/null | sed 's/^/gpu=/'
fi
echo "probe=complete"
"""


@dataclass(frozen=True)
class Status:
    run_id: str
    where: str
    state: str
    reason: str
    signals: Mapping[str, str] = field(default_factory=dict)

    def line(self) -> str:
        return f"watch {self.run_id} on {self.where}: {self.state} — {self.reason}"


def parse_signals(text: str) -> dict[str, str]:
    """The probe's ``key=value`` lines; each value shown printable (:func:`runaudit.verdict.printable`): a
    log line holding ``ESC[2K`` and a forged "finished" line overwrote the real verdict on the terminal,
    and reached ``--on-exit``'s ``RUNAUDIT_REASON`` as it was."""
    signals: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        value = printable(value)
        if sep and key.isidentifier():
            joined = key in signals and key in JOINED
            signals[key] = f"{signals[key]}{JOINED[key]}{value}" if joined else value
    return signals


def probe_command(box: Box, run_id: str, progress_file: str) -> str:
    progress = progress_file.format(run_id=run_id)
    progress_path = progress if progress.startswith("/") else box.path(progress)
    bindings = {
        "S": box.run_state(run_id),
        "SOCK": box.tmux_socket,
        "P": progress_path,
        "H": box.path("active", run_id, HEARTBEAT_FILE),
        "R": str(box.root),
    }
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in bindings.items()) + JOB_ALIVE + PROBE


def _int(signals: Mapping[str, str], key: str) -> int | None:
    try:
        return int(signals[key])
    except (KeyError, ValueError):
        return None


def classify(signals: Mapping[str, str], *, stall_after_s: float = STALL_AFTER_S) -> tuple[str, str]:
    """(state, reason) from one probe's signals; the rules of the module docstring, nothing else."""
    if signals.get("probe") != "complete":
        return "unknown", f"the probe's answer was cut short; {UNKNOWN_STATE}"
    if signals.get("launched") == "no":
        raise Refusal("no launch record for this run on the box; launch it with `runaudit launch` first")
    now = _int(signals, "now") or 0
    alive = signals.get("alive")
    session = signals.get("session", "n/a")
    exit_code = signals.get("exit_code")
    started = _int(signals, "started") or now
    if alive in ("yes", "unverified") or (alive is None and exit_code is None and session == "yes"):
        # Only writes made by this attempt count: train.csv from an earlier attempt is history.
        writes = [
            value
            for key in ("log_mtime", "progress_mtime", "heartbeat_mtime")
            if (value := _int(signals, key)) is not None
        ]
        age = now - max([value for value in writes if value >= started], default=started)
        what = f"pid {signals['pid']} alive" if "pid" in signals else "starting (tmux session present)"
        if alive == "unverified":
            what += " (no /proc to verify its identity)"
        if age > stall_after_s:
            return "stalled", f"{what}, but nothing written for {age} s (limit {stall_after_s:.0f} s)"
        return "running", f"{what}, last write {age} s ago"
    if alive is None and exit_code is None and session == "n/a" and now - started < START_GRACE_S:
        return "running", "starting: the wrapper has not written its pid yet"
    if exit_code is not None and exit_code.strip() == "0":
        return "finished", "the wrapper recorded exit code 0"
    return "dead", "; ".join(why_it_ended(signals))


def why_it_ended(signals: Mapping[str, str]) -> list[str]:
    """What ended a run that is not alive and did not exit 0, from the box's own records: the exit code or
    signal, a reboot (the boot id changed since launch), an OOM kill (the cgroup's oom_kill count rose
    since launch), a full disk (ENOSPC in the log's tail, and the free space now), a GPU Xid in the
    kernel log. Each is one clause; the first one says how the job ended."""
    code = (signals.get("exit_code") or "").strip()
    if code.isdigit() and int(code) > 128 and _signal_name(int(code) - 128):
        found = [f"the job was killed by {_signal_name(int(code) - 128)} (exit code {code})"]
    elif code:
        found = [f"the job exited with code {code}"]
    else:
        found = ["no live process and no exit code recorded (killed with its wrapper, or the box rebooted)"]
    start, now = signals.get("boot_id_start"), signals.get("boot_id")
    if not code and start and now and start != now:  # a job that recorded its exit ended before any reboot
        found.append("the box rebooted since launch (its boot id changed), taking the run with it")
    oom_start, oom_now = _int(signals, "oom_start"), _int(signals, "oom_now")
    if oom_start is not None and oom_now is not None and oom_now > oom_start:
        found.append(
            f"the kernel's OOM killer fired in the run's cgroup ({oom_now - oom_start} kill(s) since launch; "
            "the cgroup may hold the box's other jobs too): lower the batch size or the dataloader workers, "
            "or rent more memory"
        )
    if (_int(signals, "enospc_lines") or 0) > 0:
        free = _int(signals, "disk_avail_kb")
        left = f"; {free / 2**20:.1f} GiB free there now" if free is not None else ""
        found.append(f"the log reports 'No space left on device'{left}")
    xid_start, xid_count = _int(signals, "xid_start"), _int(signals, "xid_count")
    if signals.get("xid") and xid_count is not None and xid_count > (xid_start or 0):
        found.append(f"the kernel log has a GPU Xid error since launch: {signals['xid']}")
    return found


def _signal_name(number: int) -> str | None:
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def details(signals: Mapping[str, str]) -> str:
    parts = []
    if "progress_rows" in signals:
        parts.append(f"train.csv {signals['progress_rows']} rows")
    if "disk_used" in signals:
        parts.append(f"disk {signals['disk_used']} used, inodes {signals.get('inodes_used', '?')} used")
    if "gpu" in signals:
        parts.append(f"GPU util,MiB {signals['gpu']}")
    if signals.get("log_last"):
        parts.append(f"log: {signals['log_last']}")
    return "; ".join(parts)


def probe(remote: Remote, box: Box, run_id: str, *, progress_file: str = PROGRESS_FILE) -> dict[str, str]:
    answer = remote.run(probe_command(box, run_id, progress_file), timeout=60)
    return parse_signals(answer.stdout)


def watch(
    box: Box, run_id: str, *, stall_after_s: float = STALL_AFTER_S, progress_file: str = PROGRESS_FILE
) -> Status:
    """One status from live signals; a transport failure is ``unknown``, never ``dead``."""
    require_run_id(run_id)
    where = box.endpoint.label
    try:
        with Remote(box.endpoint) as remote:
            signals = probe(remote, box, run_id, progress_file=progress_file)
    except TransportError as exc:
        return Status(run_id, where, "unknown", str(exc))
    state, reason = classify(signals, stall_after_s=stall_after_s)
    extra = details(signals)
    return Status(run_id, where, state, f"{reason}; {extra}" if extra else reason, signals)


def _main(args: argparse.Namespace) -> int:
    status = watch(
        box_from_args(args), args.run_id, stall_after_s=args.stall_after, progress_file=args.progress_file
    )
    if args.json:
        print(json.dumps(asdict(status), indent=2))
    else:
        print(status.line(), file=sys.stdout if status.state in ("running", "finished") else sys.stderr)
    return EXIT_STATUS[status.state]


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "watch",
        help="one-shot state of a launched run: running, finished, dead, stalled or unknown",
        description="Exit status: 0 running or finished, 1 dead or stalled, 3 unknown (transport failed). "
        "With --follow it probes again until the run ends and says why it ended.",
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    add_box_arguments(parser)
    parser.add_argument(
        "--stall-after",
        type=float,
        default=STALL_AFTER_S,
        metavar="SECONDS",
        help="alive but silent this long is 'stalled' (default: %(default)s)",
    )
    parser.add_argument(
        "--progress-file",
        default=PROGRESS_FILE,
        help="progress file under --remote-root whose writes count as progress (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the status and its signals as JSON")
    parser.set_defaults(handler=_main)
