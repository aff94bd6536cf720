"""Leakage audits on real split manifests built by ``runaudit index-splits`` from the digits as PNG files.

The flagship: the dataset enumerated through two case-aliased folders (``Train/`` and ``train/`` holding
the same files) and pooled before a random re-split. Its control: official splits whose file names
collide (``train/0.png``, ``test/0.png``) but whose bytes differ.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from science_support import bind_split, digit_png, digits, edit_json, verdict, write_list

from runaudit import cli
from runaudit.examples.digits.data import stratified_split
from runaudit.hamming import HammingIndex
from runaudit.near_duplicates import CALIBRATION_ITEMS, MAX_RADIUS, find_near_duplicates
from runaudit.splits import SplitManifest

LEAKAGE = ("-m", "science", "-k", "leakage")


def _index(root: Path, dataset: Path, split_id: str, *extra: str) -> tuple[str, dict[str, int]]:
    assert cli.main(["index-splits", str(dataset), "--root", str(root), "--split-id", split_id, *extra]) == 0
    manifest = root / "_trust" / "splits" / f"{split_id}.parquet"
    splits = pq.read_table(manifest, columns=["split"]).column("split").to_pylist()
    counts = {name: splits.count(name) for name in ("train", "val", "test")}
    return hashlib.sha256(manifest.read_bytes()).hexdigest(), counts


def _random_split(paths: list[str], seed: int) -> dict[str, str]:
    order = np.random.default_rng(seed).permutation(len(paths))
    n_val = n_test = len(paths) // 5
    names = ["val"] * n_val + ["test"] * n_test + ["train"] * (len(paths) - n_val - n_test)
    return {paths[index]: name for index, name in zip(order, names, strict=True)}


def test_case_aliased_double_ingestion_is_disclosed_with_the_share_of_test_seen(
    run_audits, project: Path, capsule_dir: Path, tmp_path: Path
) -> None:
    dataset = tmp_path / "digits"
    labels = digits().labels
    for index in range(len(labels)):
        for alias in ("Train", "train"):  # one folder on NTFS/APFS, two on this filesystem
            folder = dataset / alias / str(labels[index])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"d{index:04d}.png").write_bytes(digit_png(index))
    pooled = sorted(path.relative_to(dataset).as_posix() for path in dataset.rglob("*.png"))
    assignment = _random_split(pooled, seed=7)
    listing = write_list(
        tmp_path / "pooled.csv",
        [{"path": path, "split": split} for path, split in assignment.items()],
        ["path", "split"],
    )
    sha, counts = _index(project, dataset, "digits-pooled", "--list", str(listing))
    bind_split(capsule_dir, "digits-pooled", sha, counts, "random")

    outcome = run_audits(capsule_dir, project, *LEAKAGE)
    twin = {path: ("train" if path.startswith("Train/") else "Train") + path[5:] for path in pooled}
    test_items = [path for path, split in assignment.items() if split == "test"]
    seen = sum(assignment[twin[path]] == "train" for path in test_items)
    expected = seen / len(test_items)
    assert 0.4 < expected < 0.8  # about the train share: each test item's twin went to train or not

    normcase = verdict(outcome, "leakage.normcase_duplicates")
    assert normcase["verdict"] == "disclosed", normcase["message"]
    assert normcase["evidence"]["fraction_test_seen"] == pytest.approx(expected)
    assert normcase["evidence"]["overlap"]["train|test"] == seen
    assert f"{100 * expected:.1f} % of the test split was seen in training" in normcase["message"]
    assert normcase["evidence"]["repeated_with_identical_bytes"]["train"] > 0
    assert "test/main:accuracy" in normcase["affects"]

    same_bytes = verdict(outcome, "leakage.cross_split_bytes")
    assert same_bytes["verdict"] == "disclosed", same_bytes["message"]
    assert same_bytes["evidence"]["fraction_test_seen"] == pytest.approx(expected)
    assert same_bytes["evidence"]["overlap"]["train|test"] == seen
    assert same_bytes["evidence"]["examples"][0].startswith("test:")
    assert {"run:split", "test/main:accuracy", "test/main:cross_entropy"} <= set(same_bytes["affects"])

    provenance = verdict(outcome, "leakage.split_provenance")
    assert provenance["verdict"] == "disclosed" and "'random'" in provenance["message"]
    assert outcome.result.ret == 0  # science discloses; it never blocks


def _official_dataset(root: Path) -> Path:
    """Official-style folders numbered from 0 in each split: names collide, bytes do not."""
    split = stratified_split(digits().labels, seed=0, fractions=(0.2, 0.2))
    for name, indices in split.items():
        (root / name).mkdir(parents=True)
        for number, index in enumerate(indices):
            (root / name / f"{number}.png").write_bytes(digit_png(int(index)))
    return root


def test_colliding_names_with_distinct_bytes_disclose_nothing(
    run_audits, project: Path, capsule_dir: Path, tmp_path: Path
) -> None:
    sha, counts = _index(project, _official_dataset(tmp_path / "official"), "digits-official")
    bind_split(capsule_dir, "digits-official", sha, counts, "official")
    edit_json(capsule_dir / "run.json", lambda run: run.pop("declarations"))

    outcome = run_audits(capsule_dir, project, *LEAKAGE)
    leakage = [item for item in outcome.report["verdicts"] if item["audit"].startswith("leakage.")]
    assert {item["verdict"] for item in leakage} <= {"passed", "not_applicable"}, [
        (item["audit"], item["message"])
        for item in leakage
        if item["verdict"] not in ("passed", "not_applicable")
    ]
    same_bytes = verdict(outcome, "leakage.cross_split_bytes")
    assert (
        same_bytes["evidence"]["name_collisions"]["train|test"] == counts["test"]
    )  # every test name is in train
    assert same_bytes["evidence"]["overlap"] == {"train|test": 0, "train|val": 0, "val|test": 0}
    assert verdict(outcome, "leakage.near_duplicates")["verdict"] == "passed"


def test_near_copies_across_splits_are_found_by_calibrated_phash(
    run_audits, project: Path, capsule_dir: Path, tmp_path: Path
) -> None:
    dataset = _official_dataset(tmp_path / "official")
    images = digits().images
    split = stratified_split(digits().labels, seed=0, fractions=(0.2, 0.2))
    for number, index in enumerate(split["train"][:40]):  # re-exposed copies of train items: other bytes
        (dataset / "test" / f"copy{number}.png").write_bytes(digit_png(0, images[index][None] * 0.85))
    sha, counts = _index(project, dataset, "digits-near")
    bind_split(capsule_dir, "digits-near", sha, counts, "official")

    outcome = run_audits(capsule_dir, project, *LEAKAGE)
    near = verdict(outcome, "leakage.near_duplicates")
    assert near["verdict"] == "disclosed", near["message"]
    assert near["evidence"]["overlap"]["train|test"] >= 30
    assert near["evidence"]["p_values"]["train|test"] < 1e-3
    assert near["evidence"]["threshold"] <= near["evidence"]["max_radius"]
    assert any("copy" in example for example in near["evidence"]["examples"])
    assert (
        verdict(outcome, "leakage.cross_split_bytes")["verdict"] == "passed"
    )  # bytes differ: not its finding


def _grouped_timed_dataset(root: Path, tmp_path: Path, *, leaky: bool) -> tuple[Path, Path]:
    """Items collected in order by 'writers' of 6 consecutive digits; split by writer and time, or at random."""
    count = 600
    (root / "all").mkdir(parents=True)
    for index in range(count):
        (root / "all" / f"{index}.png").write_bytes(digit_png(index))
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    paths = [f"all/{index}.png" for index in range(count)]
    if leaky:
        assignment = _random_split(paths, seed=11)
    else:
        assignment = {
            path: "train" if index < 360 else "val" if index < 480 else "test"
            for index, path in enumerate(paths)
        }
    rows = [
        {
            "path": path,
            "split": assignment[path],
            "group": f"writer{index // 6}",
            "time": (start + dt.timedelta(minutes=index)).isoformat(),
        }
        for index, path in enumerate(paths)
    ]
    return root, write_list(tmp_path / f"list-{leaky}.csv", rows, ["path", "split", "group", "time"])


@pytest.mark.parametrize("leaky", [True, False], ids=["random-split", "group-and-time-split"])
def test_group_overlap_and_temporal_order(
    run_audits, project: Path, capsule_dir: Path, tmp_path: Path, leaky: bool
) -> None:
    dataset, listing = _grouped_timed_dataset(tmp_path / "writers", tmp_path, leaky=leaky)
    sha, counts = _index(project, dataset, "writers", "--list", str(listing))
    bind_split(
        capsule_dir,
        "writers",
        sha,
        counts,
        "random" if leaky else "group",
        group_key="writer",
        time_key="collected",
    )

    outcome = run_audits(capsule_dir, project, *LEAKAGE)
    group = verdict(outcome, "leakage.group_overlap")
    temporal = verdict(outcome, "leakage.temporal_order")
    if not leaky:
        assert (group["verdict"], temporal["verdict"]) == ("passed", "passed"), (
            group["message"],
            temporal["message"],
        )
        return
    assert group["verdict"] == "disclosed" and group["evidence"]["overlap"]["train|test"] > 0
    assert 0 < group["evidence"]["fraction_test_seen"] <= 1
    assert group["evidence"]["examples"][0].startswith("writer")
    assert temporal["verdict"] == "disclosed" and temporal["evidence"]["overlap"]["train|test"] > 0
    assert (
        temporal["evidence"]["fraction_test_seen"] > 0.5
    )  # a random split puts most test items before train's end


# The audits that read the split manifest. val_split_exists passed on an all-null manifest: validation ids
# never checked.
MANIFEST_READERS = (
    "leakage.cross_split_bytes",
    "leakage.normcase_duplicates",
    "leakage.near_duplicates",
    "leakage.val_split_exists",
)


def assert_the_manifest_readers_not_run(outcome: Any) -> None:
    """Each audit that reads the split manifest is not_run, pointing at the audit that reports why."""
    for audit in MANIFEST_READERS:
        found = verdict(outcome, audit)
        assert found["verdict"] == "not_run" and "reported by leakage.split_provenance" in found["message"]


def test_selection_on_test_and_missing_validation_split(run_audits, project: Path, capsule_dir: Path) -> None:
    def change(run: dict) -> None:
        run["checkpoints"]["best"]["selection"]["split"] = "test"
        run["split"]["counts"]["val"] = 0

    edit_json(capsule_dir / "run.json", change)
    outcome = run_audits(capsule_dir, project, *LEAKAGE)
    selection = verdict(outcome, "leakage.selection_on_test")
    assert selection["verdict"] == "disclosed"
    assert "best.pth was selected by accuracy on the test split" in selection["message"]
    assert {"run:checkpoint_selection", "test/main:accuracy"} <= set(selection["affects"])
    validation = verdict(outcome, "leakage.val_split_exists")
    assert validation["verdict"] == "disclosed" and "val_accuracy" in validation["message"]
    provenance = verdict(outcome, "leakage.split_provenance")  # counts no longer match the manifest
    assert (
        provenance["verdict"] == "disclosed"
        and "counts" in provenance["message"]
        and "declared" not in provenance
    )


@pytest.mark.parametrize(
    ("column", "split"),
    [
        ("test/accuracy", "val"),
        ("Test_Accuracy", "val"),
        ("eval_test_accuracy", "val"),
        ("val_accuracy", "Test"),
        ("val_accuracy", "holdout"),
    ],
)
def test_a_test_split_read_under_another_spelling_is_disclosed(
    run_audits, project: Path, capsule_dir: Path, column: str, split: str
) -> None:
    """Only ``test_*`` columns and a selection split spelled exactly ``test`` were seen: ``test/accuracy``
    logged every epoch, or a checkpoint selected on ``Test`` or an undeclared ``holdout``, passed."""
    train = capsule_dir / "train.csv"
    header, rest = train.read_text().split("\n", 1)
    train.write_text(header.replace("val_accuracy", column) + "\n" + rest)
    edit_json(
        capsule_dir / "run.json", lambda run: run["checkpoints"]["best"]["selection"].update(split=split)
    )
    selection = verdict(run_audits(capsule_dir, project, *LEAKAGE), "leakage.selection_on_test")
    assert selection["verdict"] == "disclosed", selection
    assert (column in selection["message"]) == (column != "val_accuracy")
    assert (repr(split) in selection["message"] or f"on the {split} split" in selection["message"]) == (
        split != "val"
    )


def test_columns_that_only_hold_test_inside_a_word_are_no_test_split() -> None:
    from runaudit.splits import names_split

    assert names_split("eval-Test_acc", "test") and names_split("heldout_b_acc", "heldout_b")
    assert not names_split("latest_loss", "test") and not names_split("n_tests", "test")
    assert not names_split("x", "")


def test_a_manifest_changed_after_the_run_is_not_audited_as_the_runs(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    edit_json(capsule_dir / "run.json", lambda run: run["split"].update(manifest_sha256="0" * 64))
    outcome = run_audits(capsule_dir, project, *LEAKAGE)
    provenance = verdict(outcome, "leakage.split_provenance")
    assert provenance["verdict"] == "disclosed" and "changed after the run" in provenance["message"]
    assert_the_manifest_readers_not_run(outcome)


def _nulled(table: pa.Table) -> pa.Table:
    """Every cell null but the split: no row names its item."""
    return pa.table(
        {
            name: table.column(name)
            if name == "split"
            else pa.nulls(table.num_rows, table.schema.field(name).type)
            for name in table.column_names
        }
    )


def _text_phash(table: pa.Table) -> pa.Table:
    return table.set_column(
        table.column_names.index("phash"), "phash", pa.array(["zz"] * table.num_rows, pa.string())
    )


@pytest.mark.parametrize(
    ("hostile", "expected"),
    [(_nulled, "has null cells (sample_id "), (_text_phash, "column phash holds string")],
    ids=["null-required-cells", "text-phash"],
)
def test_a_manifest_outside_its_contract_leaves_the_leakage_audits_not_run(
    run_audits: Callable[..., Any],
    project: Path,
    capsule_dir: Path,
    hostile: Callable[[pa.Table], pa.Table],
    expected: str,
) -> None:
    split_id = json.loads((capsule_dir / "run.json").read_text())["split"]["split_id"]
    table = hostile(pq.read_table(project / "_trust" / "splits" / f"{split_id}.parquet"))
    manifest = project / "_trust" / "splits" / "hostile.parquet"
    pq.write_table(table, manifest)
    splits = table.column("split").to_pylist()
    counts = {name: splits.count(name) for name in ("train", "val", "test")}
    bind_split(capsule_dir, "hostile", hashlib.sha256(manifest.read_bytes()).hexdigest(), counts, "official")

    outcome = run_audits(capsule_dir, project, *LEAKAGE)
    provenance = verdict(outcome, "leakage.split_provenance")
    assert provenance["verdict"] == "disclosed" and expected in provenance["message"]
    assert "_trust/splits/hostile.parquet" in provenance["message"] and "\n" not in provenance["message"]
    assert_the_manifest_readers_not_run(outcome)


@pytest.mark.parametrize("same_bytes", [False, True], ids=["other-bytes", "same-bytes"])
def test_items_sharing_one_phash_are_searched_once_per_distinct_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, same_bytes: bool
) -> None:
    """Every item with one pHash: each search used to pair every query with every item (quadratic)."""
    rows = 2 * CALIBRATION_ITEMS
    path = tmp_path / "one-phash.parquet"
    pq.write_table(
        pa.table(
            {
                "sample_id": [f"s{row}" for row in range(rows)],
                "split": ["train", "val", "test", "train"] * (rows // 4),
                "path": [f"all/{row}.png" for row in range(rows)],
                "sha256": [
                    hashlib.sha256(b"0" if same_bytes else str(row).encode()).hexdigest()
                    for row in range(rows)
                ],
                "phash": pa.array([0x0123456789ABCDEF] * rows, pa.uint64()),
            }
        ),
        path,
    )
    pairs: list[tuple[int, int]] = []  # (queries, pairs returned) per search
    search = HammingIndex.search

    def counted(self: HammingIndex, queries: np.ndarray, radius: int | None = None) -> tuple[np.ndarray, ...]:
        found = search(self, queries, radius)
        pairs.append((len(queries), len(found[0])))
        return found

    monkeypatch.setattr(HammingIndex, "search", counted)
    found = find_near_duplicates(SplitManifest("one-phash", path.name, "", pq.read_table(path)))
    assert all(returned <= queries for queries, returned in pairs)
    if same_bytes:  # one file ingested many times: not a lookalike, and cross_split_bytes' finding
        assert found.threshold == MAX_RADIUS and found.counts == {
            "train|test": 0,
            "train|val": 0,
            "val|test": 0,
        }
    else:  # every item has a twin of other bytes at distance 0: decided before any search
        assert found.threshold is None and found.calibration_rates == {
            split: [1.0] for split in ("train", "val", "test")
        }


def test_the_demo_reads_the_same_digits_as_scikit_learns_loader() -> None:
    """The demo reads scikit-learn's shipped CSV itself (no sklearn import); the split manifest's hashes
    and the dataset's content hash rest on those bytes being load_digits' own."""
    import sklearn
    from sklearn.datasets import load_digits

    from runaudit.examples.digits import data

    ours, theirs = data.load(), load_digits()
    assert ours.images.shape == (1797, 8, 8) and ours.images.dtype == np.uint8
    assert np.array_equal(ours.images, theirs.images.astype(np.uint8))
    assert np.array_equal(ours.labels, theirs.target)
    assert ours.version == f"sklearn-{sklearn.__version__}"
