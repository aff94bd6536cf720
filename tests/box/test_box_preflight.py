"""The box checked before anything is trained, over a real sshd: ``runaudit audit RUN -- -m preflight`` for a
run id that has no folder yet, probing ``--remote-root`` itself; the verdicts come home."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshbox import CHECKOUT, SshBox, start_sshbox
from starter_env import HOSTILE_PYTEST_ENV

from runaudit.cli import main

RUN = "not-started"


@pytest.fixture(scope="module")
def settled_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshBox]:
    """A box whose every SSH session carries pytest settings its owner keeps for their own test runs."""
    box = start_sshbox(tmp_path_factory.mktemp("settled-box"), environment=HOSTILE_PYTEST_ENV)
    try:
        yield box
    finally:
        box.stop()


def _preflight_on(box: SshBox, box_root: Path, box_state: Path, local: Path, capsys) -> dict:
    """``runaudit audit RUN -- -m preflight`` on ``box``; the report that came home."""
    local.mkdir()
    args = [*box.cli_args(box_root, box_state), "--workdir", str(CHECKOUT), "--root", str(local), RUN]
    budget = ["--runaudit-budget", "disk=1M", "files=100", "memory=64M", "workers=2"]
    code = main(["audit", *args, "--", "-m", "preflight", *budget])
    out = capsys.readouterr()
    assert code in (0, 1), out.out + out.err  # pytest's own status on the box: a report came home either way
    return json.loads((local / "reports" / f"{RUN}.json").read_text())


def test_a_fresh_box_is_checked_before_its_run_exists(
    sshbox: SshBox, box_root: Path, box_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found on a box: preflight refused a run id with no folder, though the natural order is check the box,
    then train; and durable_writable never probed --remote-root, where the run will write."""
    report = _preflight_on(sshbox, box_root, box_state, tmp_path / "local", capsys)
    found = {item["audit"]: item for item in report["verdicts"]}
    assert found["preflight.disk_bytes"]["verdict"] == "passed"
    durable = found["preflight.durable_writable"]
    assert durable["verdict"] == "passed" and durable["evidence"]["durable"] == [str(box_root)], durable
    assert {item["where"] for item in report["verdicts"]} == {sshbox.endpoint().label}
    assert not (box_root / "active").exists()  # checking the box started no run


def test_the_boxs_own_pytest_settings_never_reach_its_audit(
    settled_box: SshBox, box_root: Path, box_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A box's login environment with ``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` stopped the suite on the box
    before it audited anything; the audit on the box starts as a local runner's session does."""
    report = _preflight_on(settled_box, box_root, box_state, tmp_path / "local", capsys)
    found = {item["audit"]: item["verdict"] for item in report["verdicts"]}
    assert found.get("preflight.disk_bytes") == "passed", found
