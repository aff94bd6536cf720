"""history.tracker_agrees: the TensorBoard logs and W&B offline runs a capsule seals, read with the trackers' own
reader and protobuf, against train.csv, config.yaml and the declared metric directions. The logs are written
by the demo's real training loop (``--tensorboard --wandb``); the divergent one is what a shared log
directory produces: an earlier run's events sealed beside the run's own."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from science_support import train_demo_seeds

from runaudit.cli import main
from runaudit.history import parse_history
from runaudit.trackers import TrackerRun, config_findings, scalar_findings

AuditRun = Any  # conftest.AuditRun
RUNS = ("tb-1", "tb-2")
AUDIT = "history.tracker_agrees"


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 2-epoch demo runs that log to TensorBoard; tb-2's log folder also holds tb-1's events (the
    logdir both were pointed at), as if left by an earlier run. Both sealed with runaudit close."""
    root = tmp_path_factory.mktemp("trackers")
    train_demo_seeds(root, RUNS, "--tensorboard", "--wandb")
    logs = root / "active" / "{}" / "trackers" / "tensorboard"
    shutil.copytree(
        Path(str(logs).format("tb-1")) / "digits", Path(str(logs).format("tb-2")) / "digits-earlier"
    )
    for run_id in RUNS:
        assert main(["close", "--root", str(root), run_id]) == 0
    return root


def _verdicts(run_audits: Callable[..., AuditRun], root: Path, run_id: str) -> dict[str, dict[str, Any]]:
    outcome = run_audits(run_id, root, "-k", "tracker_agrees or closed_world")
    assert outcome.report is not None, outcome.result.stdout.str()
    return {
        f"{item['audit']}[{item['subject']}]" if item["subject"] else item["audit"]: item
        for item in outcome.report["verdicts"]
    }


def test_a_run_whose_tensorboard_log_is_its_own_agrees_and_is_sealed(
    run_audits: Callable[..., AuditRun], tracked: Path
) -> None:
    verdicts = _verdicts(run_audits, tracked, "tb-1")
    assert verdicts["capsule.closed_world"]["verdict"] == "passed"  # trackers/ is in the capsule grammar
    columns = {"train_loss", "lr", "grad_norm", "val_accuracy", "val_cross_entropy"}
    own = verdicts[f"{AUDIT}[trackers/tensorboard/digits]"]
    assert own["verdict"] == "passed" and set(own["evidence"]["columns"]) == columns
    (wandb,) = [
        item for key, item in verdicts.items() if key.startswith(f"{AUDIT}[trackers/wandb/offline-run-")
    ]
    assert wandb["verdict"] == "passed" and set(wandb["evidence"]["columns"]) == columns


def test_a_log_of_another_run_beside_the_runs_own_is_disclosed(
    run_audits: Callable[..., AuditRun], tracked: Path
) -> None:
    verdicts = _verdicts(run_audits, tracked, "tb-2")
    earlier = verdicts[f"{AUDIT}[trackers/tensorboard/digits-earlier]"]
    assert earlier["verdict"] == "disclosed"
    assert "points differ" in earlier["message"] and "two tracker runs for one capsule" in earlier["message"]
    assert (
        "hyperparameter seed = 1" in earlier["message"] and "config.yaml train.seed = 2" in earlier["message"]
    )
    assert "run:training" in earlier["affects"]
    own = verdicts[f"{AUDIT}[trackers/tensorboard/digits]"]
    assert own["verdict"] == "disclosed" and "points differ" not in own["message"]
    assert "digits-earlier both log" in own["message"]


def test_a_capsule_without_tracker_logs_says_so(
    run_audits: Callable[..., AuditRun], demo_project: Path
) -> None:
    outcome = run_audits("demo", demo_project, "-k", "tracker_agrees")
    assert outcome.report is not None
    (verdict,) = [item for item in outcome.report["verdicts"] if item["audit"] == AUDIT]
    assert verdict["verdict"] == "not_applicable" and "trackers/tensorboard" in verdict["message"]


HISTORY = parse_history(
    ["epoch", "step", "train_loss", "val_accuracy"],
    [["1", "10", "2.0", "0.5"], ["2", "20", "1.0", "0.7"], ["3", "30", "0.5", "0.8"]],
)


def test_an_early_stop_extra_points_and_an_orphan_are_each_one_line() -> None:
    stopped = TrackerRun(
        "tb/a", (), {"train/loss": {10: 2.0, 20: 1.0}, "val_accuracy": {1: 0.5, 2: 0.7, 3: 0.8, 4: 0.9}}
    )
    findings, columns = scalar_findings(stopped, HISTORY)
    assert columns == ["train_loss", "val_accuracy"]
    assert any(
        "train/loss" in line and "stops before train.csv" in line and "step 30 with 0.5" in line
        for line in findings
    )
    assert any("val_accuracy" in line and "by epoch" in line and "no row for: 4" in line for line in findings)
    assert not any("points differ" in line for line in findings)
    orphan = TrackerRun("tb/b", (), {"reward": {1: 3.0}})
    assert scalar_findings(orphan, HISTORY) == ([], [])


