"""``runaudit index-splits``: the split manifest of a dataset folder (docs/capsule.md §8), for the leakage audits.

Each ingested file becomes one row: the path *as enumerated* and its case-folded form (so a ``Train/`` +
``train/`` double read is visible), the SHA-256 of its bytes, a 64-bit perceptual hash when it is an
image, and the group, time and label when a list file gives them. Splits come from the first folder
(``train/``, ``val/``, ``test/`` and their usual aliases) or from an explicit list file
(``path,split[,sample_id,group,time,label]``) — the form a pooled, re-split dataset needs. The manifest
is written atomically to ``<root>/_trust/splits/<split-id>.parquet`` and never overwritten.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import io
import os
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from runaudit.atomic import write_atomic
from runaudit.host import usable_cores
from runaudit.ids import is_safe_id
from runaudit.usage import Refusal

if TYPE_CHECKING:
    import pyarrow

SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "dev": "val",
    "test": "test",
    "testing": "test",
}
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
LIST_COLUMNS = ("path", "split", "sample_id", "group", "time", "label")


class IndexSplitsError(Refusal):
    """The dataset or list cannot be indexed as asked; the message names the file and the problem."""


@dataclass(frozen=True)
class Entry:
    """One ingested item, before its bytes are read."""

    path: str  # relative POSIX path, as enumerated
    split: str
    sample_id: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)  # group, time, label from a list file


def split_of(name: str, where: str) -> str:
    split = SPLIT_ALIASES.get(name.strip().casefold())
    if split is None:
        raise IndexSplitsError(
            f"{where}: split {name!r} is not train, val or test (or an alias: {', '.join(sorted(SPLIT_ALIASES))})"
        )
    return split


def _inside(dataset: Path, relative: str, where: str) -> Path:
    """The file ``relative`` names under ``dataset``, refusing absolute paths, ``..`` and escapes."""
    posix = PurePosixPath(relative.replace("\\", "/"))
    if posix.is_absolute() or ".." in posix.parts or not posix.parts:
        raise IndexSplitsError(
            f"{where}: path {relative!r} must be relative to the dataset and stay inside it"
        )
    target = dataset.joinpath(*posix.parts)
    if not target.resolve().is_relative_to(dataset.resolve()):
        raise IndexSplitsError(f"{where}: {relative!r} resolves outside {dataset} (a symlink escape)")
    if not target.is_file():
        raise IndexSplitsError(f"{where}: {relative!r} does not exist as a file under {dataset}")
    return target


def walk_folders(dataset: Path) -> Iterator[Entry]:
    """Files under ``<dataset>/<split>/...``, following in-dataset symlinks as a data loader would."""
    root = dataset.resolve()
    tops = sorted(item for item in dataset.iterdir() if item.is_dir())
    if not tops:
        raise IndexSplitsError(
            f"{dataset} holds no split folder (train/, val/, test/); pass --list to assign splits"
        )
    for top in tops:
        split = split_of(top.name, f"{dataset}/{top.name}/")
        yield from _walk(top, top.name, split, root, chain=frozenset())


def _walk(folder: Path, prefix: str, split: str, root: Path, chain: frozenset[Path]) -> Iterator[Entry]:
    real = folder.resolve()
    if not real.is_relative_to(root):
        raise IndexSplitsError(f"{prefix}/ resolves outside the dataset {root} (a symlink escape)")
    if real in chain:
        raise IndexSplitsError(f"{prefix}/ is a symlink loop back into one of its own parents")
    with os.scandir(folder) as listing:
        items = sorted(listing, key=lambda item: item.name)
    for item in items:
        rel = f"{prefix}/{item.name}"
        if item.is_dir():  # follows symlinks: an aliased folder is read again, as the user's loader would
            yield from _walk(Path(item.path), rel, split, root, chain | {real})
        elif item.is_file():
            if not Path(item.path).resolve().is_relative_to(root):
                raise IndexSplitsError(f"{rel} resolves outside the dataset {root} (a symlink escape)")
            yield Entry(rel, split)


def read_list(dataset: Path, listing: Path) -> Iterator[Entry]:
    """Entries of a list file: a CSV with a header naming ``path`` and ``split`` (and optional columns)."""
    try:
        text = listing.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IndexSplitsError(f"{listing}: cannot read the list file ({exc})") from None
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [name for name in ("path", "split") if name not in header]
    if missing:
        raise IndexSplitsError(
            f"{listing}: header {header} lacks {', '.join(missing)}; expected {', '.join(LIST_COLUMNS)}"
        )
    unknown = [name for name in header if name not in LIST_COLUMNS]
    if unknown:
        raise IndexSplitsError(
            f"{listing}: unknown column(s) {', '.join(unknown)}; expected {', '.join(LIST_COLUMNS)}"
        )
    for line, row in enumerate(reader, start=2):
        where = f"{listing}:{line}"
        if None in row or any(value is None for value in row.values()):
            raise IndexSplitsError(f"{where}: {len(row)} fields, the header has {len(header)}")
        _inside(dataset, row["path"], where)
        attributes = {name: row[name] for name in ("group", "time", "label") if row.get(name)}
        yield Entry(
            row["path"].replace("\\", "/"),
            split_of(row["split"], where),
            row.get("sample_id") or None,
            attributes,
        )


def _fingerprint(dataset: Path, entry: Entry) -> tuple[str, int | None]:
    path = dataset.joinpath(*PurePosixPath(entry.path).parts)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    image = PurePosixPath(entry.path).suffix.lower() in IMAGE_SUFFIXES
    if not image:
        return digest.hexdigest(), None
    from runaudit.perceptual_hash import phash_file  # numpy and scipy: only a dataset with images pays

    return digest.hexdigest(), phash_file(path)


def _times(values: list[str | None], where: str) -> pyarrow.Array:
    """Times as numbers when every one is a number, else as UTC timestamps (ISO 8601)."""
    import pyarrow as pa

    try:
        return pa.array([None if value is None else float(value) for value in values], pa.float64())
    except ValueError:
        pass
    parsed: list[dt.datetime | None] = []
    for value in values:
        if value is None:
            parsed.append(None)
            continue
        try:
            stamp = dt.datetime.fromisoformat(value)
        except ValueError:
            raise IndexSplitsError(
                f"{where}: time {value!r} is neither a number nor an ISO 8601 time"
            ) from None
        parsed.append(stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC))
    return pa.array(parsed, pa.timestamp("us", tz="UTC"))


def build_manifest(dataset: Path, entries: list[Entry], *, workers: int | None = None) -> pyarrow.Table:
    """The manifest table of ``entries`` (bytes hashed in parallel: hashing and decoding release the GIL)."""
    import pyarrow as pa

    if not entries:
        raise IndexSplitsError(
            f"{dataset}: nothing to index (no files under the split folders or in the list)"
        )
    with ThreadPoolExecutor(max_workers=workers or usable_cores()) as pool:
        fingerprints = list(pool.map(lambda entry: _fingerprint(dataset, entry), entries))
    seen: Counter[str] = Counter()
    sample_ids = []
    for entry in entries:
        base = entry.sample_id or entry.path
        seen[base] += 1
        sample_ids.append(base if seen[base] == 1 else f"{base}#{seen[base]}")  # the same path read twice
    columns: dict[str, Any] = {
        "sample_id": pa.array(sample_ids, pa.string()),
        "split": pa.array([entry.split for entry in entries], pa.string()),
        "path": pa.array([entry.path for entry in entries], pa.string()),
        "path_casefold": pa.array([entry.path.casefold() for entry in entries], pa.string()),
        "sha256": pa.array([sha for sha, _ in fingerprints], pa.string()),
        "phash": pa.array([phash for _, phash in fingerprints], pa.uint64()),
    }
    for name in ("group", "time", "label"):
        values = [entry.attributes.get(name) for entry in entries]
        if any(value is not None for value in values):
            columns[name] = _times(values, str(dataset)) if name == "time" else pa.array(values, pa.string())
    return pa.table(columns)


def write_manifest(root: Path, split_id: str, table: pyarrow.Table) -> tuple[Path, str]:
    """Write ``<root>/_trust/splits/<split_id>.parquet`` atomically; refuse to replace one."""
    import pyarrow.parquet as pq

    if not is_safe_id(split_id):
        raise IndexSplitsError(f"split id {split_id!r} is not a safe id (^[A-Za-z0-9][A-Za-z0-9._-]*$)")
    target = root / "_trust" / "splits" / f"{split_id}.parquet"
    if target.exists() or target.is_symlink():
        raise IndexSplitsError(
            f"{target} exists; a run may bind its sha256, so it is never overwritten: choose a new split id"
        )
    write_atomic(target, lambda handle: pq.write_table(table, handle))
    return target, hashlib.sha256(target.read_bytes()).hexdigest()


def index_splits(
    dataset: Path, root: Path, split_id: str, *, listing: Path | None = None, workers: int | None = None
) -> tuple[Path, str, pyarrow.Table]:
    if not dataset.is_dir():
        raise IndexSplitsError(f"dataset {dataset} is not a directory")
    if not root.is_dir():
        raise IndexSplitsError(f"project root {root} is not a directory")
    entries = list(read_list(dataset, listing) if listing is not None else walk_folders(dataset))
    table = build_manifest(dataset, entries, workers=workers)
    path, sha = write_manifest(root, split_id, table)
    return path, sha, table


def _main(args: argparse.Namespace) -> int:
    path, sha, table = index_splits(
        args.dataset, args.root, args.split_id, listing=args.list, workers=args.workers
    )
    counts = Counter(table.column("split").to_pylist())
    hashed = table.num_rows - table.column("phash").null_count
    print(
        f"index-splits: wrote {path} ({', '.join(f'{name} {counts.get(name, 0)}' for name in ('train', 'val', 'test'))}; "
        f"{hashed} of {table.num_rows} with a perceptual hash)"
    )
    print(
        f'index-splits: bind it in run.json: "split": {{"split_id": "{args.split_id}", "manifest_sha256": "{sha}", ...}}'
    )
    return 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "index-splits", help="write the split manifest of a dataset folder for the leakage audits"
    )
    parser.add_argument(
        "dataset", type=Path, metavar="DATASET", help="folder holding train/ val/ test/ (or the list's files)"
    )
    parser.add_argument("--split-id", required=True, help="the manifest's id: _trust/splits/<id>.parquet")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root (default: .)")
    parser.add_argument(
        "--list", type=Path, help="CSV assigning files to splits: path,split[,sample_id,group,time,label]"
    )
    parser.add_argument("--workers", type=int, default=None, help="parallel readers (default: CPU count)")
    parser.set_defaults(handler=_main)
