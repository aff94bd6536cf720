"""Fixtures of the runner tests: one shared sshd, and a fresh "remote" project root per test.

The remote root is a different folder on this machine that the verbs reach only through SSH; tests
touch it directly only to set up a producer's files or to inspect the outcome.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshbox import SshBox, start_sshbox

# The rig's "box" shares this machine's kernel, which ``down`` refuses (a copy pulled home would lie on the
# box): its sessions name a boot id of their own, as a box's login environment may (docs/runners.md).
ANOTHER_MACHINE = {"RUNAUDIT_BOX_BOOT_ID": "0f0f0f0f-runaudit-test-rig-box"}


@pytest.fixture(scope="session")
def sshbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshBox]:
    box = start_sshbox(tmp_path_factory.mktemp("sshbox"), environment=ANOTHER_MACHINE)
    try:
        yield box
    finally:
        box.stop()


@pytest.fixture
def box_root(tmp_path: Path) -> Path:
    """A fresh "remote" project root: a different folder on this machine, reached only over SSH."""
    root = tmp_path / "box-root"
    root.mkdir()
    return root


@pytest.fixture
def box_state(tmp_path: Path) -> Iterator[Path]:
    """The job-state folder on the "box"; every tmux server a test started there is stopped afterwards."""
    state = tmp_path / "box-state"
    yield state
    sockets = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
    for socket_path in sockets.glob("runaudit-*") if sockets.is_dir() else ():
        _stop_tmux_server_of(socket_path, state)


def _stop_tmux_server_of(socket_path: Path, state: Path) -> None:
    """Kill a tmux server only when one of its sessions runs a job script from this test's state dir."""
    listing = subprocess.run(
        ["tmux", "-S", str(socket_path), "list-panes", "-a", "-F", "#{pane_pid} #{pane_start_command}"],
        capture_output=True,
        text=True,
    )
    if listing.returncode == 0 and str(state) in listing.stdout:
        subprocess.run(["tmux", "-S", str(socket_path), "kill-server"], capture_output=True)
