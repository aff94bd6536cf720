"""Host identity and transport failures against a real sshd: refuse impostors, never call a run dead."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sshbox import SshBox, start_sshbox

from runaudit.cli import main
from runaudit.runners.launch import launch
from runaudit.runners.ssh import HostKeyRejected, Remote, TransportError
from runaudit.runners.transfer import remote_path, rsync
from runaudit.runners.watch import watch


def impostor_known_hosts(sshbox: SshBox, tmp_path: Path) -> Path:
    """A known_hosts file pinning another key for the same [127.0.0.1]:port: the box "changed"."""
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, body = other.with_suffix(".pub").read_text().split()[:2]
    pinned = tmp_path / "known_hosts.changed"
    pinned.write_text(f"[127.0.0.1]:{sshbox.port} {key_type} {body}\n")
    return pinned


def test_the_pinned_key_connects(sshbox: SshBox) -> None:
    with Remote(sshbox.endpoint()) as remote:
        assert remote.run("echo reachable").stdout == "reachable\n"


def test_a_changed_host_key_is_refused_before_any_command_runs(sshbox: SshBox, tmp_path: Path) -> None:
    pinned = impostor_known_hosts(sshbox, tmp_path)
    marker = tmp_path / "a-command-ran"
    logins = sshbox.accepted_logins()
    refused = r"host key CHANGED .* refused before authentication, no command ran"
    with pytest.raises(HostKeyRejected, match=refused), Remote(sshbox.endpoint(pinned)) as remote:
        remote.run(f"touch {marker}")
    assert not marker.exists()
    assert sshbox.accepted_logins() == logins  # the box never even saw our key
    assert pinned.read_text().count("\n") == 1  # nothing was added or replaced
    with pytest.raises(HostKeyRejected, match="no data was moved"):  # rsync over OpenSSH: the same pin
        rsync(
            sshbox.endpoint(pinned),
            remote_path(sshbox.endpoint(pinned), f"{tmp_path}/"),
            f"{tmp_path / 'copy'}/",
        )
    assert not (tmp_path / "copy").exists()


def test_known_hosts_markers_are_read_as_openssh_reads_them(sshbox: SshBox, tmp_path: Path) -> None:
    """paramiko reads no marker line: one ``@cert-authority`` or ``@revoked`` line in known_hosts made every
    verb refuse with ``Incorrect padding``. A CA line is passed over; a revoked key is refused, before
    authentication, whatever other line pins it."""
    pinned = sshbox.known_hosts.read_text()
    key_type, body = pinned.split()[1:3]
    with_ca = tmp_path / "known_hosts.ca"
    with_ca.write_text(f"@cert-authority *.example.org {key_type} {body}\n{pinned}")
    with Remote(sshbox.endpoint(with_ca)) as remote:
        assert remote.run("echo reachable").stdout == "reachable\n"
    revoked = tmp_path / "known_hosts.revoked"
    revoked.write_text(f"{pinned}@revoked * {key_type} {body}\n")
    logins = sshbox.accepted_logins()
    with pytest.raises(HostKeyRejected, match=r"is marked @revoked in .*refused before authentication"):
        Remote(sshbox.endpoint(revoked)).connect()
    assert sshbox.accepted_logins() == logins  # the box never saw our key


def test_an_unknown_host_or_a_missing_known_hosts_file_is_refused(sshbox: SshBox, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts.empty"
    empty.write_text("")
    with pytest.raises(HostKeyRejected, match=r"is not in .*never auto-added"):
        Remote(sshbox.endpoint(empty)).connect()
    assert empty.read_text() == ""
    with pytest.raises(HostKeyRejected, match="does not exist"):
        Remote(sshbox.endpoint(tmp_path / "nowhere")).connect()


def test_watch_through_a_refused_identity_is_unknown(
    sshbox: SshBox, tmp_path: Path, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = sshbox.cli_args(box_root, box_state, known_hosts=impostor_known_hosts(sshbox, tmp_path))
    assert main(["watch", *args, "r1"]) == 3
    err = capsys.readouterr().err
    assert ": unknown — refused" in err and "dead" not in err


def test_with_sshd_stopped_watch_says_unknown_never_dead(
    tmp_path: Path, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private = start_sshbox(_fresh(tmp_path / "sshd"))
    try:
        box = private.box(box_root, box_state)
        alive = 'A="$RUNAUDIT_ROOT/active/$RUNAUDIT_RUN_ID"; mkdir -p "$A" && touch "$A/.heartbeat"; exec sleep 40'
        started = launch(box, "r1", ["bash", "-c", alive], alive_timeout_s=30)
        assert started.state == "running", started.reason
        private.stop()
        status = watch(box, "r1")
        assert status.state == "unknown"
        assert (
            "transport failed" in status.reason and "the run's state is unknown, not failed" in status.reason
        )
        assert main(["watch", *private.cli_args(box_root, box_state), "r1"]) == 3
        assert "dead" not in capsys.readouterr().err
        with pytest.raises(TransportError):
            launch(box, "r1", ["true"])  # nothing is started blind either
        private.start()
        assert watch(box, "r1").state == "running"  # it was alive all along
    finally:
        private.stop()


def _fresh(folder: Path) -> Path:
    folder.mkdir(parents=True)
    return folder
