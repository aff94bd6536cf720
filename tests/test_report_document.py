"""The JSON twin: its schema, the teardown answer and the receipt it rests on, safe report file names."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from report_records import HOSTILE, build, demo_run, record, science_records, write_pull
from runaudit.reports import document
from runaudit.reports.receipt import binding_receipt
from runaudit.reports.schema import report_problems


def custody(verdict: str = "passed") -> dict[str, Any]:
    return record("capsule.ids", verdict, gate_class="custody")


def test_a_built_report_meets_its_own_schema(project: Path) -> None:
    doc = build(
        demo_run(project), [custody(), *science_records(), record("history.finite", "passed", HOSTILE)]
    )
    assert report_problems(doc) == []
    assert json.loads(json.dumps(doc)) == doc  # plain JSON all the way down
    assert [row["metric"] for row in doc["headlines"]] == ["accuracy", "cross_entropy"] * 2
    assert doc["tests"] == [
        {
            "test_id": "main",
            "conditions": ["clean", "noise"],
            "roles": ["input", "prediction"],
            "selection_id": "digits-stratified-s0-test",
            "k": 100,
        }
    ]
    assert doc["reproduce"] == f"cd {project} && python -m pytest --run demo"


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("/verdicts/0/verdict", "maybe"),
        ("/verdicts/0/gate_class", "vibes"),
        ("/summary/passed", -1),
        ("/teardown/answer", "probably"),
        ("/schema_version", "runaudit.report/2"),
        ("/surprise", True),
    ],
)
def test_the_schema_rejects_a_report_that_breaks_the_contract(project: Path, where: str, value: Any) -> None:
    doc = copy.deepcopy(build(demo_run(project), [custody()]))
    *parents, last = where.strip("/").split("/")
    target: Any = doc
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[last] = value
    assert report_problems(doc), f"the schema accepted {where} = {value!r}"


def test_a_current_receipt_binds_the_run_and_a_rewritten_manifest_makes_it_stale(tmp_path: Path) -> None:
    assert binding_receipt(tmp_path, "r1") is None
    write_pull(tmp_path, "p-other", ["r2"], verified_utc="2026-01-03T00:00:00Z")
    write_pull(tmp_path, "p-unverified", ["r1"], verified_utc="", receipt=False)
    assert (
        binding_receipt(tmp_path, "r1") is None
    )  # a manifest alone, or another run's receipt, is no receipt
    old = write_pull(tmp_path, "p-old", ["r1", "r2"], verified_utc="2026-01-01T00:00:00Z")
    new = write_pull(tmp_path, "p-new", ["r1"], verified_utc="2026-01-02T00:00:00Z")
    found = binding_receipt(tmp_path, "r1")
    assert found is not None
    assert (found["pull_id"], found["current"], found["verifier"]) == ("p-new", True, "laptop")
    assert found["path"] == "_trust/pulls/p-new/PULL_VERIFIED.json"
    (new / "PULL_MANIFEST.json").write_text(json.dumps({"roster": ["r1"], "files": []}))
    found = binding_receipt(tmp_path, "r1")
    assert (found["pull_id"], found["current"]) == (
        "p-old",
        True,
    )  # a current receipt beats a newer stale one
    (old / "PULL_MANIFEST.json").write_text(json.dumps({"roster": ["r1"]}))
    found = binding_receipt(tmp_path, "r1")
    assert (found["pull_id"], found["current"]) == ("p-new", False)
    assert "stale" in found["problem"]


def test_safe_to_tear_down_needs_held_custody_and_a_current_receipt(project: Path) -> None:
    run = demo_run(project)

    def answer(records: list[dict[str, Any]], origin: str = "export") -> tuple[str, str]:
        doc = build(demo_run(project, origin), records)
        assert report_problems(doc) == []
        return doc["teardown"]["answer"], doc["teardown"]["reason"]

    assert answer([*science_records()])[0] == "no"  # a custody gate that checked nothing fails
    assert answer([custody(), custody("failed")]) == ("no", "1 custody audit(s) did not hold: capsule.ids")
    assert answer([custody("not_run")])[0] == "no"
    assert answer([custody()])[0] == "not yet"
    assert answer([custody()], origin="active")[0] == "no"
    pull = write_pull(project, "p1", [run.run_id], verified_utc="2026-01-02T00:00:00Z")
    assert answer([custody()])[0] == "yes"
    (pull / "PULL_MANIFEST.json").write_text(json.dumps({"roster": [run.run_id], "files": []}))
    assert answer([custody()]) == (
        "not yet",
        "receipt p1: PULL_MANIFEST.json changed after it was verified: the receipt is stale",
    )
    (pull / "PULL_MANIFEST.json").write_text("{}")
    assert answer([custody()])[0] == "not yet"  # the roster no longer names the run: no receipt binds it


@pytest.mark.parametrize(
    ("run_id", "stem"),
    [
        ("demo", "demo"),
        ("../../etc/passwd", "_.._etc_passwd"),
        ("<script>x</script>", "_script_x__script_"),
        ("index", "index_run"),
        ("INDEX", "INDEX_run"),
        ("...", "run"),
    ],
)
def test_report_file_names_stay_in_the_folder_and_off_the_sweep_index(run_id: str, stem: str) -> None:
    assert document.report_stem(run_id) == stem
    assert "/" not in stem and not stem.startswith(".")