def test_float32_rounding_agrees_and_a_changed_value_does_not() -> None:
    rounded = TrackerRun("tb/a", (), {"train_loss": {10: 2.0000001, 20: 1.0, 30: 0.5}})
    assert scalar_findings(rounded, HISTORY)[0] == []
    changed = TrackerRun("tb/a", (), {"train_loss": {10: 2.0, 20: 1.01, 30: 0.5}})
    (line,) = scalar_findings(changed, HISTORY)[0]
    assert "1 of 3 points differ" in line and "step 20: tracker 1.01, train.csv 1" in line


def test_hyperparameters_are_held_against_config_yaml() -> None:
    config = {"train": {"lr": 0.003, "epochs": 24, "schedule": "cosine"}, "model": {"hidden": 64}}
    run = TrackerRun("tb/a", (), {}, {"lr": 0.003, "train.epochs": 10.0, "schedule": "Cosine", "unknown": 1})
    (line,) = config_findings(run, config)
    assert "hyperparameter train.epochs = 10.0 in the tracker, config.yaml train.epochs = 24" in line


WANDB_SCRIPT = """
import sys, wandb
chart = wandb.init(project="t", dir=sys.argv[1], mode="offline", config={"lr": 0.003},
                   settings=wandb.Settings(silent=True, console="off"))
chart.define_metric("val_accuracy", summary=sys.argv[2])
for step, value in ((10, 0.5), (20, 0.7)):
    chart.log({"val_accuracy": value}, step=step)
chart.finish()
"""


def _wandb_log(folder: Path, summary: str) -> Path:
    """A real W&B offline run (wandb.init, mode offline) logging two epochs of val_accuracy, in a process
    of its own: the log is complete once that process has ended."""
    subprocess.run([sys.executable, "-c", WANDB_SCRIPT, str(folder), summary], check=True, timeout=300)
    (log,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    return log


def test_a_wandb_summary_kept_in_the_wrong_direction_is_named(tmp_path: Path) -> None:
    from runaudit.trackers import direction_findings, read_run

    log = _wandb_log(tmp_path, "min")
    run = read_run(tmp_path, f"trackers/wandb/{log.parent.name}", [log.relative_to(tmp_path).as_posix()])
    assert run.scalars["val_accuracy"] == {10: 0.5, 20: 0.7} and run.hparams == {"lr": 0.003}
    (line,) = direction_findings(run, {"accuracy": "higher"})
    assert "val_accuracy is summarised by its minimum, but accuracy is declared higher" in line
    assert direction_findings(run, {"accuracy": "lower"}) == []


def test_a_damaged_wandb_record_is_refused_not_parsed(tmp_path: Path) -> None:
    from runaudit.trackers import TrackerUnreadable, wandb_records

    data = bytearray(_wandb_log(tmp_path, "max").read_bytes())
    assert len(list(wandb_records(bytes(data), "run-x.wandb"))) > 3
    data[40] ^= 0xFF
    with pytest.raises(TrackerUnreadable, match="damaged record"):
        list(wandb_records(bytes(data), "run-x.wandb"))
    with pytest.raises(TrackerUnreadable, match="header"):
        list(wandb_records(b"PK\x03\x04" + bytes(data[4:]), "run-x.wandb"))


def test_a_scalar_declaring_a_huge_shape_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    """A 172-byte event whose scalar declared a 20000 × 20000 tensor around one value made the reader fill
    3.4 GB before it refused it (TensorBoard repeats a lone value out to the shape)."""
    import resource

    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from runaudit.trackers import TrackerUnreadable, read_run

    folder = tmp_path / "trackers" / "tensorboard" / "digits"
    writer = EventFileWriter(str(folder))
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=20_000)] * 2
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_DOUBLE, tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims), double_val=[0.5]
    )
    scalars = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    value = summary_pb2.Summary.Value(
        tag="train_loss", tensor=tensor, metadata=summary_pb2.SummaryMetadata(plugin_data=scalars)
    )
    writer.add_event(event_pb2.Event(wall_time=1.0, step=1, summary=summary_pb2.Summary(value=[value])))
    writer.close()
    [log] = folder.glob("events.out.tfevents.*")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TrackerUnreadable, match="declares the shape 20000 × 20000, not one value"):
        read_run(tmp_path, "trackers/tensorboard/digits", [log.relative_to(tmp_path).as_posix()])
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 << 10  # KiB: far below 3.2 GB
