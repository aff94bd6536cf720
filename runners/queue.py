"""``runaudit queue run QUEUE --root ROOT``: a file of runs, trained one after another on one box, each sealed.

A week on a rented box is rarely one run. The queue file lists them, one per line: a run id, then the
command that trains it (``{run_id}`` and ``{root}`` are filled in; ``#`` starts a comment). The runner
works down the list on the box itself, as one job started with ``runaudit launch``:

- each command runs with stdin closed (one that reads stdin gets end-of-file, never a hung queue), in
  the project root, with ``RUNAUDIT_RUN_ID`` and ``RUNAUDIT_ROOT`` set as ``launch`` sets them;
- a run whose command exits 0 is sealed at once with ``runaudit close``; one that fails, or whose close
  is refused, is recorded and the queue goes on to the next;
- every step is a row of ``<root>/queues/<name>.csv`` (index, run id, state, exit code, time, detail),
  appended and fsynced, which is also the job's sign of life for ``launch --progress-file``;
- one runner per queue (an advisory lock the kernel drops with the process); a second is refused;
- started again, it skips every run already sealed in ``export/`` and resumes the first one that is not
  (the trainer resumes from its checkpoint); ``--from N`` starts at entry N instead.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runaudit.clock import utc_now
from runaudit.ids import duplicates, is_safe_id
from runaudit.runners.close import CloseError, close_run
from runaudit.safeio import parse_file
from runaudit.usage import Refusal, existing_dir

QUEUES_DIR = "queues"
LOG_COLUMNS = ("index", "run_id", "state", "exit_code", "utc", "detail")
QUEUE_CAP = 1 << 20  # a queue file is a list of commands, never more than this


@dataclass(frozen=True)
class Entry:
    index: int
    run_id: str
    command: tuple[str, ...]  # with {run_id} and {root} still in it

    def argv(self, root: Path) -> list[str]:
        return [part.replace("{run_id}", self.run_id).replace("{root}", str(root)) for part in self.command]


def parse_queue(text: str, source: str) -> list[Entry]:
    """One ``RUN_ID COMMAND ...`` per line, shell-quoted; every problem named with its line."""
    entries: list[Entry] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise Refusal(f"{source}:{number}: cannot split the line ({exc})") from None
        if len(words) < 2:
            raise Refusal(f"{source}:{number}: expected RUN_ID COMMAND ..., found {line.strip()!r}")
        if not is_safe_id(words[0]):
            raise Refusal(
                f"{source}:{number}: run id {words[0]!r} is not a safe id (^[A-Za-z0-9][A-Za-z0-9._-]*$)"
            )
        entries.append(Entry(len(entries), words[0], tuple(words[1:])))
    if not entries:
        raise Refusal(f"{source}: the queue lists no run")
    if twice := duplicates([entry.run_id for entry in entries]):
        raise Refusal(f"{source}: run id(s) listed twice: {twice}; a run id names one run")
    return entries


def read_queue(path: Path) -> list[Entry]:
    return parse_file(path, QUEUE_CAP, parse_queue, "queue")


class QueueLog:
    """``<root>/queues/<name>.csv``: one appended, fsynced row per step, under the queue's lock."""

    def __init__(self, root: Path, name: str) -> None:
        folder = root / QUEUES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}.csv"
        self._lock = (folder / f".{name}.lock").open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise Refusal(f"queue {name}: another runner is working down it; one runner per queue") from None
        if not self.path.exists():
            self._append(LOG_COLUMNS)

    def record(self, entry: Entry, state: str, exit_code: int | None = None, detail: str = "") -> None:
        self._append(
            (entry.index, entry.run_id, state, "" if exit_code is None else exit_code, utc_now(), detail)
        )

    def _append(self, row: tuple[object, ...]) -> None:
        line = io.StringIO()
        csv.writer(line, lineterminator="\n").writerow(row)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line.getvalue())
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        self._lock.close()


def run_queue(
    entries: list[Entry],
    root: Path,
    name: str,
    *,
    start: int | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Work down the queue; the number of runs that did not end sealed."""
    log = QueueLog(root, name)
    failed = 0
    try:
        for entry in entries[start or 0 :]:
            if (root / "export" / entry.run_id).exists():
                log.record(entry, "skipped", detail="already sealed in export/")
                say(f"queue {name} [{entry.index}] {entry.run_id}: already sealed, skipped")
                continue
            log.record(entry, "started", detail=shlex.join(entry.argv(root)))
            say(f"queue {name} [{entry.index}] {entry.run_id}: started")
            code = _train(entry, root)
            if code != 0:
                failed += 1
                log.record(entry, "failed", code, "the command exited non-zero; the queue goes on")
                say(f"queue {name} [{entry.index}] {entry.run_id}: failed with exit code {code}")
                continue
            try:
                result = close_run(root, entry.run_id, log=say)
            except (CloseError, OSError) as exc:  # refused, or the disk failed it: the queue goes on
                failed += 1
                log.record(entry, "close refused", 0, str(exc))
                say(f"queue {name} [{entry.index}] {entry.run_id}: trained, but {exc}")
                continue
            if not result.sealed:
                failed += 1
                log.record(entry, "quarantined", 0, str(result.path))
                say(f"queue {name} [{entry.index}] {entry.run_id}: trained, quarantined at {result.path}")
                continue
            log.record(entry, "sealed", 0, str(result.path))
            say(f"queue {name} [{entry.index}] {entry.run_id}: sealed {result.path}")
    finally:
        log.close()
    return failed


def _train(entry: Entry, root: Path) -> int:
    env = {**os.environ, "RUNAUDIT_RUN_ID": entry.run_id, "RUNAUDIT_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    try:
        return subprocess.run(
            entry.argv(root), cwd=root, env=env, stdin=subprocess.DEVNULL, check=False
        ).returncode
    except OSError as exc:  # the command does not exist or cannot be executed
        print(f"queue: {entry.run_id}: cannot start {entry.command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


def _main(args: argparse.Namespace) -> int:
    entries = read_queue(args.queue)
    name = args.name or args.queue.stem
    if not is_safe_id(name):
        raise Refusal(f"queue name {name!r} is not a safe id; pass --name")
    if args.start is not None and not 0 <= args.start < len(entries):
        raise Refusal(f"--from {args.start}: the queue has entries 0 to {len(entries) - 1}")
    root = args.root.resolve()
    failed = run_queue(entries, root, name, start=args.start, say=lambda line: print(line, flush=True))
    print(
        f"queue {name}: done, {failed} of {len(entries)} run(s) not sealed; log {root / QUEUES_DIR / name}.csv"
    )
    return 1 if failed else 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "queue",
        help="work down a file of runs on this machine (the box), one after another, each sealed on success",
        description="Start it on the box with runaudit launch, e.g. runaudit launch [box] --progress-file "
        "queues/NAME.csv NAME -- python3 -m runaudit queue run QUEUE --root ROOT.",
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="run")
    runner = steps.add_parser("run", help="train and seal every run of QUEUE, in order")
    runner.add_argument("queue", type=Path, metavar="QUEUE", help="file: RUN_ID COMMAND ... per line")
    runner.add_argument(
        "--root", type=existing_dir, required=True, help="the project root (active/, export/)"
    )
    runner.add_argument("--name", help="the queue's name (default: QUEUE's file name without suffix)")
    runner.add_argument("--from", dest="start", type=int, metavar="N", help="start at entry N (0-based)")
    runner.set_defaults(handler=_main)
