"""Runners move: thin verbs over the filesystem, rsync, SSH and tmux that prove what they did.

``runaudit <verb>`` and ``python -m runaudit.runners <verb>`` are the same thing. Each verb lives in its
own module, which exposes ``add_verb(verbs)`` to register its sub-command.
"""

from __future__ import annotations

import argparse
from pathlib import Path


class RunnerError(RuntimeError):
    """A refusal the user can act on: printed as one line, never as a traceback (exit status 2)."""


def existing_dir(value: str) -> Path:
    """argparse type: an existing directory, resolved."""
    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not an existing directory: {value}")
    return path.resolve()
