"""The preflight gate run as users run it: against this machine's real disks, cgroups and tools."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from runaudit.platforms import builtin_dir

RUN = "r1"
FULL_BUDGET = ("--runaudit-budget", "disk=1M", "files=100", "memory=64M", "workers=2")  # as README shows it


@pytest.fixture
def live_project(tmp_path: Path) -> Path:
    """A project whose run is live in active/ and has no capsule yet: preflight runs before training."""
    root = tmp_path / "project"
    (root / "active" / RUN).mkdir(parents=True)
    return root


def profile_file(tmp_path: Path, *, verified: str | None = None, name: str = "custom.toml") -> Path:
    text = (builtin_dir() / "runpod.toml").read_text(encoding="utf-8")
    if verified is not None:
        text = text.replace('verified = "2026-06"', f'verified = "{verified}"').replace(
            'verified = "2026-04"', f'verified = "{verified}"'
        )
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def with_profile(run_audits, root: Path, tmp_path: Path, *overrides: str, budget: tuple[str, ...] = ()):
    """The preflight gate under a copy of a built-in profile, with ``--override NAME=VALUE`` for each."""
    given = [arg for override in overrides for arg in ("--override", override)]
    given += ["--runaudit-budget", *budget] if budget else []
    return run_audits(RUN, root, "-m", "preflight", "--runaudit-profile", str(profile_file(tmp_path)), *given)


def verdicts(outcome) -> dict[str, str]:
    return {item["audit"]: item["verdict"] for item in outcome.report["verdicts"]}


def test_a_roomy_machine_passes_the_budgeted_checks(run_audits, live_project: Path) -> None:
    outcome = run_audits(RUN, live_project, "-m", "preflight", *FULL_BUDGET)
    found = verdicts(outcome)
    assert set(found) == {
        f"preflight.{name}"
        for name in (
            "disk_bytes",
            "disk_inodes",
            "memory_limit",
            "shm",
            "gpu_health",
            "env_hygiene",
            "durable_writable",
            "detach_available",
            "profile_stamps",
            "checkpoint_cadence",
        )
    }
    for name in (
        "disk_bytes",
        "disk_inodes",
        "memory_limit",
        "shm",
        "env_hygiene",
        "durable_writable",
        "detach_available",
    ):
        assert found[f"preflight.{name}"] == "passed", outcome.find(f"preflight.{name}")
    if shutil.which("nvidia-smi") is None:
        assert found["preflight.gpu_health"] == "not_applicable"
    assert found["preflight.profile_stamps"] == "not_run"  # no --runaudit-profile: nothing to date
    assert found["preflight.checkpoint_cadence"] == "not_run"  # no save measured, no save= budget
    assert not list((live_project).glob(".runaudit-probe-*"))  # the writable probe cleaned up after itself
    assert outcome.result.ret == 0


def test_without_a_budget_the_checks_say_not_run_and_name_the_key(run_audits, live_project: Path) -> None:
    outcome = run_audits(RUN, live_project, "-m", "preflight")
    messages = {
        item["audit"]: item["message"] for item in outcome.report["verdicts"] if item["verdict"] == "not_run"
    }
    assert {
        "preflight.disk_bytes",
        "preflight.disk_inodes",
        "preflight.memory_limit",
        "preflight.shm",
    } <= set(messages)
    assert "--runaudit-budget disk=" in messages["preflight.disk_bytes"]
    assert "--runaudit-budget workers=" in messages["preflight.shm"]


def test_a_budget_this_machine_cannot_hold_fails_each_check(run_audits, live_project: Path) -> None:
    outcome = run_audits(
        RUN,
        live_project,
        "-m",
        "preflight",
        "--budget",
        "disk=4000T",
        "--budget",
        "files=999999999999",
        "--budget",
        "memory=900T",
        "--budget",
        "workers=8",
        "--budget",
        "shm=900T",
        "--budget",
        "gpus=1",
    )
    failed = outcome.verdicts("failed")
    assert {
        "preflight.disk_bytes",
        "preflight.disk_inodes",
        "preflight.memory_limit",
        "preflight.shm",
    } <= failed
    if shutil.which("nvidia-smi") is None:
        assert "preflight.gpu_health" in failed  # a run that expects a GPU on a machine without one
    message = outcome.find("preflight.disk_bytes")[0]["message"]
    assert message.startswith(f"run {RUN}: ") and "GiB free, the run needs 4096000.0 GiB" in message
    assert outcome.result.ret == 1


def test_the_profile_places_the_durable_folder_and_an_empty_override_removes_it(
    run_audits, live_project: Path, tmp_path: Path
) -> None:
    profile = profile_file(tmp_path)
    missing = tmp_path / "no-such-mount"
    outcome = run_audits(
        RUN,
        live_project,
        "-m",
        "preflight",
        "--runaudit-profile",
        str(profile),
        "--override",
        f"DATA_DIR={tmp_path}",
        "--override",
        f"DURABLE_DIR={missing}",
        *FULL_BUDGET,
    )
    item = outcome.find("preflight.durable_writable")[0]
    assert item["verdict"] == "failed" and f"{missing} does not exist" in item["message"]
    outcome = run_audits(
        RUN, live_project, "-m", "preflight", "--runaudit-profile", str(profile), "--override", "DURABLE_DIR="
    )
    item = outcome.find("preflight.durable_writable")[0]
    # No durable folder on the box, but the project root still receives active/ and export/.
    assert item["verdict"] == "passed" and item["evidence"]["durable"] == [str(live_project)], item


def test_the_project_root_is_probed_besides_the_profiles_durable_folder(
    run_audits, live_project: Path, tmp_path: Path
) -> None:
    """Found on a box: durable_writable probed the profile's DURABLE_DIR and never --remote-root, where the
    run writes active/ and export/."""
    durable = tmp_path / "durable"
    durable.mkdir()
    outcome = with_profile(run_audits, live_project, tmp_path, f"DURABLE_DIR={durable}")
    item = outcome.find("preflight.durable_writable")[0]
    assert item["verdict"] == "passed" and item["evidence"]["durable"] == [str(live_project), str(durable)], (
        item
    )


def test_a_box_is_checked_before_its_run_folder_exists(run_audits, tmp_path: Path) -> None:
    """Found on a box: the natural order is check the box, then train, but --run refused an id with no folder."""
    root = tmp_path / "fresh-box"
    root.mkdir()
    outcome = run_audits("not-started", root, "-m", "preflight", *FULL_BUDGET)
    found = verdicts(outcome)
    assert found["preflight.disk_bytes"] == "passed" and found["preflight.durable_writable"] == "passed"
    assert not (root / "active").exists()  # checking the box creates no run folder
    # Any session that reads the run itself still refuses an id found nowhere, in one line naming the way.
    other = run_audits("not-started", root, "-m", "preflight or custody")
    assert other.result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [line for line in other.result.stderr.lines if "no run found" in line]
    assert "-m preflight" in line


def test_stale_governing_facts_fail_and_fresh_ones_pass(
    run_audits, live_project: Path, tmp_path: Path, facts_judged_on_a_fixed_date: dt.date
) -> None:
    stale = run_audits(
        RUN,
        live_project,
        "-m",
        "preflight",
        "--runaudit-profile",
        str(profile_file(tmp_path, verified="2001-01")),
    )
    item = stale.find("preflight.profile_stamps")[0]
    assert item["verdict"] == "failed"
    assert "runpod.teardown.terminate_deletes_volume (2001-01)" in item["message"]
    assert "runpod.other.no_spot_account_gate" not in item["message"]  # not a teardown fact
    this_month = f"{facts_judged_on_a_fixed_date:%Y-%m}"
    fresh = run_audits(
        RUN,
        live_project,
        "-m",
        "preflight",
        "--runaudit-profile",
        str(profile_file(tmp_path, verified=this_month, name="fresh.toml")),
    )
    assert fresh.find("preflight.profile_stamps")[0]["verdict"] == "passed"


def test_the_profile_interpreter_and_detach_primitive_are_checked(
    run_audits, live_project: Path, tmp_path: Path
) -> None:
    outcome = with_profile(run_audits, live_project, tmp_path, "PY=/opt/nowhere/python")
    item = outcome.find("preflight.env_hygiene")[0]
    assert (
        item["verdict"] == "failed" and "the profile's interpreter is /opt/nowhere/python" in item["message"]
    )
    if shutil.which("sbatch") is None:
        slurm = run_audits(RUN, live_project, "-m", "preflight", "--runaudit-profile", "generic-ssh:slurm")
        item = slurm.find("preflight.detach_available")[0]
        assert item["verdict"] == "failed" and "sbatch, which is not installed" in item["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--budget", "disk=lots"), "--budget disk=lots: 'lots' is not a size"),
        (("--budget", "ram=1G"), "--budget ram: unknown"),
        (("--budget", "disk=1M", "elsewhere/"), "--budget 'elsewhere/': expected KEY=VALUE"),
        (("--runaudit-profile", "hetzner"), "profile 'hetzner': no such profile"),
        (("--override", "DATA_DIR=/x"), "--override needs --runaudit-profile"),
    ],
)
def test_bad_preflight_options_are_one_usage_line(
    run_audits, live_project: Path, args: tuple[str, ...], message: str
) -> None:
    outcome = run_audits(RUN, live_project, "-m", "preflight", *args)
    assert outcome.result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in outcome.result.stderr.str()


@pytest.mark.parametrize(
    ("budget", "verdict", "said"),
    [
        (("mtbf=3h", "save=30s", "every=15m"), "passed", "within 2× of Young/Daly's 805 s"),
        (("mtbf=3h", "save=30s", "every=4h"), "disclosed", "Young/Daly gives 805 s"),
        (("mtbf=3h", "save=30s"), "passed", "checkpoint about every 805 s"),
        (("save=30s",), "not_run", "mtbf=DURATION"),
    ],
    ids=["near-optimum", "far-off", "advice", "no-mtbf"],
)
def test_the_cadence_is_weighed_against_young_daly(
    run_audits, live_project: Path, budget: tuple[str, ...], verdict: str, said: str
) -> None:
    outcome = run_audits(RUN, live_project, "-m", "preflight", "--runaudit-budget", *budget)
    item = outcome.find("preflight.checkpoint_cadence")[0]
    assert item["verdict"] == verdict and said in item["message"], item


def test_a_save_longer_than_the_spot_grace_is_disclosed(
    run_audits, live_project: Path, tmp_path: Path
) -> None:
    """RunPod's profile gives a 5 s grace between SIGTERM and SIGKILL; a 30 s save cannot fit in it."""
    outcome = with_profile(run_audits, live_project, tmp_path, budget=("save=30s",))
    item = outcome.find("preflight.checkpoint_cadence")[0]
    assert item["verdict"] == "disclosed" and "spot grace is 5 s" in item["message"], item


