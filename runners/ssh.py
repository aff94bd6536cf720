"""SSH to a box with fabric/paramiko under strict host identity, and the errors that say what was proven.

Host keys come from one known_hosts file: ``--known-hosts``, else the profile's pinned file, else the
user's ``~/.ssh/known_hosts``. An unknown, changed or ``@revoked`` key is refused before authentication,
so no command can run on an impostor; nothing is ever added to the file.
Secrets are named, never given: a key file path, and the *name* of the environment variable that holds
its passphrase.

A transport failure proves only that the transport failed. :class:`TransportError` says so in its own
words, and callers must never read it as "the run died".
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runaudit.safeio import JSON_CAP, kind_of
from runaudit.usage import Refusal

CONNECT_TIMEOUT_S = 15.0
UNKNOWN_STATE = "the run's state is unknown, not failed"


class TransportError(Refusal):
    """The SSH transport failed. Nothing is known about the box or the run from this alone."""


class HostKeyRejected(TransportError):
    """The box's host key is unknown or changed: refused before authentication; no command ran."""


@dataclass(frozen=True)
class Endpoint:
    """Where a box is and how we prove who it is; holds paths and names, never secret values."""

    host: str
    port: int = 22
    user: str = ""
    identity: Path | None = None
    known_hosts: Path = Path("~/.ssh/known_hosts")
    passphrase_env: str | None = None
    connect_timeout: float = CONNECT_TIMEOUT_S

    @property
    def login(self) -> str:
        return self.user or getpass.getuser()

    @property
    def label(self) -> str:
        return f"{self.login}@{self.host}:{self.port}"

    @property
    def known_hosts_file(self) -> Path:
        return self.known_hosts.expanduser()

    @property
    def host_key_name(self) -> str:
        """The name a known_hosts file uses for this host (``[host]:port`` off port 22)."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def ssh_argv(self) -> list[str]:
        """OpenSSH with the same identity rules as paramiko: strict, one known_hosts file, no config."""
        argv = ["ssh", "-F", "none", "-p", str(self.port), "-l", self.login]
        if self.identity is not None:
            argv += ["-i", str(self.identity.expanduser()), "-o", "IdentitiesOnly=yes"]
        options = {
            "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": str(self.known_hosts_file),
            "GlobalKnownHostsFile": "/dev/null",
            "UpdateHostKeys": "no",
            "BatchMode": "yes",
            "ConnectTimeout": str(int(self.connect_timeout)),
            "ServerAliveInterval": "10",
            "ServerAliveCountMax": "3",
        }
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        return argv

    def check_known_hosts(self) -> None:
        if not self.known_hosts_file.is_file():
            raise HostKeyRejected(
                f"refused {self.label}: known_hosts file {self.known_hosts_file} does not exist; pin the "
                "box's host key there (verified through the provider's console), it is never auto-added"
            )


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def tail(self, lines: int = 5) -> str:
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return " | ".join(text[-lines:])


def _fingerprint(key: Any) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return f"{key.get_name()} SHA256:{base64.b64encode(digest).decode().rstrip('=')}"


def load_known_hosts(keys: Any, path: Path) -> frozenset[bytes]:
    """Add the host keys of the OpenSSH known_hosts file ``path`` to paramiko's ``keys``; return the keys
    the file marks ``@revoked``.

    paramiko reads no marker line: one ``@revoked`` or ``@cert-authority`` line made its loader raise
    (``Incorrect padding``), and every verb refused for a reason that named no file. Here a revoked key is
    never trusted, for any host, whatever other line pins it; a ``@cert-authority`` line is passed over
    (runaudit pins host keys, not certificates), and so is a line no key can be read from, as OpenSSH does.
    """
    from paramiko import SSHException
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

    pinned, revoked = [], set()
    for number, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        line = text.strip()
        marker = ""
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
        if not line or line.startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(line.strip(), number)
        except (SSHException, InvalidHostKey, ValueError):
            continue
        if entry is None:
            continue
        if marker == "@revoked":
            revoked.add(entry.key.asbytes())
        elif not marker:
            pinned.append(entry)
    for entry in pinned:
        if entry.key.asbytes() not in revoked:
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)
    return frozenset(revoked)


def _unpinned_policy(endpoint: Endpoint, revoked: frozenset[bytes]) -> Any:
    """paramiko's answer to a key the known_hosts file does not pin for this host: always a refusal,
    before authentication, that says whether the file revokes the key."""
    import paramiko

    class RejectUnpinned(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            if key.asbytes() in revoked:
                raise HostKeyRejected(
                    f"refused {endpoint.label}: its host key {_fingerprint(key)} is marked @revoked in "
                    f"{endpoint.known_hosts_file}; refused before authentication, no command ran"
                )
            raise HostKeyRejected(
                f"refused {endpoint.label}: {endpoint.host_key_name} is not in {endpoint.known_hosts_file}; "
                "refused before authentication, no command ran; it is never auto-added"
            )

    return RejectUnpinned()


def transport_failure(endpoint: Endpoint, exc: BaseException, doing: str) -> TransportError:
    """The one-line error for a failed SSH step, keeping identity failures distinct."""
    import paramiko

    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostKeyRejected(
            f"refused {endpoint.label}: its host key CHANGED (offered {_fingerprint(exc.key)}, "
            f"pinned {_fingerprint(exc.expected_key)} in {endpoint.known_hosts_file}); refused before "
            "authentication, no command ran; verify the new key through the provider before replacing it"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        reason = "authentication failed"
    elif isinstance(exc, (socket.timeout, TimeoutError)):
        reason = "timed out"
    else:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return TransportError(f"transport failed while {doing} {endpoint.label} ({reason}); {UNKNOWN_STATE}")


class Remote:
    """One SSH session to a box: commands over fabric, small files over SFTP."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._connection: Any = None
        self._sftp: Any = None

    def __enter__(self) -> Remote:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def connect(self) -> None:
        import paramiko
        from fabric import Config, Connection

        endpoint = self.endpoint
        endpoint.check_known_hosts()
        connect_kwargs: dict[str, Any] = {"look_for_keys": False, "allow_agent": True}
        if endpoint.identity is not None:
            connect_kwargs["key_filename"] = str(endpoint.identity.expanduser())
        if endpoint.passphrase_env:
            if endpoint.passphrase_env not in os.environ:
                raise Refusal(
                    f"the key passphrase variable {endpoint.passphrase_env} is not set in this environment"
                )
            connect_kwargs["passphrase"] = os.environ[endpoint.passphrase_env]
        connection = Connection(
            endpoint.host,
            user=endpoint.login,
            port=endpoint.port,
            connect_timeout=int(endpoint.connect_timeout),
            connect_kwargs=connect_kwargs,
            config=Config(ssh_config=paramiko.SSHConfig()),
        )
        try:
            revoked = load_known_hosts(connection.client.get_host_keys(), endpoint.known_hosts_file)
            # fabric defaults to AutoAddPolicy; the harness never trusts a key it has not been given.
            connection.client.set_missing_host_key_policy(_unpinned_policy(endpoint, revoked))
            connection.open()
        except Exception as exc:  # paramiko raises many unrelated types for one failed connect
            connection.close()
            raise transport_failure(endpoint, exc, "connecting to") from None
        self._connection = connection

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    @property
    def connection(self) -> Any:
        if self._connection is None:
            self.connect()
        return self._connection

    def run(self, command: str, *, timeout: float | None = 120) -> Result:
        """Run a POSIX shell command on the box; a non-zero exit is a Result, a lost link an error."""
        wrapped = f"/bin/sh -c {shlex.quote(command)}"
        try:
            done = self.connection.run(
                wrapped, hide=True, warn=True, in_stream=False, pty=False, timeout=timeout
            )
        except TransportError:
            raise
        except Exception as exc:
            raise transport_failure(self.endpoint, exc, "running a command on") from None
        return Result(done.exited, done.stdout, done.stderr)

    def sftp(self) -> Any:
        if self._sftp is None:
            try:
                self._sftp = self.connection.sftp()
            except Exception as exc:
                raise transport_failure(self.endpoint, exc, "opening SFTP to") from None
        return self._sftp

    def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write ``path`` on the box atomically, with ``mode`` set before any byte is written."""
        temp = f"{path}.tmp"
        try:
            sftp = self.sftp()
            with sftp.open(temp, "wb") as handle:
                handle.chmod(mode)
                handle.write(data)
            sftp.posix_rename(temp, path)
        except TransportError:
            raise
        except Exception as exc:
            raise transport_failure(self.endpoint, exc, f"writing {path} on") from None

    def read_file(self, path: str, cap: int = JSON_CAP) -> bytes:
        """A regular file's bytes from the box, at most ``cap`` of them.

        The box's word is checked before reading: a symlink, FIFO or device there (which would make the
        read follow, block or never end) is refused, and so is a file larger than ``cap``.
        """
        try:
            sftp = self.sftp()
            info = sftp.lstat(path)
            if not stat.S_ISREG(info.st_mode or 0):
                raise Refusal(
                    f"{self.endpoint.label}:{path} is {kind_of(info.st_mode or 0)}; expected a regular file"
                )
            if (info.st_size or 0) > cap:
                raise Refusal(
                    f"{self.endpoint.label}:{path} holds {info.st_size} bytes, more than the {cap}-byte limit"
                )
            with sftp.open(path, "rb") as handle:
                data: bytes = handle.read(cap + 1)
        except (FileNotFoundError, Refusal):
            raise
        except Exception as exc:
            raise transport_failure(self.endpoint, exc, f"reading {path} from") from None
        if len(data) > cap:
            raise Refusal(f"{self.endpoint.label}:{path} grew past the {cap}-byte limit while it was read")
        return data
