"""runaudit's own processes leave without the interpreter's last walk over the heap (runaudit/shutdown.py).

Each probe reads ``gc.get_freeze_count()`` where it can only be non-zero if runaudit froze the heap: an
exit handler registered before runaudit's (exit handlers run last-registered first), or the start of a
forked audit session. The speed itself is measured in ``benchmarks/bench_custody.py``.
"""

from __future__ import annotations

import gc
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.runners.suite import run_suites

FROZEN_AT_EXIT = """
import atexit, gc

atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count()}", flush=True))
"""

FROZEN_AT_START = """
import gc

def pytest_sessionstart(session):
    print(f"frozen at start: {gc.get_freeze_count()}", flush=True)
"""


def _frozen(output: str, when: str) -> int:
    found = re.findall(rf"frozen at {when}: (\d+)", output)
    assert len(found) == 1, output[-2000:]
    return int(found[0])


def test_an_audit_session_leaves_without_the_final_collection(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    pytester.makepyfile(probe_exit=FROZEN_AT_EXIT)
    pytester.syspathinsert()
    audited = pytester.runpytest_subprocess(
        "-p", "probe_exit", "-p", "no:cacheprovider", "--run", str(capsule_dir), "--root", str(project),
        "--report-dir", "reports", "-m", "custody", "-k", "capsule", timeout=300,
    )  # fmt: skip
    assert (pytester.path / "reports" / f"{DEMO_RUN_ID}.json").is_file(), audited.stdout.str()[-2000:]
    assert _frozen(audited.stdout.str(), "exit") > 0


def test_the_users_own_test_runs_keep_their_final_collection(pytester: pytest.Pytester) -> None:
    """runaudit's plugin is installed into every pytest session of the environment; only ``--run`` ones change."""
    pytester.makepyfile(probe_exit=FROZEN_AT_EXIT, test_own="def test_own():\n    assert True\n")
    pytester.syspathinsert()
    own = pytester.runpytest_subprocess("-p", "probe_exit", "-p", "no:cacheprovider", "test_own.py")
    assert own.ret == 0, own.stdout.str()[-2000:]
    assert _frozen(own.stdout.str(), "exit") == 0


def test_the_console_script_leaves_without_the_final_collection() -> None:
    probe = FROZEN_AT_EXIT + "from runaudit.cli import main\nmain(['--version'])\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _frozen(done.stdout, "exit") > 0


def test_a_forked_audit_session_keeps_the_runners_heap_out_of_its_collections(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's heap (torch, pytest) is frozen in each forked session and nowhere else."""
    (tmp_path / "probe_start.py").write_text(FROZEN_AT_START)
    monkeypatch.syspath_prepend(tmp_path)  # a forked session inherits the runner's sys.path
    capsule = project / "export" / DEMO_RUN_ID
    before = gc.get_freeze_count()
    report, output = run_suites(
        [capsule], project, args=("-p", "probe_start", "-m", "custody", "-k", "capsule")
    )[capsule]
    assert report is not None, output
    assert _frozen(output, "start") > 0
    assert gc.get_freeze_count() == before


class FrozenDuringCases:
    """Counts the frozen objects as each case is called."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self.counts.append(gc.get_freeze_count())


def test_an_audit_session_keeps_the_collector_off_its_starting_heap_and_hands_it_back(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    """Full collections walked pytest, the audit modules and the collected cases again and again: 0.12 s of
    a 2 s session, 0.29 s of one forked from a process holding torch (runaudit/fixtures/heap.py). The heap is
    frozen while the cases run, and unfrozen when the session ends, so that a process running several
    sessions (this one, through pytester) still collects what each leaves behind."""
    probe = FrozenDuringCases()
    audited = pytester.runpytest(
        "-p", "no:cacheprovider", "--run", str(capsule_dir), "--root", str(project), "--report-dir", "reports",
        "-m", "custody", "-k", "capsule", plugins=[probe],
    )  # fmt: skip
    assert probe.counts and min(probe.counts) > 0, audited.stdout.str()[-2000:]
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_its_heap_keeps_it_frozen_after_a_session(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    """A runner's forked child freezes its heap before its session; the session's end unfroze all of it."""
    gc.freeze()
    try:
        pytester.runpytest(
            "-p", "no:cacheprovider", "--run", str(capsule_dir), "--root", str(project), "--report-dir",
            "reports", "-m", "custody", "-k", "capsule",
        )  # fmt: skip
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
