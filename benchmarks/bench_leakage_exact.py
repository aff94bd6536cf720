"""Exact cross-split duplicates on a 1M-train / 250k-test split manifest, side by side (medians of repeats).

runaudit: ``leakage.cross_split_bytes``' kernel, ``overlap(manifest, "sha256")`` (Arrow hash-set membership
per split pair), on the manifest as the audit loads it. Baselines, run in a child interpreter that has them
(a throwaway venv: neither is a runaudit dependency): Deepchecks' ``TrainTestSamplesMix`` on the same rows,
and a pandas inner merge on the hash column. Both the children and runaudit are timed around the check
only, not around loading the data.

    python benchmarks/bench_leakage_exact.py --baseline-python /path/to/venv/bin/python [--train 1000000]
        [--test 250000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = r"""
import json, sys, time, warnings
import numpy as np
import pandas as pd
warnings.filterwarnings("ignore")
data = np.load(sys.argv[1])
train = pd.DataFrame({"sha256": data["train"].astype(str)})
test = pd.DataFrame({"sha256": data["test"].astype(str)})
timings = {}
started = time.perf_counter()
merged = train.drop_duplicates("sha256").merge(test, on="sha256", how="inner")
timings["pandas_merge"] = (time.perf_counter() - started, int(len(merged)))
try:
    from deepchecks.tabular import Dataset
    from deepchecks.tabular.checks import TrainTestSamplesMix
except ImportError:
    pass
else:  # its single-column grouping splits string keys into characters, so a label column rides along
    train["label"], test["label"] = train["sha256"].str[0], test["sha256"].str[0]
    train_set = Dataset(train, cat_features=["sha256", "label"])
    test_set = Dataset(test, cat_features=["sha256", "label"])
    started = time.perf_counter()
    result = TrainTestSamplesMix().run(train_set, test_set)
    timings["deepchecks_TrainTestSamplesMix"] = (time.perf_counter() - started, float(result.value["ratio"]))
print(json.dumps(timings))
"""


def synthetic_manifest(folder: Path, train: int, test: int, leaked: float) -> tuple[Path, Path]:
    """A split manifest whose test split repeats ``leaked`` of its items from train, byte for byte."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    raw = np.frombuffer(rng.bytes(32 * (train + test)), dtype=np.uint8).reshape(-1, 32)
    digests = np.array([row.tobytes().hex() for row in raw], dtype="U64")
    copies = rng.choice(train, size=int(leaked * test), replace=False)
    digests[train : train + len(copies)] = digests[copies]
    splits = np.array(["train"] * train + ["test"] * test)
    table = pa.table(
        {
            "sample_id": [f"s{index}" for index in range(train + test)],
            "split": splits,
            "path": [f"{split}/{index}.png" for index, split in enumerate(splits)],
            "sha256": digests,
        }
    )
    manifest = folder / "manifest.parquet"
    pq.write_table(table, manifest)
    arrays = folder / "hashes.npz"
    np.savez(arrays, train=digests[:train].astype("S64"), test=digests[train:].astype("S64"))
    return manifest, arrays


def runaudit_once(manifest: Path) -> tuple[float, float, int]:
    """(seconds to load the manifest, seconds for the overlap, test items found in train)."""
    from runaudit.splits import _load, overlap

    _load.cache_clear()
    started = time.perf_counter()
    loaded = _load(manifest, "bench", None)
    loaded_at = time.perf_counter()
    found = overlap(loaded, "sha256")
    return loaded_at - started, time.perf_counter() - loaded_at, found.counts["train|test"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1_000_000)
    parser.add_argument("--test", type=int, default=250_000)
    parser.add_argument("--leaked", type=float, default=0.01, help="share of test items copied from train")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline-python", type=Path, help="an interpreter with pandas (and deepchecks)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-leakage-") as scratch:
        manifest, arrays = synthetic_manifest(Path(scratch), args.train, args.test, args.leaked)
        script = Path(scratch) / "baseline.py"
        script.write_text(BASELINE)
        mine, loads, baselines = [], [], {}
        for _ in range(args.repeats):
            load, seconds, found = runaudit_once(manifest)
            loads.append(load)
            mine.append(seconds)
            if args.baseline_python is not None:
                done = subprocess.run(
                    [str(args.baseline_python), str(script), str(arrays)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "PYTHONWARNINGS": "ignore"},
                )
                for name, (elapsed, value) in json.loads(done.stdout.strip().splitlines()[-1]).items():
                    baselines.setdefault(name, []).append((elapsed, value))
    expected = int(args.leaked * args.test)
    print(f"manifest: {args.train} train + {args.test} test rows, {expected} test rows copied from train")
    print(
        f"runaudit overlap (leakage.cross_split_bytes): median {statistics.median(mine):.3f} s, found {found}"
    )
    print(f"  (loading the parquet manifest: median {statistics.median(loads):.3f} s)")
    for name, runs in baselines.items():
        median = statistics.median(elapsed for elapsed, _ in runs)
        print(
            f"{name}: median {median:.3f} s (result {runs[-1][1]}); "
            f"runaudit is {median / statistics.median(mine):.1f}x faster "
            f"({median / (statistics.median(mine) + statistics.median(loads)):.1f}x including the load)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
