"""The variance audits over 50 sibling runs of 10k test items each: must finish in under 2 s.

A synthetic project root holds 50 capsules in comparison group ``sweep``: 25 seeds of a baseline arm and
25 of a method arm, each with run.json, config.yaml, metrics.json and a 10k-row results.parquet. The
harness audits one method run with ``-m science -k test_variance`` (seed count, bands, paired bootstrap
against the 25 baseline runs, MDE, baseline draw, precision, and one_variable against each of the 49
siblings), the way users run it; timed per audit (pytest's own durations), per session, and per process.

    python benchmarks/bench_variance.py [--runs 50] [--items 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DRIVER = r"""
import json, sys, time, pytest

class Durations:
    def __init__(self):
        self.seconds, self.cpu, self.items = 0.0, 0.0, set()
    def pytest_runtest_logreport(self, report):
        self.seconds += report.duration
        self.items.add(report.nodeid)
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        started = time.process_time()
        try:
            return (yield)
        finally:
            self.cpu += time.process_time() - started

durations = Durations()
started = time.perf_counter()
code = pytest.main(sys.argv[1:], plugins=[durations])
print(json.dumps({"code": int(code), "audits": durations.seconds, "cpu": durations.cpu,
                  "session": time.perf_counter() - started, "items": len(durations.items)}))
"""


def write_run(root: Path, run_id: str, arm: str, seed: int, items: int, rng: np.random.Generator) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    capsule = root / "export" / run_id
    (capsule / "test" / "main").mkdir(parents=True)
    config = {"model": {"width": 64 if arm == "baseline" else 128}, "train": {"seed": seed, "lr": 0.001}}
    config_bytes = yaml.safe_dump(config, sort_keys=True).encode()
    (capsule / "config.yaml").write_bytes(config_bytes)
    skill = 0.80 if arm == "baseline" else 0.81
    correct = (rng.random(items) < skill + rng.normal(0, 0.01)).astype(np.float64)
    losses = rng.exponential(0.5, items)
    pq.write_table(
        pa.table(
            {
                "condition_id": ["clean"] * items,
                "sample_id": [f"s{index:05d}" for index in range(items)],
                "item_index": np.arange(items, dtype=np.int64),
                "valid": np.ones(items, dtype=bool),
                "forward_finite": np.ones(items, dtype=bool),
                "m.accuracy": correct,
                "m.cross_entropy": losses,
            }
        ),
        capsule / "test" / "main" / "results.parquet",
    )
    metrics = [
        {"metric": "accuracy", "condition_id": "clean", "value": round(float(correct.mean()), 4)},
        {"metric": "cross_entropy", "condition_id": "clean", "value": round(float(losses.mean()), 4)},
    ]
    (capsule / "test" / "main" / "metrics.json").write_text(
        json.dumps({"run_id": run_id, "metrics": metrics})
    )
    declaration = {
        "schema_version": "runaudit.run/1",
        "run_id": run_id,
        "kind": "software",
        "task": "classification",
        "config": {"sha256": hashlib.sha256(config_bytes).hexdigest()},
        "protocol": {
            "protocol_id": "sweep-v1",
            "metrics": [
                {"name": "accuracy", "direction": "higher", "aggregation": "mean", "precision": 4},
                {"name": "cross_entropy", "direction": "lower", "aggregation": "mean", "precision": 4},
            ],
        },
        "tests": [
            {
                "test_id": "main",
                "split": "test",
                "n_test": items,
                "conditions": ["clean"],
                "roles": ["input"],
                "selection_id": "sel",
                "ground_truth_status": "available",
                "metric_applicability": "applicable",
            }
        ],
        "seed": {"values": [seed], "deterministic": True, "worker_seeding": True, "cudnn_benchmark": False},
        "comparison": {"group": "sweep", "arm": arm, "ablated": [] if arm == "baseline" else ["model.width"]},
    }
    (capsule / "run.json").write_text(json.dumps(declaration))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    checkout = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])),
    }
    with tempfile.TemporaryDirectory(prefix="bench-variance-") as scratch:
        root = Path(scratch) / "project"
        rng = np.random.default_rng(0)
        for index in range(args.runs):
            arm = "baseline" if index % 2 == 0 else "method"
            write_run(root, f"{arm}-s{index}", arm, index, args.items, rng)
        driver = Path(scratch) / "driver.py"
        driver.write_text(DRIVER)
        audited = f"method-s{args.runs - 1}"
        command = [
            sys.executable, str(driver), "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", "-q",
            "--rootdir", scratch, "-c", os.devnull, "--run", audited, "--runaudit-root", str(root),
            "--runaudit-report-dir", str(Path(scratch) / "reports"), "-m", "science", "-k", "test_variance",
            str(checkout / "audits" / "test_variance.py"),
        ]  # fmt: skip
        results = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=scratch)
            process = time.perf_counter() - started
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            if summary["code"] != 0:
                raise SystemExit(done.stdout[-3000:] + done.stderr[-2000:])
            results.append({**summary, "process": process})
        report = json.loads((Path(scratch) / "reports" / f"{audited}.json").read_text())
    verdicts: dict[str, int] = {}
    for item in report["verdicts"]:
        verdicts[item["verdict"]] = verdicts.get(item["verdict"], 0) + 1
    audits = statistics.median(result["audits"] for result in results)
    cpu = statistics.median(result["cpu"] for result in results)
    session = statistics.median(result["session"] for result in results)
    process = statistics.median(result["process"] for result in results)
    print(
        f"{args.runs} sibling runs × {args.items} items; {results[0]['items']} variance audit cases; verdicts {verdicts}"
    )
    print(
        f"audits (setup + call + teardown, median of {args.repeats}): {audits:.3f} s wall, {cpu:.3f} s CPU "
        f"— budget 2 s: {audits / 2:.2f}x wall, {cpu / 2:.2f}x CPU"
    )
    print(
        f"pytest session incl. collection: {session:.3f} s; whole process incl. interpreter start: {process:.3f} s"
    )
    return 0 if min(audits, cpu) < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
