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


def planned(root: Path, name: str, approved_utc: str, delays: list[str]) -> None:
    """A teardown record that carries its plan, approved at ``approved_utc`` as written, one release clock
    per delay."""
    clocks = [{"trigger": "left stopped", "effect": "released", "delay": delay} for delay in delays]
    record = {
        "schema_version": "runaudit.teardown/1",
        "target": name,
        "profile": "mine.toml",
        "approved_utc": approved_utc,
        "meter_stop": {"verb": "stop", "reversible": True},
        "danger_clocks": clocks,
    }
    folder = root / "_trust" / "teardowns"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}-x.json").write_text(json.dumps(record))


def test_a_record_approved_at_a_time_with_no_offset_cannot_be_read_and_hides_no_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``approved_utc`` with no UTC offset names no moment: ``clocks`` ended in a TypeError traceback
    (offset-naive minus offset-aware), and the other boxes' release clocks were never shown."""
    planned(tmp_path, "a-naive", "2026-12-01T00:00:00", ["15 days"])
    stopped(tmp_path, "box-b", "autodl", days_ago=3.5)
    assert main(["clocks", "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "a-naive-x.json: cannot be read (approved_utc is '2026-12-01T00:00:00', a time with no UTC offset: "
        "expected a UTC time such as 2026-12-01T00:00:00Z)"
    ) in lines
    assert not [line for line in lines if line.startswith("a-naive ")]  # no clock counted from a guess
    (release,) = [line for line in lines if line.startswith("box-b") and "15 days" in line]
    assert "11 day(s)" in release and "h left" in release


def test_a_delay_past_the_year_9999_is_told_for_that_clock_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A profile's ``3000000 days``, copied into the record, falls past the last date Python can name:
    ``clocks`` ended in an OverflowError traceback, and every other clock went unshown with it."""
    approved = utc_text(dt.datetime.now(dt.UTC) - dt.timedelta(days=3.5))
    planned(tmp_path, "a-huge", approved, ["3000000 days", "15 days", "1" + "0" * 400])
    stopped(tmp_path, "box-b", "autodl", days_ago=20)
    assert main(["clocks", "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    too_far = [
        line for line in lines if line.endswith(": due after the year 9999, too far off to count down")
    ]
    assert [line.partition(" after ")[2].partition(":")[0] for line in too_far] == [
        "3000000 days",
        "1" + "0" * 400,
    ]
    (same_record,) = [line for line in lines if line.startswith("a-huge") and "after 15 days" in line]
    assert "11 day(s)" in same_record and "h left" in same_record
    (other_record,) = [line for line in lines if line.startswith("box-b") and "15 days" in line]
    assert "PASSED 5 day(s) ago" in other_record
