"""history.tracker_agrees: the TensorBoard logs and W&B offline runs a capsule seals, read with the trackers' own
reader and protobuf, against train.csv, config.yaml and the declared metric directions. The logs are written
by the demo's real training loop (``--tensorboard --wandb``); the divergent one is what a shared log
directory produces: an earlier run's events sealed beside the run's own."""

from __future__ import annotations

import itertools
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from cpu_time import least_cpu_seconds
from science_support import train_demo_seeds

from runaudit.cli import main
from runaudit.history import parse_history
from runaudit.trackers import (
    FIRST,
    FULL,
    LAST,
    MIDDLE,
    ReadBudget,
    TrackerRun,
    config_findings,
    scalar_findings,
)

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


def test_a_wandb_log_cut_by_a_killed_writer_is_compared_up_to_the_cut(
    run_audits: Callable[..., AuditRun], tracked: Path, tmp_path: Path
) -> None:
    """The real W&B log of a run whose writer died while it wrote its last record: compared, and passed,
    with the cut said; before, the whole log was refused and every tracker case only disclosed that."""
    capsule = tmp_path / "tb-1"
    shutil.copytree(tracked / "export" / "tb-1", capsule)
    (log,) = capsule.glob("trackers/wandb/offline-run-*/run-*.wandb")
    log.chmod(0o644)
    data = log.read_bytes()
    log.write_bytes(data[:-3])  # the end of its last record (the run's exit, after every history row)
    verdicts = _verdicts(run_audits, tracked, str(capsule))
    (wandb,) = [
        item for key, item in verdicts.items() if key.startswith(f"{AUDIT}[trackers/wandb/offline-run-")
    ]
    assert wandb["verdict"] == "passed", wandb
    assert "ends in a record cut short at byte" in wandb["message"] and log.name in wandb["message"]


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
if len(sys.argv) > 3:
    chart.log({}, commit=True)  # the last row's own summary update comes before the value set by hand
    chart.summary["val_accuracy"] = float(sys.argv[3])
