"""Tracker logs sealed with a run, read with the tracker's own reader, held against train.csv and config.yaml.

A TensorBoard chart is what people look at and what a paper's curves are often drawn from; the capsule's
``train.csv`` is what was sealed. When they disagree, one of them shows a run the other does not: a log
directory shared by two runs, a tracker that kept a crashed attempt's points, a value logged before a fix.
This module finds the TensorBoard runs under ``trackers/tensorboard/`` (one run per folder there; the event
files below it, e.g. the ``add_hparams`` sub-run, belong to it), reads them with tensorboard's record reader
and event compat layers (no network, no TensorFlow; a log it cannot read to its last byte is unreadable), and
lists each disagreement as one line:

- a scalar whose points differ from the train.csv column of the same name at the same step (or epoch), or
  which logs steps train.csv does not have, or stops before it does (its final value differs);
- a scalar logged twice at one step with different values (two attempts' series in one log: only one of
  them can be the run train.csv holds);
- a tracker run none of whose scalars is a train.csv column (an orphan: another run's log);
- the same column logged by two tracker runs (a duplicate);
- an hyperparameter (``add_hparams``) whose value differs from config.yaml's key of the same name.
"""

from __future__ import annotations

import itertools
import math
import os
import stat
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runaudit.capsule import TENSORBOARD, TENSORBOARD_EVENTS, TRACKER_DEPTH, TRACKERS, WANDB, is_wandb_log
from runaudit.history import History
from runaudit.reader import dotted

# TensorBoard keeps scalars as float32: seven significant digits survive the trip.
RELATIVE_TOLERANCE = 2e-6
SHOWN = 3  # differing points quoted per finding


class TrackerUnreadable(ValueError):
    """An event file the reader refuses; the message names the file."""


@dataclass
class Rewrites:
    """The steps at which one tag was logged again with another value: how many, and the first few."""

    count: int = 0
    first: list[tuple[int, float, float]] = field(default_factory=list)  # (step, earlier value, later value)


@dataclass(frozen=True)
class TrackerRun:
    """One tracker run: a TensorBoard run's folder under trackers/tensorboard/ and the event files below it,
    or a W&B run's offline folder (with those of the sessions resumed under its id) and its logs."""

    name: str  # the folder's path inside the capsule
    files: tuple[str, ...]  # log files, relative to the capsule, in name order (the order they are read)
    scalars: dict[str, dict[int, float]] = field(default_factory=dict)  # tag -> step -> last value logged
    hparams: dict[str, Any] = field(default_factory=dict)
    goals: dict[str, str] = field(default_factory=dict)  # W&B define_metric(summary=...): "max" or "min"
    rewritten: dict[str, Rewrites] = field(default_factory=dict)  # tag -> points an earlier value was under
    uncompared: list[str] = field(default_factory=list)  # hyperparameters too large to parse
    # logs whose end cut their last record (a writer killed mid-record): read up to it, as the tracker reads
    torn: list[str] = field(default_factory=list)
    # a W&B run's summary as its runs table shows it once every update is applied: "a.b" -> a number
    summary: dict[str, float] = field(default_factory=dict)
    # hyperparameter -> values a later record replaced (a resumed session's config): each is held too
    replaced: dict[str, list[Any]] = field(default_factory=dict)
    # W&B log -> the run its run record names ("entity/project/id"): sessions merged by id must agree
    identities: dict[str, str] = field(default_factory=dict)
    # tag -> step -> a point dropped by preemption, until a later point at its step is held against it
    preempted: dict[str, dict[int, float]] = field(default_factory=dict)

    def log(self, tag: str, step: int, value: float, rel: str, *, preempt: bool = False) -> None:
        """Keep ``value`` as the tag's point at ``step``; one that replaces a different value is counted
        (the comparison sees the last, and the earlier series would otherwise vanish unseen). ``preempt``:
        as TensorBoard's loader charts a tag, a point at a step the tag already reached drops the tag's
        points from that step on (a resumed run's log then charts the resumed series)."""
        if len(tag) > TAG_NAME_CAP:
            raise TrackerUnreadable(
                f"{rel} names a tag of {len(tag)} characters, past the {TAG_NAME_CAP} cap"
            )
        if tag not in self.scalars and len(self.scalars) == TAGS_CAP:
            raise TrackerUnreadable(f"{rel} logs more than {TAGS_CAP} scalar tags, past the cap")
        points = self.scalars.setdefault(tag, {})
        dropped = self.preempted.get(tag, {})
        earlier = points[step] if step in points else dropped.pop(step, None)
        if earlier is not None and not _agree(earlier, value):
            rewrites = self.rewritten.setdefault(tag, Rewrites())
            rewrites.count += 1
            if len(rewrites.first) < SHOWN:
                rewrites.first.append((step, earlier, value))
        if preempt:  # points are kept in step order, so the dropped ones are the last ones
            while points and next(reversed(points)) >= step:
                at, kept = points.popitem()
                self.preempted.setdefault(tag, {})[at] = kept
        points[step] = value


ENTRIES, BYTES = "records and values", "bytes"


