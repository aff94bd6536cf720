"""runaudit: pytest-native audits for deep-learning runs trained on GPUs you own or rent.

The gates live in the design card's top-level folders (``audits/``, ``fixtures/``, ``runners/``,
``reports/``, ``profiles/``, ``examples/``). Installed, setuptools maps each under this namespace; in a
plain source checkout the folders sit beside this package, so ``__path__`` is widened to find them.
Either way they import as ``runaudit.<folder>`` and no generic top-level name leaks into site-packages.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from pathlib import Path as _Path

_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "fixtures" / "plugin.py").is_file():
    __path__.append(str(_checkout))  # type: ignore[name-defined]  # noqa: F821

try:
    __version__ = _metadata.version("runaudit")
except _metadata.PackageNotFoundError:  # a bare checkout that was never installed
    __version__ = "0.0.0+checkout"

__all__ = ["__version__"]
