"""``runaudit close|manifest ... --host ...``: the producer's verbs, executed on the box itself.

Closing is a filesystem rename and the manifest hashes every sealed byte, so both must run where
``active/`` and ``export/`` live; over SSH this module runs the box's own ``python -m runaudit close`` or
``manifest`` and relays its answer. It adds the box options to the verbs registered by
:mod:`runaudit.runners.close` and :mod:`runaudit.runners.manifest` (listed before it in
``VERB_MODULES``), so one verb acts locally or on a box, with the same pinned SSH options as every other.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
from collections.abc import Callable, Sequence

from runaudit.runners.box import Box, add_box_arguments, add_workdir_argument, box_from_args, require_run_id
from runaudit.runners.manifest import roster_from_args
from runaudit.runners.ssh import Remote, Result
from runaudit.usage import Refusal

NOT_INSTALLED = (126, 127)


def python_on_box(
    box: Box, workdir: str | None, module_args: Sequence[str], launcher: Sequence[str] = ()
) -> str:
    """``cd <workdir> && [launcher] <python> -m ...``: the pushed code (in ``workdir``) shadows any
    installed copy; ``launcher`` is a command that starts the interpreter (``env -u ...``)."""
    folder = workdir or str(box.root)
    path = f"PYTHONPATH={shlex.quote(workdir)}${{PYTHONPATH:+:$PYTHONPATH}} " if workdir else ""
    interpreter = shlex.join([*launcher, box.python])
    return f"cd {shlex.quote(folder)} && {path}exec {interpreter} -m {shlex.join(module_args)}"


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


def manifest_on_box(
    box: Box,
    roster: Sequence[str],
    pull_id: str,
    node: str | None,
    workdir: str | None,
    *,
    subset: bool = False,
) -> Result:
    """The roster travels as run ids in argv: each is a checked safe id, never a secret or a path."""
    args = ["runaudit", "manifest", "--root", str(box.root), "--pull-id", pull_id, "--runs", *roster]
    return run_on_box(
        box, workdir, [*args, *(["--node", node] if node else []), *(["--subset"] if subset else [])]
    )


def _on_box(args: argparse.Namespace) -> tuple[Box, Result, str]:
    box = box_from_args(args)
    if args.verb == "close":
        return box, close_on_box(box, args.run_id, args.workdir), f"close {args.run_id}"
    roster = roster_from_args(args)
    return (
        box,
        manifest_on_box(box, roster, args.pull_id, args.node, args.workdir, subset=args.subset),
        f"manifest {args.pull_id}",
    )


def _dispatch(local: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    if args.host is None:
        return local(args)
    if args.remote_root is None:
        raise Refusal(f"{args.verb} --host needs --remote-root (the project root on the box)")
    if getattr(args, "root", None) is not None:
        raise Refusal(f"{args.verb} --host acts on --remote-root on the box; --root names a folder here")
    box, result, what = _on_box(args)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    print(f"{what}: ran on {box.endpoint.label}, exit status {result.exit_code}", file=sys.stderr)
    return result.exit_code


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for verb in ("close", "manifest"):
        parser = verbs.choices[verb]
        add_box_arguments(parser, required=False)
        add_workdir_argument(parser)
        parser.set_defaults(handler=functools.partial(_dispatch, parser.get_default("handler")), verb=verb)
