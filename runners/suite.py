"""Run the harness's own audit suite on capsules, each in a pytest session of its own, and read the reports.

Runners (close, verify, accept) use this so that a gate decided on the command line is exactly the gate a
user gets from ``pytest --run``. One capsule gets a fresh process, which keeps torch and pytest state out
of the runner; several are forked from one process that imported both once (:func:`run_suites`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import runaudit
from runaudit import isolated
from runaudit import manifest as manifests
from runaudit.capsule import checkpoint_formats
from runaudit.catalog import AUDITS_DIR, catalog
from runaudit.hashing import hash_before_fork
from runaudit.host import usable_cores
from runaudit.ids import report_stem
from runaudit.options import REPORT_DIR_OPTION, REPORT_FORMAT_OPTION, ROOT_OPTION, RUN_OPTION
from runaudit.verdict import Verdict

# What a custody session imports that costs most (torch alone is ~1.5 s and ~220 MiB): imported once in
# the parent of forked suites, shared copy-on-write by every child.
WARM_IMPORTS = ("torch", "jsonschema", "pyarrow.parquet", "PIL.PngImagePlugin")
# pytest's own plugins that a runner's session goes without (see :func:`_pytest_args`).
LEAN_PLUGINS = (
    "unraisableexception",
    "threadexception",
    "logging",
    "warnings",
    "stepwise",
    "doctest",
    "legacypath",
)


def _pytest_args(
    capsule: Path, root: Path, reports: str, modules: Sequence[str], args: Sequence[str]
) -> list[str]:
    paths = [str(AUDITS_DIR / name) for name in modules if (AUDITS_DIR / name).is_file()] or [str(AUDITS_DIR)]
    # JSON only (the runner reads verdicts, not the page); no per-test capture and no end-of-session
    # garbage-collection sweeps for unraisable exceptions: together about a second per capsule. Nor the
    # per-case hooks of pytest plugins that keep what the runner never reads (log records, warnings, thread
    # exceptions) or state between runs: ~0.15 s of a 4 s verify of 2 × 640 MiB, ~1,700 cases. The cache
    # is off already (runaudit.isolated); faulthandler stays, so that a checkpoint that crashes the
    # interpreter still leaves a traceback in the log.
    return [
        *(argument for plugin in LEAN_PLUGINS for argument in ("-p", f"no:{plugin}")),
        "--capture=no", "-q", RUN_OPTION, str(capsule), ROOT_OPTION, str(root),
        REPORT_DIR_OPTION, reports, REPORT_FORMAT_OPTION, "json", "--strict", *args, *paths,
    ]  # fmt: skip


def _read_report(reports: str, capsule: Path, output: str) -> tuple[dict[str, Any] | None, str]:
    report_path = Path(reports) / f"{report_stem(capsule.name)}.json"
    if not report_path.is_file():
        tail = output.strip().splitlines()[-5:]
        return None, "the audits did not produce a report: " + " | ".join(tail)
    return json.loads(report_path.read_text(encoding="utf-8")), output


def run_suite(
    capsule: Path, root: Path, *, modules: Sequence[str] = (), args: Sequence[str] = ()
) -> tuple[dict[str, Any] | None, str]:
    """``pytest --run=capsule --runaudit-root=root --strict [args] [audits/<modules>]``: (report, output).

    The report is None when the session wrote none.
    """
    checkout = str(Path(runaudit.__file__).resolve().parent.parent)
    env = isolated.environment(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="runaudit-suite-") as reports:
        command = isolated.command(capsule, _pytest_args(capsule, root, reports, modules, args))
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root)
        return _read_report(reports, capsule, done.stdout + done.stderr)


def _warm(capsules: Sequence[Path]) -> Any:
    """Import the plugin (and with it pytest) and the gate's heavy libraries here, once, before any fork,
    and read the audit catalog (every session's custody gate counts its audits from it).

    torch only when a capsule holds a ``.pth``: a safetensors checkpoint is audited without it.
    """
    from runaudit.fixtures import plugin

    catalog()

    torch = any("pth" in checkpoint_formats(capsule) for capsule in capsules)
    for name in WARM_IMPORTS if torch else [name for name in WARM_IMPORTS if name != "torch"]:
        with contextlib.suppress(ImportError):  # the child's audit that needs it says so, with the file
            importlib.import_module(name)
    return plugin


def _warm_while_hashing(capsules: Sequence[Path]) -> Any:
    """:func:`_warm` in this process while every capsule file is hashed fresh in another one."""
    files = [
        capsule.parent / rel
        for capsule in capsules
        for rel in manifests.local_tree(capsule.parent, capsule.name).files
    ]
    finish = hash_before_fork(files)
    try:
        return _warm(capsules)
    finally:
        with contextlib.suppress(OSError, RuntimeError):  # a file that vanished or changed: the audit says so
            finish()


def _forked_session(plugin: Any, argv: list[str], root: Path, log: Path) -> int:
    """A child's pid; the child runs one pytest session with its output in ``log``, then exits."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 3
    try:
        import pytest

        # Everything the parent imported (torch most of all) is out of this session's collections: a full
        # one would walk it and copy every page it touches from the parent, ~0.2 s of each session.
        gc.freeze()

        # Both the descriptors and the Python streams: the parent's may be a capture (pytest's capsys).
        output = open(log, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 - lives until _exit
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        sys.stdout = sys.stderr = output
        os.chdir(root)
        starter = dict(os.environ)
        os.environ.clear()
        os.environ.update(isolated.environment(starter))
        code = int(pytest.main(argv, plugins=[plugin]))
    except BaseException:  # the parent reads the traceback from the log as the run's problem
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_suites(
    capsules: Sequence[Path], root: Path, *, modules: Sequence[str] = (), args: Sequence[str] = ()
) -> dict[Path, tuple[dict[str, Any] | None, str]]:
    """:func:`run_suite` on several capsules, one per core at a time: (report or None, output) of each.

    On Linux the sessions are forked from this process once pytest, the plugin and torch are imported
    here: each capsule then pays only for its own audits, not for another interpreter and torch import.
    Elsewhere (fork after importing torch is unsafe on macOS) each capsule gets a fresh process.
    """
    workers = max(1, min(len(capsules), usable_cores()))
    if sys.platform != "linux":
        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = pool.map(lambda capsule: run_suite(capsule, root, modules=modules, args=args), capsules)
            return dict(zip(capsules, done, strict=True))
    plugin = _warm_while_hashing(capsules)
    results: dict[Path, tuple[dict[str, Any] | None, str]] = {}
    with tempfile.TemporaryDirectory(prefix="runaudit-suites-") as scratch:
        running: dict[int, tuple[Path, str, Path]] = {}
        for index, capsule in enumerate(capsules):
            if len(running) == workers:
                _collect(running, results)
            reports = Path(scratch) / str(index)
            reports.mkdir()
            log = reports / "output.log"
            argv = [
                *isolated.pytest_arguments(capsule),
                *_pytest_args(capsule, root, str(reports), modules, args),
            ]
            running[_forked_session(plugin, argv, root, log)] = (capsule, str(reports), log)
        while running:
            _collect(running, results)
    return results


def _collect(
    running: dict[int, tuple[Path, str, Path]], results: dict[Path, tuple[dict[str, Any] | None, str]]
) -> None:
    """Wait for the oldest session, and read what it left (only our own pids: the caller may have others)."""
    pid = next(iter(running))
    os.waitpid(pid, 0)
    capsule, reports, log = running.pop(pid)
    results[capsule] = _read_report(reports, capsule, log.read_text(encoding="utf-8", errors="replace"))


def failures(report: dict[str, Any]) -> list[str]:
    """One line per verdict that does not hold (anything but passed or not_applicable)."""
    return [
        f"{item['audit']}{_bracketed(item['subject'])} {item['verdict']}: {item['message']}"
        for item in report["verdicts"]
        if not Verdict(item["verdict"]).holds
    ]


def _bracketed(subject: str) -> str:
    return f"[{subject}]" if subject else ""
