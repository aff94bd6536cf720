"""A pull over real SSH never recreates a FIFO or a device node that sits in the box's export.

``rsync -a`` implies ``--specials --devices``: as root it would recreate ``/dev/zero`` (major 1, minor 5)
and a FIFO where ``run.json`` should be, and the next reader would stream forever or block forever.
The transfer passes ``--no-specials --no-devices``, so such a path simply does not arrive and the
manifest audits report it missing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sshbox import SshBox

from runaudit.runners.transfer import remote_path, rsync

RUN_ID = "specials"


def _make_device(path: Path) -> bool:
    """A character device reading like ``/dev/zero`` at ``path``; False when this user may not make one."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        if os.geteuid() == 0:
            raise
        return False  # unprivileged rsync cannot recreate one either: the FIFO still tests the transfer
    return True


def _export_with_specials(box_root: Path) -> tuple[Path, bool]:
    """A capsule on the box whose run.json is a FIFO, beside a device node and one regular file."""
    capsule = box_root / "export" / RUN_ID
    (capsule / "test" / "main").mkdir(parents=True)
    (capsule / "train.csv").write_text("epoch,step,train_loss\n0,10,1.5\n")
    os.mkfifo(capsule / "run.json")
    os.mkfifo(capsule / "test" / "main" / "metrics.json")
    return capsule, _make_device(capsule / "best.pth")


def _kinds(top: Path) -> dict[str, str]:
    """``relative path -> file|dir|other`` of everything under ``top``, links not followed."""
    found = {}
    for path in sorted(top.rglob("*")):
        mode = path.lstat().st_mode
        kind = "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"
        found[path.relative_to(top).as_posix()] = kind
    return found


@pytest.mark.parametrize("listed", [False, True], ids=["whole-folder", "files-from-manifest"])
def test_rsync_over_ssh_skips_fifos_and_devices(
    sshbox: SshBox, box_root: Path, tmp_path: Path, listed: bool
) -> None:
    capsule, device = _export_with_specials(box_root)
    local = tmp_path / "local" / "runs"
    endpoint = sshbox.endpoint()
    # A pull names the manifest's paths (--files-from): a file that was regular when the manifest was
    # built and became a FIFO afterwards is listed, and must still not arrive as a FIFO.
    files = ["train.csv", "run.json", "test/main/metrics.json", "best.pth"] if listed else None
    rsync(
        endpoint,
        remote_path(endpoint, f"{capsule}/"),
        f"{local / RUN_ID}/",
        files=files,
        missing_ok=True,
    )
    arrived = _kinds(local / RUN_ID)
    assert arrived.get("train.csv") == "file"
    assert "other" not in arrived.values(), arrived
    assert {"run.json", "test/main/metrics.json", "best.pth"}.isdisjoint(arrived), arrived
    assert device or os.geteuid() != 0
