"""``runaudit sweep status --root ROOT --roster FILE``: every planned cell of a sweep, and what it lacks.

One line per roster run, in roster order: its state on the way planned → launched → trained → closed →
pulled → verified, and its flags (no capsule, no report, a report with a failed gate, quarantined
closes), from :mod:`runaudit.ledger`. A cell that is missing everywhere is still a line, ``planned``, never
left out. Exit 0 only when every cell is verified with nothing flagged.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from runaudit.ledger import Cell, ledger
from runaudit.roster import read_roster
from runaudit.usage import existing_dir


def _main(args: argparse.Namespace) -> int:
    roster = read_roster(args.roster)
    root = args.root.resolve()
    cells = ledger(root, roster, args.report_dir)
    if args.json:
        print(json.dumps([{**asdict(cell), "complete": cell.complete} for cell in cells], indent=2))
    else:
        width = max(len(cell.run_id) for cell in cells)
        for cell in cells:
            print(f"{cell.run_id:<{width}}  {cell.state:<8}  {'; '.join(cell.flags) or 'ok'}{_where(cell)}")
        done = sum(cell.complete for cell in cells)
        print(
            f"sweep {args.roster.name}: {done} of {len(cells)} cell(s) verified with nothing flagged, under {root}"
        )
    return 0 if all(cell.complete for cell in cells) else 1


def _where(cell: Cell) -> str:
    """Why a cell verified in place is not yet safe to tear down under: ``runaudit down`` needs a copy home."""
    if cell.verified_in != "export":
        return ""
    return f" (verified in place in export/{cell.run_id}: no copy home yet; runaudit down needs runs/{cell.run_id})"


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser("sweep", help="where every planned cell of a sweep stands, and what it lacks")
    steps = parser.add_subparsers(dest="step", required=True, metavar="status")
    status = steps.add_parser("status", help="one line per roster run: its state and its flags")
    status.add_argument("--root", type=existing_dir, default=Path.cwd(), help="project root (default: .)")
    status.add_argument("--roster", type=Path, required=True, help="file: one run id per line, # comments")
    status.add_argument("--report-dir", type=Path, help="where the reports are (default: ROOT/reports)")
    status.add_argument("--json", action="store_true", help="print the cells as JSON")
    status.set_defaults(handler=_main)
