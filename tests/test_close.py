"""``runaudit close``: seal a real produced run, or quarantine it with its reason; never delete, never overwrite."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runaudit.cli import main
from runaudit.examples.digits.build import produce
from runaudit.examples.digits.train import DEFAULT_CONFIG
from runaudit.manifest import CAPSULE_FILES_CAP
from runaudit.runners import close as closing
from runaudit.runners.close import CloseError, require_room

RUN_ID = "digits-e2"


def tree_digest(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below ``folder`` (directories by their presence)."""
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file()
        else "dir"
        for path in sorted(folder.rglob("*"))
    }


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project root whose ``active/<RUN_ID>`` was trained (2 epochs), evaluated and declared by the demo."""
    root = tmp_path_factory.mktemp("produced")
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"]["epochs"] = 2
    produce(root, RUN_ID, config, log=lambda line: None)
    return root


@pytest.fixture
def root(produced: Path, tmp_path: Path) -> Path:
    target = tmp_path / "root"
    shutil.copytree(produced, target, symlinks=True)
    return target


def close(root: Path, run_id: str = RUN_ID) -> int:
    return main(["close", run_id, "--root", str(root)])


def refusals(stderr: str) -> list[str]:
    """The error lines of a refused close; progress lines (``close <id>: ...``) may come before them, and
    any other line (a traceback, a list of every file) fails the test."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert all(line.startswith(("runaudit close: error:", f"close {RUN_ID}: ")) for line in lines), lines
    return [line for line in lines if line.startswith("runaudit close: error:")]


