"""The teardown gate on a real receipt: it refuses first and acts only on an explicit, named approval."""

from __future__ import annotations

from pathlib import Path

import pytest

from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.runners.profiles import builtin_dir

RUNPOD_TERMINATE = 'how = "console or `runpodctl remove pod <id>`"\n'


def profile_with(tmp_path: Path, *, command: list[str] | None = None, verified: str = "2026-06") -> Path:
    text = (builtin_dir() / "runpod.toml").read_text(encoding="utf-8")
    if command is not None:
        text = text.replace(
            RUNPOD_TERMINATE, RUNPOD_TERMINATE + f"command = {command!r}\n".replace("'", '"'), 1
        )
    text = text.replace('verified = "2026-06"', f'verified = "{verified}"')
    path = tmp_path / f"runpod-{len(list(tmp_path.glob('*.toml')))}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def down(project: Path, profile: str | Path, *extra: str, runs: tuple[str, ...] = (DEMO_RUN_ID,)) -> int:
    roster = [arg for run in runs for arg in ("--run", run)]
    return main(
        ["down", "--root", str(project), *roster, "--profile", str(profile), "--target", "pod-7", *extra]
    )


def test_a_roster_run_without_a_receipt_blocks_the_whole_teardown(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert down(project, "runpod", "--confirm", "pod-7", runs=(DEMO_RUN_ID, "seed1")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("runaudit down: error: down refused: no current receipt")
    assert "run seed1: no pull manifest names it" in err and "nothing was stopped" in err
    assert "meter stop" not in err  # the plan is not even offered


def test_the_command_runs_only_after_the_named_confirmation(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "stopped-pod-7"
    profile = profile_with(tmp_path, command=["touch", str(tmp_path / "stopped-{target}")])
    assert down(project, profile) == 2
    err = capsys.readouterr().err
    assert "meter stop: terminate" in err and "danger clock: low account balance" in err
    assert "still billed afterwards: Network Volume" in err and not marker.exists()
    assert down(project, profile, "--confirm", "pod-7") == 0
    assert marker.exists()
    assert (
        "a success reply is not proof: poll the pod's show endpoint until it answers 404"
        in capsys.readouterr().err
    )


def test_a_failing_teardown_command_is_reported_as_not_stopped(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert down(project, profile_with(tmp_path, command=["false"]), "--confirm", "pod-7") == 1
    assert "the meter may still be running" in capsys.readouterr().err


def test_a_stale_governing_fact_blocks_an_irreversible_verb_until_reverified(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = profile_with(tmp_path, verified="2001-01")
    assert down(project, stale, "--confirm", "pod-7") == 2
    err = capsys.readouterr().err
    assert "STALE: runpod.teardown.terminate_deletes_volume last verified 2001-01" in err
    assert "then pass --facts-reverified" in err
    assert down(project, stale, "--confirm", "pod-7", "--facts-reverified") == 0


def test_a_profile_whose_teardown_differs_per_member_needs_the_member(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert down(project, "china", "--confirm", "pod-7") == 2
    assert "pass one of china:matpool, china:gpushare" in capsys.readouterr().err
