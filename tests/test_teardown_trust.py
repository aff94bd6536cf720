"""Safe to tear down is never said when it is false: incomplete sessions, symlinked capsules, one receipt rule.

Each test attacks a private copy of the real, verified demo project, as a careless user or a hostile box
would, and checks every part that answers the teardown question: the report's banner and exit status,
``runaudit verify`` and :func:`runaudit.receipts.receipt_status`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from runaudit import manifest as manifests
from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.fixtures.subjects import custody_audits, expected_custody
from runaudit.hashing import hash_files
from runaudit.receipts import receipt_status
from runaudit.resolve import Location, Root
from runaudit.run import Run

RECEIPT = manifests.RECEIPT

# A plugin that stops the session the way a user's Ctrl-C does, as soon as one chosen audit starts.
INTERRUPTER = """
import pytest

def pytest_runtest_setup(item):
    if item.name.startswith({prefix!r}):
        raise KeyboardInterrupt
"""
# A plugin that kills the xdist worker that runs one chosen audit (a crash, an OOM kill).
WORKER_KILLER = """
import os

def pytest_runtest_call(item):
    if item.name.startswith({prefix!r}) and hasattr(item.config, "workerinput"):
        os._exit(1)
"""

# A plugin that sends SIGTERM to its own session at one chosen audit (a CI job's timeout, the end of a job).
TERMINATOR = """
import os
import signal

def pytest_runtest_setup(item):
    if item.name.startswith({prefix!r}):
        os.kill(os.getpid(), signal.SIGTERM)
"""


# A plugin that renames a copy of one capsule file over it right after ``module.function`` read it (the
# same bytes, another file), as a process rewriting the capsule during a session would.
SWAP_AFTER_READ = """
import importlib
import os
from pathlib import Path

# sys.modules' own: an earlier in-process session may leave another as the package's attribute
module = importlib.import_module({module!r})
TARGET = Path({target!r})
read = getattr(module, {function!r})

def swapped_after_read(what, *rest):
    result = read(what, *rest)
    found = os.fstat(what.fileno()) if hasattr(what, "fileno") else os.stat(what)
    if os.path.samestat(found, TARGET.stat()):
        copy = TARGET.with_name("swapped-copy")
        copy.write_bytes(TARGET.read_bytes())
        os.replace(copy, TARGET)
    return result

def pytest_configure(config):
    setattr(module, {function!r}, swapped_after_read)

def pytest_unconfigure(config):
    setattr(module, {function!r}, read)
"""


def _in_table(path: str) -> str:
    """``path`` as the kernel's mount table spells it (a space is ``\\040``: a TMPDIR may hold one)."""
    return path.replace(" ", "\\040")


def _receipt(project: Path) -> Path:
    return project / "_trust" / "pulls" / DEMO_RUN_ID / RECEIPT


def _with_plugin(pytester: pytest.Pytester, name: str, source: str) -> tuple[str, str]:
    pytester.makepyfile(**{name: source})
    pytester.syspathinsert()
    return "-p", name


def test_the_whole_gate_on_the_verified_demo_says_yes(run_audits, project: Path, capsule_dir: Path) -> None:
    """The control for every attack below: the same copy, audited whole, is safe to tear down."""
    outcome = run_audits(capsule_dir, project, "-m", "custody")
    assert outcome.result.ret == 0, outcome.result.stdout.str()[-2000:]
    assert outcome.report["teardown"]["answer"] == "yes"
    assert outcome.report["custody_gate"]["session"] == "completed"


@pytest.mark.parametrize(
    "selection",
    [
        pytest.param(("-k", "not test_sha256"), id="k-subset"),
        pytest.param(("--deselect", "test_manifest.py::test_roster"), id="deselect"),
        pytest.param(("-m", "custody", "-x", "-k", "capsule"), id="explicit-subset"),
    ],
)
def test_a_subset_of_the_custody_gate_is_never_a_yes(
    run_audits, project: Path, capsule_dir: Path, selection: tuple[str, ...]
) -> None:
    args = list(selection)
    if args[0] == "--deselect":  # pytest matches node ids as it collects them: ask it for the real one
        listing = run_audits(capsule_dir, project, "-m", "custody", "--collect-only", "-q").result.outlines
        args[1] = next(line for line in listing if line.endswith(args[1]))
    outcome = run_audits(capsule_dir, project, "-m", "custody", *args)
    report = outcome.report
    assert report["summary"]["failed"] == 0  # every verdict that arrived held ...
    assert (
        report["teardown"]["answer"] == "no" and report["custody_ok"] is False
    )  # ... and that is not enough
    assert report["teardown"]["reason"].startswith("incomplete")
    assert outcome.result.ret == pytest.ExitCode.TESTS_FAILED
    outcome.result.stdout.fnmatch_lines(["runaudit: safe to tear down? NO, incomplete*"])