chart.finish()
"""


def _wandb_log(folder: Path, summary: str, *shown: str) -> Path:
    """A real W&B offline run (wandb.init, mode offline) logging two epochs of val_accuracy, in a process
    of its own: the log is complete once that process has ended. ``shown``: a summary value set by hand."""
    subprocess.run(
        [sys.executable, "-c", WANDB_SCRIPT, str(folder), summary, *shown], check=True, timeout=300
    )
    (log,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    return log


def test_a_wandb_summary_shows_only_what_train_csv_gives(tmp_path: Path) -> None:
    """The runs table shows a run by its summary: 0.95 set there by hand, after a run whose val_accuracy
    reached 0.7, passed unread."""
    from runaudit.trackers import read_run, summary_findings

    history = parse_history(["epoch", "step", "val_accuracy"], [["1", "10", "0.5"], ["2", "20", "0.7"]])
    for folder, shown in (("kept", ()), ("set", ("0.95",))):
        log = _wandb_log(tmp_path / folder, "max", *shown)
        run = read_run(
            tmp_path / folder,
            f"trackers/wandb/{log.parent.name}",
            [log.relative_to(tmp_path / folder).as_posix()],
        )
        if not shown:  # define_metric(summary="max") keeps {"max": 0.7}: what train.csv gives
            assert run.summary == {"val_accuracy.max": 0.7} and summary_findings(run, history) == []
            lower = parse_history(["epoch", "step", "val_accuracy"], [["1", "10", "0.5"], ["2", "20", "0.6"]])
            (line,) = summary_findings(run, lower)
            assert "shows val_accuracy.max = 0.7, which train.csv's val_accuracy never gives" in line
        else:
            assert run.summary == {"val_accuracy": 0.95}
            (line,) = summary_findings(run, history)
            assert "shows val_accuracy = 0.95" in line and "last 0.7" in line, line


def test_a_merged_session_without_a_run_record_is_said() -> None:
    """A log whose run record was removed (another project's run under the same id) merged unseen: only
    logs whose records name different runs were said."""
    from runaudit.trackers import identity_findings

    files = ("trackers/wandb/offline-run-1-x/run-x.wandb", "trackers/wandb/offline-run-2-x/run-x.wandb")
    run = TrackerRun("trackers/wandb/offline-run-1-x", files, identities={files[1]: "/digits/x"})
    (line,) = identity_findings(run)
    assert f"{files[0]} holds no run record" in line
    assert identity_findings(TrackerRun("trackers/wandb/offline-run-1-x", files[:1])) == []


def test_a_resumed_session_s_summary_of_its_own_rows_is_no_finding() -> None:
    """A session resumed under the run's id summarises its own points only: ``val_loss.min`` 0.35 over
    epochs 4-5 was said to be a value train.csv "never gives" (its least is 0.3, at epoch 2). A NaN last
    loss and its NaN summary agree."""
    from runaudit.trackers import summary_findings

    rows = [["1", "10", "0.5", "1.0"], ["2", "20", "0.3", "0.8"], ["3", "30", "0.4", "0.7"]]
    rows += [["4", "40", "0.35", "0.6"], ["5", "50", "0.36", "nan"]]
    history = parse_history(["epoch", "step", "val_loss", "train_loss"], rows)
    resumed = {"val_loss.min": 0.35, "val_loss.mean": (0.35 + 0.36) / 2, "train_loss": math.nan}
    run = TrackerRun("trackers/wandb/offline-run-x", (), summary=resumed)
    assert summary_findings(run, history) == []
    run = TrackerRun("trackers/wandb/offline-run-x", (), summary={"val_loss.min": 0.32, "train_loss": 0.55})
    found = summary_findings(run, history)
    assert [line.split(" = ")[0].rsplit(" ", 1)[-1] for line in found] == ["train_loss", "val_loss.min"], (
        found
    )


RESUMED_SCRIPT = """
import sys, wandb
chart = wandb.init(project=sys.argv[2], dir=sys.argv[1], mode="offline", id="resumed1", resume="allow",
                   config={"lr": float(sys.argv[3])}, settings=wandb.Settings(silent=True, console="off"))
for point in sys.argv[4:]:
    step, value = point.split("=")
    chart.log({"val_accuracy": float(value)}, step=int(step))
chart.finish()
"""


def test_a_wandb_run_resumed_under_its_id_is_one_run_of_its_sessions(tmp_path: Path) -> None:
    """A run resumed with ``wandb.init(id=..., resume="allow")`` logs each session to an offline folder of its
    own: two folders of one W&B run were two tracker runs, disclosed as "two tracker runs for one capsule".
    One run now, its sessions read in order; a step the second logs again with another value is said, and
    so is a hyperparameter the second session replaced (it held the first session's value too)."""
    from runaudit.trackers import config_findings, identity_findings, read_run, tracker_folders

    def session(project: str, lr: str, *points: str) -> None:
        subprocess.run(
            [sys.executable, "-c", RESUMED_SCRIPT, str(tmp_path / "trackers"), project, lr, *points],
            check=True,
            timeout=300,
        )
        time.sleep(1.1)  # the folder's name holds the session's start to the second

    session("t", "0.1", "10=0.5", "20=0.6")
    session("t", "0.01", "20=0.65", "30=0.7")  # resumed after its checkpoint at step 10
    ((name, files),) = tracker_folders(tmp_path).items()
    assert len(files) == 2 and [Path(rel).name for rel in files] == ["run-resumed1.wandb"] * 2
    assert name == Path(files[0]).parent.as_posix()  # the first session's folder names the run
    run = read_run(tmp_path, name, files)
    assert run.scalars == {"val_accuracy": {10: 0.5, 20: 0.65, 30: 0.7}}
    assert run.rewritten["val_accuracy"].first == [(20, 0.6, 0.65)]
    (line,) = config_findings(run, {"lr": 0.01})
    assert "hyperparameter lr = 0.1 in the tracker, config.yaml lr = 0.01 (until a later record" in line
    assert identity_findings(run) == []

    # W&B ids are unique per project only: another project's run of the same id, in a folder that sorts
    # first, is one of the run's sessions by its name, and said to be another run by its run record.
    session("other", "0.01", "10=0.9")
    *_, other = sorted((tmp_path / "trackers" / "wandb").iterdir())
    other.rename(other.with_name("offline-run-20000101_000000-resumed1"))
    ((name, files),) = tracker_folders(tmp_path).items()
    assert name.endswith("offline-run-20000101_000000-resumed1") and len(files) == 3
    run = read_run(tmp_path, name, files)
    (line,) = identity_findings(run)
    assert "its logs are 2 different W&B runs under one id" in line and "/other/resumed1" in line
    wandb_folder = tmp_path / "trackers" / "wandb"
    (wandb_folder / "offline-run-20000101_000000-resumed1").rename(wandb_folder / "copied-log")
    assert len(tracker_folders(tmp_path)) == 2  # a folder not named for the id is a run of its own


def test_a_wandb_summary_kept_in_the_wrong_direction_is_named(tmp_path: Path) -> None:
    from runaudit.trackers import direction_findings, read_run

    log = _wandb_log(tmp_path, "min")
    run = read_run(tmp_path, f"trackers/wandb/{log.parent.name}", [log.relative_to(tmp_path).as_posix()])
    assert run.scalars["val_accuracy"] == {10: 0.5, 20: 0.7} and run.hparams == {"lr": 0.003}
    (line,) = direction_findings(run, {"accuracy": "higher"})
    assert "val_accuracy is summarised by its minimum, but accuracy is declared higher" in line
    assert direction_findings(run, {"accuracy": "lower"}) == []


def test_a_damaged_wandb_record_is_refused_not_parsed(tmp_path: Path) -> None:
    from runaudit.trackers import TrackerUnreadable, WandbRecords

    data = bytearray(_wandb_log(tmp_path, "max").read_bytes())
    assert len(list(WandbRecords(bytes(data), "run-x.wandb"))) > 3
    data[40] ^= 0xFF
    with pytest.raises(TrackerUnreadable, match="damaged record"):
        list(WandbRecords(bytes(data), "run-x.wandb"))
    with pytest.raises(TrackerUnreadable, match="header"):
        list(WandbRecords(b"PK\x03\x04" + bytes(data[4:]), "run-x.wandb"))


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


def _events(*values: tuple[int, float], tag: str = "train_loss") -> list[bytes]:
    """Serialized scalar events as ``SummaryWriter.add_scalar`` writes them (a legacy ``simple_value``,
    migrated to the scalars plugin by TensorBoard's compat layer), after the file's version event."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    version = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")
    return [version.SerializeToString()] + [
        event_pb2.Event(
            wall_time=1.0,
            step=step,
            summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]),
        ).SerializeToString()
        for step, value in values
    ]


def _tfrecords(events: list[bytes]) -> list[bytes]:
    """Each event framed by TensorBoard's own ``RecordWriter`` (length, CRCs, data)."""
    import io

    from tensorboard.summary.writer.record_writer import RecordWriter

    framed = []
    for event in events:
        buffer = io.BytesIO()
        RecordWriter(buffer).write(event)
        framed.append(buffer.getvalue())
    return framed


def _bad_crc(record: bytes) -> bytes:
    """The record with its data's CRC (its last byte) changed."""
    return record[:-1] + bytes([record[-1] ^ 0xFF])


def _read_event_file(tmp_path: Path, data: bytes) -> TrackerRun:
    from runaudit.trackers import read_run

    folder = tmp_path / "trackers" / "tensorboard" / "digits"
    folder.mkdir(parents=True)
    (folder / "events.out.tfevents.1.host").write_bytes(data)
    return read_run(
        tmp_path, "trackers/tensorboard/digits", ["trackers/tensorboard/digits/events.out.tfevents.1.host"]
    )


OWN = [(10, 2.0), (20, 1.0), (30, 0.5)]
OTHER = [(40, 9.0), (50, 8.0)]


def test_sound_event_records_are_read_whole(tmp_path: Path) -> None:
    run = _read_event_file(tmp_path, b"".join(_tfrecords(_events(*OWN))))
    assert run.scalars == {"train_loss": dict(OWN)}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda own, other: own + [_bad_crc(record) for record in other], id="bad-crc-tail"),
        pytest.param(lambda own, other: own[:2] + [_bad_crc(own[2])] + own[3:], id="bad-crc-half-way"),
        pytest.param(lambda own, other: [_bad_crc(record) for record in other], id="only-bad-records"),
        pytest.param(lambda own, other: [bytes(4096)], id="zeros"),
    ],
)
def test_a_damaged_event_file_is_unreadable_not_a_shorter_log(
    tmp_path: Path, damage: Callable[[list[bytes], list[bytes]], list[bytes]]
) -> None:
    """TensorBoard's reader ends quietly at a record that fails its CRC or is cut short: a sound prefix
    and 30 records of another run with bad CRCs passed; zeros read as an empty log, another run's."""
    from runaudit.trackers import TrackerUnreadable

    data = b"".join(damage(_tfrecords(_events(*OWN)), _tfrecords(_events(*OTHER))))
    with pytest.raises(
        TrackerUnreadable,
        match=rf"events\.out\.tfevents\.1\.host: .* stops at byte \d+ of {len(data)}: a damaged record",
    ):
        _read_event_file(tmp_path, data)


