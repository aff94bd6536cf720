"""The control plane stays light: the capsule gate and the plugin never import torch.

Each check runs in a fresh interpreter, since this test process has long imported torch for the demo.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runaudit.examples.digits.build import DEMO_RUN_ID

# Runs pytest in-process in a fresh interpreter, then reports which heavy modules the session imported.
SESSION_PROBE = """
import sys
import pytest
code = pytest.main(sys.argv[1:])
print("PROBE", int(code), "torch" in sys.modules, "pyarrow" in sys.modules)
"""
HEAVY = ("torch", "pyarrow", "numpy", "jsonschema", "PIL", "jinja2")


def fresh_python(code: str, *args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_capsule_gate_does_not_import_torch(demo_project: Path, tmp_path: Path) -> None:
    output = fresh_python(
        SESSION_PROBE,
        *("-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", "-q"),
        *("--run", DEMO_RUN_ID, "--root", str(demo_project), "--report-dir", str(tmp_path)),
        *("-m", "custody", "-k", "capsule"),
        cwd=tmp_path,
    )
    probe = next(line for line in output.splitlines() if line.startswith("PROBE "))
    # The audits ran and read parquet (so the probe sees the session's imports), yet torch never loaded.
    # Exit 1: every capsule audit held, but a subset of the custody gate (-k capsule) is never a teardown yes.
    assert probe == "PROBE 1 False True", output
    assert "safe to tear down? NO, incomplete" in output
    assert (tmp_path / "demo.json").is_file()


def test_plugin_and_cli_import_nothing_heavy(tmp_path: Path) -> None:
    """Nor do the plugins an audit session registers (a custody re-audit that reads no table and draws no
    page pays for none of numpy, the page or the claims' statistics)."""
    output = fresh_python(
        "import sys, runaudit.fixtures.plugin, runaudit.cli; runaudit.cli.build_parser(); "
        "import importlib; from runaudit.fixtures.plugin import AUDIT_PLUGINS; "
        "[importlib.import_module(name) for name in (*AUDIT_PLUGINS, 'runaudit.reports.collector')]; "
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))",
        cwd=tmp_path,
    )
    assert output.strip() == "[]", output


def test_the_suite_and_the_interpreters_it_starts_keep_the_bytecode_they_compile(tmp_path: Path) -> None:
    """``tests/conftest.py`` drops ``PYTHONDONTWRITEBYTECODE``, which CI's machines set: with it, every
    interpreter the suite starts compiled runaudit again, and every session rewrote the audit modules again
    (about a fifth of the CPU of the modules that start many sessions)."""
    assert not sys.dont_write_bytecode
    output = fresh_python("import sys; print(sys.flags.dont_write_bytecode)", cwd=tmp_path)
    assert output.split() == ["0"]
