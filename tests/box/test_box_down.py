"""``down`` looks at the box: a run on it that is neither proven home nor abandoned blocks the teardown.

One pull of the demo capsule (``p1``) is made from a real sshd and verified here, once for the module;
each test then gives ``down`` a fresh remote root holding that sealed capsule beside the runs it adds.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shlex
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sshbox import SshBox, start_sshbox
from test_box_follow import ALIVE
from test_box_identity import impostor_known_hosts
from test_box_pull import build_manifest_on_box

from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.manifest import RECEIPT
from runaudit.receipts import receipt_status
from runaudit.runners import down as down_module
from runaudit.runners.close import SEALED_ENTRIES
from runaudit.runners.down import this_boot_id
from runaudit.runners.launch import launch
from runaudit.workspace import LOCK_FILE, try_lock


@dataclass(frozen=True)
class Pulled:
    producer: Path  # the remote root the pull came from
    local: Path  # the local project root holding runs/<demo> and the receipt of pull p1


@pytest.fixture(scope="module")
def pulled(sshbox: SshBox, demo_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Pulled:
    """The demo capsule sealed on the box, pulled over SSH and verified locally (``PULL_VERIFIED.json``)."""
    base = tmp_path_factory.mktemp("down")
    producer, local = base / "producer", base / "local"
    shutil.copytree(demo_project / "export" / DEMO_RUN_ID, producer / "export" / DEMO_RUN_ID)
    for records in ("selections", "splits"):
        shutil.copytree(demo_project / "_trust" / records, producer / "_trust" / records)
    build_manifest_on_box(sshbox, producer, "p1")
    local.mkdir()
    assert main(["pull", *sshbox.cli_args(producer), "--root", str(local), "--pull-id", "p1"]) == 0
    assert (local / "_trust" / "pulls" / "p1" / RECEIPT).is_file()
    return Pulled(producer, local)


@pytest.fixture
def box(pulled: Pulled, tmp_path: Path) -> Path:
    """A fresh remote root: the sealed demo capsule, as the producer left it after the pull."""
    root = tmp_path / "box"
    shutil.copytree(pulled.producer / "export" / DEMO_RUN_ID, root / "export" / DEMO_RUN_ID)
    (root / "export" / ".close.lock").touch()  # close's lock file is not a run
    return root


def down(
    sshbox: SshBox,
    pulled: Pulled,
    root: Path,
    *extra: str,
    known_hosts: Path | None = None,
    state_dir: Path | None = None,
) -> int:
    return main(
        [
            "down",
            *sshbox.cli_args(root, state_dir, known_hosts=known_hosts),
            "--root",
            str(pulled.local),
            "--profile",
            "runpod",
            "--target",
            "pod-7",
            "--confirm",
            "pod-7",
            *extra,
        ]
    )


def approved_record(out: str) -> dict:
    """The teardown record whose path the approval printed."""
    line = next(line for line in out.splitlines() if "teardown record" in line)
    return json.loads(Path(line.rpartition(" ")[2]).read_text())


def refused(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert "teardown record" not in out and "approved" not in err
    assert err.startswith("runaudit down: error: down refused") and err.count("\n") == 1
    assert err.rstrip().endswith("nothing was stopped")
    return err


def test_a_live_unpulled_run_blocks_until_it_is_abandoned(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (box / "active" / "d4").mkdir(parents=True)
    (box / "active" / "d4" / "train.csv").write_text("epoch,loss\n0,1.0\n")
    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID) == 2
    err = refused(capsys)
    assert "d4 (active/, live, holding files close seals" in err and f"{DEMO_RUN_ID} (" not in err
    assert "no pull manifest names it" in err

    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID, "--abandon", "d4") == 0
    out, err = capsys.readouterr()
    assert "ABANDONED, lost with the box: d4" in err and "runpod defines no command for 'terminate'" in err
    record = approved_record(out)
    assert record["abandoned"] == ["d4"] and record["roster"] == [DEMO_RUN_ID]
    assert record["box"] == f"{sshbox.user}@127.0.0.1:{sshbox.port}" and record["remote_root"] == str(box)
    assert record["receipts"][DEMO_RUN_ID]["pull_id"] == "p1"
    assert [(item["area"], item["name"]) for item in record["inventory"]] == [
        ("active", "d4"),
        ("export", DEMO_RUN_ID),
    ]
    assert (box / "active" / "d4" / "train.csv").is_file()  # down only listed the box


def test_a_run_resumed_or_closed_again_after_its_pull_blocks_until_pulled_again(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The receipt is current, but the box now holds bytes of the run it never verified."""
    workspace = box / "active" / DEMO_RUN_ID
    workspace.mkdir(parents=True, exist_ok=True)
    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID) == 0  # closed: its workspace stays, approved
    capsys.readouterr()
    (workspace / "last.pth").write_bytes(b"resumed training")
    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID) == 2
    err = refused(capsys)
    assert (
        f"{DEMO_RUN_ID} (active/, live, holding files close seals that its sealed capsule does not hold"
        in err
    )
    (workspace / "last.pth").unlink()
    # New test results or tracker logs are bytes close seals too.
    (workspace / "test" / "main").mkdir(parents=True)
    (workspace / "test" / "main" / "metrics.json").write_text("{}")
    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID) == 2
    assert "holding files close seals" in refused(capsys)
    shutil.rmtree(workspace / "test")
    # Files older than the sealed capsule are the workspace's own, kept where export/ is on another
    # filesystem (close copies, and active/ keeps its files): not resumed.
    capsule = box / "export" / DEMO_RUN_ID
    for name in ("config.yaml", "train.csv", "best.pth"):
        shutil.copy2(capsule / name, workspace / name)
        os.utime(workspace / name, ns=(capsule.joinpath("run.json").stat().st_mtime_ns - 10**9,) * 2)
    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID) == 0
    capsys.readouterr()
    # Compared by bytes, not by clock: a checkpoint written under a clock set back, or restored with its old
    # times (cp -p, rsync -a), is still new bytes (approved before, when only times were compared).
    best = workspace / "best.pth"
    before = best.stat()
    best.write_bytes(best.read_bytes()[::-1])
    os.utime(best, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID) == 2
    assert "holding files close seals that its sealed capsule does not hold" in refused(capsys)
    for name in ("config.yaml", "train.csv", "best.pth"):
        (workspace / name).unlink()
    (box / "export" / ".partial" / DEMO_RUN_ID).mkdir(parents=True)
    assert down(sshbox, pulled, box) == 2
    assert "export/.partial/, closing, interrupted" in refused(capsys)


