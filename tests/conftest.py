"""Shared fixtures of the harness's own tests: the real demo project, and running audits as users do."""

from __future__ import annotations

import datetime as dt
import gc
import importlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from runaudit import clock
from runaudit.examples.digits.build import DEMO_RUN_ID, ensure_demo
from runaudit.host import usable_cores

# Imported by each process that runs tests before its first test (``pytest_sessionstart``), and kept.
KEPT_IMPORTS = (
    # In-process pytester runs drop the modules they imported once they end. These keep global registries
    # that break when imported a second time in one process (Pillow's codec table, torch's compiler, libyaml:
    # its C parser keeps the first yaml module's resolver, so a re-import breaks tags).
    "PIL.Image",
    "PIL.PngImagePlugin",
    "torch",
    "torch._dynamo",
    "yaml",
    # The same snapshot would make every in-process session import these afresh (about 0.4 s a session,
    # over a hundred sessions): the report's renderer and figures, and pyarrow's readers.
    "jinja2",
    "jsonschema",
    "matplotlib.figure",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "scipy.fft",
    "scipy.special",
    "runaudit.reports.collector",
    "runaudit.reports.html",
    "runaudit.reports.page",
)


def _import_installed_plugins() -> None:
    """Import the modules of every pytest plugin installed in this environment, once.

    Each pytester session loads them through their ``pytest11`` entry points and drops them when it ends, so
    every session imported anyio, pytest-profiling, pytest-xdist and their dependencies afresh: ~0.2 s of the
    ~1.1 s an in-process audit session of the demo costs on the 2-core development machine. Imported here
    they stay, and each session only registers them, as a user's fresh ``pytest`` does.
    """
    for entry_point in metadata.entry_points(group="pytest11"):
        importlib.import_module(entry_point.module)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` starts half as many workers again as there are cores.

    Some tests mostly wait on other processes (a throttled trainer on the sshd "box", the Slurm
    controller's scheduling, Chromium starting), and one worker per core leaves that core idle meanwhile.
    On 2 cores the whole suite took 370 s with 2 workers, 344 s with 3 and 405 s with 4. A count set in
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` is kept (xdist reads it).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = usable_cores()
    return cores + max(1, cores // 2)


def _share_the_cores() -> None:
    """Give each pytest-xdist worker its share of the cores for torch's and BLAS's own thread pools.

    xdist already keeps every core busy with a worker; a worker's intra-op threads on top of that only
    spin against the other workers (a demo session costs ~25 % more CPU so). Sessions and training that
    the tests start inherit the variables; a count the developer set is kept.
    """
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None or "OMP_NUM_THREADS" in os.environ:
        return
    threads = max(1, usable_cores() // int(workers))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(threads))
    import torch

    torch.set_num_threads(threads)


# Collections of the oldest generation that a test process lets pass before a full one: ten times CPython's 10.
FULL_COLLECTION_EVERY = 100


def _collect_the_heap_less_often() -> None:
    """Make the test process's full garbage collections ten times rarer.

    A full collection walks every tracked object, and this process holds torch, scipy, matplotlib and
    pytest: ~0.15 s each on the 2-core development machine, up to ~0.5 s once a worker has run for a while.
    Each in-process audit session (pytester) leaves enough long-lived objects to start one as soon as it
    ends and unfreezes the heap (``fixtures/heap.py``), so a worker paid ~7-10 s of CPU for them over the
    suite (23 s of the suite's ~690 on the three workers). Garbage still goes: most of it by reference
    counting at once, cycles at the next full collection and in the collections pytest runs as a session
    ends, which report what a finalizer raised as before. Sessions and programs the tests start in
    processes of their own keep CPython's default; the verdicts of an in-process session never depend on
    when its cycles are collected.
    """
    first, second, _ = gc.get_threshold()
    gc.set_threshold(first, second, FULL_COLLECTION_EVERY)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Prepare each process that runs tests (an xdist worker, or the one process of ``-n 0``); not xdist's
    controller, which only hands tests out: the imports alone cost ~5 s of CPU on the 2-core development
    machine, and the workers started only once the controller had paid them."""
    if session.config.pluginmanager.has_plugin("dsession"):
        return
    _share_the_cores()  # before torch is imported, so that its thread pool is sized once
    for name in KEPT_IMPORTS:
        importlib.import_module(name)
    sys.modules["PIL.Image"].init()
    _import_installed_plugins()
    _collect_the_heap_less_often()


def _keep_compiled_bytecode() -> None:
    """Let this session's interpreters keep the bytecode they compile, where the environment says not to.

    Build machines and containers often set ``PYTHONDONTWRITEBYTECODE`` (this project's CI machines and its
    development VM do). Every interpreter the suite starts (xdist's workers; the sessions, runners and
    trainings the tests start; the forked corpus sessions) then compiled runaudit's modules from source
    again, and pytest rewrote the asserts of every test and audit module again in every session: a fresh
    interpreter importing the plugin, the CLI and the report paid ~0.3 s more for it (0.47 s, not 0.18 s),
    and four modules that start many sessions (inspection cache, custody audits, capsule code, smoke) took
    a median 113 CPU-s from a clean checkout with the variable set, 89 without it, on the 2-core
    development VM. Dropped in the first process (xdist's controller, before it starts its workers), it
    is gone for every process below. The bytecode goes where Python keeps it by default: ``__pycache__``
    folders, which ``.gitignore`` and the box push leave out. Installed packages were compiled by pip.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def _temp_folders_on_a_disk(config: pytest.Config) -> None:
    """Keep pytest's temporary folders on a disk when the system's temp folder is a tmpfs (Debian 13's,
    Fedora's and Arch's default ``/tmp``): the custody gate rightly refuses a copy held in memory, so the
    demo project built there never verified and every test that uses it errored. They go to
    ``~/.cache/runaudit-tests/tmp`` (``XDG_CACHE_HOME`` honoured; cleared at each session, as any
    ``--basetemp`` is), outside the checkout, which the box tests push. A ``--basetemp`` given is kept;
    xdist's workers take theirs from the controller."""
    from runaudit.mounts import in_memory

    if config.option.basetemp is None and in_memory(Path(tempfile.gettempdir())):
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runaudit-tests"
        folder.mkdir(parents=True, exist_ok=True)  # pytest makes the basetemp itself, not its parents
        config.option.basetemp = str(folder / "tmp")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Set up the session before any test process starts (xdist's controller runs this first)."""
    _keep_compiled_bytecode()
    _temp_folders_on_a_disk(config)


# The date the shipped profiles' fact stamps are judged on in these tests. Against the real date, every
# test of an approved teardown began to fail six months after the stamps were written (the governing fact
# goes stale, and down refuses, as it must for a user); tests of staleness give their own dates.
FACTS_JUDGED_ON = dt.date(2026, 12, 1)


@pytest.fixture(autouse=True)
def facts_judged_on_a_fixed_date(monkeypatch: pytest.MonkeyPatch) -> dt.date:
    monkeypatch.setattr(clock, "today", lambda: FACTS_JUDGED_ON)
    return FACTS_JUDGED_ON


@pytest.fixture(scope="session", autouse=True)
def figure_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The page's figure cache inside this session's temp tree, not the user's (pytester runs inherit it)."""
    folder = tmp_path_factory.mktemp("figure-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RUNAUDIT_FIGURE_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def demo_project(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A project root holding the sealed demo capsule (with :data:`COMPACT_DEMO_CONFIG`'s test split),
    trained once per test session.

    Under xdist the workers share one root (``ensure_demo`` serialises them with a file lock).
    """
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if worker_id != "master" else base) / "demo-project"
    from capsules import COMPACT_DEMO_CONFIG  # imports torch, which xdist's controller never needs

    ensure_demo(root, progress=io.StringIO(), config=COMPACT_DEMO_CONFIG)
    return root


@pytest.fixture
def project(demo_project: Path, tmp_path: Path) -> Path:
    """A private copy of the demo project, free to damage."""
    copy = tmp_path / "project"
    shutil.copytree(demo_project, copy, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports"))
    return copy


@pytest.fixture
def capsule_dir(project: Path) -> Path:
    return project / "export" / DEMO_RUN_ID


@dataclass
class AuditRun:
    """One harness run through pytester, and the JSON report it wrote."""

    result: pytest.RunResult
    report: dict[str, Any] | None

    def verdicts(self, verdict: str) -> set[str]:
        """Audit ids (``gate.check``) that ended with ``verdict``."""
        return {
            item["audit"] for item in (self.report or {}).get("verdicts", []) if item["verdict"] == verdict
        }

    def find(self, audit: str) -> list[dict[str, Any]]:
        return [item for item in (self.report or {}).get("verdicts", []) if item["audit"] == audit]


@pytest.fixture
def run_audits(pytester: pytest.Pytester) -> Callable[..., AuditRun]:
    """Run ``pytest --run=<run> --root=<root> [args]`` the way users do; return the outcome and report."""

    def run(run: str | Path, root: Path, *args: str, report_stem: str | None = None) -> AuditRun:
        reports = pytester.path / "reports"
        result = pytester.runpytest(
            "-p",
            "runaudit.fixtures.plugin",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",  # the plugin is already imported here
            "--run",
            str(run),
            "--root",
            str(root),
            "--report-dir",
            str(reports),
            *args,
        )
        stem = report_stem or Path(str(run)).name
        path = reports / f"{stem}.json"
        return AuditRun(result, json.loads(path.read_text()) if path.is_file() else None)

    return run


# Modules whose tests start a real sshd, drive Chromium, train beyond the shared demo or run many whole
# sessions in subprocesses: `pytest -m "not slow"` leaves them out of the inner loop; CI runs everything.
SLOW_MODULES = frozenset(
    {
        "test_report_browser.py",
        "test_hostile_corpus.py",
        "test_demo.py",
        "test_report_twins.py",
        "test_terminal_progress.py",
        "test_capsule_code.py",
        "test_science_demo.py",
        "test_slurm_sweep.py",
    }
)
# Everything else that runs whole audit sessions (pytester) or needs the trained demo project is slow too:
# the inner loop keeps the in-process unit tests of every module, a minute on two cores.
END_TO_END_FIXTURES = frozenset({"demo_project", "pytester"})


def _slow(item: pytest.Item) -> bool:
    if _whole_process_module(item):
        return True
    return not END_TO_END_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def _whole_process_module(item: pytest.Item) -> bool:
    return item.path.name in SLOW_MODULES or item.path.parent.name == "box"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the slow tests, and run the longest modules first.

    pytest-xdist hands out whole modules (``--dist loadfile`` in pyproject.toml) in this order, each to the
    first worker that is free; a module of a minute that starts last keeps one worker busy after the rest
    are done. So the modules of whole-process tests go first, then every other module with a slow test,
    then the in-process unit tests, which fill the gaps at the end (the sort is stable: within a module and
    a tier, the collection's order is kept).
    """
    slow_modules: set[Path] = set()
    for item in items:
        if _slow(item):
            item.add_marker(pytest.mark.slow)
            slow_modules.add(item.path)

    def tier(item: pytest.Item) -> int:
        return 0 if _whole_process_module(item) else 1 if item.path in slow_modules else 2

    items.sort(key=tier)
