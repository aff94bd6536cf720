"""``active/<run-id>`` belongs to one process at a time: the writer while it trains, ``close`` while it seals.

Both take the same advisory lock on ``active/<id>/.writer.lock``. The kernel drops it when the holder
dies, so a crashed trainer never blocks a later close, and a trainer still running is never sealed under
its feet (docs/capsule.md §1).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_FILE = ".writer.lock"
# The writer's bookkeeping of the run (lineage, tests, recent checkpoint saves); runaudit.cadence reads it.
STATE_FILE = ".writer-state.json"
# Touched by the writer when it opens a run and at every row it logs (and by RunWriter.heartbeat() inside
# long epochs): the run's own sign of life, which `runaudit launch` waits for and `watch` ages.
HEARTBEAT_FILE = ".heartbeat"


def touch_heartbeat(folder: Path) -> None:
    """Mark the run alive now. Best effort: a heartbeat that cannot be written never stops training."""
    try:
        fd = os.open(folder / HEARTBEAT_FILE, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def try_lock(folder: Path) -> IO[bytes] | None:
    """The held lock of ``folder``, or None when another process holds it. The lock file is opened without
    following a symlink: a link planted in the workspace never makes runaudit create or touch a file elsewhere."""
    fd = os.open(
        folder / LOCK_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
    )
    handle = os.fdopen(fd, "ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle
