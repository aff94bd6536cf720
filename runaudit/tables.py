"""Claims as data: a results table generated from a comparison group's capsules, never transcribed.

Rows are the group's arms (``comparison.arm`` in run.json), columns are metric × condition of one test,
and each cell is the mean over the arm's seeds of the value each sealed capsule declares in its
``metrics.json``, with its standard error over seeds (sd / √n). A cell shows only the decimals that error
supports (:func:`runaudit.statistics.decimals_supported`: down to its second significant digit); a
single-seed cell has no error over seeds, shows the metric's declared precision and says ``n=1``. Every
cell keeps its provenance: the run ids and the SHA-256 of each capsule's ``run.json`` (which binds its
config and checkpoints), written to a sidecar next to the table so a number can be traced to its bytes.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runaudit.safeio import read_regular
from runaudit.siblings import arm_of, declared_value, group_members, reader

FORMATS = ("markdown", "latex", "csv")


@dataclass(frozen=True)
class Cell:
    mean: float
    standard_error: float | None  # None with one seed: no spread over seeds to measure
    decimals: int
    runs: tuple[tuple[str, str, str], ...]  # (run id, sha256 of its run.json, of the test's metrics.json)

    def text(self) -> str:
        if self.standard_error is None:
            return f"{self.mean:.{self.decimals}f} (n=1)"
        return f"{self.mean:.{self.decimals}f} ± {self.standard_error:.{self.decimals}f}"


@dataclass(frozen=True)
class Table:
    group: str
    test_id: str
    columns: tuple[tuple[str, str], ...]  # (metric, condition)
    arms: tuple[str, ...]
    cells: dict[tuple[str, str, str], Cell]  # (arm, metric, condition) -> cell

    def provenance(self) -> dict[str, Any]:
        return {
            "schema_version": "runaudit.table/1",
            "group": self.group,
            "test_id": self.test_id,
            "cells": [
                {
                    "arm": arm,
                    "metric": metric,
                    "condition": condition,
                    "text": cell.text(),
                    "mean": cell.mean,
                    "standard_error": cell.standard_error,
                    "n": len(cell.runs),
                    "runs": [
                        {"run_id": run_id, "run_json_sha256": identity, "metrics_sha256": metrics}
                        for run_id, identity, metrics in cell.runs
                    ],
                }
                for (arm, metric, condition), cell in self.cells.items()
            ],
        }


def _declared_columns(rows: object) -> list[tuple[str, str, int]]:
    found = []
    for row in rows if isinstance(rows, list) else []:
        if (
            isinstance(row, dict)
            and isinstance(row.get("metric"), str)
            and isinstance(row.get("condition_id"), str)
        ):
            precision = row.get("precision")
            decimals = precision if isinstance(precision, int) and not isinstance(precision, bool) else 4
            found.append((row["metric"], row["condition_id"], decimals))
    return found


def group_table(root: Path, group: str, test_id: str) -> Table:
    """The table of ``group``'s sealed runs under ``root`` for ``test_id``; ValueError names what is missing."""
    from runaudit.statistics import decimals_supported  # numpy and scipy: the console script reads FORMATS

    members = group_members(root.resolve(), group)
    if not members:
        raise ValueError(f"no sealed run under {root} declares comparison group {group!r} (runs/ or export/)")
    first = reader(members[0]).json(f"test/{test_id}/metrics.json")
    declared = _declared_columns(first.get("metrics") if isinstance(first, dict) else None)
    if not declared:
        raise ValueError(f"run {members[0].run_id}: test/{test_id}/metrics.json declares no metric")
    arms: dict[str, list[Any]] = {}
    for member in members:
        arms.setdefault(arm_of(member), []).append(member)
    cells: dict[tuple[str, str, str], Cell] = {}
    for arm, runs in sorted(arms.items()):
        provenance = tuple(
            (
                run.run_id,
                file_sha256(run.path / "run.json"),
                file_sha256(run.path / "test" / test_id / "metrics.json"),
            )
            for run in runs
        )
        for metric, condition, precision in declared:
            values = [declared_value(run, test_id, metric, condition) for run in runs]
            mean = math.fsum(values) / len(values)
            error, shown = None, precision
            if len(values) > 1:
                spread = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))
                error = spread / math.sqrt(len(values))
                decimals = decimals_supported(error)
                shown = precision if decimals is None else min(max(decimals, 0), precision)
            cells[(arm, metric, condition)] = Cell(mean, error, shown, provenance)
    return Table(group, test_id, tuple((m, c) for m, c, _ in declared), tuple(sorted(arms)), cells)


LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "$": r"\$",
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "_": r"\_",
    "^": r"\textasciicircum{}",
    "~": r"\textasciitilde{}",
}


def _latex(text: str) -> str:
    """``text`` as LaTeX prints it: names come from capsules, and a ``\\input{...}`` in one stays text."""
    return "".join(LATEX_SPECIALS.get(char, char) for char in text)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a capsule's small contract file, read as a regular file (never through a link)."""
    return hashlib.sha256(read_regular(path)).hexdigest()


def render(table: Table, form: str, sidecar: str) -> str:
    """The table as Markdown, LaTeX (booktabs) or CSV; the first two name their provenance sidecar."""
    heads = [f"{metric} [{condition}]" for metric, condition in table.columns]
    rows = [[arm, *(table.cells[(arm, *column)].text() for column in table.columns)] for arm in table.arms]
    if form == "markdown":  # names come from capsules: a "|" in one must not open a new column
        heads = [head.replace("|", "\\|") for head in heads]
        rows = [[cell.replace("|", "\\|") for cell in row] for row in rows]
    stamp = (
        f"runaudit table: group {table.group}, test {table.test_id}; provenance of every cell in {sidecar}"
    )
    if form == "markdown":
        lines = [f"<!-- {stamp} -->", "| arm | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
        return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)]) + "\n"
    if form == "latex":
        body = [" & ".join(_latex(cell).replace("±", r"$\pm$") for cell in row) + r" \\" for row in rows]
        return (
            "\n".join(
                [
                    f"% {stamp}",
                    r"\begin{tabular}{l" + "r" * len(heads) + "}",
                    r"\toprule",
                    " & ".join(["arm", *(_latex(head) for head in heads)]) + r" \\",
                    r"\midrule",
                    *body,
                    r"\bottomrule",
                    r"\end{tabular}",
                ]
            )
            + "\n"
        )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["arm", "metric", "condition", "mean", "standard_error", "n", "shown", "runs"])
    for (arm, metric, condition), cell in table.cells.items():
        error = "" if cell.standard_error is None else repr(cell.standard_error)
        runs = " ".join(f"{run_id}@{identity}" for run_id, identity, _ in cell.runs)
        writer.writerow([arm, metric, condition, repr(cell.mean), error, len(cell.runs), cell.text(), runs])
    return out.getvalue()
