"""The report's own contract, ``reports/schemas/report.schema.json`` (``runaudit.report/1``)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator  # deferred: only readers of old reports validate

    schema = json.loads(
        resources.files("runaudit.reports").joinpath("schemas", "report.schema.json").read_text()
    )
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def report_problems(document: Any, limit: int = 5) -> list[str]:
    """The first ``limit`` violations of the report schema, each as ``at /pointer: message``."""
    problems = []
    for error in _validator().iter_errors(document):
        pointer = "/".join(str(part) for part in error.absolute_path)
        problems.append(f"at /{pointer}: {error.message[:160]}")
        if len(problems) == limit:
            break
    return problems
