"""The digits demo's pytest plugin: builds the demo project when a session asks for ``--run=demo``.

Registered through its own ``pytest11`` entry point (pyproject.toml), so the harness never imports the
example: it calls the ``pytest_runaudit_build_demo`` hook and this module answers. Nothing heavy is
imported until the hook is called.
"""

from __future__ import annotations

import sys
from pathlib import Path

from runaudit.resolve import ResolutionError


def pytest_runaudit_build_demo(demo_root: Path) -> Path:
    try:
        from runaudit.examples.digits.build import DemoBuildError, ensure_demo

        try:
            return ensure_demo(demo_root, progress=sys.stderr)
        except DemoBuildError as exc:
            raise ResolutionError(f"--run=demo: {exc}") from None
    except ImportError as exc:
        raise ResolutionError(
            f"--run=demo needs the demo's dependencies ({exc.name} is missing): pip install 'runaudit[demo]'"
        ) from None
