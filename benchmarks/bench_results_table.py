"""Reading a results table's contract columns: runaudit's bounded read against ``pq.read_table``, side by side.

    python benchmarks/bench_results_table.py [--items 100000] [--conditions 3] [--width 256] [--repeat 7]

runaudit reads tables through pyarrow's file reader (``pq.ParquetFile(...).read``), not ``pq.read_table``,
whose dataset scanner went on after a decode error and aborted processes at exit. This prints the median
seconds of (a) ``pq.read_table(columns=...)``, the call runaudit made before, (b) the file reader's
``read(columns=...)``, the call it makes now, and (c) ``read_footer`` plus ``read_bounded_table``, all an
audit session does to read the table (its memory bound, a read of the strings as dictionaries where they
could decode past it, UTF-8 validation), on the same file, interleaved (a, b, c, a, ...) after one warm-up
each, and the ratios b / a and c / a.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from runaudit.reader import read_bounded_table, read_footer

CONTRACT = ["condition_id", "sample_id", "item_index", "valid", "forward_finite", "m.accuracy", "output"]


def _table(items: int, conditions: int, width: int) -> pa.Table:
    """A per-item results table: each sample scored under each condition, with an output vector."""
    rows = items * conditions
    generator = np.random.default_rng(0)
    outputs = generator.standard_normal((rows, width), dtype=np.float32)
    return pa.table(
        {
            "condition_id": pa.array([f"c{index % conditions}" for index in range(rows)]).dictionary_encode(),
            "sample_id": [f"s{index // conditions}" for index in range(rows)],
            "item_index": np.arange(rows, dtype=np.int64) // conditions,
            "valid": np.ones(rows, dtype=bool),
            "forward_finite": np.ones(rows, dtype=bool),
            "m.accuracy": generator.integers(0, 2, rows).astype(np.float64),
            "output": pa.FixedSizeListArray.from_arrays(pa.array(outputs.ravel()), width),
            "run_own_note": ["kept, never read"] * rows,
        }
    )


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--conditions", type=int, default=3)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "results.parquet"
        pq.write_table(_table(args.items, args.conditions, args.width), path)

        def opened() -> BinaryIO:
            return path.open("rb")

        def former() -> None:
            with opened() as handle:
                pq.read_table(handle, columns=CONTRACT)

        def file_reader() -> None:
            with opened() as handle:
                pq.ParquetFile(handle).read(columns=CONTRACT).select(CONTRACT)

        def bounded() -> None:
            footer = read_footer(opened, "results.parquet", "capsule.results_table")
            read_bounded_table(opened, "results.parquet", "capsule.results_table", footer, CONTRACT)

        runs = {"read_table": former, "file reader": file_reader, "runaudit": bounded}
        timings: dict[str, list[float]] = {name: [] for name in runs}
        for action in runs.values():  # warm-up: imports, the page cache
            action()
        for _ in range(args.repeat):
            for name, action in runs.items():
                timings[name].append(_timed(action))
        size = path.stat().st_size
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(f"results table: {args.items:,} items x {args.conditions} conditions, output width {args.width}")
    print(f"file {size / 2**20:.1f} MiB; medians of {args.repeat}, interleaved")
    for name, value in medians.items():
        spread = max(timings[name]) - min(timings[name])
        print(f"  {name:<11} {value:7.3f} s   (spread {spread:.3f} s)")
    print(f"  file reader / read_table: {medians['file reader'] / medians['read_table']:.2f}x")
    print(f"  runaudit / read_table:    {medians['runaudit'] / medians['read_table']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
