"""Collapse audits on real models: the demo, and the same CNN trained with its input zeroed.

The zero-input model learns only the class prior, so at test time it maps every digit to nearly the same
logits: output cosine, prediction histogram and the trivial baseline disclose on it and not on the demo.
A ``shuffle`` condition (inputs permuted across items, targets kept) is evaluated for real on both.
"""

from __future__ import annotations

import copy
import io
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from capsules import COMPACT_DEMO_CONFIG, read_json
from science_support import digits, edit_json, verdict

from runaudit.examples.digits.build import produce
from runaudit.examples.digits.train import DEFAULT_CONFIG
from runaudit.runners.close import close_run

COLLAPSE = ("-m", "science", "-k", "test_collapse or paired_bootstrap")
PROBES = ("collapse.output_cosine", "collapse.prediction_histogram", "collapse.trivial_baseline")


@pytest.fixture(scope="module")
def collapsed_project(demo_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo project plus ``collapsed``: the demo's CNN trained 4 epochs on zeroed inputs, sealed."""
    root = tmp_path_factory.mktemp("collapsed") / "project"
    shutil.copytree(demo_project, root, ignore=shutil.ignore_patterns("*.lock", "reports"))
    config = copy.deepcopy(COMPACT_DEMO_CONFIG)
    config["train"].update(epochs=4, zero_inputs=True)
    draft = produce(root, "collapsed", config, log=lambda line: None)
    edit_json(
        draft / "run.json",
        lambda run: run.update(
            comparison={
                "group": "digits-demo",
                "arm": "zero-input",
                "ablated": ["train.zero_inputs", "train.epochs"],
            }
        ),
    )
    result = close_run(root, "collapsed")
    assert result.sealed, result.reason
    return root


def test_a_collapsed_model_discloses_and_the_healthy_demo_does_not(
    run_audits, collapsed_project: Path
) -> None:
    collapsed = run_audits("collapsed", collapsed_project, *COLLAPSE)
    n_test = read_json(collapsed_project / "export" / "demo" / "test" / "main" / "metrics.json")["n_test"]
    for audit in PROBES:
        assert verdict(collapsed, audit, "main")["verdict"] == "disclosed", audit
    cosine = verdict(collapsed, "collapse.output_cosine", "main")["evidence"]
    assert cosine["cosine"] >= 0.98 and cosine["n"] == n_test and "cosine_centered" in cosine
    histogram = verdict(collapsed, "collapse.prediction_histogram", "main")["evidence"]
    assert histogram["top_share"] > 0.5 and histogram["unique_predictions"] < 5
    trivial = verdict(collapsed, "collapse.trivial_baseline", "main")["evidence"]
    assert trivial["ci"][0] <= 0 <= trivial["ci"][1] or trivial["ci"][0] <= 0

    healthy = run_audits("demo", collapsed_project, *COLLAPSE)
    for audit in PROBES:
        assert verdict(healthy, audit, "main")["verdict"] == "passed", audit
    assert verdict(healthy, "collapse.output_cosine", "main")["evidence"]["cosine"] < 0.5

    paired = verdict(healthy, "variance.paired_bootstrap", "main/accuracy")  # demo vs the zero-input arm
    assert paired["verdict"] == "passed", paired["message"]
    assert paired["evidence"]["baseline_arm"] == "zero-input" and paired["evidence"]["ci"][0] > 0.5
    assert paired["evidence"]["n"] == n_test and paired["evidence"]["dropped"] == 0


def _add_shuffle_condition(capsule: Path) -> None:
    """Evaluate best.pth on inputs permuted across items (targets kept) as condition ``shuffle``."""
    import torch
    from torch import nn

    from runaudit.examples.digits.model import build

    state = torch.load(io.BytesIO((capsule / "best.pth").read_bytes()), weights_only=True)
    model = build(DEFAULT_CONFIG)
    model.load_state_dict(state["model"])
    model.eval()
    path = capsule / "test" / "main" / "results.parquet"
    table = pq.read_table(path)
    clean = table.filter(pc.equal(table.column("condition_id"), "clean"))
    indices = np.asarray(clean.column("item_index").to_numpy())
    targets = torch.tensor(clean.column("target").to_pylist())
    shuffled = torch.from_numpy(digits().inputs(np.random.default_rng(5).permutation(indices)))
    with torch.no_grad():
        logits = model(shuffled)
    losses = nn.functional.cross_entropy(logits, targets, reduction="none").numpy().astype(np.float64)
    predictions = logits.argmax(dim=1)
    rows = clean.to_pydict()
    rows.update(
        condition_id=["shuffle"] * clean.num_rows,
        **{"m.accuracy": (predictions == targets).double().tolist(), "m.cross_entropy": losses.tolist()},
        pred=predictions.tolist(),
        output=logits.numpy().astype(np.float32).tolist(),
    )
    pq.write_table(pa.concat_tables([table, pa.table(rows, schema=table.schema)]), path)
    edit_json(capsule / "run.json", lambda run: run["tests"][0]["conditions"].append("shuffle"))


def test_real_versus_shuffled_inputs(run_audits, collapsed_project: Path, tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(collapsed_project, root)
    for run_id in ("demo", "collapsed"):
        _add_shuffle_condition(root / "export" / run_id)
    healthy = verdict(run_audits("demo", root, *COLLAPSE), "collapse.real_vs_shuffle", "main/accuracy")
    assert healthy["verdict"] == "passed" and healthy["evidence"]["delta"] > 0.5, healthy["message"]
    collapsed = verdict(run_audits("collapsed", root, *COLLAPSE), "collapse.real_vs_shuffle", "main/accuracy")
    assert collapsed["verdict"] == "disclosed", collapsed["message"]
    assert "does not drive the score" in collapsed["message"]


def test_identical_renders_are_disclosed(run_audits, project: Path, capsule_dir: Path) -> None:
    folder = capsule_dir / "test" / "main" / "vis" / "clean" / "prediction"
    pngs = sorted(folder.glob("*.png"))
    for png in pngs[1:]:
        png.write_bytes(pngs[0].read_bytes())  # "12 distinct digits → 12 identical blobs"
    found = verdict(
        run_audits(capsule_dir, project, "-m", "science", "-k", "vis_identical"),
        "collapse.vis_identical",
        "main",
    )
    assert found["verdict"] == "disclosed" and "clean/prediction" in found["message"]
    assert found["evidence"]["groups"]["clean/input"]["identical_pair_share"] < 0.1


def test_empty_output_vectors_are_not_compared(run_audits, project: Path, capsule_dir: Path) -> None:
    """Vectors of no values were disclosed as "the model maps different inputs to the same output": a
    cosine of nothing is no finding either way."""
    path = capsule_dir / "test" / "main" / "results.parquet"
    table = pq.read_table(path)
    empty = pa.array([[]] * table.num_rows, pa.list_(pa.float32()))
    pq.write_table(table.set_column(table.schema.get_field_index("output"), "output", empty), path)
    outcome = run_audits(capsule_dir, project, "-k", "output_cosine or results_table")
    assert verdict(outcome, "capsule.results_table", "main")["verdict"] == "passed"
    found = verdict(outcome, "collapse.output_cosine", "main")
    assert found["verdict"] == "not_run" and "the output vectors are empty" in found["message"]
