"""The custody gate refuses bad input with the right audit id (manifest.* and checkpoint.*).

Each test damages a private copy of the real, verified demo project and runs the harness as users do.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from capsules import listed_files

from runaudit import checkpoints
from runaudit.checkpoints import CheckpointRefused, inspect
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.fixtures.custody import _hash_bound
from runaudit.manifest import MANIFEST, RECEIPT


@pytest.fixture
def manifest_path(project: Path) -> Path:
    return project / "_trust" / "pulls" / DEMO_RUN_ID / MANIFEST


def _edit_json(path: Path, change) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=2))


def _failed(outcome, gate: str) -> set[str]:
    return {audit for audit in outcome.verdicts("failed") if audit.startswith(gate)}


def test_the_verified_demo_passes_the_whole_custody_gate(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    outcome = run_audits(capsule_dir, project, "-m", "custody")
    assert outcome.result.ret == 0, outcome.result.stdout.str()[-3000:]
    assert outcome.report["custody_ok"] is True
    receipts = outcome.find("manifest.receipt")
    assert [item["verdict"] for item in receipts] == ["passed"]
    listed = listed_files(project, DEMO_RUN_ID)
    assert len(outcome.find("manifest.sha256")) == len(outcome.find("manifest.size")) == listed > 80


# -- manifest.* -------------------------------------------------------------------------------------


def test_tampered_byte_of_same_size_fails_sha256(run_audits, capsule_dir: Path, project: Path) -> None:
    csv = capsule_dir / "train.csv"
    text = csv.read_text()
    position = text.index("\n") + 5  # inside the first data row
    digit = text[position]
    csv.write_text(text[:position] + ("1" if digit != "1" else "2") + text[position + 1 :])
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    # The receipt verified other bytes, so it no longer makes a teardown safe either.
    assert _failed(outcome, "manifest.") == {"manifest.sha256", "manifest.receipt"}
    [bad] = [item for item in outcome.find("manifest.sha256") if item["verdict"] == "failed"]
    assert bad["subject"] == "train.csv" and "bytes differ" in bad["message"]


def test_truncated_file_fails_size_and_leaves_sha256_not_run(
    run_audits, capsule_dir: Path, project: Path
) -> None:
    best = capsule_dir / "best.pth"
    best.write_bytes(best.read_bytes()[:1000])
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    assert _failed(outcome, "manifest.") == {"manifest.size", "manifest.receipt"}
    assert {i["verdict"] for i in outcome.find("manifest.sha256") if i["subject"] == "best.pth"} == {
        "not_run"
    }


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda capsule: (capsule / "notes.txt").write_text("stale"), id="stale-extra-file"),
        pytest.param(lambda capsule: (capsule / "best.pth.tmp").write_bytes(b"partial"), id="tmp-residue"),
        pytest.param(lambda capsule: (capsule / "train.csv").unlink(), id="missing-file"),
        pytest.param(lambda capsule: (capsule / "test" / "main" / "extra").mkdir(), id="extra-empty-dir"),
    ],
)
def test_roster_lists_missing_and_unexpected_files(
    run_audits, capsule_dir: Path, project: Path, damage
) -> None:
    damage(capsule_dir)
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    # A file gone from the verified copy also voids the receipt (runaudit.receipts re-checks the bytes).
    expected = (
        {"manifest.roster", "manifest.receipt"}
        if not (capsule_dir / "train.csv").exists()
        else {"manifest.roster"}
    )
    assert _failed(outcome, "manifest.") == expected


def test_symlink_pointing_outside_the_root_fails_path_safety(
    run_audits, capsule_dir: Path, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not part of any capsule")
    (capsule_dir / "test" / "main" / "link.txt").symlink_to(outside)
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    assert "manifest.path_safety" in _failed(outcome, "manifest.")
    [item] = outcome.find("manifest.path_safety")
    assert "symlink" in item["message"]


@pytest.mark.parametrize(
    ("extra_paths", "expected"),
    [
        (["demo/../../etc/passwd"], "'..'"),
        (["/etc/passwd"], "absolute"),
        (["demo/train.csv"], "listed twice"),
        (["demo/TRAIN.csv"], "collide after case folding"),
    ],
    ids=["dotdot", "absolute", "duplicate", "case-only-duplicate"],
)
def test_unsafe_manifest_paths_fail_path_safety(
    run_audits, project: Path, manifest_path: Path, extra_paths: list[str], expected: str, capsule_dir: Path
) -> None:
    def add(document: dict[str, Any]) -> None:
        document["files"] += [{"path": path, "bytes": 1, "sha256": "0" * 64} for path in extra_paths]

    _edit_json(manifest_path, add)
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    assert "manifest.path_safety" in _failed(outcome, "manifest.")
    [item] = outcome.find("manifest.path_safety")
    assert expected in item["message"]


def test_manifest_placed_inside_a_capsule_fails_present(
    run_audits, capsule_dir: Path, project: Path, manifest_path: Path
) -> None:
    shutil.move(manifest_path, capsule_dir / MANIFEST)
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    assert _failed(outcome, "manifest.") == {"manifest.present"}
    assert "inside the capsule" in outcome.find("manifest.present")[0]["message"]


def test_no_manifest_fails_present_and_dependents_do_not_run(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    shutil.rmtree(project / "_trust" / "pulls")
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    assert outcome.verdicts("failed") == {"manifest.present"}
    assert outcome.verdicts("not_run") >= {"manifest.roster", "manifest.sha256", "manifest.receipt"}
    assert outcome.report["custody_ok"] is False


def test_receipt_from_an_older_manifest_is_refused(
    run_audits, project: Path, manifest_path: Path, capsule_dir: Path
) -> None:
    _edit_json(manifest_path, lambda document: document.update(created_utc="2026-01-01T00:00:00Z"))
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    assert _failed(outcome, "manifest.") == {"manifest.receipt"}
    assert "stale" in outcome.find("manifest.receipt")[0]["message"]


def test_absent_receipt_is_not_run_never_passed(
    run_audits, project: Path, manifest_path: Path, capsule_dir: Path
) -> None:
    (manifest_path.parent / RECEIPT).unlink()
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    assert [item["verdict"] for item in outcome.find("manifest.receipt")] == ["not_run"]
    assert outcome.report["custody_ok"] is False


def test_the_background_torch_import_never_prints_into_the_session(capfd: pytest.CaptureFixture[str]) -> None:
    """A custody session starts importing torch on a thread as soon as its checkpoints show it will need it.
    A session that ended first (a special file for run.json, on a loaded machine) printed that thread's
    ``Exception in thread ... (import_module)`` traceback as the interpreter shut down under the import."""
    from runaudit.fixtures.custody import import_in_background

    import_in_background("runaudit_no_such_module").join(timeout=30)
    assert capfd.readouterr().err == ""


def test_second_audit_reuses_hashes_until_bytes_change(run_audits, capsule_dir: Path, project: Path) -> None:
    def sources(outcome) -> set[str]:
        return {item["evidence"]["hashed"] for item in outcome.find("manifest.sha256")}

    assert sources(run_audits(capsule_dir, project, "-k", "sha256")) == {"fresh"}
    assert sources(run_audits(capsule_dir, project, "-k", "sha256")) == {"cache"}
    assert sources(run_audits(capsule_dir, project, "-k", "sha256", "--fresh-hashes")) == {"fresh"}
    os.utime(capsule_dir / "train.csv")  # a touch changes the stat key: those bytes are hashed again
    by_subject = {
        i["subject"]: i["evidence"]["hashed"]
        for i in run_audits(capsule_dir, project, "-k", "sha256").find("manifest.sha256")
    }
    assert by_subject["train.csv"] == "fresh" and by_subject["best.pth"] == "cache"


def test_a_fresh_session_never_reads_a_poisoned_cache_entry_and_replaces_it(
    run_audits, capsule_dir: Path, project: Path
) -> None:
    """A cache entry under best.pth's current stat key with a wrong digest: a --fresh-hashes session (as
    verify runs) reads the bytes, passes, and records their true digest over the forged one."""
    from runaudit.hashing import HashCache

    run_audits(capsule_dir, project, "-k", "sha256")  # fills the stat-keyed cache
    best = capsule_dir / "best.pth"
    cache = HashCache(project)
    cache.put(best, best.lstat(), "0" * 64)
    cache.save()
    forged = {
        i["subject"]: i for i in run_audits(capsule_dir, project, "-k", "sha256").find("manifest.sha256")
    }
    assert forged["best.pth"]["verdict"] == "failed"  # a cached session reads it, and fails closed
    fresh = {
        i["subject"]: i
        for i in run_audits(capsule_dir, project, "-k", "sha256", "--fresh-hashes").find("manifest.sha256")
    }
    assert fresh["best.pth"]["verdict"] == "passed" and fresh["best.pth"]["evidence"]["hashed"] == "fresh"
    assert HashCache(project).get(best, best.lstat()) == hashlib.sha256(best.read_bytes()).hexdigest()
    again = {
        i["subject"]: i for i in run_audits(capsule_dir, project, "-k", "sha256").find("manifest.sha256")
    }
    assert again["best.pth"]["verdict"] == "passed" and again["best.pth"]["evidence"]["hashed"] == "cache"


def test_files_grown_past_their_listed_size_are_not_hashed_and_their_audits_reach_verdicts(
    run_audits: Callable[..., Any], capsule_dir: Path, project: Path, manifest_path: Path
) -> None:
    """train.csv grown sparse to 60 GiB (2.3 MB on disk) was hashed for 74 s although manifest.size fails it
    and manifest.sha256 never compares its digest; a best.pth grown past its hashing bound likewise, and the
    checkpoint audits that compare its digest say not_run instead of crashing or passing."""
    from runaudit.hashing import HashCache

    listed = {entry["path"]: entry["bytes"] for entry in json.loads(manifest_path.read_text())["files"]}
    csv, best = capsule_dir / "train.csv", capsule_dir / "best.pth"
    os.truncate(csv, 1 << 30)
    os.truncate(best, _hash_bound(listed[f"{DEMO_RUN_ID}/best.pth"]) + 1)
    outcome = run_audits(capsule_dir, project, "-k", "manifest or checkpoint")
    assert outcome.verdicts("error") == set(), outcome.result.stdout.str()[-3000:]
    for name in ("train.csv", "best.pth"):
        verdicts = {
            item["audit"]: item["verdict"] for item in outcome.report["verdicts"] if item["subject"] == name
        }
        assert (verdicts["manifest.size"], verdicts["manifest.sha256"]) == ("failed", "not_run")
    for audit, subject in (("checkpoint.safe_load", "best.pth"), ("checkpoint.distinct_last", "last.pth")):
        [item] = [i for i in outcome.find(audit) if i["subject"] == subject]
        assert item["verdict"] == "not_run" and "manifest.size" in item["message"], item
    cache = HashCache(project)
    assert cache.get(csv, csv.lstat()) is None and cache.get(best, best.lstat()) is None


# -- checkpoint.* -----------------------------------------------------------------------------------


class _Payload:
    """Unpickling this object creates a marker folder: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _rebind_best(capsule: Path, payload: Any, **torch_save: Any) -> None:
    torch.save(payload, capsule / "best.pth", **torch_save)
    digest = hashlib.sha256((capsule / "best.pth").read_bytes()).hexdigest()
    _edit_json(capsule / "run.json", lambda run: run["checkpoints"]["best"].update(sha256=digest))


