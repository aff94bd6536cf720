"""The capsule contract's JSON Schemas are themselves valid (the audits skip the meta-schema check)."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from runaudit.schema import SCHEMAS, load_schema


@pytest.mark.parametrize("name", SCHEMAS)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
