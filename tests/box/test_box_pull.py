"""Custody over the wire: manifest on the box, a pull killed mid-transfer and resumed, then the receipt;
a byte tampered on the box after its manifest is refused; ``down`` refuses until everything holds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sshbox import CHECKOUT, SshBox

from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.manifest import MANIFEST, RECEIPT
from runaudit.runners.ssh import Remote


def children_named(pid: int, name: str) -> list[int]:
    """Descendants of ``pid`` whose command name is ``name``, read from /proc."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                head, _, rest = (entry / "stat").read_text().rpartition(")")
            except OSError:
                continue
            names[int(entry.name)] = head.partition("(")[2]
            parents[int(entry.name)] = int(rest.split()[1])
    found, frontier = [], {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found += [child for child in frontier if names.get(child) == name]
    return found


def build_manifest_on_box(sshbox: SshBox, box_root: Path, pull_id: str) -> dict:
    """``runaudit manifest --host``: found on a box, the user had to hand-write the pinned ssh command."""
    roster = box_root.parent / f"roster-{pull_id}.txt"  # a local file: the roster travels as run ids
    roster.write_text(f"# the runs to bring home\n{DEMO_RUN_ID}\n")
    args = [
        *sshbox.cli_args(box_root),
        "--workdir",
        str(CHECKOUT),
        "--roster",
        str(roster),
        "--pull-id",
        pull_id,
    ]
    assert main(["manifest", *args]) == 0
    return json.loads((box_root / "_trust" / "pulls" / pull_id / MANIFEST).read_text())


def test_pull_resumes_after_rsync_dies_then_the_receipt_and_down_gate(
    sshbox: SshBox, box_root: Path, demo_project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The producer's project on the box: the sealed capsule and the _trust records it binds.
    shutil.copytree(demo_project / "export" / DEMO_RUN_ID, box_root / "export" / DEMO_RUN_ID)
    for records in ("selections", "splits"):
        shutil.copytree(demo_project / "_trust" / records, box_root / "_trust" / records)
    manifest = build_manifest_on_box(sshbox, box_root, "p1")
    local = tmp_path / "local"
    local.mkdir()
    args = sshbox.cli_args(box_root)
    first = next(entry for entry in manifest["files"] if entry["path"].endswith("best.pth"))

    # A throttled pull, in its own process; rsync is killed once the first file has landed.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")])),
    }
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runaudit",
            "pull",
            *args,
            "--root",
            str(local),
            "--pull-id",
            "p1",
            "--bwlimit",
            "100",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as pulling:
        landed = local / "runs" / first["path"]
        deadline = time.monotonic() + 120
        while not (landed.is_file() and landed.stat().st_size == first["bytes"]):
            assert time.monotonic() < deadline and pulling.poll() is None, "the first file never landed"
            time.sleep(0.05)
        rsyncs = children_named(pulling.pid, "rsync")
        assert rsyncs, "no rsync under the pull"
        os.kill(rsyncs[0], signal.SIGTERM)
        out, err = pulling.communicate(timeout=60)
    assert pulling.returncode == 2, (out, err)
    assert "transfer failed: rsync exit 20" in err and "the same command resumes" in err
    receipt = local / "_trust" / "pulls" / "p1" / RECEIPT
    assert not receipt.exists()
    incomplete = [
        entry["path"]
        for entry in manifest["files"]
        if not (local / "runs" / entry["path"]).is_file()
        or (local / "runs" / entry["path"]).stat().st_size != entry["bytes"]
    ]
    assert incomplete and first["path"] not in incomplete

    # The identical command resumes: only what is missing or short is fetched, then verified.
    assert main(["pull", *args, "--root", str(local), "--pull-id", "p1"]) == 0
    out, err = capsys.readouterr()
    total = len(manifest["files"])
    assert f"fetching {len(incomplete)} of {total} files" in err
    assert receipt.is_file() and json.loads(receipt.read_text())["roster"] == [DEMO_RUN_ID]
    assert "receipt written" in out

    # Nothing to fetch on a rerun; a damaged local copy is fetched again, alone.
    assert main(["pull", *args, "--root", str(local), "--pull-id", "p1"]) == 0
    assert "every file already matches the manifest" in capsys.readouterr().err
    damaged = local / "runs" / first["path"]
    damaged.write_bytes(damaged.read_bytes()[:-1] + bytes([damaged.read_bytes()[-1] ^ 1]))
    assert main(["pull", *args, "--root", str(local), "--pull-id", "p1"]) == 0
    assert f"fetching 1 of {total} files" in capsys.readouterr().err

    # down: the receipt holds, but nothing happens without --confirm naming the target.
    down = [
        "down",
        *args,
        "--root",
        str(local),
        "--run",
        DEMO_RUN_ID,
        "--profile",
        "runpod",
        "--target",
        "pod-7",
    ]
    assert main(down) == 2
    err = capsys.readouterr().err
    assert "meter stop: terminate" in err and "deletes container, volume; IRREVERSIBLE" in err
    assert "re-run with --confirm pod-7" in err
    assert main([*down, "--confirm", "pod-8"]) == 2
    assert "does not name the target" in capsys.readouterr().err
    assert main([*down, "--confirm", "pod-7"]) == 0
    assert "runpod defines no command for 'terminate'" in capsys.readouterr().err

    # One byte changed on the box after its manifest: the pull lands it, and the receipt is refused.
    build_manifest_on_box(sshbox, box_root, "p2")
    with Remote(sshbox.endpoint()) as remote:
        flipped = remote.run(
            f"printf '\\377' | dd of={box_root}/export/{DEMO_RUN_ID}/best.pth bs=1 seek=200 conv=notrunc status=none"
        )
    assert flipped.ok, flipped.tail()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert main(["pull", *args, "--root", str(fresh), "--pull-id", "p2"]) == 1
    err = capsys.readouterr().err
    assert "NO receipt" in err and "best.pth" in err
    assert not (fresh / "_trust" / "pulls" / "p2" / RECEIPT).exists()
    assert (
        main(
            [
                "down",
                *args,
                "--root",
                str(fresh),
                "--run",
                DEMO_RUN_ID,
                "--profile",
                "runpod",
                "--target",
                "pod-7",
                "--confirm",
                "pod-7",
            ]
        )
        == 2
    )
    assert "no current receipt" in capsys.readouterr().err