def test_the_box_must_still_hold_the_bytes_that_were_pulled_and_nothing_else(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The receipt covers the bytes pulled, not whatever the box now holds under the same name: a capsule
    edited on the box after the pull (or a run minted again under the same id), a hardware capsule named
    like a receipted run, and capsules in the box's runs/ were each approved before."""
    capsule = box / "export" / DEMO_RUN_ID
    best = capsule / "best.pth"
    original, before = best.read_bytes(), best.stat()
    best.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))  # same size, older time, other bytes
    os.utime(best, ns=(before.st_atime_ns, before.st_mtime_ns - 10**12))
    assert down(sshbox, pulled, box) == 2
    assert (
        f"the box's export/{DEMO_RUN_ID} is not the capsule pull p1 verified (best.pth differs)"
        in refused(capsys)
    )
    best.write_bytes(original)
    extra = capsule / "test" / "new_eval" / "preds.csv"
    extra.parent.mkdir(parents=True)
    extra.write_text("id,pred\n")
    assert down(sshbox, pulled, box) == 2
    assert "(test/new_eval/preds.csv is not in the pull)" in refused(capsys)
    shutil.rmtree(extra.parent)
    assert down(sshbox, pulled, box) == 0  # the pulled bytes again: approved
    capsys.readouterr()

    hardware = box / "export" / "hardware" / DEMO_RUN_ID
    hardware.mkdir(parents=True)
    (hardware / "run.json").write_text("{}")
    assert down(sshbox, pulled, box) == 2
    assert f"hardware/{DEMO_RUN_ID} (export/hardware/, sealed): a hardware capsule" in refused(capsys)
    assert down(sshbox, pulled, box, "--abandon", f"hardware/{DEMO_RUN_ID}") == 0
    capsys.readouterr()
    shutil.rmtree(hardware.parent)

    accepted = box / "runs" / "only-copy"
    accepted.mkdir(parents=True)
    (accepted / "run.json").write_text("{}")
    assert down(sshbox, pulled, box) == 2
    assert "only-copy (runs/, accepted): no pull manifest names it" in refused(capsys)


