"""`runaudit manifest`, `verify` and `accept`: refusals, receipts bound to one manifest, independence."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from capsules import listed_files
from starter_env import HOSTILE_PYTEST_ENV

from runaudit import hashing
from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.manifest import MANIFEST, RECEIPT
from runaudit.receipts import receipt_status
from runaudit.runners.suite import run_suites
from runaudit.schema import schema_problems


def _roster(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "roster.txt"
    path.write_text(text)
    return path


def _manifest(project: Path, roster: Path, pull_id: str, *extra: str) -> int:
    return main(["manifest", "--root", str(project), "--roster", str(roster), "--pull-id", pull_id, *extra])


@pytest.mark.parametrize(
    ("roster_text", "damage", "expected"),
    [
        ("# nothing\n\n", None, "the roster is empty"),
        ("demo\nghost\n", None, "missing ['ghost']"),
        ("demo\n../etc\n", None, "unsafe run id"),
        ("demo\ndemo\n", None, "listed twice"),
        ("demo\nDEMO\n", None, "collide after case folding"),
        ("demo\n", lambda export: (export / "other").mkdir(), "unexpected ['other']"),
        ("demo\n", lambda export: (export / "demo" / "x.tmp").write_text(""), "*.tmp residue"),
        ("demo\n", lambda export: (export / "demo" / "ln").symlink_to("/etc/passwd"), "symlink"),
    ],
    ids=[
        "empty",
        "missing-capsule",
        "unsafe-id",
        "duplicate",
        "case-fold",
        "unexpected-capsule",
        "tmp",
        "symlink",
    ],
)
def test_manifest_refusals(project: Path, tmp_path: Path, capsys, roster_text, damage, expected) -> None:
    if damage is not None:
        damage(project / "export")
    code = _manifest(project, _roster(tmp_path, roster_text), "p2")
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (project / "_trust" / "pulls" / "p2").exists()


def test_a_subset_manifest_lists_one_run_of_a_box_that_sealed_others(project: Path, capsys) -> None:
    """``watch --then close,manifest`` wrote the manifest of the run it watched: on a box that had sealed an
    earlier run, it was refused ("unexpected ['other']") and the chain failed for every run after the first."""
    shutil.copytree(project / "export" / DEMO_RUN_ID, project / "export" / "other")
    args = ["manifest", "--root", str(project), "--runs", DEMO_RUN_ID, "--pull-id"]
    assert main([*args, "p2"]) == 2
    assert "unexpected ['other']; list the other sealed runs too, or pass --subset" in capsys.readouterr().err
    assert main([*args, "p3", "--subset"]) == 0
    listed = json.loads((project / "_trust" / "pulls" / "p3" / MANIFEST).read_text())
    assert listed["roster"] == [DEMO_RUN_ID] and {
        entry["path"].split("/")[0] for entry in listed["files"]
    } == {DEMO_RUN_ID}


def test_an_id_or_a_path_ending_in_a_line_break_is_unsafe(project: Path, tmp_path: Path) -> None:
    """``$`` matches before a final line break: "demo\\n" passed as a safe id, a manifest path and a roster
    id, and such names reach rsync's newline-separated ``--files-from`` and the messages unescaped."""
    from runaudit.ids import is_safe_id
    from runaudit.manifest import path_problems

    assert is_safe_id("demo") and not is_safe_id("demo\n") and not is_safe_id("demo\r")
    assert path_problems("demo/best.pth") == [] and path_problems("demo/best.pth\n") != []
    assert _manifest(project, _roster(tmp_path, "demo\n"), "p2") == 0
    document = json.loads((project / "_trust" / "pulls" / "p2" / MANIFEST).read_text())
    assert schema_problems("pull", document) == []
    for field, value in (("roster", ["demo\n"]), ("pull_id", "p2\n")):
        assert schema_problems("pull", {**document, field: value}) != [], field


