"""``runaudit down``: the teardown gate. It stops nothing unless every run on the box is proven home or
knowingly abandoned.

The box is named as for every remote verb (``--host/--port/--user/--identity/--known-hosts
--remote-root``; strict host keys, secrets by name only). Over one SSH connection ``down`` first takes
the box's inventory under the remote root: ``active/*`` (live runs), ``export/*``, ``export/.partial/*``
(an interrupted close), ``export/hardware/*``, ``runs/*`` and ``runs/hardware/*`` (capsules accepted on
the box) and ``quarantine/*`` (failed closes, ``<id>--<attempt>``), with every file of each capsule folder
and of what ``close`` seals in a live run's folder hashed on the box, each live run's writer lock
probed (:mod:`runaudit.workspace`: a trainer holds it while it runs), and what still runs found: the jobs
``runaudit launch`` started that have not ended, for this project root or any other (their attempts under
``--state-dir``: a root spelled another way, through a link, is another key there), the queue runners
holding ``queues/.<name>.lock``, and any other project root those launches recorded that still holds runs
(the whole box goes, that root too), and the box's kernel boot id (one equal to this machine's is this
machine: a copy pulled onto it goes with it). Once the receipts are checked the box is listed again, and
any change since the first listing is a refusal. A box it cannot list or hash
(a transport failure, a refused host key, a remote root that does not exist, no Python to hash with, a file it
cannot read) is a refusal, never an approval. Names from the box are untrusted: only a safe id is looked up
among the local receipts (whose own manifests name the folders checked), never joined to a local path
by itself; any other name is shown escaped (``repr``) and can only be abandoned, by exactly that name.

Then, in order, refusing at the first failure:

1. every run found on the box and every run named with ``--run``/``--roster`` (default: the inventory)
   has a current receipt over bytes still present here (:func:`runaudit.receipts.receipt_status`, which
   re-hashes any file changed since it was verified), or is named with ``--abandon ID`` (an unsafe name
   by exactly that name; one naming nothing on the box, or a run also named, is refused); an empty
   inventory with no run named, or a remote root holding none of the areas, proves nothing about the
   remote root. A receipt covers the bytes it verified, not a folder of the same name: a run whose
   capsule folder on the box is not, file for file, what its pull listed, one the box is closing again
   (``export/.partial/<id>``), or one whose ``active/<id>`` holds bytes among those ``close`` seals that
   its sealed capsule on the box does not (training resumed after the pull, compared by content, never by
   clock), is refused until it is pulled and verified again, or abandoned; so is a live run whose writer
   lock a trainer holds (or that cannot be probed), and a launched job or queue runner still running
   (before its trainer ever made ``active/<id>``): tearing down would kill it mid-write; a queue runner is
   abandoned as ``queue/<name>``. A hardware
   capsule, which no pull manifest lists, is covered only by abandoning it as ``hardware/<id>``, and a
   quarantined attempt (a close that failed: no pull brings it home, and its bytes are not the capsule a
   receipt verified) only as ``quarantine/<id>--<attempt>``;
2. the profile's teardown plan is shown: the meter-stop verb, what it deletes, whether it can be undone,
   the other steps and the billables that outlive it, and every danger clock (a profile whose teardown
   differs per member needs the member first);
3. an irreversible verb whose governing fact is stamped more than six months ago needs
   ``--facts-reverified`` (re-check the provider's docs first);
4. ``--confirm <target>`` must repeat ``--target`` exactly.

Only then is the teardown record ``<root>/_trust/teardowns/<target>-<UTC stamp>.json`` written
atomically (the box, its inventory, each run's receipt, the abandoned runs), and only then, and only if
the profile defines a command for its meter-stop verb, is that command run; otherwise ``down`` says what
to do in the console and how to prove it landed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import ipaddress
import os
import re
import shlex
import string
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import runaudit
from runaudit import clock
from runaudit.atomic import write_json_atomic
from runaudit.clock import stamp, utc_text
from runaudit.ids import is_safe_id
from runaudit.mounts import served_by
from runaudit.platforms import Profile
from runaudit.receipts import HOLDERS, RunReceipt, receipt_status
from runaudit.roster import parse_roster, read_roster
from runaudit.runners.box import Box, add_box_arguments, box_from_args
from runaudit.runners.close import REASON_FILE, SEALED_ENTRIES
from runaudit.runners.ssh import UNKNOWN_STATE, Remote
from runaudit.runners.watch import JOB_ALIVE, START_GRACE_S
from runaudit.usage import Refusal, existing_dir
from runaudit.verdict import shell_word
from runaudit.workspace import LOCK_FILE

RECORD_VERSION = "runaudit.teardown/1"
# The listing hashes every capsule on the box: tens of GiB at the disk's rate (a few hundred MB/s) take minutes.
INVENTORY_TIMEOUT_S = 3600
NOTHING_STOPPED = "nothing was stopped"
# Where Linux tells the id it drew at boot: two machines never share one, a box and a client in one kernel do.
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# ``--abandon=NAME`` with the equals sign: a name from the box may start with "-", which argparse would
# otherwise take for an option.
ABANDON_BY_NAME = "abandon it by this exact name (--abandon=NAME)"
# Where runs live on the box, and what being there means. Order is the order they are reported in.
AREAS: Mapping[str, str] = {
    "active": "live",
    "export": "sealed",
    "export/.partial": "closing, interrupted",
    "export/hardware": "sealed",
    "runs": "accepted",
    "runs/hardware": "accepted",
    "quarantine": "quarantined",
}
# What an entry that is a folder (or a link to one) is listed as.
FOLDER_KINDS = ("dir", "link-dir")
# What the box holds beyond the remote root's folders, found by the listing: a job ``runaudit launch``
# started that has not ended (its attempt in ``--state-dir``: the wrapper's pid alive, or still starting),
# for this root or another; a queue runner holding its queue's lock (``queues/.<name>.lock``); another
# project root those launches recorded that still holds runs. Tearing down kills a job mid-run, whatever a
# receipt says of the bytes it wrote before, and takes the other root with the box.
RUNNING: Mapping[str, str] = {
    "jobs": "a launched job, running",
    "jobs-elsewhere": "a launched job of another project root, running",
    "queues": "a queue runner, running",
    "roots-elsewhere": "another project root on the box",
}
# The states of a job the listing reports as running: its pid alive (``unverified``: a box with no
# ``/proc``), or started and not yet past writing its pid.
JOB_STATES = ("yes", "unverified", "starting")
# Areas whose folders are whole capsules: the box's copy must be, file for file, what the receipt verified.
CAPSULE_AREAS = ("export", "runs")
# Hardware capsules: ``runaudit manifest`` lists none (runners/manifest.py), so no receipt can cover one.
HARDWARE_AREAS = ("export/hardware", "runs/hardware")
# What no receipt covers is abandoned by a key naming its kind: ``hardware/<id>``, ``quarantine/<attempt>``.
UNRECEIPTED_KINDS = ("hardware/", "quarantine/", "queue/", "job/", "root/")
# Entries of an area that belong to the harness, not to a run: the sub-areas and close's lock file.
HOUSEKEEPING = {
    ("export", ".partial"): ("dir", "link-dir"),
    ("export", "hardware"): ("dir", "link-dir"),
    ("export", ".close.lock"): ("empty",),  # a lock file holding bytes is not close's
    ("runs", "hardware"): ("dir", "link-dir"),
}
# Why a live run whose writer lock is held, or could not be probed, blocks: the trainer writes bytes no
# receipt covers, and tearing down kills it.
LIVE_WRITER = {
    "held": (
        "a writer holds active/{run}/{lock}: training (or a close sealing it) is running there now, and "
        "tearing down kills it and loses what it writes next; let it finish, then close, pull and verify "
        "it, or abandon it"
    ),
    "unknown": (
        "its active/{run}/{lock} is not a plain file the box could probe, so whether training is running "
        "there is not known; look on the box, then abandon it if you accept losing it"
    ),
}
STILL_RUNNING = {
    "jobs": (
        "a job runaudit launch started for it has not ended (its wrapper {state}): tearing down kills it and "
        "loses what it writes next; let it finish (runaudit watch {run} --follow), then close, pull and verify "
        "it, or abandon it"
    ),
    "jobs-elsewhere": (
        "a job runaudit launch started on this box for another project root (its attempts in {name} under "
        "--state-dir) has not ended (its wrapper {state}): tearing the box down kills it too; let it finish, "
        "or abandon it as job/{name} (--abandon=job/{name})"
    ),
    "roots-elsewhere": (
        "runaudit launched runs on this box in another project root, {detail}, which still holds {areas}: down "
        "looks only under the remote root, and tearing the box down takes that root too; list it with "
        "runaudit down --remote-root {detail} (without --confirm), then abandon it here as root/{name} "
        "(--abandon=root/{name})"
    ),
    "queues": (
        "the runner of queue {name} holds queues/.{name}.lock: it trains the queue's runs one after another, "
        "and tearing down kills it mid-run; let it finish, then pull and verify what it sealed, or abandon it "
        "as queue/{name} (--abandon=queue/{name})"
    ),
}
# What the listing's answer for a running job says, in words.
JOB_STATE_WORDS = {
    "yes": "is alive",
    "unverified": "answers signals on a box with no /proc to confirm its identity",
    "starting": "is still starting",
}
# close.py names a quarantined attempt ``<run id>--<attempt id>`` (runaudit.clock.attempt_id: 20260101T000000Z-abc123).
QUARANTINED = re.compile(r"(?P<run>.+)--\d{8}T\d{6}Z-[0-9a-f]{6}", re.DOTALL)  # matched whole (fullmatch)

# POSIX sh, read-only. Every name goes back hex-encoded (a name may hold a newline or any byte), and a
# final sentinel shows that the answer was not cut short. Symlinked areas are followed (a data disk), and
# so is a live run's folder that is a link (a workspace on the data disk). The files of every sealed or
# accepted capsule folder (export/<id>, runs/<id>) and of every entry close seals in a live run's folder
# go back with their size and SHA-256, hashed on the box by :data:`HASHER`: what a receipt covers is
# compared by content, never by name or clock. A live folder that cannot be read is ``unlisted``; a live
# folder's writer lock is probed by :data:`WRITER`. The box's Python runs isolated (``-I``: no module of
# the login folder shadows the standard library), and its answer counts only when it says it finished: a
# ``--python`` that exits 0 having printed nothing (a broken shim) hashed nothing.
INVENTORY = r"""
echo "machine $(printf '%s' "${RUNAUDIT_BOX_BOOT_ID:-$(head -c 64 /proc/sys/kernel/random/boot_id 2>/dev/null)}" | od -An -v -tx1 | tr -d ' \n')"
echo "names $({ hostname; hostname -f; awk '/\/32 host LOCAL/ {print a} {a=$2}' /proc/net/fib_trie; awk '{print $1}' /proc/net/if_inet6; } 2>/dev/null | head -c 16384 | od -An -v -tx1 | tr -d ' \n')"
if [ ! -d "$R" ]; then echo "root=missing"; echo "inventory=complete"; exit 0; fi
echo "root=present"
if ! command -v "$PY" >/dev/null 2>&1; then echo "hasher=missing"; echo "inventory=complete"; exit 0; fi
digests() {
  label=$1; base=$2; shift 2
  out=$("$PY" -I -c "$HASHER" "$label" "$base" "$@") || out=
  case "$out" in
    *"hashed $label") printf '%s\n' "$out" ;;
    *) echo "unhashed $label" ;;
  esac
}
for area in active export export/.partial export/hardware runs runs/hardware quarantine; do
  d="$R/$area"
  if [ ! -e "$d" ] && [ ! -L "$d" ]; then echo "area $area absent"; continue; fi
  if [ ! -d "$d" ] || [ ! -r "$d" ] || [ ! -x "$d" ]; then echo "area $area unreadable"; continue; fi
  echo "area $area present"
  for p in "$d"/* "$d"/.[!.]* "$d"/..?*; do
    if [ ! -e "$p" ] && [ ! -L "$p" ]; then continue; fi
    if [ -L "$p" ] && [ -d "$p" ]; then kind=link-dir
    elif [ -L "$p" ]; then kind=link
    elif [ -d "$p" ]; then kind=dir
    elif [ -f "$p" ] && [ -s "$p" ]; then kind=file
    elif [ -f "$p" ]; then kind=empty
    else kind=other; fi
    hex=$(printf '%s' "${p##*/}" | od -An -v -tx1 | tr -d ' \n')
    echo "entry $area $kind $hex"
    if [ "$kind" != dir ] && [ "$area $kind" != "active link-dir" ]; then continue; fi
    case "$area/${p##*/}" in export/.partial|export/hardware|runs/hardware) continue ;; esac
    case "$area" in
      export|runs) digests "$area $hex" "$p" "$p" ;;
      active)
        if [ ! -r "$p" ] || [ ! -x "$p" ]; then echo "unlisted $hex"; continue; fi
        set --
        for n in $SEALED; do
          if [ -e "$p/$n" ] || [ -L "$p/$n" ]; then set -- "$@" "$p/$n"; fi
        done
        if [ $# -gt 0 ]; then digests "$area $hex" "$p" "$@"; fi
        if [ -e "$p/$LOCK" ] || [ -L "$p/$LOCK" ]; then
          state=$("$PY" -I -c "$WRITER" "$p/$LOCK") || state=
          case "$state" in free) ;; held) echo "writer $area $hex held" ;; *) echo "writer $area $hex unknown" ;; esac
        fi ;;
    esac
  done