def test_a_remote_root_holding_none_of_the_projects_folders_is_refused_even_for_a_named_run(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder above the project holds no run, so every run named looked "not on the box": approved."""
    live = box / "active" / "unpulled-run"
    live.mkdir(parents=True)
    (live / "train.csv").write_text("epoch,step,train_loss\n")
    assert down(sshbox, pulled, box.parent, "--run", DEMO_RUN_ID) == 2
    assert "holds none of active/, export/" in refused(capsys)


def test_a_quarantined_attempt_blocks_until_it_is_abandoned_by_its_own_name(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failed close of the demo itself was approved on the demo's receipt: its bytes were never pulled."""
    name = f"{DEMO_RUN_ID}--20260101T000000Z-abc123"
    attempt = box / "quarantine" / name
    attempt.mkdir(parents=True)
    (attempt / "QUARANTINE_REASON.txt").write_text(f"close {DEMO_RUN_ID} refused\n")
    assert down(sshbox, pulled, box) == 2  # no --run: the roster is what the box holds
    err = refused(capsys)
    assert f"quarantine/{name} (quarantine/, quarantined): a close of run {DEMO_RUN_ID} that failed" in err

    assert down(sshbox, pulled, box, "--abandon", DEMO_RUN_ID) == 2  # that is the run, not the attempt
    capsys.readouterr()
    assert down(sshbox, pulled, box, "--abandon", f"quarantine/{name}") == 0
    record = approved_record(capsys.readouterr().out)
    assert record["abandoned"] == [f"quarantine/{name}"] and record["named"] == []
    assert record["receipts"][DEMO_RUN_ID]["pull_id"] == "p1"
    assert ("quarantine", f"quarantine/{name}", "quarantined") in [
        (item["area"], item["run"], item["state"]) for item in record["inventory"]
    ]
    assert (attempt / "QUARANTINE_REASON.txt").is_file()  # down only listed the box


def test_a_run_still_training_blocks_while_its_writer_holds_the_lock(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The workspace holds the bytes that were pulled (a close across filesystems leaves that copy), and a
    trainer holds its lock: down approved, and the teardown killed the training it did not see."""
    workspace = box / "active" / DEMO_RUN_ID
    for name in SEALED_ENTRIES:
        sealed = box / "export" / DEMO_RUN_ID / name
        if sealed.is_dir():
            shutil.copytree(sealed, workspace / name)
        elif sealed.is_file():
            workspace.mkdir(parents=True, exist_ok=True)
            shutil.copy2(sealed, workspace / name)
    lock = try_lock(workspace)  # what runaudit.writer.RunWriter holds while the run trains
    assert lock is not None
    try:
        assert down(sshbox, pulled, box) == 2
        err = refused(capsys)
        assert f"{DEMO_RUN_ID} (active/, live; export/, sealed): a writer holds active/{DEMO_RUN_ID}" in err
    finally:
        lock.close()
    assert down(sshbox, pulled, box) == 0  # the trainer is gone: its folder is the sealed copy, approved
    record = approved_record(capsys.readouterr().out)
    assert [item["writer"] for item in record["inventory"]] == [None, None]

    (workspace / LOCK_FILE).unlink()
    os.mkfifo(workspace / LOCK_FILE)  # not a lock any writer could hold, and nothing to open blocking
    assert down(sshbox, pulled, box) == 2
    assert f"its active/{DEMO_RUN_ID}/{LOCK_FILE} is not a plain file the box could probe" in refused(capsys)


def test_a_pull_never_overwrites_the_copy_another_pull_brought_home(
    sshbox: SshBox, pulled: Pulled, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Box A's run was pulled, verified and its box torn down; box B held another run sealed under the same
    id. ``pull p2`` from box B wrote over ``runs/demo``: the only copy of box A's run was gone. The local
    project here is a copy (new stat keys, as after a restore), so the bytes themselves must tell."""
    local = tmp_path / "local"
    shutil.copytree(pulled.local, local, symlinks=True)
    other = tmp_path / "box-b"
    shutil.copytree(pulled.producer / "export", other / "export")
    for records in ("selections", "splits"):
        shutil.copytree(pulled.producer / "_trust" / records, other / "_trust" / records)
    png = sorted((other / "export" / DEMO_RUN_ID / "test").rglob("*.png"))[0]
    png.write_bytes(png.read_bytes()[:-1] + bytes([png.read_bytes()[-1] ^ 1]))  # another run's render
    build_manifest_on_box(sshbox, other, "p2")
    capsys.readouterr()
    mine = local / "runs" / png.relative_to(other / "export")
    before = mine.read_bytes()

    assert main(["pull", *sshbox.cli_args(other), "--root", str(local), "--pull-id", "p2"]) == 2
    err = capsys.readouterr().err
    assert f"runs/{png.relative_to(other / 'export')} and 0 more file(s) hold the bytes pull p1" in err
    assert "nothing was fetched" in err and err.count("\n") == 1
    assert mine.read_bytes() == before
    assert not (local / "_trust" / "pulls" / "p2").exists()  # p1's manifest still governs the run
    assert receipt_status(local, [DEMO_RUN_ID]).ok


def test_a_launched_job_or_a_queue_runner_still_running_blocks(
    sshbox: SshBox,
    pulled: Pulled,
    box: Path,
    box_state: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A job ``runaudit launch`` started (a queue, or a resumed run loading its data) had not yet opened
    ``active/<id>/.writer.lock``: ``watch`` said "running", and down approved the teardown that killed it."""
    stop = box / "stop-the-job"
    script = f"{ALIVE}while [ ! -e {shlex.quote(str(stop))} ]; do sleep 0.1; done"
    launched = launch(sshbox.box(box, box_state), DEMO_RUN_ID, ["bash", "-c", script], alive_timeout_s=30)
    assert launched.state == "running"
    assert down(sshbox, pulled, box, state_dir=box_state) == 2
    err = refused(capsys)
    assert (
        f"{DEMO_RUN_ID} (active/, live; export/, sealed; a launched job, running): a job runaudit launch"
        in err
    )
    assert "(its wrapper is alive)" in err
    stop.touch()
    assert _wait_for(Path(launched.attempt_dir) / "exit_code") == "0"
    assert down(sshbox, pulled, box, state_dir=box_state) == 0  # ended: its folder holds nothing new
    capsys.readouterr()

    # Launched through another spelling of the root (a link to it): the job's state sits under another key,
    # and down, looking under its own, approved. The whole box goes down, so every root's jobs count.
    spelled = tmp_path / "box-link"
    spelled.symlink_to(box)
    stop.unlink()
    other = launch(sshbox.box(spelled, box_state), "r2", ["bash", "-c", script], alive_timeout_s=30)
    key = Path(other.attempt_dir).parent.parent.name
    try:
        assert other.state == "running"
        assert down(sshbox, pulled, box, state_dir=box_state) == 2
        err = refused(capsys)
        assert f"job/{key}/r2 (a launched job of another project root, running)" in err, err
        abandon = (f"--abandon=job/{key}/r2", "--abandon=r2")  # its heartbeat made active/r2 too
        assert down(sshbox, pulled, box, *abandon, state_dir=box_state) == 0
        capsys.readouterr()
    finally:
        stop.touch()
    _wait_for(Path(other.attempt_dir) / "exit_code")
    shutil.rmtree(box / "active" / "r2")

    (box / "queues").mkdir()
    with (box / "queues" / ".q1.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what runaudit queue run holds while it works
        assert down(sshbox, pulled, box, state_dir=box_state) == 2
        assert "queue/q1 (a queue runner, running): the runner of queue q1 holds queues/.q1.lock" in refused(
            capsys
        )
        assert down(sshbox, pulled, box, "--abandon", "queue/q1", state_dir=box_state) == 0
        record = approved_record(capsys.readouterr().out)
        assert record["abandoned"] == ["queue/q1"]
    assert down(sshbox, pulled, box, state_dir=box_state) == 0  # the runner let go of its lock
    capsys.readouterr()
    os.mkfifo(box / "queues" / ".q2.lock")
    assert down(sshbox, pulled, box, state_dir=box_state) == 2
    assert "queues/.q2.lock is not a plain file the box could probe" in refused(capsys)


def test_a_box_that_is_this_machine_takes_the_copy_home_with_it(
    sshbox: SshBox, pulled: Pulled, box: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user in a terminal on the box (VS Code Remote, Jupyter) pulled into a folder of the box's own disk
    and verified it there: down approved, and the teardown took the only copy. A box that is not told to
    name another boot id says its kernel's, which is this machine's."""
    (tmp_path / "sshd").mkdir()
    itself = start_sshbox(tmp_path / "sshd")
    try:
        assert down(itself, pulled, box) == 2
    finally:
        itself.stop()
    err = refused(capsys)
    assert f"is this machine (its kernel's boot id is this one's, {this_boot_id()})" in err, err
    assert this_boot_id()
    assert down(sshbox, pulled, box) == 0  # the rig's box, naming a boot id of its own


def _an_address_of_this_machine() -> str:
    """An IPv4 address of this machine other than loopback, from the kernel's routing table."""
    lines = Path("/proc/net/fib_trie").read_text().splitlines()
    local = {lines[at - 1].split()[-1] for at, line in enumerate(lines) if "/32 host LOCAL" in line}
    return min(address for address in local if not ipaddress.ip_address(address).is_loopback)


def test_a_copy_on_the_box_s_own_export_mounted_under_another_of_its_names_goes_with_it(
    sshbox: SshBox,
    pulled: Pulled,
    box: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SSH reaches a box at one address (a provider's public address or proxy), NFS mounts its export at
    another (its private or tailnet address, its host name): down compared the mount's server with the SSH
    host alone and approved, and the teardown took the only copy. The box's listing now gives the names and
    addresses it has; the rig's box is this machine, reached at 127.0.0.1 and mounted here at its other
    address. (The kernel's mount table is the boundary: the test gives it the line such a mount adds.)"""
    from runaudit import mounts

    table = tmp_path / "mountinfo"
    real = mounts.MOUNTINFO.read_text()
    point = str((pulled.local / "runs").resolve()).replace(" ", "\\040")
    monkeypatch.setattr(mounts, "MOUNTINFO", table)
    address = _an_address_of_this_machine()
    table.write_text(real + f"900 1 0:99 / {point} rw - nfs4 {address}:/srv/project/export rw\n")
    assert down(sshbox, pulled, box) == 2
    assert f"mount of {address}:/srv/project/export: the box's own storage" in refused(capsys)
    table.write_text(real + f"900 1 0:99 / {point} rw - nfs4 filer.invalid:/projects rw\n")
    assert down(sshbox, pulled, box) == 0  # a file server's storage is a copy


def test_a_job_launched_while_the_receipts_are_checked_blocks(
    sshbox: SshBox,
    pulled: Pulled,
    box: Path,
    box_state: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """down listed the box once, then checked the receipts here (a copy whose stat keys changed is hashed
    again: minutes for tens of GiB), and approved a teardown that killed a job launched meanwhile."""
    stop = box / "stop-the-job"
    script = f"{ALIVE}while [ ! -e {shlex.quote(str(stop))} ]; do sleep 0.1; done"
    launched = []

    def check_while_a_job_starts(*args: Any, **kwargs: Any) -> Any:
        if not launched:
            launched.append(
                launch(sshbox.box(box, box_state), "r2", ["bash", "-c", script], alive_timeout_s=30)
            )
        return receipt_status(*args, **kwargs)

    monkeypatch.setattr(down_module, "receipt_status", check_while_a_job_starts)
    try:
        assert down(sshbox, pulled, box, state_dir=box_state) == 2
        out, err = capsys.readouterr()
        err = err.splitlines()[-1]  # after the plan's lines: the refusal comes once the receipts are checked
        assert "teardown record" not in out and err.startswith("runaudit down: error: down refused")
        assert launched and launched[0].state == "running"
        assert f"changed under {box} while the receipts were checked" in err, err
        assert "now a launched job" in err
    finally:
        stop.touch()
    _wait_for(Path(launched[0].attempt_dir) / "exit_code")


def test_another_project_root_that_still_holds_runs_blocks(
    sshbox: SshBox,
    pulled: Pulled,
    box: Path,
    box_state: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A second project on the box trained a run with ``runaudit launch`` and sealed it: down, looking only
    under the first root, approved a teardown that took the other project's only copy."""
    other = tmp_path / "other-project"
    other.mkdir()
    ended = launch(sshbox.box(other, box_state), "b1", ["bash", "-c", f"{ALIVE}exit 0"], alive_timeout_s=30)
    assert _wait_for(Path(ended.attempt_dir) / "exit_code") == "0"
    (other / "export" / "b1").mkdir(parents=True)
    (other / "export" / "b1" / "best.pth").write_bytes(b"the other project's only copy")
    key = Path(ended.attempt_dir).parent.parent.name
    assert down(sshbox, pulled, box, state_dir=box_state) == 2
    err = refused(capsys)
    assert (
        f"root/{key} (another project root on the box): runaudit launched runs on this box in another" in err
    )
    assert f"{other}, which still holds active/, export/" in err
    # A record past 1 MiB (a command line of shard paths) or cut short (a full disk) was skipped unread,
    # and down approved: it blocks as what it may name, abandoned by its key.
    record = Path(ended.attempt_dir) / "launch.json"
    written = json.loads(record.read_text())
    for spoiled in (
        json.dumps({**written, "command": [f"/data/shard-{index:07d}.tar" for index in range(60_000)]}),
        record.read_text()[: len(record.read_text()) // 2],
    ):
        record.write_text(spoiled)
        assert down(sshbox, pulled, box, state_dir=box_state) == 2
        assert f"root/{key}" in refused(capsys)
    record.write_text(json.dumps(written))
    assert down(sshbox, pulled, box, f"--abandon=root/{key}", state_dir=box_state) == 0
    capsys.readouterr()
    # Holding no runs, it no longer blocks (a root spelled through a link is the remote root itself: the
    # launched-job test's records under another key never block once their job ended).
    shutil.rmtree(other / "active")
    shutil.rmtree(other / "export")
    assert down(sshbox, pulled, box, state_dir=box_state) == 0


def _wait_for(exit_code: Path) -> str:
    """The exit code a launched job's wrapper records, once it has (30 s at most)."""
    deadline = time.monotonic() + 30
    while not exit_code.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return exit_code.read_text().strip()


def test_a_live_run_on_a_data_disk_is_hashed_and_probed_through_its_link(
    sshbox: SshBox, pulled: Pulled, box: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``active/<id>`` as a link to the data disk, a common layout on rented boxes: training resumed there
    and a trainer held its lock, and down approved, hashing and probing nothing behind the link."""
    data_disk = tmp_path / "datadisk" / DEMO_RUN_ID
    data_disk.mkdir(parents=True)
    (box / "active").mkdir()
    (box / "active" / DEMO_RUN_ID).symlink_to(data_disk)
    (data_disk / "last.pth").write_bytes(b"resumed training")
    assert down(sshbox, pulled, box) == 2
    assert f"{DEMO_RUN_ID} (active/, live, holding files close seals" in refused(capsys)
    (data_disk / "last.pth").unlink()
    lock = try_lock(data_disk)
    assert lock is not None
    try:
        assert down(sshbox, pulled, box) == 2
        assert f"a writer holds active/{DEMO_RUN_ID}/{LOCK_FILE}" in refused(capsys)
    finally:
        lock.close()
    # Anything else in a live run's place holds bytes no receipt covers.
    (box / "active" / DEMO_RUN_ID).unlink()
    (box / "active" / DEMO_RUN_ID).write_bytes(b"not a folder")
    assert down(sshbox, pulled, box) == 2
    assert f"active/{DEMO_RUN_ID} is a file, not a run's folder" in refused(capsys)


def test_a_python_that_does_not_hash_is_no_listing(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--python /bin/true`` (a broken shim: exit 0, nothing printed) hashed nothing, and the box then
    looked like one whose live run held nothing new: approved, with training resumed there."""
    (box / "active" / DEMO_RUN_ID).mkdir(parents=True)
    (box / "active" / DEMO_RUN_ID / "last.pth").write_bytes(b"resumed training")
    shutil.rmtree(box / "export" / DEMO_RUN_ID)
    assert down(sshbox, pulled, box) == 2  # the control, with the box's real Python
    capsys.readouterr()
    assert down(sshbox, pulled, box, "--python", shutil.which("true") or "/bin/true") == 2
    assert "did not run the hasher to its end" in refused(capsys)


def test_a_box_that_cannot_be_listed_is_never_approved(
    sshbox: SshBox, pulled: Pulled, box: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logins, teardowns = sshbox.accepted_logins(), pulled.local / "_trust" / "teardowns"
    approved_before = sorted(teardowns.glob("*.json"))
    assert down(sshbox, pulled, box, known_hosts=impostor_known_hosts(sshbox, tmp_path)) == 2
    err = refused(capsys)
    assert "cannot inventory the box" in err and "host key CHANGED" in err
    assert sshbox.accepted_logins() == logins

    args = sshbox.cli_args(box)
    args[args.index("--port") + 1] = str(unused_port())
    argv = ["down", *args, "--root", str(pulled.local), "--profile", "runpod", "--target", "pod-7"]
    assert main([*argv, "--confirm", "pod-7"]) == 2
    assert "cannot inventory the box" in refused(capsys)

    shutil.rmtree(box)  # a remote root that is not there proves nothing either
    assert down(sshbox, pulled, box, "--run", DEMO_RUN_ID) == 2
    assert f"{box} does not exist on" in refused(capsys)
    box.mkdir()
    assert down(sshbox, pulled, box) == 2
    assert "holds none of active/, export/" in (err := refused(capsys)) and "check --remote-root" in err
    (box / "active").mkdir()
    assert down(sshbox, pulled, box) == 2
    assert "holds no run under" in (err := refused(capsys)) and "check --remote-root" in err
    assert sorted(teardowns.glob("*.json")) == approved_before


def test_an_unsafe_name_on_the_box_is_escaped_and_needs_its_exact_abandon(
    sshbox: SshBox, pulled: Pulled, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (box / "active" / "..x").mkdir(parents=True)
    (box / "export" / "run 2").mkdir()
    (box / "quarantine").mkdir()
    (box / "quarantine" / "two\nlines").write_text("not even a folder")
    assert down(sshbox, pulled, box) == 2
    err = refused(capsys)
    assert "'..x' (active/, live): not a safe run id" in err
    assert (
        "'run 2' (export/, sealed)" in err
        and "'quarantine/two\\nlines' (quarantine/, quarantined, file)" in err
    )

    assert down(sshbox, pulled, box, "--abandon", "..x", "--abandon", "run 2") == 2
    err = refused(capsys)
    assert "'quarantine/two\\nlines'" in err and "'..x' (" not in err and "'run 2' (" not in err
    exact = ("--abandon", "..x", "--abandon", "run 2")
    assert down(sshbox, pulled, box, "--abandon", "quarantine/two lines", *exact) == 2
    assert "--abandon 'quarantine/two lines' names nothing" in refused(capsys)

    assert down(sshbox, pulled, box, "--abandon", "quarantine/two\nlines", *exact) == 0
    record = approved_record(capsys.readouterr().out)
    assert record["abandoned"] == ["'quarantine/two\\nlines'", "'..x'", "'run 2'"]
    assert record["roster"] == [DEMO_RUN_ID]


def unused_port() -> int:
    """A port nothing listens on (bound, read and released: connecting to it is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
