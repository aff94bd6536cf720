"""How a user's mistake or a refused action is told: one line naming what was expected, never a traceback.

Every part raises :class:`Refusal` for a refusal the user can act on (a runner verb, the report index, a
profile that cannot be used); ``runaudit`` prints its message on one line and exits with status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path


class Refusal(RuntimeError):
    """A refusal the user can act on: printed as one line, never as a traceback (exit status 2)."""


class WriterError(Refusal):
    """The capsule writer was used in a way that would produce a capsule the closure audits refuse."""


def existing_dir(value: str) -> Path:
    """argparse type: an existing directory, resolved."""
    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not an existing directory: {value}")
    return path.resolve()