done
if [ -d "$STATE" ]; then
  for s in "$STATE"/*/*; do
    if [ ! -f "$s/current" ] || [ -L "$s" ]; then continue; fi
    A="$s/$(head -n 1 "$s/current")"
    if [ -f "$A/exit_code" ]; then continue; fi
    live=$(job_alive "$A")
    if [ -z "$live" ]; then
      sess=$(head -n 1 "$A/session" 2>/dev/null); since=$(head -n 1 "$A/started" 2>/dev/null)
      if [ -n "$sess" ] && command -v tmux >/dev/null 2>&1 && tmux -L "$SOCK" has-session -t "=$sess" 2>/dev/null; then
        live=starting
      else
        case "$since" in ''|*[!0-9]*) ;; *) if [ $(( $(date +%s) - since )) -lt "$GRACE" ]; then live=starting; fi ;; esac
      fi
    fi
    k=${s%/*}; k=${k##*/}
    if [ "$k" = "$KEY" ]; then what="job ${s##*/}"; else what="job-elsewhere $k/${s##*/}"; fi
    case "$live" in
      yes|unverified|starting) echo "${what%% *} $(printf '%s' "${what#* }" | od -An -v -tx1 | tr -d ' \n') $live" ;;
    esac
  done
fi
if [ -e "$R/queues" ] && { [ ! -d "$R/queues" ] || [ ! -r "$R/queues" ] || [ ! -x "$R/queues" ]; }; then
  echo "area queues unreadable"
fi
if [ -d "$STATE" ]; then
  for k in "$STATE"/*; do
    if [ ! -d "$k" ] || [ -L "$k" ] || [ "${k##*/}" = "$KEY" ]; then continue; fi
    out=$("$PY" -I -c "$ROOTS" "$k" "$R") || out=
    case "$out" in
      *"roots "*" done") printf '%s\n' "$out" ;;
      *) echo "roots-unread $(printf '%s' "${k##*/}" | od -An -v -tx1 | tr -d ' \n')" ;;
    esac
  done
fi
for q in "$R/queues"/.*.lock; do
  if [ ! -e "$q" ] && [ ! -L "$q" ]; then continue; fi
  n=${q##*/}; n=${n#.}; hex=$(printf '%s' "${n%.lock}" | od -An -v -tx1 | tr -d ' \n')
  state=$("$PY" -I -c "$WRITER" "$q") || state=
  case "$state" in free) ;; held) echo "queue $hex held" ;; *) echo "queue $hex unknown" ;; esac
