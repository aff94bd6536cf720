"""The ``runaudit`` console script: one sub-command per runner verb.

Each verb's module registers itself through ``add_verb(verbs)``. A refusal the user can act on
(:class:`~runaudit.usage.Refusal`) ends in one line on stderr and exit status 2; a verb that ran
but whose evidence did not hold (a quarantined close, a refused receipt) exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

import runaudit
from runaudit.shutdown import skip_final_collection
from runaudit.usage import Refusal

USAGE_ERROR = 2
INTERRUPTED = 130  # what a shell reports for a command that Ctrl-C (SIGINT) ended: 128 + 2
VERB_MODULES = (
    "runaudit.runners.close",
    "runaudit.runners.manifest",
    "runaudit.runners.custody",
    # remote_close adds the box options to close, so it comes after it.
    "runaudit.runners.remote_close",
    "runaudit.runners.show_profiles",
    "runaudit.runners.push",
    "runaudit.runners.launch",
    "runaudit.runners.watch",
    # follow adds --follow to watch, and chains the verbs of remote_close.
    "runaudit.runners.follow",
    "runaudit.runners.queue",
    "runaudit.runners.sweep",
    "runaudit.runners.remote_audit",
    "runaudit.runners.pull",
    "runaudit.runners.down",
    "runaudit.runners.clocks",
    "runaudit.runners.cluster",
    "runaudit.runners.index_splits",
    "runaudit.reports.index",
    "runaudit.reports.table",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runaudit", description=runaudit.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"runaudit {runaudit.__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name in VERB_MODULES:
        importlib.import_module(name).add_verb(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    skip_final_collection()
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except Refusal as exc:
        print(f"runaudit {args.verb}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as exc:  # the machine's answer about a path (a link to a disk not mounted, a full disk)
        print(f"runaudit {args.verb}: error: {_os_error(exc)}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:  # Ctrl-C is the user's choice, not a crash: one line, never a traceback
        print(
            f"runaudit {args.verb}: interrupted (Ctrl-C) before it finished; each file it writes is written "
            "whole or not at all, so run the same command again",
            file=sys.stderr,
        )
        return INTERRUPTED


def _os_error(exc: OSError) -> str:
    """What the system refused, on which path, in one line: a folder the verb needs is a file, or a link
    to a disk not mounted yet (``export/`` on a data disk), ended in a FileExistsError traceback."""
    where = " -> ".join(repr(str(name)) for name in (exc.filename, exc.filename2) if name is not None)
    reason = exc.strerror or str(exc)
    if isinstance(exc, FileExistsError):
        reason += " (a file, or a link to something that does not exist, stands where a folder must be)"
    return (
        f"{where}: {reason}; nothing after it was done" if where else f"{reason}; nothing after it was done"
    )


# ``python -m runaudit.cli`` did nothing and exited 0; it runs the verb as ``python -m runaudit`` does
if __name__ == "__main__":
    raise SystemExit(main())