@pytest.mark.parametrize("kept", [3, 11, 20, -5], ids=["header", "length-crc", "data", "data-crc"])
def test_an_event_file_whose_end_cuts_its_last_record_is_read_up_to_it(tmp_path: Path, kept: int) -> None:
    """A SummaryWriter killed while it wrote an event (a pre-empted box) leaves the record's first bytes at
    the file's end: TensorBoard charts the records before it, and the whole log was refused."""
    own = _tfrecords(_events(*OWN))
    run = _read_event_file(tmp_path, b"".join(own[:-1]) + own[-1][:kept])
    assert run.scalars == {"train_loss": dict(OWN[:-1])}
    (torn,) = run.torn
    assert torn.endswith(f"ends in a record cut short at byte {len(b''.join(own[:-1]))}")


def test_an_event_file_past_its_caps_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 MiB of small scalar events took a session 35-83 s through TensorBoard's pure-Python reader; the
    caps, lowered here, bound it (events, then bytes)."""
    import runaudit.trackers
    from runaudit.trackers import TrackerUnreadable

    records = _tfrecords(_events(*OWN))
    monkeypatch.setattr(runaudit.trackers, "TENSORBOARD_EVENTS_CAP", len(records) - 1)
    with pytest.raises(TrackerUnreadable, match=f"more than {len(records) - 1} events"):
        _read_event_file(tmp_path / "events", b"".join(records))
    monkeypatch.setattr(runaudit.trackers, "TENSORBOARD_CAP", len(b"".join(records)) - 1)
    with pytest.raises(TrackerUnreadable, match=f"past the {len(b''.join(records)) - 1}-byte cap"):
        _read_event_file(tmp_path / "bytes", b"".join(records))


def _piece(kind: int, body: bytes) -> bytes:
    """One piece of a ``.wandb`` log in the LevelDB log framing W&B writes: CRC32 of type and data, length,
    type, data."""
    import zlib

    checksum = zlib.crc32(body, zlib.crc32(bytes([kind])))
    return checksum.to_bytes(4, "little") + len(body).to_bytes(2, "little") + bytes([kind]) + body


def _history_record(step: int, **values: object) -> bytes:
    import json

    from wandb.proto import wandb_internal_pb2

    record = wandb_internal_pb2.Record()
    record.history.step.num = step
    for key, value in values.items():
        record.history.item.add(key=key, value_json=json.dumps(value))
    return bytes(record.SerializeToString())


def _framed(data: bytes, kinds: Iterable[int], body: bytes) -> bytes:
    """``data`` followed by pieces of ``kinds`` cut from ``body``, as W&B's writer lays them out: a FIRST or
    MIDDLE piece fills the rest of its block, a LAST or FULL one takes 16 bytes here."""
    from runaudit.trackers import WANDB_BLOCK

    for kind in kinds:
        left = WANDB_BLOCK - len(data) % WANDB_BLOCK
        if left < 7:
            data += bytes(left)
            left = WANDB_BLOCK
        size = left - 7 if kind in (FIRST, MIDDLE) else 16
        data += _piece(kind, body[:size])
        body = body[size:]
    return data


@pytest.mark.parametrize(
    "kinds",
    [
        pytest.param((FIRST, FULL), id="first-then-full"),
        pytest.param((FIRST, FIRST, LAST), id="first-then-first"),
        pytest.param((MIDDLE, LAST), id="middle-with-none-begun"),
        pytest.param((LAST,), id="last-with-none-begun"),
        pytest.param((FIRST, LAST, MIDDLE), id="middle-after-last"),
    ],
)
def test_a_torn_wandb_record_is_unreadable(kinds: tuple[int, ...]) -> None:
    """A record whose pieces are out of FIRST/MIDDLE.../LAST order, or whose last piece never comes,
    passed: the torn record vanished and the rest of the log agreed with train.csv."""
    from runaudit.trackers import WANDB_HEADER, TrackerUnreadable, WandbRecords

    sound = WANDB_HEADER + _piece(FULL, _history_record(10, train_loss=2.0))
    data = _framed(sound, kinds, bytes(range(256)) * 1024)
    with pytest.raises(TrackerUnreadable, match=r"run-x\.wandb: a torn record"):
        list(WandbRecords(data, "run-x.wandb"))


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param("first-piece", id="a-first-piece-then-the-end"),
        pytest.param("body", id="a-piece-cut-in-its-data"),
        pytest.param("header", id="a-piece-cut-in-its-header"),
    ],
)
def test_a_wandb_log_whose_end_cuts_its_last_record_is_read_up_to_it(cut: str) -> None:
    """A process killed while W&B wrote a record (a pre-empted box) leaves its first bytes at the file's end:
    the whole log was refused, and every tracker case of the capsule only disclosed it. The records before
    are read, as W&B's sync reads them, and where the cut record begins is said."""
    from runaudit.trackers import WANDB_HEADER, TrackerUnreadable, WandbRecords

    sound = WANDB_HEADER + _piece(FULL, _history_record(10, train_loss=2.0))
    last = _piece(FULL, _history_record(20, train_loss=1.0))
    data = {
        "first-piece": _framed(sound, (FIRST,), bytes(range(256)) * 1024),
        "body": sound + last[:-3],
        "header": sound + last[:3],
    }[cut]
    records = WandbRecords(data, "run-x.wandb")
    assert [*records] == [_history_record(10, train_loss=2.0)] and records.torn_at == len(sound)
    records = WandbRecords(sound + last, "run-x.wandb")
    assert len([*records]) == 2 and records.torn_at is None
    # Cut anywhere but at the file's end, a record is damage, and refused as ever.
    with pytest.raises(TrackerUnreadable, match="damaged record"):
        [*WandbRecords(sound + last[:-3] + last, "run-x.wandb")]


