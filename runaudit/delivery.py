"""Each number a document states, judged against the artifact it came from (docs/claims.md).

The artifacts are what the sealed capsules under the project root declare: every run's ``metrics.json``
values, and every comparison group's arm means with their standard error over seeds, computed as
``runaudit table`` computes them (:mod:`runaudit.tables`). A number is mapped to one artifact by, in order:

1. an anchor (``runaudit: RUN/TEST/METRIC/CONDITION``, RUN a run id or an arm of the audited run's group);
2. the stamp of a table ``runaudit table`` generated (its group and test, each row an arm), or the runs a
   generated CSV row names; the table's provenance sidecar must still name the capsules' bytes;
3. its metric and what its row or sentence names (a run id or an arm, a condition; the test's headline
   condition when none is named), else its value: equal to an artifact of that metric in scope. A number
   that names no run and equals no artifact is ``not_run`` (another paper's number, a constant).

Verdicts: ``passed`` when the number equals its artifact at the precision it is printed with, claims no more
decimals than the artifact supports (the standard error over seeds, else the metric's declared precision),
and every capsule behind it holds a current receipt (runaudit verify); ``failed`` when it differs, claims
more digits, comes from a table generated from other bytes, or rests on a capsule that has not held
custody; ``not_run`` when no artifact can be found for it, or it states a ± error and its artifact is one
run, with no standard error to hold it to (it is listed, never skipped).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from runaudit.documents import Printed, Statement, Vocabulary
from runaudit.items import primary_condition
from runaudit.reader import CapsuleReader, Unavailable
from runaudit.run import Run
from runaudit.safeio import JSON_CAP, read_regular
from runaudit.siblings import group_of, sealed_runs
from runaudit.statistics import decimals_supported
from runaudit.tables import file_sha256, group_table

VERIFY_DOC = "docs/claims.md"


@dataclass(frozen=True)
class Artifact:
    """One value a capsule (kind ``run``) or a group's arm (kind ``arm``, the mean over its seeds) holds."""

    kind: str
    subject: str  # the run id, or the arm
    group: str | None
    test_id: str
    metric: str
    condition: str
    value: float
    error: float | None  # standard error over seeds; None for one run
    precision: int  # decimals the metric is declared to (metrics.json ``precision``)
    primary: bool  # the condition is the test's headline condition
    runs: tuple[tuple[str, str, str], ...]  # (run id, sha256 of run.json, of the test's metrics.json)

    @property
    def name(self) -> str:
        where = f"run {self.subject}" if self.kind == "run" else f"group {self.group} arm {self.subject}"
        return f"{where}, test {self.test_id}: {self.metric} [{self.condition}]"

    def shown(self) -> str:
        if self.error is None:
            return f"{self.value:.{self.precision}f}"
        decimals = decimals_supported(self.error)
        decimals = self.precision if decimals is None else max(decimals, 0)
        return f"{self.value:.{decimals}f} ± {self.error:.{decimals}f} (n={len(self.runs)})"


@dataclass(frozen=True)
class Judgement:
    verdict: str  # "passed", "failed" or "not_run"
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _run_artifacts(run: Run) -> list[Artifact]:
    """Every value ``run``'s metrics.json files declare (a capsule that cannot be read declares none)."""
    found: list[Artifact] = []
    capsule = CapsuleReader(run)
    for test in run.tests:
        rel = f"test/{test.test_id}/metrics.json"
        try:
            document = capsule.json(rel)
            hashes = (file_sha256(run.path / "run.json"), file_sha256(run.path / rel))
        except (Unavailable, OSError):
            continue
        rows = document.get("metrics") if isinstance(document, dict) else None
        primary = primary_condition(test)
        for row in rows if isinstance(rows, list) else []:
            value = row.get("value") if isinstance(row, dict) else None
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                continue
            metric, condition = row.get("metric"), row.get("condition_id")
            if not isinstance(metric, str) or not isinstance(condition, str):
                continue
            precision = row.get("precision")
            decimals = precision if isinstance(precision, int) and not isinstance(precision, bool) else 4
            found.append(
                Artifact(
                    "run",
                    run.run_id,
                    group_of(run),
                    test.test_id,
                    metric,
                    condition,
                    float(value),
                    None,
                    decimals,
                    condition == primary,
                    ((run.run_id, *hashes),),
                )
            )
    return found