def test_manifest_is_complete_sorted_valid_and_immutable(project: Path, tmp_path: Path, capsys) -> None:
    roster = _roster(tmp_path, "demo  # the demo run\n")
    assert _manifest(project, roster, "p2", "--node", "box-a") == 0
    target = project / "_trust" / "pulls" / "p2" / MANIFEST
    document = json.loads(target.read_text())
    assert schema_problems("pull", document) == []
    paths = [entry["path"] for entry in document["files"]]
    on_disk = sorted(
        p.relative_to(project / "export").as_posix()
        for p in (project / "export" / DEMO_RUN_ID).rglob("*")
        if p.is_file()
    )
    assert paths == sorted(paths) == on_disk
    assert document["totals"] == {
        "files": len(paths),
        "bytes": sum(entry["bytes"] for entry in document["files"]),
    }
    assert document["producer"]["node"] == "box-a"
    assert [p.name for p in target.parent.iterdir()] == [MANIFEST]  # no temp sibling left behind
    capsys.readouterr()
    assert _manifest(project, roster, "p2") == 2
    assert "immutable" in capsys.readouterr().err


def test_verify_writes_a_bound_receipt_then_revokes_it_when_bytes_change(
    project: Path, tmp_path: Path, capsys
) -> None:
    assert _manifest(project, _roster(tmp_path, "demo\n"), "p2") == 0
    assert main(["verify", "--root", str(project), "--pull-id", "p2"]) == 0
    pull = project / "_trust" / "pulls" / "p2"
    receipt = json.loads((pull / RECEIPT).read_text())
    assert schema_problems("receipt", receipt) == []
    assert receipt["manifest_sha256"] == hashlib.sha256((pull / MANIFEST).read_bytes()).hexdigest()
    assert set(receipt["checkpoints"]) == {"demo/best.pth", "demo/last.pth"}
    assert all(item["safe_load"] and item["tensors"] > 0 for item in receipt["checkpoints"].values())
    assert receipt_status(project, ["demo"]).ok

    best = project / "export" / DEMO_RUN_ID / "best.pth"
    data = bytearray(best.read_bytes())
    data[-100] ^= 0xFF  # one byte, same size
    best.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", "--root", str(project), "--pull-id", "p2"]) == 1
    err = capsys.readouterr().err
    assert "manifest.sha256[best.pth] failed" in err and "no receipt written" in err
    assert not (pull / RECEIPT).exists()
    assert [p.name for p in pull.glob("PULL_VERIFIED.revoked-*.json")]  # moved aside, never deleted
    status = receipt_status(project, ["demo"])
    assert not status.ok and "no receipt" in status.problems[0]


@pytest.mark.parametrize(
    "swapped", [f"{DEMO_RUN_ID}/test/main/vis/noise/prediction", "."], ids=["inner-folder", "holder"]
)
def test_a_folder_swapped_away_while_verify_hashes_writes_no_receipt(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, swapped: str
) -> None:
    """A process swaps a good copy of a folder in while the sessions hash, and the damaged one back after: no
    file's own stat key changes, so the receipt was written over bytes the capsule no longer holds. The
    holder itself (``export/``) is a folder on the way too."""
    from runaudit.runners import custody

    assert _manifest(project, _roster(tmp_path, "demo\n"), "p2") == 0
    folder = (project / "export").joinpath(swapped)
    good = tmp_path / "good"
    shutil.copytree(folder, good, symlinks=True)
    png = sorted(
        (project / "export" / DEMO_RUN_ID / "test" / "main" / "vis" / "noise" / "prediction").iterdir()
    )[0]
    data = bytearray(png.read_bytes())
    data[-20] ^= 0xFF  # same size
    png.write_bytes(bytes(data))
    real = custody.run_suites

    def swapped(*args, **kwargs):
        aside = tmp_path / "aside"
        os.rename(folder, aside)
        os.rename(good, folder)
        try:
            return real(*args, **kwargs)
        finally:
            os.rename(folder, good)
            os.rename(aside, folder)

    monkeypatch.setattr(custody, "run_suites", swapped)
    assert main(["verify", "--root", str(project), "--pull-id", "p2"]) == 1
    err = capsys.readouterr().err
    assert f"{folder.name}/ was moved, replaced or changed while it was being verified" in err
    assert not (project / "_trust" / "pulls" / "p2" / RECEIPT).exists()