@pytest.mark.parametrize(
    ("kind", "opens_one"),
    [
        pytest.param(9, False, id="no-log-record-type"),
        pytest.param(LAST, False, id="a-last-piece-of-no-record"),
        pytest.param(MIDDLE, False, id="a-middle-piece-of-no-record"),
        pytest.param(FIRST, False, id="a-first-piece-short-of-its-block"),
        pytest.param(FULL, True, id="a-whole-record-while-one-is-open"),
    ],
)
def test_a_piece_the_file_s_end_cuts_is_a_cut_only_if_a_writer_could_have_left_it(
    kind: int, opens_one: bool
) -> None:
    """A cut piece's header is whole, so it is held to what a whole piece's is: each of these ran past the
    file's end and read as cut by a killed writer, the records before compared, though no writer leaves one."""
    from runaudit.trackers import WANDB_HEADER, TrackerUnreadable, WandbRecords

    sound = WANDB_HEADER + _piece(FULL, _history_record(10, train_loss=2.0))
    if opens_one:
        sound = _framed(sound, (FIRST,), bytes(range(256)) * 1024)
    data = sound + _piece(kind, bytes(range(100)))[:60]
    with pytest.raises(TrackerUnreadable, match="damaged record"):
        [*WandbRecords(data, "run-x.wandb")]


def test_bits_flipped_in_the_last_record_s_length_are_damage_not_a_cut() -> None:
    """LevelDB's framing has no CRC over a piece's length. One bit flipped from 0 to 1 in the last record's
    length field made the record run past the file's end, and it read as cut by a killed writer: the
    records before were compared and passed. So did two bits, once one was refused. The CRC still holds for
    the bytes there under the true length, so each is refused as damage; every flip that shortens the
    field fails its CRC, as ever."""
    from runaudit.trackers import WANDB_HEADER, TrackerUnreadable, WandbRecords

    sound = WANDB_HEADER + _piece(FULL, _history_record(10, train_loss=2.0))
    last = _piece(FULL, _history_record(20, train_loss=1.0))
    length = int.from_bytes(last[4:6], "little")
    for bits in [*itertools.combinations(range(16), 1), *itertools.combinations(range(16), 2)]:
        flipped = (length ^ sum(1 << bit for bit in bits)).to_bytes(2, "little")
        with pytest.raises(TrackerUnreadable, match="damaged record"):
            [*WandbRecords(sound + last[:4] + flipped + last[6:], "run-x.wandb")]