def test_the_writers_own_saves_are_measured_while_the_run_trains(run_audits, tmp_path: Path) -> None:
    """A live run written by the writer: C and the interval come from its recorded saves, not from a budget.
    Saves milliseconds apart are far more often than Young/Daly asks for an interruption every 3 h."""
    import numpy as np
    import torch

    from runaudit.writer import Dataset, Metric, Split, open_run

    root = tmp_path / "project"
    run = open_run(
        root,
        "live-run",
        task="classification",
        config={"lr": 0.1},
        metrics=[Metric("accuracy")],
        data=Dataset.of("toy", "1", np.arange(10)),
        split=Split("toy-split", "random", 6, 2, 2),
        seed=0,
        epochs=3,
        batch_size=2,
    )
    model = torch.nn.Linear(3, 2)
    for epoch in (1, 2, 3):
        run.log(epoch=epoch, step=3 * epoch, train_loss=1.0 / epoch, val_accuracy=0.5)
        run.checkpoint(model, epoch=epoch, step=3 * epoch, value=0.5)
    run.release()  # still live in active/: preflight runs while it trains
    outcome = run_audits("live-run", root, "-m", "preflight", "--runaudit-budget", "mtbf=3h")
    item = outcome.find("preflight.checkpoint_cadence")[0]
    assert item["verdict"] == "disclosed" and "Young/Daly gives" in item["message"], item
    assert item["evidence"]["saves_measured"] == 3 and item["evidence"]["every_s"] is not None


