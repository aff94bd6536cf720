"""Run the harness's own audit suite on one capsule in a fresh pytest process and read its JSON report.

Runners (close, verify, accept) use this so that a gate decided on the command line is exactly the gate a
user gets from ``pytest --run``; a fresh process also keeps torch and pytest state out of the runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import runaudit
from runaudit.fixtures.verdicts import AUDITS_DIR
from runaudit.reports.document import report_stem

HELD = ("passed", "not_applicable")


def run_suite(
    capsule: Path, root: Path, *, modules: Sequence[str] = (), args: Sequence[str] = ()
) -> tuple[dict[str, Any] | None, str]:
    """``pytest --run=capsule --root=root --strict [args] [audits/<modules>]``: (report or None, output)."""
    paths = [str(AUDITS_DIR / name) for name in modules if (AUDITS_DIR / name).is_file()] or [str(AUDITS_DIR)]
    checkout = str(Path(runaudit.__file__).resolve().parent.parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")])),
        # The gate alone: third-party plugins the user has installed neither slow it nor change it.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    with tempfile.TemporaryDirectory(prefix="runaudit-suite-") as reports:
        # JSON only (the runner reads verdicts, not the page); no per-test capture and no end-of-session
        # garbage-collection sweeps for unraisable exceptions: together about a second per capsule.
        command = [
            sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(capsule),
            "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
            "--capture=no", "-q", "--run", str(capsule), "--root", str(root), "--report-dir", reports,
            "--report-format", "json", "--strict", *args, *paths,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root)
        output = done.stdout + done.stderr
        report_path = Path(reports) / f"{report_stem(capsule.name)}.json"
        if not report_path.is_file():
            tail = output.strip().splitlines()[-5:]
            return None, "the audits did not produce a report: " + " | ".join(tail)
        return json.loads(report_path.read_text(encoding="utf-8")), output


def failures(report: dict[str, Any]) -> list[str]:
    """One line per verdict that does not hold (anything but passed or not_applicable)."""
    return [
        f"{item['audit']}{_bracketed(item['subject'])} {item['verdict']}: {item['message']}"
        for item in report["verdicts"]
        if item["verdict"] not in HELD
    ]


def _bracketed(subject: str) -> str:
    return f"[{subject}]" if subject else ""
