"""Capsules for the capsule gate's own tests: a small no-GT hardware capsule, and seeded defects.

Every defect is one realistic mistake applied to an otherwise clean capsule (the sealed demo, or the
hardware capsule built here), paired with the one audit id that must fail on it. The bytes are real: PNGs
are encoded by Pillow, tables written by pyarrow, hashes taken of the files as written.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from runaudit.examples.digits.train import DEFAULT_CONFIG
from runaudit.manifest import MANIFEST, RECEIPT
from runaudit.receipts import snapshot

# The demo as the tests build it: 2 test items a class (n_test 20), so k = min(100, n_test) selects 20 and
# the test renders 80 PNGs, not 400. Every audit session of the demo judges each file in two cases (size and
# hash), and the suite runs several hundred sessions: the demo's own 359 test items cost each ~0.8 s more.
# It trains on the same data with the same settings otherwise; what the tests assert is read from the
# capsule. Every run trained beside it in one project holds out the same test split (the CLI's
# ``--test-fraction``): a split id names one split.
COMPACT_TEST_FRACTION = 0.012
COMPACT_DEMO_CONFIG = {
    **DEFAULT_CONFIG,
    "data": {**DEFAULT_CONFIG["data"], "test_fraction": COMPACT_TEST_FRACTION},
}

HARDWARE_RUN_ID = "hw-cam-01"
HARDWARE_TEST_ID = "bench"
HARDWARE_CONDITIONS = ("daylight", "lowlight")
HARDWARE_SAMPLES = tuple(f"f{index:03d}" for index in range(6))
NO_GT = "unavailable_no_machine_readable_gt"


# -- small file helpers ---------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    document = read_json(path)
    change(document)
    write_json(path, document)


def listed_files(project: Path, pull_id: str) -> int:
    """How many files ``project``'s pull manifest ``pull_id`` lists: what a custody session hashes."""
    return len(read_json(project / "_trust" / "pulls" / pull_id / MANIFEST)["files"])


