"""``runaudit clocks``: the profile's danger clocks counted down from the moment ``runaudit down`` stopped a box."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from runaudit.cli import main
from runaudit.clock import utc_text


def stopped(root: Path, target: str, profile: str, days_ago: float) -> None:
    """A teardown record as ``runaudit down`` writes it, approved ``days_ago``."""
    folder = root / "_trust" / "teardowns"
    folder.mkdir(parents=True, exist_ok=True)
    approved = dt.datetime.now(dt.UTC) - dt.timedelta(days=days_ago)
    record = {"schema_version": "runaudit.teardown/1", "target": target, "profile": profile}
    (folder / f"{target}-x.json").write_text(json.dumps({**record, "approved_utc": utc_text(approved)}))


def test_a_stopped_box_counts_down_to_its_auto_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped(tmp_path, "box-a", "autodl", days_ago=3.5)
    stopped(tmp_path, "box-b", "autodl", days_ago=20)
    stopped(tmp_path, "pod-c", "runpod", days_ago=1)
    assert main(["clocks", "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (release_a,) = [line for line in lines if line.startswith("box-a") and "15 days" in line]
    assert "11 day(s)" in release_a and "h left" in release_a  # 15 days from 3.5 days ago
    (release_b,) = [line for line in lines if line.startswith("box-b") and "15 days" in line]
    assert "PASSED 5 day(s) ago" in release_b
    assert any(line.startswith("box-a") and line.endswith("after immediate") for line in lines)  # as stated
    (pod,) = [line for line in lines if line.startswith("pod-c")]
    assert "leaves no box for a clock to take" in pod  # terminate deletes: nothing left to release


def test_a_record_counts_down_from_the_plan_it_was_approved_under(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``down --profile my.toml`` (a user's copy of autodl's) stored the name as typed; ``clocks`` run anywhere
    else said "no such profile file", and the 15-day release clock of the stopped box was lost."""
    from runaudit.platforms import builtin_dir, load_profile
    from runaudit.runners.down import Approval, Inventory, write_record

    mine = tmp_path / "my.toml"
    mine.write_text((builtin_dir() / "autodl.toml").read_text(encoding="utf-8"), encoding="utf-8")
    approved = dt.datetime.now(dt.UTC) - dt.timedelta(days=3.5)
    approval = Approval(Inventory("me@box:22", "/root/project"), [])
    write_record(tmp_path, approval, load_profile(str(mine)), "box-a", now=approved)
    mine.unlink()  # clocks runs where the profile file is not
    assert main(["clocks", "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (release,) = [line for line in lines if line.startswith("box-a") and "15 days" in line]
    assert "11 day(s)" in release and "h left" in release
