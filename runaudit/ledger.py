"""The sweep ledger: where each planned cell of a sweep stands, read from the project root alone.

A cell moves planned → launched → trained → closed → pulled → verified (docs/capsule.md §1): ``active/<id>``
exists once a writer opened it, its ``run.json`` once training finished, ``export/<id>`` once sealed,
``runs/<id>`` once pulled, and a current receipt once verified. A cell is flagged when it has no capsule,
no report, or a report with a failed gate, so that no planned cell is ever silently missing from a sweep.
The ledger reads only names, a report's verdict counts and the receipt rule; it never loads a capsule.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from runaudit.ids import report_stem
from runaudit.receipts import run_receipt
from runaudit.safeio import JSON_CAP, read_regular

ATTEMPT = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]+")  # runaudit.clock.attempt_id: run "a"'s, not run "a--b"'s
STATES = ("planned", "launched", "trained", "closed", "pulled", "verified")
BAD = ("failed", "error")


@dataclass(frozen=True)
class Cell:
    run_id: str
    state: str  # one of STATES
    quarantined: int  # failed closes kept in quarantine/
    flags: tuple[str, ...] = field(default=())
    # Where the current receipt verified the capsule: "runs" (a copy pulled home) or "export" (in place where
    # it was produced, as a cluster's scratch is verified): a "verified" cell is no copy home without "runs".
    verified_in: str | None = None

    @property
    def complete(self) -> bool:
        return self.state == "verified" and not self.flags


def _report_flags(reports: Path, run_id: str) -> list[str]:
    path = reports / f"{report_stem(run_id)}.json"
    try:
        document = json.loads(read_regular(path, JSON_CAP))
    except FileNotFoundError:
        return ["no report"]
    except RecursionError:  # the parser's own stack: nested thousands of levels deep
        return ["report unreadable (nested too deeply to read)"]
    except (OSError, ValueError) as exc:
        return [f"report unreadable ({exc})"]
    summary = document.get("summary") if isinstance(document, dict) else None
    if not isinstance(summary, dict):
        return ["report without a summary"]
    counts = [summary.get(verdict, 0) for verdict in BAD]
    if not all(isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in counts):
        # A count is printed: ESC sequences and a forged "verified" line there reached the terminal raw.
        return ["report unreadable (its summary counts are not whole numbers)"]
    bad = {verdict: summary.get(verdict) for verdict in BAD if summary.get(verdict)}
    return (
        [f"report holds {', '.join(f'{count} {verdict}' for verdict, count in bad.items())}"] if bad else []
    )


def cell(root: Path, run_id: str, reports: Path) -> Cell:
    """Where ``run_id`` stands under ``root`` (its reports in ``reports``), and what is missing or wrong."""
    state = "planned"
    if (root / "active" / run_id).is_dir():
        state = "launched"
    if (root / "active" / run_id / "run.json").is_file():
        state = "trained"
    sealed = (root / "export" / run_id).is_dir() or (root / "export" / "hardware" / run_id).is_dir()
    pulled = (root / "runs" / run_id).is_dir() or (root / "runs" / "hardware" / run_id).is_dir()
    if sealed:
        state = "closed"
    if pulled:
        state = "pulled"
    verified_in = None
    if (sealed or pulled) and (receipt := run_receipt(root, run_id)).current:
        state = "verified"
        holder = receipt.document.get("holder") if receipt.document is not None else None
        verified_in = holder if isinstance(holder, str) else None
    quarantine = root / "quarantine"
    attempts = quarantine.glob(f"{run_id}--*") if quarantine.is_dir() else ()
    failed_closes = sum(1 for path in attempts if ATTEMPT.fullmatch(path.name.removeprefix(f"{run_id}--")))
    flags = [] if sealed or pulled else ["no capsule"]
    if failed_closes and not (sealed or pulled):
        flags.append(f"{failed_closes} close(s) quarantined")
    flags += _report_flags(reports, run_id)
    return Cell(run_id, state, failed_closes, tuple(flags), verified_in)


def ledger(root: Path, roster: list[str], reports: Path | None = None) -> list[Cell]:
    return [cell(root, run_id, reports or root / "reports") for run_id in roster]