@pytest.mark.parametrize(
    "kinds",
    [
        pytest.param((FIRST, LAST), id="short-first"),
        pytest.param((FIRST, MIDDLE, LAST), id="short-middle"),
        pytest.param((FIRST, MIDDLE, LAST), id="empty-middle"),
    ],
)
def test_a_piece_that_ends_before_its_block_is_refused(kinds: tuple[int, ...], request: Any) -> None:
    """W&B's writer splits a record only at block ends. Empty MIDDLE pieces added no bytes and no record:
    two 255 MiB logs of 38M of them were read whole (143 s, 3.6 GB) under every cap."""
    from runaudit.trackers import WANDB_HEADER, TrackerUnreadable, WandbRecords

    case = request.node.callspec.id
    body = bytes(range(256)) * 1024
    data = _framed(WANDB_HEADER, kinds[:1], body) if case != "short-first" else WANDB_HEADER
    if case == "short-first":
        data += _piece(FIRST, body[:100]) + _piece(LAST, body[100:116])
    else:
        data += _piece(MIDDLE, b"" if case == "empty-middle" else body[:100]) + _piece(LAST, body[:16])
    with pytest.raises(TrackerUnreadable, match=r"run-x\.wandb: a record's piece at byte \d+ ends before"):
        list(WandbRecords(data, "run-x.wandb"))


def _wandb_run(tmp_path: Path, *records: bytes) -> TrackerRun:
    from runaudit.trackers import WANDB_HEADER, read_run

    folder = tmp_path / "trackers" / "wandb" / "offline-run-x"
    folder.mkdir(parents=True)
    (folder / "run-x.wandb").write_bytes(WANDB_HEADER + b"".join(_piece(FULL, record) for record in records))
    return read_run(tmp_path, "trackers/wandb/offline-run-x", ["trackers/wandb/offline-run-x/run-x.wandb"])


def test_an_integer_past_a_float_is_compared_not_an_error(tmp_path: Path) -> None:
    """A W&B config holds JSON integers of any size: ``float(10**400)`` raised OverflowError, an error
    verdict with a traceback. As a logged value it cannot be charted: the log is unreadable, and says why."""
    import json

    from wandb.proto import wandb_internal_pb2

    from runaudit.trackers import TrackerUnreadable

    huge = 10**400
    config = wandb_internal_pb2.Record()
    config.config.update.add(key="lr", value_json=json.dumps(huge))
    config.config.update.add(key="epochs", value_json=json.dumps(huge))
    run = _wandb_run(tmp_path / "config", config.SerializeToString())
    (line,) = config_findings(run, {"train": {"lr": 0.003, "epochs": huge}})
    assert "hyperparameter lr = " in line and "config.yaml train.lr = 0.003" in line
    with pytest.raises(
        TrackerUnreadable, match=r"run-x\.wandb: record 1 logs an integer past a float's range"
    ):
        _wandb_run(tmp_path / "history", _history_record(10, train_loss=huge))


def test_a_run_of_more_tags_or_hyperparameters_than_the_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 44 MB W&B log of 1M tags ending in train_loss took 50 s and 1.4 GB to read and compare."""
    import json

    from wandb.proto import wandb_internal_pb2

    import runaudit.trackers
    from runaudit.trackers import TrackerUnreadable

    monkeypatch.setattr(runaudit.trackers, "TAGS_CAP", 2)
    assert set(_wandb_run(tmp_path / "two", _history_record(10, a=1.0, b=2.0)).scalars) == {"a", "b"}
    with pytest.raises(TrackerUnreadable, match=r"run-x\.wandb logs more than 2 scalar tags"):
        _wandb_run(tmp_path / "tags", _history_record(10, a=1.0, b=2.0, c=3.0))
    config = wandb_internal_pb2.Record()
    config.config.update.add(key="train", value_json=json.dumps({"a": 1, "b": 2, "c": 3}))
    with pytest.raises(TrackerUnreadable, match=r"run-x\.wandb records more than 2 hyperparameters"):
        _wandb_run(tmp_path / "config", config.SerializeToString())


def test_each_tracker_run_is_read_once_per_session(
    run_audits: Callable[..., AuditRun], project: Path, capsule_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 tiny TensorBoard runs took a session 96 s: each run's case read every run again. Each logs the
    capsule's own train_loss, so each is a duplicate of every other, named up to SHOWN and counted past."""
    import csv

    import runaudit.trackers
    from runaudit.history import TRAIN_CSV
    from runaudit.trackers import SHOWN

    with open(capsule_dir / TRAIN_CSV, newline="") as handle:
        rows = list(csv.DictReader(handle))
    data = b"".join(_tfrecords(_events(*((int(row["step"]), float(row["train_loss"])) for row in rows))))
    names = [f"trackers/tensorboard/r{index}" for index in range(SHOWN + 3)]
    for name in names:
        (capsule_dir / name).mkdir(parents=True)
        (capsule_dir / name / "events.out.tfevents.1.host").write_bytes(data)
    reads: list[str] = []
    read_run = runaudit.trackers.read_run

    def counted(capsule: Path, name: str, files: Iterable[str], budget: ReadBudget) -> TrackerRun:
        reads.append(name)
        return read_run(capsule, name, files, budget)

    monkeypatch.setattr(runaudit.trackers, "read_run", counted)
    outcome = run_audits(capsule_dir.name, project, "-k", "tracker_agrees")
    assert outcome.report is not None, outcome.result.stdout.str()
    assert sorted(reads) == names
    verdicts = [item for item in outcome.report["verdicts"] if item["audit"] == AUDIT]
    assert sorted(item["subject"] for item in verdicts) == names
    for item in verdicts:
        assert item["verdict"] == "disclosed" and item["message"].count(" both log ") == SHOWN
        assert f"{len(names) - 1 - SHOWN} more tracker runs log its columns too" in item["message"]


