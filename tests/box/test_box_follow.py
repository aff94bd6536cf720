"""``runaudit watch --follow`` over a real sshd: one line per change, the end classified from the box's own
records, and on a finish the seed's chain (close, manifest) and the user's notification hook."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
from sshbox import CHECKOUT, SshBox

from runaudit.cli import main
from runaudit.examples.digits.build import produce
from runaudit.examples.digits.train import DEFAULT_CONFIG
from runaudit.manifest import MANIFEST
from runaudit.runners.launch import launch
from runaudit.runners.ssh import Remote

ALIVE = 'A="$RUNAUDIT_ROOT/active/$RUNAUDIT_RUN_ID"; mkdir -p "$A" && touch "$A/.heartbeat"; '
FAST = ["--interval", "0.5", "--max-wait", "60"]


def follow(sshbox: SshBox, box_root: Path, box_state: Path, run_id: str, *extra: str) -> int:
    return main(["watch", *sshbox.cli_args(box_root, box_state), "--follow", *FAST, *extra, run_id])


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (
            "echo 'OSError: [Errno 28] No space left on device: best.pth' >&2; exit 1",
            [
                "the job exited with code 1",
                "the log reports 'No space left on device';",
                "GiB free there now",
            ],
        ),
        ("sleep 1; kill -TERM $$", ["the job was killed by SIGTERM (exit code 143)"]),
    ],
    ids=["disk-full", "signal"],
)
def test_a_death_is_classified_from_the_boxs_records(
    sshbox: SshBox,
    box_root: Path,
    box_state: Path,
    capsys: pytest.CaptureFixture[str],
    script: str,
    expected: list[str],
) -> None:
    launch(sshbox.box(box_root, box_state), "dies", ["bash", "-c", ALIVE + script], alive_timeout_s=10)
    capsys.readouterr()
    assert follow(sshbox, box_root, box_state, "dies") == 1
    out = capsys.readouterr().out
    (last,) = [line for line in out.splitlines() if ": dead — " in line]
    assert all(part in last for part in expected), last


def test_a_reboot_and_a_stall_end_the_watch_with_their_reason(
    sshbox: SshBox, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = sshbox.box(box_root, box_state)
    launch(box, "quiet", ["bash", "-c", ALIVE + "exec sleep 60"], alive_timeout_s=10)
    capsys.readouterr()
    assert follow(sshbox, box_root, box_state, "quiet", "--stall-after", "2") == 1
    out = capsys.readouterr().out
    assert "quiet on" in out and ": running — " in out and ": stalled — " in out, out

    # A reboot: the process and its wrapper are gone without an exit code, and the boot id changed.
    state = Path(box.run_state("quiet"))
    attempt = state / (state / "current").read_text().strip()
    (attempt / "boot_id").write_text(f"{uuid.uuid4()}\n")
    wrapper = (attempt / "pid").read_text().split()[0]
    with Remote(sshbox.endpoint()) as remote:
        assert remote.run(f"kill -KILL {wrapper} $(pgrep -P {wrapper})").ok  # together: no exit code written
    assert follow(sshbox, box_root, box_state, "quiet") == 1
    (last,) = [line for line in capsys.readouterr().out.splitlines() if ": dead — " in line]
    assert "no exit code recorded" in last and "the box rebooted since launch" in last, last


def test_a_finish_chains_close_and_manifest_then_notifies(
    sshbox: SshBox, box_root: Path, box_state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's train → close → manifest, from one watch, and a local hook told the outcome."""
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"]["epochs"] = 2
    produce(box_root, "trained", config, log=lambda line: None)  # what the launched trainer left behind
    launch(sshbox.box(box_root, box_state), "trained", ["bash", "-c", ALIVE + "exit 0"], alive_timeout_s=10)
    told = tmp_path / "told.txt"
    hook = f'printf "%s|%s|%s" "$RUNAUDIT_RUN_ID" "$RUNAUDIT_STATE" "$RUNAUDIT_REASON" > {told}'
    capsys.readouterr()
    code = follow(
        sshbox,
        box_root,
        box_state,
        "trained",
        "--then",
        "close,manifest",
        "--pull-id",
        "p1",
        "--workdir",
        str(CHECKOUT),
        "--on-exit",
        hook,
    )
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert (box_root / "export" / "trained" / "run.json").is_file()
    manifest = json.loads((box_root / "_trust" / "pulls" / "p1" / MANIFEST).read_text())
    assert manifest["roster"] == ["trained"]
    assert "then close on" in err and "then manifest on" in err
    assert "the box has idled" in out and "next: runaudit close" in out
    run_id, state, reason = told.read_text().split("|")
    assert (run_id, state) == ("trained", "finished") and "exit code 0" in reason


def test_then_needs_follow_and_manifest_needs_close(
    sshbox: SshBox, box_root: Path, box_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = sshbox.cli_args(box_root, box_state)
    assert main(["watch", *args, "--then", "close", "r1"]) == 2
    with pytest.raises(SystemExit) as refused:  # argparse's own usage error for a bad value
        main(["watch", *args, "--follow", "--then", "manifest", "r1"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "go with --follow" in err and "--then close,manifest" in err
