"""A re-audit of unchanged checkpoint bytes reuses their inspection by content hash: no torch import, no
tensor scan, the same verdicts; bytes changed in any way are a new key; a damaged cache file costs one
fresh inspection, never a verdict.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_import_cost import SESSION_PROBE, fresh_python

from runaudit.checkpoints import InspectionCache, inspect
from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID

CACHE = Path("cache") / "runaudit" / "inspections.json"
HASHES = Path("cache") / "runaudit" / "sha256.json"


def _custody_session(project: Path, reports: Path, *extra: str) -> tuple[str, dict]:
    output = fresh_python(
        SESSION_PROBE,
        *("-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", "-q"),
        *(
            "--run",
            DEMO_RUN_ID,
            "--root",
            str(project),
            "--report-dir",
            str(reports),
            "-m",
            "custody",
            *extra,
        ),
        cwd=reports.parent,
    )
    probe = next(line for line in output.splitlines() if line.startswith("PROBE "))
    return probe, json.loads((reports / f"{DEMO_RUN_ID}.json").read_text())


def _verdicts(report: dict) -> list[tuple[str, str, str]]:
    return sorted((item["audit"], item["subject"], item["verdict"]) for item in report["verdicts"])


@pytest.mark.slow
def test_a_cached_reaudit_skips_torch_and_gives_the_same_verdicts(project: Path, tmp_path: Path) -> None:
    (project / CACHE).unlink(missing_ok=True)
    first_probe, first = _custody_session(project, tmp_path / "first")
    assert first_probe == "PROBE 0 True True"  # the first audit of these bytes loads them with torch
    assert (project / CACHE).is_file()
    again_probe, again = _custody_session(project, tmp_path / "again")
    assert again_probe == "PROBE 0 False True"  # the stat-keyed digests name inspected bytes: no torch
    assert _verdicts(again) == _verdicts(first)
    checkpoint = {
        item["subject"]: item["evidence"]
        for item in again["verdicts"]
        if item["audit"] == "checkpoint.tensors"
    }
    assert checkpoint == {
        item["subject"]: item["evidence"]
        for item in first["verdicts"]
        if item["audit"] == "checkpoint.tensors"
    }


@pytest.mark.slow
def test_after_verify_a_custody_session_hashes_nothing_and_skips_torch(project: Path, tmp_path: Path) -> None:
    """verify reads every byte fresh and never the cache; what it read is recorded, so the re-audit after it
    (inside the same trust boundary) takes every digest from the stat-keyed cache and needs no torch."""
    (project / CACHE).unlink(missing_ok=True)
    (project / HASHES).unlink(missing_ok=True)
    assert main(["verify", "--root", str(project), "--pull-id", DEMO_RUN_ID]) == 0
    probe, report = _custody_session(project, tmp_path / "after-verify")
    assert probe == "PROBE 0 False True"
    sources = {
        item["evidence"].get("hashed")
        for item in report["verdicts"]
        if item["audit"] == "manifest.sha256" and item["verdict"] == "passed"
    }
    assert sources == {"cache"}, sources


def test_changed_bytes_are_a_new_key(tmp_path: Path) -> None:
    cache = InspectionCache(tmp_path)
    path = tmp_path / "best.pth"
    torch.save({"model": {"w": torch.ones(3)}, "epoch": 1, "step": 2}, path)
    cache.put("a" * 64, inspect(path))
    torch.save({"model": {"w": torch.tensor([1.0, float("nan"), 1.0])}, "epoch": 1, "step": 2}, path)
    cache.put("b" * 64, inspect(path))
    cache.save()
    reread = InspectionCache(tmp_path)
    assert reread.get("a" * 64).nonfinite == [] and reread.get("b" * 64).nonfinite == ["model.w"]
    assert reread.get("c" * 64) is None


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b'{"version": 1, "entries": {"' + b"a" * 64 + b'": {"tensors": -1}}}',
        b'{"version": 1, "entries": {"' + b"a" * 64 + b'": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        b'{"version": 1, "entries": [], "entries": {}}',
        b'{"version": 2, "entries": {}}',
    ],
    ids=["torn", "wrong-shape", "deep", "duplicate-key", "other-version"],
)
def test_a_damaged_cache_is_read_as_empty(tmp_path: Path, damage: bytes) -> None:
    (tmp_path / CACHE).parent.mkdir(parents=True)
    (tmp_path / CACHE).write_bytes(damage)
    assert InspectionCache(tmp_path).get("a" * 64) is None


@pytest.mark.slow
def test_a_nan_planted_after_a_cached_audit_is_still_caught(project: Path, tmp_path: Path) -> None:
    _custody_session(project, tmp_path / "first")
    capsule = project / "export" / DEMO_RUN_ID
    state = torch.load(capsule / "best.pth", weights_only=True)
    name = next(key for key, value in state["model"].items() if value.is_floating_point())
    state["model"][name].view(-1)[0] = float("nan")
    torch.save(state, capsule / "best.pth")
    shutil.copy2(capsule / "best.pth", tmp_path / "planted.pth")
    _, report = _custody_session(project, tmp_path / "again")
    finite = [
        item
        for item in report["verdicts"]
        if item["audit"] == "checkpoint.finite" and "best" in item["subject"]
    ]
    assert [item["verdict"] for item in finite] == ["failed"] and name in finite[0]["message"]


def test_fresh_hashes_inspect_the_bytes_and_never_read_a_remembered_inspection(
    project: Path, tmp_path: Path
) -> None:
    """A forged cache entry (here: a clean checkpoint remembered as holding a NaN) reaches a cached session
    and never a fresh one, which is what verify and receipts run."""
    _custody_session(project, tmp_path / "first")
    cache = json.loads((project / CACHE).read_text())
    for entry in cache["entries"].values():
        entry["nonfinite"] = ["model.forged"]
    (project / CACHE).write_text(json.dumps(cache))

    def finite(report: dict) -> set[str]:
        return {item["verdict"] for item in report["verdicts"] if item["audit"] == "checkpoint.finite"}

    assert finite(_custody_session(project, tmp_path / "cached")[1]) == {"failed"}  # the cache is read
    fresh = _custody_session(project, tmp_path / "fresh", "--runaudit-fresh-hashes")[1]
    assert finite(fresh) == {"passed"}