def pulled_home(project: Path, run_id: str) -> Path:
    """Make ``project`` what a user's root is after a pull: ``export/<run_id>`` moved to ``runs/<run_id>``,
    its receipt re-homed there.

    The demo seals and verifies its capsule where it was produced (``export/``), and ``down`` takes no such
    receipt for a copy brought home. Moving the folder keeps every file's stat key, so the receipt,
    re-homed, is what ``runaudit verify`` run here would write.
    """
    (project / "runs").mkdir(exist_ok=True)
    os.rename(project / "export" / run_id, project / "runs" / run_id)
    path = project / "_trust" / "pulls" / run_id / RECEIPT
    receipt = read_json(path)
    receipt["holder"] = "runs"
    receipt["stat_keys"] = snapshot(project / "runs", list(receipt["stat_keys"]))  # the folder's new ctime
    path.write_text(json.dumps(receipt, indent=2))
    return project


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def rewrite_table(path: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(change(pq.read_table(path)), path)


# -- the no-ground-truth hardware capsule -----------------------------------------------------------


def _frame(seed: int) -> np.ndarray:
    """A synthetic 24×32 sensor frame: a lit blob on a noisy background, as a camera capture would give."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0:24, 0:32]
    centre = rng.uniform((6, 8), (18, 24))
    blob = 200.0 * np.exp(-((rows - centre[0]) ** 2 + (cols - centre[1]) ** 2) / 30.0)
    return np.clip(blob + rng.normal(30.0, 8.0, size=blob.shape), 0, 255).astype(np.uint8)


def _prediction_render(frame: np.ndarray, label: int) -> np.ndarray:
    """What the model predicted on the frame: the frame in grey with a bar whose height is the class."""
    rgb = np.repeat(frame[:, :, None], 3, axis=2)
    rgb[24 - 2 * (label + 1) :, :3] = (40, 90, 200)
    return rgb


def build_hardware_capsule(root: Path, model_run: Path, run_id: str = HARDWARE_RUN_ID) -> Path:
    """``root/export/hardware/<run_id>``: the demo model run on captured frames without ground truth.

    The capsule binds the capture, the decoder and the closed model run (``model_run``, a sealed software
    capsule) by hash, holds no weights, declares the no-GT branch, scores nothing (``n_scored`` 0) and
    renders one ``prediction`` role for every selected frame.
    """
    capsule = root / "export" / "hardware" / run_id
    test_dir = capsule / "test" / HARDWARE_TEST_ID
    frames = {sample: _frame(index) for index, sample in enumerate(HARDWARE_SAMPLES)}
    capture_sha = hashlib.sha256(b"".join(frame.tobytes() for frame in frames.values())).hexdigest()
    decoder = b"decode: argmax over 10 digit classes; no ground truth is available for captured frames\n"
    model_json = read_json(model_run / "run.json")
    selection_id = f"{run_id}-frames"
    selection = {
        "selection_id": selection_id,
        "dataset_id": f"{run_id}-capture",
        "split_id": f"{run_id}-capture",
        "n_test": len(HARDWARE_SAMPLES),
        "k": len(HARDWARE_SAMPLES),
        "sample_ids": list(HARDWARE_SAMPLES),
        "method": "all",
        "performance_ranked": False,
    }
    selection_path = root / "_trust" / "selections" / f"{selection_id}.json"
    write_json(selection_path, selection)

    rows: dict[str, list[Any]] = {"condition_id": [], "sample_id": [], "item_index": [], "n_pred": []}
    for condition_index, condition in enumerate(HARDWARE_CONDITIONS):
        for item_index, (sample, frame) in enumerate(frames.items()):
            seen = frame // (condition_index + 1)  # low light halves the signal
            label = int(seen.argmax()) % 10
            rows["condition_id"].append(condition)
            rows["sample_id"].append(sample)
            rows["item_index"].append(item_index)
            rows["n_pred"].append(1)
            target = test_dir / "vis" / condition / "prediction" / f"{sample}.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(png_bytes(_prediction_render(seen, label)))
    count = len(rows["sample_id"])
    table = pa.table(
        {
            "condition_id": pa.array(rows["condition_id"], pa.string()),
            "sample_id": pa.array(rows["sample_id"], pa.string()),
            "item_index": pa.array(rows["item_index"], pa.int64()),
            "valid": pa.array([False] * count, pa.bool_()),  # nothing is scorable without ground truth
            "forward_finite": pa.array([True] * count, pa.bool_()),
            "n_pred": pa.array(rows["n_pred"], pa.int64()),
        }
    )
    pq.write_table(table, test_dir / "results.parquet")
    best_sha256 = sha256_of(model_run / "best.pth")
    common = {
        "split": "capture",
        "n_test": len(HARDWARE_SAMPLES),
        "ground_truth_status": NO_GT,
        "metric_applicability": "not_applicable",
    }
    write_json(
        test_dir / "metrics.json",
        {
            "schema_version": "runaudit.metrics/1",
            "run_id": run_id,
            "test_id": HARDWARE_TEST_ID,
            "n_scored": 0,
            "protocol_id": "hw-forward-v1",
            "checkpoint_sha256": best_sha256,
            **common,
            "metrics": [],
        },
    )
    write_json(
        capsule / "run.json",
        {
            "schema_version": "runaudit.run/1",
            "run_id": run_id,
            "kind": "hardware",
            "state": "closed",
            "closed_utc": "2025-01-01T00:00:00Z",
            "task": model_json["task"],
            "source": {"repo": "runaudit", "commit": None, "dirty": False, "entrypoint": "capture-rig"},
            "protocol": {"protocol_id": "hw-forward-v1", "metrics": []},
            "tests": [
                {
                    "test_id": HARDWARE_TEST_ID,
                    **common,
                    "conditions": list(HARDWARE_CONDITIONS),
                    "roles": ["prediction"],
                    "selection_id": selection_id,
                }
            ],
            "selections": [
                {"selection_id": selection_id, "sha256": sha256_of(selection_path), "k": selection["k"]}
            ],
            "environment": {"python": "3.11", "torch": None},
            "capture": {"id": f"{run_id}-capture", "sha256": capture_sha},
            "decode": {"id": "argmax-v1", "sha256": hashlib.sha256(decoder).hexdigest()},
            "model_run": {
                "run_id": model_json["run_id"],
                "run_json_sha256": sha256_of(model_run / "run.json"),
                "best_sha256": best_sha256,
            },
        },
    )
    return capsule


# -- seeded defects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Defect:
    """One mistake seeded into a clean capsule, and the only audit id that may fail on it."""

    name: str
    audit: str
    seed: Callable[[Path, Path], None]  # (capsule, project root)
    base: str = "demo"  # "demo" (the sealed software capsule) or "hardware"


def _demo_test(capsule: Path) -> Path:
    return capsule / "test" / "main"


def _first_png(capsule: Path) -> Path:
    return sorted((_demo_test(capsule) / "vis").rglob("*.png"))[0]


def _selection_path(capsule: Path, root: Path) -> Path:
    selection_id = read_json(capsule / "run.json")["tests"][0]["selection_id"]
    return root / "_trust" / "selections" / f"{selection_id}.json"


def _rebind_selection(capsule: Path, root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit the selection file and re-bind run.json to the new bytes (a consistent, deliberate edit)."""
    path = _selection_path(capsule, root)
    edit_json(path, change)
    document = read_json(path)

    def bind(run_json: dict[str, Any]) -> None:
        for item in run_json["selections"]:
            if item["selection_id"] == document["selection_id"]:
                item.update(sha256=sha256_of(path), k=document["k"])

    edit_json(capsule / "run.json", bind)


def missing_best(capsule: Path, root: Path) -> None:
    (capsule / "best.pth").unlink()


def missing_results(capsule: Path, root: Path) -> None:
    (_demo_test(capsule) / "results.parquet").unlink()


def latest_checkpoint(capsule: Path, root: Path) -> None:
    shutil.copyfile(capsule / "last.pth", capsule / "latest.pth")


def sentinel(capsule: Path, root: Path) -> None:
    write_json(capsule / "COMPLETE.json", {"status": "complete"})


def symlink(capsule: Path, root: Path) -> None:
    (capsule / "dataset").symlink_to(root / "_trust", target_is_directory=True)


def write_residue(capsule: Path, root: Path) -> None:
    shutil.copyfile(capsule / "best.pth", capsule / ".best.pth.k2j4.tmp")


def stray_file(capsule: Path, root: Path) -> None:
    (capsule / "notes.txt").write_text("remember to rerun with seed 2\n")


def stray_in_test(capsule: Path, root: Path) -> None:
    (_demo_test(capsule) / "confusion.csv").write_text("class,count\n0,36\n")


def inventory_in_run_json(capsule: Path, root: Path) -> None:
    files = [
        {"path": name, "bytes": (capsule / name).stat().st_size, "sha256": sha256_of(capsule / name)}
        for name in ("best.pth", "last.pth")
    ]
    edit_json(capsule / "run.json", lambda document: document.update(files=files))


def edited_config(capsule: Path, root: Path) -> None:
    config = capsule / "config.yaml"
    text = config.read_text()
    assert "lr: 0.003" in text
    config.write_text(text.replace("lr: 0.003", "lr: 0.01"))


def train_csv_without_step(capsule: Path, root: Path) -> None:
    path = capsule / "train.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    columns = [name for name in rows[0] if name != "step"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue())


def run_json_written_before_training_went_on(capsule: Path, root: Path) -> None:
    """run.json's steps_run one short of train.csv's last step: a finished run reopened, trained on and
    sealed with its first finish (the writer withdraws it now; another producer may not)."""

    def earlier(document: dict[str, Any]) -> None:
        document["training"]["steps_run"] -= 1

    edit_json(capsule / "run.json", earlier)


def undeclared_test(capsule: Path, root: Path) -> None:
    shutil.copytree(_demo_test(capsule), capsule / "test" / "heldout")


def metrics_protocol(capsule: Path, root: Path) -> None:
    edit_json(
        _demo_test(capsule) / "metrics.json", lambda document: document.update(protocol_id="digits-top5")
    )


def results_without_forward_finite(capsule: Path, root: Path) -> None:
    rewrite_table(
        _demo_test(capsule) / "results.parquet", lambda table: table.drop_columns(["forward_finite"])
    )


def wrong_k(capsule: Path, root: Path) -> None:
    """The selection keeps half its samples (k must be min(100, n_test)), renders consistent."""
    kept: list[str] = []

    def halve(document: dict[str, Any]) -> None:
        kept.extend(document["sample_ids"][: len(document["sample_ids"]) // 2])
        document.update(sample_ids=kept, k=len(kept))

    _rebind_selection(capsule, root, halve)
    for png in (_demo_test(capsule) / "vis").rglob("*.png"):
        if png.stem not in kept:
            png.unlink()


def performance_ranked(capsule: Path, root: Path) -> None:
    _rebind_selection(capsule, root, lambda document: document.update(performance_ranked=True))


def selection_edited_after_binding(capsule: Path, root: Path) -> None:
    path = _selection_path(capsule, root)
    edit_json(path, lambda document: document.update(method="stratified"))


def missing_png(capsule: Path, root: Path) -> None:
    _first_png(capsule).unlink()


def extra_png(capsule: Path, root: Path) -> None:
    source = _first_png(capsule)
    shutil.copyfile(source, source.with_name("d9999.png"))


def truncated_png(capsule: Path, root: Path) -> None:
    png = _first_png(capsule)
    data = png.read_bytes()
    png.write_bytes(data[: len(data) // 2])


def metric_off_at_precision(capsule: Path, root: Path) -> None:
    """accuracy/clean one unit off in its last declared decimal (precision 4)."""

    def nudge(document: dict[str, Any]) -> None:
        row = next(
            r for r in document["metrics"] if (r["metric"], r["condition_id"]) == ("accuracy", "clean")
        )
        row["value"] = round(row["value"] + 10 ** -row["precision"], row["precision"])

    edit_json(_demo_test(capsule) / "metrics.json", nudge)


def n_scored_zero(capsule: Path, root: Path) -> None:
    edit_json(_demo_test(capsule) / "metrics.json", lambda document: document.update(n_scored=0))


def case_only_role_collision(capsule: Path, root: Path) -> None:
    """A second role ``Input`` beside ``input``: two folders on ext4, one on NTFS/APFS after a pull."""
    for condition in (_demo_test(capsule) / "vis").iterdir():
        shutil.copytree(condition / "input", condition / "Input")
    edit_json(capsule / "run.json", lambda document: document["tests"][0]["roles"].append("Input"))


def run_json_not_an_object(capsule: Path, root: Path) -> None:
    write_json(capsule / "run.json", [read_json(capsule / "run.json")])


def metrics_json_truncated(capsule: Path, root: Path) -> None:
    path = _demo_test(capsule) / "metrics.json"
    path.write_bytes(path.read_bytes()[:-40])


def results_not_parquet(capsule: Path, root: Path) -> None:
    (_demo_test(capsule) / "results.parquet").write_bytes(b"condition_id,sample_id\nclean,d0000\n")


def duplicate_result_row(capsule: Path, root: Path) -> None:
    rewrite_table(
        _demo_test(capsule) / "results.parquet", lambda table: pa.concat_tables([table, table.slice(0, 1)])
    )


def items_differ_across_conditions(capsule: Path, root: Path) -> None:
    """Two samples of the noise condition trade item_index: the conditions no longer pair item by item."""

    def swap(table: pa.Table) -> pa.Table:
        indices = table.column("item_index").to_pylist()
        noise = [
            row
            for row, condition in enumerate(table.column("condition_id").to_pylist())
            if condition == "noise"
        ]
        first, second = noise[:2]
        indices[first], indices[second] = indices[second], indices[first]
        return table.set_column(
            table.column_names.index("item_index"), "item_index", pa.array(indices, pa.int64())
        )

    rewrite_table(_demo_test(capsule) / "results.parquet", swap)


def missing_test_folder(capsule: Path, root: Path) -> None:
    shutil.rmtree(_demo_test(capsule))


def missing_vis_folder(capsule: Path, root: Path) -> None:
    shutil.rmtree(_demo_test(capsule) / "vis")


def selection_roster_swapped(capsule: Path, root: Path) -> None:
    """One selected id swapped for another test item after run.json bound the file (renders follow it)."""
    path = _selection_path(capsule, root)
    document = read_json(path)
    dropped, taken = document["sample_ids"][0], "d0001"
    assert taken not in document["sample_ids"]
    document["sample_ids"] = sorted([*document["sample_ids"][1:], taken])
    write_json(path, document)
    for png in (_demo_test(capsule) / "vis").rglob(f"{dropped}.png"):
        png.rename(png.with_name(f"{taken}.png"))


def missing_selection_file(capsule: Path, root: Path) -> None:
    _selection_path(capsule, root).unlink()


def contradictory_branch(capsule: Path, root: Path) -> None:
    """Ground truth declared available while metrics are declared not applicable, in run.json and metrics.json."""
    edit_json(
        capsule / "run.json",
        lambda document: document["tests"][0].update(metric_applicability="not_applicable"),
    )
    edit_json(
        _demo_test(capsule) / "metrics.json",
        lambda document: document.update(metric_applicability="not_applicable"),
    )


def undeclared_branch(capsule: Path, root: Path) -> None:
    """The test omits ground_truth_status and metric_applicability: nothing may infer them from files."""

    def omit(document: dict[str, Any]) -> None:
        del document["tests"][0]["ground_truth_status"], document["tests"][0]["metric_applicability"]

    edit_json(capsule / "run.json", omit)


def _hardware_test(capsule: Path) -> Path:
    return capsule / "test" / HARDWARE_TEST_ID


def hardware_reports_accuracy(capsule: Path, root: Path) -> None:
    row = {
        "metric": "accuracy",
        "condition_id": HARDWARE_CONDITIONS[0],
        "value": 0.8333,
        "direction": "higher",
        "aggregation": "mean",
        "precision": 4,
    }
    edit_json(_hardware_test(capsule) / "metrics.json", lambda document: document["metrics"].append(row))


def hardware_metric_column(capsule: Path, root: Path) -> None:
    rewrite_table(
        _hardware_test(capsule) / "results.parquet",
        lambda table: table.append_column("m.accuracy", pa.array([1.0] * table.num_rows, pa.float64())),
    )


def hardware_ground_truth_role(capsule: Path, root: Path) -> None:
    for condition in (_hardware_test(capsule) / "vis").iterdir():
        shutil.copytree(condition / "prediction", condition / "ground_truth")
    edit_json(capsule / "run.json", lambda document: document["tests"][0]["roles"].append("ground_truth"))


def hardware_copied_weights(capsule: Path, root: Path) -> None:
    shutil.copyfile(root / "export" / "demo" / "best.pth", capsule / "best.pth")


DEFECTS = (
    Defect("missing-best-pth", "capsule.required_paths", missing_best),
    Defect("missing-results-parquet", "capsule.required_paths", missing_results),
    Defect("latest-pth", "capsule.forbidden_paths", latest_checkpoint),
    Defect("sentinel-complete-json", "capsule.forbidden_paths", sentinel),
    Defect("symlink", "capsule.forbidden_paths", symlink),
    Defect("atomic-write-residue", "capsule.forbidden_paths", write_residue),
    Defect("stray-file", "capsule.closed_world", stray_file),
    Defect("stray-file-in-test", "capsule.closed_world", stray_in_test),
    Defect("case-only-id-collision", "capsule.ids", case_only_role_collision),
    Defect("inventory-in-run-json", "capsule.run_json_schema", inventory_in_run_json),
    Defect("edited-config-yaml", "capsule.config_hash", edited_config),
    Defect("train-csv-without-step", "capsule.train_csv", train_csv_without_step),
    Defect(
        "run-json-written-before-training-went-on",
        "capsule.train_csv",
        run_json_written_before_training_went_on,
    ),
    Defect("undeclared-test-dir", "capsule.tests_declared", undeclared_test),
    Defect("metrics-protocol-mismatch", "capsule.metrics_schema", metrics_protocol),
    Defect("results-without-forward-finite", "capsule.results_table", results_without_forward_finite),
    Defect("wrong-k", "capsule.selection", wrong_k),
    Defect("performance-ranked-selection", "capsule.selection", performance_ranked),
    Defect("selection-edited-after-binding", "capsule.selection", selection_edited_after_binding),
    Defect("missing-png", "capsule.vis_coverage", missing_png),
    Defect("extra-png", "capsule.vis_coverage", extra_png),
    Defect("truncated-png", "capsule.vis_decode", truncated_png),
    Defect("metric-off-at-precision", "capsule.metrics_rederived", metric_off_at_precision),
    Defect("n-scored-zero", "capsule.n_scored", n_scored_zero),
    Defect("run-json-not-an-object", "capsule.run_json_schema", run_json_not_an_object),
    Defect("metrics-json-truncated", "capsule.metrics_schema", metrics_json_truncated),
    Defect("results-not-parquet", "capsule.results_table", results_not_parquet),
    Defect("duplicate-result-row", "capsule.results_table", duplicate_result_row),
    Defect("items-differ-across-conditions", "capsule.results_table", items_differ_across_conditions),
    Defect("missing-test-folder", "capsule.tests_declared", missing_test_folder),
    Defect("missing-vis-folder", "capsule.required_paths", missing_vis_folder),
    Defect("selection-roster-swapped", "capsule.selection", selection_roster_swapped),
    Defect("missing-selection-file", "capsule.selection", missing_selection_file),
    Defect("undeclared-ground-truth-branch", "capsule.run_json_schema", undeclared_branch),
    Defect("contradictory-ground-truth-branch", "capsule.ground_truth_branch", contradictory_branch),
    Defect("no-gt-reports-accuracy", "capsule.ground_truth_branch", hardware_reports_accuracy, "hardware"),
    Defect("no-gt-metric-column", "capsule.ground_truth_branch", hardware_metric_column, "hardware"),
    Defect("no-gt-ground-truth-role", "capsule.ground_truth_branch", hardware_ground_truth_role, "hardware"),
    Defect("hardware-copied-weights", "capsule.forbidden_paths", hardware_copied_weights, "hardware"),
)
