"""Hostile bytes inside a capsule: one failure from the file's owner, not_run elsewhere, in seconds.

A capsule comes from a box someone else may control, and a small file can stand for a great deal of work:
341 bytes of YAML aliases expand to a billion nodes, a results table can hold millions of rows where its
test declares hundreds, a checkpoint that loads under ``weights_only=True`` can nest 20,000 levels deep,
and a JSON document can say one key twice. Each test seeds one such file into a private copy of the real
demo project and runs the harness as users do. Sessions a regression would make run for minutes go to a
child process with a deadline, so such a regression fails its test instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from cpu_time import least_cpu_seconds
from science_support import copy_capsule, edit_json

from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.reader import CONFIG_NODES, YamlRefused, yaml_documents

# A healthy audit of these subsets takes a few seconds; the hostile inputs used to take 97 s and more.
SESSION_DEADLINE_S = 60
RESULTS = "test/main/results.parquet"
CONTRACT_FAILED = "failed its contract"
BY_RESULTS_TABLE = "(reported by capsule.results_table)"


def _bomb(levels: int = 9) -> bytes:
    """The classic "billion laughs": each level is a list of nine aliases to the level below."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for below, name in zip("abcdefghijklmnop", "bcdefghijklmnop"[: levels - 1], strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{below}"] * 9) + "]")
    return "\n".join(lines).encode()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _session(
    pytester: pytest.Pytester, capsule: Path, root: Path, *args: str
) -> tuple[dict[str, Any], float]:
    """``pytest --run`` in a child process that is killed at the deadline; the JSON report and wall time."""
    reports = pytester.path / "reports"
    start = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", "--run", str(capsule), "--root", str(root),
        "--report-dir", str(reports), "--report-format", "json", *args, timeout=SESSION_DEADLINE_S,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    path = reports / f"{capsule.name}.json"
    assert path.is_file(), "\n".join(result.outlines[-30:] + result.errlines[-30:])
    return json.loads(path.read_text()), elapsed


def _verdicts(report: dict[str, Any], audit: str, subject: str | None = None) -> list[dict[str, Any]]:
    return [
        item
        for item in report["verdicts"]
        if item["audit"] == audit and (subject is None or item["subject"] == subject)
    ]


def _one(report: dict[str, Any], audit: str, subject: str | None = None) -> dict[str, Any]:
    [item] = _verdicts(report, audit, subject)
    return item


def _errors(report: dict[str, Any]) -> list[str]:
    return [
        f"{i['audit']}[{i['subject']}]: {i['message']}" for i in report["verdicts"] if i["verdict"] == "error"
    ]


# -- 1. config.yaml: an alias bomb --------------------------------------------------------------------


def test_yaml_anchors_within_the_budget_load_and_bombs_do_not() -> None:
    """Plain anchors and merge keys of a real config still load; expansion, recursion and depth are refused."""
    shared = b"base: &base {lr: 0.1, epochs: 3}\nrun:\n  <<: *base\n  epochs: 5\nlist: &l [1, 2]\ntwice: [*l, *l]\n"
    assert yaml_documents(shared) == [
        {
            "base": {"lr": 0.1, "epochs": 3},
            "run": {"lr": 0.1, "epochs": 5},
            "list": [1, 2],
            "twice": [[1, 2], [1, 2]],
        }
    ]

    def refused() -> None:
        with pytest.raises(YamlRefused, match=f"expands past {CONFIG_NODES} YAML nodes through its aliases"):
            yaml_documents(_bomb())

    assert least_cpu_seconds(refused, 5) < 5
    with pytest.raises(YamlRefused, match="recursive"):
        yaml_documents(b"a: &a [1, *a]\n")
    with pytest.raises(YamlRefused, match="nests deeper than"):
        yaml_documents(b"[" * 5000 + b"]" * 5000)
    with pytest.raises(YamlRefused, match="is not valid YAML"):
        yaml_documents(b"a: [1, 2\n")