def _arm_artifacts(root: Path, group: str, runs: list[Artifact]) -> list[Artifact]:
    """The arm means of ``group`` per test, as ``runaudit table`` computes them."""
    found: list[Artifact] = []
    primaries = {(item.test_id, item.condition) for item in runs if item.primary}
    precision = {(item.test_id, item.metric, item.condition): item.precision for item in runs}
    for test_id in sorted({item.test_id for item in runs}):
        try:
            table = group_table(root, group, test_id)
        except (ValueError, Unavailable, OSError):
            continue
        for (arm, metric, condition), cell in table.cells.items():
            found.append(
                Artifact(
                    "arm",
                    arm,
                    group,
                    test_id,
                    metric,
                    condition,
                    cell.mean,
                    cell.standard_error,
                    precision.get((test_id, metric, condition), cell.decimals),
                    (test_id, condition) in primaries,
                    cell.runs,
                )
            )
    return found


class Scope:
    """The artifacts a document can be checked against: every sealed capsule under the audited run's root
    (anchors and generated tables may name any), and the audited run's group (or the group ``--run``
    named) as the focus of numbers that name neither run nor arm."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.root = run.root
        members = {member.run_id: member for member in sealed_runs(run.root)}
        if not run.is_group:
            members.setdefault(run.run_id, run)
        self.artifacts: list[Artifact] = []
        groups: dict[str, list[Artifact]] = {}
        for member in members.values():
            found = _run_artifacts(member)
            self.artifacts += found
            if (group := group_of(member)) is not None:
                groups.setdefault(group, []).extend(found)
        for group, found in sorted(groups.items()):
            self.artifacts += _arm_artifacts(run.root, group, found)
        self.group = run.named_group if run.is_group else group_of(run)
        self._custody: dict[str, str | None] = {}

    def vocabulary(self) -> Vocabulary:
        return Vocabulary(
            tuple(sorted({item.metric for item in self.artifacts})),
            tuple(sorted({item.condition for item in self.artifacts})),
            tuple(sorted({item.subject for item in self.artifacts})),
        )

    def _in_focus(self, item: Artifact) -> bool:
        if self.group is None:
            return item.kind == "run" and item.subject == self.run.run_id
        return item.group == self.group and (item.kind == "run" or len(item.runs) > 1)

    def custody_problem(self, run_id: str) -> str | None:
        """Why ``run_id`` has not held custody (no current receipt over its bytes), or None."""
        if run_id not in self._custody:
            from runaudit.receipts import run_receipt  # hashes what changed since verification

            found = run_receipt(self.root, run_id)
            self._custody[run_id] = found.problems[0] if found.problems else None
        return self._custody[run_id]

    # -- judging -------------------------------------------------------------------------------------

    def judge(self, statement: Statement, folder: Path) -> Judgement:
        """The verdict on one number; ``folder`` holds the document (and a generated table's sidecar)."""
        if statement.unchecked is not None:
            return Judgement(
                "not_run",
                f"{_where(statement)}: {statement.printed.text} is not checked: {statement.unchecked} (see "
                f"{VERIFY_DOC})",
            )
        if statement.anchor is not None:
            return self._anchored(statement)
        if statement.stamp is not None or statement.provenance:
            return self._generated(statement, folder)
        return self._stated(statement)

    def _anchored(self, statement: Statement) -> Judgement:
        parts = statement.anchor.split("/") if statement.anchor else []
        if len(parts) != 4 or not all(parts):
            return Judgement(
                "not_run",
                f"{_where(statement)}: the anchor {statement.anchor!r} is not RUN/TEST/METRIC/CONDITION "
                f"(see {VERIFY_DOC})",
            )
        subject, test_id, metric, condition = parts
        found = [
            item
            for item in self.artifacts
            if (item.subject, item.test_id, item.metric, item.condition)
            == (subject, test_id, metric, condition)
            and (item.kind == "run" or item.group == self.group)
        ]
        if not found:
            return Judgement(
                "not_run",
                f"{_where(statement)}: the anchor names {statement.anchor}, which no sealed capsule under "
                f"{self.root} holds",
            )
        return self._compare(statement, found[0], "its anchor")

    def _generated(self, statement: Statement, folder: Path) -> Judgement:
        stamp = statement.stamp
        group = stamp.group if stamp is not None else self._group_of_runs(statement.provenance)
        found = [
            item
            for item in self.artifacts
            if item.kind == "arm"
            and item.group == group
            and (stamp is None or item.test_id == stamp.test_id)
            and (item.subject, item.metric, item.condition)
            == (statement.subject, statement.metric, statement.condition)
        ]
        if stamp is None and len(found) > 1:  # a generated CSV names no test: its runs and value decide
            found = [item for item in found if _agrees(statement.printed, item.value)] or found
        if not found:
            return Judgement(
                "not_run",
                f"{_where(statement)}: the generated table's cell {statement.subject} / {statement.metric} "
                f"[{statement.condition}] matches no arm of group {group} under {self.root} now",
            )
        artifact = found[0]
        stale = self._stale(statement, artifact, folder)
        if stale is not None:
            return Judgement("failed", f"{_where(statement)}: {stale}", _evidence(statement, artifact))
        return self._compare(statement, artifact, "the table runaudit generated")

    def _group_of_runs(self, provenance: Iterable[tuple[str, str]]) -> str | None:
        runs = {run_id for run_id, _ in provenance}
        groups = {item.group for item in self.artifacts if item.kind == "run" and item.subject in runs}
        return groups.pop() if len(groups) == 1 else None

    def _stale(self, statement: Statement, artifact: Artifact, folder: Path) -> str | None:
        """Why the generated cell was computed from other bytes than the capsules hold now, or None."""
        now = {run_id: identity for run_id, identity, _ in artifact.runs}
        then = dict(statement.provenance) if statement.provenance else self._sidecar_runs(statement, folder)
        if then is None:
            return None  # no sidecar beside the document: the cell is checked against the capsules alone
        if set(then) != set(now):
            return (
                f"stale: the table was generated from runs {', '.join(sorted(then))}; arm {artifact.subject} "
                f"now has {', '.join(sorted(now))} (regenerate it with runaudit table)"
            )
        changed = sorted(run_id for run_id in now if then[run_id] != now[run_id])
        if changed:
            return (
                f"stale: run.json of {', '.join(changed)} changed since the table was generated "
                "(regenerate it with runaudit table)"
            )
        return None

    def _sidecar_runs(self, statement: Statement, folder: Path) -> dict[str, str] | None:
        assert statement.stamp is not None
        name = statement.stamp.sidecar
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            return None  # the sidecar sits beside the document; a path elsewhere is not followed
        try:
            document = json.loads(read_regular(folder / name, JSON_CAP))
        except (OSError, ValueError, RecursionError):
            return None
        for cell in document.get("cells", []) if isinstance(document, dict) else []:
            if not isinstance(cell, dict):
                continue
            if (cell.get("arm"), cell.get("metric"), cell.get("condition")) == (
                statement.subject,
                statement.metric,
                statement.condition,
            ):
                runs = cell.get("runs")
                return {
                    str(item.get("run_id")): str(item.get("run_json_sha256"))
                    for item in (runs if isinstance(runs, list) else [])
                    if isinstance(item, dict)
                }
        return None

    def _stated(self, statement: Statement) -> Judgement:
        if statement.metric is None:
            return Judgement(
                "not_run",
                f"{_where(statement)}: {statement.printed.text!r} sits in a paragraph naming several metrics "
                f"and its sentence names none; anchor it (see {VERIFY_DOC})",
            )
        candidates = [item for item in self.artifacts if item.metric == statement.metric]
        if statement.subject is not None:
            candidates = [
                item
                for item in candidates
                if item.subject == statement.subject and (item.kind == "run" or item.group == self.group)
            ]
        else:
            candidates = [item for item in candidates if self._in_focus(item)]
        # A number that names no condition is the test's headline one: matching any condition's value let a
        # noise result pass as the clean one the sentence shows.
        candidates = [
            item
            for item in candidates
            if (item.condition == statement.condition if statement.condition is not None else item.primary)
        ]
        if not candidates:
            named = f" of {statement.subject}" if statement.subject else ""
            return Judgement(
                "not_run",
                f"{_where(statement)}: no sealed capsule in scope declares {statement.metric}{named}"
                + (f" under condition {statement.condition}" if statement.condition else ""),
            )
        matches = [item for item in candidates if _agrees(statement.printed, item.value)]
        if matches:
            judged = [self._compare(statement, item, "its value") for item in matches]
            # One artifact holding it passes it; else a failure found against one (a wrong ± for the arm the value
            # matches) outranks what another could not check (a ± for a single seed of that arm).
            return next(
                (item for verdict in ("passed", "failed") for item in judged if item.verdict == verdict),
                judged[0],
            )
        pinned = self._pinned(statement)
        if pinned is not None and statement.unpinned is not None:
            return Judgement(
                "not_run",
                f"{_where(statement)}: {statement.printed.text} is not {pinned.name} {pinned.shown()}, and "
                f"{statement.unpinned}; anchor the cell (see {VERIFY_DOC})",
            )
        if pinned is not None:
            return self._compare(statement, pinned, "its row or sentence")
        closest = sorted(
            candidates, key=lambda item: abs(float(_in_units(statement.printed, item)) - item.value)
        )
        return Judgement(
            "not_run",
            f"{_where(statement)}: no artifact in scope holds {statement.metric} = {statement.printed.text} and "
            f"the text does not say which run it is about (closest: {closest[0].name} = {closest[0].shown()}); "
            f"anchor it (see {VERIFY_DOC})",
        )

    def _pinned(self, statement: Statement) -> Artifact | None:
        """The one artifact the text can only mean: the run or arm it names, at the condition it names or
        else the test's headline one; None when it names none (another paper's number, a constant) or that
        is still ambiguous."""
        subject = statement.subject
        if subject is None:
            return None
        pool = [
            item
            for item in self.artifacts
            if item.metric == statement.metric
            and item.subject == subject
            and (item.kind == "run" or item.group == self.group)
            and (item.condition == statement.condition if statement.condition else item.primary)
        ]
        return pool[0] if len({(item.kind, item.test_id) for item in pool}) == 1 else None

    def _compare(self, statement: Statement, artifact: Artifact, mapped_by: str) -> Judgement:
        printed = statement.printed
        evidence = _evidence(statement, artifact)
        where = _where(statement)
        if not _agrees(printed, artifact.value):
            return Judgement(
                "failed",
                f"{where}: states {printed.text} for {artifact.name} (mapped by {mapped_by}); the capsule holds "
                f"{artifact.shown()}",
                evidence,
            )
        decimals = printed.decimals + (2 if _scale(printed, artifact.value) == 100 else 0)
        supported = decimals_supported(artifact.error) if artifact.error is not None else artifact.precision
        if supported is not None and decimals > max(supported, 0):
            basis = (
                f"the standard error over {len(artifact.runs)} seeds ({artifact.error:.2g}) supports {max(supported, 0)}"
                if artifact.error is not None
                else f"the capsule declares {artifact.metric} to {supported}"
            )
            return Judgement(
                "failed",
                f"{where}: {printed.text} claims {decimals} decimals of {artifact.name}; {basis}",
                evidence,
            )
        if printed.error is not None and artifact.error is not None:
            # The error is in the value's units (97.05 % ± 0.003 % is no error of 0.003), or a percent of its
            # own beside a share (0.9705 with a standard-error column in %).
            scale = _agreeing_scale(printed, artifact.value) or 1
            if printed.error_percent and not printed.percent:
                scale = _scale(replace(printed, percent=True), artifact.value)
            error = Printed(str(printed.error), printed.error, printed.error_decimals or 0, printed.percent)
            if not _agrees_at(error, artifact.error, scale):
                return Judgement(
                    "failed",
                    f"{where}: states ± {printed.error} for {artifact.name}; its standard error over seeds is "
                    f"{artifact.error:.4g}",
                    evidence,
                )
        for run_id, _, _ in artifact.runs:
            if (problem := self.custody_problem(run_id)) is not None:
                return Judgement(
                    "failed",
                    f"{where}: {printed.text} ({artifact.name}) rests on run {run_id}, which has not held custody: {problem}",
                    evidence,
                )
        if printed.error_unread is not None:
            return Judgement(
                "not_run",
                f"{where}: {printed.text} agrees with {artifact.name} {artifact.shown()}, but the error stated "
                f"with it ({printed.error_unread!r}) is in a form the gate does not read; write it as ± 0.3 (see "
                f"{VERIFY_DOC})",
                evidence,
            )
        if printed.error is not None and artifact.error is None:
            # A spread that no artifact holds is unchecked, never passed with the value it rides on.
            return Judgement(
                "not_run",
                f"{where}: {printed.text} agrees with {artifact.name} {artifact.shown()}, but nothing holds its "
                f"± {printed.error}: {artifact.name} is one run, with no standard error over seeds",
                evidence,
            )
        return Judgement(
            "passed",
            f"{where}: {printed.text} = {artifact.name} {artifact.shown()} (mapped by {mapped_by}; custody held)",
            evidence,
        )


def _where(statement: Statement) -> str:
    return f"{statement.document}:{statement.line}"


def _evidence(statement: Statement, artifact: Artifact) -> dict[str, Any]:
    return {
        "document": statement.document,
        "line": statement.line,
        "text": statement.context,
        "number": statement.printed.text,
        "artifact": artifact.name,
        "value": artifact.value,
        "standard_error": artifact.error,
        "runs": [run_id for run_id, _, _ in artifact.runs],
    }


def _scale(printed: Printed, value: float) -> int:
    """100 when a percent sign prints a fraction (98.1 % of 0.981); 1 when the value is a percentage."""
    return 100 if printed.percent and abs(value) <= 1.5 else 1


def _in_units(printed: Printed, artifact: Artifact) -> Decimal:
    return printed.value / _scale(printed, artifact.value)


def _agrees(printed: Printed, value: float) -> bool:
    """``value`` rounds to the printed number at the decimals printed (either meaning of a percent sign)."""
    return _agreeing_scale(printed, value) is not None


def _agreeing_scale(printed: Printed, value: float) -> int | None:
    """The meaning of a percent sign under which ``value`` rounds to the printed number: 100 (a share of 1
    printed in percent) or 1 (the value itself); None where neither does."""
    for scale in (_scale(printed, value), 1) if printed.percent else (1,):
        if _agrees_at(printed, value, scale):
            return scale
    return None


def _agrees_at(printed: Printed, value: float, scale: int) -> bool:
    """``value`` rounds to the printed number read at ``scale`` (100: a share printed in percent)."""
    decimals = printed.decimals + (2 if scale == 100 else 0)
    half = Decimal(5) * Decimal(10) ** -(decimals + 1)
    return abs(Decimal(repr(value)) - printed.value / scale) <= half * (1 + Decimal("1e-9"))