def test_verify_writes_every_file_and_folder_back_to_disk_before_it_takes_their_keys(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page dirtied through a shared writable mapping before verify took no fault when written again after
    it: best.pth got a NaN with its stat key unchanged, and the receipt stayed current (an attack on ext4 that
    mapped best.pth, wrote it unchanged before verify and a NaN after). Written back first, every later
    write faults and stamps the file; and a receipt never speaks for bytes still only in the page cache."""
    from runaudit import receipts
    from runaudit.runners import custody

    assert _manifest(project, _roster(tmp_path, "demo\n"), "p2") == 0
    flushed: set[Path] = set()
    real_fsync, real_snapshot = os.fsync, custody.snapshot
    keyed: list[set[Path]] = []

    def fsync(fd: int) -> None:
        flushed.add(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def snapshot(holder: Path, paths):
        keyed.append(set(flushed))
        return real_snapshot(holder, paths)

    monkeypatch.setattr(receipts.os, "fsync", fsync)
    monkeypatch.setattr(custody, "snapshot", snapshot)
    assert main(["verify", "--root", str(project), "--pull-id", "p2"]) == 0
    capsule = (project / "export" / DEMO_RUN_ID).resolve()
    files = {path.resolve() for path in capsule.rglob("*") if path.is_file()}
    folders = {capsule, *(path.resolve() for path in capsule.rglob("*") if path.is_dir())}
    assert len(files) == listed_files(project, "p2") and (files | folders) <= keyed[0]  # before the first key


def test_ctrl_c_ends_a_verb_in_one_line_and_no_receipt(project: Path, tmp_path: Path) -> None:
    """Ctrl-C during verify (and pull, and down) printed a KeyboardInterrupt traceback, where the runners
    promise one line."""
    assert _manifest(project, _roster(tmp_path, "demo\n"), "p2") == 0
    with subprocess.Popen(
        [sys.executable, "-m", "runaudit", "verify", "--root", str(project), "--pull-id", "p2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job is
        # A shell's background job ignores SIGINT, and Python then never raises KeyboardInterrupt: the
        # terminal's Ctrl-C is what this test gives, so the signal is restored to its default first.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as verifying:
        assert verifying.stderr is not None
        first = verifying.stderr.readline()
        assert "auditing" in first, first  # the sessions are starting: a Ctrl-C now lands mid-verify
        os.killpg(verifying.pid, signal.SIGINT)
        rest = verifying.stderr.read()
    assert verifying.returncode == 130, rest
    assert "Traceback" not in rest and rest.count("\n") == 1, rest
    assert rest.startswith("runaudit verify: interrupted (Ctrl-C) before it finished")
    assert not (project / "_trust" / "pulls" / "p2" / RECEIPT).exists()


def test_a_pull_refuses_a_run_id_that_differs_from_a_local_run_only_in_case(
    project: Path, tmp_path: Path
) -> None:
    """On a disk that folds case (macOS, NTFS), ``runs/DEMO`` and ``runs/demo`` are one folder: a pull of
    ``demo`` wrote into the other run's copy."""
    from runaudit.manifest import read_manifest
    from runaudit.runners.pull import overwritten

    assert _manifest(project, _roster(tmp_path, "demo\n"), "p2") == 0
    manifest = read_manifest(project / "_trust" / "pulls" / "p2" / MANIFEST)
    assert overwritten(project, manifest, []) == []
    (project / "runs" / DEMO_RUN_ID.upper()).mkdir(parents=True)
    (line,) = overwritten(project, manifest, [])
    assert line.startswith(
        f"run {DEMO_RUN_ID}: runs/{DEMO_RUN_ID.upper()} is another run whose id differs only"
    )


@pytest.mark.parametrize(
    ("failing", "code"),
    [(f"{DEMO_RUN_ID}/best.pth", errno.EIO), (f"{DEMO_RUN_ID}/test", errno.ENOSPC)],
    ids=["file-io-error", "folder-disk-full"],
)
def test_a_write_back_that_fails_writes_no_receipt(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, failing: str, code: int
) -> None:
    """A full or failing disk under ``runs/`` failed every write-back while the page cache kept the right bytes:
    the audits hashed the cache and passed, a receipt was written and ``down`` approved, and after a remount 405
    of 407 files no longer matched the manifest. A failing disk is the one boundary this machine cannot
    reach, so the kernel's answer is given for one path."""
    from runaudit import receipts

    assert _manifest(project, _roster(tmp_path, "demo\n"), "p2") == 0
    target = (project / "export" / failing).resolve()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")) == target:
            raise OSError(code, os.strerror(code))
        real_fsync(fd)

    monkeypatch.setattr(receipts.os, "fsync", fsync)
    assert main(["verify", "--root", str(project), "--pull-id", "p2"]) == 1
    err = capsys.readouterr().err
    assert f"{project / 'export' / failing} could not be written to its disk ({os.strerror(code)})" in err
    assert not (project / "_trust" / "pulls" / "p2" / RECEIPT).exists()


def _cached_bytes(path: Path) -> int:
    """How many bytes of ``path`` the page cache holds (util-linux ``fincore``, which reads ``mincore``)."""
    command = ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)]
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def test_a_write_back_error_reported_once_is_not_hashed_from_the_cache_by_the_next_verify(
    tmp_path: Path,
) -> None:
    """The kernel reports a failed write-back once and marks the pages clean, with the right bytes still in
    them: a second ``verify`` found every ``fsync`` clean, hashed the cache and wrote a receipt, ``down``
    approved, and after a remount 405 of 407 files were not the verified bytes (a loop-mounted disk whose
    backing filesystem was full). What verify writes back leaves the cache, so the audits read the disk. A
    failing disk is the boundary this machine cannot reach; the cache it would be read from can be seen."""
    from runaudit.receipts import flush_to_disk

    checkpoint = tmp_path / "best.pth"
    checkpoint.write_bytes(os.urandom(4 << 20))
    assert checkpoint.read_bytes() and _cached_bytes(checkpoint) > 0
    assert flush_to_disk(tmp_path, [checkpoint.name]) == []
    assert _cached_bytes(checkpoint) == 0