def test_a_key_named_twice_in_one_mapping_is_refused_as_in_json() -> None:
    """``safe_load`` keeps the last of two values in silence; the capsule's reader refuses the mapping, at
    any depth, and says which key and where. Keys a merge brings in are overridden, not repeated."""
    with pytest.raises(YamlRefused, match=r"names key 'lr' twice in one mapping \(line 3\)"):
        yaml_documents(b"lr: 0.1\nepochs: 3\nlr: 0.5\n")
    with pytest.raises(YamlRefused, match="names key 'k' twice"):
        yaml_documents(b"optim:\n  - {k: 1, 'k': 2}\n")
    assert yaml_documents(b"base: &b {lr: 0.1}\nrun:\n  <<: *b\n  lr: 0.5\n") == [
        {"base": {"lr": 0.1}, "run": {"lr": 0.5}}
    ]
    assert yaml_documents(b"1: int\n'1': text\n") == [{1: "int", "1": "text"}]


def test_an_alias_bomb_in_config_yaml_fails_config_hash_alone_in_seconds(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    sibling = copy_capsule(capsule_dir, project / "export" / "demo-s2")  # a clean config to compare with
    edit_json(sibling / "run.json", lambda run: run.update(run_id="demo-s2"))
    config = capsule_dir / "config.yaml"
    config.write_bytes(_bomb())
    assert len(config.read_bytes()) == 341

    def declare(run: dict[str, Any]) -> None:
        run["config"]["sha256"] = _sha(config)  # bound as declared: only the content is hostile
        run["environment"]["cuda"] = "12.4"  # a CUDA run claiming determinism: flags reads the config

    edit_json(capsule_dir / "run.json", declare)
    report, elapsed = _session(
        pytester, capsule_dir, project, "-k", "config_hash or test_determinism or one_variable"
    )
    assert elapsed < SESSION_DEADLINE_S and not _errors(report), _errors(report)
    owner = _one(report, "capsule.config_hash")
    assert owner["verdict"] == "failed", owner
    assert owner["message"].startswith(f"run {DEMO_RUN_ID}: config.yaml expands past"), owner["message"]
    assert "alias" in owner["message"] and "\n" not in owner["message"]
    flags = _one(report, "determinism.flags")
    assert flags["verdict"] == "not_run" and "(reported by capsule.config_hash)" in flags["message"], flags
    compared = _one(report, "variance.one_variable", "demo-s2")
    assert compared["verdict"] == "not_run" and "(reported by capsule.config_hash)" in compared["message"]
    assert {item["audit"] for item in report["verdicts"] if item["verdict"] == "failed"} == {
        "capsule.config_hash"
    }


# -- 2. and 3. results.parquet: millions of rows, wrong types -----------------------------------------


def _oversized(path: Path, rows: int) -> None:
    """The demo's table repeated to ``rows`` rows with distinct sample ids (built in Arrow, in seconds)."""
    table = pq.read_table(path)
    picked = table.take(pa.array(np.resize(np.arange(table.num_rows), rows)))
    picked = picked.set_column(
        picked.schema.get_field_index("sample_id"), "sample_id", pa.array(np.arange(rows)).cast(pa.string())
    )
    picked = picked.set_column(
        picked.schema.get_field_index("item_index"), "item_index", pa.array(np.arange(rows, dtype=np.int64))
    )
    pq.write_table(picked, path, row_group_size=1 << 20)


def test_a_results_table_of_millions_of_rows_is_refused_and_never_probed(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    rows = 4_000_000
    _oversized(capsule_dir / RESULTS, rows)
    report, elapsed = _session(
        pytester, capsule_dir, project, "-k", "results_table or test_collapse or test_variance or n_scored"
    )
    assert elapsed < SESSION_DEADLINE_S and not _errors(report), _errors(report)
    owner = _one(report, "capsule.results_table", "main")
    assert owner["verdict"] == "failed" and f"holds {rows} row(s)" in owner["message"], owner
    probes = [
        ("collapse.output_cosine", "main"),
        ("collapse.prediction_histogram", "main"),
        ("collapse.trivial_baseline", "main"),
        ("variance.precision", "main/accuracy"),
        ("capsule.n_scored", "main"),
    ]
    for audit, subject in probes:
        probe = _one(report, audit, subject)
        assert probe["verdict"] == "not_run", probe
        assert CONTRACT_FAILED in probe["message"] and probe["message"].endswith(BY_RESULTS_TABLE), probe


def test_non_finite_outputs_are_found_in_every_window_of_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The output finiteness check reads a few rows at a time (a table at the reader's size cap would need
    gigabytes of element masks at once): a NaN, an inf or a null element is found whichever chunk and
    window holds it, and a row marked not forward_finite is left to its flag."""
    from runaudit import results

    monkeypatch.setattr(results, "OUTPUT_WINDOW", 5)  # two rows of two elements a window
    outputs = pa.chunked_array(
        [
            pa.array([[1.0, 2.0], [3.0, float("nan")], [4.0, 5.0]]),
            pa.array([[1.0, 2.0], [None, 1.0], [4.0, 5.0], [float("inf"), 0.0]]),
        ]
    )
    finite = [True, True, True, True, False, True, True]
    table = pa.table({"output": outputs, "forward_finite": finite})
    assert results._output_finiteness_problems(table) == [
        "2 row(s) have an output vector holding NaN, ±inf or null although forward_finite is true"
    ]
    finite[1] = finite[6] = False
    assert results._output_finiteness_problems(pa.table({"output": outputs, "forward_finite": finite})) == []


def test_wrong_column_types_leave_the_probes_not_run(run_audits, project: Path, capsule_dir: Path) -> None:
    path = capsule_dir / RESULTS
    table = pq.read_table(path)
    as_text = pc.binary_join_element_wise("acc=", pc.cast(table.column("m.accuracy"), pa.string()), "")
    pq.write_table(table.set_column(table.schema.get_field_index("m.accuracy"), "m.accuracy", as_text), path)
    outcome = run_audits(capsule_dir, project, "-k", "results_table or precision or test_collapse")
    assert outcome.report is not None, outcome.result.stdout.str()[-3000:]
    assert not _errors(outcome.report), _errors(outcome.report)
    [owner] = outcome.find("capsule.results_table")
    assert owner["verdict"] == "failed" and "column m.accuracy is string, expected double" in owner["message"]
    for subject in ("main/accuracy", "main/cross_entropy"):
        precision = _one(outcome.report, "variance.precision", subject)
        assert precision["verdict"] == "not_run", precision
        assert CONTRACT_FAILED in precision["message"] and BY_RESULTS_TABLE in precision["message"]
    assert _one(outcome.report, "collapse.trivial_baseline", "main")["verdict"] == "not_run"


# -- 4. a checkpoint nested 20,000 levels deep --------------------------------------------------------

NESTED_SAVE = """
import sys, threading, torch
def save():
    value = []
    for _ in range(20_000):
        value = [value]
    torch.save(value, sys.argv[1])  # plain lists: within the weights_only allowlist
sys.setrecursionlimit(100_000)
threading.stack_size(256 << 20)  # the pickler recurses once per level in C
worker = threading.Thread(target=save)
worker.start()
worker.join()
"""


def test_a_checkpoint_nested_20k_deep_fails_safe_load_alone(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    best = capsule_dir / "best.pth"
    subprocess.run([sys.executable, "-c", NESTED_SAVE, str(best)], check=True, timeout=120)
    edit_json(capsule_dir / "run.json", lambda run: run["checkpoints"]["best"].update(sha256=_sha(best)))
    outcome = run_audits(capsule_dir, project, "-k", "test_checkpoint")
    assert outcome.report is not None, outcome.result.stdout.str()[-3000:]
    assert not _errors(outcome.report), _errors(outcome.report)
    failed = _one(outcome.report, "checkpoint.safe_load", "best.pth")
    assert failed["verdict"] == "failed", failed
    assert (
        failed["message"].startswith(f"run {DEMO_RUN_ID}: best.pth ") and "levels deep" in failed["message"]
    )
    assert "\n" not in failed["message"]
    for audit in ("checkpoint.tensors", "checkpoint.finite", "checkpoint.selection"):
        dependent = _one(outcome.report, audit, "best.pth")
        assert dependent["verdict"] == "not_run" and "checkpoint.safe_load" in dependent["message"], dependent
    assert {i["audit"] for i in outcome.report["verdicts"] if i["verdict"] == "failed"} == {
        "checkpoint.safe_load"
    }


def test_cycles_and_shared_containers_are_refused_not_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from runaudit.checkpoints import CheckpointRefused, inspect

    checkpoints = sys.modules[inspect.__module__]  # the module inspect reads its bounds from

    cycle: list[Any] = [torch.ones(2)]
    cycle.append(cycle)
    torch.save(cycle, tmp_path / "cycle.pth")
    with pytest.raises(CheckpointRefused, match="levels deep"):
        inspect(tmp_path / "cycle.pth")

    shared: list[Any] = [torch.ones(2)]
    for _ in range(40):  # 2**40 paths through 40 lists
        shared = [shared, shared]
    torch.save(shared, tmp_path / "shared.pth")
    monkeypatch.setattr(checkpoints, "MAX_OBJECTS", 100_000)
    with pytest.raises(CheckpointRefused, match="expands past 100000 objects"):
        inspect(tmp_path / "shared.pth")


# -- 5. JSON documents that say one key twice ---------------------------------------------------------


def _repeat_first_key(path: Path) -> None:
    """Say the document's first key twice; ``json.loads`` would keep the last silently."""
    text = path.read_text()
    key, value = next(iter(json.loads(text).items()))
    path.write_text("{" + json.dumps(key) + ": " + json.dumps(value) + ", " + text.lstrip()[1:])


def _selection_file(project: Path, capsule: Path) -> Path:
    sid = json.loads((capsule / "run.json").read_text())["tests"][0]["selection_id"]
    return project / "_trust" / "selections" / f"{sid}.json"


def _rebind_selection(project: Path, capsule: Path) -> None:
    path = _selection_file(project, capsule)
    edit_json(capsule / "run.json", lambda run: run["selections"][0].update(sha256=_sha(path)))


Seed = Callable[[Path, Path], None]


@pytest.mark.parametrize(
    ("seed", "owner", "dependent", "gate"),
    [
        pytest.param(
            lambda project, capsule: _repeat_first_key(capsule / "test" / "main" / "metrics.json"),
            "capsule.metrics_schema",
            ("capsule.n_scored", "main"),
            "metrics_schema or n_scored",
            id="metrics.json",
        ),
        pytest.param(
            lambda project, capsule: (
                _repeat_first_key(_selection_file(project, capsule)),
                _rebind_selection(project, capsule),  # bound as declared: only the duplicate is wrong
            ),
            "capsule.selection",
            ("capsule.vis_coverage", "main"),
            "test_selection or vis_coverage",
            id="selection",
        ),
        pytest.param(
            lambda project, capsule: _repeat_first_key(capsule / "run.json"),
            "capsule.run_json_schema",
            ("capsule.tests_declared", ""),
            "run_json_schema or tests_declared",
            id="run.json",
        ),
    ],
)
def test_a_json_document_with_a_duplicate_key_is_refused_by_its_owner(
    run_audits,
    project: Path,
    capsule_dir: Path,
    seed: Seed,
    owner: str,
    dependent: tuple[str, str],
    gate: str,
) -> None:
    seed(project, capsule_dir)
    outcome = run_audits(capsule_dir, project, "-m", "custody", "-k", gate)
    assert outcome.report is not None, outcome.result.stdout.str()[-3000:]
    failed = [item for item in outcome.report["verdicts"] if item["verdict"] == "failed"]
    assert [item["audit"] for item in failed] == [owner], failed
    assert failed[0]["message"].startswith(f"run {DEMO_RUN_ID}: ") and "duplicate key" in failed[0]["message"]
    later = _one(outcome.report, *dependent)
    assert later["verdict"] == "not_run", later


def _in_a_child(probe: str, path: Path) -> subprocess.CompletedProcess[str]:
    """``python -c probe path``: what a reader does where its crash or its address space is its own."""
    return subprocess.run(
        [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_parquet_footer_that_aborts_pyarrow_s_metadata_is_an_unreadable_table(tmp_path: Path) -> None:
    """A one-byte change to a results table's footer killed the session with SIGABRT (no verdict, no
    report): the memory bound walked pyarrow's per-chunk metadata objects, whose constructor aborts on it.
    Run in a child process, so that the old behaviour fails this test instead of killing the suite.

    Read with ``pq.read_table``, the same file then aborted 3 of 1,000 processes as they exited (CI saw
    one): its dataset scanner goes on after the decode error is raised (apache/arrow#33975). Whether the
    scanner ran is what this test can see every time; the abort it caused, one time in a few hundred."""
    recorded = Path(__file__).parent / "recorded" / "parquet" / "footer-aborts-pyarrow.parquet"
    probe = (
        "import sys\n"
        "from runaudit.reader import Unavailable, read_bounded_table, read_footer\n"
        "opened = lambda: open(sys.argv[1], 'rb')\n"
        "try:\n"
        "    footer = read_footer(opened, 'results.parquet', 'capsule.results_table')\n"
        "    read_bounded_table(opened, 'results.parquet', 'capsule.results_table', footer, footer.schema.names)\n"
        "except Unavailable as exc:\n"
        "    print('UNAVAILABLE', exc)\n"
        "print('SCANNED', 'pyarrow.dataset' in sys.modules)\n"
    )
    done = _in_a_child(probe, recorded)
    assert done.returncode == 0, done.stderr[-2000:]  # -6 (SIGABRT) before
    assert done.stdout.startswith("UNAVAILABLE results.parquet is not a readable parquet table")
    assert done.stdout.rstrip().endswith("SCANNED False"), done.stdout


@pytest.mark.parametrize("holder", ["struct", "opaque-struct", "unrelated-struct"])
def test_a_contract_column_that_is_also_a_path_into_a_nested_column_is_refused_unread(
    tmp_path: Path, holder: str
) -> None:
    """pyarrow's file reader takes ``m.acc`` to name struct ``m``'s field ``acc`` too: a run's own struct
    of dictionary strings was decoded beside the contract column, uncounted (a 5 KB file peaked at 4.6 GB),
    and so was one behind an extension type that is not "nested" to pyarrow (4.9 GB). The paths come from
    the footer's schema tree; a struct ``m`` whose fields are no contract column's name is read as ever."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runaudit.reader import Unavailable, read_bounded_table, read_footer

    field = "seed" if holder == "unrelated-struct" else "acc"
    nested = pa.array([{field: "x" * 1000}, {field: "x" * 1000}])
    if holder == "opaque-struct":
        nested = pa.ExtensionArray.from_storage(pa.opaque(nested.type, "notes", "run"), nested)
    table = pa.table({"sample_id": ["a", "b"], "m.acc": [1.0, 0.0], "m": nested})
    path = tmp_path / "results.parquet"
    pq.write_table(table, path)
    opened = lambda: path.open("rb")  # noqa: E731
    footer = read_footer(opened, "results.parquet", "capsule.results_table")
    if holder == "unrelated-struct":
        read = read_bounded_table(
            opened, "results.parquet", "capsule.results_table", footer, ["sample_id", "m.acc"]
        )
        assert read.column_names == ["sample_id", "m.acc"]
        return
    with pytest.raises(Unavailable, match=r"names a column 'm\.acc' that is also a path into its column 'm'"):
        read_bounded_table(opened, "results.parquet", "capsule.results_table", footer, ["sample_id", "m.acc"])
    plain = read_bounded_table(opened, "results.parquet", "capsule.results_table", footer, ["sample_id"])
    assert plain.column_names == ["sample_id"]


def test_the_footer_reader_agrees_with_pyarrow_and_refuses_what_it_cannot_follow(tmp_path: Path) -> None:
    """The column chunks read from the footer's Thrift bytes are pyarrow's own, for flat, list and string
    columns over many row groups; a cut, unframed, oversized or endlessly nested footer is a FooterError."""
    import io

    from runaudit.parquet_footer import FooterError, column_chunks

    table = pa.table(
        {
            "sample_id": [f"s{index}" for index in range(50)],
            "valid": [index % 3 > 0 for index in range(50)],
            "m.accuracy": np.linspace(0, 1, 50),
            "output": pa.array([[float(index)] * (index % 4) for index in range(50)], pa.list_(pa.float32())),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=7)
    metadata = pq.ParquetFile(path).metadata
    expected = [
        (chunk.physical_type, chunk.num_values, chunk.total_uncompressed_size)
        for group in map(metadata.row_group, range(metadata.num_row_groups))
        for chunk in map(group.column, range(group.num_columns))
    ]
    with path.open("rb") as handle:
        found = [
            (chunk.physical_type, chunk.num_values, chunk.total_uncompressed_size)
            for chunk in column_chunks(handle)
        ]
    assert found == expected and len(found) == 8 * 4
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    footer_start = len(data) - 8 - length
    nested = b"\x1c" * 100_000  # field 1, a struct, inside a struct, ...
    for broken in (
        data[:-1],  # no magic at the end
        data[: footer_start + 10] + data[-8:],  # the footer cut short, its length kept
        data[:-8] + (len(data)).to_bytes(4, "little") + b"PAR1",  # a length past the file
        b"PAR1" + nested + len(nested).to_bytes(4, "little") + b"PAR1",
    ):
        with pytest.raises(FooterError):
            column_chunks(io.BytesIO(broken))


def _zigzag_varint(value: int, width: int = 0) -> bytes:
    """``value`` as Thrift's compact protocol writes an i64: zigzag, then 7 bits a byte (padded with
    continued zero groups to ``width`` bytes, which readers accept: a count rewritten in place)."""
    value, out = value << 1, bytearray()
    while value >= 0x80 or len(out) + 1 < width:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def test_a_footer_whose_counts_understate_its_row_group_is_refused_before_a_row_is_decoded(
    tmp_path: Path,
) -> None:
    """A 2 KB results table held one row group of 30 million rows while its footer said 718 rows, and 718
    values in each column chunk: the memory bound read those counts, and pyarrow decoded every row by the
    row group's own count (3.3 GB, 13 s). Here 100,000 rows are made to say 20,000 (the counts keep their
    encoded width, so the footer is rewritten in place)."""
    import io

    from runaudit.parquet_footer import FooterError, column_chunks
    from runaudit.reader import Unavailable, read_footer

    path = tmp_path / "results.parquet"
    pq.write_table(pa.table({"sample_id": ["s0"] * 100_000, "m.accuracy": [1.0] * 100_000}), path)
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    honest, claimed = b"\x16" + _zigzag_varint(100_000), b"\x16" + _zigzag_varint(20_000)
    assert len(honest) == len(claimed)
    footer = data[start:-8]
    # FileMetaData.num_rows comes first, each column chunk's num_values next, the row group's num_rows last.
    assert footer.count(honest) == 4
    last = footer.rindex(honest)
    lying = footer[:last].replace(honest, claimed) + footer[last:]
    path.write_bytes(data[:start] + lying + data[-8:])
    metadata = pq.ParquetFile(path).metadata
    assert (metadata.num_rows, metadata.row_group(0).num_rows) == (20_000, 100_000)
    with (
        path.open("rb") as handle,
        pytest.raises(FooterError, match="says 20000 values in a row group of 100000"),
    ):
        column_chunks(handle)
    with pytest.raises(Unavailable, match="is not a readable parquet table"):
        read_footer(lambda: path.open("rb"), "results.parquet", "capsule.results_table")
    whole = io.BytesIO(data)  # the honest file is read as before
    assert [chunk.num_values for chunk in column_chunks(whole)] == [100_000, 100_000]


def test_a_list_column_whose_footer_understates_its_pages_values_is_refused_before_a_value_is_decoded(
    tmp_path: Path,
) -> None:
    """A 10 KB results table's ``output`` column held 430 million zeros in one dictionary-encoded page,
    while the footer said 718 values (no fewer than the rows, so the row-group checks held): pyarrow decoded
    what the page header counts (1.7 GB of floats, a session at 4.9 GB) and ``capsule.results_table``
    passed. Here 200,000 values in 20 rows are made to say 20000 in the footer (rewritten in place, the
    count padded to its encoded width)."""
    import io

    from runaudit.parquet_footer import FooterError, column_chunks

    path = tmp_path / "results.parquet"
    rows, width = 20, 10_000
    table = pa.table({"output": pa.array([[0.0] * width] * rows, type=pa.list_(pa.float32()))})
    pq.write_table(table, path, use_dictionary=True, compression="zstd")
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    honest = b"\x16" + _zigzag_varint(rows * width)  # ColumnMetaData.num_values, field 5 after field 4
    claimed = b"\x16" + _zigzag_varint(rows * 1_000, width=len(honest) - 1)
    footer = data[start:-8]
    assert footer.count(honest) == 1 and len(claimed) == len(honest)
    path.write_bytes(data[:start] + footer.replace(honest, claimed) + data[-8:])
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).num_values == rows * 1_000
    decoded = pq.read_table(path)["output"].combine_chunks().values
    assert len(decoded) == rows * width  # what pyarrow decodes: the pages' count, not the footer's
    with path.open("rb") as handle, pytest.raises(FooterError, match=f"pages hold {rows * width} values"):
        column_chunks(handle)
    assert [chunk.num_values for chunk in column_chunks(io.BytesIO(data))] == [rows * width]  # honest: read


def test_a_reader_error_an_audit_owns_is_its_one_line_not_a_chained_raw_exception(
    capsule_dir: Path, project: Path, run_audits: Callable[..., Any]
) -> None:
    """A damaged page header: pyarrow's error holds a raw control byte from the file and spans lines. The
    verdict escaped it, but the audit failed inside the ``except`` block that caught it, so the terminal's
    failure section printed the raw exception first ("During handling of the above exception ...")."""
    path = capsule_dir / "test" / "main" / "results.parquet"
    data = bytearray(path.read_bytes())
    for index in range(100, 400):
        data[index] ^= 0x5A
    path.write_bytes(bytes(data))
    outcome = run_audits(capsule_dir, project, "-k", "results_table")
    [table] = outcome.find("capsule.results_table")
    assert table["verdict"] == "failed"
    output = outcome.result.stdout.str()
    assert "During handling of the above exception" not in output
    assert not any(char in output for char in "\x00\x0e\x0f\x1b")


def test_a_bounded_read_reserves_what_the_file_holds_not_its_cap(tmp_path: Path) -> None:
    """``read(cap + 1)`` reserves the cap before reading: a 160 KB split manifest read under its 1 GiB cap
    raised MemoryError beneath a 900 MB address-space ceiling."""
    path = tmp_path / "manifest.parquet"
    path.write_bytes(bytes(range(256)) * 625)
    probe = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (900_000_000, 900_000_000))\n"
        "from runaudit.safeio import read_regular\n"
        "print(len(read_regular(sys.argv[1], 1 << 30)))\n"
    )
    done = _in_a_child(probe, path)
    assert done.returncode == 0 and done.stdout.strip() == "160000", done.stderr[-1500:]


def test_output_vectors_past_the_probes_bound_are_not_compared(
    pytester: pytest.Pytester, project: Path, capsule_dir: Path
) -> None:
    """A 17 KB table of 718 outputs × 400,000 zeros (1.15 GB decoded, under the table's memory cap) kept
    ``collapse.output_cosine`` busy 137 s at 11.7 GB: its vectors went through a Python float each."""
    from runaudit.probes import OUTPUT_VALUES_CAP

    path = capsule_dir / RESULTS
    table = pq.read_table(path)
    width = OUTPUT_VALUES_CAP // table.num_rows * 2 + 1
    zeros = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(table.num_rows * width, np.float32)), width)
    output = pa.ListArray.from_arrays(
        pa.array(np.arange(table.num_rows + 1, dtype=np.int32) * width), zeros.values
    )
    pq.write_table(table.set_column(table.schema.get_field_index("output"), "output", output), path)
    report, elapsed = _session(pytester, capsule_dir, project, "-k", "output_cosine")
    assert elapsed < SESSION_DEADLINE_S and not _errors(report), _errors(report)
    probe = _one(report, "collapse.output_cosine", "main")
    assert probe["verdict"] == "not_run" and f"of {width:,} values each, past the" in probe["message"], probe