done
echo "inventory=complete"
"""

# Run by the box's Python (one process per folder; a shell loop forked six processes a file): every path
# below the arguments, without following a link, as ``file <label> <hex path> <size> <sha256>`` for a
# regular file, ``odd <label> <hex path>`` for anything else, then ``hashed <label>``; it exits 1 at the
# first thing it cannot read or walk (the listing then says ``unhashed <label>``). Paths are relative to
# the base, hex-encoded as the listing's names are.
HASHER = r"""
import hashlib, os, stat, sys
label, base, pending = sys.argv[1], sys.argv[2], sys.argv[:2:-1]
def shown(path):
    return os.fsencode(path[len(base) + 1:]).hex()
while pending:
    path = pending.pop()
    try:
        info = os.lstat(path)
        if stat.S_ISDIR(info.st_mode):
            pending += [os.path.join(path, name) for name in sorted(os.listdir(path), reverse=True)]
        elif stat.S_ISREG(info.st_mode):
            digest, size = hashlib.sha256(), 0
            with open(path, "rb", buffering=0, opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
                    size += len(block)
            print("file", label, shown(path), size, digest.hexdigest())
        else:
            print("odd", label, shown(path))
    except OSError:
        sys.exit(1)
print("hashed", label)
"""


# Run by the box's Python on another key's folder of the state folder (``<state-dir>/<key>``) and the remote
# root: every project root its launches recorded (``launch.json``), other than the remote root itself (a
# root spelled through a link is the same root), that still holds runs, as ``root-elsewhere <hex key> <hex
# root> <areas>``; ``roots-unread <hex key>`` when an attempt's record is missing, cut short, past CAP or
# names no absolute root (its root may hold the only copy of a run); then ``roots <hex key> done``. A root
# recorded before launch wrote ``root`` is read from ``workdir``, the root when no ``--workdir`` was given.
ROOTS = r"""
import json, os, sys
CAP = 64 << 20  # a launch record holds the job's command line: a sharded dataset's paths run past 1 MiB
folder, own = sys.argv[1], os.path.realpath(sys.argv[2])
key = os.fsencode(os.path.basename(folder)).hex()
roots, unread = set(), False
for run in sorted(os.listdir(folder)):
    attempts = os.path.join(folder, run)
    for attempt in sorted(os.listdir(attempts)) if os.path.isdir(attempts) else ():
        if not os.path.isdir(os.path.join(attempts, attempt)):
            continue  # the run's "current" pointer
        try:
            with open(os.path.join(attempts, attempt, "launch.json"), "rb") as handle:
                raw = handle.read(CAP + 1)
            record = json.loads(raw) if len(raw) <= CAP else None
            root = record.get("root") or record.get("workdir")
        except (OSError, ValueError, AttributeError, RecursionError):
            root = None
        if isinstance(root, str) and root.startswith("/"):
            roots.add(os.path.realpath(root))
        else:  # missing, cut short, too long: the root it names may hold the only copy of a run
            unread = True
def holds(folder):
    try:
        return os.path.isdir(folder) and bool(os.listdir(folder))
    except OSError:
        return True  # what cannot be listed may hold runs
for root in sorted(roots - {own}):
    held = [area for area in ("active", "export", "runs", "quarantine") if holds(os.path.join(root, area))]
    if held:
        print("root-elsewhere", key, os.fsencode(root).hex(), ",".join(held))
if unread:
    print("roots-unread", key)
print("roots", key, "done")
"""


# Run by the box's Python on a live run's writer lock (runaudit.workspace): ``held`` when a trainer holds it,
# ``free`` when nobody does (or the file is gone), ``unknown`` when it is not a regular file or cannot be
# opened. A shared lock, taken without waiting and dropped at once, is the probe: it can only fail while a
# writer (or a close) holds the exclusive one.
WRITER = r"""
import fcntl, os, stat, sys
path = sys.argv[1]
try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    finally:
        os.close(fd)
except BlockingIOError:
    print("held")
except FileNotFoundError:
    print("free")
except OSError:
    print("unknown")
else:
    print("free")
"""


class Refused(Refusal):
    """``down`` did nothing; the message says why and what would unblock it."""


@dataclass(frozen=True)
class Entry:
    """One thing found in an area on the box. ``name`` is untrusted: it is compared, never a local path."""

    area: str
    name: str  # decoded with surrogateescape, so any byte round-trips to an exact ``--abandon``
    kind: str
    # What the box hashed under the folder (capsule folders, and what close seals in a live one): each
    # file's path below it, size and SHA-256; and the paths that are not regular files.
    files: tuple[tuple[str, int, str], ...] = ()
    odd: tuple[str, ...] = ()
    resumed: bool = False  # a live run's folder holding bytes close seals that its sealed capsule does not
    # A live run's writer lock as the box probed it: "held" (training is running), "unknown" (it could not
    # be probed), or None (no lock file, or nobody holds it).
    writer: str | None = None
    # Another project root's path on the box (untrusted, shown escaped), for an entry of ``roots-elsewhere``.
    detail: str = ""

    @property
    def newer_than_a_receipt(self) -> bool:
        """Whether the box holds bytes of this run that a receipt made before them cannot cover."""
        return self.area == "export/.partial" or self.resumed

    @property
    def hardware(self) -> bool:
        return self.area in HARDWARE_AREAS

    @property
    def run_id(self) -> str | None:
        """The run a receipt may cover, or None when none can: an unsafe name, a hardware capsule, or a
        quarantined attempt (a close that failed: its bytes are not the capsule any pull brought home)."""
        if self.hardware or self.area in ("quarantine", "queues", "jobs-elsewhere", "roots-elsewhere"):
            return None
        return self.name if is_safe_id(self.name) else None

    @property
    def key(self) -> str:
        """What covers it: a receipt for ``run_id``, or ``--abandon`` naming exactly this key (a hardware
        capsule as ``hardware/<name>``, a quarantined attempt as ``quarantine/<name>``, which no run id
        can be)."""
        if self.hardware:
            return f"hardware/{self.name}"
        if self.area == "quarantine":
            return f"quarantine/{self.name}"
        if self.area == "queues":
            return f"queue/{self.name}"
        if self.area == "jobs-elsewhere":
            return f"job/{self.name}"
        if self.area == "roots-elsewhere":
            return f"root/{self.name}"
        return self.run_id or self.name

    @property
    def where(self) -> str:
        """``active/``, ``quarantine/``, ..., and what being there means."""
        if self.area in RUNNING:
            return RUNNING[self.area]
        detail = AREAS[self.area] if self.kind in FOLDER_KINDS else f"{AREAS[self.area]}, {self.kind}"
        if self.resumed:
            detail += ", holding files close seals that its sealed capsule does not hold"
        return f"{self.area}/, {detail}"

    def as_record(self) -> dict[str, Any]:
        name = self.name if is_safe_id(self.name) else repr(self.name)
        return {
            "area": self.area,
            "name": name,
            "run": shown(self.key),
            "kind": self.kind,
            "state": RUNNING.get(self.area) or AREAS[self.area],
            "resumed": self.resumed,
            "writer": self.writer,
        }


@dataclass(frozen=True)
class Inventory:
    """What the box holds under its remote root, as one listing saw it."""

    box: str  # the endpoint label, user@host:port
    root: str
    entries: tuple[Entry, ...] = ()
    areas: tuple[str, ...] = ()  # the areas that exist under the root
    host: str = ""  # the box's host as named: a verified copy on its own NFS export goes with it
    # The box's kernel boot id, as it says (empty where it has none to say): one equal to this machine's
    # means the copy pulled "home" lies on the box itself.
    boot_id: str = ""
    # The names and addresses the box gives for itself (hostname, each local address): a copy on an NFS
    # export of the box mounted under any of them goes with the box.
    names: tuple[str, ...] = ()

    def by_run(self) -> dict[str, list[Entry]]:
        found: dict[str, list[Entry]] = {}
        for entry in self.entries:
            found.setdefault(entry.key, []).append(entry)
        return found


@dataclass(frozen=True)
class Approval:
    """What the teardown rests on: the receipt behind each run and the runs knowingly abandoned."""

    inventory: Inventory
    named: list[str]
    receipts: dict[str, RunReceipt] = field(default_factory=dict)
    abandoned: list[str] = field(default_factory=list)


def shown(key: str) -> str:
    """A run as a message shows it: a safe id (or ``hardware/<safe id>``, ``quarantine/<safe id>``) as is,
    anything else escaped."""
    bare = next((key[len(kind) :] for kind in UNRECEIPTED_KINDS if key.startswith(kind)), key)
    parts = bare.split("/") if bare != key else [bare]  # job/<project key>/<run>: two ids
    return key if len(parts) <= 2 and all(is_safe_id(part) for part in parts) else repr(key)


def parse_inventory(text: str, box: str, root: str) -> Inventory:
    """The listing's answer as an :class:`Inventory`; a :class:`Refused` when it proves nothing."""
    lines = text.splitlines()
    cannot = f"down refused: cannot inventory the box {box} under {root}"
    if "inventory=complete" not in lines:
        raise Refused(f"{cannot} (its answer was cut short); {NOTHING_STOPPED}")
    if "root=missing" in lines:
        raise Refused(
            f"down refused: {root} does not exist on {box}; nothing proves the remote root is right "
            f"(check --remote-root); {NOTHING_STOPPED}"
        )
    if "hasher=missing" in lines:
        raise Refused(
            f"{cannot} (it has no Python, --python, to hash its capsules with, so what it holds cannot be "
            f"compared with the receipts); {NOTHING_STOPPED}"
        )
    entries: list[Entry] = []
    contents: list[_Content] = []  # what the box hashed or probed under each entry, collected in lists
    areas: list[str] = []
    boot_id = ""
    names: tuple[str, ...] = ()
    for line in lines:
        words = line.split(" ")
        if words[0] == "machine" and len(words) == 2:
            boot_id = _decoded(words[1], cannot).strip()
            continue
        if words[0] == "names" and len(words) <= 2:
            names = own_names(_decoded(words[1], cannot) if len(words) == 2 else "")
            continue
        if words[0] == "area" and len(words) == 3 and words[2] == "unreadable":
            raise Refused(f"{cannot} ({root}/{words[1]} cannot be listed); {NOTHING_STOPPED}")
        if words[0] == "area" and len(words) == 3 and words[2] == "present" and words[1] in AREAS:
            areas.append(words[1])
        elif words[0] == "unlisted" and len(words) == 2:
            raise Refused(
                f"{cannot} (active/{shown(_decoded(words[1], cannot))} cannot be listed: whether training "
                f"resumed there is not known); {NOTHING_STOPPED}"
            )
        elif words[0] in ("job", "job-elsewhere", "queue", "root-elsewhere"):
            entries.append(_running(words, cannot))
            contents.append(_Content())
        elif words[0] == "roots" and len(words) == 3 and words[2] == "done":
            continue  # the shell passes on only an answer that ends so
        elif words[0] == "roots-unread" and len(words) == 2:  # abandoned like a root it names
            entries.append(Entry("roots-elsewhere", _decoded(words[1], cannot), "unread"))
            contents.append(_Content())
        elif words[0] in CONTENT_SHAPES:
            _add_content(entries[-1] if entries else None, contents[-1] if contents else None, words, cannot)
        elif words[0] == "entry":
            if len(words) != 4 or words[1] not in AREAS:
                raise Refused(f"{cannot} (an unexpected listing line {line[:80]!r}); {NOTHING_STOPPED}")
            name = _decoded(words[3], cannot)
            if words[2] not in HOUSEKEEPING.get((words[1], name), ()):
                entries.append(Entry(words[1], name, words[2]))
                contents.append(_Content())
    entries = [content.given_to(entry) for entry, content in zip(entries, contents, strict=True)]
    return Inventory(box, root, tuple(mark_resumed(entries)), tuple(areas), boot_id=boot_id, names=names)


# A box's own names and addresses, kept (a box may list anything; a machine has a few dozen at most).
MAX_OWN_NAMES = 256


def own_names(text: str) -> tuple[str, ...]:
    """The box's names and addresses from its ``names`` line, printable, at most :data:`MAX_OWN_NAMES`; an
    IPv6 address as ``/proc/net/if_inet6`` spells it (32 hex digits) in the usual notation. Loopback names
    every machine itself, so it names no box: a mount served over it is this machine's own (``mounts``)."""
    names: list[str] = []
    for word in text.split():
        if not word.isprintable() or word.lower() == "localhost":
            continue
        if len(word) == 32 and all(digit in string.hexdigits for digit in word):
            word = str(ipaddress.IPv6Address(int(word, 16)))
        try:
            if ipaddress.ip_address(word).is_loopback:
                continue
        except ValueError:
            pass  # a name, not an address
        names.append(word)
    return tuple(dict.fromkeys(names))[:MAX_OWN_NAMES]


def _running(words: list[str], cannot: str) -> Entry:
    """A job or queue runner the listing found running, as an entry: ``job <hex run> <state>``, ``queue <hex
    name> held|unknown``."""
    if len(words) == 3 and words[0] == "job" and words[2] in JOB_STATES:
        return Entry("jobs", _decoded(words[1], cannot), words[2])
    if len(words) == 3 and words[0] == "job-elsewhere" and words[2] in JOB_STATES:
        return Entry("jobs-elsewhere", _decoded(words[1], cannot), words[2])
    if len(words) == 3 and words[0] == "queue" and words[2] in LIVE_WRITER:
        return Entry("queues", _decoded(words[1], cannot), "lock", writer=words[2])
    areas = words[3].split(",") if len(words) == 4 else []
    if words[0] == "root-elsewhere" and areas and set(areas) <= {"active", "export", "runs", "quarantine"}:
        return Entry(
            "roots-elsewhere", _decoded(words[1], cannot), ",".join(areas), detail=_decoded(words[2], cannot)
        )
    raise Refused(f"{cannot} (an unexpected listing line {' '.join(words)[:80]!r}); {NOTHING_STOPPED}")


# The lines of what the box hashed or probed under the entry listed last, by their number of words.
CONTENT_SHAPES = {"file": 6, "odd": 4, "hashed": 3, "unhashed": 3, "writer": 4}


@dataclass
class _Content:
    """What the box hashed or probed under one entry, collected line by line (appending to an entry's
    tuples instead made a listing quadratic in its files: 80,000 files took 21 s to read)."""

    files: list[tuple[str, int, str]] = field(default_factory=list)
    odd: list[str] = field(default_factory=list)
    writer: str | None = None

    def given_to(self, entry: Entry) -> Entry:
        if not (self.files or self.odd or self.writer):
            return entry
        return replace(entry, files=tuple(self.files), odd=tuple(self.odd), writer=self.writer)


def _add_content(entry: Entry | None, content: _Content | None, words: list[str], cannot: str) -> None:
    """Add one line of what the box hashed or probed under ``entry``, which must name exactly that entry."""
    line = " ".join(words)
    unexpected = f"{cannot} (an unexpected listing line {line[:80]!r}); {NOTHING_STOPPED}"
    if (
        entry is None
        or content is None
        or len(words) != CONTENT_SHAPES[words[0]]
        or words[1:3] != [entry.area, _encoded(entry.name)]
    ):
        raise Refused(unexpected)
    where = f"{entry.area}/{shown(entry.name)}"
    if words[0] == "unhashed":
        raise Refused(
            f"{cannot} (its Python could not hash {where}: a file or folder it cannot read, or a --python "
            f"that did not run the hasher to its end); {NOTHING_STOPPED}"
        )
    if words[0] == "writer":
        if entry.area != "active" or words[3] not in LIVE_WRITER:
            raise Refused(unexpected)
        content.writer = words[3]
    elif words[0] == "odd":
        content.odd.append(_decoded(words[3], cannot))
    elif words[0] == "file":
        if not re.fullmatch(r"[0-9]{1,20}", words[4]) or not re.fullmatch(r"[0-9a-f]{64}", words[5]):
            raise Refused(unexpected)
        content.files.append((_decoded(words[3], cannot), int(words[4]), words[5]))


def mark_resumed(entries: list[Entry]) -> list[Entry]:
    """Mark each live run whose folder holds bytes close seals that its sealed capsule on the box does not.

    Compared by content, not by clock: a copy across filesystems leaves active/ holding the same bytes as
    export/ (not resumed), while files restored with old times, or written under a clock set back, are
    still new bytes. A live run with no sealed capsule on the box holds nothing a receipt could cover.
    """
    sealed = {
        entry.name: set(entry.files) for entry in entries if entry.area == "export" and entry.kind == "dir"
    }
    marked = []
    for entry in entries:
        if entry.area == "active" and (entry.files or entry.odd):
            held = sealed.get(entry.name)
            entry = replace(entry, resumed=held is None or bool(entry.odd) or not set(entry.files) <= held)
        marked.append(entry)
    return marked


def _decoded(hexed: str, cannot: str) -> str:
    """A name as the listing sent it (its bytes in hex), decoded so that any byte round-trips."""
    try:
        return bytes.fromhex(hexed).decode("utf-8", "surrogateescape")
    except ValueError:
        raise Refused(f"{cannot} (an undecodable name {hexed[:80]!r}); {NOTHING_STOPPED}") from None


def _encoded(name: str) -> str:
    """A name as the listing spells it: its bytes in hex."""
    return name.encode("utf-8", "surrogateescape").hex()


def inventory_command(box: Box) -> str:
    return (
        f"R={shlex.quote(str(box.root))}\nSEALED={shlex.quote(' '.join(SEALED_ENTRIES))}\n"
        f"PY={shlex.quote(box.python)}\nHASHER={shlex.quote(HASHER)}\nLOCK={shlex.quote(LOCK_FILE)}\n"
        f"WRITER={shlex.quote(WRITER)}\nSTATE={shlex.quote(box.state_dir)}\nKEY={shlex.quote(box.key)}\n"
        f"SOCK={shlex.quote(box.tmux_socket)}\nGRACE={START_GRACE_S}\nROOTS={shlex.quote(ROOTS)}\n"
        f"{JOB_ALIVE}{INVENTORY}"
    )


def take_inventory(box: Box) -> Inventory:
    """List the box's runs over one SSH connection; any failure to list is a refusal, never an empty box.

    ``down`` lists twice: before the receipts are checked and after (:func:`unchanged_since`)."""
    label, root = box.endpoint.label, str(box.root)
    try:
        with Remote(box.endpoint) as remote:
            answer = remote.run(inventory_command(box), timeout=INVENTORY_TIMEOUT_S)
    except Refusal as exc:  # a TransportError, or a named passphrase variable that is not set
        reason = str(exc).removesuffix(f"; {UNKNOWN_STATE}")
        raise Refused(
            f"down refused: cannot inventory the box {label} under {root} ({reason}); {NOTHING_STOPPED}"
        ) from None
    if not answer.ok:
        raise Refused(
            f"down refused: cannot inventory the box {label} under {root} (the listing exited "
            f"{answer.exit_code}: {answer.tail(2)}); {NOTHING_STOPPED}"
        )
    return replace(parse_inventory(answer.stdout, label, root), host=box.endpoint.host)


def coverage(root: Path, named: Sequence[str], inventory: Inventory, abandon: Iterable[str]) -> Approval:
    """Step 1: every run on the box or named has a current receipt, or is explicitly abandoned."""
    found = inventory.by_run()
    abandoned = list(dict.fromkeys(abandon))
    if not inventory.areas:
        raise Refused(
            f"down refused: the box {inventory.box} holds none of {', '.join(f'{area}/' for area in AREAS)} "
            f"under {inventory.root}: nothing proves the remote root is the project's (check --remote-root); "
            f"{NOTHING_STOPPED}"
        )
    if not named and not found:
        raise Refused(
            f"down refused: the box {inventory.box} holds no run under {inventory.root} (active/, export/, "
            "quarantine/ are empty or absent) and no run was named: nothing proves the remote root is "
            f"right (check --remote-root, or name the runs with --run); {NOTHING_STOPPED}"
        )
    if both := [key for key in abandoned if key in named]:
        raise Refused(
            f"down refused: {', '.join(map(shown, both))} is both named as proven home and abandoned; "
            f"drop one; {NOTHING_STOPPED}"
        )
    if stray := [key for key in abandoned if key not in found]:
        raise Refused(
            f"down refused: --abandon {', '.join(map(shown, stray))} names nothing on {inventory.box} under "
            f"{inventory.root}; check --remote-root and the exact name; {NOTHING_STOPPED}"
        )
    if inventory.boot_id and inventory.boot_id == this_boot_id():
        raise Refused(
            f"down refused: the box {inventory.box} is this machine (its kernel's boot id is this one's, "
            f"{inventory.boot_id}): every copy pulled and verified here lies on the box and goes with it; "
            f"pull the runs to another machine, verify them there and run down from it; {NOTHING_STOPPED}"
        )
    wanted = [key for key in dict.fromkeys([*named, *found]) if key not in abandoned]
    checked = [key for key in wanted if is_safe_id(key)]
    status = receipt_status(root, checked, check_bytes=True) if checked else None
    uncovered: list[str] = []
    for key in wanted:
        places = "; ".join(entry.where for entry in found[key]) if key in found else "named, not on the box"
        entries = found.get(key, ())
        if running := [entry for entry in entries if entry.area in RUNNING]:
            why = _still_running(running[0], key)
        elif any(entry.hardware for entry in entries):
            why = (
                "a hardware capsule, which no pull manifest lists (runaudit manifest leaves hardware/ out), "
                f"so no receipt covers it; copy it home yourself, then {ABANDON_BY_NAME}"
            )
        elif any(entry.area == "quarantine" for entry in entries):
            why = _quarantined(key.removeprefix("quarantine/"))
        elif not is_safe_id(key):
            why = f"not a safe run id, so no receipt can cover it; {ABANDON_BY_NAME}"
        elif misplaced := [
            entry for entry in entries if entry.area == "active" and entry.kind not in FOLDER_KINDS
        ]:
            why = (
                f"active/{key} is a {misplaced[0].kind}, not a run's folder: what it holds is on no receipt; "
                f"look on the box, then {ABANDON_BY_NAME}"
            )
        elif writers := {entry.writer for entry in entries if entry.writer is not None}:
            why = LIVE_WRITER["held" if "held" in writers else "unknown"].format(run=key, lock=LOCK_FILE)
        elif status is not None and (problems := status.runs[key].problems):
            why = "; ".join(line.removeprefix(f"run {key}: ") for line in problems)
        elif status is not None and (served := _not_home(root, status.runs[key], inventory)):
            why = served
        elif any(entry.newer_than_a_receipt for entry in entries):
            why = "the box holds bytes of it that its receipt, which covers only the bytes it verified, does not"
        elif status is not None and (differences := _unlike_the_receipt(entries, status.runs[key])):
            why = differences
        else:
            continue
        uncovered.append(f"{shown(key)} ({places}): {why}")
    if uncovered:
        raise Refused(
            f"down refused: no current receipt for every run on the box or named: {' | '.join(uncovered)}; "
            f"pull and verify them (runaudit pull), or pass --abandon ID for a run you accept losing; "
            f"{NOTHING_STOPPED}"
        )
    receipts = status.runs if status is not None else {}
    return Approval(inventory, list(named), dict(receipts), abandoned)


def this_boot_id() -> str:
    """This machine's kernel boot id, or "" where it has none (not Linux)."""
    try:
        return Path(BOOT_ID).read_text(encoding="ascii", errors="replace")[:64].strip()
    except OSError:
        return ""


def _not_home(root: Path, receipt: RunReceipt, inventory: Inventory) -> str | None:
    """Why the copy a receipt verified is not a copy brought home from the box, or None.

    ``runaudit verify`` run in the producer's own root (on the box, or a cluster's scratch) verifies
    ``export/<id>`` in place: its receipt proves the capsule whole, and ``down`` approved with no copy
    anywhere else. And a copy on an NFS export of the box itself goes with the box, whether it is mounted
    from the host SSH reaches or from any name or address the box gives for itself.
    """
    holder = receipt.document.get("holder") if receipt.document is not None else None
    if holder == "export":
        return (
            f"receipt {receipt.pull_id} verified export/{receipt.run_id} in place, where it was produced: it "
            f"proves the capsule whole, not that a copy left the box; pull it home (runaudit pull) into "
            f"runs/{receipt.run_id} and verify it there"
        )
    if not (inventory.host or inventory.names) or holder not in HOLDERS:
        return None
    return served_by(root / holder / receipt.run_id, inventory.host, inventory.names)


def _still_running(entry: Entry, key: str) -> str:
    """Why a job or queue runner still running blocks: tearing down kills it."""
    if entry.area == "queues" and entry.writer == "unknown":
        return (
            f"queues/.{shown(entry.name)}.lock is not a plain file the box could probe, so whether a queue "
            f"runner is running is not known; look on the box, then {ABANDON_BY_NAME}"
        )
    if entry.area == "roots-elsewhere" and entry.kind == "unread":
        return (
            f"the launch records in {shown(entry.name)} under --state-dir could not be read, so whether another "
            f"project root on this box holds runs is not known; look on the box, then {ABANDON_BY_NAME}"
        )
    state = JOB_STATE_WORDS.get(entry.kind, "")
    name = shown(key).removeprefix("job/") if entry.area == "jobs-elsewhere" else shown(entry.name)
    areas = ", ".join(f"{area}/" for area in entry.kind.split(","))
    return STILL_RUNNING[entry.area].format(
        run=shown(key), name=name, state=state, detail=shell_word(entry.detail), areas=areas
    )


def _quarantined(name: str) -> str:
    """Why a quarantined attempt blocks: its bytes are a close that failed, which nothing brings home."""
    match = QUARANTINED.fullmatch(name)
    of_run = f" of run {match['run']}" if match and is_safe_id(match["run"]) else ""
    return (
        f"a close{of_run} that failed, kept on the box with its reasons ({REASON_FILE}); no pull brings a "
        "quarantined attempt home and no receipt covers it, so tearing down deletes it: copy it home if you "
        f"want it, then {ABANDON_BY_NAME}"
    )


def _unlike_the_receipt(entries: Iterable[Entry], receipt: RunReceipt) -> str | None:
    """Why a capsule folder of the run on the box is not, file for file, the one the receipt verified.

    The receipt covers the bytes pulled, not a folder of the same name: a run minted again under the same
    id, or a capsule edited on the box after the pull, holds bytes that are nowhere else.
    """
    wanted = {str(item["path"]).split("/", 1)[1]: (item["bytes"], item["sha256"]) for item in receipt.entries}
    for entry in entries:
        if entry.area not in CAPSULE_AREAS:
            continue
        held = {path: (size, digest) for path, size, digest in entry.files}
        differences = [
            *(f"{_escaped(path)} is not a regular file" for path in entry.odd),
            *(
                f"{_escaped(path)} differs"
                for path in sorted(held.keys() & wanted.keys())
                if held[path] != wanted[path]
            ),
            *(f"{_escaped(path)} is not in the pull" for path in sorted(held.keys() - wanted.keys())),
            *(f"{_escaped(path)} is missing" for path in sorted(wanted.keys() - held.keys())),
        ]
        if differences:
            more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
            return (
                f"the box's {entry.area}/{entry.name} is not the capsule pull {receipt.pull_id} verified "
                f"({', '.join(differences[:3])}{more}): pull it again under a new pull id, or abandon it"
            )
    return None


def _escaped(path: str) -> str:
    """A path from the box as a message shows it: escaped unless it is plain printable ASCII."""
    return path if path.isascii() and path.isprintable() else repr(path)


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
    roster: Sequence[str],
    profile: Profile,
    target: str,
    confirm: str | None,
    *,
    inventory: Inventory,
    abandon: Iterable[str] = (),
    facts_reverified: bool = False,
    today: dt.date | None = None,
    say: Callable[[str], None] = print,
) -> Approval:
    """Raise :class:`Refused` unless every condition of the module docstring holds; else what it rests on.

    The inventory is a parameter so the plan logic can be exercised without a box; the command line
    always takes it from the box itself (:func:`take_inventory`).
    """
    approval = coverage(root, roster, inventory, abandon)
    if profile.needs_member:
        members = ", ".join(f"{profile.platform}:{name}" for name in profile.members)
        raise Refused(f"down refused: {profile.name}'s teardown differs per member; pass one of {members}")
    today = today or clock.today()
    for line in plan_lines(profile, target, today):
        say(line)
    if approval.abandoned:
        say(f"  ABANDONED, lost with the box: {', '.join(map(shown, approval.abandoned))}")
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
    return approval