@dataclass
class ReadBudget:
    """What reading one capsule's tracker logs may still cost, all runs and files together, per tracker:
    records and values, and bytes. Each file has caps of its own, but a capsule may hold thousands of files
    (100 event files of 149k empty records each, every one under its file's caps, took 134 s)."""

    caps: dict[tuple[str, str], int] = field(
        default_factory=lambda: {
            (TENSORBOARD, ENTRIES): TENSORBOARD_ENTRIES_CAP,
            (WANDB, ENTRIES): WANDB_ENTRIES_CAP,
            (TENSORBOARD, BYTES): TENSORBOARD_CAPSULE_CAP,
            (WANDB, BYTES): WANDB_CAPSULE_CAP,
        }
    )
    spent: dict[tuple[str, str], int] = field(default_factory=dict)

    def spend(self, rel: str, amount: int, kind: str, unit: str = ENTRIES) -> None:
        """Charge ``amount`` (records and values, or bytes) read from ``rel`` to its tracker; refuse the
        capsule's logs past the cap."""
        key = (kind, unit)
        self.spent[key] = self.spent.get(key, 0) + amount
        if self.spent[key] > self.caps[key]:
            raise TrackerUnreadable(
                f"{rel}: the capsule's {kind} logs hold more than {self.caps[key]} {unit} together, past the "
                "cap (docs/capsule.md §2, tracker logs)"
            )


def tracker_folders(capsule: Path) -> dict[str, tuple[str, ...]]:
    """Run folder -> its log files (TensorBoard event files, or one W&B ``run-<id>.wandb``), found without
    following a symlink; only regular files count. :class:`TrackerUnreadable` once the listing is past
    :data:`TRACKER_RUNS_CAP` runs or :data:`TRACKER_FILES_CAP` files, or meets a folder of more entries
    than both allow: it stops there, however many entries the capsule holds."""
    found: dict[str, list[str]] = {}
    base = capsule / TRACKERS / TENSORBOARD
    pending = [base] if base.is_dir() and not base.is_symlink() else []
    while pending:
        folder = pending.pop()
        depth = len(folder.relative_to(base).parts)
        for entry in sorted(_entries(folder, capsule), key=lambda entry: entry.name):
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < TRACKER_DEPTH - 2:
                    pending.append(path)
            elif entry.name.startswith(TENSORBOARD_EVENTS) and entry.is_file(follow_symlinks=False):
                parts = path.relative_to(base).parts
                run_folder = base / parts[0] if len(parts) > 1 else base
                _found(
                    found, run_folder.relative_to(capsule).as_posix(), path.relative_to(capsule).as_posix()
                )
    base = capsule / TRACKERS / WANDB
    first: dict[str, str] = {}  # run-<id>.wandb -> the earliest folder that holds it
    run_entries = _entries(base, capsule) if base.is_dir() and not base.is_symlink() else []
    for run_entry in sorted(run_entries, key=lambda entry: entry.name):  # offline-run-<time>-<id>: in time
        if run_entry.is_dir(follow_symlinks=False):
            for entry in _entries(Path(run_entry.path), capsule):
                if is_wandb_log(entry.name) and entry.is_file(follow_symlinks=False):
                    session = Path(run_entry.path).relative_to(capsule).as_posix()
                    # A run resumed under its id (resume="allow") logs to a folder per session,
                    # offline-run-<stamp>-<id>: one W&B run (whose run records must then agree)
                    named = run_entry.name.endswith(
                        f"-{entry.name.removeprefix('run-').removesuffix('.wandb')}"
                    )
                    run = first.setdefault(entry.name, session) if named else session
                    _found(found, run, Path(entry.path).relative_to(capsule).as_posix())
    return {name: tuple(sorted(files)) for name, files in sorted(found.items())}


# Tracker runs and log files a capsule may hold: one training run logs to a folder or two (a TensorBoard run
# and its add_hparams sub-run, one W&B offline run), with a new event file per resumed session. 2,000 run
# folders made a session take 30 s (a case each, each held against all the others); the file cap allows 20,000.
TRACKER_RUNS_CAP = 200
TRACKER_FILES_CAP = 1_000


def _entries(folder: Path, capsule: Path) -> list[os.DirEntry[str]]:
    """The entries of ``folder`` (none when it cannot be listed: the capsule's inventory reports it), refused
    past what the caps allow however many it holds."""
    try:
        with os.scandir(folder) as listing:
            entries = list(itertools.islice(listing, TRACKER_RUNS_CAP + TRACKER_FILES_CAP + 1))
    except OSError:
        return []
    if len(entries) > TRACKER_RUNS_CAP + TRACKER_FILES_CAP:
        raise TrackerUnreadable(
            f"{folder.relative_to(capsule).as_posix()}/ holds more than {TRACKER_RUNS_CAP + TRACKER_FILES_CAP} "
            f"entries, past the caps of {TRACKER_RUNS_CAP} tracker runs and {TRACKER_FILES_CAP} log files "
            "(docs/capsule.md §2, tracker logs)"
        )
    return entries


