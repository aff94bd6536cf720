"""``active/<run-id>`` belongs to one process at a time: the writer while it trains, ``close`` while it seals.

Both take the same advisory lock on ``active/<id>/.writer.lock``. The kernel drops it when the holder
dies, so a crashed trainer never blocks a later close, and a trainer still running is never sealed under
its feet (docs/capsule.md §1).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import IO

LOCK_FILE = ".writer.lock"
# The writer's bookkeeping of the run (lineage, tests, recent checkpoint saves); runaudit.cadence reads it.
STATE_FILE = ".writer-state.json"
# Touched by the writer when it opens a run and at every row it logs (and by RunWriter.heartbeat() inside
# long epochs): the run's own sign of life, which `runaudit launch` waits for and `watch` ages.
HEARTBEAT_FILE = ".heartbeat"


# Opened for writing without following a link, and without blocking: a FIFO planted in the workspace
# fails at once (no reader) instead of hanging the trainer or close.
PLAIN_WRITE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def touch_heartbeat(folder: Path) -> None:
    """Mark the run alive now. Best effort: a heartbeat that cannot be written never stops training."""
    try:
        fd = os.open(folder / HEARTBEAT_FILE, PLAIN_WRITE, 0o644)
    except OSError:  # a FIFO with no reader, a link, a full disk: no heartbeat, training goes on
        return
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def try_lock(folder: Path) -> IO[bytes] | None:
    """The held lock of ``folder``, or None when another process holds it. The lock file is opened without
    following a symlink: a link planted in the workspace never makes runaudit create or touch a file elsewhere."""
    fd = os.open(folder / LOCK_FILE, PLAIN_WRITE | os.O_APPEND, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO that happened to have a reader
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(folder / LOCK_FILE))
    handle = os.fdopen(fd, "ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle
