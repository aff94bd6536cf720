"""A real box for the runner tests: OpenSSH's sshd on 127.0.0.1 with throwaway keys.

``start_sshbox`` runs ``/usr/sbin/sshd -D`` at a free port with a fresh host key and user key
(authorized for the current user) and writes a known_hosts file pinning that host key. It skips with a
reason when sshd, ssh, rsync or tmux is missing (CI installs them, so nothing skips there).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from runaudit.runners.box import Box
from runaudit.runners.ssh import Endpoint

SSHD = "/usr/sbin/sshd"
TOOLS = ("ssh", "ssh-keygen", "rsync", "tmux", "setsid", "nohup")
CHECKOUT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "runaudit-test", "-f", str(path)], check=True
    )


def _wait_for_banner(port: int, deadline_s: float = 15.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                if conn.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"sshd did not answer on 127.0.0.1:{port} within {deadline_s} s")


@dataclass
class SshBox:
    """The running sshd, its keys, and helpers to address it as runaudit users do."""

    home: Path
    port: int
    host_key: Path
    user_key: Path
    known_hosts: Path
    log: Path
    config: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def user(self) -> str:
        return getpass.getuser()

    def endpoint(self, known_hosts: Path | None = None) -> Endpoint:
        return Endpoint(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            identity=self.user_key,
            known_hosts=known_hosts or self.known_hosts,
            connect_timeout=5,
        )

    def box(self, root: Path, state_dir: Path) -> Box:
        return Box(self.endpoint(), PurePosixPath(root), str(state_dir), sys.executable)

    def cli_args(
        self, root: Path | None = None, state_dir: Path | None = None, known_hosts: Path | None = None
    ) -> list[str]:
        """The box options a user passes to every remote verb (they go before the verb's RUN_ID)."""
        args = [
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--user",
            self.user,
            "--identity",
            str(self.user_key),
            "--known-hosts",
            str(known_hosts or self.known_hosts),
            "--connect-timeout",
            "5",
        ]
        if root is not None:
            args += ["--remote-root", str(root), "--python", sys.executable]
        if state_dir is not None:
            args += ["--state-dir", str(state_dir)]
        return args

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        _wait_for_banner(self.port)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)
        self.process = None

    def accepted_logins(self) -> int:
        return self.log.read_text(errors="replace").count("Accepted publickey")


def start_sshbox(home: Path, environment: Mapping[str, str] | None = None) -> SshBox:
    """A new sshd with fresh keys in ``home``, started and answering; every session it starts has
    ``environment`` set (``SetEnv``), as a box's login files would set it."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not Path(SSHD).is_file():
        missing.insert(0, SSHD)
    if missing:
        pytest.skip(
            f"the SSH runner tests need {', '.join(missing)} (Debian: openssh-server openssh-client rsync tmux)"
        )
    if os.geteuid() == 0:
        # sshd running as root insists on its privilege-separation directory (Debian's unit creates it).
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    box = SshBox(
        home=home,
        port=_free_port(),
        host_key=home / "host_ed25519",
        user_key=home / "user_ed25519",
        known_hosts=home / "known_hosts",
        log=home / "sshd.log",
        config=home / "sshd_config",
    )
    _keygen(box.host_key)
    _keygen(box.user_key)
    (home / "authorized_keys").write_text((home / "user_ed25519.pub").read_text())
    settings = {
        "Port": box.port,
        "ListenAddress": "127.0.0.1",
        "HostKey": box.host_key,
        "PidFile": home / "sshd.pid",
        "AuthorizedKeysFile": home / "authorized_keys",
        "AllowUsers": box.user,
        "StrictModes": "no",
        "UsePAM": "no",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "PubkeyAuthentication": "yes",
        "PermitRootLogin": "prohibit-password",
        "Subsystem": "sftp internal-sftp",
        "LogLevel": "INFO",
    }
    if environment:
        settings["SetEnv"] = " ".join(f'{name}="{value}"' for name, value in environment.items())
    # A path in double quotes: sshd reads a space as the end of an argument (a TMPDIR with a space in it).
    box.config.write_text(
        "".join(
            f'{key} "{value}"\n' if isinstance(value, Path) else f"{key} {value}\n"
            for key, value in settings.items()
        )
    )
    key_type, key_body = box.host_key.with_suffix(".pub").read_text().split()[:2]
    box.known_hosts.write_text(f"[127.0.0.1]:{box.port} {key_type} {key_body}\n")
    box.start()
    return box