@pytest.mark.parametrize("platform", ["linux", "darwin"], ids=["forked-sessions", "fresh-processes"])
def test_pytest_settings_meant_for_the_users_own_runs_never_reach_the_gate(
    project: Path, monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    """A ``PYTEST_ADDOPTS="-n 2"`` kept for the user's own test runs made verify refuse, and revoke."""
    for name, value in HOSTILE_PYTEST_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", platform)
    assert main(["verify", "--root", str(project), "--pull-id", DEMO_RUN_ID]) == 0
    assert receipt_status(project, [DEMO_RUN_ID]).ok
    assert not list((project / "_trust" / "pulls" / DEMO_RUN_ID).glob("PULL_VERIFIED.revoked-*.json"))


def test_receipt_status_fails_closed(project: Path) -> None:
    assert receipt_status(project, ["demo"]).ok  # the demo's own verified pull
    assert not receipt_status(project, []).ok
    assert "no pull manifest" in receipt_status(project, ["ghost"]).problems[0]
    manifest = project / "_trust" / "pulls" / DEMO_RUN_ID / MANIFEST
    manifest.write_text(manifest.read_text().replace('"hash"', '"hash" ', 1))  # same content, new bytes
    assert "is stale" in receipt_status(project, ["demo"]).problems[0]


def test_independent_acceptance_and_comparison(project: Path, capsys) -> None:
    producer = json.loads((project / "_trust" / "pulls" / DEMO_RUN_ID / MANIFEST).read_text())["producer"][
        "node"
    ]
    assert producer == socket.gethostname()
    assert main(["accept", "--root", str(project), "--pull-id", DEMO_RUN_ID]) == 2
    assert "independent acceptance must run elsewhere" in capsys.readouterr().err
    for node in ("node-b", "node-c"):
        assert main(["accept", "--root", str(project), "--pull-id", DEMO_RUN_ID, "--node", node]) == 0
    folder = project / "_trust" / "pulls" / DEMO_RUN_ID / "acceptances"
    first, second = folder / "node-b.json", folder / "node-c.json"
    capsys.readouterr()
    assert main(["accept", "--compare", str(first), str(second)]) == 0
    assert "match" in capsys.readouterr().out
    assert main(["accept", "--compare", str(first), str(first)]) == 1
    assert "not independent" in capsys.readouterr().err
    record = json.loads(second.read_text())
    record["checkpoints"]["demo/best.pth"]["numel"] += 1
    second.write_text(json.dumps(record))
    assert main(["accept", "--compare", str(first), str(second)]) == 1
    assert "checkpoints differs" in capsys.readouterr().err
    # A list, or a record with no producer, is not an acceptance: it ended in an AttributeError or KeyError.
    listed, nameless = folder.parent / "list.json", folder.parent / "nameless.json"
    listed.write_text("[]")
    nameless.write_text(json.dumps({key: value for key, value in record.items() if key != "producer"}))
    for other, why in ((listed, ""), (nameless, " (it names no producer node)")):
        assert main(["accept", "--compare", str(first), str(other)]) == 1
        err = capsys.readouterr().err
        assert f"the second file is not a runaudit acceptance record{why}\n" in err and "Traceback" not in err
    # The node names the acceptance's file: "../PULL_MANIFEST" wrote over the pull's manifest.
    manifest = (folder.parent / MANIFEST).read_bytes()
    for node in ("../PULL_MANIFEST", "lab/gpu1"):
        assert main(["accept", "--root", str(project), "--pull-id", DEMO_RUN_ID, "--node", node]) == 2
        assert f"node {node!r} is not a safe id" in capsys.readouterr().err
    assert (folder.parent / MANIFEST).read_bytes() == manifest and not (folder / "lab").exists()


def test_digests_taken_before_fork_are_reused_only_while_the_bytes_are_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hashing, "_hashed_before_fork", {})
    kept, changed = tmp_path / "kept.bin", tmp_path / "changed.bin"
    kept.write_bytes(b"a" * 4096)
    changed.write_bytes(b"b" * 4096)
    hashing.hash_before_fork([kept, changed])()
    changed.write_bytes(b"c" * 4096)  # same size: only the stat key (mtime, ctime) tells
    read: list[Path] = []
    monkeypatch.setattr(
        hashing, "sha256_file", lambda path, progress=None, stop=None: read.append(path) or "0" * 64
    )
    digests = hashing.hash_files([kept, changed])
    assert read == [changed]  # the untouched file was not read again, the changed one was
    assert digests[kept] == hashing.Digest(hashlib.sha256(b"a" * 4096).hexdigest(), 4096, "fresh")
    assert digests[changed].source == "fresh"
    hashing.hash_before_fork([kept])()  # a new verification reads its bytes again, in a process of its own
    assert hashing._hashed_before_fork == {str(kept): [*hashing.stat_key(kept.stat()), "0" * 64]}