def test_a_run_at_the_tag_cap_is_compared_in_time_linear_in_its_points() -> None:
    """At TAGS_CAP, each tag rebuilt train.csv's rows (tags × rows) and each hyperparameter scanned all of
    config.yaml (hyperparameters × keys): with 2000 rows and as many config keys, tens of seconds."""

    from runaudit.trackers import TAGS_CAP

    rows = [[str(epoch), str(10 * epoch), str(1 / epoch)] for epoch in range(1, 2001)]
    history = parse_history(["epoch", "step", "train_loss"], rows)
    tags = {f"g{index}/train_loss": {10: 1.0} for index in range(TAGS_CAP)}
    config = {"train": {f"key{index}": index for index in range(TAGS_CAP)}}
    run = TrackerRun("tb/a", (), tags, {f"key{index}": index + 1 for index in range(TAGS_CAP)})
    findings, columns = scalar_findings(run, history)
    assert len(columns) == TAGS_CAP and all("stops before train.csv" in line for line in findings)
    assert len(config_findings(run, config)) == TAGS_CAP

    def compared() -> None:
        scalar_findings(run, history)
        config_findings(run, config)

    assert least_cpu_seconds(compared, 1.0) < 1.0


# -- two series in one log, and what reading a capsule's logs may cost ------------------------------------


def test_a_log_holding_another_attempts_series_at_the_same_steps_is_disclosed(
    run_audits: Callable[..., AuditRun], project: Path, capsule_dir: Path
) -> None:
    """A TensorBoard log and a W&B log that first hold another attempt's points (train_loss 99 at every
    step) and then the run's own passed "point for point": the reader kept the last value at each step."""
    import csv

    from runaudit.history import TRAIN_CSV

    with open(capsule_dir / TRAIN_CSV, newline="") as handle:
        own = [(int(row["step"]), float(row["train_loss"])) for row in csv.DictReader(handle)]
    other = [(step, 99.0) for step, _ in own]
    events = _events(*other) + _events(*own)[1:]  # one version event, then both series
    folder = capsule_dir / "trackers" / "tensorboard" / "digits"
    folder.mkdir(parents=True)
    (folder / "events.out.tfevents.1.host").write_bytes(b"".join(_tfrecords(events)))
    from runaudit.trackers import WANDB_HEADER

    records = [_history_record(step, train_loss=value) for step, value in other + own]
    wandb = capsule_dir / "trackers" / "wandb" / "offline-run-20240101_000000-abc"
    wandb.mkdir(parents=True)
    (wandb / "run-abc.wandb").write_bytes(WANDB_HEADER + b"".join(_piece(FULL, body) for body in records))
    outcome = run_audits(capsule_dir.name, project, "-k", "tracker_agrees")
    assert outcome.report is not None, outcome.result.stdout.str()
    verdicts = {item["subject"]: item for item in outcome.report["verdicts"] if item["audit"] == AUDIT}
    assert set(verdicts) == {"trackers/tensorboard/digits", wandb.relative_to(capsule_dir).as_posix()}
    first_step = own[0][0]
    for item in verdicts.values():
        assert item["verdict"] == "disclosed", item
        assert f"train_loss is logged again with another value at {len(own)} steps" in item["message"]
        assert f"step {first_step}: 99, then {own[0][1]:.6g}" in item["message"]


def test_a_point_logged_again_with_the_same_value_is_one_point(tmp_path: Path) -> None:
    """Logging a value twice (a callback and the loop both logging one step) is not two series."""
    events = _events(*OWN) + _events((20, 1.0000001), (30, 0.5))[1:]
    run = _read_event_file(tmp_path, b"".join(_tfrecords(events)))
    assert run.rewritten == {} and scalar_findings(run, HISTORY) == ([], ["train_loss"])