def _found(found: dict[str, list[str]], run: str, rel: str) -> None:
    """Add the log file ``rel`` of ``run``, refused past the caps."""
    if run not in found and len(found) == TRACKER_RUNS_CAP:
        raise TrackerUnreadable(
            f"trackers/ holds more than {TRACKER_RUNS_CAP} tracker runs, past the cap (docs/capsule.md §2, "
            "tracker logs)"
        )
    files = found.setdefault(run, [])
    files.append(rel)
    if sum(map(len, found.values())) > TRACKER_FILES_CAP:
        raise TrackerUnreadable(
            f"trackers/ holds more than {TRACKER_FILES_CAP} tracker log files, past the cap (docs/capsule.md "
            "§2, tracker logs)"
        )


def kind_of(name: str) -> str:
    """``tensorboard`` or ``wandb``: which tracker wrote the run folder ``name``."""
    return WANDB if name.startswith(f"{TRACKERS}/{WANDB}/") else TENSORBOARD


def read_runs(capsule: Path) -> dict[str, TrackerRun]:
    """Every tracker run of the capsule, read within one :class:`ReadBudget`."""
    budget = ReadBudget()
    return {name: read_run(capsule, name, files, budget) for name, files in tracker_folders(capsule).items()}


def read_run(capsule: Path, name: str, files: Iterable[str], budget: ReadBudget | None = None) -> TrackerRun:
    """The scalars, hyperparameters (and for W&B, summary directions) of one tracker run; ``budget`` is
    what the capsule's other runs left (a run read alone gets a whole one)."""
    budget = budget or ReadBudget()
    return (
        _read_wandb(capsule, name, files, budget)
        if kind_of(name) == WANDB
        else _read_tensorboard(capsule, name, files, budget)
    )


# A tracker log (an event file, a W&B record log) larger than this is refused, not parsed.
LOG_CAP = 256 << 20
# What one run may log: a W&B log of 1M tags (44 MB) took 50 s and 1.4 GB to read and compare; a real run
# logs tens of scalars and hyperparameters. More than this is refused, not compared.
TAGS_CAP = 10_000
TAG_NAME_CAP = 4096  # characters of a tag or hyperparameter name: a real one is tens
# TensorBoard's reader without TensorFlow checks each record's CRC32C a byte at a time in Python, and each
# event goes through its compat layers and ``make_ndarray``: 4 MiB of 69-byte scalar events (61k) took
# 2.0 s to read, about 33 µs an event and 0.2 µs a byte of CRC; a 64 MiB event file made a session take
# 35-83 s, 256 MiB (LOG_CAP) minutes. A run's scalar log is small (30k steps of 5 scalars: 150k events,
# 10 MB). Past either cap an event file is refused, not read: about 5 s at most (records as small as 16
# bytes make the event count the binding cap).
TENSORBOARD_CAP = 16 << 20
TENSORBOARD_EVENTS_CAP = 200_000
# What all of a capsule's logs of one tracker may hold together. Records (events) and the values they log:
# at about 20 µs an event and 35 µs a value through TensorBoard's layers, 600,000 of them take ~20 s at most
# (a run logging 5 scalars at each of 40,000 steps: 200,000 events of one value each, 400,000 entries); a
# W&B record and its values cost about 7 µs, and W&B adds three bookkeeping items a row (5 scalars at each
# of 100,000 steps: 900,000 entries). Bytes: TensorBoard's CRC runs in Python (0.2 µs a byte), W&B's in C.
TENSORBOARD_ENTRIES_CAP = 600_000
WANDB_ENTRIES_CAP = 2_000_000
TENSORBOARD_CAPSULE_CAP: int = 2 * TENSORBOARD_CAP
WANDB_CAPSULE_CAP: int = 2 * LOG_CAP
TFRECORD_FRAMING = 16  # a record's length (8 bytes) and its CRC (4) before the data, the data's CRC (4) after
TFRECORD_HEADER = 12  # the length and its CRC


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


def _tensorboard_events(
    path: Path, rel: str, size: int, budget: ReadBudget, initial: dict[str, Any], torn: list[str]
) -> Iterator[Any]:
    """The events of one event file, through tensorboard's record reader and the compat layers its
    ``EventFileLoader`` applies. That reader ends quietly at a damaged or truncated record (it swallows
    DataLossError, waiting for a writer to complete it), so a sound prefix followed by records of another
    run with bad CRCs read as a whole log: the records read must span the file to the byte, but for one record
    the file's end cut (a writer killed while it wrote: TensorBoard charts the records before it, and so
    they are read; ``torn`` says where it begins). Each event and
    its values are charged to ``budget`` before the compat layers copy them: one 13.5 MB event of 1.35M
    values took 48 s and 3.3 GB."""
    from tensorboard import data_compat, dataclass_compat
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2

    read = 0
    for count, record in enumerate(RawEventFileLoader(str(path)).Load(), 1):
        if count > TENSORBOARD_EVENTS_CAP:
            raise TrackerUnreadable(f"{rel} holds more than {TENSORBOARD_EVENTS_CAP} events, past the cap")
        read += TFRECORD_FRAMING + len(record)
        event = event_pb2.Event.FromString(record)
        values = len(event.summary.value)
        if values > TAGS_CAP:  # one event logs each tag once; more values than tags repeat one
            raise TrackerUnreadable(
                f"{rel}: an event at step {event.step} logs {values} values, past the cap"
            )
        budget.spend(rel, 1 + values, TENSORBOARD)
        yield from dataclass_compat.migrate_event(data_compat.migrate_event(event), initial)
    if read != size and _cut_by_the_end(path, read, size):
        torn.append(f"{rel} ends in a record cut short at byte {read}")
    elif read != size:
        raise TrackerUnreadable(
            f"{rel}: TensorBoard's reader stops at byte {read} of {size}: a damaged record"
        )


