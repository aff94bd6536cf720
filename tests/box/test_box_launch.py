"""Launch details over a real sshd: secrets by name only, the setsid nohup fallback, a visible hook failure."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from sshbox import SshBox

from runaudit.cli import main
from runaudit.platforms import builtin_dir
from runaudit.runners.watch import watch

SECRET = "s3cr3t-value-never-in-argv"


def finished(box, run_id: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = watch(box, run_id).state
        if state in ("finished", "dead"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"{run_id} did not end within {timeout_s} s")


def test_a_secret_travels_by_name_in_a_file_that_is_gone_after_start(
    sshbox: SshBox,
    box_root: Path,
    box_state: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RUNAUDIT_TEST_TOKEN", SECRET)
    script = 'echo "token has ${#RUNAUDIT_TEST_TOKEN} characters"; ps -eo args'
    assert (
        main(
            [
                "launch",
                *sshbox.cli_args(box_root, box_state),
                "--env",
                "RUNAUDIT_TEST_TOKEN",
                "secret-run",
                "--",
                "bash",
                "-c",
                script,
            ]
        )
        == 0
    )
    box = sshbox.box(box_root, box_state)
    assert finished(box, "secret-run") == "finished"
    state = Path(box.run_state("secret-run"))
    attempt = state / (state / "current").read_text().strip()
    log = (attempt / "log").read_text()
    assert f"token has {len(SECRET)} characters" in log  # the job saw it
    assert SECRET not in log  # ... and no process on the box carried it in its argv
    assert not (attempt / "env").exists()  # read once, then deleted
    record = json.loads((attempt / "launch.json").read_text())
    assert "RUNAUDIT_TEST_TOKEN" in record["env_names"] and SECRET not in json.dumps(record)
    assert SECRET not in (attempt / "job.sh").read_text()
    assert SECRET not in capsys.readouterr().out


def test_without_tmux_the_job_runs_under_setsid_nohup(
    sshbox: SshBox, box_root: Path, box_state: Path
) -> None:
    assert (
        main(
            [
                "launch",
                *sshbox.cli_args(box_root, box_state),
                "--detach",
                "nohup",
                "nohup-run",
                "--",
                "bash",
                "-c",
                "echo alive; sleep 2",
            ]
        )
        == 0
    )
    box = sshbox.box(box_root, box_state)
    status = watch(box, "nohup-run")
    assert status.state in ("running", "finished") and status.signals["session"] == "n/a"
    assert finished(box, "nohup-run") == "finished"


def test_a_failing_mandatory_proxy_hook_stops_the_job_visibly(
    sshbox: SshBox, box_root: Path, box_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "hooked.toml"
    text = (builtin_dir() / "autodl.toml").read_text(encoding="utf-8")
    profile.write_text(text.replace('PROXY_HOOK = "source /etc/network_turbo"', 'PROXY_HOOK = "false"'))
    assert (
        main(
            [
                "launch",
                *sshbox.cli_args(box_root, box_state),
                "--profile",
                str(profile),
                "hooked-run",
                "--",
                "bash",
                "-c",
                "echo should-not-run",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "dead" in err and "exited with code 97" in err and "PROXY_HOOK failed" in err


def test_a_job_that_dies_at_start_is_a_failed_launch_with_its_exit_code_and_log_tail(
    sshbox: SshBox, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found on a box: launch said "running ... first output: digits: error: ..." and exited 0 for a job
    that had died; a log line is not a sign of life."""
    script = (
        "echo 'loading config'; echo 'digits: error: unrecognized arguments: --epoch' >&2; sleep 1; exit 2"
    )
    assert (
        main(["launch", *sshbox.cli_args(box_root, box_state), "crash-run", "--", "bash", "-c", script]) == 1
    )
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = [line for line in err.splitlines() if line.startswith("launch crash-run")]
    assert ": dead after" in line and "start-up failed" in line and "code 2" in line
    assert "loading config | digits: error: unrecognized arguments" in line


def test_output_without_a_train_row_or_heartbeat_is_no_sign_of_life(
    sshbox: SshBox, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*sshbox.cli_args(box_root, box_state), "--alive-timeout", "3", "quiet-run"]
    assert main(["launch", *args, "--", "bash", "-c", "echo starting; sleep 30"]) == 1
    err = capsys.readouterr().err
    assert (
        "no-sign-of-life" in err
        and "no train.csv row and no heartbeat within 3 s" in err
        and "starting" in err
    )


def test_a_heartbeat_is_a_sign_of_life_before_the_first_row(
    sshbox: SshBox, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first epoch can take an hour; the writer touches active/<id>/.heartbeat when it opens the run
    (tests/test_writer.py), which is what this job does."""
    script = (
        "import os, time\n"
        "from runaudit.workspace import touch_heartbeat\n"
        "from pathlib import Path\n"
        "folder = Path(os.environ['RUNAUDIT_ROOT'], 'active', os.environ['RUNAUDIT_RUN_ID'])\n"
        "folder.mkdir(parents=True)\n"
        "touch_heartbeat(folder)\n"
        "time.sleep(20)\n"
    )
    args = [*sshbox.cli_args(box_root, box_state), "--alive-timeout", "15", "slow-start"]
    assert main(["launch", *args, "--", sys.executable, "-c", script]) == 0
    out = capsys.readouterr().out
    assert "slow-start" in out and ": running after" in out and "heartbeat (.heartbeat) was touched" in out
