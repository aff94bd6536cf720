"""Which filesystem holds a path, read from the kernel's mount table: a verified copy must be on this machine.

A receipt says the bytes are home. A capsule folder that is a symlink is refused for that reason
(:func:`runaudit.manifest.folder_detour`), but a folder on an sshfs mount passed every check: verify,
the report's banner and ``runaudit down`` all said yes over bytes that were the box's own, gone with it.
So are refused: a capsule on a filesystem that reaches another machine's folder over the network from a
client (sshfs, rclone, GNOME's gvfs, WebDAV, FTP), which may be the box itself, and a capsule folder with
anything mounted inside it, whose files are then not all on the disk that holds the folder. A verified
copy in memory (tmpfs, ramfs), gone at the next reboot, gets no receipt either. Network storage that outlives any one box (NFS, Lustre,
GPFS, CephFS) is where users keep their runs and stays allowed; so does a system with no
``/proc/self/mountinfo`` (the check then has nothing to read).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
# Filesystems that show another machine's folder through a client on this one: any of them may be the box.
# rclone mounts show as ``fuse.rclone`` whatever its remote (SFTP, or a cloud store it cannot tell apart).
ANOTHER_MACHINE = frozenset(
    {
        "fuse.sshfs",
        "sshfs",
        "fuse.sftp",
        "fuse.rclone",
        "fuse.gvfsd-fuse",
        "fuse.curlftpfs",
        "davfs",
        "fuse.davfs2",
    }
)
# Filesystems held in memory: nothing on them survives a reboot.
IN_MEMORY = frozenset({"tmpfs", "ramfs"})


@dataclass(frozen=True)
class Mount:
    """One line of the mount table: where it is mounted, its filesystem type, and what it mounts."""

    point: str
    kind: str
    source: str


def _mounts() -> list[Mount]:
    """The mount table, in mount order; empty where the kernel shows none."""
    try:
        table = MOUNTINFO.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return []
    mounts = []
    for line in table.splitlines():
        head, _, tail = line.partition(" - ")
        fields, described = head.split(" "), tail.split(" ")
        if len(fields) >= 5 and len(described) >= 2:
            mounts.append(Mount(_unescaped(fields[4]), described[0], _unescaped(described[1])))
    return mounts


def _holding(path: Path, mounts: list[Mount]) -> Mount | None:
    """The mount that holds ``path``: the last, deepest one over it."""
    target = os.path.realpath(path)
    holding: Mount | None = None
    for mount in mounts:
        if _inside(target, mount.point) and (holding is None or len(mount.point) >= len(holding.point)):
            holding = mount
    return holding


def elsewhere(path: Path) -> str | None:
    """Why the folder ``path`` is not this machine's bytes (another machine's folder mounted here, or a
    folder with anything mounted inside it), or None. Every custody audit that lists a capsule asks."""
    mounts = _mounts()
    holding = _holding(path, mounts)
    if holding is not None and holding.kind in ANOTHER_MACHINE:
        return (
            f"{path} lies on {holding.point}, a {holding.kind} mount of {holding.source}: another machine's "
            "folder, not a copy here"
        )
    target = os.path.realpath(path)
    if below := next(
        (mount for mount in mounts if _inside(mount.point, target) and mount.point != target), None
    ):
        return (
            f"{below.point}, inside {path}, is a {below.kind} mount of {below.source}: its files are not on the "
            "disk that holds the capsule folder"
        )
    return None


def in_memory(path: Path) -> str | None:
    """Why the folder ``path`` does not survive a reboot (tmpfs, ramfs), or None. Asked only where a
    receipt is at stake: a capsule sealed on a box's tmpfs is audited like any other, but a verified copy
    there is no copy to tear the box down on."""
    holding = _holding(path, _mounts())
    if holding is not None and holding.kind in IN_MEMORY:
        return f"{path} lies on {holding.point}, a {holding.kind} in memory: gone at the next reboot"
    return None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _unescaped(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) turned back into characters."""
    return re.sub(r"\\([0-7]{3})", lambda found: chr(int(found.group(1), 8)), field)
