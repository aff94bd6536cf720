"""Which filesystem holds a path, read from the kernel's mount table: a verified copy must be on this machine.

A receipt says the bytes are home. A capsule folder that is a symlink is refused for that reason
(:func:`runaudit.manifest.folder_detour`), but a folder on an sshfs mount passed every check: verify,
the report's banner and ``runaudit down`` all said yes over bytes that were the box's own, gone with it.
Filesystems that are another machine's folder over SSH are refused the same way. Network storage that
outlives any one box (NFS, Lustre, GPFS, object-store mounts) is a place users keep their runs and stays
allowed; so does a system with no ``/proc/self/mountinfo`` (the check then has nothing to read).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
# FUSE filesystems that show a folder of another machine reached over SSH.
OVER_SSH = frozenset({"fuse.sshfs", "sshfs", "fuse.sftp", "fuse.rclone-sftp"})


def over_ssh(path: Path) -> str | None:
    """Why ``path`` lies on another machine's folder mounted over SSH (the mount and its source), or None."""
    try:
        table = MOUNTINFO.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None
    target = os.path.realpath(path)
    best: tuple[int, str, str, str] | None = None
    for line in table.splitlines():
        head, _, tail = line.partition(" - ")
        fields, described = head.split(" "), tail.split(" ")
        if len(fields) < 5 or len(described) < 2:
            continue
        point = _unescaped(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):  # the last, deepest mount wins
            best = (len(point), point, described[0], _unescaped(described[1]))
    if best is None or best[2] not in OVER_SSH:
        return None
    return (
        f"{path} lies on {best[1]}, a {best[2]} mount of {best[3]}: another machine's folder, not a copy here"
    )


def _unescaped(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) turned back into characters."""
    return re.sub(r"\\([0-7]{3})", lambda found: chr(int(found.group(1), 8)), field)
