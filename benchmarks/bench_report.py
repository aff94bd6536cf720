"""Benchmark: the sweep index of 200 runs × 60 audits (12k verdicts) — bytes and time to paint in Chromium.

Budgets from issue 7: the page stays under 5 MB and renders in headless Chromium in under 2 s. The
baseline named there is pytest-html, whose JavaScript-rendered table takes ~40 s to open 4k tests
(pytest-dev/pytest-html#684). When pytest-html is importable (``--baseline-path`` adds a folder to its
``PYTHONPATH``, e.g. one filled by ``pip install --target DIR pytest-html``), the same number of results
is written by pytest-html ``--self-contained-html`` and opened in the same browser, side by side.
Medians of ``--repeat`` loads; ratios printed against the budgets and the baseline.

    python benchmarks/bench_report.py [--runs 200] [--audits 60] [--repeat 5] [--baseline-path DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the Chromium driver the browser tests use

import headless  # noqa: E402

from runaudit.reports import index  # noqa: E402

SIZE_BUDGET = 5 * 1024 * 1024
TIME_BUDGET_S = 2.0
GATES = {
    "custody": {
        "capsule": 16, "manifest": 6, "checkpoint": 7,
    },
    "science": {
        "history": 9, "leakage": 8, "variance": 8, "collapse": 6,
    },
}  # fmt: skip
VERDICTS = ("passed",) * 14 + ("disclosed", "disclosed", "not_run", "failed", "not_applicable", "error")


def audit_ids(count: int) -> list[tuple[str, str]]:
    ids = [
        (f"{module}.check_{n:02d}", gate)
        for gate, modules in GATES.items()
        for module, checks in modules.items()
        for n in range(checks)
    ]
    return ids[:count]


def synthetic_report(run_id: str, audits: list[tuple[str, str]], rng: random.Random) -> dict[str, Any]:
    """A schema-valid report with one verdict per audit and realistic message and evidence sizes."""
    verdicts = []
    for audit, gate in audits:
        verdict = "passed" if gate == "custody" and rng.random() < 0.97 else rng.choice(VERDICTS)
        if gate == "custody" and verdict == "disclosed":
            verdict = "passed"
        verdicts.append(
            {
                "audit": audit,
                "gate_class": gate,
                "subject": rng.choice(["", "main", "main/accuracy", "best.pth"]),
                "verdict": verdict,
                "message": f"run {run_id}: {audit} found {rng.randint(0, 99)} item(s) over the threshold of 0.05",
                "evidence": {"checked": rng.randint(1, 5000), "values": [rng.random() for _ in range(4)]},
                "affects": ["test/main:accuracy"] if verdict == "disclosed" else [],
                "where": "local",
            }
        )
    counts = {name: sum(item["verdict"] == name for item in verdicts) for name in
              ("passed", "failed", "disclosed", "not_applicable", "not_run", "error")}  # fmt: skip
    custody_ok = all(
        item["verdict"] in ("passed", "not_applicable")
        for item in verdicts
        if item["gate_class"] == "custody"
    )
    return {
        "schema_version": "runaudit.report/1",
        "run_id": run_id,
        "root": "/data/sweep",
        "run_path": f"/data/sweep/runs/{run_id}",
        "origin": "runs",
        "started_utc": "2026-01-02T03:04:05Z",
        "harness_version": "0.1.0",
        "command": ["pytest", f"--run={run_id}"],
        "invocation_dir": "/data/sweep",
        "reproduce": f"cd /data/sweep && python -m pytest --run={run_id}",
        "strict": False,
        "environment": {
            "node": "n1",
            "platform": "Linux",
            "python": "3.11.7",
            "executable": "/usr/bin/python3",
            "packages": {},
        },
        "run_context": {"source": None, "environment": None, "training": None, "seed": None},
        "verdicts": verdicts,
        "summary": counts,
        "custody_gate": {"expected": {}, "session": "completed"},
        "custody_ok": custody_ok,
        "receipt": None,
        "teardown": {"answer": "not yet" if custody_ok else "no", "reason": "synthetic"},
        "tests": [],
        "headlines": [],
        "headline_problems": [],
    }


def median_load(browser: headless.Chromium, page: Path, repeat: int, check: str) -> tuple[float, Any]:
    seconds = []
    for _ in range(repeat):
        load = browser.load(page)
        if load.console_errors or load.requests:
            raise SystemExit(f"{page.name}: console errors {load.console_errors}, requests {load.requests}")
        seconds.append(load.seconds)
    return statistics.median(seconds), browser.evaluate(check)


def pytest_html_baseline(folder: Path, results: int, extra_path: str | None) -> Path | None:
    """pytest-html's self-contained report of ``results`` trivial tests, or None when it is not installed."""
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (extra_path, env.get("PYTHONPATH"))))
    probe = subprocess.run(
        [sys.executable, "-c", "import pytest_html"], env=env, capture_output=True, check=False
    )
    if probe.returncode != 0:
        return None
    (folder / "test_many.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({results}))\ndef test_case(i):\n    assert i >= 0\n"
    )
    page = folder / "pytest-html.html"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_html", "-p", "pytest_metadata",
         "--html", str(page), "--self-contained-html", "test_many.py"],
        cwd=folder, env=env, capture_output=True, check=True, timeout=1800,
    )  # fmt: skip
    return page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--audits", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline-path", help="a folder holding pytest_html (added to PYTHONPATH)")
    args = parser.parse_args()
    rng = random.Random(7)
    audits = audit_ids(args.audits)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as temp:
        folder = Path(temp) / "reports"
        folder.mkdir()
        for number in range(args.runs):
            run_id = f"sweep-{number:04d}"
            (folder / f"{run_id}.json").write_text(json.dumps(synthetic_report(run_id, audits, rng)))
        writes = []
        for _ in range(3):
            started = time.perf_counter()
            page, model = index.write_index(folder)
            writes.append(time.perf_counter() - started)
        size = page.stat().st_size
        cells = args.runs * len(model["columns"])
        print(f"sweep index: {args.runs} runs × {len(model['columns'])} audits = {cells} verdict cells")
        print(
            f"  written in {statistics.median(writes):.2f} s (median of 3; reads and validates {args.runs} reports)"
        )
        print(f"  size {size / 2**20:.2f} MiB = {size / SIZE_BUDGET:.2f}× the 5 MB budget")
        baseline = pytest_html_baseline(Path(temp), cells, args.baseline_path)
        with headless.Chromium() as browser:
            seconds, rows = median_load(
                browser, page, args.repeat, "document.querySelectorAll('#sweep tbody tr').length"
            )
            assert rows == args.runs, rows
            print(
                f"  Chromium load to paint {seconds:.3f} s (median of {args.repeat}) = {seconds / TIME_BUDGET_S:.2f}× the 2 s budget"
            )
            if baseline is None:
                print(
                    "baseline pytest-html: not importable (pip install --target DIR pytest-html; --baseline-path DIR)"
                )
                return
            base_size = baseline.stat().st_size
            base_seconds, base_rows = median_load(
                browser,
                baseline,
                max(1, args.repeat // 2),
                "document.querySelectorAll('#results-table tbody').length",
            )
            print(
                f"baseline pytest-html --self-contained-html, {cells} results ({base_rows} table bodies rendered):"
            )
            print(f"  size {base_size / 2**20:.2f} MiB; runaudit index is {size / base_size:.2f}× its size")
            print(
                f"  Chromium load to paint {base_seconds:.3f} s; runaudit index takes {seconds / base_seconds:.2f}× its time"
            )


if __name__ == "__main__":
    main()
