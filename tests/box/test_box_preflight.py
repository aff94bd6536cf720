"""The box checked before anything is trained, over a real sshd: ``runaudit audit RUN -- -m preflight`` for a
run id that has no folder yet, probing ``--remote-root`` itself; the verdicts come home."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sshbox import CHECKOUT, SshBox

from runaudit.cli import main

RUN = "not-started"


def test_a_fresh_box_is_checked_before_its_run_exists(
    sshbox: SshBox, box_root: Path, box_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found on a box: preflight refused a run id with no folder, though the natural order is check the box,
    then train; and durable_writable never probed --remote-root, where the run will write."""
    local = tmp_path / "local"
    local.mkdir()
    args = [*sshbox.cli_args(box_root, box_state), "--workdir", str(CHECKOUT), "--root", str(local), RUN]
    budget = ["--runaudit-budget", "disk=1M", "files=100", "memory=64M", "workers=2"]
    code = main(["audit", *args, "--", "-m", "preflight", *budget])
    out = capsys.readouterr()
    assert code in (0, 1), out.out + out.err  # pytest's own status on the box: a report came home either way
    report = json.loads((local / "reports" / f"{RUN}.json").read_text())
    found = {item["audit"]: item for item in report["verdicts"]}
    assert found["preflight.disk_bytes"]["verdict"] == "passed"
    durable = found["preflight.durable_writable"]
    assert durable["verdict"] == "passed" and durable["evidence"]["durable"] == [str(box_root)], durable
    assert {item["where"] for item in report["verdicts"]} == {sshbox.endpoint().label}
    assert not (box_root / "active").exists()  # checking the box started no run