def test_files_of_every_size_hash_to_their_sha256_alone_or_in_groups(tmp_path: Path) -> None:
    """Small files share a thread's task, each file of a chunk or more has one; each is hashed once, right."""
    chunk = hashing.CHUNK
    sizes = [0, 1, 4095, chunk - 1, chunk, chunk + 1, 2 * chunk + 7, *[300] * (2 * hashing.GROUP_FILES + 5)]
    files = []
    for index, size in enumerate(sizes):
        path = tmp_path / f"{index:03d}.bin"
        path.write_bytes(bytes([index % 251]) * size)
        files.append(path)
    tasks = hashing._work(files, {path: path.stat() for path in files})
    assert sorted(path for task in tasks for path in task) == files  # every file once
    assert all(len(task) == 1 for task in tasks if task[0].stat().st_size >= chunk)
    assert len(tasks) < len(files) // 2  # the small ones are grouped
    digests = hashing.hash_files(files)
    assert {path: digest.sha256 for path, digest in digests.items()} == {
        path: hashlib.sha256(path.read_bytes()).hexdigest() for path in files
    }


def test_digests_hashed_in_a_forked_process_are_kept_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner hashes in a process of its own while it imports; the sessions take its digests as fresh."""
    monkeypatch.setattr(hashing, "_hashed_before_fork", {})
    files = [tmp_path / f"{name}.bin" for name in ("a", "b", "c")]
    for index, path in enumerate(files):
        path.write_bytes(bytes([index]) * (5 << 20))  # more than one chunk each
    fifo = tmp_path / "swapped-in"
    os.mkfifo(fifo)  # refused by the hashing process, which then fails as a whole
    finish = hashing.hash_before_fork([*files, fifo])
    with pytest.raises(RuntimeError, match="hashing process failed"):
        finish()
    assert hashing._hashed_before_fork == {}  # nothing kept: each session hashes its files itself
    hashing.hash_before_fork(files)()
    read: list[Path] = []
    monkeypatch.setattr(
        hashing, "sha256_file", lambda path, progress=None, stop=None: read.append(path) or "0" * 64
    )
    digests = hashing.hash_files(files)
    assert read == []  # every digest came from the hashing process
    assert [digests[path] for path in files] == [
        hashing.Digest(hashlib.sha256(path.read_bytes()).hexdigest(), 5 << 20, "fresh") for path in files
    ]


def test_forked_sessions_report_each_capsule_and_a_broken_session_in_one_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsule = project / "export" / DEMO_RUN_ID
    unrelated = subprocess.Popen(["true"])  # a child of the caller's own: never reaped by run_suites
    results = run_suites([capsule], project, args=("-m", "custody", "-k", "capsule"))
    assert unrelated.wait() == 0
    report, output = results[capsule]
    assert report is not None and report["run_id"] == DEMO_RUN_ID
    assert {item["verdict"] for item in report["verdicts"]} <= {"passed", "not_applicable"}
    assert "passed" in output  # the child's own terminal output, even under capsys
    broken, output = run_suites([capsule], project, args=("--no-such-option",))[capsule]
    assert broken is None
    assert output.startswith("the audits did not produce a report: ") and "--no-such-option" in output
    assert capsys.readouterr().out == ""  # nothing leaked onto the caller's streams


def test_fresh_processes_where_fork_is_unsafe_give_the_same_verdicts(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capsule = project / "export" / DEMO_RUN_ID
    args = ("-m", "custody", "-k", "capsule")
    forked, _ = run_suites([capsule], project, args=args)[capsule]
    monkeypatch.setattr(sys, "platform", "darwin")
    spawned, _ = run_suites([capsule], project, args=args)[capsule]
    assert forked is not None and spawned is not None

    def verdicts(report: dict) -> list[tuple[str, str, str]]:
        return sorted((item["audit"], item["subject"], item["verdict"]) for item in report["verdicts"])

    assert verdicts(forked) == verdicts(spawned) and len(verdicts(forked)) > 10


def test_a_cache_entry_whose_digest_is_no_sha256_is_never_taken(tmp_path: Path) -> None:
    """An entry with the file's stat key and 64 characters that are not a hex digest is dropped: the
    file is hashed fresh, as every other entry the cache's writer could not have made."""
    data = tmp_path / "data.bin"
    data.write_bytes(b"bytes to hash")
    cache_file = tmp_path / "cache" / "runaudit" / "sha256.json"
    cache_file.parent.mkdir(parents=True)
    entry = [*hashing.stat_key(os.lstat(data)), "z" * 64]
    cache_file.write_text(json.dumps({"version": hashing.CACHE_VERSION, "entries": {str(data): entry}}))
    digest = hashing.hash_files([data], cache=hashing.HashCache(tmp_path))[data]
    assert (digest.source, digest.sha256) == ("fresh", hashlib.sha256(b"bytes to hash").hexdigest())