def _cut_by_the_end(path: Path, offset: int, size: int) -> bool:
    """Whether the bytes of ``path`` from ``offset`` on begin one TFRecord that the file's end cut: a header
    cut, or a length whose CRC holds and that runs past the end. A record that is whole but fails a CRC,
    or a length that fails its own, is damage."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from runaudit.safeio import open_regular

    if size - offset < TFRECORD_HEADER:
        return True
    with open_regular(path) as handle:
        handle.seek(offset)
        header = handle.read(TFRECORD_HEADER)
    length = int.from_bytes(header[:8], "little")
    if len(header) != TFRECORD_HEADER or masked_crc32c(header[:8]) != int.from_bytes(header[8:], "little"):
        return False
    return offset + TFRECORD_FRAMING + length > size


def _read_tensorboard(capsule: Path, name: str, files: Iterable[str], budget: ReadBudget) -> TrackerRun:
    """Through tensorboard's own record reader and event protobuf."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    run = TrackerRun(name, tuple(files))
    # A tag's kind is its first value's plugin, for the whole run: TensorBoard charts a later value of a
    # scalar tag that carries no metadata of its own (a log written the way TF1 writes one, or a hostile one).
    initial: dict[str, Any] = {}  # tag -> its first SummaryMetadata (the compat layers' migration state)
    plugins: dict[str, str] = {}
    for rel in run.files:
        path = capsule / rel
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                raise TrackerUnreadable(f"{rel} is not a regular file")
            if info.st_size > TENSORBOARD_CAP:
                raise TrackerUnreadable(
                    f"{rel} holds {info.st_size} bytes, past the {TENSORBOARD_CAP}-byte cap of an event file"
                )
            budget.spend(rel, info.st_size, TENSORBOARD, BYTES)
            for event in _tensorboard_events(path, rel, info.st_size, budget, initial, run.torn):
                for value in event.summary.value:
                    plugin = plugins.setdefault(value.tag, value.metadata.plugin_data.plugin_name)
                    if plugin == "scalars":
                        if value.WhichOneof("value") != "tensor":
                            raise TrackerUnreadable(
                                f"{rel}: a point of the scalar tag {value.tag[:80]!r} at step {event.step} is "
                                f"a {value.WhichOneof('value')}, not a scalar tensor"
                            )
                        run.log(value.tag, int(event.step), _scalar(value.tensor, rel), rel, preempt=True)
                    elif plugin == "hparams" and value.tag == "_hparams_/session_start_info":
                        data = plugin_data_pb2.HParamsPluginData.FromString(
                            value.metadata.plugin_data.content
                        )
                        for key, given in data.session_start_info.hparams.items():
                            _hparam(run, key, _proto_value(given), rel)
        except TrackerUnreadable:
            raise
        except Exception as exc:  # the reader raises its own and protobuf's errors on damaged records
            raise TrackerUnreadable(
                f"{rel}: TensorBoard's reader refused it ({type(exc).__name__})"
            ) from None
    return run


def _hparam(run: TrackerRun, key: str, value: Any, rel: str) -> None:
    """Record one hyperparameter, a new one refused past :data:`TAGS_CAP`."""
    if key not in run.hparams and len(run.hparams) == TAGS_CAP:
        raise TrackerUnreadable(f"{rel} records more than {TAGS_CAP} hyperparameters, past the cap")
    if key in run.hparams and not _stated_alike(run.hparams[key], value):
        earlier = run.replaced.setdefault(key, [])
        if len(earlier) < SHOWN:
            earlier.append(run.hparams[key])
    run.hparams[key] = value


# A W&B offline run's ``run-<id>.wandb``: a 7-byte header (":W&B", 0xBEE1, version 0), then records in the
# LevelDB log format: 32 KiB blocks of [crc32 (of type byte, then data), length, type] + data, a record
# split across blocks as FIRST/MIDDLE/LAST pieces; each whole record is one wandb_internal.Record protobuf.
WANDB_HEADER = b":W&B\xe1\xbe\x00"
WANDB_BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
WANDB_KEPT = frozenset({"_step", "_runtime", "_timestamp"})  # W&B's own bookkeeping, not logged values
# A record is a history row, a config update or a summary: kilobytes; past its cap it is refused unjoined. A
# value (a number, a histogram's bins, a config section) is JSON text of kilobytes, a label map of 20,000
# classes about a MB; past its cap it is not parsed: no number is that long, and such a section is not compared.
WANDB_RECORD_CAP = 16 << 20
WANDB_VALUE_CAP = 1 << 20