def test_a_read_only_project_root_fails_durable_writable_in_one_line(
    run_audits, pytester: pytest.Pytester, live_project: Path
) -> None:
    """On a read-only mount the probe is never created, and removing it raised EROFS out of the audit: an
    ``error`` with a traceback where the verdict is a plain failure. (Root writes through permission bits,
    so the mount is played by a plugin that refuses writes under the project root as the kernel does.)"""
    pytester.makepyfile(
        read_only=f"""
        import errno
        import os
        import pathlib

        ROOT = {str(live_project)!r}
        real_open, real_unlink = os.open, pathlib.Path.unlink

        def refused(path):
            return OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

        def opening(path, flags, *rest, **named):
            if str(path).startswith(ROOT) and flags & os.O_CREAT:
                raise refused(path)
            return real_open(path, flags, *rest, **named)

        def unlinking(self, missing_ok=False):
            if str(self).startswith(ROOT):
                raise refused(self)
            return real_unlink(self, missing_ok=missing_ok)

        def pytest_configure(config):
            os.open, pathlib.Path.unlink = opening, unlinking

        def pytest_unconfigure(config):
            os.open, pathlib.Path.unlink = real_open, real_unlink
        """
    )
    pytester.syspathinsert()
    outcome = run_audits(RUN, live_project, "-m", "preflight", "-k", "durable_writable", "-p", "read_only")
    [item] = outcome.find("preflight.durable_writable")
    assert item["verdict"] == "failed", item
    assert "cannot create and write a file (Read-only file system)" in item["message"]
