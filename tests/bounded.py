"""A child process that can neither hang the test suite nor exhaust the machine.

The hostile-input tests run whole sessions on bytes built to block a reader (a FIFO) or stream without
end (a device). The child runs in its own process group under an address-space ceiling; past its deadline
the whole group is killed and the test fails with the tail of what the child printed.

:func:`run_bounded` starts a fresh interpreter per child. :class:`SessionForker` does the same for
``python -m pytest`` sessions at a fraction of the cost: a warm server process imports pytest and the heavy
third-party libraries once and forks one child per session (the approach of ``runners/suite.py``). On the
2-core development machine a demo session then takes ~2.5 s of CPU instead of ~8 s: it no longer starts
Python, imports torch and the rest (~4 s), nor walks their objects in every garbage collection (~1 s).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import resource
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import pytest

# Third-party modules a demo session imports that cost most (torch ~2.5 s, matplotlib ~0.8 s, scipy.special
# ~0.3 s), imported once in the server and shared copy-on-write by every session forked from it. runaudit's
# own modules (~0.1 s) are left out on purpose: each session imports them itself, so pytest registers and
# rewrites its plugins and audit modules exactly as in a user's session, and no session runs a stale copy.
WARM_IMPORTS = (
    "pytest",
    "torch",
    "torch._dynamo",  # the first optimizer a smoke audit builds imports it (~1.2 s)
    "numpy",
    "scipy.fft",
    "scipy.special",
    "pyarrow.parquet",
    "pyarrow.compute",
    "jsonschema",
    "yaml",
    "jinja2",
    "PIL.Image",
    "PIL.PngImagePlugin",
    "matplotlib.figure",
    "matplotlib.backends.backend_svg",
)
SERVER_START_S = 120  # the server's warm imports take ~4 s alone, up to ~30 s on a loaded machine
REAP_S = 30  # a killed session's group is gone within this


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
            _fail_overrun(what, deadline_s, log)


def _fail_overrun(what: str, deadline_s: float, log: Path) -> NoReturn:
    tail = log.read_bytes()[-3000:].decode("utf-8", "backslashreplace")
    pytest.fail(f"{what} did not end within {deadline_s} s:\n{tail}")


class SessionForker:
    """``python -m pytest <args>`` sessions, each forked from one warm server instead of started fresh.

    The server is a process of its own (``python bounded.py``), not the test process: a pytest worker has
    threads (xdist's) and a running pytest session of its own, neither of which a session may inherit. The
    server runs no Python thread; the idle native pools of numpy's and scipy's BLAS and pyarrow's allocator
    have fork handlers, as ``runners/suite.py`` relies on. It forks on request and reports the child's
    pid and then its exit status; the deadline is enforced here, as in :func:`run_bounded`, by killing the
    child's process group. What a fresh interpreter would set up at start-up is set again in the child:
    the environment (with ``TMPDIR``, which :mod:`tempfile` caches), numpy's global seed, the working
    folder, ``sys.argv``, ``sys.path[0]`` and the ``__main__`` module (the child runs ``pytest`` through
    :mod:`runpy`, as ``-m`` does), standard streams and the memory ceiling. The child exits through the
    interpreter's normal shutdown (not ``os._exit``, which would save ~0.3 s a session), so thread joins,
    exit handlers and whatever finalizers print are a fresh session's too: the output is checked for them.

    ``env`` is the server's own environment and should be a session's, except that its ``TMPDIR`` is a
    folder of the server's (:attr:`temp`): anything a warm import resolved from it stays pointed there,
    so callers watch that folder too and a session writing into it is caught. A session asking for other
    start-up variables (``PYTHON*``, locale) than the server's is refused: only ``exec`` would apply them.
    """

    def __init__(self, folder: Path, env: Mapping[str, str]) -> None:
        self.temp = folder / "tmp"
        self.temp.mkdir()
        self._log = folder / "server.log"
        self._pending = b""
        self._startup = _startup(env)
        with self._log.open("wb") as errors:
            self._server = subprocess.Popen(
                [sys.executable, __file__],
                cwd=folder,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                start_new_session=True,  # a Ctrl-C meant for the suite reaches the suite, which closes us
                env={**env, "TMPDIR": str(self.temp)},
            )

    def __enter__(self) -> SessionForker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the server: it exits at the end of its requests (a running session was already reaped)."""
        assert self._server.stdin is not None and self._server.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self._server.stdin.close()
        try:
            self._server.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        self._server.stdout.close()

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        log: Path,
        deadline_s: float,
        memory_bytes: int,
        what: str,
        env: Mapping[str, str],
    ) -> int:
        """``python -m pytest <args>`` bounded like :func:`run_bounded`: its status, or a failed test."""
        if _startup(env) != self._startup:
            raise ValueError(f"{what}: only a fresh interpreter reads {_startup(env)}, not {self._startup}")
        request = {"args": list(args), "cwd": str(cwd), "log": str(log), "memory_bytes": memory_bytes}
        request["env"] = dict(env)
        assert self._server.stdin is not None
        self._server.stdin.write(json.dumps(request).encode() + b"\n")
        self._server.stdin.flush()
        pid = self._reply(SERVER_START_S, "start a session")["pid"]
        try:
            return self._reply(deadline_s, what)["code"]
        except TimeoutError:
            _kill_group(pid)
            self._reply(REAP_S, f"reap {what}")
            _fail_overrun(what, deadline_s, log)
        except KeyboardInterrupt:  # the session, in a group of its own, must not outlive the suite
            _kill_group(pid)
            raise

    def _reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        """The server's next line; TimeoutError past ``timeout_s``, a failed test if the server is gone.

        Read with ``os.read`` into a buffer of our own: a buffered reader could hold both replies of a
        short session while ``select`` waits on the emptied pipe for the second.
        """
        assert self._server.stdout is not None
        replies = self._server.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([replies], [], [], left)[0]:
                raise TimeoutError(what)
            chunk = os.read(replies, 4096)
            if not chunk:
                tail = self._log.read_bytes()[-3000:].decode("utf-8", "backslashreplace")
                pytest.fail(f"the session server ended before it could {what}:\n{tail}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group that session ``pid`` leads: it and anything it forked."""
    with contextlib.suppress(ProcessLookupError):  # it ended just now
        os.killpg(pid, signal.SIGKILL)


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    """Variables an interpreter reads only as it starts (paths, I/O, locale): a fork keeps the server's."""
    return {name: value for name, value in env.items() if name.startswith(("PYTHON", "LC_", "LANG"))}


def _session(request: dict[str, Any]) -> None:
    """In the forked child: become ``cd <cwd> && python -m pytest <args> >log 2>&1 </dev/null``."""
    os.setsid()  # own process group, killed whole past the deadline
    resource.setrlimit(resource.RLIMIT_AS, (request["memory_bytes"], request["memory_bytes"]))
    gc.enable()
    nothing = os.open(os.devnull, os.O_RDONLY)
    output = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for source, target in ((nothing, 0), (output, 1), (output, 2)):
        os.dup2(source, target)
    os.close(nothing)
    os.close(output)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read from TMPDIR again on first use
    if (numpy := sys.modules.get("numpy")) is not None:
        numpy.random.seed()  # fresh entropy, as its import draws (``random`` reseeds itself in a fork)
    sys.path[0] = os.getcwd()  # what ``-m`` puts first (the server's is this file's folder)
    sys.argv = ["pytest", *request["args"]]  # runpy sets argv[0] to pytest/__main__.py, as ``-m`` does
    runpy.run_module("pytest", run_name="__main__", alter_sys=True)  # raises SystemExit(status)


def _serve() -> None:
    """Import :data:`WARM_IMPORTS`, then fork one session per request line until stdin closes.

    Replies are one JSON line each on stdout: ``{"pid"}`` once forked, ``{"code"}`` once it ended. The
    warm heap is frozen out of the collector: every child's collections then skip it, as a fresh
    interpreter's would skip what it never imported (about 1 s per session with torch loaded).
    """
    gc.disable()  # nothing collected while importing, so the frozen heap is compact and never touched
    for name in WARM_IMPORTS:
        with contextlib.suppress(ImportError):  # a session that needs it fails as a fresh one would
            importlib.import_module(name)
    gc.freeze()
    requests = sys.stdin.buffer
    while line := requests.readline():
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _session(request)  # does not return: pytest's __main__ raises SystemExit with the status
        os.write(1, json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        os.write(1, json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


if __name__ == "__main__":
    _serve()
