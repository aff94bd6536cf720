"""The report's own contract, ``reports/schemas/report.schema.json`` (``runaudit.report/1``)."""

from __future__ import annotations

from typing import Any

from runaudit.schema import problems, validator


def report_problems(document: Any, limit: int = 5) -> list[str]:
    """The first ``limit`` violations of the report schema, each as ``at /pointer: message``."""
    checker = validator("runaudit.reports", "schemas/report.schema.json")
    return [str(problem) for problem in problems(checker, document, limit=limit)]