class WandbRecords:
    """The records of a ``.wandb`` log, each checked against its CRC; a damaged or torn one raises: a piece
    out of FIRST/MIDDLE.../LAST order, or a record whose last piece never comes before the next (an earlier
    record's start left open, as a spliced log holds, would otherwise vanish unread). What is skipped as
    padding (a block's tail, the rest of a file) must be zeros, as the writer leaves it, and a record is
    refused past :data:`WANDB_RECORD_CAP` before its pieces are joined.

    Only the file's end may cut a record short: a process killed while it wrote one (a pre-empted box) leaves
    its first bytes and nothing after them. The records before are read, as W&B's own sync reads them, and
    :attr:`torn_at` says where the cut record begins."""

    def __init__(self, data: bytes, rel: str) -> None:
        self.data, self.rel = data, rel
        self.torn_at: int | None = None

    def __iter__(self) -> Iterator[bytes]:
        data, rel = self.data, self.rel
        if not data.startswith(WANDB_HEADER):
            raise TrackerUnreadable(f"{rel} does not start with the W&B log header")
        position = len(WANDB_HEADER)
        pieces: list[
            bytes
        ] = []  # of the record begun at byte ``opened``; joined once (+= per piece: quadratic)
        opened, size = -1, 0
        while position < len(data):
            left = WANDB_BLOCK - position % WANDB_BLOCK
            header = data[position : position + 7]
            if len(header) < 7 and header.strip(b"\0"):  # a header the file's end cut
                self.torn_at = opened if opened >= 0 else position
                return
            if (
                len(header) < 7 or left < 7 or header == bytes(7)
            ):  # padding: to the block's end, or the file's
                _padding(data[position : position + left], position, rel)
                position += left
                continue
            checksum, length, kind = (
                int.from_bytes(header[:4], "little"),
                int.from_bytes(header[4:6], "little"),
                header[6],
            )
            body = data[position + 7 : position + 7 + length]
            if len(body) != length and length <= left - 7:  # a piece the file's end cut, or damage
                damage = _out_of_place(kind, length, left, opened, position) or _whole_under_a_shorter_length(
                    body, kind, checksum, length, position
                )
                if damage:  # its header is whole: held to what a whole piece's is, it is no writer's cut
                    raise TrackerUnreadable(f"{rel}: a damaged record past the file's end: {damage}")
                self.torn_at = opened if opened >= 0 else position
                return
            if length > left - 7 or zlib.crc32(body, zlib.crc32(bytes([kind]))) != checksum:
                raise TrackerUnreadable(f"{rel}: a damaged record at byte {position}")
            misplaced = _out_of_place(kind, length, left, opened, position)
            if misplaced:
                raise TrackerUnreadable(f"{rel}: {misplaced}")
            if kind in (FULL, FIRST):
                opened, size = position, 0
            size += length
            if size > WANDB_RECORD_CAP:
                raise TrackerUnreadable(
                    f"{rel}: the record begun at byte {opened} holds more than {WANDB_RECORD_CAP} bytes, past the cap"
                )
            pieces.append(body)
            position += 7 + length
            if kind in (FULL, LAST):
                yield b"".join(pieces)
                pieces, opened = [], -1
        if opened >= 0:  # its last piece never came: the file's end cut it
            self.torn_at = opened


def _out_of_place(kind: int, length: int, left: int, opened: int, position: int) -> str:
    """Why the piece at ``position`` (``left`` bytes before its block ends; a record open since ``opened``,
    or -1) is not one W&B's writer lays out there: its type, its place among the pieces, or a split that is
    not at a block's end; "" if it is."""
    if kind not in (FULL, FIRST, MIDDLE, LAST):
        return f"record type {kind} at byte {position} is not a log record"
    if kind in (FULL, FIRST) and opened >= 0:
        return f"a torn record: the one begun at byte {opened} has no last piece before byte {position}"
    if kind in (MIDDLE, LAST) and opened < 0:
        return f"a torn record: a continuation piece at byte {position} begins none"
    if kind in (FIRST, MIDDLE) and length != left - 7:  # the writer splits a record at block ends only
        return f"a record's piece at byte {position} ends before its block does, as no writer splits one"
    return ""


def _whole_under_a_shorter_length(body: bytes, kind: int, checksum: int, length: int, position: int) -> str:
    """Why the piece at ``position``, which runs past the file's end, is whole with a damaged length: its CRC
    holds for the first ``n`` bytes there, for some ``n`` shorter than ``length``; "" if for none. The
    framing has no CRC over the length, so this is the only sign of bits flipped in it. A piece a killed
    writer cut matches under one of the ``len(body) + 1`` lengths by chance only: under 1 in 100,000 for a
    piece of a whole block."""
    running = zlib.crc32(bytes([kind]))
    for size in range(len(body) + 1):
        if running == checksum:
            return (
                f"the piece at byte {position} reads a length of {length} bytes, and its CRC holds for the "
                f"{size} bytes there"
            )
        running = zlib.crc32(body[size : size + 1], running)
    return ""


def _padding(skipped: bytes, position: int, rel: str) -> None:
    """Refuse bytes skipped as padding that are not zeros: another record's bytes would pass unread."""
    if skipped.strip(b"\0"):
        raise TrackerUnreadable(
            f"{rel}: bytes {position}-{position + len(skipped) - 1} are skipped as padding but are not zeros"
        )


