"""A hostile-input corpus: whatever bytes a run holds, every audit reaches a verdict and a report is written.

Each case damages a private copy of the verified demo project the way a broken or hostile box could, then
runs ``pytest --run=<capsule> --root=<project>`` as a user does, in a child process with a deadline (its
process group is killed on overrun, so a hang fails the case instead of blocking the suite) and a memory
ceiling. On Linux the child is forked from a warm server that imported pytest, torch and the other heavy
libraries once (``tests/bounded.py``, :class:`SessionForker`): the same command line, environment and
folders as a fresh ``python -m pytest``, at about a third of the cost. For every case it asserts:

- the session ends within the case's deadline, with an exit status that is not 3 (INTERNALERROR) and no
  ``Traceback`` anywhere in its output;
- ``<root>/reports/<run>.json`` exists and is a valid ``runaudit.report/1`` document, beside its page;
- the audits that own the broken part (listed per case) reached a verdict and none of them ``passed``;
  the ones a case names as failing say so in one line;
- nothing was written outside the report folder: the project tree, the folder the session ran in, its
  private ``TMPDIR``, the session server's temp folder and any folder a case placed outside the project
  are identical before and after.
  One path is allowed to change: ``<root>/cache/runaudit/sha256.json``, the stat-keyed hash cache. It is
  regenerable state the harness keeps inside the trust boundary by design (README, "Custody"), a copied
  project has new stat keys so every audit rewrites it, and the deep-cache cases must reach the real
  file; its folders may appear with it. Anything else that changes is a failure.

Deadlines: a full demo session takes 5-10 s on the 2-core development machine (2-3 s forked warm), 20 s
when it is shared. 60 s is the default (a hang, or a walk exponential in the input, is caught; a loaded
machine is not taken for one). A session that meets a deep recursion prints its long traceback-free
report in ~20 s: 60 s holds. The 5M-row table gets 180 s: pyarrow reads ~100 MB and several audits scan
every row once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bounded import SessionForker, run_bounded
from capsules import listed_files

from runaudit.atomic import write_json_atomic
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.hashing import HashCache
from runaudit.ids import report_stem
from runaudit.manifest import MANIFEST, MAX_JSON_DEPTH, RECEIPT, json_depth
from runaudit.reports.document import REPORT_DEPTH, plain
from runaudit.reports.index import read_reports
from runaudit.reports.schema import report_problems
from runaudit.resolve import Location, Root
from runaudit.run import Run
from runaudit.verdict import EVIDENCE_DEPTH, SHOWN_CHARS, printable

MEMORY_CEILING = 4 << 30  # bytes of address space for the session: a runaway read dies, not the host
DEFAULT_DEADLINE_S = 60
# What a report or a terminal must never show raw: control codes (an ESC retitles a terminal window or hides
# a line), the Unicode line separators, bidirectional overrides.
ACTING = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
DEEP = 100_000  # past any parser's stack: refused while parsing
WALKABLE = 900  # parses from a shallow stack, but breaks any walker that recurses once or more per level
HASH_CACHE = ("cache", "runaudit", "sha256.json")
REPORT_CEILING = 8 << 20  # bytes of the JSON report (the demo's is ~0.5 MiB): no box value is copied whole
LONG_ID = 64 << 20  # characters of one results-table id cell
LONG_LABEL = 64 << 10  # characters of each class label


# -- building damage ------------------------------------------------------------------------------------


def _deep_list(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _deep_object(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def _with_deep_key(path: Path, depth: int) -> None:
    """``path``'s own JSON object with one more key holding ``depth`` nested objects (valid JSON)."""
    text = json.dumps(json.loads(path.read_bytes()))
    path.write_bytes(text[:-1].encode() + b', "zz_deep": ' + _deep_object(depth) + b"}")


def _edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=2))


def _manifest(project: Path) -> Path:
    return project / "_trust" / "pulls" / DEMO_RUN_ID / MANIFEST


def _receipt(project: Path) -> Path:
    return project / "_trust" / "pulls" / DEMO_RUN_ID / RECEIPT


def _hash_cache(project: Path) -> Path:
    return project.joinpath(*HASH_CACHE)


def _cache_replaced(name: str, by: str) -> Damage:
    """``cache/runaudit/<name>`` (``name`` "" for the folder itself) replaced by a folder, a file, or a link
    to a folder outside the project: the caches only save time, so each costs a fresh hash and nothing else.
    """

    def damage(project: Path, capsule: Path, outside: Path) -> None:
        path = project.joinpath(*HASH_CACHE[:-1], name) if name else project.joinpath(*HASH_CACHE[:-1])
        if path.is_dir():
            shutil.move(path, outside / "moved-cache")
        else:
            path.unlink(missing_ok=True)
        if by == "folder":
            path.mkdir()
        elif by == "file":
            path.write_text("not a folder")
        else:
            path.symlink_to(outside / "moved-cache", target_is_directory=True)

    return damage


def _yaml_bomb(capsule: Path) -> None:
    """Billion laughs: nine aliases of nine aliases ... (10^9 leaves once expanded, a few hundred bytes)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        previous = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([previous] * 9)}]")
    (capsule / "config.yaml").write_text("\n".join(lines) + "\n")


def _rebind_best(capsule: Path, payload: Any) -> None:
    """Save ``payload`` as best.pth and bind run.json to its bytes, so the content itself is judged."""
    import torch  # deferred: only checkpoint cases need it

    torch.save(payload, capsule / "best.pth")
    digest = hashlib.sha256((capsule / "best.pth").read_bytes()).hexdigest()
    _edit_json(capsule / "run.json", lambda run: run["checkpoints"]["best"].update(sha256=digest))


def _rezip_best(change: Callable[[dict[str, bytes], str], list[tuple[str, bytes]]]) -> Callable[[Path], None]:
    """best.pth's zip entries rewritten by ``change(entries, data.pkl's name)``, run.json bound to the result."""

    def apply(capsule: Path) -> None:
        import zipfile

        path = capsule / "best.pth"
        with zipfile.ZipFile(path) as archive:
            entries = {name: archive.read(name) for name in archive.namelist()}
        pickled = next(name for name in entries if name.endswith("/data.pkl"))
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it is asked to write
            for name, data in change(entries, pickled):
                archive.writestr(name, data)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        _edit_json(capsule / "run.json", lambda run: run["checkpoints"]["best"].update(sha256=digest))

    return apply


def _storage_claims_4_gib(entries: dict[str, bytes], pickled: str) -> list[tuple[str, bytes]]:
    """The first storage's element count in data.pkl rewritten to 2^30 (4 GiB of float32)."""
    data = entries[pickled]
    at = data.index(b"cpu")
    opcode = min(found for found in (data.find(code, at) for code in (b"J", b"M", b"K")) if found > 0)
    width = {b"J": 5, b"M": 3, b"K": 2}[data[opcode : opcode + 1]]
    entries[pickled] = data[:opcode] + b"J" + (1 << 30).to_bytes(4, "little") + data[opcode + width :]
    return list(entries.items())


def _data_pkl_twice(entries: dict[str, bytes], pickled: str) -> list[tuple[str, bytes]]:
    """A second data.pkl entry (an empty dict) after the first: torch reads one, ``zipfile`` the other."""
    return [*entries.items(), (pickled, b"\x80\x02}q\x00.")]


def _bound_config(change: Callable[[str], str]) -> Callable[[Path], None]:
    """config.yaml changed by ``change``, with run.json bound to the new bytes, so the content itself is
    judged (not only the changed digest)."""

    def apply(capsule: Path) -> None:
        config = capsule / "config.yaml"
        config.write_text(change(config.read_text()))
        digest = hashlib.sha256(config.read_bytes()).hexdigest()
        _edit_json(capsule / "run.json", lambda run: run["config"].update(sha256=digest))

    return apply


