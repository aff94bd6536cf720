"""The sweep index: every run's report in one folder as a runs × audits matrix (``runaudit report-index``).

It reads the ``<run-id>.json`` reports, never the capsules, so it is cheap for hundreds of runs. A cell
holds the worst verdict an audit reached over its subjects; an audit a run never ran is an empty cell,
not a pass. A file that is not a valid ``runaudit.report/1`` document becomes a row saying why (fail
closed), and the verb then exits 1. The page sorts by any column with one inline script and no server.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import runaudit
from runaudit.atomic import write_bytes_atomic
from runaudit.ids import INDEX_STEM
from runaudit.ledger import cell
from runaudit.manifest import nesting_problem
from runaudit.receipts import receipt_status
from runaudit.reports.document import REPORT_DEPTH
from runaudit.reports.findings import GATE_ORDER
from runaudit.reports.schema import report_problems
from runaudit.resolve import GROUP
from runaudit.roster import read_roster
from runaudit.usage import Refusal, existing_dir
from runaudit.verdict import Verdict, printable

INDEX_FILE = f"{INDEX_STEM}.html"
MAX_REPORT_BYTES = 64 * 1024 * 1024
TITLE_CHARS = 160


@dataclass(frozen=True)
class Column:
    audit: str
    gate_class: str

    @property
    def module(self) -> str:
        return self.audit.split(".", 1)[0]

    @property
    def check(self) -> str:
        return self.audit.split(".", 1)[-1]


@dataclass(frozen=True)
class Cell:
    verdict: str
    title: str

    @property
    def rank(self) -> int:
        """Sort rank, worse higher; 0 for an audit this run never reached."""
        return Verdict(self.verdict).rank if self.verdict else 0

    @property
    def mark(self) -> str:
        return Verdict(self.verdict).mark if self.verdict else ""


@dataclass(frozen=True)
class Row:
    run_id: str
    href: str | None
    started_utc: str
    teardown: str
    counts: Mapping[str, int]
    cells: Sequence[Cell]
    problem: str | None = None

    @property
    def tallies(self) -> tuple[int, int, int]:
        """Failed (crashes included), disclosed and not-run verdicts: the summary columns."""
        counts = self.counts
        return (
            counts.get("failed", 0) + counts.get("error", 0),
            counts.get("disclosed", 0),
            counts.get("not_run", 0),
        )


def read_reports(folder: Path) -> list[tuple[Path, Mapping[str, Any] | None, str | None]]:
    """Every ``*.json`` in ``folder``: its document, or None and why it cannot be used."""
    found = []
    for path in sorted(folder.glob("*.json")):
        problem, document = None, None
        if path.is_symlink() or not path.is_file():
            problem = "not a regular file"
        elif path.stat().st_size > MAX_REPORT_BYTES:
            problem = f"larger than {MAX_REPORT_BYTES // 2**20} MiB"
        else:
            try:
                document = json.loads(path.read_bytes())
            except RecursionError:  # the parser's own stack: a file nested thousands of levels deep
                problem = "not valid JSON (nested too deeply to read)"
            except ValueError as exc:
                problem = f"not valid JSON ({exc})"
        if document is not None and (too_deep := nesting_problem(document, REPORT_DEPTH)):
            problem, document = f"not a runaudit.report/1 document: {too_deep}", None
        if document is not None:
            problems = report_problems(document, limit=1)
            if problems:
                problem, document = f"not a runaudit.report/1 document: {problems[0]}", None
        found.append((path, document, problem))
    return found


def _columns(documents: Iterable[Mapping[str, Any]]) -> list[Column]:
    seen: dict[str, str] = {}
    for document in documents:
        for item in document["verdicts"]:
            seen.setdefault(item["audit"], item["gate_class"])
    order = {gate: index for index, gate in enumerate(GATE_ORDER)}
    return sorted(
        (Column(audit, gate) for audit, gate in seen.items()),
        key=lambda c: (order.get(c.gate_class, len(order)), c.audit),
    )


def _cell(audit: str, items: Sequence[Mapping[str, Any]]) -> Cell:
    """The worst verdict over the audit's subjects; its title spells out the spread and the worst message.

    The row names the run and the column the audit, so the title does not repeat them: at 12k cells
    every byte of it is paid for in parsing time.
    """
    if not items:
        return Cell("", "not audited in this run")
    worst = max(items, key=lambda item: Verdict(item["verdict"]).rank)
    counts = Counter(item["verdict"] for item in items)
    if Verdict(worst["verdict"]).holds and len(counts) == 1:
        return Cell(worst["verdict"], "")
    title = ", ".join(f"{n} {verdict.replace('_', ' ')}" for verdict, n in sorted(counts.items()))
    if not Verdict(worst["verdict"]).holds:
        subject = f"[{worst['subject']}] " if worst["subject"] else ""
        title += f" — {subject}{worst['message']}"
    return Cell(worst["verdict"], title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…")


def _row(path: Path, document: Mapping[str, Any], columns: Sequence[Column]) -> Row:
    by_audit: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for item in document["verdicts"]:
        by_audit[item["audit"]].append(item)
    page = path.with_suffix(".html")  # the page sits beside its JSON twin (a group's stem ends in @group)
    return Row(
        run_id=document["run_id"],
        href=page.name if page.is_file() else None,
        started_utc=document["started_utc"],
        teardown=document["teardown"]["answer"],
        counts=Counter(item["verdict"] for item in document["verdicts"]),
        cells=[_cell(column.audit, by_audit.get(column.audit, [])) for column in columns],
    )


def sweep(folder: Path, roster: Sequence[str] = (), root: Path | None = None) -> dict[str, Any]:
    """The index page's model: columns grouped by gate module, one row per report file, and with a roster
    one row for each planned cell that has no report, saying where it stands (runaudit.ledger)."""
    reports = read_reports(folder)
    # One row per run: a comparison group's own report (<group>@group.json) is no run of the sweep.
    documents = [
        (path, document)
        for path, document, _ in reports
        if document is not None and document.get("origin") != GROUP
    ]
    columns = _columns(document for _, document in documents)
    rows = [_row(path, document, columns) for path, document in documents]
    if root is not None:
        rows = [_still_yes(root, row) for row in rows]
    broken = [
        Row(printable(path.name), None, "", "no", {}, [Cell("", "") for _ in columns], problem)
        for path, document, problem in reports
        if document is None
    ]
    reported = {row.run_id for row in rows}
    unreported = [
        Row(run_id, None, "", "no", {}, [Cell("", "") for _ in columns], _unreported(root, run_id, folder))
        for run_id in roster
        if run_id not in reported
    ]
    modules = [
        (module, len(list(group))) for module, group in itertools.groupby(columns, key=lambda c: c.module)
    ]
    return {
        "folder": str(folder),
        "columns": columns,
        "modules": modules,
        "rows": sorted(rows, key=lambda row: row.run_id) + unreported + broken,
        "broken": len(broken),
        "unreported": len(unreported),
        "harness_version": runaudit.__version__,
    }


def _still_yes(root: Path, row: Row) -> Row:
    """The row, its YES taken back where the receipt it rested on no longer holds now.

    A report's answer is as of its session: a copy changed or gone since kept its YES on the index page,
    where ``runaudit down`` would refuse. The receipt is asked again as ``down`` asks it (stat keys, and a
    fresh hash of any file changed since it was verified)."""
    if row.teardown != "yes":
        return row
    status = receipt_status(root, [row.run_id])
    if status.ok:
        return row
    return replace(
        row, teardown="not yet", problem=f"its YES no longer holds: {printable(status.problems[0])}"
    )


def _unreported(root: Path | None, run_id: str, folder: Path) -> str:
    state = f" (the cell is {cell(root, run_id, folder).state})" if root is not None else ""
    return f"planned, but no report{state}: pytest --run={run_id}"


def write_index(
    folder: Path, output: Path | None = None, *, roster: Sequence[str] = (), root: Path | None = None
) -> tuple[Path, dict[str, Any]]:
    from runaudit.reports import html  # deferred: jinja2 only when a page is written

    model = sweep(folder, roster, root)
    target = output or folder / INDEX_FILE
    return write_bytes_atomic(target, html.render_index(model).encode("utf-8")), model


# -- the verb ---------------------------------------------------------------------------------------


def _main(args: argparse.Namespace) -> int:
    folder = args.report_dir or args.root / "reports"
    if not folder.is_dir():
        raise Refusal(f"no report folder at {folder}: run pytest --run=<id> first, or pass --report-dir")
    if not any(folder.glob("*.json")):
        raise Refusal(f"{folder} holds no <run-id>.json report: run pytest --run=<id> first")
    roster = read_roster(args.roster) if args.roster else []
    target, model = write_index(folder, args.output, roster=roster, root=args.root.resolve())
    for row in model["rows"]:
        if row.problem:
            print(f"runaudit report-index: {folder / row.run_id}: {row.problem}", file=sys.stderr)
    runs = len(model["rows"]) - model["broken"] - model["unreported"]
    print(f"runaudit: wrote {target} ({runs} runs × {len(model['columns'])} audits)")
    return 1 if model["broken"] or model["unreported"] else 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "report-index", help="write index.html: every run's report as a runs × audits matrix"
    )
    parser.add_argument("--root", type=existing_dir, default=Path.cwd(), help="project root (default: .)")
    parser.add_argument(
        "--report-dir", type=existing_dir, help="where the <run-id>.json reports are (default: ROOT/reports)"
    )
    parser.add_argument("--output", type=Path, help="the page to write (default: REPORT_DIR/index.html)")
    parser.add_argument(
        "--roster",
        type=Path,
        help="the sweep's planned runs (one id per line): each without a report gets a row",
    )
    parser.set_defaults(handler=_main)
