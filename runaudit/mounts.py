"""Which filesystem holds a path, read from the kernel's mount table: a verified copy must be on this machine.

A receipt says the bytes are home. A capsule folder that is a symlink is refused for that reason
(:func:`runaudit.manifest.folder_detour`), but a folder on an sshfs mount passed every check: verify,
the report's banner and ``runaudit down`` all said yes over bytes that were the box's own, gone with it.
So are refused: a capsule on a filesystem that reaches another machine's folder over the network from a
client (sshfs, rclone, GNOME's gvfs, WebDAV, FTP), which may be the box itself, and a capsule folder with
anything mounted inside it, whose files are then not all on the disk that holds the folder. A verified
copy in memory (tmpfs, ramfs, a RAM block device, or any of them under an overlay or a loop device),
gone at the next reboot, gets no receipt either. Network storage that outlives any one box (NFS, Lustre,
GPFS, CephFS) is where users keep their runs and stays allowed, unless this machine serves it to itself
(an NFS mount from localhost: rclone's mount without FUSE); so does a system with no
``/proc/self/mountinfo`` (the check then has nothing to read).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
BLOCK_DEVICES = Path("/sys/block")  # where the kernel tells a loop device's backing file
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
# Block devices held in memory: a disk filesystem on one (ext4 on zram) is gone at the next reboot too.
MEMORY_DEVICE = re.compile(r"/dev/(zram|ram)[0-9]+")
LOOP_DEVICE = re.compile(r"/dev/(loop[0-9]+)")
# Network filesystems that are allowed as storage of their own, unless served from this machine itself:
# ``rclone nfsmount`` and ``rclone serve nfs`` (rclone's way without FUSE) show a folder of any remote,
# the box's over SFTP among them, as ``nfs`` from localhost.
SERVED = frozenset({"nfs", "nfs4", "cifs", "smb3"})
LOOPBACK = re.compile(r"(//)?(localhost|ip6-localhost|127(\.[0-9]+){3}|\[?::1\]?)([:/].*)?")
# How many layers (an overlay's upper folder, a loop device's backing file) are followed to the storage.
LAYERS = 8


@dataclass(frozen=True)
class Mount:
    """One line of the mount table: where it is mounted, its filesystem type, and what it mounts."""

    point: str
    kind: str
    source: str
    options: str = ""  # the filesystem's own options: an overlay's ``upperdir=`` is among them


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
            options = _unescaped(described[2]) if len(described) >= 3 else ""
            mounts.append(Mount(_unescaped(fields[4]), described[0], _unescaped(described[1]), options))
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
            f"{path} lies on {holding.point}, {_a(holding.kind)} mount of {holding.source}: another machine's "
            "folder, not a copy here"
        )
    if holding is not None and holding.kind in SERVED and LOOPBACK.fullmatch(holding.source):
        return (
            f"{path} lies on {holding.point}, {_a(holding.kind)} mount of {holding.source}, served by this "
            "machine itself: a local proxy of another machine's folder (rclone nfsmount), not storage of its own"
        )
    target = os.path.realpath(path)
    if below := next(
        (mount for mount in mounts if _inside(mount.point, target) and mount.point != target), None
    ):
        return (
            f"{below.point}, inside {path}, is {_a(below.kind)} mount of {below.source}: its files are not on the "
            "disk that holds the capsule folder"
        )
    return None


def served_by(path: Path, host: str) -> str | None:
    """Why the folder ``path`` is ``host``'s own storage, reached here over NFS or SMB, or None.

    NFS is storage that outlives a box, except the box's own: a copy on an NFS export of the box is gone
    with it. The mount's server and ``host`` are compared by name and by every address each resolves to.
    """
    holding = _holding(path, _mounts())
    if holding is None or holding.kind not in SERVED:
        return None
    server = _server(holding.source)
    if server and _addresses(server) & _addresses(host):
        return (
            f"{path} lies on {holding.point}, {_a(holding.kind)} mount of {holding.source}: the box's own "
            "storage, gone with it"
        )
    return None


def _server(source: str) -> str:
    """The server of an NFS (``server:/export``) or SMB (``//server/share``) mount source."""
    if source.startswith("//"):
        return source[2:].partition("/")[0]
    if source.startswith("["):  # [fe80::1]:/export
        return source[1:].partition("]")[0]
    return source.partition(":")[0]


def _addresses(host: str) -> set[str]:
    """``host`` itself and every address it resolves to (none where it does not resolve)."""
    try:
        resolved = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        resolved = set()
    return {host.lower(), *resolved}


def in_memory(path: Path) -> str | None:
    """Why the folder ``path`` does not survive a reboot, or None. Asked only where a receipt is at stake:
    a capsule sealed on a box's tmpfs is audited like any other, but a verified copy there is no copy to
    tear the box down on.

    Memory hides behind layers: an overlay whose upper folder is on tmpfs (live-USB sessions, containers)
    and a disk filesystem on a loop device whose backing file is on tmpfs, or on a RAM block device
    (zram, brd), each took a receipt while only ``tmpfs`` itself was looked at. Each layer is followed to
    the storage under it.
    """
    mounts = _mounts()
    top = holding = _holding(path, mounts)
    for _ in range(LAYERS):
        if top is None or holding is None:
            return None
        if holding.kind in IN_MEMORY or MEMORY_DEVICE.fullmatch(holding.source):
            memory = f"a {holding.kind}" if holding.kind in IN_MEMORY else f"{holding.source}, a block device"
            if holding is top:
                return f"{path} lies on {top.point}, {memory} in memory: gone at the next reboot"
            return (
                f"{path} lies on {top.point}, {_a(top.kind)} mount of {top.source} whose storage lies on "
                f"{holding.point}, {memory} in memory: gone at the next reboot"
            )
        storage = _storage_under(holding)
        if storage is None:
            return None
        holding = _holding(Path(storage), mounts)
    return None


def _storage_under(mount: Mount) -> str | None:
    """Where a layered mount keeps what is written to it: an overlay's upper folder, a loop device's
    backing file; None for a mount with no such layer."""
    if mount.kind == "overlay":
        upper = next(
            (
                option[len("upperdir=") :]
                for option in mount.options.split(",")
                if option.startswith("upperdir=")
            ),
            None,
        )
        return upper or None
    if loop := LOOP_DEVICE.fullmatch(mount.source):
        try:
            backing = (BLOCK_DEVICES / loop.group(1) / "loop" / "backing_file").read_text().rstrip("\n")
        except OSError:
            return None
        return backing or None
    return None


def _a(kind: str) -> str:
    """A filesystem type with its article: "an ext4", "a tmpfs"."""
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _unescaped(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) turned back into characters."""
    return re.sub(r"\\([0-7]{3})", lambda found: chr(int(found.group(1), 8)), field)