def record_path(root: Path, target: str, now: dt.datetime, n: int = 1) -> Path:
    """``_trust/teardowns/<target>-<stamp>.json`` (``-<n>`` from the second record of one second on); the
    target is reduced to a safe file name, never a path."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", target).lstrip(".-") or "target"
    stem = f"{name}-{stamp(now)}" + (f"-{n}" if n > 1 else "")
    return root / "_trust" / "teardowns" / f"{stem}.json"


def _write_new_record(root: Path, target: str, now: dt.datetime, document: Mapping[str, Any]) -> Path:
    """The record under the first name no record holds: two approvals in one second keep both."""
    n = 1
    while True:
        try:
            return write_json_atomic(record_path(root, target, now, n), document, exclusive=True)
        except FileExistsError:
            n += 1


def write_record(
    root: Path, approval: Approval, profile: Profile, target: str, *, now: dt.datetime | None = None
) -> Path:
    """The teardown record: what was approved, against which box, resting on which receipts."""
    now = now or dt.datetime.now(dt.UTC)
    inventory = approval.inventory
    document = {
        "schema_version": RECORD_VERSION,
        "target": target,
        "profile": profile.name,
        # The plan approved, carried whole: ``runaudit clocks`` counts from it wherever it runs.
        "meter_stop": {"verb": profile.meter_stop.verb, "reversible": profile.meter_stop.reversible},
        "danger_clocks": [dict(clock) for clock in profile.danger_clocks],
        "box": inventory.box,
        "remote_root": inventory.root,
        "approved_utc": utc_text(now),
        "runaudit_version": runaudit.__version__,
        "inventory": [entry.as_record() for entry in inventory.entries],
        "named": list(approval.named),
        "roster": list(approval.receipts),
        "receipts": {
            run_id: {"pull_id": found.pull_id, "receipt": str(found.path)}
            for run_id, found in approval.receipts.items()
        },
        "abandoned": [shown(key) for key in approval.abandoned],
    }
    for folder in (root / "_trust", root / "_trust" / "teardowns"):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            raise Refused(
                f"down refused: {folder} is {'a symlink' if folder.is_symlink() else 'not a folder'}; the "
                f"teardown record is written only in a folder of the project's own; {NOTHING_STOPPED}"
            )
    try:
        return _write_new_record(root, target, now, document)
    except OSError as exc:
        raise Refused(
            f"down refused: the teardown record could not be written under {root / '_trust' / 'teardowns'} "
            f"({exc.strerror or exc}); {NOTHING_STOPPED}"
        ) from None


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
        raise Refusal(
            f"down {target}: the teardown command {argv[0]!r} is not installed; nothing was stopped"
        ) from None
    except subprocess.TimeoutExpired:
        raise Refusal(
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
        return read_roster(args.roster)  # a regular file, read up to a cap: a FIFO or /dev/zero is refused
    return parse_roster("\n".join(args.run), "--run") if args.run else []


def _target(text: str) -> str:
    """``--target`` as given: one printable line (it is repeated by ``--confirm`` and printed in the plan)."""
    if not text.strip() or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"expected the name of what is stopped, on one printable line; got {text!r}"
        )
    return text


def unchanged_since(first: Inventory, second: Inventory) -> None:
    """Refuse unless the box, listed again once the receipts were checked, holds what it held before.

    The receipts are checked between the listing and the approval, and a local copy whose stat keys
    changed (a restore, a copy) is hashed again: minutes for tens of GiB. A job launched on the box in that
    time, a run sealed or a lock taken, went unseen, and the teardown killed it.
    """
    if first.areas == second.areas and first.entries == second.entries:
        return
    before, after = set(first.entries), set(second.entries)
    changes = [f"now {entry.where}: {shown(entry.key)}" for entry in second.entries if entry not in before]
    changes += [
        f"gone from {entry.where}: {shown(entry.key)}" for entry in first.entries if entry not in after
    ]
    changes += [f"area {area}/ now listed" for area in second.areas if area not in first.areas]
    changes += [f"area {area}/ no longer listed" for area in first.areas if area not in second.areas]
    raise Refused(
        f"down refused: the box {second.box} changed under {second.root} while the receipts were checked "
        f"({'; '.join(changes[:5]) or 'its listing is in another order'}"
        f"{f'; {len(changes)} changes in all' if len(changes) > 5 else ''}): run runaudit down again once it "
        f"is quiet; {NOTHING_STOPPED}"
    )


def _main(args: argparse.Namespace) -> int:
    roster = _roster(args)
    box = box_from_args(args)
    assert box.profile is not None  # --profile is required
    say = functools.partial(print, file=sys.stderr)
    if sys.stderr.isatty():  # a refusal stays one line in a log; a person watching learns what takes long
        say(
            f"down: listing {box.root} on {box.endpoint.label}, hashing its capsules to compare with the receipts"
        )
    inventory = take_inventory(box)
    approval = gate(
        args.root,
        roster,
        box.profile,
        args.target,
        args.confirm,
        inventory=inventory,
        abandon=args.abandon,
        facts_reverified=args.facts_reverified,
        say=say,
    )
    unchanged_since(inventory, take_inventory(box))
    record = write_record(args.root, approval, box.profile, args.target)
    print(f"down {args.target}: approved; teardown record {record}")
    return teardown(box.profile, args.target, say=say)


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "down",
        help="the teardown gate: refuses unless every run on the box has a receipt (or is abandoned) "
        "and --confirm names the target",
    )
    add_box_arguments(parser)
    for action in parser._actions:  # the box's --profile is also the teardown plan's, so here it is required
        if "--profile" in action.option_strings:
            action.required = True
            action.help = "the platform profile (e.g. runpod, china:gpushare, or a .toml file)"
    parser.add_argument(
        "--root", type=existing_dir, required=True, help="local project root holding the receipts"
    )
    roster = parser.add_mutually_exclusive_group()
    roster.add_argument("--roster", type=Path, help="file: one run id per line (# comments)")
    roster.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_ID",
        help="a run that must be proven home (repeatable; default: every run found on the box)",
    )
    parser.add_argument(
        "--abandon",
        action="append",
        default=[],
        metavar="ID",
        help="a run on the box you accept losing, by its exact name (repeatable); recorded",
    )
    parser.add_argument(
        "--target", required=True, type=_target, help="what would be stopped: the instance, pod or box name"
    )
    parser.add_argument("--confirm", metavar="TARGET", help="approve the teardown by repeating --target")
    parser.add_argument(
        "--facts-reverified",
        action="store_true",
        help="you re-checked the stale teardown facts with the provider",
    )
    parser.set_defaults(handler=_main)
