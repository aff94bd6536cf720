"""``evaluation.fresh`` run as users run it: ``pytest --run=<capsule>`` with the project's smoke adapter.

The sealed demo passes: its best checkpoint, re-scored on CPU through the demo's own adapter, gives back the
stored rows. Two realistic defects that every reading audit misses are caught: best.pth swapped for another
epoch's weights (its lineage metadata kept, every hash re-bound and the pull manifest rebuilt, so the custody
gate holds), and results.parquet with metrics.json rewritten, consistently, from another model. Without an
adapter the audit is NOT RUN and names the fixture it lacks; with ``pred`` or the per-item metrics as the only
stored evidence, those are compared instead. One demo project is copied per module; variants copy that.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from capsules import edit_json, read_json, sha256_of

from runaudit.catalog import AUDITS_DIR
from runaudit.examples.digits.adapter import evaluation_arrays
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.examples.digits.evaluate import predict
from runaudit.examples.digits.model import build
from runaudit.manifest import pulls_dir
from runaudit.runners.manifest import build_manifest

AUDIT = "evaluation.fresh"
DEMO_ADAPTER = "runaudit.examples.digits.adapter"
EVALUATION = str(AUDITS_DIR / "test_evaluation.py")
# The custody gate's modules beside it: a re-bound defect must leave every custody audit holding.
GATED = [str(AUDITS_DIR / name) for name in ("test_capsule.py", "test_manifest.py", "test_checkpoint.py")]
CUSTODY_AND_FRESH = ["-m", "custody or smoke", *GATED, EVALUATION]

RunAudits = Callable[..., Any]  # conftest.run_audits, returning an AuditRun


@pytest.fixture(scope="module")
def base(demo_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's copy of the sealed demo project; tests copy it again before changing anything."""
    copy = tmp_path_factory.mktemp("fresh") / "project"
    shutil.copytree(demo_project, copy, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports"))
    return copy


def variant(base: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the module's project, and its capsule."""
    root = tmp_path / "project"
    shutil.copytree(base, root, symlinks=True)
    return root, root / "export" / DEMO_RUN_ID


def the(outcome: Any, audit: str = AUDIT) -> dict[str, Any]:
    [found] = outcome.find(audit)
    return found


def reseal(root: Path) -> None:
    """A fresh pull manifest over the edited capsule (the old one and its receipt bound the old bytes)."""
    shutil.rmtree(pulls_dir(root))
    build_manifest(root, [DEMO_RUN_ID], "edited", log=lambda line: None)


def config_of(capsule: Path) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((capsule / "config.yaml").read_text())
    return config


def other_weights(capsule: Path) -> dict[str, torch.Tensor]:
    """Weights of another epoch of the same run: last.pth's when it is not the best epoch, else a network
    initialised from another seed."""
    declared = read_json(capsule / "run.json")["checkpoints"]
    if declared["last"]["epoch"] != declared["best"]["epoch"]:
        weights: dict[str, torch.Tensor] = torch.load(capsule / "last.pth", weights_only=True)["model"]
        return weights
    torch.manual_seed(declared["best"]["epoch"] + 1)
    return dict(build(config_of(capsule)).state_dict())


def custody_findings(outcome: Any) -> dict[str, str]:
    """Every custody verdict that does not hold, the receipt aside (a rebuilt manifest has none yet)."""
    return {
        item["audit"]: item["verdict"]
        for item in (outcome.report or {})["verdicts"]
        if item["gate_class"] == "custody"
        and item["verdict"] not in ("passed", "not_applicable")
        and item["audit"] != "manifest.receipt"
    }


def expected_items(capsule: Path, root: Path) -> int:
    """Selected samples × declared conditions, read from the capsule."""
    [test] = read_json(capsule / "run.json")["tests"]
    selection = read_json(root / "_trust" / "selections" / f"{test['selection_id']}.json")
    return len(selection["sample_ids"]) * len(test["conditions"])


# -- the demo ---------------------------------------------------------------------------------------


def test_the_sealed_demo_re_scores_to_its_stored_outputs(run_audits: RunAudits, base: Path) -> None:
    outcome = run_audits(DEMO_RUN_ID, base, EVALUATION)  # --run=demo brings the demo's own adapter
    assert outcome.result.ret == 0, outcome.result.stdout.str()
    verdict = the(outcome)
    assert verdict["verdict"] == "passed", verdict["message"]
    capsule = base / "export" / DEMO_RUN_ID
    evidence = verdict["evidence"]
    assert evidence["compared"] == "output"
    assert evidence["items"] == expected_items(capsule, base)
    assert evidence["mismatched"] == 0
    best = read_json(capsule / "run.json")["checkpoints"]["best"]
    assert evidence["checkpoint"]["sha256"] == best["sha256"] == sha256_of(capsule / "best.pth")
    assert f"best.pth (epoch {best['epoch']}) re-scored on CPU" in verdict["message"]


def test_without_an_adapter_it_is_not_run_and_names_the_fixture(run_audits: RunAudits, base: Path) -> None:
    outcome = run_audits(base / "export" / DEMO_RUN_ID, base, EVALUATION)
    verdict = the(outcome)
    assert verdict["verdict"] == "not_run"
    assert "no adapter provides the fixture smoke_eval_model" in verdict["message"]
    strict = run_audits(base / "export" / DEMO_RUN_ID, base, EVALUATION, "--strict")
    assert strict.result.ret == 1  # never a pass that compared nothing


def test_before_a_launch_it_does_not_apply_and_a_strict_smoke_gate_holds(
    run_audits: RunAudits, tmp_path: Path
) -> None:
    (tmp_path / "active" / "plan").mkdir(parents=True)
    outcome = run_audits("plan", tmp_path, "-p", DEMO_ADAPTER, "-m", "smoke", "-k", "fresh", "--strict")
    assert outcome.result.ret == 0, outcome.result.stdout.str()
    verdict = the(outcome)
    assert verdict["verdict"] == "not_applicable"
    assert "live in active/" in verdict["message"] and "once the run is closed" in verdict["message"]


# -- defects that only a fresh re-score catches ---------------------------------------------------


def test_a_best_checkpoint_swapped_for_another_epochs_fails(
    run_audits: RunAudits, base: Path, tmp_path: Path
) -> None:
    root, capsule = variant(base, tmp_path)
    saved = torch.load(capsule / "best.pth", weights_only=True)
    saved["model"] = other_weights(capsule)  # epoch, step and selection still say the best epoch
    torch.save(saved, capsule / "best.pth")
    digest = sha256_of(capsule / "best.pth")
    edit_json(capsule / "run.json", lambda run: run["checkpoints"]["best"].update(sha256=digest))
    edit_json(
        capsule / "test" / "main" / "metrics.json", lambda metrics: metrics.update(checkpoint_sha256=digest)
    )
    reseal(root)

    outcome = run_audits(capsule, root, "-p", DEMO_ADAPTER, *CUSTODY_AND_FRESH)

    assert custody_findings(outcome) == {}, outcome.result.stdout.str()
    assert {item["subject"]: item["verdict"] for item in outcome.find("checkpoint.selection")}[
        "best.pth"
    ] == "passed"
    verdict = the(outcome)
    assert verdict["verdict"] == "failed", verdict["message"]
    evidence = verdict["evidence"]
    assert 0 < evidence["mismatched"] <= evidence["items"] == expected_items(capsule, root)
    assert "did not come from this checkpoint" in verdict["message"]
    first = evidence["mismatches"][0]
    assert f"{first['condition']}/{first['sample_id']}: stored [" in verdict["message"]


def _rescored(capsule: Path, weights: dict[str, torch.Tensor]) -> dict[tuple[str, str], dict[str, Any]]:
    """(condition, sample) -> every per-item column the demo's evaluator writes, from another model.

    The inputs and the forward are the demo's own (its adapter's arrays, its ``predict``); the columns are
    the contract's (docs/capsule.md §5) for the demo's protocol, accuracy and cross-entropy.
    """
    config = config_of(capsule)
    metrics = {metric["name"] for metric in read_json(capsule / "run.json")["protocol"]["metrics"]}
    assert metrics == {"accuracy", "cross_entropy"}, "the demo's protocol changed: rescore its metrics here"
    model = build(config)
    model.load_state_dict(weights)
    positions, conditioned, labels = evaluation_arrays(config)
    targets = torch.from_numpy(labels)
    rows = {}
    for condition, inputs in conditioned.items():
        logits = predict(model, torch.from_numpy(inputs))
        losses = torch.nn.functional.cross_entropy(logits, targets, reduction="none").numpy()
        predictions = logits.argmax(dim=1).numpy()
        finite = torch.isfinite(logits).all(dim=1).numpy()
        for sample, position in positions.items():
            rows[condition, sample] = {
                "valid": bool(finite[position]),
                "forward_finite": bool(finite[position]),
                "m.accuracy": float(predictions[position] == labels[position]),
                "m.cross_entropy": float(losses[position]),
                "pred": int(predictions[position]),
                "output": logits[position].numpy().astype(np.float32).tolist(),
            }
    return rows


def test_results_written_by_another_model_fail(run_audits: RunAudits, base: Path, tmp_path: Path) -> None:
    root, capsule = variant(base, tmp_path)
    folder = capsule / "test" / "main"
    table = pq.read_table(folder / "results.parquet")
    rescored = _rescored(capsule, other_weights(capsule))
    keys = list(
        zip(table.column("condition_id").to_pylist(), table.column("sample_id").to_pylist(), strict=True)
    )
    columns = {
        name: pa.array([rescored[key][name] for key in keys], table.schema.field(name).type)
        for name in ("valid", "forward_finite", "m.accuracy", "m.cross_entropy", "pred", "output")
    }
    for name, values in columns.items():
        table = table.set_column(table.column_names.index(name), table.schema.field(name), values)
    pq.write_table(table, folder / "results.parquet")

    def rederive(metrics: dict[str, Any]) -> None:  # metrics.json re-derived from the new rows (§4)
        for row in metrics["metrics"]:
            values = [
                rescored[key][f"m.{row['metric']}"]
                for key in keys
                if key[0] == row["condition_id"] and rescored[key]["valid"]
            ]
            row["value"] = round(float(np.mean(values)), row["precision"])

    edit_json(folder / "metrics.json", rederive)
    reseal(root)

    outcome = run_audits(capsule, root, "-p", DEMO_ADAPTER, *CUSTODY_AND_FRESH)

    assert custody_findings(outcome) == {}, outcome.result.stdout.str()
    assert {item["verdict"] for item in outcome.find("capsule.metrics_rederived")} == {"passed"}
    verdict = the(outcome)
    assert verdict["verdict"] == "failed", verdict["message"]
    assert 0 < verdict["evidence"]["mismatched"] <= verdict["evidence"]["items"]
    assert "did not come from this checkpoint" in verdict["message"]


# -- what is compared when the table keeps no output vectors --------------------------------------

ITEM_METRICS_ADAPTER = """
import pytest
import torch

from runaudit.examples.digits.adapter import *


@pytest.fixture(scope="session")
def smoke_item_metrics():
    def per_item(outputs, targets):
        return {
            "accuracy": (outputs.argmax(dim=1) == targets).double(),
            "cross_entropy": torch.nn.functional.cross_entropy(outputs, targets, reduction="none").double(),
        }

    return per_item
"""


@pytest.mark.parametrize(
    ("dropped", "compared"),
    [(["output"], "pred"), (["output", "pred"], "m.accuracy, m.cross_entropy")],
    ids=["pred", "item-metrics"],
)
def test_without_outputs_it_compares_pred_else_the_per_item_metrics(
    run_audits: RunAudits,
    pytester: pytest.Pytester,
    base: Path,
    tmp_path: Path,
    dropped: list[str],
    compared: str,
) -> None:
    root, capsule = variant(base, tmp_path)
    results = capsule / "test" / "main" / "results.parquet"
    pq.write_table(pq.read_table(results).drop_columns(dropped), results)
    pytester.makepyfile(metrics_adapter=textwrap.dedent(ITEM_METRICS_ADAPTER))
    pytester.syspathinsert()

    outcome = run_audits(capsule, root, "-p", "metrics_adapter", EVALUATION)

    verdict = the(outcome)
    assert verdict["verdict"] == "passed", verdict["message"]
    assert verdict["evidence"]["compared"] == compared
    assert verdict["evidence"]["items"] == expected_items(capsule, root)


def test_the_evaluation_inputs_are_the_evaluators_own(base: Path) -> None:
    """The adapter's arrays, picked by sample id, are what the evaluator fed: re-scored, they give the
    stored outputs of every test item, not only the selected ones."""
    capsule = base / "export" / DEMO_RUN_ID
    config = config_of(capsule)
    model = build(config)
    model.load_state_dict(torch.load(capsule / "best.pth", weights_only=True)["model"])
    table = pq.read_table(capsule / "test" / "main" / "results.parquet")
    positions, conditioned, _ = evaluation_arrays(config)
    stored = {
        (condition, sample): output
        for condition, sample, output in zip(
            *(table.column(name).to_pylist() for name in ("condition_id", "sample_id", "output")), strict=True
        )
    }
    for condition, inputs in conditioned.items():
        fresh = predict(model, torch.from_numpy(inputs)).numpy()
        kept = np.array([stored[condition, sample] for sample in positions], dtype=np.float32)
        order = np.array(list(positions.values()))
        np.testing.assert_allclose(fresh[order], kept, rtol=1e-5, atol=1e-5, err_msg=condition)