def _read_wandb(capsule: Path, name: str, files: Iterable[str], budget: ReadBudget) -> TrackerRun:
    """Through W&B's own record protobuf (``wandb.proto.wandb_internal_pb2``); no network, no service. A
    value past :data:`WANDB_VALUE_CAP` is not parsed (a 214 MB config value of 15M keys took 44 s and 4.7 GB):
    in a history row it is no number, in the config it is not compared (:attr:`TrackerRun.uncompared`)."""
    import json

    from wandb.proto import wandb_internal_pb2

    from runaudit.safeio import UnsafeFile, read_regular

    run = TrackerRun(name, tuple(files))
    for rel in run.files:
        try:
            data = read_regular(capsule / rel, LOG_CAP)
        except (OSError, UnsafeFile) as exc:
            raise TrackerUnreadable(f"{rel} cannot be read: {exc}") from None
        budget.spend(rel, len(data), WANDB, BYTES)
        records = WandbRecords(data, rel)
        for index, body in enumerate(records, 1):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(body)
                kind = record.WhichOneof("record_type")
                if kind == "history":
                    budget.spend(rel, 1 + len(record.history.item), WANDB)
                    step = record.history.step.num
                    for item in record.history.item:
                        key = _wandb_key(item, rel)
                        if len(item.value_json) > WANDB_VALUE_CAP:  # no number is that long: not charted
                            continue
                        value = json.loads(item.value_json)
                        if key == "_step" and value != step:
                            raise TrackerUnreadable(
                                f"{rel}: record {index} charts its values at _step {str(value)[:40]}, but is "
                                f"the history row of step {step}"
                            )
                        for name, number in dotted({key: value}).items():  # W&B charts "a.b" of {"a": {"b"}}
                            if (
                                name not in WANDB_KEPT
                                and isinstance(number, (int, float))
                                and not isinstance(number, bool)
                            ):
                                run.log(name, int(step), float(number), rel)
                elif kind in ("config", "run"):
                    if kind == "run":
                        named = record.run
                        run.identities.setdefault(rel, f"{named.entity}/{named.project}/{named.run_id}")
                    updates = record.config.update if kind == "config" else record.run.config.update
                    budget.spend(rel, 1 + len(updates), WANDB)
                    for item in updates:
                        key = _wandb_key(item, rel)
                        if key.startswith("_"):
                            continue
                        if len(item.value_json) > WANDB_VALUE_CAP:
                            run.uncompared.append(key)
                            continue
                        for dotted_key, flat in dotted({key: json.loads(item.value_json)}).items():
                            _hparam(run, dotted_key, flat, rel)
                elif kind == "summary":
                    budget.spend(rel, 1 + len(record.summary.update) + len(record.summary.remove), WANDB)
                    _summarise(run, record.summary, rel)
                else:
                    budget.spend(rel, 1, WANDB)
                    if kind == "metric" and record.metric.name:
                        summary = record.metric.summary
                        run.goals[record.metric.name] = "max" if summary.max else "min" if summary.min else ""
            except TrackerUnreadable:
                raise
            except OverflowError:  # float() of a JSON integer past 1.8e308
                raise TrackerUnreadable(
                    f"{rel}: record {index} logs an integer past a float's range, not a number to chart"
                ) from None
            # protobuf's DecodeError, bad JSON values, nesting past the recursion limit
            except Exception as exc:
                raise TrackerUnreadable(
                    f"{rel}: record {index} is refused by W&B's protobuf or its JSON values ({type(exc).__name__})"
                ) from None
        if records.torn_at is not None:
            run.torn.append(f"{rel} ends in a record cut short at byte {records.torn_at}")
    return run


def _summarise(run: TrackerRun, record: Any, rel: str) -> None:
    """Apply one W&B summary record to ``run.summary``: its numbers by dotted name (``define_metric``'s
    ``{"max": 0.7}`` under ``val_accuracy`` is ``val_accuracy.max``), W&B's own ``_`` names left out."""
    import json

    for item in record.remove:
        removed = _wandb_key(item, rel)
        for name in [name for name in run.summary if name == removed or name.startswith(f"{removed}.")]:
            del run.summary[name]
    for item in record.update:
        key = _wandb_key(item, rel)
        if key.startswith("_") or len(item.value_json) > WANDB_VALUE_CAP:
            continue
        for name in [name for name in run.summary if name.startswith(f"{key}.")]:
            del run.summary[name]  # a value replaces the one it updates, whatever its shape
        for name, number in dotted({key: json.loads(item.value_json)}).items():
            if isinstance(number, (int, float)) and not isinstance(number, bool):
                if name not in run.summary and len(run.summary) == TAGS_CAP:
                    raise TrackerUnreadable(f"{rel} summarises more than {TAGS_CAP} values, past the cap")
                run.summary[name] = float(number)
            else:
                run.summary.pop(name, None)


def _wandb_key(item: Any, rel: str) -> str:
    """An item's name as W&B's own core names it: its ``nested_key`` joined by dots, else its ``key`` (a
    name read otherwise let ``{key: "_runtime", nested_key: ["train_loss"]}`` chart a train_loss unread)."""
    key = ".".join(item.nested_key) if item.nested_key else item.key
    if len(key) > TAG_NAME_CAP:
        raise TrackerUnreadable(f"{rel} names a value of {len(key)} characters, past the {TAG_NAME_CAP} cap")
    return str(key)