_config_key_twice = _bound_config(lambda text: text + "data:\n  dataset: another\n")
# One 8 MiB scalar and 190k aliases of it: under the node budget, 1.5 TB once a walker copies the tree.
_config_alias_of_a_long_scalar = _bound_config(
    lambda text: (
        text.replace("schedule: cosine", "schedule: &s " + "x" * (8 << 20))
        + f"other: [{', '.join(['*s'] * 190_000)}]\n"
    )
)
# Two merges into one mapping: the second silently wins (lr 0.5, not 0.1).
_config_merge_key_twice = _bound_config(
    lambda text: (
        "base1: &b1 {lr: 0.1}\nbase2: &b2 {lr: 0.5}\n"
        + text.replace("train:\n", "train:\n  <<: *b1\n  <<: *b2\n").replace("  lr: 0.003\n", "")
    )
)
# Bytes where a setting should be: safe_load builds them, and every consumer that keys or compares the
# config as data (the demo's evaluation, JSON evidence) fails on them far from the file.
_config_binary_value = _bound_config(lambda text: text + "blob: !!binary aGVsbG8=\n")


def _best_state(capsule: Path) -> dict[str, Any]:
    import torch

    return torch.load(capsule / "best.pth", weights_only=True)


def _deep_checkpoint(capsule: Path) -> None:
    """best.pth holding the real state plus a list nested 20 000 deep.

    Pickling it recurses once per level in C, so it is saved on a thread with a large stack.
    """
    state = _best_state(capsule)
    nested: list[Any] = []
    for _ in range(20_000):
        nested = [nested]
    state["nested"] = nested
    failure: list[BaseException] = []

    def save() -> None:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(200_000)
        try:
            _rebind_best(capsule, state)
        except BaseException as exc:  # handed back below
            failure.append(exc)
        finally:
            sys.setrecursionlimit(limit)

    size = threading.stack_size(512 << 20)
    try:
        worker = threading.Thread(target=save)
        worker.start()
        worker.join()
    finally:
        threading.stack_size(size)
    if failure:
        raise failure[0]


def _results_rows(capsule: Path, rows: int) -> None:
    """results.parquet with ``rows`` rows of the demo's own columns and types (its rows repeated).

    The copies are chained, not gathered: the file's bytes are those of ``table.take(arange(rows) % n)``
    at a third of the cost (the gather alone took ~3 s of CPU for 5M rows).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = capsule / "test" / "main" / "results.parquet"
    table = pq.read_table(path)
    copies = -(-rows // table.num_rows)
    pq.write_table(pa.concat_tables([table] * copies).slice(0, rows), path)


def _results_wrong_types(capsule: Path) -> None:
    """results.parquet whose every column holds strings (numbers as text, lists as their repr)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = capsule / "test" / "main" / "results.parquet"
    table = pq.read_table(path)
    columns = {
        name: pa.array([str(value) for value in table[name].to_pylist()]) for name in table.column_names
    }
    pq.write_table(pa.table(columns), path)


def _results_change(change: Callable[[Any], Any], **write: Any) -> Callable[[Path], None]:
    """results.parquet rewritten as ``change(table)`` (``write``: pyarrow's write options)."""

    def damage(capsule: Path) -> None:
        import pyarrow.parquet as pq

        path = capsule / "test" / "main" / "results.parquet"
        pq.write_table(change(pq.read_table(path)), path, **write)

    return damage


def _output_not_finite(table: Any) -> Any:
    """Every ``output`` vector opening with NaN and inf, on rows still marked ``forward_finite``."""
    import pyarrow as pa

    vectors = [[float("nan"), float("inf"), *vector[2:]] for vector in table["output"].to_pylist()]
    return table.set_column(
        table.schema.get_field_index("output"), "output", pa.array(vectors, pa.list_(pa.float32()))
    )


def _outputs_near_the_largest_float(table: Any) -> Any:
    """Every ``output`` vector the same, of float64 values near the largest: a model collapsed to one output."""
    import pyarrow as pa

    width = len(table["output"][0].as_py())
    vectors = pa.array([[1e308] * width] * table.num_rows, pa.list_(pa.float64()))
    return table.set_column(table.schema.get_field_index("output"), "output", vectors)


def _not_utf8(column: str, rows: tuple[int, ...]) -> Callable[[Any], Any]:
    """``column`` as strings with a byte that is not UTF-8 after the text of ``rows`` (pyarrow writes and
    reads such strings without a check)."""

    def change(table: Any) -> Any:
        import pyarrow as pa

        values = [str(value).encode() for value in table[column].to_pylist()]
        for row in rows:
            values[row] += b"\xff"
        broken = pa.array(values, pa.binary()).view(pa.string())
        return table.set_column(table.schema.get_field_index(column), column, broken)

    return change


def _accuracy_infinite(table: Any) -> Any:
    """Every item scored an infinite ``m.accuracy``, its rows still ``valid``."""
    import pyarrow as pa

    column = pa.array([float("inf")] * table.num_rows, pa.float64())
    return table.set_column(table.schema.get_field_index("m.accuracy"), "m.accuracy", column)


def _times_not_finite(table: Any) -> Any:
    """A split manifest ``time`` column of NaN and inf only: no row can be placed in time."""
    import pyarrow as pa

    return pa.array([float("nan") if row % 2 else float("inf") for row in range(table.num_rows)])


# What the strings of one hostile column decode to: 5 MiB on each of the 718 rows of the demo's full test
# split, 3.6 GB, past what a table may decode to (``runaudit.reader.TABLE_MEMORY_CAP``).
DECODED_COLUMN = 718 * (5 << 20)


