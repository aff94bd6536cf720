"""runaudit: pytest-native audits for deep-learning runs trained on GPUs you own or rent.

This package's own modules are the pytest-free core: every decision that more than one part makes
(receipts, manifests, hashing, the verdict vocabulary, the audit catalog, contract schemas, ``train.csv``
history, statistics, platform profiles, time). The design card's top-level folders install under this
namespace (pyproject.toml ``[tool.setuptools.package-dir]``) and call the core: ``audits/`` read through
``fixtures/`` (the pytest plugin), ``runners/`` move runs, ``reports/`` tell. ``tests/test_boundaries.py``
holds every part to that direction. Install the checkout (``pip install -e .``) to import them.
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("runaudit")
except _metadata.PackageNotFoundError:  # a bare checkout that was never installed
    __version__ = "0.0.0+checkout"

__all__ = ["__version__"]