def _proto_value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    return getattr(value, kind) if kind else None


def _key(name: str) -> str:
    return name.lower().replace("/", "_").replace(".", "_").replace("-", "_").replace(" ", "_")


def column_keys(columns: Iterable[str]) -> dict[str, str]:
    """The train.csv columns by the key :func:`column_of` matches a tag with."""
    return {_key(column): column for column in columns}


def column_of(tag: str, known: Mapping[str, str]) -> str | None:
    """The train.csv column a tag logs (``known``: :func:`column_keys` of the columns): the same name, with
    ``/`` as ``_`` (``val/accuracy``), or its last part (``charts/train_loss``)."""
    return known.get(_key(tag)) or known.get(_key(tag.rsplit("/", 1)[-1]))


def _agree(left: float, right: float) -> bool:
    if math.isnan(left) or math.isnan(right):
        return math.isnan(left) and math.isnan(right)
    return math.isclose(left, right, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-12)


def _same_number(left: float, right: float) -> bool:
    """Integers compare exactly (W&B keeps a config's JSON integers whole: ``float(10**400)`` overflows);
    a float within float32's tolerance, and never equal to an integer past a float's range."""
    if isinstance(left, int) and isinstance(right, int):
        return left == right
    try:
        return _agree(float(left), float(right))
    except OverflowError:
        return False


def scalar_findings(run: TrackerRun, history: History) -> tuple[list[str], list[str]]:
    """(disagreements, columns the run logs) of one tracker run against train.csv. What depends on train.csv
    alone (its column keys, steps, epochs, a column's points in order) is built once, not per tag, and a
    tag costs its own points, not train.csv's rows: a W&B log of 1M tags ending in train_loss rebuilt and
    compared all of train.csv per tag (50 s)."""
    findings = rewrite_findings(run) + identity_findings(run)
    matched: list[str] = []
    known = column_keys(history.columns)
    axes = {
        axis: {int(value) for value in history.values[axis] if math.isfinite(value)}
        for axis in ("step", "epoch")
    }
    series: dict[tuple[str, str], tuple[dict[int, float], list[int]]] = {}
    for tag, points in sorted(run.scalars.items()):
        column = column_of(tag, known)
        if column is None or column in ("epoch", "step") or not history.has(column):
            continue
        matched.append(column)
        # ``epoch`` when the tag's x values are train.csv epochs rather than its steps
        axis = "epoch" if len(points.keys() & axes["epoch"]) > len(points.keys() & axes["step"]) else "step"
        if (axis, column) not in series:
            rows = {
                int(position): float(value)
                for position, value, logged in zip(
                    history.values[axis], history.values[column], history.logged[column], strict=True
                )
                if logged and math.isfinite(position)
            }
            series[axis, column] = rows, sorted(rows)
        rows, ordered = series[axis, column]
        common = sorted(at for at in points if at in rows)
        extra = sorted(at for at in points if at not in rows)
        # the first missing rows: a scan that passes only rows the tag logs, then stops
        missing = list(itertools.islice((at for at in ordered if at not in points), SHOWN))
        differ = [(at, points[at], rows[at]) for at in common if not _agree(points[at], rows[at])]
        where = f"{run.name}: {tag} (train.csv {column}, by {axis})"
        if differ:
            shown = "; ".join(
                f"{axis} {at}: tracker {mine:.6g}, train.csv {theirs:.6g}"
                for at, mine, theirs in differ[:SHOWN]
            )
            findings.append(f"{where}: {len(differ)} of {len(common)} points differ ({shown})")
        if extra:
            findings.append(
                f"{where}: logs {axis}s train.csv has no row for: {_listed(extra[:SHOWN], len(extra))}"
            )
        if missing:
            final = ordered[-1]
            findings.append(
                f"{where}: stops before train.csv; no point at {axis}s {_listed(missing, len(rows) - len(common))} "
                f"(train.csv ends at {axis} {final} with {rows[final]:.6g})"
            )
    return findings, matched


def identity_findings(run: TrackerRun) -> list[str]:
    """Sessions merged under one W&B run id whose run records name different runs (W&B ids are unique per
    project only: another project's log in a folder of the same id), or one that holds no run record."""
    logs = [rel for rel in run.files if is_wandb_log(Path(rel).name)]
    unnamed = [rel for rel in logs if rel not in run.identities] if len(logs) > 1 else []
    findings = (
        [
            f"{run.name}: {', '.join(unnamed[:SHOWN])} hold{'s' if len(unnamed) == 1 else ''} no run record; "
            "nothing shows it is a session of this run"
        ]
        if unnamed
        else []
    )
    named = sorted(set(run.identities.values()))
    if len(named) > 1:
        shown = "; ".join(f"{rel}: {who}" for rel, who in sorted(run.identities.items())[:SHOWN])
        findings.append(f"{run.name}: its logs are {len(named)} different W&B runs under one id ({shown})")
    return findings


