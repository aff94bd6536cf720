"""How long the demo's whole smoke gate takes, against its 20 s budget and against a shallow smoke.

    python benchmarks/smoke_demo.py [--repeats 3]

Each repeat is a fresh process, as a user runs it: ``pytest -p runaudit.examples.digits.adapter -m
smoke`` over the smoke audits and the live collapse probes (imports, the tiny capsule's training and its
closure subprocess included). The baseline, measured side by side, is a shallow smoke in the style of
Lightning's ``fast_dev_run``: import the demo, build it, one step, ``isfinite(loss)``. Medians; the
ratios say what the depth costs and how much of the budget it uses.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
BUDGET_S = 20.0
AUDITS = [str(CHECKOUT / "audits" / name) for name in ("test_smoke.py", "test_collapse.py")]
SHALLOW = """
import numpy as np, torch
from runaudit.examples.digits import data
from runaudit.examples.digits.train import DEFAULT_CONFIG, build_training, train_step
dataset = data.load()
indices = np.arange(16)
model, optimizer, scheduler = build_training(DEFAULT_CONFIG, 1000)
inputs, labels = torch.from_numpy(dataset.inputs(indices)), torch.from_numpy(dataset.labels[indices])
loss, _ = train_step(model, optimizer, scheduler, inputs, labels)
assert np.isfinite(loss)
"""


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")])),
    }


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds, and CPU seconds (user + system) of the process and everything it started."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(
            f"benchmark: {' '.join(command[:6])}... exited {done.returncode}:\n{done.stdout[-2000:]}"
        )
    return elapsed, cpu


def per_audit(junit: Path) -> dict[str, float]:
    return {
        case.get("name"): float(case.get("time", 0.0)) for case in ElementTree.parse(junit).iter("testcase")
    }


def summary(label: str, samples: list[tuple[float, float]]) -> tuple[float, float]:
    wall = statistics.median(sample[0] for sample in samples)
    cpu = statistics.median(sample[1] for sample in samples)
    runs = ", ".join(f"{sample[0]:.2f}" for sample in samples)
    print(f"{label:<42} wall median {wall:6.2f} s  cpu median {cpu:6.2f} s  (wall runs: {runs})")
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    full: list[tuple[float, float]] = []
    shallow: list[tuple[float, float]] = []
    audits: dict[str, list[float]] = {}
    smoke = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    smoke += ["-p", "runaudit.examples.digits.adapter", "-m", "smoke"]
    with tempfile.TemporaryDirectory(prefix="runaudit-bench-") as scratch:
        folder = Path(scratch)
        for repeat in range(args.repeats):
            junit = folder / f"smoke-{repeat}.xml"
            full.append(timed([*smoke, f"--junitxml={junit}", *AUDITS], folder))
            shallow.append(timed([sys.executable, "-c", SHALLOW], folder))
            for name, seconds in per_audit(junit).items():
                audits.setdefault(name, []).append(seconds)
    print(
        f"{args.repeats} repeats; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores at the end"
    )
    full_wall, full_cpu = summary("full smoke (12 audits, fresh process)", full)
    shallow_wall, shallow_cpu = summary("shallow smoke (build, 1 step, isfinite)", shallow)
    print(
        f"ratios: full wall / {BUDGET_S:.0f} s budget {full_wall / BUDGET_S:.2f}; "
        f"full cpu / budget {full_cpu / BUDGET_S:.2f}; full / shallow wall {full_wall / shallow_wall:.2f}"
    )
    for name, seconds in sorted(audits.items(), key=lambda item: -statistics.median(item[1])):
        print(f"  {name:<28} median {statistics.median(seconds):6.3f} s")
    return 0 if full_wall <= BUDGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
