"""A child process that can neither hang the test suite nor exhaust the machine.

The hostile-input tests run whole sessions on bytes built to block a reader (a FIFO) or stream without
end (a device). The child runs in its own process group under an address-space ceiling; past its deadline
the whole group is killed and the test fails with the tail of what the child printed.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest


def run_bounded(
    argv: Sequence[str],
    *,
    cwd: Path,
    log: Path,
    deadline_s: float,
    memory_bytes: int,
    what: str,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``argv`` with its output in ``log``; its exit status, or a failed test past ``deadline_s``."""

    def ceiling() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    with log.open("wb") as output:
        child = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=ceiling,
            env=dict(env) if env is not None else None,
        )
        try:
            return child.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the group we started: the child and anything it forked
            child.wait()
            tail = log.read_bytes()[-3000:].decode("utf-8", "backslashreplace")
            pytest.fail(f"{what} did not end within {deadline_s} s:\n{tail}")