def test_a_file_swapped_out_and_back_while_the_session_audits_it_is_never_a_yes(
    run_audits, pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    """Another process renamed other bytes over results.parquet 0.7 s into a session and the original bytes
    back at 1.6 s: the collapse audits judged the other bytes, ``manifest.sha256`` hashed the original ones,
    every custody audit held and the teardown answer was YES. The session now keys every file of the capsule
    before an audit reads it and again before the report is written."""
    pytester.makepyfile(
        swapper=f"""
        import os
        from pathlib import Path

        RESULTS = Path({str(capsule_dir / "test" / "main" / "results.parquet")!r})

        def pytest_runtest_setup(item):
            if item.name.startswith("test_output_cosine"):
                os.replace(RESULTS, RESULTS.with_name("held.parquet"))
                RESULTS.write_bytes(RESULTS.with_name("held.parquet").read_bytes())  # other bytes would do

        def pytest_runtest_teardown(item):
            if item.name.startswith("test_output_cosine"):
                os.replace(RESULTS.with_name("held.parquet"), RESULTS)
        """
    )
    pytester.syspathinsert()
    outcome = run_audits(capsule_dir, project, "-p", "swapper")
    report = outcome.report
    assert report["custody_ok"] is False and report["teardown"]["answer"] == "no", report["teardown"]
    assert "changed while the session audited the capsule" in report["teardown"]["reason"]
    assert report["custody_gate"]["changed"] == [f"{DEMO_RUN_ID}/test/main/results.parquet"]
    assert outcome.result.ret == pytest.ExitCode.TESTS_FAILED
    assert run_audits(capsule_dir, project, "-m", "custody").report["teardown"]["answer"] == "yes"  # control


def test_a_file_that_changes_while_it_is_hashed_fails_its_own_audits_not_every_audit(
    run_audits, pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    """A file renamed over while the session's hashing thread read it raised out of the whole batch: 416
    audits ended in ``error`` (every one that needed a digest), and pytest's formatting of each error took
    the session from 3 s to minutes. The file that changed now fails its own audits, in one line."""
    results = capsule_dir / "test" / "main" / "results.parquet"
    swapper = SWAP_AFTER_READ.format(module="runaudit.hashing", function="sha256_file", target=str(results))
    plugin = _with_plugin(pytester, "rewriter", swapper)
    outcome = run_audits(capsule_dir, project, "-m", "custody", "--runaudit-fresh-hashes", *plugin)
    verdicts = outcome.report["verdicts"]
    assert not [item for item in verdicts if item["verdict"] == "error"], outcome.result.stdout.str()[-2000:]
    [hashed] = [
        item for item in verdicts if item["audit"] == "manifest.sha256" and "results" in item["subject"]
    ]
    assert hashed["verdict"] == "failed" and "changed while it was being hashed" in hashed["message"]
    assert outcome.report["teardown"]["answer"] == "no"


def test_a_checkpoint_that_changes_while_it_is_read_in_one_pass_fails_its_own_audits(
    run_audits, pytester: pytest.Pytester, project: Path, capsule_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint hashed and scanned in one read (``RUNAUDIT_ONE_PASS``, the path of checkpoints larger
    than the page cache) and renamed over meanwhile raised a RuntimeError to every audit of it: ``error``
    verdicts with a traceback each. It now fails its own audits in one line, as any file that changed while
    it was hashed does, and the teardown answer is no."""
    swapper = SWAP_AFTER_READ.format(
        module="runaudit.checkpoints", function="_hash_and_scan", target=str(capsule_dir / "best.pth")
    )
    plugin = _with_plugin(pytester, "swapper", swapper)
    monkeypatch.setenv("RUNAUDIT_ONE_PASS", "always")
    outcome = run_audits(capsule_dir, project, "-m", "custody", "--runaudit-fresh-hashes", *plugin)
    verdicts = outcome.report["verdicts"]
    assert not [item for item in verdicts if item["verdict"] == "error"], outcome.result.stdout.str()[-2000:]
    best = [item for item in verdicts if "best.pth" in item["subject"]]
    assert {item["audit"] for item in best} >= {"manifest.sha256", "checkpoint.safe_load"}
    for item in best:
        if item["audit"] in ("manifest.sha256", "checkpoint.safe_load"):
            assert item["verdict"] == "failed" and "changed while it was" in item["message"], item
    assert outcome.report["teardown"]["answer"] == "no"


def test_sigterm_while_a_huge_file_is_hashed_ends_the_session_within_a_chunk(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    """A ``train.csv`` made sparse to 1 TiB (a few KB on disk), listed at that size: a SIGTERM (a CI job's
    timeout) wrote the interrupted report, and then the process waited at exit for its hashing thread to
    read the whole TiB (12 minutes a TiB on the 2-core development machine; a second signal was needed).
    The hashing stops at its next chunk instead."""
    train = capsule_dir / "train.csv"
    with train.open("r+b") as handle:
        handle.truncate(1 << 40)
    listed = project / "_trust" / "pulls" / DEMO_RUN_ID / manifests.MANIFEST
    document = json.loads(listed.read_text())
    for entry in document["files"]:
        if entry["path"] == f"{DEMO_RUN_ID}/train.csv":
            entry["bytes"] = 1 << 40
    document["totals"]["bytes"] = sum(entry["bytes"] for entry in document["files"])
    listed.write_text(json.dumps(document))
    plugin = _with_plugin(pytester, "terminate_at_safe_load", TERMINATOR.format(prefix="test_safe_load"))
    result = pytester.runpytest_subprocess(
        *plugin, "-p", "no:cacheprovider", "--run", str(capsule_dir), "--root", str(project),
        "--report-dir", "reports", "-m", "custody", "--runaudit-fresh-hashes", timeout=120,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-2000:]
    report = json.loads((pytester.path / "reports" / f"{DEMO_RUN_ID}.json").read_text())
    assert report["custody_gate"]["session"] == "interrupted" and report["teardown"]["answer"] == "no"


def test_ctrl_c_while_a_verb_hashes_a_huge_file_stops_at_the_next_chunk(tmp_path: Path) -> None:
    """``pull``, ``manifest`` and ``verify`` hash on a pool of threads: a Ctrl-C reached the main thread, and
    the pool's exit then waited for every file to be read (a sparse 1 TiB file: 12 minutes)."""
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as handle:
        handle.truncate(1 << 40)
    # A Ctrl-C, raised as one: a process started in the background (a CI runner, `cmd &`) inherits SIGINT
    # ignored, and would hash the whole TiB.
    default = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            hash_files([huge])
    finally:
        signal.signal(signal.SIGINT, default)
    assert time.monotonic() - started < 60, "the hashing went on after the interrupt"
    assert threading.active_count() == 1, "a hashing thread outlived the interrupt"


def test_ctrl_c_before_the_hashes_is_never_a_yes(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    plugin = _with_plugin(pytester, "interrupt_at_sha256", INTERRUPTER.format(prefix="test_sha256"))
    # In a process of its own: an in-process run would hand the KeyboardInterrupt on to this test.
    result = pytester.runpytest_subprocess(
        *plugin, "-p", "no:cacheprovider", "--run", str(capsule_dir), "--root", str(project),
        "--report-dir", "reports", "-m", "custody", timeout=300,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report_path = pytester.path / "reports" / f"{DEMO_RUN_ID}.json"
    assert report_path.is_file(), "an interrupted session still writes its report"
    report = json.loads(report_path.read_text())
    find = [item for item in report["verdicts"] if item["audit"] == "manifest.sha256"]
    assert report["custody_gate"]["session"] == "interrupted"
    assert not find and report["summary"]["failed"] == 0
    assert (
        report["teardown"]["answer"] == "no"
        and "did not complete (interrupted)" in report["teardown"]["reason"]
    )


def test_a_session_ended_by_sigterm_writes_its_report_and_is_never_a_yes(
    run_audits, pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    """SIGTERM ended the process with no report, and the earlier session's "yes" stayed in the file."""
    whole = run_audits(capsule_dir, project, "-m", "custody").report
    assert whole is not None and whole["teardown"]["answer"] == "yes"
    plugin = _with_plugin(pytester, "terminate_at_safe_load", TERMINATOR.format(prefix="test_safe_load"))
    result = pytester.runpytest_subprocess(
        *plugin, "-p", "no:cacheprovider", "--run", str(capsule_dir), "--root", str(project),
        "--report-dir", "reports", "-m", "custody", timeout=300,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = json.loads((pytester.path / "reports" / f"{DEMO_RUN_ID}.json").read_text())
    assert report["session"] != whole["session"]
    assert report["custody_gate"]["session"] == "interrupted"
    assert report["teardown"]["answer"] == "no" and report["custody_ok"] is False


def test_a_crashed_worker_is_never_a_yes(pytester: pytest.Pytester, project: Path, capsule_dir: Path) -> None:
    plugin = _with_plugin(pytester, "kill_worker_at_roster", WORKER_KILLER.format(prefix="test_roster"))
    # A fresh interpreter: local xdist workers copy its sys.path, so they can import the plugin too.
    result = pytester.runpytest_subprocess(
        *plugin, "-p", "no:cacheprovider", "-p", "no:benchmark", "--run", str(capsule_dir), "--root", str(project),
        "--report-dir", "reports", "-m", "custody", "-n", "2", timeout=300,
    )  # fmt: skip
    report = json.loads((pytester.path / "reports" / f"{DEMO_RUN_ID}.json").read_text())
    roster = [item for item in report["verdicts"] if item["audit"] == "manifest.roster"]
    assert not [item for item in roster if item["verdict"] == "passed"]
    assert report["custody_ok"] is False and report["teardown"]["answer"] == "no"
    assert result.ret != 0


def test_the_expected_custody_set_is_what_pytest_collects(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    """The completeness rule reads the audit modules' source; a full session must reach exactly that set."""
    outcome = run_audits(capsule_dir, project, "-m", "custody", "--report-format", "json")
    collected: dict[str, set[str]] = {}
    for item in outcome.report["verdicts"]:
        if item["gate_class"] == "custody":
            collected.setdefault(item["audit"], set()).add(item["subject"])
    assert set(custody_audits()) == set(collected)
    location = Location(capsule_dir, Root(project, "--root"), "export")
    expected = expected_custody(Run.load(location))
    assert expected == {
        audit: len(subjects) for audit, subjects in collected.items() if audit != "manifest.receipt"
    }


# -- a capsule folder reached through a symlink -----------------------------------------------------
@pytest.fixture
def linked_project(project: Path, tmp_path: Path) -> Path:
    """``runs/demo`` is a symlink to a copy of the capsule outside the root (a mount of the box, say)."""
    outside = tmp_path / "mounted-box" / DEMO_RUN_ID
    shutil.copytree(project / "export" / DEMO_RUN_ID, outside)
    shutil.rmtree(project / "export" / DEMO_RUN_ID)
    (project / "runs").mkdir()
    (project / "runs" / DEMO_RUN_ID).symlink_to(outside, target_is_directory=True)
    _receipt(project).unlink()
    return project


@pytest.mark.parametrize("how", ["by-id", "by-path"])
def test_a_symlinked_capsule_folder_fails_custody(run_audits, linked_project: Path, how: str) -> None:
    spec = DEMO_RUN_ID if how == "by-id" else str(linked_project / "runs" / DEMO_RUN_ID)
    outcome = run_audits(spec, linked_project, "-m", "custody", report_stem=DEMO_RUN_ID)
    assert outcome.report["custody_ok"] is False and outcome.report["teardown"]["answer"] == "no"
    [safety] = outcome.find("manifest.path_safety")
    assert safety["verdict"] == "failed" and "is a symlink to" in safety["message"]
    assert outcome.result.ret == pytest.ExitCode.TESTS_FAILED


def test_verify_writes_no_receipt_for_a_symlinked_capsule_folder(
    linked_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--root", str(linked_project), "--pull-id", DEMO_RUN_ID]) == 1
    assert "is a symlink to" in capsys.readouterr().err
    assert not _receipt(linked_project).exists()


# -- one receipt rule ------------------------------------------------------------------------------
def test_a_receipt_without_a_roster_covers_nothing_anywhere(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    """The audit, the banner and ``down``'s question agree: a receipt must name the runs it covers."""
    receipt = json.loads(_receipt(project).read_text())
    del receipt["roster"]
    _receipt(project).write_text(json.dumps(receipt))
    status = receipt_status(project, [DEMO_RUN_ID])
    assert not status.ok and "not a valid receipt" in status.problems[0]
    outcome = run_audits(capsule_dir, project, "-m", "custody")
    [audit] = outcome.find("manifest.receipt")
    assert audit["verdict"] == "failed"
    assert outcome.report["receipt"]["current"] is False
    assert outcome.report["teardown"]["answer"] == "no"  # the receipt audit is part of the custody gate


def test_a_receipt_from_runaudit_1_is_not_current(project: Path) -> None:
    """Receipts made before the stat record (receipt/1) cannot prove the bytes are still the verified ones."""
    receipt = json.loads(_receipt(project).read_text())
    receipt["schema_version"] = "runaudit.receipt/1"
    _receipt(project).write_text(json.dumps(receipt))
    assert not receipt_status(project, [DEMO_RUN_ID]).ok


def test_verify_records_the_stat_key_of_every_verified_file(project: Path) -> None:
    assert main(["verify", "--root", str(project), "--pull-id", DEMO_RUN_ID]) == 0
    receipt = json.loads(_receipt(project).read_text())
    manifest = json.loads((project / "_trust" / "pulls" / DEMO_RUN_ID / manifests.MANIFEST).read_text())
    assert set(receipt["stat_keys"]) == {entry["path"] for entry in manifest["files"]}
    assert receipt["holder"] == "export" and receipt["roster"] == [DEMO_RUN_ID]
    assert receipt_status(project, [DEMO_RUN_ID]).ok


# -- the whole manifest is checked before any path in it is used ---------------------------------
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda doc: doc["empty_dirs"].append("demo/../../escaped"), "'..'"),
        (lambda doc: doc["empty_dirs"].append("/tmp/escaped"), "absolute"),
        (lambda doc: doc["empty_dirs"].append("other/folder"), "not inside a roster capsule"),
        (lambda doc: doc["totals"].update(bytes=1), "totals.bytes"),
        (lambda doc: doc["totals"].update(files=doc["totals"]["files"] + 1), "totals.files"),
        (
            lambda doc: doc["files"].append({**doc["files"][0], "path": doc["files"][0]["path"] + "/x"}),
            "also a folder",
        ),
    ],
    ids=[
        "empty-dir-dotdot",
        "empty-dir-absolute",
        "empty-dir-outside-roster",
        "totals-bytes",
        "totals-files",
        "file-as-folder",
    ],
)
def test_verify_refuses_a_manifest_that_is_not_usable_as_a_whole(
    project: Path, capsys: pytest.CaptureFixture[str], change, expected: str
) -> None:
    path = project / "_trust" / "pulls" / DEMO_RUN_ID / manifests.MANIFEST
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    assert main(["verify", "--root", str(project), "--pull-id", DEMO_RUN_ID]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert not (project.parent / "escaped").exists()
    assert not receipt_status(project, [DEMO_RUN_ID]).ok


def test_a_folder_inside_the_verified_copy_swapped_for_a_link_voids_the_receipt(
    project: Path, tmp_path: Path
) -> None:
    """The same bytes reached through a link live elsewhere (a mount of the box): they are not home."""
    assert receipt_status(project, [DEMO_RUN_ID]).ok
    inside = project / "export" / DEMO_RUN_ID / "test"
    elsewhere = tmp_path / "mounted-box" / "test"
    shutil.copytree(inside, elsewhere)
    shutil.rmtree(inside)
    inside.symlink_to(elsewhere, target_is_directory=True)
    status = receipt_status(project, [DEMO_RUN_ID])
    assert not status.ok and "reached through a symlink" in status.problems[0]


def test_the_demo_re_proves_a_receipt_that_no_longer_holds(project: Path) -> None:
    """A demo root verified by an older runaudit (receipt/1) is verified again, not trusted as it is."""
    import io

    from runaudit.examples.digits.build import ensure_demo

    receipt = json.loads(_receipt(project).read_text())
    receipt["schema_version"] = "runaudit.receipt/1"
    _receipt(project).write_text(json.dumps(receipt))
    assert not receipt_status(project, [DEMO_RUN_ID]).ok
    ensure_demo(project, progress=io.StringIO())
    assert receipt_status(project, [DEMO_RUN_ID]).ok


def test_a_forged_hash_cache_entry_never_makes_the_receipt_or_the_banner_say_yes(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    """The cache may stand in for manifest.sha256's hashes inside the trust boundary, but the receipt is the
    question ``runaudit down`` asks, without it: a byte changed after verification, with the cache forged to
    give the new stat key the listed digest, made the banner say yes while down refused."""
    from runaudit.hashing import HashCache

    history = capsule_dir / "train.csv"
    listed = next(
        entry["sha256"]
        for entry in json.loads(
            (project / "_trust" / "pulls" / DEMO_RUN_ID / manifests.MANIFEST).read_text()
        )["files"]
        if entry["path"] == f"{DEMO_RUN_ID}/train.csv"
    )
    data = bytearray(history.read_bytes())
    digit = next(index for index in range(len(data) - 1, 0, -1) if chr(data[index]).isdigit())
    data[digit] = ord("1") if data[digit] != ord("1") else ord("2")
    history.write_bytes(bytes(data))
    cache = HashCache(project)
    cache.put(history, history.lstat(), listed)
    cache.save()
    assert not receipt_status(project, [DEMO_RUN_ID], check_bytes=True).ok
    outcome = run_audits(capsule_dir, project, "-m", "custody")
    assert outcome.report["teardown"]["answer"] != "yes"
    [receipt] = outcome.find("manifest.receipt")
    assert receipt["verdict"] == "failed" and "train.csv" in receipt["message"]


def test_a_verified_copy_on_another_machine_s_folder_or_in_memory_is_no_copy(
    project: Path, capsule_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs/`` as an sshfs mount of the box's ``export/``: verify wrote a receipt, the report's banner and
    ``runaudit down`` said yes, and after unmounting nothing was here. (The kernel's mount table is the
    boundary: mounting FUSE needs /dev/fuse, so this test gives the table the mount would add.)"""
    from runaudit import mounts

    assert receipt_status(project, [DEMO_RUN_ID]).ok
    table = tmp_path / "mountinfo"
    real = mounts.MOUNTINFO.read_text() if mounts.MOUNTINFO.exists() else ""
    point = _in_table(str(capsule_dir.parent.resolve()))
    table.write_text(
        real + f"900 1 0:99 / {point} rw,nosuid - fuse.sshfs me@gpu-box:/srv/project/export rw\n"
    )
    monkeypatch.setattr(mounts, "MOUNTINFO", table)
    status = receipt_status(project, [DEMO_RUN_ID])
    assert not status.ok
    assert (
        "a fuse.sshfs mount of me@gpu-box:/srv/project/export: another machine's folder" in status.problems[0]
    )
    # rclone and gvfs reach the box the same way (the attack's rclone mount was approved), and a copy in
    # memory is gone at the next reboot.
    for kind, source, why in (
        ("fuse.rclone", "gpu-box:/srv/project/export", "a fuse.rclone mount of gpu-box:/srv/project/export"),
        ("fuse.gvfsd-fuse", "gvfsd-fuse", "a fuse.gvfsd-fuse mount of gvfsd-fuse: another machine's"),
        ("tmpfs", "tmpfs", "a tmpfs in memory: gone at the next reboot"),
    ):
        table.write_text(real + f"900 1 0:99 / {point} rw - {kind} {source} rw\n")
        status = receipt_status(project, [DEMO_RUN_ID])
        assert not status.ok and why in status.problems[0]
    # Memory behind a layer: an overlay whose upper folder is on tmpfs, ext4 on a RAM block device, ext4 on a
    # loop device whose backing file is on tmpfs (each got a receipt); and an NFS mount this machine serves
    # itself, which is how rclone mounts the box without FUSE. NFS from a file server stays storage.
    ram = str(tmp_path.resolve() / "ram")
    sys_block = tmp_path / "sys-block"
    (sys_block / "loop7" / "loop").mkdir(parents=True)
    (sys_block / "loop7" / "loop" / "backing_file").write_text(f"{ram}/runs.img\n")
    monkeypatch.setattr(mounts, "BLOCK_DEVICES", sys_block)
    shm = f"901 1 0:98 / {_in_table(ram)} rw - tmpfs tmpfs rw\n"
    for lines, why in (
        (
            shm + f"902 1 0:97 / {point} rw - overlay overlay rw,lowerdir=/usr,upperdir={_in_table(ram)}/up,"
            f"workdir={_in_table(ram)}/w\n",
            f"an overlay mount of overlay whose storage lies on {ram}, a tmpfs in memory",
        ),
        (f"902 1 0:97 / {point} rw - ext4 /dev/zram0 rw\n", "/dev/zram0, a block device in memory"),
        (
            shm + f"902 1 0:97 / {point} rw - ext4 /dev/loop7 rw\n",
            f"an ext4 mount of /dev/loop7 whose storage lies on {ram}, a tmpfs in memory",
        ),
        (f"902 1 0:97 / {point} rw - nfs localhost:/srv/box rw\n", "served by this machine itself"),
        (f"902 1 0:97 / {point} rw - nfs4 127.0.0.1:/ rw\n", "served by this machine itself"),
    ):
        table.write_text(real + lines)
        status = receipt_status(project, [DEMO_RUN_ID])
        assert not status.ok and why in status.problems[0], status.problems
    table.write_text(real + f"902 1 0:97 / {point} rw - nfs4 fileserver:/export rw\n")
    assert receipt_status(project, [DEMO_RUN_ID]).ok
    # verify writes no receipt over a copy in memory (the attack pulled into /dev/shm and was approved).
    table.write_text(real + f"900 1 0:99 / {point} rw - tmpfs tmpfs rw\n")
    from runaudit.runners.custody import verify_pull

    verification = verify_pull(project, DEMO_RUN_ID, log=lambda line: None)
    assert [line for line in verification.problems if "a tmpfs in memory" in line], verification.problems
    # A mount inside the capsule folder: most of its files were the box's, and verify wrote a receipt.
    inner = _in_table(str((capsule_dir / "test").resolve()))
    table.write_text(real + f"900 1 0:99 / {inner} rw - ext4 /dev/sdb1 rw\n")
    status = receipt_status(project, [DEMO_RUN_ID])
    assert (
        not status.ok and "is an ext4 mount of /dev/sdb1: its files are not on the disk" in status.problems[0]
    )
    # Storage that outlives the box (NFS, Lustre) is where users keep runs: still a copy.
    table.write_text(real + f"900 1 0:99 / {point} rw - nfs4 filer:/projects rw\n")
    assert receipt_status(project, [DEMO_RUN_ID]).ok


def _fake_sysfs(sysfs: Path, ram: str) -> None:
    """A ``/sys`` laid out as the kernel lays it out: each device's folder under ``devices/virtual/block``
    (a partition's inside its disk's), linked from ``block`` (disks) and ``class/block`` (every device).

    loop7 (partitioned, loop7p1) and loop8 keep their blocks in files on the tmpfs ``ram``; dm-0
    (``/dev/mapper/secret``, LUKS) is over loop8, dm-1 (``swapcrypt``) over zram0, and dm-2 (``vg-home``,
    LVM) over the disk partition sda1 alone.
    """
    devices = sysfs / "devices" / "virtual" / "block"
    layout: dict[str, dict[str, str]] = {
        "loop7": {"loop/backing_file": f"{ram}/runs.img\n", "loop7p1/partition": "1\n"},
        "loop8": {"loop/backing_file": f"{ram}/luks.img\n"},
        "zram0": {},
        "sda": {"sda1/partition": "1\n"},
        "dm-0": {"dm/name": "secret\n", "slaves/loop8": ""},
        "dm-1": {"dm/name": "swapcrypt\n", "slaves/zram0": ""},
        "dm-2": {"dm/name": "vg-home\n", "slaves/sda1": ""},
    }
    for disk, entries in layout.items():
        for entry, text in entries.items():
            file = devices / disk / entry
            file.parent.mkdir(parents=True, exist_ok=True)
            if entry.startswith("slaves/"):  # a slave is a link to the device it is built on
                file.symlink_to(Path("..", "..", file.name))
            else:
                file.write_text(text)
        for listing in (sysfs / "block", sysfs / "class" / "block"):
            listing.mkdir(parents=True, exist_ok=True)
            (listing / disk).symlink_to(devices / disk)
    for disk, part in (("loop7", "loop7p1"), ("sda", "sda1")):
        (sysfs / "class" / "block" / part).symlink_to(devices / disk / part)


def _fake_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, storage: str) -> tuple[Path, str, Path]:
    """A project folder, its mount point as the mount table spells it, and the table to write, on a ``/sys``
    whose loop devices keep their blocks under ``storage``."""
    from runaudit import mounts

    folder = tmp_path / "project"
    folder.mkdir()
    _fake_sysfs(tmp_path / "sys", storage)
    monkeypatch.setattr(mounts, "BLOCK_DEVICES", tmp_path / "sys" / "block")
    monkeypatch.setattr(mounts, "CLASS_BLOCK", tmp_path / "sys" / "class" / "block")
    monkeypatch.setattr(mounts, "MOUNTINFO", tmp_path / "mountinfo")
    return folder, _in_table(str(folder.resolve())), tmp_path / "mountinfo"


@pytest.mark.parametrize(
    ("kind", "source", "why"),
    [
        ("devtmpfs", "udev", "lies on {point}, a devtmpfs in memory: gone at the next reboot"),
        ("hugetlbfs", "hugetlbfs", "lies on {point}, a hugetlbfs in memory: gone at the next reboot"),
        (
            "ext4",
            "/dev/loop7p1",
            "an ext4 mount of /dev/loop7p1 whose storage lies on {ram}, a tmpfs in memory",
        ),
        (
            "ext4",
            "/dev/mapper/secret",
            "mount of /dev/mapper/secret whose storage lies on {ram}, a tmpfs in memory",
        ),
        ("btrfs", "/dev/dm-0", "a btrfs mount of /dev/dm-0 whose storage lies on {ram}, a tmpfs in memory"),
        (
            "ext4",
            "/dev/mapper/swapcrypt",
            "/dev/mapper/swapcrypt whose storage lies on /dev/zram0, a block device",
        ),
    ],
    ids=[
        "devtmpfs",
        "hugetlbfs",
        "loop-partition",
        "luks-over-tmpfs-loop",
        "dm-by-kernel-name",
        "luks-over-zram",
    ],
)
def test_a_copy_in_memory_under_dev_a_partition_or_device_mapper_is_no_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, source: str, why: str
) -> None:
    """A project root under ``/dev`` (devtmpfs, the kernel's RAM filesystem) got a receipt and ``down``
    approved: a reboot lost the only copy. So would a partition of a loop device, or LUKS over one, whose
    backing file is on tmpfs. (Mounting needs privileges the tests do not assume: they give the mount table
    and the ``/sys`` the mounts would show.)"""
    from runaudit import mounts

    ram = str(tmp_path.resolve() / "ram")
    folder, point, table = _fake_machine(tmp_path, monkeypatch, ram)
    table.write_text(
        f"20 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        f"901 20 0:98 / {_in_table(ram)} rw - tmpfs tmpfs rw\n"
        f"902 20 0:97 / {point} rw - {kind} {source} rw\n"
    )
    assert why.format(point=folder.resolve(), ram=ram) in (mounts.in_memory(folder / "runs") or ""), why


def test_storage_under_a_partition_or_device_mapper_on_a_disk_stays_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Following partitions and device-mapper layers down refuses no disk: LVM over a disk partition, a
    partition of a loop device whose backing file is on a disk, and a loop device whose backing file lies on
    its own mount (a loop of layers, followed once) are each storage that survives a reboot."""
    from runaudit import mounts

    disk = str(tmp_path.resolve() / "disk")
    folder, point, table = _fake_machine(tmp_path, monkeypatch, disk)
    root = "20 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
    for lines in (
        f"902 20 0:97 / {point} rw - ext4 /dev/mapper/vg-home rw\n",
        f"901 20 8:1 / {_in_table(disk)} rw - ext4 /dev/sda1 rw\n902 20 0:97 / {point} rw - ext4 /dev/loop7p1 rw\n",
        f"901 20 7:8 / {_in_table(disk)} rw - ext4 /dev/loop8 rw\n"
        f"902 20 0:97 / {point} rw - ext4 /dev/mapper/secret rw\n",
    ):
        table.write_text(root + lines)
        assert mounts.in_memory(folder / "runs") is None, lines
