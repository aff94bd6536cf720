"""``runaudit close RUN_ID --host ...``: the closure of docs/capsule.md §1, executed on the box itself.

Closing is a filesystem rename on the producer, so it must run where ``active/`` lives; over SSH this
module runs the box's own ``python -m runaudit close`` and relays its answer. It adds the box options to
the ``close`` verb registered by :mod:`runaudit.runners.close` (listed before it in ``VERB_MODULES``),
so one verb closes locally or on a box.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
from collections.abc import Callable, Sequence

from runaudit.runners.box import Box, add_box_arguments, box_from_args, require_run_id
from runaudit.runners.ssh import Remote, Result
from runaudit.usage import Refusal

NOT_INSTALLED = (126, 127)


def python_on_box(box: Box, workdir: str | None, module_args: Sequence[str]) -> str:
    """``cd <workdir> && <python> -m ...``: the pushed code (in ``workdir``) shadows any installed copy."""
    folder = workdir or str(box.root)
    path = f"PYTHONPATH={shlex.quote(workdir)}${{PYTHONPATH:+:$PYTHONPATH}} " if workdir else ""
    return f"cd {shlex.quote(folder)} && {path}exec {shlex.quote(box.python)} -m {shlex.join(module_args)}"


def run_on_box(box: Box, workdir: str | None, module_args: Sequence[str], *, timeout: float = 1800) -> Result:
    with Remote(box.endpoint) as remote:
        result = remote.run(python_on_box(box, workdir, module_args), timeout=timeout)
    if result.exit_code in NOT_INSTALLED:
        raise Refusal(
            f"{box.python} -m {module_args[0]} did not start on {box.endpoint.label} ({result.tail()}); "
            "push the code and pass --workdir, or install runaudit on the box"
        )
    return result


def close_on_box(box: Box, run_id: str, workdir: str | None) -> Result:
    require_run_id(run_id)
    return run_on_box(box, workdir, ["runaudit", "close", run_id, "--root", str(box.root)])


def _dispatch(local: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    if args.host is None:
        return local(args)
    if args.remote_root is None:
        raise Refusal("close --host needs --remote-root (the project root on the box)")
    box = box_from_args(args)
    result = close_on_box(box, args.run_id, args.workdir)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    print(
        f"close {args.run_id}: ran on {box.endpoint.label}, exit status {result.exit_code}", file=sys.stderr
    )
    return result.exit_code


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.choices["close"]
    add_box_arguments(parser, required=False)
    parser.add_argument("--workdir", help="with --host: the pushed code on the box (put on PYTHONPATH)")
    parser.set_defaults(handler=functools.partial(_dispatch, parser.get_default("handler")))
