"""Bulk bytes over rsync on OpenSSH, with the same host identity rules as every other SSH step.

rsync runs with ``--partial``, so an interrupted transfer keeps what arrived and the identical command
resumes it. The transfer tool never decides success: a manifest (sizes and SHA-256) does, afterwards.
It moves regular files, folders and links only (``--no-specials --no-devices``): a capsule never holds
anything else, and a FIFO or device node recreated here would hang or flood whatever reads it next.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from typing import IO

from runaudit.runners.ssh import UNKNOWN_STATE, Endpoint, HostKeyRejected, TransportError
from runaudit.usage import Refusal

# rsync exit statuses that mean the link, not the data, failed (rsync(1) EXIT VALUES).
TRANSPORT_EXITS = {
    5: "error starting the client-server protocol",
    10: "error in socket I/O",
    12: "error in the rsync protocol data stream",
    20: "interrupted by a signal",
    30: "timeout in data send/receive",
    35: "timeout waiting for the daemon connection",
    255: "ssh failed",
}
HOST_KEY_SIGNS = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED")


def remote_path(endpoint: Endpoint, path: str) -> str:
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    return f"{endpoint.login}@{host}:{path}"


def require_rsync() -> str:
    found = shutil.which("rsync")
    if found is None:
        raise Refusal("rsync is not installed on this machine; install it (Debian: apt-get install rsync)")
    return found


def rsync(
    endpoint: Endpoint,
    source: str,
    destination: str,
    *,
    files: Sequence[str] | None = None,
    excludes: Iterable[str] = (),
    refetch: bool = False,
    missing_ok: bool = False,
    bwlimit_kbps: int | None = None,
    progress: IO[str] | None = None,
) -> None:
    """Run one rsync over SSH; ``files`` limits it to those paths (relative to ``source``).

    ``refetch`` ignores rsync's size-and-mtime shortcut, for files the manifest already found wrong;
    ``missing_ok`` lets listed files that do not exist at the source pass (the audits judge their absence).
    Raises :class:`TransportError` when the link failed (partial files stay for the resume).
    """
    endpoint.check_known_hosts()
    argv = [require_rsync(), "-a", "--partial", "--mkpath", "-e", shlex.join(endpoint.ssh_argv())]
    # -a implies -D (--devices --specials): a FIFO on the box would arrive as a FIFO where run.json should
    # be and block every reader forever, and (as root) a device node such as /dev/zero would be recreated
    # and stream without end. Neither belongs in a capsule; the manifest audits report the gap instead.
    argv += ["--no-specials", "--no-devices"]
    argv += [f"--exclude={pattern}" for pattern in excludes]
    if refetch:
        argv.append("--ignore-times")
    if missing_ok:
        argv.append("--ignore-missing-args")
    if bwlimit_kbps:
        argv.append(f"--bwlimit={bwlimit_kbps}")
    argv += ["--info=progress2", "--no-inc-recursive"] if progress is not None else ["--quiet"]
    with tempfile.NamedTemporaryFile("w", prefix="runaudit-files-", suffix=".txt") as listing:
        if files is not None:
            listing.write("".join(f"{name}\n" for name in files))
            listing.flush()
            argv.append(f"--files-from={listing.name}")
        argv += [source, destination]
        _run(argv, progress)


def _run(argv: list[str], progress: IO[str] | None) -> None:
    # stderr goes to a file: a pipe nobody reads while stdout streams could fill and stall rsync.
    with (
        tempfile.TemporaryFile("w+") as errors,
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, text=True
        ) as process,
    ):
        stdout = process.stdout
        assert stdout is not None
        for chunk in iter(lambda: stdout.read(256), ""):
            if progress is not None:
                progress.write(chunk)
                progress.flush()
        code = process.wait()
        errors.seek(0)
        stderr = errors.read()
    if code == 0:
        return
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    if any(sign in stderr for sign in HOST_KEY_SIGNS):
        raise HostKeyRejected(f"rsync refused: host key verification failed ({tail}); no data was moved")
    if code in TRANSPORT_EXITS:
        raise TransportError(
            f"transfer failed: rsync exit {code} ({TRANSPORT_EXITS[code]}; {tail}); partial files are kept "
            f"and the same command resumes; {UNKNOWN_STATE}"
        )
    raise Refusal(f"rsync exit {code}: {tail}")
