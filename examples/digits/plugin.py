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
        except OSError as exc:  # a read-only or full cache, a HOME that does not exist (a container's --user)
            raise ResolutionError(
                f"--run=demo: cannot build the demo under {demo_root}: {exc.strerror or exc} "
                f"({exc.filename or demo_root}); point XDG_CACHE_HOME at a writable folder with room to spare"
            ) from None
    except ImportError as exc:
        raise ResolutionError(
            f"--run=demo needs the demo's dependencies ({exc.name} is missing): pip install 'runaudit[demo]'"
        ) from None
