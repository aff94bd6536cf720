"""Tracker logs sealed with a run, read with the tracker's own reader, held against train.csv and config.yaml.

A TensorBoard chart is what people look at and what a paper's curves are often drawn from; the capsule's
``train.csv`` is what was sealed. When they disagree, one of them shows a run the other does not: a log
directory shared by two runs, a tracker that kept a crashed attempt's points, a value logged before a fix.
This module finds the TensorBoard runs under ``trackers/tensorboard/`` (one run per folder there; the event
files below it, e.g. the ``add_hparams`` sub-run, belong to it), reads them with tensorboard's
``EventFileLoader`` (no network, no TensorFlow), and lists each disagreement as one line:

- a scalar whose points differ from the train.csv column of the same name at the same step (or epoch), or
  which logs steps train.csv does not have, or stops before it does (its final value differs);
- a tracker run none of whose scalars is a train.csv column (an orphan: another run's log);
- the same column logged by two tracker runs (a duplicate);
- an hyperparameter (``add_hparams``) whose value differs from config.yaml's key of the same name.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runaudit.capsule import TENSORBOARD, TENSORBOARD_EVENTS, TRACKER_DEPTH, TRACKERS, WANDB, is_wandb_log
from runaudit.history import History
from runaudit.reader import dotted

# TensorBoard keeps scalars as float32: seven significant digits survive the trip.
RELATIVE_TOLERANCE = 2e-6
SHOWN = 3  # differing points quoted per finding


class TrackerUnreadable(ValueError):
    """An event file the reader refuses; the message names the file."""


@dataclass(frozen=True)
class TrackerRun:
    """One TensorBoard run: a folder under trackers/tensorboard/ and the event files below it."""

    name: str  # the folder's path inside the capsule
    files: tuple[str, ...]  # event files, relative to the capsule, in name order (TensorBoard's load order)
    scalars: dict[str, dict[int, float]] = field(default_factory=dict)  # tag -> step -> last value logged
    hparams: dict[str, Any] = field(default_factory=dict)
    goals: dict[str, str] = field(default_factory=dict)  # W&B define_metric(summary=...): "max" or "min"


def tracker_folders(capsule: Path) -> dict[str, tuple[str, ...]]:
    """Run folder -> its log files (TensorBoard event files, or one W&B ``run-<id>.wandb``), found without
    following a symlink; only regular files count."""
    return {**_tensorboard_folders(capsule), **_wandb_folders(capsule)}


def _wandb_folders(capsule: Path) -> dict[str, tuple[str, ...]]:
    base = capsule / TRACKERS / WANDB
    if not base.is_dir() or base.is_symlink():
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for folder in sorted(base.iterdir()):
        if folder.is_symlink() or not folder.is_dir():
            continue
        logs = tuple(
            sorted(
                path.relative_to(capsule).as_posix()
                for path in folder.iterdir()
                if is_wandb_log(path.name) and stat.S_ISREG(os.lstat(path).st_mode)
            )
        )
        if logs:
            found[folder.relative_to(capsule).as_posix()] = logs
    return found


def kind_of(name: str) -> str:
    """``tensorboard`` or ``wandb``: which tracker wrote the run folder ``name``."""
    return WANDB if name.startswith(f"{TRACKERS}/{WANDB}/") else TENSORBOARD


def _tensorboard_folders(capsule: Path) -> dict[str, tuple[str, ...]]:
    base = capsule / TRACKERS / TENSORBOARD
    found: dict[str, list[str]] = {}
    if not base.is_dir() or base.is_symlink():
        return {}
    for folder, dirs, files in os.walk(base, followlinks=False):
        depth = len(Path(folder).relative_to(base).parts)
        if depth >= TRACKER_DEPTH - 2:
            dirs[:] = []
        for name in sorted(files):
            path = Path(folder) / name
            if not name.startswith(TENSORBOARD_EVENTS) or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            relative = path.relative_to(capsule).as_posix()
            parts = path.relative_to(base).parts
            run = (
                (base / parts[0]).relative_to(capsule).as_posix()
                if len(parts) > 1
                else base.relative_to(capsule).as_posix()
            )
            found.setdefault(run, []).append(relative)
    return {name: tuple(sorted(files)) for name, files in sorted(found.items())}


def read_run(capsule: Path, name: str, files: Iterable[str]) -> TrackerRun:
    """The scalars, hyperparameters (and for W&B, summary directions) of one tracker run."""
    return (
        _read_wandb(capsule, name, files)
        if kind_of(name) == WANDB
        else _read_tensorboard(capsule, name, files)
    )


# A tracker log (an event file, a W&B record log) larger than this is refused, not parsed.
LOG_CAP = 256 << 20


def _scalar(tensor: Any, rel: str) -> float:
    """A scalar summary's one value, its shape checked first: tensorboard's ``make_ndarray`` repeats a
    lone value out to the declared shape, and a 172-byte event declaring 20000 × 20000 filled 3.4 GB."""
    from tensorboard.util import tensor_util

    count = 1
    for dim in tensor.tensor_shape.dim:
        count *= dim.size
    if count != 1:
        shape = " × ".join(str(dim.size) for dim in tensor.tensor_shape.dim)
        raise TrackerUnreadable(f"{rel}: a scalar summary declares the shape {shape[:80]}, not one value")
    return float(tensor_util.make_ndarray(tensor).item())


def _read_tensorboard(capsule: Path, name: str, files: Iterable[str]) -> TrackerRun:
    """Through tensorboard's own event reader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import plugin_data_pb2

    run = TrackerRun(name, tuple(files))
    for rel in run.files:
        path = capsule / rel
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                raise TrackerUnreadable(f"{rel} is not a regular file")
            if info.st_size > LOG_CAP:
                raise TrackerUnreadable(
                    f"{rel} holds {info.st_size} bytes, past the {LOG_CAP}-byte cap of a log"
                )
            for event in EventFileLoader(str(path)).Load():
                for value in event.summary.value:
                    plugin = value.metadata.plugin_data.plugin_name
                    if plugin == "scalars":
                        number = _scalar(value.tensor, rel)
                        run.scalars.setdefault(value.tag, {})[int(event.step)] = number
                    elif plugin == "hparams" and value.tag == "_hparams_/session_start_info":
                        data = plugin_data_pb2.HParamsPluginData.FromString(
                            value.metadata.plugin_data.content
                        )
                        for key, given in data.session_start_info.hparams.items():
                            run.hparams[key] = _proto_value(given)
        except TrackerUnreadable:
            raise
        except Exception as exc:  # the reader raises its own and protobuf's errors on damaged records
            raise TrackerUnreadable(
                f"{rel}: TensorBoard's reader refused it ({type(exc).__name__})"
            ) from None
    return run


