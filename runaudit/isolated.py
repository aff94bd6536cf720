"""A ``pytest --run`` session that runaudit starts itself judges as one started in an empty folder.

The runners (close, verify, accept) and a group session's members each audit a capsule in a pytest session
of their own. Nothing around the process that starts one may change that gate: no configuration file or
``conftest.py`` of the folder it starts in, no plugin but runaudit's (a user's pytest-xdist would otherwise
make ``-n`` mean something, and any plugin may reorder or skip), no pytest cache, and none of what pytest
reads from the environment for the session that started it: a ``PYTEST_ADDOPTS="-n 2"`` meant for the
user's own test runs made every ``runaudit verify`` refuse (and revoke the receipt it had).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath

PLUGIN = "runaudit.fixtures.plugin"
# What pytest and pytest-xdist read from the environment for the session they run, not for ours.
STARTER_VARIABLES = (
    "PYTEST_ADDOPTS",  # options meant for the starter (a -k there would deselect audits, -n is unknown)
    "PYTEST_PLUGINS",  # plugins to load, read even with autoload off
    "PYTEST_CURRENT_TEST",
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_XDIST_TESTRUNUID",
)


def environment(starter: Mapping[str, str]) -> dict[str, str]:
    """The starter's environment without what pytest would read as meant for it, and no plugin autoload."""
    kept = {name: value for name, value in starter.items() if name not in STARTER_VARIABLES}
    kept["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return kept


def environment_words() -> list[str]:
    """``env`` words that give a session started by a shell elsewhere (on a box over SSH, in a Slurm or
    Kubernetes task) what :func:`environment` gives a local one: there the starter's variables come from
    the box's login files or, through ``sbatch``'s default ``--export=ALL``, from the submitting shell.
    ``env -u`` is in GNU coreutils and BusyBox."""
    unset = [word for name in STARTER_VARIABLES for word in ("-u", name)]
    return ["env", *unset, "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1"]


def pytest_arguments(rootdir: PurePath | str, null_device: str = os.devnull) -> list[str]:
    """pytest's own arguments for such a session rooted at ``rootdir``: runaudit's plugin by name (the one
    plugin, where autoload is off), no configuration file from wherever it starts (``-c`` the null device;
    on a box or a cluster node, ``null_device`` is that machine's), no cache."""
    return ["-p", PLUGIN, "-p", "no:cacheprovider", "-c", null_device, "--rootdir", str(rootdir)]


def command(rootdir: Path, arguments: Sequence[str]) -> list[str]:
    """Such a session in a fresh interpreter; ``-P`` keeps the current folder off ``sys.path``, so that no
    module there (a ``pytest.py``) is imported instead of the installed one."""
    return [sys.executable, "-P", "-m", "pytest", *pytest_arguments(rootdir), *arguments]
