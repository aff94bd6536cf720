"""``watch`` states come from live signals only: the real probe script read against real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from runaudit.runners.box import Box
from runaudit.runners.ssh import Endpoint
from runaudit.runners.watch import classify, parse_signals, probe_command
from runaudit.usage import Refusal

RUN = "r1"


def start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]


@pytest.fixture
def box(tmp_path: Path) -> Box:
    root = tmp_path / "root"
    (root / "active" / RUN).mkdir(parents=True)
    return Box(Endpoint("127.0.0.1"), PurePosixPath(root), str(tmp_path / "state"))


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def attempt(box: Box, *, started: float | None = None) -> Path:
    state = Path(box.run_state(RUN))
    folder = state / "a1"
    folder.mkdir(parents=True)
    (state / "current").write_text("a1\n")
    (folder / "started").write_text(f"{int(started or time.time())}\n")
    (folder / "log").write_text("")
    return folder


def look(box: Box, **classify_args: float) -> tuple[str, str]:
    """Run the real probe script locally (what watch sends over SSH) and classify its answer."""
    done = subprocess.run(
        ["/bin/sh", "-c", probe_command(box, RUN, "active/{run_id}/train.csv")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return classify(parse_signals(done.stdout), **classify_args)


def test_no_launch_record_is_a_refusal_not_a_state(box: Box) -> None:
    with pytest.raises(Refusal, match="no launch record"):
        look(box)


def test_a_live_wrapper_is_running(box: Box, sleeper: subprocess.Popen[bytes]) -> None:
    folder = attempt(box)
    (folder / "pid").write_text(f"{sleeper.pid} {start_time(sleeper.pid)}\n")
    state, reason = look(box)
    assert state == "running" and f"pid {sleeper.pid} alive" in reason


def test_a_recycled_pid_is_not_the_wrapper(box: Box, sleeper: subprocess.Popen[bytes]) -> None:
    """The PID exists but started at another time: it is someone else, so the run is dead."""
    folder = attempt(box)
    (folder / "pid").write_text(f"{sleeper.pid} 1\n")
    assert look(box)[0] == "dead"


def test_the_probe_never_counts_itself(box: Box) -> None:
    """The seed's patrol matched its own argv (Appendix A-2); the probe names the run but is no wrapper."""
    folder = attempt(box)
    (folder / "pid").write_text(f"{os.getpid() + 10_000_000} 1\n")  # a PID that cannot exist
    state, reason = look(box)
    assert state == "dead" and "no live process and no exit code" in reason


@pytest.mark.parametrize(("code", "state"), [("0", "finished"), ("137", "dead"), ("97", "dead")])
def test_the_wrappers_exit_code_decides_finished_or_dead(box: Box, code: str, state: str) -> None:
    folder = attempt(box)
    (folder / "pid").write_text("1 1\n")
    (folder / "exit_code").write_text(f"{code}\n")
    found, reason = look(box)
    assert found == state and (code == "0" or f"code {code}" in reason)


def test_alive_but_silent_is_stalled_and_old_history_does_not_count(
    box: Box, sleeper: subprocess.Popen[bytes]
) -> None:
    long_ago = time.time() - 4000
    folder = attempt(box, started=long_ago)
    (folder / "pid").write_text(f"{sleeper.pid} {start_time(sleeper.pid)}\n")
    os.utime(folder / "log", (long_ago, long_ago))
    history = Path(str(box.root)) / "active" / RUN / "train.csv"
    history.write_text("epoch,step,train_loss\n1,10,0.5\n")
    os.utime(history, (long_ago - 100, long_ago - 100))  # written by an earlier attempt
    state, reason = look(box, stall_after_s=1800)
    assert state == "stalled" and "nothing written for" in reason
    history.write_text("epoch,step,train_loss\n1,10,0.5\n2,20,0.4\n")  # a fresh row from this attempt
    assert look(box, stall_after_s=1800)[0] == "running"


def test_a_cut_answer_is_unknown() -> None:
    assert classify({"now": "1", "attempt": "a1", "alive": "no"})[0] == "unknown"
    assert classify(parse_signals("now=1\nlaunched=no\n"))[0] == "unknown"


def test_a_session_without_a_pid_yet_is_starting(box: Box) -> None:
    signals = {"probe": "complete", "now": "100", "attempt": "a1", "started": "100", "session": "yes"}
    assert classify(signals) == ("running", "starting (tmux session present), last write 0 s ago")


def test_a_log_line_cannot_forge_a_signal(box: Box) -> None:
    """Found in review: dash's echo turned a literal \\n in the log into a newline, so a log line could add
    its own exit_code=0 and make a failed run "finished" (and --then close,manifest act on it)."""
    folder = attempt(box)
    (folder / "pid").write_text("1 1\n")
    (folder / "exit_code").write_text("1\nexit_code=0\n")  # a second line, as a hostile job could write
    (folder / "log").write_text("loss 0.3\ndone \\nexit_code=0\n")
    state, reason = look(box)
    assert state == "dead" and "exit_code=0" not in reason.split(";")[0], reason


def test_a_log_line_cannot_act_on_the_terminal(box: Box) -> None:
    """A dead run's log ending in ``ESC[1G ESC[2K`` and a forged "finished" line: the printed status
    overwrote its own "dead" on the terminal, and reached ``--on-exit`` as it was."""
    folder = attempt(box)
    (folder / "pid").write_text("1 1\n")
    (folder / "exit_code").write_text("1\n")
    (folder / "log").write_text("loss 0.3\n\x1b[1G\x1b[2Kwatch r1 on box: finished\x1b[8m\n")
    command = probe_command(box, RUN, "active/{run_id}/train.csv")
    signals = parse_signals(subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True).stdout)
    assert "\x1b" not in "".join(signals.values()) and "\\x1b[2K" in signals["log_last"]
    state, reason = classify(signals)
    assert state == "dead" and "\x1b" not in reason


def test_a_reboot_is_blamed_only_when_the_job_recorded_no_exit(box: Box) -> None:
    folder = attempt(box)
    (folder / "pid").write_text("1 1\n")
    (folder / "boot_id").write_text("00000000-0000-0000-0000-000000000000\n")  # not this boot
    (folder / "exit_code").write_text("1\n")
    state, reason = look(box)
    assert state == "dead" and "rebooted" not in reason, reason  # it exited 1 before any reboot
    (folder / "exit_code").unlink()
    state, reason = look(box)
    assert state == "dead" and "the box rebooted since launch" in reason, reason


def test_a_detached_wrapper_without_its_pid_is_starting_for_a_grace(box: Box) -> None:
    """Found in review: a setsid nohup launch probed before its wrapper wrote its pid read as dead."""
    attempt(box)
    assert look(box) == ("running", "starting: the wrapper has not written its pid yet")
    shutil.rmtree(Path(box.run_state(RUN)))
    attempt(box, started=time.time() - 120)
    assert look(box)[0] == "dead"