# A W&B offline run's ``run-<id>.wandb``: a 7-byte header (":W&B", 0xBEE1, version 0), then records in the
# LevelDB log format: 32 KiB blocks of [crc32 (of type byte, then data), length, type] + data, a record
# split across blocks as FIRST/MIDDLE/LAST pieces; each whole record is one wandb_internal.Record protobuf.
WANDB_HEADER = b":W&B\xe1\xbe\x00"
WANDB_BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
WANDB_KEPT = frozenset({"_step", "_runtime", "_timestamp"})  # W&B's own bookkeeping, not logged values


def wandb_records(data: bytes, rel: str) -> Iterable[bytes]:
    """The records of a ``.wandb`` log, each checked against its CRC; a damaged one raises."""
    import zlib

    if not data.startswith(WANDB_HEADER):
        raise TrackerUnreadable(f"{rel} does not start with the W&B log header")
    position, pending = len(WANDB_HEADER), b""
    while position + 7 <= len(data):
        left = WANDB_BLOCK - position % WANDB_BLOCK
        if left < 7:  # the block's tail is padding
            position += left
            continue
        checksum, length, kind = (
            int.from_bytes(data[position : position + 4], "little"),
            int.from_bytes(data[position + 4 : position + 6], "little"),
            data[position + 6],
        )
        if kind == 0 and length == 0:  # zero padding after the last record of a block
            position += left
            continue
        body = data[position + 7 : position + 7 + length]
        if (
            len(body) != length
            or length > left - 7
            or zlib.crc32(body, zlib.crc32(bytes([kind]))) != checksum
        ):
            raise TrackerUnreadable(f"{rel}: a damaged record at byte {position}")
        position += 7 + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            pending = body
        elif kind == MIDDLE:
            pending += body
        elif kind == LAST:
            yield pending + body
            pending = b""
        else:
            raise TrackerUnreadable(f"{rel}: record type {kind} at byte {position} is not a log record")


def _read_wandb(capsule: Path, name: str, files: Iterable[str]) -> TrackerRun:
    """Through W&B's own record protobuf (``wandb.proto.wandb_internal_pb2``); no network, no service."""
    import json

    from wandb.proto import wandb_internal_pb2

    from runaudit.safeio import UnsafeFile, read_regular

    run = TrackerRun(name, tuple(files))
    for rel in run.files:
        try:
            data = read_regular(capsule / rel, LOG_CAP)
        except (OSError, UnsafeFile) as exc:
            raise TrackerUnreadable(f"{rel} cannot be read: {exc}") from None
        for body in wandb_records(data, rel):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(body)
                kind = record.WhichOneof("record_type")
                if kind == "history":
                    step = record.history.step.num
                    for item in record.history.item:
                        key = item.key or "/".join(item.nested_key)
                        value = json.loads(item.value_json)
                        if (
                            key not in WANDB_KEPT
                            and isinstance(value, (int, float))
                            and not isinstance(value, bool)
                        ):
                            run.scalars.setdefault(key, {})[int(step)] = float(value)
                elif kind in ("config", "run"):
                    updates = record.config.update if kind == "config" else record.run.config.update
                    for item in updates:
                        key = item.key or ".".join(item.nested_key)
                        if not key.startswith("_"):
                            run.hparams.update(dotted({key: json.loads(item.value_json)}))
                elif kind == "metric" and record.metric.name:
                    summary = record.metric.summary
                    run.goals[record.metric.name] = "max" if summary.max else "min" if summary.min else ""
            except Exception:  # protobuf's DecodeError, bad JSON values, nesting past the recursion limit
                raise TrackerUnreadable(f"{rel}: a record W&B's protobuf cannot parse") from None
    return run


