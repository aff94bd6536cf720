"""``runaudit audit RUN_ID --host ...``: run the same pytest suite on the box and bring the verdicts home.

pytest never opens SSH itself: this verb runs ``python -m pytest --run RUN_ID`` on the box (so the
live and preflight audits read the box's own files, ``/proc`` and GPUs), fetches the JSON report over
SFTP, and merges its verdicts into ``<root>/reports/<run-id>.json`` locally, each one labelled with
``where`` it ran. Reports are cumulative: a verdict replaces only the earlier one of the same audit,
subject and place.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runaudit import isolated
from runaudit.atomic import write_bytes_atomic, write_json_atomic
from runaudit.ids import report_stem
from runaudit.manifest import load_json
from runaudit.options import REPORT_DIR_OPTION, ROOT_OPTION, RUN_OPTION
from runaudit.reports import document
from runaudit.reports.receipt import receipt_block
from runaudit.reports.schema import report_problems
from runaudit.resolve import GROUP
from runaudit.runners.box import Box, add_box_arguments, add_workdir_argument, box_from_args, require_run_id
from runaudit.runners.remote_close import NOT_INSTALLED, python_on_box
from runaudit.runners.ssh import Remote
from runaudit.safeio import JSON_CAP, read_regular
from runaudit.usage import Refusal, existing_dir
from runaudit.verdict import shown

PYTEST_EXITS = {0: "every audit held", 1: "some audits did not hold"}


def merge(
    local: Mapping[str, Any] | None, remote: Mapping[str, Any], where: str, root: Path | None = None
) -> dict[str, Any]:
    """The local report with the box's verdicts (labelled ``where``): each replaces the earlier verdict of
    its audit and subject from that box, and every other earlier verdict stays.

    The receipt the local report showed is asked again under ``root``: carried forward, a YES outlived the
    copy it rested on (best.pth deleted since, and the page written now still said yes).
    """
    arrived = [{"when": remote.get("started_utc"), **item, "where": where} for item in remote["verdicts"]]
    base = dict(local) if local is not None else dict(remote)
    base["verdicts"] = document.merge_verdicts((local or {}).get("verdicts", []), arrived)
    if root is not None and base.get("origin") != GROUP:
        base["receipt"] = receipt_block(root, str(base["run_id"]))
    return document.derive(base)  # summary, custody_ok and the teardown answer follow the merged verdicts


def audit_on_box(
    box: Box, run_id: str, workdir: str | None, pytest_args: Sequence[str]
) -> tuple[int, dict[str, Any], str]:
    """(pytest's exit status, the box's report, pytest's output tail) for the suite run on the box."""
    require_run_id(run_id)
    with Remote(box.endpoint) as remote:
        made = remote.run('mktemp -d "${TMPDIR:-/tmp}/runaudit-audit.XXXXXX"')
        if not made.ok:
            raise Refusal(f"audit: cannot make a temporary folder on the box: {made.tail()}")
        reports = made.stdout.strip()
        try:
            module_args = [
                "pytest",
                *isolated.pytest_arguments(box.root, null_device="/dev/null"),
                "-q",
                RUN_OPTION,
                run_id,
                ROOT_OPTION,
                str(box.root),
                REPORT_DIR_OPTION,
                reports,
                *pytest_args,
            ]
            command = python_on_box(box, workdir, module_args, launcher=isolated.environment_words())
            done = remote.run(command, timeout=3600)
            if done.exit_code in NOT_INSTALLED:
                raise Refusal(
                    f"audit: pytest did not start on the box ({done.tail()}); pass --workdir or --python"
                )
            path = f"{reports}/{report_stem(run_id)}.json"
            try:
                data = remote.read_file(path)
            except FileNotFoundError:
                raise Refusal(
                    f"audit {run_id}: the suite on {box.endpoint.label} wrote no report "
                    f"(pytest exit {done.exit_code}: {done.tail()})"
                ) from None
        finally:
            remote.run(f"rm -rf -- {shlex.quote(reports)}")
    return done.exit_code, box_report(data, run_id, f"{box.endpoint.label}:{path}"), done.tail(3)


def box_report(data: bytes, run_id: str, where: str) -> dict[str, Any]:
    """The box's report, as a valid ``runaudit.report/1`` document of ``run_id``; else one-line refusal.

    The box is not trusted: its report is merged into the local one that CI publishes, so bytes that are
    not such a report (not JSON, NaN, nesting past any walker, another run's verdicts) never reach it.
    """
    try:
        found = load_json(data)
    except ValueError as exc:
        raise Refusal(f"audit {run_id}: {where} is not a report ({shown(str(exc))})") from None
    if problem := _report_problem(found, run_id):
        raise Refusal(f"audit {run_id}: {where} {problem}")
    return dict(found)


def _report_problem(found: Any, run_id: str) -> str | None:
    """Why a parsed document is not a ``runaudit.report/1`` report of ``run_id`` (completing "<file> ..."),
    or None: the one test behind refusing the box's report and replacing a local one."""
    problems = report_problems(found, limit=1)
    if problems:
        return f"breaks the runaudit.report/1 contract ({shown(problems[0])}); see docs/audits.md, The report"
    if found["run_id"] != run_id:
        return f"reports run {shown(str(found['run_id']))}, not {run_id}"
    return None


def write_merged(
    report_dir: Path, run_id: str, remote: Mapping[str, Any], where: str, root: Path | None = None
) -> Path:
    target = report_dir / f"{report_stem(run_id)}.json"
    merged = merge(_local_report(target, run_id), remote, where, root)
    write_json_atomic(target, merged)
    from runaudit.reports import html  # the page's figures import numpy: only this verb's end pays for it

    write_bytes_atomic(target.with_suffix(".html"), html.render_run(merged).encode("utf-8"))
    return target


def _local_report(path: Path, run_id: str) -> dict[str, Any] | None:
    """The report already at ``path`` when it is a valid report of ``run_id``, else None: a damaged or
    foreign file there is replaced by the merge, never merged into (as a local session replaces it)."""
    try:
        found = load_json(read_regular(path, JSON_CAP))
    except (OSError, ValueError):
        return None
    return None if _report_problem(found, run_id) else dict(found)


def _main(args: argparse.Namespace) -> int:
    box = box_from_args(args)
    pytest_args = args.pytest_args
    if "--" in pytest_args:
        raise Refusal("audit: options go before RUN_ID: runaudit audit [options] RUN_ID -- PYTEST ARGS")
    code, document, tail = audit_on_box(box, args.run_id, args.workdir, pytest_args)
    report_dir = args.report_dir or (args.root / "reports")
    target = write_merged(report_dir, args.run_id, document, box.endpoint.label, args.root)
    summary = ", ".join(f"{count} {name}" for name, count in document["summary"].items() if count)
    print(f"audit {args.run_id} on {box.endpoint.label}: {summary or 'no verdicts'}; merged into {target}")
    if code not in PYTEST_EXITS:
        print(f"audit {args.run_id}: pytest on the box exited {code}: {tail}", file=sys.stderr)
        return 2
    return code


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "audit",
        usage="runaudit audit [options] RUN_ID [-- PYTEST ARGS ...]",
        help="run the audits on the box (live, preflight, or all) and merge the verdicts into the local report",
        description="Options come before RUN_ID; what follows it goes to pytest on the box, "
        "e.g. -- -m preflight --runaudit-profile autodl --runaudit-budget disk=40G. The options before "
        "RUN_ID (--profile, --root, --report-dir) are this command's own.",
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    add_box_arguments(parser)
    add_workdir_argument(parser)
    parser.add_argument(
        "--root", type=existing_dir, default=Path.cwd(), help="local project root (default: .)"
    )
    parser.add_argument("--report-dir", type=Path, help="local report folder (default: <root>/reports)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="pytest's own arguments, after RUN_ID")
    parser.set_defaults(handler=_main)
