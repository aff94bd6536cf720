"""``runaudit index-splits`` on real PNG datasets: what it records, and what it refuses in one line."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image
from science_support import digit_png, write_list

from runaudit import cli
from runaudit.perceptual_hash import phash64


def _dataset(root: Path, layout: dict[str, range]) -> Path:
    for folder, indices in layout.items():
        (root / folder).mkdir(parents=True)
        for index in indices:
            (root / folder / f"{index}.png").write_bytes(digit_png(index))
    return root


def _index(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["index-splits", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_folder_layout_records_paths_casefold_bytes_and_phash(tmp_path: Path, capsys) -> None:
    dataset = _dataset(
        tmp_path / "data", {"Training": range(0, 6), "valid": range(6, 8), "TEST": range(8, 10)}
    )
    (dataset / "TEST" / "notes.txt").write_text("not an image")
    root = tmp_path / "project"
    root.mkdir()
    code, out, err = _index(capsys, str(dataset), "--root", str(root), "--split-id", "digits-folders")
    assert code == 0, err
    manifest = root / "_trust" / "splits" / "digits-folders.parquet"
    assert hashlib.sha256(manifest.read_bytes()).hexdigest() in out
    rows = {row["path"]: row for row in pq.read_table(manifest).to_pylist()}
    assert len(rows) == 11
    first = rows["Training/0.png"]
    assert first["split"] == "train" and first["path_casefold"] == "training/0.png"
    assert first["sha256"] == hashlib.sha256((dataset / "Training" / "0.png").read_bytes()).hexdigest()
    assert first["phash"] == phash64(Image.open(io.BytesIO(digit_png(0))))
    assert rows["valid/6.png"]["split"] == "val" and rows["TEST/9.png"]["split"] == "test"
    assert rows["TEST/notes.txt"]["phash"] is None  # not an image: bytes only
    assert "group" not in pq.read_schema(manifest).names  # only recorded when given


def test_a_symlinked_case_alias_is_read_twice_as_a_loader_would(tmp_path: Path, capsys) -> None:
    dataset = _dataset(tmp_path / "data", {"train": range(4), "test": range(4, 6)})
    (dataset / "Train").symlink_to("train", target_is_directory=True)
    root = tmp_path / "project"
    root.mkdir()
    code, _, err = _index(capsys, str(dataset), "--root", str(root), "--split-id", "aliased")
    assert code == 0, err
    table = pq.read_table(root / "_trust" / "splits" / "aliased.parquet").to_pylist()
    train = [row for row in table if row["split"] == "train"]
    assert len(train) == 8  # Train/ and train/ each enumerated
    assert len({row["path"] for row in train}) == 8
    assert len({row["path_casefold"] for row in train}) == 4


def test_list_file_records_groups_times_labels_and_sample_ids(tmp_path: Path, capsys) -> None:
    dataset = _dataset(tmp_path / "data", {"all": range(4)})
    listing = write_list(
        tmp_path / "list.csv",
        [
            {
                "path": f"all/{index}.png",
                "split": "train" if index < 2 else "test",
                "sample_id": f"s{index}",
                "group": f"g{index // 2}",
                "time": f"2024-03-0{index + 1}T12:00:00",
                "label": str(index),
            }
            for index in range(4)
        ],
        ["path", "split", "sample_id", "group", "time", "label"],
    )
    root = tmp_path / "project"
    root.mkdir()
    code, _, err = _index(
        capsys, str(dataset), "--list", str(listing), "--root", str(root), "--split-id", "listed"
    )
    assert code == 0, err
    table = pq.read_table(root / "_trust" / "splits" / "listed.parquet")
    assert str(table.schema.field("time").type) == "timestamp[us, tz=UTC]"
    rows = table.to_pylist()
    assert [row["sample_id"] for row in rows] == ["s0", "s1", "s2", "s3"]
    assert [row["group"] for row in rows] == ["g0", "g0", "g1", "g1"]
    assert rows[3]["time"].day == 4 and rows[3]["label"] == "3"


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        ("path,split\n../outside.png,train\n", "must be relative to the dataset and stay inside it"),
        ("path,split\n/etc/passwd,train\n", "must be relative to the dataset and stay inside it"),
        ("path,split\nall/9.png,train\n", "does not exist as a file"),
        ("path,split\nall/0.png,holdout\n", "split 'holdout' is not train, val or test"),
        ("file,split\nall/0.png,train\n", "lacks path"),
        ("path,split\nescape/secret.png,train\n", "resolves outside"),
    ],
)
def test_bad_lists_are_refused_in_one_line(tmp_path: Path, capsys, listing: str, expected: str) -> None:
    dataset = _dataset(tmp_path / "data", {"all": range(1)})
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "secret.png").write_bytes(digit_png(1))
    (dataset / "escape").symlink_to(tmp_path / "secret", target_is_directory=True)
    (tmp_path / "list.csv").write_text(listing)
    root = tmp_path / "project"
    root.mkdir()
    code, out, err = _index(
        capsys, str(dataset), "--list", str(tmp_path / "list.csv"), "--root", str(root), "--split-id", "bad"
    )
    assert code == 2 and out == ""
    assert err.startswith("runaudit index-splits: error: ") and expected in err
    assert len(err.strip().splitlines()) == 1
    assert not (root / "_trust" / "splits" / "bad.parquet").exists()


def test_unknown_split_folder_symlink_escape_and_overwrite_are_refused(tmp_path: Path, capsys) -> None:
    root = tmp_path / "project"
    root.mkdir()
    odd = _dataset(tmp_path / "odd", {"train": range(1), "extra": range(1, 2)})
    code, _, err = _index(capsys, str(odd), "--root", str(root), "--split-id", "odd")
    assert code == 2 and "split 'extra' is not train, val or test" in err

    escaping = _dataset(tmp_path / "escaping", {"train": range(1)})
    (tmp_path / "elsewhere").mkdir()
    (escaping / "test").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    code, _, err = _index(capsys, str(escaping), "--root", str(root), "--split-id", "escaping")
    assert code == 2 and "outside the dataset" in err

    good = _dataset(tmp_path / "good", {"train": range(1), "test": range(1, 2)})
    assert _index(capsys, str(good), "--root", str(root), "--split-id", "once")[0] == 0
    before = (root / "_trust" / "splits" / "once.parquet").read_bytes()
    code, _, err = _index(capsys, str(good), "--root", str(root), "--split-id", "once")
    assert code == 2 and "never overwritten" in err
    assert (root / "_trust" / "splits" / "once.parquet").read_bytes() == before
