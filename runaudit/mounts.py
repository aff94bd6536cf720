"""Which filesystem holds a path, read from the kernel's mount table: a verified copy must be on this machine.

A receipt says the bytes are home. A capsule folder that is a symlink is refused for that reason
(:func:`runaudit.manifest.folder_detour`), but a folder on an sshfs mount passed every check: verify,
the report's banner and ``runaudit down`` all said yes over bytes that were the box's own, gone with it.
So are refused: a capsule on a filesystem that reaches another machine's folder over the network from a
client (sshfs, rclone, GNOME's gvfs, WebDAV, FTP), which may be the box itself, and a capsule folder with
anything mounted inside it, whose files are then not all on the disk that holds the folder. A verified
copy in memory (tmpfs, ramfs, devtmpfs under ``/dev``, hugetlbfs, a RAM block device, or any of them
under an overlay, a loop device or its partition, or a device-mapper device such as LUKS or LVM), gone
at the next reboot, gets no receipt either. Network storage that outlives any one box (NFS, Lustre,
GPFS, CephFS) is where users keep their runs and stays allowed, unless this machine serves it to itself
(an NFS mount from localhost: rclone's mount without FUSE); so does a system with no
``/proc/self/mountinfo`` (the check then has nothing to read).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
BLOCK_DEVICES = Path("/sys/block")  # a loop device's backing file, a device-mapper device's slaves
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
# Filesystems held in memory: nothing on them survives a reboot. ``/dev`` is devtmpfs, and a project root
# under it took a receipt while only tmpfs and ramfs were named.
IN_MEMORY = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
# Block devices held in memory, by the kernel's name: a disk filesystem on one (ext4 on zram) is gone at
# the next reboot too.
MEMORY_DEVICE = re.compile(r"(zram|ram)[0-9]+")
LOOP_DEVICE = re.compile(r"loop[0-9]+")
# Where a device-mapper device (LUKS, LVM) is named in the mount table.
DEVICE_MAPPER = "/dev/mapper/"
# Every block device, partitions too: a partition's entry lies inside its disk's.
CLASS_BLOCK = Path("/sys/class/block")
# How many devices under one mount (partitions, device-mapper layers) are followed to the bottom.
DEVICES = 64
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


def served_by(path: Path, host: str, names: Iterable[str] = ()) -> str | None:
    """Why the folder ``path`` is the box's own storage, reached here over NFS or SMB, or None.

    The box is ``host``, as it is reached, and ``names``, the names and addresses it gives for itself. NFS
    is storage that outlives a box, except the box's own: a copy on an NFS export of the box is gone with
    it, under whatever address it is mounted (SSH reaches a provider's public address or proxy, NFS the
    box's private or tailnet one). The mount's server is compared by name and by every address it resolves
    to; the box's own names are not resolved here (a box may name itself anything).
    """
    holding = _holding(path, _mounts())
    if holding is None or holding.kind not in SERVED:
        return None
    server = _server(holding.source)
    own = (_addresses(host) if host else set()) | {_address(name) for name in names if name}
    if server and _addresses(server) & own:
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


def _address(name: str) -> str:
    """A host name case-folded, or an address in its one canonical spelling (``::ffff:a.b.c.d`` as IPv4)."""
    try:
        address = ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        return name.lower()
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _addresses(host: str) -> set[str]:
    """``host`` itself and every address it resolves to (none where it does not resolve)."""
    try:
        resolved = {_address(str(info[4][0])) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        resolved = set()
    return {_address(host), *resolved}


def in_memory(path: Path) -> str | None:
    """Why the folder ``path`` does not survive a reboot, or None. Asked only where a receipt is at stake:
    a capsule sealed on a box's tmpfs is audited like any other, but a verified copy there is no copy to
    tear the box down on.

    Memory hides behind layers: an overlay whose upper folder is on tmpfs (live-USB sessions, containers),
    a disk filesystem on a loop device (or a partition of one) whose backing file is on tmpfs, on a RAM
    block device (zram, brd), or on a device-mapper device (LUKS, LVM) over any of them, each took a
    receipt while only ``tmpfs`` itself was looked at; so did ``/dev``, devtmpfs, which is memory too.
    Each layer is followed to the storage under it; a layer that cannot be followed is taken as storage.
    """
    mounts = _mounts()
    top = _holding(path, mounts)
    if top is None:
        return None
    followed: set[Mount] = set()  # a layer seen again (a loop of layers) is not followed twice
    layer = [top]
    for _ in range(LAYERS):
        below: list[Mount] = []
        for mount in layer:
            if mount in followed:
                continue
            followed.add(mount)
            if mount.kind in IN_MEMORY:
                memory = f"a {mount.kind}" if mount is top else f"{mount.point}, a {mount.kind}"
                return _gone(path, top, memory, direct=mount is top)
            storage: list[str] = []  # the folders and files this layer keeps its bytes in
            if upper := _upper_folder(mount):
                storage.append(upper)
            for name in _devices_under(mount.source):
                if MEMORY_DEVICE.fullmatch(name):
                    device = f"/dev/{name}"
                    return _gone(path, top, f"{device}, a block device", direct=device == top.source)
                if backing := _backing_file(name):
                    storage.append(backing)
            below.extend(holding for place in storage if (holding := _holding(Path(place), mounts)))
        layer = below
    return None


def _gone(path: Path, top: Mount, memory: str, *, direct: bool) -> str:
    """Why ``path``, on the mount ``top``, is gone at the next reboot: ``memory`` holds it, directly or
    under ``top``'s layers."""
    if direct:
        return f"{path} lies on {top.point}, {memory} in memory: gone at the next reboot"
    return (
        f"{path} lies on {top.point}, {_a(top.kind)} mount of {top.source} whose storage lies on "
        f"{memory} in memory: gone at the next reboot"
    )


def _upper_folder(mount: Mount) -> str | None:
    """Where an overlay keeps what is written to it (its ``upperdir=``); None for any other mount."""
    if mount.kind != "overlay":
        return None
    return next(
        (option[len("upperdir=") :] for option in mount.options.split(",") if option.startswith("upperdir=")),
        None,
    )


def _devices_under(source: str) -> list[str]:
    """The kernel names of the block device a mount's ``source`` names and of every device it is built
    on: a partition's disk, a device-mapper device's underlying devices, down to the bottom; empty where
    ``source`` is no block device (``tmpfs``, ``overlay``, a server's export).

    Memory sat under a partition (``/dev/loop0p1``) and under LUKS or LVM (``/dev/mapper/secret`` over a
    loop device whose backing file is on tmpfs), and a receipt was written where only the mount's own
    device was looked at.
    """
    first = _device_name(source)
    found: list[str] = []
    waiting = [first] if first else []
    while waiting and len(found) < DEVICES:
        name = waiting.pop(0)
        if name not in found:
            found.append(name)
            waiting.extend(_built_on(name))
    return found


def _device_name(source: str) -> str | None:
    """The kernel's name (``sda1``, ``dm-0``) of the block device at ``source``, or None."""
    if not source.startswith("/dev/"):
        return None
    device = os.path.realpath(source)  # /dev/VG/LV and /dev/mapper/NAME link to /dev/dm-N where /dev has them
    if device.startswith(DEVICE_MAPPER):
        return _mapped(device[len(DEVICE_MAPPER) :])
    name = device.removeprefix("/dev/")
    return name if device.startswith("/dev/") and _plain(name) else None


def _mapped(mapped_name: str) -> str | None:
    """The ``dm-N`` whose device-mapper name (``/sys/block/dm-N/dm/name``) is ``mapped_name``, or None."""
    for device in sorted(BLOCK_DEVICES.glob("dm-*")):
        try:
            if (device / "dm" / "name").read_text().rstrip("\n") == mapped_name:
                return device.name
        except OSError:
            continue
    return None


def _built_on(name: str) -> list[str]:
    """The devices the block device ``name`` is built on: a partition's disk (``/sys/class/block/<part>/..``),
    a device-mapper device's ``slaves``; none for a disk of its own."""
    if (CLASS_BLOCK / name / "partition").is_file():
        disk = Path(os.path.realpath(CLASS_BLOCK / name / "..")).name
        return [disk] if _plain(disk) else []
    try:
        return sorted(
            slave.name for slave in (BLOCK_DEVICES / name / "slaves").iterdir() if _plain(slave.name)
        )
    except OSError:
        return []


def _backing_file(name: str) -> str | None:
    """The file a loop device keeps its blocks in (``/sys/block/loopN/loop/backing_file``); None for a
    device that is no loop device, or one the kernel does not tell."""
    if not LOOP_DEVICE.fullmatch(name):
        return None
    try:
        backing = (BLOCK_DEVICES / name / "loop" / "backing_file").read_text().rstrip("\n")
    except OSError:
        return None
    return backing or None


def _plain(name: str) -> bool:
    """Whether ``name`` is one entry's name, fit to join under ``/sys``: not empty, no ``/``, no ``..``."""
    return bool(name) and "/" not in name and name not in {".", ".."}


def _a(kind: str) -> str:
    """A filesystem type with its article: "an ext4", "a tmpfs"."""
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _unescaped(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) turned back into characters."""
    return re.sub(r"\\([0-7]{3})", lambda found: chr(int(found.group(1), 8)), field)
