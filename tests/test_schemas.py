"""The JSON Schemas that ship with the harness are themselves valid: the capsule contract's, the report's and
the platform profiles' (runaudit.schema compiles them without the meta-schema check)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from runaudit.schema import SCHEMAS, load_schema, schema_problems, validator


@pytest.mark.parametrize("name", SCHEMAS)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(
    ("package", "resource"),
    [("runaudit.reports", "schemas/report.schema.json"), ("runaudit.profiles", "profile.schema.json")],
)
def test_the_report_and_profile_schemas_are_valid_draft_2020_12(package: str, resource: str) -> None:
    schema = validator(package, resource).schema
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_a_document_changed_after_validation_is_judged_again() -> None:
    """Validation is remembered per document text, so a document edited in place is never let through on
    its earlier, clean result."""
    manifest = {
        "schema_version": 1,
        "pull_id": "p1",
        "roster": ["r1"],
        "files": [],
        "totals": {"files": 0, "bytes": 0},
    }
    first = schema_problems("pull", manifest)
    manifest["files"] = [{"path": 7}]
    assert schema_problems("pull", manifest) != first
    manifest["files"] = []
    assert schema_problems("pull", manifest) == first


def test_the_run_schema_bounds_the_lists_the_run_object_parametrizes_over() -> None:
    """runaudit.run uses no declared list past the bound the schema fails it at: the two never drift apart."""
    from runaudit.run import MAX_CONDITIONS, MAX_METRICS, MAX_ROLES, MAX_TESTS

    schema = load_schema("run")
    test = schema["$defs"]["test"]["properties"]
    assert schema["properties"]["tests"]["maxItems"] == MAX_TESTS
    assert test["conditions"]["allOf"][1]["maxItems"] == MAX_CONDITIONS
    assert test["roles"]["allOf"][1]["maxItems"] == MAX_ROLES
    assert schema["properties"]["protocol"]["properties"]["metrics"]["maxItems"] == MAX_METRICS


def test_an_integer_of_the_contract_is_written_without_a_fraction(demo_project: Path) -> None:
    """``"totals": {"files": 407.0}`` passed the schema (JSON Schema's integer admits 407.0), while every
    reader took the float for no count: n_test 359.0 then read as "n_test is None" in three other audits."""
    manifest = json.loads((demo_project / "_trust" / "pulls" / "demo" / "PULL_MANIFEST.json").read_text())
    assert schema_problems("pull", manifest) == []
    files = manifest["totals"]["files"]
    for count in (float(files), True):
        manifest["totals"]["files"] = count
        assert [problem.split(":")[0] for problem in schema_problems("pull", manifest)] == [
            "at /totals/files"
        ]
