"""Progress bars on a real terminal: hashes of >= PROGRESS_FROM bytes draw one, and nothing breaks.

``runaudit manifest`` and the custody fixture draw a tqdm byte counter only when stderr is a TTY, so the
in-process tests (captured streams) never reach that code. Here each command runs in a child process whose
stdin, stdout and stderr are the slave side of a pseudo-terminal, as in a user's shell, against a demo
capsule whose ``last.pth`` carries an extra, unread zip record that takes it past ``PROGRESS_FROM``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import zipfile
from pathlib import Path

import pytest

from runaudit.catalog import AUDITS_DIR
from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.hashing import PROGRESS_FROM
from runaudit.manifest import MANIFEST, pulls_dir

PULL_ID = "big"
TIMEOUT_S = 240.0
# The descriptions the harness gives its bars (runaudit/runners/manifest.py, fixtures/custody.py).
MANIFEST_BAR = "sha256 of "
CUSTODY_BAR = "runaudit sha256"


def _pad_last_checkpoint(capsule: Path) -> None:
    """Grow ``last.pth`` past PROGRESS_FROM with a stored zip record torch never reads; rebind its sha256.

    The file stays a valid checkpoint (``torch.load`` reads its records by name), and ``run.json`` binds
    the new bytes, so the custody gate passes on it exactly as on the demo.
    """
    last = capsule / "last.pth"
    with zipfile.ZipFile(last) as archive:
        prefix = archive.namelist()[0].split("/", 1)[0]
    chunk = bytes(16 << 20)
    with (
        zipfile.ZipFile(last, "a", compression=zipfile.ZIP_STORED) as archive,
        archive.open(f"{prefix}/padding", "w", force_zip64=True) as record,
    ):
        for _ in range(PROGRESS_FROM // len(chunk) + 1):
            record.write(chunk)
    assert last.stat().st_size >= PROGRESS_FROM
    digest = hashlib.sha256()
    with last.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    run_json = capsule / "run.json"
    document = json.loads(run_json.read_text(encoding="utf-8"))
    document["checkpoints"]["last"]["sha256"] = digest.hexdigest()
    run_json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


@pytest.fixture
def big_project(project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(project root, roster file): the demo project whose sealed capsule holds >= PROGRESS_FROM bytes."""
    _pad_last_checkpoint(project / "export" / DEMO_RUN_ID)
    roster = tmp_path / "roster.txt"
    roster.write_text(f"{DEMO_RUN_ID}\n", encoding="utf-8")
    return project, roster


def _child_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["TERM"] = env.get("TERM") or "xterm"
    return env


def run_on_terminal(argv: list[str], cwd: Path, timeout: float = TIMEOUT_S) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as its controlling terminal and stdio; (exit code, output).

    The master side is drained with ``select`` against a deadline, so a child that hangs (or a terminal
    that never reports end of file) fails the test instead of blocking it; the child's process group is
    killed then.
    """
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        child = subprocess.Popen(
            argv, cwd=cwd, env=_child_env(), stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
    finally:
        os.close(slave)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                tail = output.decode(errors="replace")[-3000:]
                pytest.fail(f"{argv} did not finish within {timeout} s; output so far:\n{tail}")
            ready, _, _ = select.select([master], [], [], min(remaining, 0.5))
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError as exc:  # EIO: every slave descriptor is closed (the child has exited)
                    if exc.errno != errno.EIO:
                        raise
                    data = b""
                if not data:
                    break
                output += data
            elif child.poll() is not None and not select.select([master], [], [], 0)[0]:
                break  # exited, and a grandchild may still hold the slave open: nothing more to read
    finally:
        os.close(master)
    remaining = max(deadline - time.monotonic(), 1.0)
    try:
        code = child.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        pytest.fail(f"{argv} closed its terminal but did not exit")
    return code, output.decode("utf-8", errors="replace")


def _bar_drawn(output: str, description: str) -> bool:
    """A bar with this description was drawn: tqdm redraws its line in place after a bare carriage return.

    The terminal turns every newline into CR LF; those are line ends, not redraws.
    """
    redraws = output.replace("\r\n", "\n").split("\r")[1:]
    return any(segment.startswith(description) for segment in redraws)


def _manifest_argv(root: Path, roster: Path) -> list[str]:
    return [sys.executable, "-m", "runaudit", "manifest", "--root", str(root), "--roster", str(roster),
            "--pull-id", PULL_ID]  # fmt: skip


def test_manifest_draws_a_byte_bar_on_a_terminal_and_writes_the_manifest(
    big_project: tuple[Path, Path], tmp_path: Path
) -> None:
    root, roster = big_project
    code, output = run_on_terminal(_manifest_argv(root, roster), cwd=tmp_path)
    assert code == 0, output
    assert "Traceback" not in output, output
    assert _bar_drawn(output, MANIFEST_BAR), output
    document = json.loads((pulls_dir(root) / PULL_ID / MANIFEST).read_text(encoding="utf-8"))
    assert document["totals"]["bytes"] >= PROGRESS_FROM


def test_manifest_draws_no_bar_when_stderr_is_not_a_terminal(
    big_project: tuple[Path, Path], tmp_path: Path
) -> None:
    """The control: the same command through pipes writes its one summary line and no bar."""
    root, roster = big_project
    done = subprocess.run(
        _manifest_argv(root, roster), cwd=tmp_path, env=_child_env(), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert MANIFEST_BAR not in done.stdout + done.stderr and "\r" not in done.stdout + done.stderr


def test_custody_gate_draws_a_byte_bar_on_a_terminal_and_passes(
    big_project: tuple[Path, Path], tmp_path: Path
) -> None:
    root, roster = big_project
    assert main(["manifest", "--root", str(root), "--roster", str(roster), "--pull-id", PULL_ID]) == 0
    # The whole custody gate, with the checkpoint audits first: the first of them asks for a digest while
    # the hash that collection started is still running, so the bar has something to wait for.
    order = ("test_checkpoint.py", "test_manifest.py", "test_capsule.py")
    modules = [str(AUDITS_DIR / name) for name in order]
    argv = [
        sys.executable, "-m", "pytest", "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider",
        f"--run={DEMO_RUN_ID}", "--root", str(root), "--report-dir", str(tmp_path / "reports"),
        "--report-format", "json", "--pull", PULL_ID, "--fresh-hashes", "-m", "custody", *modules,
    ]  # fmt: skip
    code, output = run_on_terminal(argv, cwd=tmp_path)
    assert code == pytest.ExitCode.OK, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert _bar_drawn(output, CUSTODY_BAR), output[-4000:]
    report = json.loads((tmp_path / "reports" / f"{DEMO_RUN_ID}.json").read_text(encoding="utf-8"))
    sha = [item for item in report["verdicts"] if item["audit"] == "manifest.sha256"]
    assert sha and all(item["verdict"] == "passed" for item in sha)