def quarantined(root: Path) -> list[Path]:
    folder = root / "quarantine"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_close_seals_the_run_with_its_bindings(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    active = root / "active" / RUN_ID
    before = tree_digest(active)
    inodes = {
        rel: (active / rel).stat().st_ino for rel in ("best.pth", "last.pth", "test/main/results.parquet")
    }
    assert close(root) == 0
    sealed = root / "export" / RUN_ID
    assert f"close {RUN_ID}: sealed {sealed}" in capsys.readouterr().out
    declared = json.loads((sealed / "run.json").read_text())
    assert declared["state"] == "closed" and declared["closed_utc"].endswith("Z")
    assert declared["config"]["sha256"] == sha256_of(sealed / "config.yaml")
    assert declared["checkpoints"]["best"]["sha256"] == sha256_of(sealed / "best.pth")
    assert declared["checkpoints"]["last"]["sha256"] == sha256_of(sealed / "last.pth")
    (selection,) = declared["selections"]
    assert selection["sha256"] == sha256_of(
        root / "_trust" / "selections" / f"{selection['selection_id']}.json"
    )
    # latest.pth is the resume anchor of active/ and never enters a capsule; the rest is sealed byte for byte.
    assert not (sealed / "latest.pth").exists()
    for rel in ("config.yaml", "train.csv", "best.pth", "last.pth", "test/main/metrics.json"):
        assert sha256_of(sealed / rel) == before[rel]
    # Sealed by rename, not by copy: the capsule holds the very inodes trained into active/ (no byte written
    # twice), and they left active/, so no later write there can reach a sealed byte.
    assert {rel: (sealed / rel).stat().st_ino for rel in inodes} == inodes
    assert all((sealed / rel).stat().st_nlink == 1 for rel in inodes)
    left = tree_digest(active)
    assert left["latest.pth"] == before["latest.pth"] and left["run.json"] == before["run.json"]
    assert not {"config.yaml", "train.csv", "best.pth", "last.pth", "test"} & set(left)
    assert not (root / "export" / ".partial" / RUN_ID).exists()
    assert quarantined(root) == []


def test_failing_candidate_is_quarantined_with_its_reason(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    active = root / "active" / RUN_ID
    (active / "test" / "main" / "scratch.txt").write_text("a note left in the test folder\n")
    before = tree_digest(active)
    assert close(root) == 1
    (attempt,) = quarantined(root)
    assert attempt.name.startswith(f"{RUN_ID}--")
    reason = (attempt / "QUARANTINE_REASON.txt").read_text()
    assert "capsule.closed_world" in reason and "test/main/scratch.txt" in reason
    report = json.loads((attempt / "AUDIT_REPORT.json").read_text())
    assert {item["audit"] for item in report["verdicts"] if item["verdict"] == "failed"} == {
        "capsule.closed_world"
    }
    assert report["custody_ok"] is False
    # The candidate moved whole: its bytes are kept for inspection, nothing was sealed or deleted.
    assert (attempt / "test" / "main" / "scratch.txt").is_file() and (attempt / "best.pth").is_file()
    assert not (root / "export" / RUN_ID).exists()
    assert not (root / "export" / ".partial" / RUN_ID).exists()
    assert tree_digest(active) == before
    assert f"quarantined at {attempt}" in capsys.readouterr().err


def test_existing_export_is_refused_before_anything_moves(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sealed = root / "export" / RUN_ID
    sealed.mkdir(parents=True)
    (sealed / "run.json").write_text('{"run_id": "digits-e2", "state": "closed"}\n')
    before_export, before_active = tree_digest(root / "export"), tree_digest(root / "active")
    assert close(root) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "already sealed" in lines[0] and "never overwritten" in lines[0], lines
    assert tree_digest(root / "export") == before_export
    assert tree_digest(root / "active") == before_active
    assert quarantined(root) == []


@pytest.mark.parametrize("standing", ["dangling-link", "file"])
def test_an_export_that_is_no_folder_is_one_line_and_nothing_moves(
    root: Path, capsys: pytest.CaptureFixture[str], standing: str
) -> None:
    """``export/`` as a link to a data disk not mounted yet, or as a file: close ended in a FileExistsError
    traceback."""
    shutil.rmtree(root / "export", ignore_errors=True)
    if standing == "file":
        (root / "export").write_text("x")
    else:
        (root / "export").symlink_to(root.parent / "not-mounted" / "export")
    before_active = tree_digest(root / "active")
    assert close(root) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert (
        err.startswith(f"runaudit close: error: {str(root / 'export')!r}: ")
        and "stands where a folder must be" in err
    )
    assert tree_digest(root / "active") == before_active


def test_a_close_interrupted_while_copying_shared_files_apart_leaves_nothing_in_the_capsule(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while close copied apart the sealed files a quarantined attempt still shared left a
    ``.train.csv.unshared`` inside the sealed capsule (``capsule.closed_world`` then failed for good), and the
    close run again only said "already sealed"."""
    from runaudit.runners import close as close_module

    assert close(root) == 0
    sealed = root / "export" / RUN_ID
    os.link(sealed / "train.csv", tmp_path / "a-quarantined-attempt-s-name")  # what a quarantine leaves
    before = tree_digest(sealed)
    real_replace = os.replace

    def interrupted(source: Any, target: Any) -> None:
        if close_module.UNSHARED_PREFIX in str(source):
            raise KeyboardInterrupt
        real_replace(source, target)

    monkeypatch.setattr(close_module.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        close_module._unshare(sealed, log=lambda line: None)
    monkeypatch.undo()
    assert tree_digest(sealed) == before  # no stray name in the capsule
    capsys.readouterr()
    assert close(root) == 0  # sealed already, by the first close: and the copy apart is finished
    assert "by an earlier close" in capsys.readouterr().out
    assert (sealed / "train.csv").stat().st_nlink == 1 and tree_digest(sealed) == before
    assert not list((root / "export" / ".partial").glob(f"{close_module.UNSHARED_PREFIX}*"))


def test_a_stale_candidate_is_removed_not_kept(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found on a box: a retry quarantined the stale copy of an interrupted close, keeping it on a full
    disk. A candidate was never sealed and never read: it held links into active/ or copies of it."""
    stale = root / "export" / ".partial" / RUN_ID
    stale.mkdir(parents=True)
    (stale / "best.pth").write_bytes(b"half-copied checkpoint from an interrupted close")
    assert close(root) == 0
    assert "removed a stale candidate" in capsys.readouterr().err
    assert quarantined(root) == []
    assert (root / "export" / RUN_ID / "run.json").is_file() and not stale.exists()


def test_a_run_whose_writer_is_alive_is_not_closed(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trainer still holding active/<id> would keep writing into files being sealed."""
    active = root / "active" / RUN_ID
    before = tree_digest(active)
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(active)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            assert close(root) == 2
        finally:
            holder.kill()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "a writer still holds" in lines[0], lines
    assert tree_digest(active) == before
    assert not (root / "export" / RUN_ID).exists() and quarantined(root) == []
    assert close(root) == 0  # the kernel dropped the lock with its holder


HOLD_LOCK = """
import sys, time
from pathlib import Path
from typing import Any
from runaudit.workspace import try_lock
held = try_lock(Path(sys.argv[1]))
print("locked" if held else "busy", flush=True)
time.sleep(120)
"""


def other_filesystem_export(root: Path, tmp_path: Path) -> Path:
    """``export/`` as a link to a folder on /dev/shm (tmpfs), another filesystem than the test's tmp."""
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="runaudit-export-"))
    assert os.stat(elsewhere).st_dev != os.stat(tmp_path).st_dev, "needs /dev/shm on another filesystem"
    (root / "export").symlink_to(elsewhere)
    return elsewhere


@pytest.fixture
def shm_export(root: Path, tmp_path: Path) -> Iterator[Path]:
    elsewhere = other_filesystem_export(root, tmp_path)
    yield elsewhere
    shutil.rmtree(elsewhere, ignore_errors=True)


def test_across_filesystems_the_capsule_is_copied_and_active_keeps_its_bytes(
    root: Path, shm_export: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    active = root / "active" / RUN_ID
    before = tree_digest(active)
    assert close(root) == 0
    assert "another filesystem" in capsys.readouterr().err
    assert sha256_of(shm_export / RUN_ID / "best.pth") == before["best.pth"]
    assert tree_digest(active) == before  # copies share no inode, so active/ keeps its own
    assert not (shm_export / ".partial" / RUN_ID).exists()


def test_across_filesystems_a_refused_attempt_is_copied_to_quarantine(
    root: Path, shm_export: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With export/ on another disk, the rename of a refused attempt from export/.partial/ to quarantine/
    raised a traceback (EXDEV) and left the attempt in .partial/."""
    (root / "active" / RUN_ID / "test" / "main" / "scratch.txt").write_text("not part of the contract\n")
    assert close(root) == 1
    (attempt,) = quarantined(root)
    assert "capsule.closed_world" in (attempt / "QUARANTINE_REASON.txt").read_text()
    assert (attempt / "best.pth").is_file() and not (shm_export / ".partial" / RUN_ID).exists()


def test_a_special_file_that_cannot_be_copied_is_one_line_and_nothing_half_sealed(
    root: Path, shm_export: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found on a box: a failed copy dumped shutil.Error's list of every file (~70 KB) and left the partial
    copy holding the disk."""
    active = root / "active" / RUN_ID
    os.mkfifo(active / "test" / "main" / "pipe")
    before = tree_digest(active)
    assert close(root) == 2
    (line,) = refusals(capsys.readouterr().err)
    assert "building the candidate failed" in line and "pipe" in line and len(line) < 600, line
    assert tree_digest(active) == before
    assert not (shm_export / ".partial" / RUN_ID).exists() and not (shm_export / RUN_ID).exists()
    assert quarantined(root) == []


@pytest.mark.parametrize("across", [False, True], ids=["linked", "copied"])
def test_a_disk_that_refuses_writes_mid_close_leaves_nothing_half_sealed(
    root: Path, tmp_path: Path, across: bool
) -> None:
    """The write limit stands in for a full disk: every write past it fails as ENOSPC would, half way through
    the copy (across filesystems) or at the sealed run.json (same filesystem, where nothing else is written)."""
    exports = other_filesystem_export(root, tmp_path) if across else root / "export"
    active = root / "active" / RUN_ID
    before = tree_digest(active)
    limit = 200_000 if across else 1_000  # past best.pth, short of last.pth; short of run.json

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "runaudit", "close", RUN_ID, "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=limited,
    )
    try:
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = refusals(done.stderr)
        assert "building the candidate failed" in line, done.stderr
        assert tree_digest(active) == before
        assert not (exports / ".partial" / RUN_ID).exists() and not (exports / RUN_ID).exists()
        assert quarantined(root) == []
    finally:
        if across:
            shutil.rmtree(exports, ignore_errors=True)


def test_a_copy_that_would_not_fit_is_refused_before_a_byte_moves(tmp_path: Path) -> None:
    with pytest.raises(CloseError, match="nothing was copied"):
        require_room(needed=10 << 30, free=10 << 30, where=tmp_path)
    require_room(needed=1 << 30, free=2 << 30, where=tmp_path)  # fits with its margin


@pytest.mark.parametrize(
    ("run_id", "named"),
    [
        ("../escape", "not a safe id"),
        ("never-produced", "no active run to close"),
        ("hardware", "is reserved"),
    ],
    ids=["unsafe-id", "no-active-run", "reserved-id"],
)
def test_refusals_are_one_line(
    root: Path, capsys: pytest.CaptureFixture[str], run_id: str, named: str
) -> None:
    before = tree_digest(root)
    assert close(root, run_id) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("runaudit close: error:") and named in lines[0], lines
    assert tree_digest(root) == before


def test_an_interpreter_without_torch_is_an_environment_error_not_a_quarantine(
    root: Path, tmp_path: Path
) -> None:
    """Found on a box: closing with a Python that lacked torch quarantined a good run as if it were bad."""
    hidden = tmp_path / "site"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(
        "import sys\nsys.modules['torch'] = None  # as if not installed\n"
    )
    before = tree_digest(root / "active" / RUN_ID)
    done = subprocess.run(
        [sys.executable, "-m", "runaudit", "close", RUN_ID, "--root", str(root)],
        env={**os.environ, "PYTHONPATH": str(hidden)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "no module named torch" in said[0] and "--python" in said[0], said
    assert tree_digest(root / "active" / RUN_ID) == before
    assert not (root / "export" / RUN_ID).exists() and not (root / "export" / ".partial" / RUN_ID).exists()
    assert quarantined(root) == []


def test_a_seal_after_a_quarantine_shares_no_inode_with_it(root: Path) -> None:
    """Found in review: a quarantined attempt keeps links into active/; once the fixed run sealed, editing the
    quarantined copy in place would have changed the capsule's bytes."""
    active = root / "active" / RUN_ID
    (active / "test" / "main" / "scratch.txt").write_text("a note left in the test folder\n")
    assert close(root) == 1
    (attempt,) = quarantined(root)
    (active / "test" / "main" / "scratch.txt").unlink()  # the fix
    assert close(root) == 0
    sealed = root / "export" / RUN_ID / "best.pth"
    before = sealed.read_bytes()
    assert sealed.stat().st_nlink == 1 and sealed.stat().st_ino != (attempt / "best.pth").stat().st_ino
    with (attempt / "best.pth").open("r+b") as handle:  # an in-place edit of the quarantined evidence
        handle.write(b"\0" * 64)
    assert sealed.read_bytes() == before


def test_an_interrupted_release_is_finished_by_the_next_close(root: Path) -> None:
    """Found in review: a close killed between its rename and the release left active/'s names sharing the
    sealed inodes, and every later close stopped at "already sealed" without releasing them."""
    assert close(root) == 0
    sealed = root / "export" / RUN_ID / "best.pth"
    os.link(sealed, root / "active" / RUN_ID / "best.pth")  # as the interrupted close left it
    assert close(root) == 0  # sealed by the first close ...
    assert not (root / "active" / RUN_ID / "best.pth").exists()  # ... and the shared name is gone
    assert sealed.stat().st_nlink == 1


def test_a_close_run_again_after_it_sealed_says_sealed_unless_the_run_changed(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A close killed after its rename, run again, said "already sealed" and exited 2 over a capsule that
    was sealed, true and passing: a teardown script stopped there. Sealed it is, as long as active/ holds
    nothing the capsule does not (copies left by a close across filesystems are the capsule's bytes)."""
    assert close(root) == 0
    active, sealed = root / "active" / RUN_ID, root / "export" / RUN_ID
    capsys.readouterr()
    for name in ("config.yaml", "train.csv", "best.pth"):  # what a copy to another filesystem leaves
        shutil.copy2(sealed / name, active / name)
    shutil.copytree(sealed / "test", active / "test")
    before = tree_digest(sealed)
    assert close(root) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and f"sealed {sealed}" in out and "by an earlier close" in out, out
    assert tree_digest(sealed) == before

    for changed in ("train.csv", "test/main/metrics.json"):
        saved = (active / changed).read_bytes()
        (active / changed).write_bytes(saved[:-1] + bytes([saved[-1] ^ 1]))  # a run that went on
        assert close(root) == 2, changed
        assert "already sealed" in capsys.readouterr().err
        (active / changed).write_bytes(saved)
    (active / "train.csv").unlink()
    os.mkfifo(active / "train.csv")  # never opened: not the capsule's bytes
    assert close(root) == 2
    assert "already sealed" in capsys.readouterr().err
    assert tree_digest(sealed) == before


@pytest.mark.parametrize("standing", ["link-to-active", "file"])
def test_an_export_of_the_run_that_is_no_folder_is_refused_and_nothing_is_released(
    root: Path, capsys: pytest.CaptureFixture[str], standing: str
) -> None:
    """``export/<id>`` as a link to ``../active/<id>``: close released every file of the never-sealed run
    (each "shared its inode" with itself, 412 files deleted) and said it was sealed."""
    active, final = root / "active" / RUN_ID, root / "export" / RUN_ID
    final.parent.mkdir(exist_ok=True)
    if standing == "file":
        final.write_text("x")
    else:
        final.symlink_to(Path("..") / "active" / RUN_ID)
    before = tree_digest(active)
    assert close(root) == 2
    (line,) = refusals(capsys.readouterr().err)
    assert ("is a symlink" if standing != "file" else "is not a folder") in line, line
    assert tree_digest(active) == before


def test_export_and_active_that_are_one_folder_are_refused_and_nothing_is_released(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export/`` a link to ``active/`` (or both links to one scratch folder): export/<id> passed as a real
    folder, every file of the run "shared its inode" with itself, and close deleted all of them."""
    active = root / "active" / RUN_ID
    shutil.rmtree(root / "export", ignore_errors=True)
    (root / "export").symlink_to("active")
    before = tree_digest(active)
    assert close(root) == 2
    (line,) = refusals(capsys.readouterr().err)
    assert "are one folder" in line, line
    assert tree_digest(active) == before


def test_a_capsule_changed_since_its_seal_is_never_said_sealed_again(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Close run again said "sealed by an earlier close", exit 0, over a capsule whose train.csv was edited
    after its seal: the closure audits run again on that path, and a capsule that fails them is refused."""
    assert close(root) == 0
    sealed = root / "export" / RUN_ID / "train.csv"
    sealed.chmod(0o644)
    sealed.write_text(sealed.read_text() + "\n")  # a blank line more
    capsys.readouterr()
    assert close(root) == 2
    (line,) = refusals(capsys.readouterr().err)
    assert "no longer passes its closure audits" in line, line


def test_a_close_says_sealed_again_only_of_the_capsule_this_run_sealed(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once sealed, active/<id> holds no sealed name, so "nothing left to seal" held for any export/<id>: an
    empty folder, or a new run reusing the id before its first file, was said sealed, exit 0."""
    from runaudit.workspace import try_lock

    assert close(root) == 0
    active, final = root / "active" / RUN_ID, root / "export" / RUN_ID
    capsys.readouterr()
    holder = try_lock(active)  # a writer of a run that reuses the id, still training
    assert holder is not None
    try:
        assert close(root) == 2
        assert "a writer still holds" in capsys.readouterr().err
    finally:
        holder.close()
    draft = (active / "run.json").read_text()
    (active / "run.json").write_text(draft.replace("{", '{"note": "a new run",', 1))
    assert close(root) == 2  # the draft is not the one the capsule sealed
    assert "already sealed" in capsys.readouterr().err
    (active / "run.json").write_text(draft)
    assert close(root) == 0
    capsys.readouterr()
    final.rename(root / "sealed-elsewhere")
    final.mkdir()  # a folder nothing sealed
    assert close(root) == 2
    assert "already sealed" in capsys.readouterr().err


def test_a_fifo_in_place_of_the_writers_lock_is_one_line_not_a_hang(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    active = root / "active" / RUN_ID
    (active / ".writer.lock").unlink(missing_ok=True)
    os.mkfifo(active / ".writer.lock")  # opening it to write would wait for a reader forever
    assert close(root) == 2
    (line,) = refusals(capsys.readouterr().err)
    assert "cannot lock" in line and ".writer.lock" in line, line
    assert not (root / "export" / RUN_ID).exists()


@pytest.mark.parametrize("folder", ["export/.partial", "quarantine"])
def test_a_working_folder_linked_out_of_the_project_is_refused_never_followed(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    """``export/.partial`` or ``quarantine/`` as a symlink once took the candidate's links of every sealed
    byte (and the refused attempt's report) to wherever it pointed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / folder).parent.mkdir(parents=True, exist_ok=True)
    (root / folder).symlink_to(outside, target_is_directory=True)
    (root / "active" / RUN_ID / "test" / "main" / "stray.txt").write_text("x")  # capsule.closed_world refuses

    assert close(root) == 2
    (line,) = refusals(capsys.readouterr().err)
    assert f"{root / folder} is a symlink" in line
    assert list(outside.iterdir()) == []
    assert (
        not (root / "export" / RUN_ID).exists() and not quarantined(root) if folder != "quarantine" else True
    )


def test_a_file_written_while_the_candidate_is_audited_is_never_sealed(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The candidate hard-links active/'s files: a writer ignoring the workspace lock appended a row to
    train.csv after the audits had read it, and the close sealed the unaudited row."""
    from runaudit.runners import close as closing

    audit = closing.run_suites

    def audit_then_write(*args: object, **kwargs: object) -> object:
        outcome = audit(*args, **kwargs)
        with (root / "active" / RUN_ID / "train.csv").open("a") as train:
            train.write("9,999,0.1,0.1,0.1,0.1,0.1,0.1,0.1\n")
        return outcome

    monkeypatch.setattr(closing, "run_suites", audit_then_write)
    assert close(root) == 1
    assert not (root / "export" / RUN_ID).exists()
    (attempt,) = quarantined(root)
    reason = (attempt / "QUARANTINE_REASON.txt").read_text()
    assert "changed while the candidate was audited (train.csv)" in reason


def test_a_folder_nested_thousands_deep_is_one_refusal_line(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 3000-deep chain of folders under test/ ended the close in a RecursionError traceback."""
    folder = root / "active" / RUN_ID / "test" / "main"
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(3000):  # relative to a descriptor: the whole path is longer than PATH_MAX
            os.mkdir("d", dir_fd=descriptor)
            inner = os.open("d", os.O_RDONLY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = inner
    finally:
        os.close(descriptor)

    try:
        assert close(root) == 2
        (line,) = refusals(capsys.readouterr().err)
        assert "building the candidate failed" in line and "nothing was sealed or quarantined" in line
        assert not (root / "export" / ".partial" / RUN_ID).exists()
    finally:
        _remove_chain(folder, "d")


def _remove_chain(folder: Path, name: str) -> None:
    """Remove a chain of empty folders ``name/name/…`` too deep for a path (or shutil.rmtree's recursion)."""
    descriptors = [os.open(folder, os.O_RDONLY)]
    while True:
        try:
            descriptors.append(os.open(name, os.O_RDONLY, dir_fd=descriptors[-1]))
        except FileNotFoundError:
            break
    for parent in reversed(descriptors[:-1]):
        os.close(descriptors.pop())
        os.rmdir(name, dir_fd=parent)
    os.close(descriptors.pop())


def test_a_run_past_the_capsule_file_cap_is_refused_before_it_is_sealed(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Closing sealed 20,001 tracker logs (the layout allows any number) into a capsule that the pull
    manifest then refused, for good: a sealed capsule is never rewritten, so the run had to be trained
    again. Now the close refuses first and leaves active/ as it was, to be pruned and closed again."""
    active = root / "active" / RUN_ID
    logs = active / "trackers" / "tensorboard"
    logs.mkdir(parents=True)
    for index in range(CAPSULE_FILES_CAP):
        (logs / f"events.out.tfevents.{index}").touch()
    before = tree_digest(active)
    assert close(root) == 2
    (line,) = refusals(capsys.readouterr().err)
    assert f"more than the {CAPSULE_FILES_CAP:,} files" in line and "docs/capsule.md §9" in line
    assert "nothing was sealed or quarantined" in line
    assert tree_digest(active) == before
    assert not (root / "export" / RUN_ID).exists() and quarantined(root) == []
    assert not os.path.lexists(root / "export" / ".partial" / RUN_ID)


def test_the_file_count_stops_past_the_cap_and_counts_run_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(closing, "CAPSULE_FILES_CAP", 6)
    (tmp_path / "test" / "a" / "b").mkdir(parents=True)
    for name in ("x", "y", "z"):
        (tmp_path / "test" / "a" / "b" / name).touch()
    (tmp_path / "best.pth").touch()
    os.symlink("b", tmp_path / "test" / "a" / "link")  # never followed nor counted: a manifest lists none
    os.mkfifo(tmp_path / "test" / "a" / "fifo")  # nor a special file (the closure audits refuse both)
    assert closing._too_many_files(tmp_path, ["best.pth", "test"]) is None  # 3 + best.pth + run.json
    (tmp_path / "test" / "a" / "w").touch()
    (tmp_path / "test" / "a" / "v").touch()
    assert closing._too_many_files(tmp_path, ["best.pth", "test"]) == 7


@pytest.mark.parametrize("module", ["runaudit", "runaudit.cli"])
def test_either_module_form_runs_the_verb(tmp_path: Path, module: str) -> None:
    """``python -m runaudit.cli close ...`` did nothing and exited 0: a script that used it "closed" nothing."""
    done = subprocess.run(
        [sys.executable, "-m", module, "close", RUN_ID, "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and "there is no active run to close" in done.stderr, done


@pytest.mark.parametrize("swapped", ["export", "export-run"])
def test_a_release_through_a_path_swapped_for_the_run_s_own_folder_releases_nothing(
    produced: Path, tmp_path: Path, swapped: str
) -> None:
    """Close checks that export/<id> is no link to active/<id>, then releases the sealed names. A swap in
    between (export/ or export/<id> made a link to the run's folder) released the run's files through
    themselves, in 16-21 of 20,000 raced closes. The release now walks the folders it opened, and releases
    nothing through two descriptors of one folder; this runs it on the swapped paths directly."""
    root = tmp_path / "root"
    shutil.copytree(produced, root, symlinks=True)
    active = root / "active" / RUN_ID
    if swapped == "export":
        (root / "export").symlink_to("active")
    else:
        (root / "export").mkdir()
        (root / "export" / RUN_ID).symlink_to(Path("..") / "active" / RUN_ID)
    before = tree_digest(active)
    said: list[str] = []
    closing._release_sealed_names(active, root / "export" / RUN_ID, said.append)
    assert tree_digest(active) == before
    assert len(said) == 1 and "released nothing" in said[0], said


@pytest.mark.parametrize("writes", [1, 2])
def test_bytes_a_writer_renames_over_a_sealed_name_during_the_release_are_kept(
    root: Path, monkeypatch: pytest.MonkeyPatch, writes: int
) -> None:
    """A writer that ignores the lock and renames new bytes over ``active/<id>/best.pth`` just after the
    release found that name to be the sealed file lost those bytes: the release unlinked the name, which by
    then held the writer's file. The release now moves the name aside, checks what it moved, and gives back
    anything that is not the sealed file. This puts the writer's rename right after the release's check, and
    (``writes=2``) a second one right after the move aside: the second keeps the name, the first its bytes
    under the aside name."""
    active, final = root / "active" / RUN_ID, root / "export" / RUN_ID
    final.mkdir(parents=True)
    for name in ("best.pth", "config.yaml"):
        os.link(active / name, final / name)
    sealed = os.stat(final / "best.pth")
    checked = closing._same_file
    written: list[bytes] = []

    def write() -> None:
        written.append(f"the writer's checkpoint {len(written) + 1}".encode())
        (active / "best.pth.new").write_bytes(written[-1])
        os.replace(active / "best.pth.new", active / "best.pth")

    def a_writer_renames_in_between(one: os.stat_result, other: os.stat_result) -> bool:
        same = checked(one, other)
        if (
            same
            and checked(one, sealed)
            and not written
            and (active / "best.pth").samefile(final / "best.pth")
        ):
            write()  # after the check that the name is the sealed file
        elif checked(other, sealed) and not same and len(written) < writes:
            write()  # after the move aside, before the name is given back
        return same

    monkeypatch.setattr(closing, "_same_file", a_writer_renames_in_between)
    said: list[str] = []
    closing._release_sealed_names(active, final, said.append)
    monkeypatch.undo()
    assert len(written) == writes
    assert (active / "best.pth").read_bytes() == written[-1]
    assert not (active / "config.yaml").exists()  # released as before
    aside = [path for path in active.iterdir() if closing.RELEASE_ASIDE in path.name]
    assert [path.read_bytes() for path in aside] == written[:-1]
    assert final.joinpath("best.pth").read_bytes() != written[0] and os.stat(final / "best.pth").st_nlink == 1
    assert any("best.pth" in line for line in said), said


def test_a_folder_a_writer_puts_at_a_sealed_name_during_the_release_keeps_the_name(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder cannot be linked back: it stayed under the aside name though nothing had made the name again."""
    active, final = root / "active" / RUN_ID, root / "export" / RUN_ID
    final.mkdir(parents=True)
    os.link(active / "best.pth", final / "best.pth")
    sealed = os.stat(final / "best.pth")
    checked = closing._same_file

    def a_writer_puts_a_folder_after_the_check(one: os.stat_result, other: os.stat_result) -> bool:
        same = checked(one, other)
        if same and checked(one, sealed) and (active / "best.pth").is_file():
            (active / "best.pth").unlink()
            (active / "best.pth").mkdir()
            (active / "best.pth" / "shard-0").write_bytes(b"the writer's shard")
        return same

    monkeypatch.setattr(closing, "_same_file", a_writer_puts_a_folder_after_the_check)
    said: list[str] = []
    closing._release_sealed_names(active, final, said.append)
    monkeypatch.undo()
    assert (active / "best.pth" / "shard-0").read_bytes() == b"the writer's shard"
    assert not [path for path in active.iterdir() if closing.RELEASE_ASIDE in path.name]
    assert any("best.pth" in line and "new bytes are kept" in line for line in said), said


def test_a_release_killed_between_its_move_aside_and_its_unlink_is_finished_by_the_next_one(
    root: Path,
) -> None:
    """A close killed there left the sealed file under an aside name in active/: it shared the sealed inode,
    and closing again (the documented recovery) never released it. The next release sweeps such names that
    are still sealed files; one that holds anything else is a writer's, and stays."""
    active, final = root / "active" / RUN_ID, root / "export" / RUN_ID
    (final / "test").mkdir(parents=True)
    for name in ("best.pth", "config.yaml"):
        os.link(active / name, final / name)
    killed = f".{closing.RELEASE_ASIDE}-{'0' * 16}"
    os.rename(active / "config.yaml", active / killed)  # as the kill leaves it
    other = active / f".{closing.RELEASE_ASIDE}-{'1' * 16}"
    other.write_bytes(b"not a sealed file")
    said: list[str] = []
    closing._release_sealed_names(active, final, said.append)
    assert not (active / killed).exists() and not (active / "best.pth").exists()
    assert other.read_bytes() == b"not a sealed file"
    assert os.stat(final / "config.yaml").st_nlink == 1 and os.stat(final / "best.pth").st_nlink == 1
    assert said and "2 sealed file(s) left" in said[0], said
