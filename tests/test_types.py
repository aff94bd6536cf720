"""The installed package type-checks under the project's own mypy settings ([tool.mypy] in pyproject.toml).

mypy cannot follow the editable checkout: [tool.setuptools.package-dir] maps audits/, fixtures/,
runners/, reports/, ... into ``runaudit.*``. So the checkout is installed the way a user gets it (``pip
install --target``, no dependencies) and mypy checks that tree with the checkout's configuration. The
sources are copied first, so that the build neither writes ``build/`` into the checkout nor ships a stale
module a previous build left there.

mypy, and the stubs [tool.mypy] relies on, are in the ``test`` extra: a missing one is a broken install,
never a skip, hence the plain import below.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import mypy.version
import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
PYPROJECT = CHECKOUT / "pyproject.toml"
INSTALL_S = 300  # about 4 s alone; generous for a loaded two-core CI machine
MYPY_S = 900  # about 20 s cold alone (torch is skipped); several times that beside the rest of the suite

pytestmark = pytest.mark.slow


def _copy_sources(destination: Path) -> None:
    """What a build of the checkout reads: pyproject.toml, the readme and every mapped package folder."""
    pyproject = tomllib.loads(PYPROJECT.read_text())
    destination.mkdir()
    shutil.copy2(PYPROJECT, destination / PYPROJECT.name)
    shutil.copy2(CHECKOUT / pyproject["project"]["readme"], destination)
    folders = {Path(folder).parts[0] for folder in pyproject["tool"]["setuptools"]["package-dir"].values()}
    for folder in sorted(folders):
        shutil.copytree(
            CHECKOUT / folder, destination / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )


def _run(argv: list[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def test_installed_package_passes_mypy(tmp_path: Path) -> None:
    source, installed = tmp_path / "source", tmp_path / "installed"
    _copy_sources(source)
    install = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(installed),
            str(source),
        ],
        cwd=tmp_path,
        timeout=INSTALL_S,
    )
    assert install.returncode == 0, f"pip could not install the checkout:\n{install.stdout}{install.stderr}"
    assert (installed / "runaudit" / "audits" / "__init__.py").is_file(), (
        "the package-dir mapping was not applied"
    )

    # Run from the installed tree, which mypy searches before site-packages (and the editable checkout).
    checked = _run(
        [
            sys.executable,
            "-m",
            "mypy",
            "-p",
            "runaudit",
            "--config-file",
            str(PYPROJECT),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),  # fresh: a cache from another tree could hide an error
        ],
        cwd=installed,
        timeout=MYPY_S,
    )
    assert checked.returncode == 0, (
        f"mypy {mypy.version.__version__} reports type errors in the installed package "
        f"(exit {checked.returncode}):\n{checked.stdout}{checked.stderr}"
    )