def _best_state(capsule: Path) -> dict[str, Any]:
    return torch.load(capsule / "best.pth", weights_only=True)


def test_pickle_payload_is_refused_and_never_runs(
    run_audits, capsule_dir: Path, project: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "payload-ran"
    _rebind_best(capsule_dir, {**_best_state(capsule_dir), "extra": _Payload(marker)})
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.safe_load"}
    [item] = [i for i in outcome.find("checkpoint.safe_load") if i["subject"] == "best.pth"]
    assert "weights_only=True" in item["message"] and "--allow-pickle" in item["message"]
    assert {i["verdict"] for i in outcome.find("checkpoint.finite") if i["subject"] == "best.pth"} == {
        "not_run"
    }
    assert not marker.exists()


def test_safe_loader_never_runs_a_payload_under_mmap(tmp_path: Path) -> None:
    marker = tmp_path / "payload-ran"
    path = tmp_path / "evil.pth"
    torch.save({"weights": torch.ones(3), "payload": _Payload(marker)}, path)
    with pytest.raises(CheckpointRefused, match="weights_only=True"):
        inspect(path)
    assert not marker.exists()


def _naming_globals(pairs: list[tuple[str, str]], times: int) -> bytes:
    """A protocol-4 pickle naming each global of ``pairs`` ``times`` over (STACK_GLOBAL, then POP), then an
    empty dict: the 60 MB data.pkl of ten million of them took the storage lister 68 s."""

    def text(value: str) -> bytes:  # SHORT_BINUNICODE
        return b"\x8c" + bytes([len(value.encode())]) + value.encode()

    return (
        b"\x80\x04" + b"".join(text(module) + text(name) + b"\x930" for module, name in pairs) * times + b"}."
    )


def _with_data_pkl(path: Path, data: bytes) -> None:
    """The torch archive at ``path`` with ``data`` for its data.pkl, every record stored as torch stores it."""
    with zipfile.ZipFile(path) as source:
        records = [(info.filename, source.read(info.filename)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, content in records:
            archive.writestr(zipfile.ZipInfo(name), data if name.endswith("/data.pkl") else content)


def test_a_data_pkl_past_its_cap_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints, "DATA_PKL_CAP", 1 << 16)
    path = tmp_path / "best.pth"
    torch.save({"w": torch.ones(3)}, path)
    _with_data_pkl(path, _naming_globals([("m", "n")], 10_000))

    def unread(data: bytes) -> None:
        raise AssertionError("a data.pkl past the cap was read")

    monkeypatch.setattr(checkpoints._StorageLister, "__init__", unread)
    with pytest.raises(CheckpointRefused) as refused:
        inspect(path)
    message = str(refused.value)
    assert message.startswith("best.pth ") and f"{checkpoints.DATA_PKL_CAP}-byte cap" in message
    assert "\n" not in message


def test_the_lister_builds_a_global_once_and_refuses_past_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repeated = _naming_globals([("m", "n")], 100_000)
    lister = checkpoints._StorageLister(repeated)
    lister.load()
    assert lister.find_class("m", "n") is lister.find_class("m", "n")
    monkeypatch.setattr(checkpoints, "MAX_GLOBALS", 8)
    path = tmp_path / "best.pth"
    torch.save({"w": torch.ones(3)}, path)
    _with_data_pkl(path, _naming_globals([(f"m{index}", "n") for index in range(9)], 1))
    with pytest.raises(CheckpointRefused) as refused:
        inspect(path)
    message = str(refused.value)
    assert (
        message.startswith("best.pth ") and f"more than {checkpoints.MAX_GLOBALS} distinct globals" in message
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_nonfinite_tensor_fails_finite(run_audits, capsule_dir: Path, project: Path, bad: float) -> None:
    state = _best_state(capsule_dir)
    first = next(iter(state["model"]))
    state["model"][first] = state["model"][first].clone()
    state["model"][first].view(-1)[3] = bad
    _rebind_best(capsule_dir, state)
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.finite"}
    [item] = [i for i in outcome.find("checkpoint.finite") if i["subject"] == "best.pth"]
    assert item["evidence"]["nonfinite"] == [f"model.{first}"]


def test_truncated_zip_checkpoint_fails_safe_load(run_audits, capsule_dir: Path, project: Path) -> None:
    best = capsule_dir / "best.pth"
    data = best.read_bytes()[:-4096]
    best.write_bytes(data)
    _edit_json(
        capsule_dir / "run.json",
        lambda run: run["checkpoints"]["best"].update(sha256=hashlib.sha256(data).hexdigest()),
    )
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.safe_load"}


def _flip_a_bit_of_a_storage(path: Path) -> None:
    """Flip the lowest bit of the first byte of ``path``'s first tensor record: a finite float stays finite."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 4)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    data[info.header_offset + 30 + name_length + extra_length] ^= 1
    path.write_bytes(bytes(data))


def test_a_checkpoint_changed_after_torch_wrote_it_fails_safe_load(
    run_audits, capsule_dir: Path, project: Path
) -> None:
    """One bit of a weight flipped after torch.save (a torn write, a bad disk), the file then bound as the
    run's: torch's reader checks no CRC-32 and the value stays finite, so every checkpoint audit passed."""
    best = capsule_dir / "best.pth"
    _flip_a_bit_of_a_storage(best)
    digest = hashlib.sha256(best.read_bytes()).hexdigest()
    _edit_json(capsule_dir / "run.json", lambda run: run["checkpoints"]["best"].update(sha256=digest))
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.safe_load"}
    [item] = [i for i in outcome.find("checkpoint.safe_load") if i["subject"] == "best.pth"]
    assert "CRC-32" in item["message"] and "\n" not in item["message"], item["message"]


def test_records_without_a_crc_load_and_those_with_one_are_checked(tmp_path: Path) -> None:
    """torch writes a CRC-32 of 0 for every record under ``set_crc32_options(False)`` and for the storages
    it leaves to a second pass under ``skip_data()``: nothing to check there. The attack round found the
    second form refused as a torn write (and the first was refused as an unreadable archive before)."""
    path = tmp_path / "best.pth"
    weights = {"w": torch.arange(64, dtype=torch.float32)}
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(weights, path)
    finally:
        torch.serialization.set_crc32_options(True)
    _flip_a_bit_of_a_storage(path)
    assert inspect(path).tensors

    with torch.serialization.skip_data():
        torch.save(weights, path)
    reader = torch._C.PyTorchFileReader(str(path))
    with path.open("r+b") as handle:  # the second pass: the storage's bytes where torch placed its record
        handle.seek(reader.get_record_offset("data/0"))
        handle.write(weights["w"].numpy().tobytes())
    assert inspect(path).tensors

    torch.save(weights, path)
    _flip_a_bit_of_a_storage(path)
    with pytest.raises(CheckpointRefused, match="CRC-32"):
        inspect(path)


def _central_entries(data: bytes) -> tuple[int, list[bytes]]:
    """Where the central directory of the zip ``data`` starts, and its entries (no ZIP64 in these files)."""
    at = data.index(b"PK\x01\x02")
    start, entries = at, []
    while data.startswith(b"PK\x01\x02", at):
        name, extra, comment = struct.unpack_from("<3H", data, at + 28)
        entries.append(data[at : at + 46 + name + extra + comment])
        at += 46 + name + extra + comment
    return start, entries


def test_a_record_listed_under_thousands_of_names_is_refused_before_its_crcs_are_read(tmp_path: Path) -> None:
    """Attack round: the storage of a 1.3 MB checkpoint listed under 2,000 more names, each pointing at the
    one record: the CRC-32 pass read the same bytes once per name (60,000 names over 8 MB ran for minutes)."""
    path = tmp_path / "best.pth"
    torch.save({"w": torch.zeros(1 << 18)}, path)
    data = path.read_bytes()
    start, entries = _central_entries(data)
    storage = next(
        entry for entry in entries if b"/data/0" in entry[46 : 46 + struct.unpack_from("<H", entry, 28)[0]]
    )
    prefix = zipfile.ZipFile(path).namelist()[0].split("/")[0]
    copies = []
    for index in range(2000):
        name = f"{prefix}/copy/{index}".encode()
        length = struct.unpack_from("<H", storage, 28)[0]
        copy = bytearray(storage[:46]) + name + storage[46 + length :]
        struct.pack_into("<H", copy, 28, len(name))
        copies.append(bytes(copy))
    directory = b"".join(entries) + b"".join(copies)
    count = len(entries) + len(copies)
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, count, count, len(directory), start, 0)
    path.write_bytes(data[:start] + directory + end)
    with pytest.raises(CheckpointRefused, match="listed twice or overlap"):
        inspect(path)


def test_end_records_that_name_another_disk_are_one_refusal_line(tmp_path: Path) -> None:
    """Attack round: one bit flipped in the ZIP64 locator's disk field made ``zipfile.is_zipfile`` raise,
    and the traceback left ``inspect``."""
    path = tmp_path / "best.pth"
    torch.save({"w": torch.ones(12)}, path)
    data = bytearray(path.read_bytes())
    data[data.rindex(b"PK\x06\x07") + 4] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointRefused) as refused:
        inspect(path)
    assert str(refused.value).startswith("best.pth ") and "\n" not in str(refused.value)


def test_legacy_non_zip_checkpoint_fails_safe_load(run_audits, capsule_dir: Path, project: Path) -> None:
    _rebind_best(capsule_dir, _best_state(capsule_dir), _use_new_zipfile_serialization=False)
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.safe_load"}
    assert (
        "legacy"
        in [i for i in outcome.find("checkpoint.safe_load") if i["subject"] == "best.pth"][0]["message"]
    )


def test_checkpoint_without_tensors_fails_tensors(run_audits, capsule_dir: Path, project: Path) -> None:
    _rebind_best(capsule_dir, {"epoch": 3, "step": 51, "note": "weights were never saved"})
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert "checkpoint.tensors" in _failed(outcome, "checkpoint.")
    assert "checkpoint.safe_load" not in _failed(outcome, "checkpoint.")


def test_best_epoch_disagreeing_with_run_json_fails_selection(
    run_audits, capsule_dir: Path, project: Path
) -> None:
    state = _best_state(capsule_dir)
    _rebind_best(capsule_dir, {**state, "epoch": state["epoch"] - 1})
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.selection"}
    assert (
        "epoch" in [i for i in outcome.find("checkpoint.selection") if i["verdict"] == "failed"][0]["message"]
    )


def test_checkpoint_that_is_not_the_bound_one_fails_safe_load(
    run_audits, capsule_dir: Path, project: Path
) -> None:
    shutil.copy2(capsule_dir / "last.pth", capsule_dir / "best.pth")
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert "checkpoint.safe_load" in _failed(outcome, "checkpoint.")
    assert "not the checkpoint this run declares" in outcome.find("checkpoint.safe_load")[0]["message"]


def test_a_checkpoint_whose_binding_cannot_be_read_fails_saying_why(
    run_audits, capsule_dir: Path, project: Path
) -> None:
    """run.json holding an integer of 5,000 digits does not parse: the checkpoint has no binding to match,
    and its verdict says that and who reports it (it said "run.json binds None")."""
    run_json = capsule_dir / "run.json"
    run_json.write_text(run_json.read_text().replace("{", '{"big": 1' + "0" * 5000 + ", ", 1))
    outcome = run_audits(capsule_dir, project, "-k", "safe_load")
    [item] = [i for i in outcome.find("checkpoint.safe_load") if i["subject"] == "best.pth"]
    assert item["verdict"] == "failed", item
    assert "run.json is unreadable (reported by capsule.run_json_schema)" in item["message"], item
    assert "None" not in item["message"]


def test_allow_pickle_is_explicit_and_recorded(
    run_audits, capsule_dir: Path, project: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "trusted-object-ran"
    _rebind_best(capsule_dir, {**_best_state(capsule_dir), "extra": _Payload(marker)})
    outcome = run_audits(capsule_dir, project, "-k", "safe_load", "--allow-pickle")
    [item] = [i for i in outcome.find("checkpoint.safe_load") if i["subject"] == "best.pth"]
    assert item["verdict"] == "passed" and item["evidence"]["unsafe_load"] is True
    assert "--allow-pickle" in item["message"]


def test_manifest_totals_that_disagree_with_the_entries_fail_present(
    run_audits, capsule_dir: Path, project: Path, manifest_path: Path
) -> None:
    _edit_json(manifest_path, lambda document: document["totals"].update(bytes=1))
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    [present] = outcome.find("manifest.present")
    assert present["verdict"] == "failed" and "totals.bytes says 1" in present["message"]


@pytest.mark.parametrize("totals", ["kept", "refused"])
def test_a_manifest_padded_with_files_nobody_holds_makes_no_case_of_each(
    run_audits, capsule_dir: Path, project: Path, manifest_path: Path, totals: str
) -> None:
    """Each listed file was two cases whether the capsule held it or the manifest was refused: 50,000
    padded entries took 78 s and 1.7 GB, 300,000 ran out of memory and wrote no report. What nobody holds
    is named by ``manifest.roster``; a refused manifest by ``manifest.present``. A case per padded entry
    shows at any count; 2,000 keeps the session to a second (the schema validation of the entries is
    linear, ~0.1 ms each)."""
    padding = 2_000
    held = sum(1 for path in capsule_dir.rglob("*") if path.is_file())

    def pad(document: dict) -> None:
        document["files"] += [
            {"path": f"{DEMO_RUN_ID}/nothere/{index}.png", "bytes": 1, "sha256": "0" * 64}
            for index in range(padding)
        ]
        if totals == "kept":  # the entries add up: a usable manifest listing files the copy lacks
            document["totals"]["files"] += padding
            document["totals"]["bytes"] += padding

    _edit_json(manifest_path, pad)
    outcome = run_audits(capsule_dir, project, "-k", "manifest")
    per_file = [
        item for item in outcome.report["verdicts"] if item["audit"] in ("manifest.size", "manifest.sha256")
    ]
    if totals == "kept":
        [roster] = outcome.find("manifest.roster")
        assert roster["verdict"] == "failed" and f"{padding} missing" in roster["message"]
        assert len(per_file) == 2 * held and {item["verdict"] for item in per_file} == {"passed"}
    else:
        [present] = outcome.find("manifest.present")
        assert present["verdict"] == "failed" and "totals.files" in present["message"]
        assert [item["verdict"] for item in per_file] == ["not_run", "not_run"], per_file


def test_a_capsule_past_the_file_cap_is_refused_by_its_manifest_and_never_listed(
    project: Path, manifest_path: Path
) -> None:
    """Each listed file is two audit cases and two report entries: 20,000 empty tracker files, all allowed
    by the layout and all listed, took 50 s and 0.95 GB, 60,000 took 107 s and 2.1 GB, and the JSON caps
    admitted a million. A capsule holds at most CAPSULE_FILES_CAP files; a manifest listing more for one
    capsule is refused whole (no case of each), and ``runaudit manifest`` will not write one. The cap is per
    capsule: a pull of many capsules may list more in all."""
    from runaudit.manifest import CAPSULE_FILES_CAP, contract_problems, manifest_problems, read_manifest
    from runaudit.runners.manifest import ManifestError, build_manifest

    document = json.loads(manifest_path.read_text())
    listed = len(document["files"])
    padding = CAPSULE_FILES_CAP + 1 - listed
    fake = {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    other = [{"path": f"other-run/{index}.csv", **fake} for index in range(listed)]
    document["roster"].append("other-run")
    document["files"] += other  # another capsule of the same pull: the cap is per capsule
    document["totals"]["files"] += listed
    manifest_path.write_text(json.dumps(document))
    assert manifest_problems(read_manifest(manifest_path)) == []
    document["files"] += [
        {"path": f"{DEMO_RUN_ID}/trackers/tensorboard/run/events.out.tfevents.{index}", **fake}
        for index in range(padding)
    ]
    document["totals"]["files"] += padding
    manifest_path.write_text(json.dumps(document))
    manifest = read_manifest(manifest_path)
    for problems in (manifest_problems(manifest), contract_problems(manifest)):
        assert [
            line
            for line in problems
            if f"capsule {DEMO_RUN_ID} holds {CAPSULE_FILES_CAP + 1:,} files" in line
        ]
    events = project / "export" / DEMO_RUN_ID / "trackers" / "tensorboard" / "run"
    events.mkdir(parents=True)
    for index in range(padding):
        (events / f"events.out.tfevents.{index}").touch()
    with pytest.raises(ManifestError, match=f"capsule {DEMO_RUN_ID} holds {CAPSULE_FILES_CAP + 1:,} files"):
        build_manifest(project, [DEMO_RUN_ID], "p2", subset=True, log=lambda line: None)


# -- the per-file cases' protocol (fixtures/protocol.py) ------------------------------------------------


def test_per_file_cases_skip_the_per_phase_capture_and_reach_the_same_verdicts(
    run_audits, pytester: pytest.Pytester, capsule_dir: Path, project: Path
) -> None:
    """``manifest.size`` and ``manifest.sha256`` run without pytest's per-phase output and log capture, other
    plugins' phase hooks still see them, and every verdict, message and count is what pytest's default
    protocol gives (fresh hashes both times)."""
    csv = capsule_dir / "train.csv"
    text = csv.read_text()
    position = text.index("\n") + 5
    csv.write_text(text[:position] + ("1" if text[position] != "1" else "2") + text[position + 1 :])
    first, second, *_ = sorted((capsule_dir / "test" / "main" / "vis" / "clean" / "input").iterdir())
    first.write_bytes(first.read_bytes()[:100])
    second.unlink()
    pytester.makepyfile(
        phase_log="""
        import logging

        SET_UP, LOGGED = [], set()

        def pytest_runtest_setup(item):
            SET_UP.append(item.nodeid)
            logging.getLogger("phase_log").warning("setting up")

        def pytest_runtest_logreport(report):
            if report.when == "setup" and "setting up" in report.caplog:
                LOGGED.add(report.nodeid)
        """
    )
    pytester.syspathinsert()
    import phase_log  # imported here, so that the in-process sessions keep this module and its lists

    def verdicts(outcome) -> list[tuple[str, str, str, str]]:
        assert outcome.report is not None, outcome.result.stdout.str()[-3000:]
        return [(i["audit"], i["subject"], i["verdict"], i["message"]) for i in outcome.report["verdicts"]]

    def per_file(nodeids) -> set[str]:
        return {nodeid for nodeid in nodeids if "::test_size[" in nodeid or "::test_sha256[" in nodeid}

    fresh = ("-m", "custody", "--runaudit-fresh-hashes", "-p", "phase_log")
    lean = run_audits(capsule_dir, project, *fresh)
    set_up, logged = list(phase_log.SET_UP), set(phase_log.LOGGED)
    phase_log.SET_UP.clear()
    phase_log.LOGGED.clear()
    default = run_audits(capsule_dir, project, *fresh, "-p", "no:runaudit.fixtures.protocol")
    assert verdicts(lean) == verdicts(default)
    assert lean.result.ret == default.result.ret != 0
    assert lean.result.parseoutcomes() == default.result.parseoutcomes()
    held = listed_files(project, DEMO_RUN_ID) - 1  # each file the copy still holds: its size and its hash
    assert set_up == phase_log.SET_UP and len(per_file(set_up)) == 2 * held
    # Only the per-file cases ran without the capture: their setup's log record was not kept in the report.
    assert per_file(phase_log.LOGGED) == per_file(set_up) and not per_file(logged)
    assert logged == set(set_up) - per_file(set_up) and logged
    found = {(i["audit"], i["subject"]): i["verdict"] for i in lean.report["verdicts"]}
    assert found[("manifest.sha256", "train.csv")] == "failed"
    assert found[("manifest.size", f"test/main/vis/clean/input/{first.name}")] == "failed"
    # A listed file the copy does not hold is named by manifest.roster, with no per-file case of its own.
    assert ("manifest.size", f"test/main/vis/clean/input/{second.name}") not in found
    assert found[("manifest.roster", "")] == "failed"


@pytest.mark.parametrize(
    "needs_default",
    [
        pytest.param(("-p", "own_protocol"), id="a-plugin-running-the-protocol"),
        pytest.param(("--capture=tee-sys",), id="output-kept-for-every-case"),
        pytest.param(("-o", "junit_logging=all"), id="junit-logging"),
    ],
)
def test_per_file_cases_keep_the_default_protocol_where_the_session_needs_it(
    run_audits, pytester: pytest.Pytester, capsule_dir: Path, project: Path, needs_default: tuple[str, ...]
) -> None:
    """A plugin that runs the protocol itself (pytest-rerunfailures, pytest-forked) was never called for the
    per-file cases, and what the user asked to keep of every case was dropped for them."""
    pytester.makepyfile(
        own_protocol="""
        SEEN = set()

        def pytest_runtest_protocol(item, nextitem):
            SEEN.add(item.nodeid)
        """,
        captured_log="""
        import logging

        LOGGED = set()

        def pytest_runtest_setup(item):
            logging.getLogger("captured_log").warning("setting up")

        def pytest_runtest_logreport(report):
            if report.when == "setup" and "setting up" in report.caplog:
                LOGGED.add(report.nodeid)
        """,
    )
    pytester.syspathinsert()
    import captured_log  # imported here, so that the in-process session keeps these modules and their sets
    import own_protocol

    outcome = run_audits(capsule_dir, project, "-m", "custody", "-p", "captured_log", *needs_default)
    assert outcome.report is not None and outcome.result.ret == 0, outcome.result.stdout.str()[-3000:]
    hashed = {nodeid for nodeid in captured_log.LOGGED if "::test_sha256[" in nodeid}
    assert len(hashed) == listed_files(project, DEMO_RUN_ID)
    if "own_protocol" in needs_default:
        assert hashed <= own_protocol.SEEN