def rewrite_findings(run: TrackerRun) -> list[str]:
    """Tags the run logs twice at one step with different values, any tag, a train.csv column or not: a log
    holding a crashed attempt's series and then the run's own draws both, and agrees with one at most."""
    findings = []
    for tag, rewrites in sorted(run.rewritten.items())[:SHOWN]:
        shown = "; ".join(
            f"step {at}: {earlier:.6g}, then {later:.6g}" for at, earlier, later in rewrites.first
        )
        charted = (
            "TensorBoard charts the later (its --load_fast=false loader both)"
            if kind_of(run.name) == TENSORBOARD
            else "W&B's chart holds one of them"
        )
        findings.append(
            f"{run.name}: {tag} is logged again with another value at {rewrites.count} step"
            f"{'s' if rewrites.count > 1 else ''} ({shown}): two series in one log; {charted}"
        )
    if len(run.rewritten) > SHOWN:
        findings.append(f"{run.name}: {len(run.rewritten) - SHOWN} more tags are logged twice at one step")
    return findings


def _listed(first: list[int], count: int) -> str:
    """The first few of ``count`` values, and how many there are when that is more."""
    shown = ", ".join(map(str, first))
    return f"{shown}, ... ({count} in all)" if count > len(first) else shown


def config_findings(run: TrackerRun, config: Mapping[str, Any] | None) -> list[str]:
    """Hyperparameters the tracker recorded that config.yaml states otherwise (matched by dotted key or,
    when unique, by the last part of one; config.yaml's keys are indexed by last part once, not scanned
    per hyperparameter)."""
    if not run.hparams or not isinstance(config, Mapping):
        return []
    flat = dotted(config)
    by_last: dict[str, list[str]] = {}
    for key in flat:
        by_last.setdefault(key.rsplit(".", 1)[-1], []).append(key)
    findings = []
    for name, value in sorted(run.hparams.items()):
        keys = [name] if name in flat else by_last.get(name, [])
        if len(keys) != 1:
            continue
        stated = flat[keys[0]]
        for held in [*run.replaced.get(name, []), value]:  # a value replaced later was the run's too
            if not _stated_alike(held, stated):
                findings.append(
                    f"{run.name}: hyperparameter {name} = {held!r} in the tracker, config.yaml {keys[0]} = "
                    f"{stated!r}" + (" (until a later record replaced it)" if held is not value else "")
                )
    return findings


def _stated_alike(value: Any, stated: Any) -> bool:
    """A tracker's hyperparameter and a stated one agree: numbers as :func:`_same_number`, else as text."""
    numbers = (int, float)
    if isinstance(value, numbers) and isinstance(stated, numbers) and not isinstance(stated, bool):
        return _same_number(value, stated)
    return str(value).lower() == str(stated).lower()


DIRECTIONS = {"higher": "max", "lower": "min"}


# What a W&B summary may show of a metric's series: its last value by default, or what define_metric asks.
SUMMARY_STATISTICS = ("first", "last", "min", "max", "mean", "best")


def summary_findings(run: TrackerRun, history: History) -> list[str]:
    """W&B summary values of a train.csv column that its series never gives: the runs table shows the run
    by its summary (``run.summary["val_accuracy"] = 0.95`` after a run that reached 0.91 put 0.95 there).
    A session resumed under the run's id summarises its own points only (offline, it cannot read the
    earlier session's summary), so a statistic may be that of the column's last rows: ``min``, ``max`` and
    ``best`` one of the column's least or greatest values from some row on, ``mean`` the mean from some
    row on, ``first`` any value, ``last`` the last; a plain value any of these. NaN agrees with NaN."""
    findings: list[str] = []
    known = column_keys(history.columns)
    for name, shown in sorted(run.summary.items()):
        stem, _, statistic = name.rpartition(".")
        if statistic not in SUMMARY_STATISTICS:
            stem, statistic = name, ""
        column = column_of(stem, known)
        if column is None or column in ("epoch", "step") or not history.has(column):
            continue
        logged = history.values[column][history.logged[column]]
        finite = logged[np.isfinite(logged)][::-1]  # from the last row back: each suffix's statistics
        tails = np.arange(1, len(finite) + 1)
        least, greatest = np.minimum.accumulate(finite), np.maximum.accumulate(finite)
        means = np.cumsum(finite) / tails if len(finite) else finite
        allowed = {
            "first": logged,
            "last": logged[-1:],
            "min": least,
            "max": greatest,
            "best": np.concatenate([least, greatest]),
            "mean": means,
        }.get(statistic)
        if allowed is None:
            allowed = np.concatenate([logged, means])
        agreed = np.isclose(allowed, shown, rtol=RELATIVE_TOLERANCE, atol=1e-12) | (
            np.isnan(allowed) & math.isnan(shown)
        )
        if not agreed.any():
            whole = (
                f"first {logged[0]:.6g}, last {logged[-1]:.6g}, min {finite.min():.6g}, max {finite.max():.6g}, "
                f"mean {finite.mean():.6g}"
                if len(finite)
                else "no finite value"
            )
            findings.append(
                f"{run.name}: its W&B summary shows {name} = {shown:.6g}, which train.csv's {column} never "
                f"gives, whole or from any row on ({whole})"
            )
            if len(findings) == SHOWN:
                break
    return findings


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
