"""The capsule (control-plane) audits of the demo capsule against bare pytest startup, side by side.

    python benchmarks/bench_capsule_audits.py [--root DIR] [--repeat 7]

(a) ``python -m pytest -p no:cacheprovider -q <empty test file>``: what any pytest run costs here;
(b) ``python -m pytest --run=<capsule> --runaudit-root <root> -m custody -k capsule -q -p no:cacheprovider``,
    the page's figures already drawn by an earlier audit of the same bytes (reports/figure_cache.py);
(c) the same with an empty figure cache each time: the first audit of a run draws its training curves;
(d) the audits alone: ``--runaudit-report-format json``, no page.
All run as fresh processes from the same neutral folder, interleaved (a, b, c, d, a, ...) after one
warm-up each, so that machine load falls on all alike. Prints each median, the spread and the ratios
b / a (target: at most 3x), c / a and d / a.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 3.0


def timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = time.perf_counter() - started
    # 5: the empty file collects no test, as intended; 1: the capsule audits held, but -k capsule is a
    # subset of the custody gate, which never makes a teardown "yes" (the JSON's verdicts are checked below).
    if done.returncode not in (0, 1, 5):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed, done.returncode


def demo_capsule(root: Path) -> Path:
    from runaudit.examples.digits.build import ensure_demo  # imports torch: only to build, never measured

    return ensure_demo(root, progress=io.StringIO())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="project root holding the sealed demo (built if absent)")
    parser.add_argument("--repeat", type=int, default=7, help="measured runs of each command (default 7)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-capsule-") as scratch:
        work = Path(scratch)
        root = (args.root or work / "root").resolve()
        root.mkdir(parents=True, exist_ok=True)
        capsule = demo_capsule(root)
        empty = work / "test_empty.py"
        empty.write_text('"""No tests: pytest startup and collection only."""\n')
        bare = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(empty)]
        audits = [
            *(sys.executable, "-m", "pytest", f"--run={capsule}", f"--runaudit-root={root}"),
            *("-m", "custody", "-k", "capsule", "-q", "-p", "no:cacheprovider"),
            f"--runaudit-report-dir={work / 'reports'}",
        ]
        figures = work / "figures"
        warm = {**os.environ, "RUNAUDIT_FIGURE_CACHE": str(figures / "kept")}
        samples: dict[str, list[float]] = {"bare": [], "audits": [], "first": [], "json": []}
        for round_index in range(args.repeat + 1):
            cold = {**os.environ, "RUNAUDIT_FIGURE_CACHE": str(figures / f"cold-{round_index}")}
            for name, command, env in (
                ("bare", bare, None),
                ("audits", audits, warm),
                ("first", audits, cold),
                ("json", [*audits, "--runaudit-report-format=json"], cold),
            ):
                elapsed, _ = timed(command, cwd=work, env=env)
                if round_index:  # round 0 warms the page cache, the bytecode cache and the figure cache
                    samples[name].append(elapsed)
        report = json.loads((work / "reports" / f"{capsule.name}.json").read_text(encoding="utf-8"))
        if report["summary"]["failed"] or report["summary"]["error"]:
            raise SystemExit(f"the capsule audits did not hold on {capsule}: {report['summary']}")

    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratio = medians["audits"] / medians["bare"]
    first = medians["first"] / medians["bare"]
    print(f"capsule audits of {capsule} vs bare pytest, {args.repeat} interleaved runs each")
    for name, label in (
        ("bare", "(a) bare pytest, empty test file"),
        ("audits", "(b) -m custody -k capsule"),
        ("first", "(c) same, figures drawn afresh"),
        ("json", "(d) same, no page (json report)"),
    ):
        values = samples[name]
        print(f"{label:34s} median {medians[name]:6.3f} s   min {min(values):6.3f}   max {max(values):6.3f}")
    verdict = "within" if ratio <= TARGET_RATIO else "ABOVE"
    print(f"ratio (b)/(a) {ratio:.2f}x  ({verdict} the {TARGET_RATIO:.0f}x target)")
    print(f"ratio (c)/(a) {first:.2f}x  (the first audit of a run, which draws its training curves)")
    print(f"ratio (d)/(a) {medians['json'] / medians['bare']:.2f}x  (the audits alone)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