def _one_string_on_every_row(rows: int) -> Any:
    """One string on each of ``rows`` rows, :data:`DECODED_COLUMN` bytes in all, built as the dictionary a
    parquet writer makes of it.

    Written without Arrow's schema (``store_schema=False``), the file is what a writer of the plain column
    leaves (a dictionary page holding the string once, and run-length indices) and reads back as plain
    strings; building the plain column instead costs 3.6 GB and ~15 s of CPU per case.
    """
    import pyarrow as pa

    return pa.DictionaryArray.from_arrays(
        pa.array([0] * rows, pa.int32()), pa.array(["a" * -(-DECODED_COLUMN // rows)])
    )


def _with_blob(table: Any) -> Any:
    """An extra column of the run's own, one string a row: the 10 KB file decodes to 3.6 GB."""
    return table.append_column("blob", _one_string_on_every_row(table.num_rows))


def _label_of_gigabytes(table: Any) -> Any:
    """The contract's ``target`` column as one label on every row, 3.6 GB in all (a dictionary page holds it
    once)."""
    labels = _one_string_on_every_row(table.num_rows)
    return table.set_column(table.schema.get_field_index("target"), "target", labels)


def _sample_id_twice(table: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_arrays(
        [*table.columns, table["sample_id"]], names=[*table.column_names, "sample_id"]
    )


def _results_column(name: str, kind: str) -> Damage:
    """results.parquet with its optional column ``name`` rewritten as another kind of value, row by row."""

    def damage(capsule: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = capsule / "test" / "main" / "results.parquet"
        table = pq.read_table(path)
        values = table[name].to_pylist()
        rewritten = {
            "map": lambda: pa.array([[("k", value)] for value in values], pa.map_(pa.string(), pa.int64())),
            "struct": lambda: pa.array([{"a": value, "b": 0} for value in values]),
            "nulls": lambda: pa.nulls(len(values)),
            "nested-lists": lambda: pa.array([[value] for value in values]),
            "bool": lambda: pa.array([True] * len(values)),
        }[kind]()
        pq.write_table(table.set_column(table.schema.get_field_index(name), name, rewritten), path)

    return _on_capsule(damage)


def _results_long_id(capsule: Path) -> None:
    """results.parquet whose first condition_id is a 64 MiB string (a 0.3 MiB file: it compresses).

    Every audit that names the row repeated it: the session once wrote a report of gigabytes, and at 300
    MiB was killed for memory with no report at all.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = capsule / "test" / "main" / "results.parquet"
    table = pq.read_table(path)
    conditions = table["condition_id"].to_pylist()
    conditions[0] = "c" * LONG_ID
    index = table.column_names.index("condition_id")
    pq.write_table(table.set_column(index, "condition_id", pa.array(conditions)), path)


def _results_long_labels(capsule: Path) -> None:
    """results.parquet whose ``pred`` and ``target`` are string labels of 64 KiB each (the probes compared
    them as fixed-width arrays of 256 KiB per item)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = capsule / "test" / "main" / "results.parquet"
    table = pq.read_table(path)
    for name in ("pred", "target"):
        labels = pa.array([f"{'class' * (LONG_LABEL // 5)}{value}" for value in table[name].to_pylist()])
        table = table.set_column(table.column_names.index(name), name, labels)
    pq.write_table(table, path)


def _symlinked_capsule(project: Path, capsule: Path, outside: Path) -> str:
    """``runs/demo`` is a link to a copy outside the root (a mount of the box); audited by path."""
    target = outside / DEMO_RUN_ID
    shutil.copytree(capsule, target)
    shutil.rmtree(capsule)
    (project / "runs").mkdir()
    (project / "runs" / DEMO_RUN_ID).symlink_to(target, target_is_directory=True)
    return str(project / "runs" / DEMO_RUN_ID)


def _folder_swapped_for_link(project: Path, capsule: Path, outside: Path) -> None:
    elsewhere = outside / "test"
    shutil.copytree(capsule / "test", elsewhere)
    shutil.rmtree(capsule / "test")
    (capsule / "test").symlink_to(elsewhere, target_is_directory=True)


def _folder_a_symlink_loop(project: Path, capsule: Path, outside: Path) -> None:
    """``test -> test``: resolving any path through it loops (Python 3.11 raised RuntimeError in the audit)."""
    shutil.move(capsule / "test", outside / "test")
    (capsule / "test").symlink_to("test", target_is_directory=True)


def _tamper_byte(capsule: Path) -> None:
    csv = capsule / "train.csv"
    text = csv.read_text()
    position = text.index("\n") + 5  # inside the first data row, same size
    csv.write_text(text[:position] + ("1" if text[position] != "1" else "2") + text[position + 1 :])


class _Payload:
    """Unpickling this object would create a folder: proof that code ran (it must never run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def _nonfinite_tensor(capsule: Path) -> None:
    state = _best_state(capsule)
    first = next(iter(state["model"]))
    state["model"][first] = state["model"][first].clone()
    state["model"][first].view(-1)[3] = float("nan")
    _rebind_best(capsule, state)


def _truncated_zip(capsule: Path) -> None:
    best = capsule / "best.pth"
    data = best.read_bytes()[:-4096]
    best.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    _edit_json(capsule / "run.json", lambda run: run["checkpoints"]["best"].update(sha256=digest))


def _unsafe_manifest_path(project: Path) -> None:
    def add(document: dict[str, Any]) -> None:
        document["files"].append({"path": "demo/../../etc/passwd", "bytes": 1, "sha256": "0" * 64})

    _edit_json(_manifest(project), add)


# -- the corpus -----------------------------------------------------------------------------------------

Damage = Callable[[Path, Path, Path], "str | None"]  # (project, capsule, outside) -> a --run spec, or None


@dataclass(frozen=True)
class Case:
    """One hostile input: how to make it, which audits own it, and what the report must show."""

    id: str
    damage: Damage
    owners: tuple[str, ...] = ()  # "audit" or "audit[subject]" owning the broken part: reached, never passed
    failing: tuple[str, ...] = ()  # owners that must say ``failed``, in one line
    # Audits downstream of the broken part: they need it whole, so they must say ``not_run`` (never compute
    # on what its owner failed).
    downstream: tuple[str, ...] = ()
    shows: str = ""  # text that the JSON report's messages and the page must both hold
    deadline_s: int = DEFAULT_DEADLINE_S
    # The broken file is the regenerable hash cache: it is not the run's defect, so no audit may fail for
    # it; every file is hashed fresh instead and every manifest.sha256 verdict passes on fresh bytes.
    regenerable: bool = False


def _on_capsule(damage: Callable[[Path], object]) -> Damage:
    def apply(project: Path, capsule: Path, outside: Path) -> None:
        damage(capsule)

    return apply


def _on_project(damage: Callable[[Path], object]) -> Damage:
    def apply(project: Path, capsule: Path, outside: Path) -> None:
        damage(project)

    return apply


def _run_json_change(change: Callable[[dict[str, Any]], object]) -> Damage:
    """run.json rewritten as ``change`` leaves its parsed document."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        document = json.loads((capsule / "run.json").read_text())
        change(document)
        (capsule / "run.json").write_text(json.dumps(document, indent=2))

    return apply


def _selection_change(change: Callable[[dict[str, Any]], object]) -> Damage:
    """The test's selection rewritten as ``change`` leaves it, and bound again by run.json (a run that
    wrote it so): only the selection's own contract can refuse it."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        document = json.loads((capsule / "run.json").read_text())
        [selection] = document["selections"]
        path = project / "_trust" / "selections" / f"{selection['selection_id']}.json"
        content = json.loads(path.read_text())
        change(content)
        path.write_text(json.dumps(content))
        selection["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        (capsule / "run.json").write_text(json.dumps(document, indent=2))

    return apply


def _split_change(change: Callable[[Any], Any], **write: Any) -> Damage:
    """The bound split manifest rewritten as ``change(table)`` (``write``: pyarrow's write options), and
    bound again by run.json: only the manifest's own contract can refuse it."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        import pyarrow.parquet as pq

        document = json.loads((capsule / "run.json").read_text())
        path = project / "_trust" / "splits" / f"{document['split']['split_id']}.parquet"
        pq.write_table(change(pq.read_table(path)), path, **write)
        document["split"]["manifest_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        (capsule / "run.json").write_text(json.dumps(document, indent=2))

    return apply


def _split_column(name: str, values: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A split manifest table with column ``name`` replaced by ``values(table)`` (added when absent)."""

    def change(table: Any) -> Any:
        index = table.schema.get_field_index(name)
        column = values(table)
        return table.append_column(name, column) if index < 0 else table.set_column(index, name, column)

    return change


def _each_wrapped(column: str, wrap: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Column ``column``'s values, each wrapped by ``wrap`` (in a list, in a struct)."""

    def values(table: Any) -> Any:
        import pyarrow as pa

        return pa.array([wrap(value) for value in table.column(column).to_pylist()])

    return values


def _write(where: Callable[[Path, Path], Path], data: bytes) -> Damage:
    """Replace (or create) the file ``where(project, capsule)`` with ``data``."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        path = where(project, capsule)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return apply


def _replace_text(rel: str, old: str, new: str) -> Damage:
    """Edit the text of ``<capsule>/<rel>`` in place (for what ``json.dumps`` cannot write)."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        path = capsule / rel
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))

    return apply


def _replace_number(rel: str, key: str, new: str) -> Damage:
    """Write ``new`` as the first number of ``"key": <number>`` in ``<capsule>/<rel>`` (a value trained on
    this machine, so matched by its shape rather than its digits)."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        path = capsule / rel
        text, count = re.subn(rf'("{key}": )-?[0-9][0-9.eE+-]*', rf"\g<1>{new}", path.read_text(), count=1)
        assert count == 1, f"{rel} has no number under {key!r}"
        path.write_text(text)

    return apply


def _replace_bytes(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def _reencode(rel: str, encoding: str) -> Damage:
    """``<capsule>/<rel>``'s text in another encoding."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        path = capsule / rel
        path.write_bytes(path.read_text(encoding="utf-8").encode(encoding))

    return apply


def _blank_lines_after_train_csv(capsule: Path) -> None:
    """64 MiB of blank lines after ``train.csv``'s rows."""
    with (capsule / "train.csv").open("ab") as handle:
        handle.write(b"\n" * (64 << 20))


def _train_csv_cell(column: str, value: str) -> Damage:
    """Write ``value`` into ``column`` of the first row of ``train.csv``."""

    def apply(project: Path, capsule: Path, outside: Path) -> None:
        path = capsule / "train.csv"
        lines = path.read_text().splitlines()
        header = lines[0].split(",")
        cells = lines[1].split(",")
        cells[header.index(column)] = value
        lines[1] = ",".join(cells)
        path.write_text("\n".join(lines) + "\n")

    return apply


def _test_folder_as_file(capsule: Path) -> None:
    """``test/<id>`` of a declared test is a file: every audit that lists the capsule crashed on it."""
    shutil.rmtree(capsule / "test" / "main")
    (capsule / "test" / "main").write_bytes(b"not a folder")


def _fifo_run_json(capsule: Path) -> None:
    (capsule / "run.json").unlink()
    os.mkfifo(capsule / "run.json")


def _not_utf8_name(capsule: Path) -> None:
    with open(os.fsencode(capsule) + b"/bad\xff.txt", "wb") as handle:
        handle.write(b"a file whose name is not UTF-8")


def _png_named_with_a_terminal_escape(capsule: Path) -> None:
    """An extra vis PNG whose name sets the terminal's title (OSC 0 ... BEL) and breaks the line."""
    folder = capsule / "test" / "main" / "vis" / "clean" / "input"
    shutil.copy(next(folder.glob("*.png")), folder / "d\x1b]0;pwned\x07\n.png")


def _tracker_run_not_utf8(capsule: Path) -> None:
    """A TensorBoard run folder whose name is not UTF-8: tracker folders are the run's to name, as text."""
    folder = os.fsencode(capsule) + b"/trackers/tensorboard/r\xff"
    os.makedirs(folder)
    with open(folder + b"/events.out.tfevents.1", "wb") as handle:
        handle.write(b"")


def _folders_past_the_path_limit(capsule: Path) -> None:
    """20 nested folders of 250-character names under test/main: past the system's path length limit
    (PATH_MAX, 4096 bytes) before the end, so made relative to a folder descriptor."""
    descriptor = os.open(capsule / "test" / "main", os.O_RDONLY)
    try:
        for _ in range(20):
            os.mkdir("d" * 250, dir_fd=descriptor)
            inner = os.open("d" * 250, os.O_RDONLY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = inner
    finally:
        os.close(descriptor)


def _more_entries_than_are_listed(capsule: Path) -> None:
    """One folder of a file more than a capsule's listing holds: 200,000 empty files took a session 24 s
    and 713 MB, and millions exhaust the memory before the report is written."""
    from runaudit.capsule import LISTED_ENTRIES

    folder = capsule / "extra" / "many"
    folder.mkdir(parents=True)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        for index in range(LISTED_ENTRIES + 1):
            os.close(os.open(f"f{index}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=descriptor))
    finally:
        os.close(descriptor)


def _tracker_log(where: str, make: Callable[[Path], object]) -> Callable[[Path], None]:
    """A TensorBoard event file at ``trackers/tensorboard/<where>`` made by ``make(path)``."""

    def damage(capsule: Path) -> None:
        path = capsule / "trackers" / "tensorboard" / where / "events.out.tfevents.1.host"
        path.parent.mkdir(parents=True)
        make(path)

    return damage


def _link_out_of_the_root(project: Path, capsule: Path, outside: Path) -> None:
    (capsule / "test" / "main" / "link.txt").symlink_to(outside / "note.txt")


def _manifest_into_the_capsule(project: Path, capsule: Path, outside: Path) -> None:
    shutil.move(_manifest(project), capsule / MANIFEST)


def _pickle_payload(project: Path, capsule: Path, outside: Path) -> None:
    _rebind_best(capsule, {**_best_state(capsule), "extra": _Payload(outside / "payload-ran")})


def _deep_unique_items(capsule: Path) -> None:
    """Two equal deep lists where run.json's schema asks for unique items (jsonschema compares them)."""
    deep = json.loads(_deep_list(WALKABLE))
    _edit_json(capsule / "run.json", lambda run: run["tests"][0].update(conditions=[deep, deep]))


def _cache_entry_without_digest(project: Path, capsule: Path, outside: Path) -> None:
    """A cache entry with train.csv's exact stat key but no digest after it (a torn or forged cache)."""
    from runaudit.hashing import stat_key

    entry = stat_key(os.lstat(capsule / "train.csv"))
    path = _hash_cache(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "entries": {str(capsule / "train.csv"): entry}}))


def _older_manifest(project: Path) -> None:
    _edit_json(_manifest(project), lambda document: document.update(created_utc="2026-01-01T00:00:00Z"))


RUN_JSON = ("capsule.run_json_schema",)
METRICS = ("capsule.metrics_schema",)
RESULTS_TABLE = ("capsule.results_table",)
TRAIN_CSV = ("capsule.train_csv",)
HISTORY = ("history.finite", "history.counters", "history.loss_bound", "history.lr_schedule")
PRESENT = ("manifest.present",)
RECEIPT_AUDIT = ("manifest.receipt",)
BEST_SAFE_LOAD = "checkpoint.safe_load[best.pth]"


def _run_json(project: Path, capsule: Path) -> Path:
    return capsule / "run.json"


def _metrics(project: Path, capsule: Path) -> Path:
    return capsule / "test" / "main" / "metrics.json"


CASES = [
    # 1. nesting past the parser's stack, and nesting the parser takes but any recursive walker would not
    Case(  # an unreadable run.json declares no task: rl_iqm said not_applicable, as if it knew
        "run-json-deep-list",
        _write(_run_json, _deep_list(DEEP)),
        RUN_JSON,
        RUN_JSON,
        downstream=("variance.rl_iqm",),
    ),
    Case("run-json-deep-object", _write(_run_json, _deep_object(DEEP)), RUN_JSON, RUN_JSON),
    Case(
        "run-json-walkable-deep",
        _on_capsule(lambda capsule: _with_deep_key(capsule / "run.json", WALKABLE)),
        RUN_JSON,
        RUN_JSON,
    ),
    Case("run-json-deep-unique-items", _on_capsule(_deep_unique_items), RUN_JSON, RUN_JSON),
    Case(
        "manifest-deep-list",
        _write(lambda p, c: _manifest(p), _deep_list(DEEP)),
        PRESENT,
        PRESENT,
        shows="PULL_MANIFEST.json is not valid JSON (nested too deeply",
    ),
    Case(
        "manifest-walkable-deep",
        _on_project(lambda project: _with_deep_key(_manifest(project), WALKABLE)),
        PRESENT,
        PRESENT,
    ),
    Case("metrics-deep-object", _write(_metrics, _deep_object(DEEP)), METRICS, METRICS),
    Case(
        "metrics-walkable-deep",
        _on_capsule(lambda capsule: _with_deep_key(capsule / "test" / "main" / "metrics.json", WALKABLE)),
        METRICS,
        METRICS,
    ),
    Case(
        "receipt-deep-list", _write(lambda p, c: _receipt(p), _deep_list(DEEP)), RECEIPT_AUDIT, RECEIPT_AUDIT
    ),
    Case(  # the receipt audit said "... are required properties": why it could not be read was lost
        "receipt-duplicate-key",
        _write(lambda p, c: _receipt(p), b'{"pull_id": "demo", "pull_id": "other"}'),
        RECEIPT_AUDIT,
        RECEIPT_AUDIT,
        shows="duplicate key",
    ),
    Case(
        "receipt-walkable-deep",
        _on_project(lambda project: _with_deep_key(_receipt(project), WALKABLE)),
        RECEIPT_AUDIT,
        RECEIPT_AUDIT,
    ),
    Case("hash-cache-deep-object", _write(lambda p, c: _hash_cache(p), _deep_object(DEEP)), regenerable=True),
    Case(
        "hash-cache-walkable-entry",
        _write(
            lambda p, c: _hash_cache(p), b'{"version": 1, "entries": {"x": ' + _deep_list(WALKABLE) + b"}}"
        ),
        regenerable=True,
    ),
    Case("hash-cache-entry-without-digest", _cache_entry_without_digest, regenerable=True),
    Case("hash-cache-is-a-folder", _cache_replaced("sha256.json", "folder"), regenerable=True),
    Case("inspection-cache-is-a-folder", _cache_replaced("inspections.json", "folder"), regenerable=True),
    Case("cache-folder-is-a-file", _cache_replaced("", "file"), regenerable=True),
    Case("cache-folder-links-out-of-the-project", _cache_replaced("", "link"), regenerable=True),
    # 2. names and strings that have no UTF-8 form
    Case(
        "file-name-not-utf8",
        _on_capsule(_not_utf8_name),
        ("capsule.closed_world",),
        ("capsule.closed_world",),
        shows="bad\\xff.txt",
    ),
    Case(
        "vis-png-name-with-a-terminal-escape",
        _on_capsule(_png_named_with_a_terminal_escape),
        ("capsule.vis_coverage[main]",),
        ("capsule.vis_coverage[main]",),
        shows="d\\x1b]0;pwned\\x07",
    ),
    Case(
        "tracker-folder-name-not-utf8",
        _on_capsule(_tracker_run_not_utf8),
        ("capsule.closed_world",),
        ("capsule.closed_world",),
        downstream=("history.tracker_agrees",),
        shows="trackers/tensorboard/r\\xff/",
    ),
    Case(  # the listing of the capsule ended the session in INTERNALERROR (ENAMETOOLONG), with no report
        "capsule-folders-past-the-path-limit",
        _on_capsule(_folders_past_the_path_limit),
        ("capsule.closed_world", "manifest.path_safety"),
        ("capsule.closed_world", "manifest.path_safety"),
    ),
    Case(
        "capsule-of-more-entries-than-are-listed",
        _on_capsule(_more_entries_than_are_listed),
        ("capsule.closed_world", "manifest.path_safety"),
        ("capsule.closed_world", "manifest.path_safety"),
        shows="extra/many/ was not listed",
    ),
    # A tracker log that is there but unreadable: history.tracker_agrees said "the capsule seals no tracker
    # logs" (not_applicable), as if it had nothing to check.
    Case(
        "tracker-log-a-fifo",
        _on_capsule(_tracker_log("run1", os.mkfifo)),
        ("capsule.forbidden_paths",),
        ("capsule.forbidden_paths",),
        downstream=("history.tracker_agrees",),
    ),
    Case(
        "tracker-log-too-deep",
        _on_capsule(_tracker_log("a/b/c/d/e/f", lambda path: path.write_bytes(b""))),
        ("capsule.closed_world",),
        ("capsule.closed_world",),
        downstream=("history.tracker_agrees",),
    ),
    Case(
        "run-json-lone-surrogate",
        _replace_text("run.json", '"test_id": "main"', '"test_id": "ma\\ud800in"'),
        RUN_JSON,
        RUN_JSON,
        shows="\\ud800",
    ),
    # run.json's run_id named the session's run: the report went to reports/<that>.json (an earlier
    # reports/demo.json "yes" stayed), the manifest was looked up under it, and one too long for a file
    # name ended the session without a report.
    Case(
        "run-json-renames-the-run",
        _replace_text("run.json", '"run_id": "demo"', '"run_id": "victim"'),
        ("capsule.ids",),
        ("capsule.ids",),
        shows="differs from run_id",
    ),
    Case(
        "run-json-run-id-too-long-for-a-file-name",
        _replace_text("run.json", '"run_id": "demo"', '"run_id": "' + "r" * 240 + '"'),
        ("capsule.ids",),
        ("capsule.ids",),
    ),
    # Wide rather than deep: 66 MB of empty lists passes the size cap and the depth check, and took 39 s and
    # 3 GB to parse (a manifest is parsed more than once: past the memory ceiling). Other encodings: json.loads
    # takes UTF-16 and a byte-order mark, which the contract's plain UTF-8 does not.
    Case(
        "manifest-22m-empty-lists",
        _write(lambda p, c: _manifest(p), b"[" + b"[]," * 22_000_000 + b"[]]"),
        PRESENT,
        PRESENT,
        shows="more than the 4000000",
    ),
    Case("run-json-utf16", _reencode("run.json", "utf-16"), RUN_JSON, RUN_JSON, shows="not UTF-8"),
    Case("run-json-byte-order-mark", _reencode("run.json", "utf-8-sig"), RUN_JSON, RUN_JSON),
    # Numbers JSON has no form for, and counters past a float: schema audits took NaN for a number, and the
    # history audits read a 5000-digit epoch as inf, or computed on a step the contract had failed.
    Case("metrics-json-nan", _replace_number("test/main/metrics.json", "value", "NaN"), METRICS, METRICS),
    Case("metrics-json-1e400", _replace_number("test/main/metrics.json", "value", "1e400"), METRICS, METRICS),
    Case("run-json-infinity", _replace_number("run.json", "value", "-Infinity"), RUN_JSON, RUN_JSON),
    Case(
        "run-json-integer-past-a-float",
        _replace_number("run.json", "n_test", "9" * 400),
        RUN_JSON,
        RUN_JSON,
        shows="309+ digits",
    ),
    Case(  # csv reads the rest of the file as one field: capsule.train_csv failed, the selection replayed it
        "train-csv-unterminated-quote",
        _on_capsule(lambda capsule: _replace_bytes(capsule / "train.csv", b"\n2,", b'\n"2,')),
        TRAIN_CSV,
        TRAIN_CSV,
        downstream=("checkpoint.selection", *HISTORY),
    ),
    Case("train-csv-5000-digit-epoch", _train_csv_cell("epoch", "9" * 5000), TRAIN_CSV + HISTORY, TRAIN_CSV),
    Case(  # ~7 pyarrow calls per column, before any audit ran (the report parses it at session start): 251 s
        "train-csv-a-million-columns",
        _write(
            lambda project, capsule: capsule / "train.csv",
            (
                ",".join(["epoch", "step", "train_loss", *(f"c{i}" for i in range(10**6))]) + "\n0,0,1.0\n"
            ).encode(),
        ),
        TRAIN_CSV + HISTORY,
        TRAIN_CSV,
        downstream=HISTORY,
        shows="fields, past the 1,024 allowed",
    ),
    Case(  # one list kept per blank line: 248 s, then MemoryError under the ceiling and 12 error verdicts
        "train-csv-64-mib-of-blank-lines",
        _on_capsule(_blank_lines_after_train_csv),
        TRAIN_CSV + HISTORY,
        TRAIN_CSV,
        downstream=HISTORY,
        shows="more than 2,000,000 lines",
    ),
    Case("train-csv-step-past-a-float", _train_csv_cell("step", "1e400"), TRAIN_CSV + HISTORY, TRAIN_CSV),
    Case("test-folder-replaced-by-a-file", _on_capsule(_test_folder_as_file), ("capsule.closed_world",)),
    # 3. other hostile bytes (several are being fixed outside this file: see the module docstring)
    Case("config-yaml-alias-bomb", _on_capsule(_yaml_bomb), ("capsule.config_hash",)),
    Case(
        "config-yaml-alias-of-a-long-scalar",
        _on_capsule(_config_alias_of_a_long_scalar),
        ("capsule.config_hash",),
        ("capsule.config_hash",),
        shows="MiB of text through its aliases",
    ),
    Case(
        "config-yaml-merge-key-twice",
        _on_capsule(_config_merge_key_twice),
        ("capsule.config_hash",),
        ("capsule.config_hash",),
        shows="names the merge key",
    ),
    # 4. declarations past the contract's bounds: each becomes audit cases, or a read of every entry
    Case(
        "run-json-100k-conditions",
        _run_json_change(lambda run: run["tests"][0].update(conditions=[f"c{i}" for i in range(100_000)])),
        ("capsule.run_json_schema",),
        ("capsule.run_json_schema",),
    ),
    Case(
        "run-json-5000-tests",
        _run_json_change(
            lambda run: run.update(tests=[dict(run["tests"][0], test_id=f"t{i}") for i in range(5000)])
        ),
        ("capsule.run_json_schema",),
        ("capsule.run_json_schema",),
    ),
    Case(
        "selection-2m-ids",
        _selection_change(lambda selection: selection.update(sample_ids=[f"x{i}" for i in range(2_000_000)])),
        ("capsule.selection[main]",),
        ("capsule.selection[main]",),
        ("capsule.vis_coverage[main]",),
    ),
    Case(
        "selection-id-breaking-its-pattern",
        _selection_change(lambda selection: selection["sample_ids"].__setitem__(0, "~d0000")),
        ("capsule.selection[main]",),
        ("capsule.selection[main]",),
        ("capsule.vis_coverage[main]",),
    ),
    Case(
        "config-yaml-binary-value",
        _on_capsule(_config_binary_value),
        ("capsule.config_hash",),
        ("capsule.config_hash",),
        ("evaluation.fresh",),
        shows="!!binary",
    ),
    Case(
        "config-yaml-duplicate-key",
        _on_capsule(_config_key_twice),
        ("capsule.config_hash",),
        ("capsule.config_hash",),
        shows="twice in one mapping",
    ),
    Case(
        "results-5m-rows",
        _on_capsule(lambda capsule: _results_rows(capsule, 5_000_000)),
        ("capsule.results_table",),
        deadline_s=180,
    ),
    Case("results-wrong-column-types", _on_capsule(_results_wrong_types), ("capsule.results_table",)),
    # Optional columns of another kind: the collapse probes crashed on them or counted nonsense as classes.
    *(
        Case(f"results-{name}-as-{kind}", _results_column(name, kind), RESULTS_TABLE, RESULTS_TABLE)
        for name, kind in (
            ("target", "map"),
            ("target", "struct"),
            ("target", "nulls"),
            ("output", "nested-lists"),
            ("output", "bool"),
        )
    ),
    # An 82 KB table under the decoded-size cap that peaked at 11.6 GB; a column named twice crashed ten
    # audits (``error``), capsule.results_table among them.
    Case(  # the run's own column is never decoded: the table holds to its contract
        "results-own-column-decoding-to-3.6-gb",
        _on_capsule(_results_change(_with_blob, compression="zstd", row_group_size=50, store_schema=False)),
    ),
    Case(
        "results-label-column-decoding-to-3.6-gb",
        _on_capsule(
            _results_change(_label_of_gigabytes, compression="zstd", row_group_size=50, store_schema=False)
        ),
        RESULTS_TABLE,
        RESULTS_TABLE,
        shows="decodes to",
    ),
    Case(
        "split-manifest-path-decoding-to-gigabytes",
        _split_change(
            _split_column("path", lambda table: _one_string_on_every_row(table.num_rows)),
            compression="zstd",
            row_group_size=50,
            store_schema=False,
        ),
        ("leakage.split_provenance",),
        downstream=("leakage.cross_split_bytes", "leakage.group_overlap"),
        shows="decodes to",
    ),
    *(
        Case(
            f"split-manifest-{column}-as-{kind}",
            _split_change(_split_column(column, make(column))),
            ("leakage.split_provenance",),
            downstream=("leakage.cross_split_bytes", "leakage.group_overlap"),
            shows=f"column {column} holds",
        )
        for column, kind, make in (
            ("split", "lists", lambda column: _each_wrapped(column, lambda value: [value])),
            ("sample_id", "structs", lambda column: _each_wrapped(column, lambda value: {"id": value})),
            ("group", "structs", lambda column: _each_wrapped("sample_id", lambda value: {"id": value})),
        )
    ),
    Case(  # collapse.output_cosine computed "cosine nan" over outputs the table called finite
        "results-output-not-finite",
        _on_capsule(_results_change(_output_not_finite)),
        RESULTS_TABLE,
        RESULTS_TABLE,
        downstream=("collapse.output_cosine",),
        shows="NaN, ±inf or null although forward_finite is true",
    ),
    Case(  # squared, 1e308 overflowed: every unit vector became 0 and the collapsed outputs' cosine 0, passed
        "results-output-near-the-largest-float",
        _on_capsule(_results_change(_outputs_near_the_largest_float)),
        ("collapse.output_cosine",),
        shows="the model maps different inputs to nearly the same output",
    ),
    Case(  # passed capsule.results_table; three collapse audits then ended in an error on the bad bytes
        "results-sample-id-not-utf8",
        _on_capsule(_results_change(_not_utf8("sample_id", (0, -1)))),  # a row of each condition
        RESULTS_TABLE,
        RESULTS_TABLE,
        downstream=("collapse.output_cosine", "collapse.trivial_baseline"),
    ),
    Case(  # class labels as strings, one of them not UTF-8: two audits ended in an error
        "results-label-not-utf8",
        _on_capsule(_results_change(lambda table: _not_utf8("target", (3,))(_not_utf8("pred", ())(table)))),
        RESULTS_TABLE,
        RESULTS_TABLE,
        downstream=("collapse.prediction_histogram", "collapse.trivial_baseline"),
    ),
    Case(  # the standard error over infinite scores is NaN, which variance.precision read as "no finding"
        "results-metric-infinite",
        _on_capsule(_results_change(_accuracy_infinite)),
        (*RESULTS_TABLE, "variance.precision"),
        RESULTS_TABLE,
        downstream=("variance.precision",),
        shows="hold NaN or ±inf in m.accuracy",
    ),
    Case(  # leakage.temporal_order passed on times of only NaN and inf, its message cut after a colon
        "split-manifest-time-not-finite",
        _split_change(_split_column("time", _times_not_finite)),
        ("leakage.temporal_order",),
        shows="no finite time",
    ),
    Case(
        "results-sample-id-twice",
        _on_capsule(_results_change(_sample_id_twice)),
        RESULTS_TABLE,
        RESULTS_TABLE,
        shows="column sample_id appears 2 times",
    ),
    Case(  # pyarrow's error text spans lines: so did the verdict that quoted it, and every not_run citing it
        "results-not-parquet-between-its-magic",
        _write(lambda p, c: c / "test" / "main" / "results.parquet", b"PAR1" + b"\0" * 100 + b"PAR1"),
        RESULTS_TABLE,
        RESULTS_TABLE,
    ),
    Case(
        "results-64mib-id-cell",
        _on_capsule(_results_long_id),
        ("capsule.results_table",),
        ("capsule.results_table",),
        shows="an id has at most 256",
    ),
    Case(
        "results-64kib-labels",
        _on_capsule(_results_long_labels),
        ("capsule.results_table", "collapse.prediction_histogram", "collapse.trivial_baseline"),
        ("capsule.results_table",),
        shows="a class label has at most 256",
    ),
    # What torch.load(mmap=True) does not check: a storage larger than its record (a plain torch.load
    # refuses the file; the mapped one passed every checkpoint audit), and an entry named twice.
    Case(
        "checkpoint-storage-past-its-record",
        _on_capsule(_rezip_best(_storage_claims_4_gib)),
        (BEST_SAFE_LOAD,),
        (BEST_SAFE_LOAD,),
        shows="but the archive holds",
    ),
    Case(
        "checkpoint-data-pkl-twice",
        _on_capsule(_rezip_best(_data_pkl_twice)),
        (BEST_SAFE_LOAD,),
        (BEST_SAFE_LOAD,),
        shows="twice",
    ),
    Case("checkpoint-20k-deep-list", _on_capsule(_deep_checkpoint), (BEST_SAFE_LOAD,)),
    Case(
        "run-json-duplicate-key",
        _replace_text("run.json", '"kind": "software"', '"kind": "software", "kind": "hardware"'),
        RUN_JSON,
        RUN_JSON,
    ),
    Case(
        "run-json-fifo",
        _on_capsule(_fifo_run_json),
        ("capsule.required_paths[run.json]", "capsule.run_json_schema"),
        ("capsule.required_paths[run.json]",),
    ),
    Case(
        "capsule-folder-symlinked", _symlinked_capsule, ("manifest.path_safety",), ("manifest.path_safety",)
    ),
    # 4. the custody cases of tests/test_custody_audits.py and tests/test_teardown_trust.py, whole sessions
    Case(
        "tampered-byte",
        _on_capsule(_tamper_byte),
        ("manifest.sha256[train.csv]",),
        ("manifest.sha256[train.csv]",),
    ),
    Case(
        "truncated-checkpoint-file",
        _on_capsule(
            lambda capsule: (capsule / "best.pth").write_bytes((capsule / "best.pth").read_bytes()[:1000])
        ),
        ("manifest.size[best.pth]",),
        ("manifest.size[best.pth]",),
    ),
    Case(
        "missing-file",
        _on_capsule(lambda capsule: (capsule / "train.csv").unlink()),
        ("manifest.roster",),
        ("manifest.roster",),
    ),
    Case(
        "symlink-out-of-the-root", _link_out_of_the_root, ("manifest.path_safety",), ("manifest.path_safety",)
    ),
    Case(
        "manifest-dotdot-path",
        _on_project(_unsafe_manifest_path),
        ("manifest.path_safety",),
        ("manifest.path_safety",),
    ),
    # A manifest that fails its own contract: the other manifest audits judged every file against it and
    # passed 406 sizes and 407 digests beside the entry whose size was the string "379".
    Case(
        "manifest-size-as-a-string",
        _on_project(
            lambda project: _edit_json(
                _manifest(project), lambda doc: doc["files"][1].update(bytes=str(doc["files"][1]["bytes"]))
            )
        ),
        (*PRESENT, "manifest.size", "manifest.sha256", "manifest.roster", "manifest.path_safety"),
        PRESENT,
    ),
    Case("manifest-inside-the-capsule", _manifest_into_the_capsule, PRESENT, PRESENT),
    Case("receipt-of-an-older-manifest", _on_project(_older_manifest), RECEIPT_AUDIT, RECEIPT_AUDIT),
    Case("checkpoint-pickle-payload", _pickle_payload, (BEST_SAFE_LOAD,), (BEST_SAFE_LOAD,)),
    Case(
        "checkpoint-nan",
        _on_capsule(_nonfinite_tensor),
        ("checkpoint.finite[best.pth]",),
        ("checkpoint.finite[best.pth]",),
    ),
    Case(
        "checkpoint-truncated-zip",
        _on_capsule(_truncated_zip),
        (BEST_SAFE_LOAD,),
        (BEST_SAFE_LOAD,),
    ),
    Case(
        "folder-swapped-for-a-link",
        _folder_swapped_for_link,
        ("manifest.path_safety", "manifest.receipt"),
        ("manifest.path_safety",),
    ),
    Case(
        "folder-a-symlink-loop",
        _folder_a_symlink_loop,
        ("manifest.path_safety", "manifest.receipt"),
        ("manifest.path_safety",),
    ),
]


# -- running a session, bounded -------------------------------------------------------------------------


def _environment(tmp: Path) -> dict[str, str]:
    """A session's environment, with ``tmp`` as its temp folder. Its figure cache is this test session's
    (``tests/conftest.py``), where a user's is ``~/.cache``: outside the project, keyed by what is drawn, so
    damaged curves are drawn anew and the demo's are drawn once per worker."""
    return {
        **os.environ,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "TMPDIR": str(tmp),  # watched: a session leaves nothing behind in its temp folder either
    }


@pytest.fixture(scope="session")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionForker | None]:
    """This worker's warm session server on Linux (a session then costs ~3 s instead of ~8 s); else None.

    Elsewhere each session is a fresh interpreter: forking after importing torch is unsafe on macOS.
    """
    if sys.platform != "linux":
        yield None
        return
    folder = tmp_path_factory.mktemp("session-server")
    with SessionForker(folder, _environment(folder / "tmp")) as forker:
        yield forker


def _session(
    spec: str, project: Path, cwd: Path, tmp: Path, deadline_s: int, forker: SessionForker | None
) -> tuple[int, str, float]:
    """``python -m pytest --run=<spec> --root=<project>`` in its own process group; killed past the deadline.

    ``--basetemp`` puts pytest's own ``tmp_path`` folders (the smoke audits' scratch) where the command
    line says, as a user may, instead of under ``TMPDIR``: the watched temp folder then shows what the
    harness itself leaves there, which must be nothing.
    """
    args = ["-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider"]
    args += ["--run", spec, "--root", str(project), "--basetemp", str(cwd.parent / "basetemp")]
    log = cwd.parent / "session.log"
    if forker is None:
        run = functools.partial(run_bounded, [sys.executable, "-m", "pytest", *args])
    else:
        run = functools.partial(forker.run, args)
    started = time.monotonic()
    code = run(
        cwd=cwd,
        log=log,
        deadline_s=deadline_s,
        memory_bytes=MEMORY_CEILING,
        what=f"pytest --run={spec}",
        env=_environment(tmp),
    )
    return code, log.read_bytes().decode("utf-8", "backslashreplace"), time.monotonic() - started


def _snapshot(*tops: Path) -> dict[bytes, tuple[Any, ...]]:
    """Every path below ``tops`` (links not followed), as bytes: kind, and size, mtime and inode for files.

    Folders are recorded by existence only: their mtime changes whenever an allowed file appears in them.
    Each entry is read relative to its folder's descriptor: a path may be longer than the system's limit.
    """
    state: dict[bytes, tuple[Any, ...]] = {}
    for top in tops:
        for folder, dirs, files, descriptor in os.fwalk(os.fsencode(top)):
            for name in (*dirs, *files):
                path = os.path.join(folder, name)
                info = os.lstat(name, dir_fd=descriptor)
                kind = stat.S_IFMT(info.st_mode)
                if stat.S_ISREG(info.st_mode):
                    state[path] = (kind, info.st_size, info.st_mtime_ns, info.st_ino)
                elif stat.S_ISLNK(info.st_mode):
                    state[path] = (kind, os.readlink(name, dir_fd=descriptor))
                else:
                    state[path] = (kind,)
    return state


def _allowed(path: bytes, project: Path) -> bool:
    """The report folder, and the regenerable caches (hashes, checkpoint inspections) with their folders."""
    root = os.fsencode(project)
    reports = os.path.join(root, b"reports")
    cache = os.path.join(root, *map(os.fsencode, HASH_CACHE))
    inspections = os.path.join(os.path.dirname(cache), b"inspections.json")
    holders = {os.path.dirname(cache), os.path.dirname(os.path.dirname(cache))}
    return path in {reports, cache, inspections, *holders} or path.startswith(reports + b"/")


def _changes(before: dict[bytes, Any], after: dict[bytes, Any], project: Path) -> list[str]:
    changed = [path for path in before.keys() | after.keys() if before.get(path) != after.get(path)]
    return sorted(os.fsdecode(path) for path in changed if not _allowed(path, project))


def _verdicts_of(report: dict[str, Any], owner: str) -> list[dict[str, Any]]:
    """The verdicts of ``audit`` (every subject) or of ``audit[subject]`` (that one)."""
    audit, _, subject = owner.partition("[")
    return [
        item
        for item in report["verdicts"]
        if item["audit"] == audit and (not subject or item["subject"] == subject[:-1])
    ]


# -- the test -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_reaches_verdicts_and_a_report(
    case: Case, project: Path, capsule_dir: Path, tmp_path: Path, sessions: SessionForker | None
) -> None:
    outside, cwd, tmp = tmp_path / "outside", tmp_path / "session", tmp_path / "tmp"
    for folder in (outside, cwd, tmp):
        folder.mkdir()
    (outside / "note.txt").write_text("bytes outside the project root")
    spec = case.damage(project, capsule_dir, outside) or str(capsule_dir)
    # The server's own temp folder too: a module it imported warm may have resolved TMPDIR to it.
    watched = (project, cwd, tmp, outside, *([sessions.temp] if sessions else []))
    before = _snapshot(*watched)

    code, output, elapsed = _session(spec, project, cwd, tmp, case.deadline_s, sessions)

    assert code != pytest.ExitCode.INTERNAL_ERROR and "INTERNALERROR" not in output, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert elapsed < case.deadline_s
    report_path = project / "reports" / f"{report_stem(DEMO_RUN_ID)}.json"
    assert report_path.is_file(), f"no report (exit {code}):\n{output[-4000:]}"
    assert report_path.with_suffix(".html").is_file()
    assert report_path.stat().st_size < REPORT_CEILING
    report = json.loads(report_path.read_bytes())
    assert report_problems(report) == []
    crashed = [(item["audit"], item["message"]) for item in report["verdicts"] if item["verdict"] == "error"]
    broken = [(item["audit"], item["message"]) for item in report["verdicts"] if "\n" in item["message"]]
    assert not broken, f"{case.id}: messages of more than one line: {broken[:3]}"
    acting = [
        (item["audit"], item["subject"], item["message"])
        for item in report["verdicts"]
        if ACTING.search(item["subject"] + item["message"])
    ]
    assert not acting, f"{case.id}: control characters shown raw: {acting[:3]}"
    assert not ACTING.search(output), f"{case.id}: control characters printed raw to the terminal"
    assert not crashed, f"{case.id}: audits crashed on the damage instead of judging it: {crashed[:5]}"
    for owner in case.owners:
        verdicts = _verdicts_of(report, owner)
        assert verdicts, f"{case.id}: {owner} reached no verdict"
        assert all(item["verdict"] != "passed" for item in verdicts), f"{case.id}: {owner}: {verdicts}"
    for owner in case.failing:
        verdicts = _verdicts_of(report, owner)
        failed = [item for item in verdicts if item["verdict"] == "failed"]
        assert failed, f"{case.id}: {owner} did not fail: {verdicts}"
        assert all(item["message"] and "\n" not in item["message"] for item in failed), failed
    for audit in case.downstream:
        verdicts = _verdicts_of(report, audit)
        found = {item["verdict"] for item in verdicts}
        assert "not_run" in found and found <= {"not_run", "not_applicable"}, f"{case.id}: {verdicts}"
    if case.regenerable:
        hashes = [item for item in report["verdicts"] if item["audit"] == "manifest.sha256"]
        assert len(hashes) == listed_files(project, DEMO_RUN_ID)
        assert {(item["verdict"], item["evidence"]["hashed"]) for item in hashes} == {("passed", "fresh")}
    if case.shows:
        assert any(case.shows in item["message"] for item in report["verdicts"]), case.shows
        assert case.shows in report_path.with_suffix(".html").read_text(encoding="utf-8")
    changes = _changes(before, _snapshot(*watched), project)
    assert changes == [], f"{case.id}: written outside the report folder: {changes}"
    assert not (outside / "payload-ran").exists()


# -- the same rules, in process: each piece that a deep or undecodable value reaches ---------------------


def _nested(depth: int) -> list[Any]:
    """A list nested ``depth`` deep, built without recursion (as a parser that refused nothing would)."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_evidence_of_any_depth_is_cut_and_can_be_written(tmp_path: Path) -> None:
    record = {"audit": "capsule.ids", "message": "", "evidence": {}, "affects": [], "verdict": None}
    AuditRecorder(record, None).evidence(deep=_nested(100_000), wide=[_nested(50)] * 3)
    written = write_json_atomic(tmp_path / "evidence.json", record)
    assert "nested too deeply to show" in written.read_text()
    assert json_depth(json.loads(written.read_bytes())) <= EVIDENCE_DEPTH + 1


def test_a_report_document_holding_deep_values_is_cut_to_the_report_depth() -> None:
    doc = plain({"verdicts": [{"evidence": {"x": _nested(10_000)}}], "run_id": "demo"})
    assert json_depth(doc) <= REPORT_DEPTH and json.dumps(doc)


def test_run_json_nested_past_the_contract_depth_is_a_problem_not_a_crash(
    project: Path, capsule_dir: Path
) -> None:
    _with_deep_key(capsule_dir / "run.json", WALKABLE)
    run = Run.load(Location(capsule_dir, Root(project, "--root"), "export"))
    assert run.declared is None
    assert f"nests more than {MAX_JSON_DEPTH} levels deep" in run.problem and "\n" not in run.problem


def test_a_message_or_evidence_string_from_the_box_is_cut_and_says_how_much() -> None:
    """A box's value of any length lands in a verdict as at most SHOWN_CHARS characters plus the count cut."""
    huge = "c" * (1 << 20)
    record = {"audit": "capsule.results_table", "message": "", "evidence": {}, "affects": [], "verdict": None}
    with pytest.raises(pytest.fail.Exception):
        AuditRecorder(record, None).fail(f"condition {huge} is undeclared", condition=huge, rows=[huge])
    message = f"condition {huge} is undeclared"
    assert record["message"] == message[:SHOWN_CHARS] + f"… ({len(message) - SHOWN_CHARS} more characters)"
    assert (
        record["evidence"]["condition"]
        == huge[:SHOWN_CHARS] + f"… ({len(huge) - SHOWN_CHARS} more characters)"
    )
    assert record["evidence"]["rows"] == [record["evidence"]["condition"]]


def test_names_that_are_not_utf8_are_shown_with_escapes(tmp_path: Path) -> None:
    name = os.fsdecode(b"bad\xff.txt")
    assert printable(name) == "bad\\xff.txt"
    assert printable("ma\ud800in") == "ma\\ud800in"  # a lone surrogate from a JSON "\ud800" escape
    assert printable("accuracy ± 0.01 …") == "accuracy ± 0.01 …"
    record = {"audit": "capsule.closed_world", "message": "", "evidence": {}, "affects": [], "verdict": None}
    with pytest.raises(pytest.fail.Exception):
        AuditRecorder(record, None).fail(f"1 stray path: {name}", stray=[name], **{name: 1})
    assert record["message"] == "1 stray path: bad\\xff.txt"
    assert record["evidence"] == {"stray": ["bad\\xff.txt"], "bad\\xff.txt": 1}
    # The atomic JSON writer itself never fails on such a string: it falls back to ASCII escapes.
    written = write_json_atomic(tmp_path / "names.json", {"name": name})
    assert json.loads(written.read_bytes()) == {"name": name}


def test_the_hash_cache_keeps_only_entries_of_the_shape_it_writes(tmp_path: Path) -> None:
    path = tmp_path.joinpath(*HASH_CACHE)
    path.parent.mkdir(parents=True)
    good = [1, 2, 3, 4, 5, "a" * 64]
    path.write_bytes(
        b'{"version": 1, "entries": {"good": '
        + json.dumps(good).encode()
        + b', "short": [1, 2], "flag": [true, 2, 3, 4, 5, "'
        + b"a" * 64
        + b'"]}}'
    )
    cache = HashCache(tmp_path)
    assert cache._entries == {"good": good}
    target = tmp_path / "file.bin"
    target.write_bytes(b"bytes")
    cache.put(target, os.lstat(target), "b" * 64)
    cache.save()
    assert set(json.loads(path.read_bytes())["entries"]) == {"good", str(target)}
    # A cache nested past what a contract document may hold is refused whole: every byte is hashed fresh.
    walkable_deep = (
        b'{"version": 1, "entries": {"deep": '
        + _deep_list(WALKABLE)
        + b', "good": '
        + json.dumps(good).encode()
        + b"}}"
    )
    for data in (walkable_deep, _deep_object(DEEP), b"[1, 2]", b'{"version": 1, "entries": []}'):
        path.write_bytes(data)
        assert HashCache(tmp_path)._entries == {}


def test_the_report_index_lists_a_deep_json_file_as_broken(tmp_path: Path) -> None:
    (tmp_path / "parser-deep.json").write_bytes(_deep_list(DEEP))
    (tmp_path / "walkable.json").write_bytes(_deep_object(WALKABLE))
    problems = {path.name: problem for path, document, problem in read_reports(tmp_path)}
    assert problems["parser-deep.json"] == "not valid JSON (nested too deeply to read)"
    assert "levels deep" in problems["walkable.json"]