def _proto_value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    return getattr(value, kind) if kind else None


def _key(name: str) -> str:
    return name.lower().replace("/", "_").replace("-", "_").replace(" ", "_")


def column_of(tag: str, columns: Iterable[str]) -> str | None:
    """The train.csv column a tag logs: the same name, with ``/`` as ``_`` (``val/accuracy``), or its last
    part (``charts/train_loss``)."""
    known = {_key(column): column for column in columns}
    return known.get(_key(tag)) or known.get(_key(tag.rsplit("/", 1)[-1]))


def _agree(left: float, right: float) -> bool:
    if math.isnan(left) or math.isnan(right):
        return math.isnan(left) and math.isnan(right)
    return math.isclose(left, right, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-12)


def scalar_findings(run: TrackerRun, history: History) -> tuple[list[str], list[str]]:
    """(disagreements, columns the run logs) of one tracker run against train.csv."""
    findings: list[str] = []
    matched: list[str] = []
    for tag, points in sorted(run.scalars.items()):
        column = column_of(tag, history.columns)
        if column is None or column in ("epoch", "step") or not history.has(column):
            continue
        matched.append(column)
        axis = _axis(points, history)
        rows = {
            int(position): float(value)
            for position, value, logged in zip(
                history.values[axis], history.values[column], history.logged[column], strict=True
            )
            if logged and math.isfinite(position)
        }
        extra = sorted(set(points) - set(rows))
        missing = sorted(set(rows) - set(points))
        differ = [
            (at, points[at], rows[at])
            for at in sorted(set(points) & set(rows))
            if not _agree(points[at], rows[at])
        ]
        where = f"{run.name}: {tag} (train.csv {column}, by {axis})"
        if differ:
            shown = "; ".join(
                f"{axis} {at}: tracker {mine:.6g}, train.csv {theirs:.6g}"
                for at, mine, theirs in differ[:SHOWN]
            )
            findings.append(
                f"{where}: {len(differ)} of {len(set(points) & set(rows))} points differ ({shown})"
            )
        if extra:
            findings.append(f"{where}: logs {axis}s train.csv has no row for: {_listed(extra)}")
        if missing:
            final = max(rows)
            findings.append(
                f"{where}: stops before train.csv; no point at {axis}s {_listed(missing)} "
                f"(train.csv ends at {axis} {final} with {rows[final]:.6g})"
            )
    return findings, matched


def _axis(points: Mapping[int, float], history: History) -> str:
    """``step`` when the tag's x values are train.csv steps, ``epoch`` when they are its epochs."""
    steps = {int(value) for value in history.values["step"] if math.isfinite(value)}
    epochs = {int(value) for value in history.values["epoch"] if math.isfinite(value)}
    logged = set(points)
    return "epoch" if len(logged & epochs) > len(logged & steps) else "step"


def _listed(values: list[int]) -> str:
    shown = ", ".join(map(str, values[:SHOWN]))
    return f"{shown}, ... ({len(values)} in all)" if len(values) > SHOWN else shown


def config_findings(run: TrackerRun, config: Mapping[str, Any] | None) -> list[str]:
    """Hyperparameters the tracker recorded that config.yaml states otherwise (matched by dotted key or,
    when unique, by the last part of one)."""
    if not run.hparams or not isinstance(config, Mapping):
        return []
    flat = dotted(config)
    findings = []
    for name, value in sorted(run.hparams.items()):
        keys = [name] if name in flat else [key for key in flat if key.rsplit(".", 1)[-1] == name]
        if len(keys) != 1:
            continue
        stated = flat[keys[0]]
        same = (
            _agree(float(value), float(stated))
            if isinstance(value, (int, float))
            and isinstance(stated, (int, float))
            and not isinstance(stated, bool)
            else str(value).lower() == str(stated).lower()
        )
        if not same:
            findings.append(
                f"{run.name}: hyperparameter {name} = {value!r} in the tracker, config.yaml {keys[0]} = {stated!r}"
            )
    return findings


DIRECTIONS = {"higher": "max", "lower": "min"}


def direction_findings(run: TrackerRun, declared: Mapping[str, str]) -> list[str]:
    """Summaries the tracker keeps in the other direction than metrics.json declares for the metric
    (``val_accuracy`` summarised by its minimum when accuracy is ``higher``)."""
    findings = []
    for name, goal in sorted(run.goals.items()):
        metric = name.split("/")[-1].removeprefix("val_").removeprefix("test_")
        want = DIRECTIONS.get(declared.get(metric, ""))
        if goal and want and goal != want:
            findings.append(
                f"{run.name}: {name} is summarised by its {goal}imum, but {metric} is declared "
                f"{declared[metric]} (its {want}imum is the best)"
            )
    return findings