def test_one_event_of_more_values_than_tags_is_refused_before_it_is_migrated(tmp_path: Path) -> None:
    """A 13.5 MB event holding 1.35M values of one tag passed the per-file event cap: 48 s and 3.3 GB in
    TensorBoard's compat layers. One event logs a tag once, so more values than the tag cap repeat one."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from runaudit.trackers import TAGS_CAP, TrackerUnreadable

    value = summary_pb2.Summary.Value(tag="train_loss", simple_value=1.0)
    event = event_pb2.Event(step=10, summary=summary_pb2.Summary(value=[value] * (TAGS_CAP + 1)))
    with pytest.raises(TrackerUnreadable, match=rf"an event at step 10 logs {TAGS_CAP + 1} values, past"):
        _read_event_file(tmp_path, b"".join(_tfrecords(_events() + [event.SerializeToString()])))


def test_a_capsule_s_tracker_logs_are_read_within_one_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each event file had caps of its own, a capsule none: 100 event files of 149k empty records each
    took 134 s. Records and values, and each tracker's bytes, are counted over all of a capsule's runs."""
    import runaudit.trackers
    from runaudit.trackers import WANDB_HEADER, TrackerUnreadable, read_runs

    data = b"".join(_tfrecords(_events(*OWN)))  # a version event and three of one value: 7 entries
    for name in ("a", "b"):
        folder = tmp_path / "trackers" / "tensorboard" / name
        folder.mkdir(parents=True)
        (folder / "events.out.tfevents.1.host").write_bytes(data)
    monkeypatch.setattr(runaudit.trackers, "TENSORBOARD_ENTRIES_CAP", 13)
    with pytest.raises(
        TrackerUnreadable, match=r"tensorboard/b/.*tensorboard logs hold more than 13 records and values"
    ):
        read_runs(tmp_path)
    monkeypatch.setattr(runaudit.trackers, "TENSORBOARD_ENTRIES_CAP", 14)
    assert set(read_runs(tmp_path)) == {"trackers/tensorboard/a", "trackers/tensorboard/b"}
    monkeypatch.setattr(runaudit.trackers, "TENSORBOARD_CAPSULE_CAP", 2 * len(data) - 1)
    with pytest.raises(TrackerUnreadable, match=r"tensorboard/b/.*tensorboard logs hold more than \d+ bytes"):
        read_runs(tmp_path)
    wandb = tmp_path / "trackers" / "wandb" / "offline-run-x"
    wandb.mkdir(parents=True)
    log = WANDB_HEADER + b"".join(_piece(FULL, _history_record(step, train_loss=1.0)) for step in (1, 2))
    (wandb / "run-x.wandb").write_bytes(log)
    monkeypatch.setattr(runaudit.trackers, "TENSORBOARD_CAPSULE_CAP", 2 * len(data))
    monkeypatch.setattr(runaudit.trackers, "WANDB_ENTRIES_CAP", 3)  # two records of two items each
    with pytest.raises(
        TrackerUnreadable, match=r"run-x\.wandb: .*wandb logs hold more than 3 records and values"
    ):
        read_runs(tmp_path)
    monkeypatch.setattr(runaudit.trackers, "WANDB_ENTRIES_CAP", 4)
    monkeypatch.setattr(runaudit.trackers, "WANDB_CAPSULE_CAP", len(log) - 1)
    with pytest.raises(TrackerUnreadable, match=r"run-x\.wandb: .*wandb logs hold more than \d+ bytes"):
        read_runs(tmp_path)


def test_a_wandb_value_past_its_cap_is_not_parsed_and_a_record_past_its_cap_is_refused(
    tmp_path: Path,
) -> None:
    """One 214 MB config value of 15M keys took 44 s and 4.7 GB to parse before the hyperparameter cap
    counted them. A value past the cap is not parsed: in a history row it is no number, in the config it is
    named as not compared. A record is refused past its cap before its pieces are joined."""
    import json

    from wandb.proto import wandb_internal_pb2

    from runaudit.trackers import WANDB_RECORD_CAP, WANDB_VALUE_CAP, TrackerUnreadable

    config = wandb_internal_pb2.Record()
    config.config.update.add(key="lr", value_json="0.003")
    config.config.update.add(key="id2label", value_json=json.dumps("x" * WANDB_VALUE_CAP))
    history = wandb_internal_pb2.Record()
    history.history.step.num = 10
    history.history.item.add(key="train_loss", value_json="2.0")
    history.history.item.add(key="blob", value_json="[" + "0," * (WANDB_VALUE_CAP // 2) + "0]")
    run = _wandb_log_of(tmp_path / "value", config.SerializeToString(), history.SerializeToString())
    assert run.hparams == {"lr": 0.003} and run.uncompared == ["id2label"]
    assert run.scalars == {"train_loss": {10: 2.0}}
    huge = wandb_internal_pb2.Record()
    huge.history.item.add(key="k", value_json="1" * WANDB_RECORD_CAP)
    with pytest.raises(TrackerUnreadable, match=rf"begun at byte 7 holds more than {WANDB_RECORD_CAP} bytes"):
        _wandb_log_of(tmp_path / "record", huge.SerializeToString())


def _wandb_log_of(tmp_path: Path, *bodies: bytes) -> TrackerRun:
    """Records each split over as many 32 KiB blocks as it needs, as W&B's writer frames them."""
    from runaudit.trackers import WANDB_BLOCK, WANDB_HEADER, read_run

    data = bytearray(WANDB_HEADER)
    for body in bodies:
        kind = FIRST
        while True:
            room = WANDB_BLOCK - len(data) % WANDB_BLOCK - 7
            if room < 0:
                data += bytes(room + 7)
                continue
            piece, body = body[:room], body[room:]
            data += _piece(kind if body else (FULL if kind == FIRST else LAST), piece)
            kind = MIDDLE
            if not body:
                break
    folder = tmp_path / "trackers" / "wandb" / "offline-run-x"
    folder.mkdir(parents=True)
    (folder / "run-x.wandb").write_bytes(bytes(data))
    return read_run(tmp_path, "trackers/wandb/offline-run-x", ["trackers/wandb/offline-run-x/run-x.wandb"])


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(bytes(7) + b"\x09" * 40, id="bytes-after-a-zero-header"),
    ],
)
def test_what_a_wandb_log_skips_as_padding_must_be_zeros(tail: bytes) -> None:
    """Fewer than seven bytes after the last record, or the rest of a block after a zero header, were
    skipped as padding unchecked: another record's bytes there passed unread."""
    from runaudit.trackers import WANDB_HEADER, TrackerUnreadable, WandbRecords

    sound = WANDB_HEADER + _piece(FULL, _history_record(10, train_loss=2.0))
    assert len(list(WandbRecords(sound + bytes(len(tail)), "run-x.wandb"))) == 1
    with pytest.raises(TrackerUnreadable, match=r"run-x\.wandb: bytes \d+-\d+ are skipped as padding"):
        list(WandbRecords(sound + tail, "run-x.wandb"))


def test_more_tracker_runs_than_are_compared_are_one_disclosed_case(
    run_audits: Callable[..., AuditRun], project: Path, capsule_dir: Path
) -> None:
    """2,000 run folders made a session take 30 s, a case each held against all the others; the capsule's
    file cap allows 20,000. Past the runs cap the folders are not listed further and one case says why."""
    from runaudit.trackers import TRACKER_RUNS_CAP

    data = b"".join(_tfrecords(_events(*OWN)))
    for index in range(TRACKER_RUNS_CAP + 1):
        folder = capsule_dir / "trackers" / "tensorboard" / f"r{index:04d}"
        folder.mkdir(parents=True)
        (folder / "events.out.tfevents.1.host").write_bytes(data)
    outcome = run_audits(capsule_dir.name, project, "-k", "tracker_agrees")
    assert outcome.report is not None, outcome.result.stdout.str()
    (verdict,) = [item for item in outcome.report["verdicts"] if item["audit"] == AUDIT]
    assert verdict["subject"] == "trackers" and verdict["verdict"] == "disclosed"
    assert f"trackers/ holds more than {TRACKER_RUNS_CAP} tracker runs, past the cap" in verdict["message"]


@pytest.mark.parametrize("where", ["tensorboard/digits", "wandb"])
def test_a_tracker_folder_of_more_entries_than_the_caps_allow_is_refused_unlisted(
    tmp_path: Path, where: str
) -> None:
    """A folder's listing is cut at what the caps allow, and refused there: a million files in one run
    folder were listed whole, and entries past a cut would be left out unseen."""
    from runaudit.trackers import TRACKER_FILES_CAP, TRACKER_RUNS_CAP, TrackerUnreadable, tracker_folders

    folder = tmp_path / "trackers" / where
    folder.mkdir(parents=True)
    for index in range(TRACKER_RUNS_CAP + TRACKER_FILES_CAP + 1):
        (folder / f"notes-{index}.txt").touch()
    with pytest.raises(
        TrackerUnreadable, match=rf"trackers/{where}/ holds more than \d+ entries, past the caps"
    ):
        tracker_folders(tmp_path)


def test_tensorboard_values_of_a_scalar_tag_without_metadata_of_their_own_are_read(tmp_path: Path) -> None:
    """TensorBoard takes a tag's kind from its first value and charts later values carrying no metadata;
    they were skipped here, so a log charting 99 at every step passed "point for point"."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.util import tensor_util

    bare = [
        event_pb2.Event(
            step=step,
            summary=summary_pb2.Summary(
                value=[
                    summary_pb2.Summary.Value(
                        tag="train_loss", tensor=tensor_util.make_tensor_proto(99.0, dtype="float32")
                    )
                ]
            ),
        ).SerializeToString()
        for step, _ in OWN
    ]
    run = _read_event_file(tmp_path, b"".join(_tfrecords(_events(*OWN) + bare)))
    assert run.scalars == {"train_loss": {step: 99.0 for step, _ in OWN}}
    (line,) = [line for line in scalar_findings(run, HISTORY)[0] if "logged again" in line]
    assert "train_loss is logged again with another value at 3 steps (step 10: 2, then 99" in line


def test_a_tensorboard_point_at_a_step_already_reached_drops_the_later_points(tmp_path: Path) -> None:
    """TensorBoard's loader charts a tag whose step goes back from that step on: a log of the run's whole
    series and then its first point again charts one point, a run that stopped there, and passed."""
    run = _read_event_file(tmp_path, b"".join(_tfrecords(_events(*OWN, OWN[0]))))
    assert run.scalars == {"train_loss": dict(OWN[:1])} and run.rewritten == {}
    assert any("stops before train.csv" in line for line in scalar_findings(run, HISTORY)[0])


def test_wandb_items_are_named_as_wandb_names_them(tmp_path: Path) -> None:
    """W&B names an item by its nested_key joined with dots, its key only when there is none: an item of
    key "_runtime" and nested_key ["train_loss"] charted a train_loss of 99 that was never read, and a value
    that is an object charts each of its numbers as "key.name"."""
    from wandb.proto import wandb_internal_pb2

    record = wandb_internal_pb2.Record()
    record.history.step.num = 10
    record.history.item.add(key="train_loss", value_json="2.0")
    record.history.item.add(key="_runtime", nested_key=["train_loss"], value_json="99.0")
    record.history.item.add(key="val", value_json='{"accuracy": 0.5}')
    run = _wandb_run(tmp_path, record.SerializeToString())
    assert run.scalars == {"train_loss": {10: 99.0}, "val.accuracy": {10: 0.5}}
    assert "train_loss" in run.rewritten
    findings, columns = scalar_findings(run, HISTORY)
    assert columns == ["train_loss", "val_accuracy"]


def test_a_wandb_row_charted_at_another_step_than_its_own_is_unreadable(tmp_path: Path) -> None:
    """W&B charts a row at its ``_step`` item: rows whose _step ran backwards passed, read at their step."""
    from runaudit.trackers import TrackerUnreadable

    with pytest.raises(
        TrackerUnreadable, match=r"record 1 charts its values at _step 3, but is the history row of step 10"
    ):
        _wandb_run(tmp_path, _history_record(10, train_loss=2.0, _step=3))
    assert _wandb_run(tmp_path / "own", _history_record(10, train_loss=2.0, _step=10)).scalars == {
        "train_loss": {10: 2.0}
    }
