"""safetensors checkpoints in the custody gate: read without torch or pickle, bounded against hostile headers.

The files are written by the real ``safetensors`` library (what users produce), then damaged byte by byte
the way a hostile or broken producer would. The capsule is the sealed demo re-saved in safetensors and put
through the real chain: ``runaudit close`` (which must copy and bind the ``.safetensors`` files), the pull
manifest and ``runaudit verify``. Sessions run as users run them: ``pytest --run=<capsule> -m custody``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import save_file as save_torch

from runaudit import checkpoints
from runaudit.capsule import checkpoint_file, checkpoint_formats, classify, walk
from runaudit.checkpoints import WEIGHT_KEYS, CheckpointRefused, inspect
from runaudit.examples.digits.build import DEMO_RUN_ID

PULL_ID = "st-pull"


# -- bytes ----------------------------------------------------------------------------------------------


def split_file(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(header, buffer) of a safetensors file."""
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def join_file(header: dict[str, Any] | bytes, buffer: bytes, *, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return (len(raw) if length is None else length).to_bytes(8, "little") + raw + buffer


def by_offset(header: dict[str, Any]) -> list[str]:
    """The tensor names in buffer order."""
    return sorted(
        (name for name in header if name != "__metadata__"), key=lambda n: header[n]["data_offsets"]
    )


def _edit(change: Callable[[dict[str, Any], list[str]], None]) -> Callable[[bytes], bytes]:
    def attack(data: bytes) -> bytes:
        header, buffer = split_file(data)
        change(header, by_offset(header))
        return join_file(header, buffer)

    return attack


def _set(name_index: int, **fields: Any) -> Callable[[bytes], bytes]:
    return _edit(lambda header, names: header[names[name_index]].update(fields))


def _overlap(header: dict[str, Any], names: list[str]) -> None:
    """The second tensor starts 4 bytes early, inside the first (its length unchanged)."""
    begin, end = header[names[1]]["data_offsets"]
    header[names[1]]["data_offsets"] = [begin - 4, end - 4]


def _gap(data: bytes) -> bytes:
    """The last tensor moves 4 bytes later, leaving unclaimed bytes before it (the file grows to fit)."""
    header, buffer = split_file(data)
    last = by_offset(header)[-1]
    begin, end = header[last]["data_offsets"]
    header[last]["data_offsets"] = [begin + 4, end + 4]
    return join_file(header, buffer[:begin] + b"\0" * 4 + buffer[begin:])


def _duplicate_key(data: bytes) -> bytes:
    header, buffer = split_file(data)
    first = by_offset(header)[0]
    items = [*header.items(), (first, header[first])]
    raw = ("{" + ", ".join(f"{json.dumps(key)}: {json.dumps(value)}" for key, value in items) + "}").encode()
    return join_file(raw, buffer)


def _trailing_comma(data: bytes) -> bytes:
    header, buffer = split_file(data)
    return join_file(json.dumps(header)[:-1].encode() + b",}", buffer)


def _not_utf8(data: bytes) -> bytes:
    header, buffer = split_file(data)
    raw = json.dumps(header).encode()
    first = by_offset(header)[0].encode()
    return join_file(raw.replace(b'"' + first + b'"', b'"' + first + b'\xff"', 1), buffer)


# Every attack: the damage, and a fragment of the one line that must refuse it.
ATTACKS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "header-length-past-cap": (
        lambda data: (1 << 62).to_bytes(8, "little") + data[8:],
        "past the 100000000-byte cap",
    ),
    "header-length-past-file": (
        lambda data: len(data).to_bytes(8, "little") + data[8:],
        "runs past the file",
    ),
    "duplicate-key": (_duplicate_key, "duplicate key"),
    "trailing-comma": (_trailing_comma, "not strict UTF-8 JSON"),
    "not-utf8": (_not_utf8, "not strict UTF-8 JSON"),
    # "\ud800" escapes name a lone surrogate: valid to Python's json, refused by the safetensors library.
    "lone-surrogate-name": (
        _edit(lambda header, names: header.__setitem__("\ud800x", header.pop(names[0]))),
        "not strict UTF-8 JSON",
    ),
    "lone-surrogate-metadata": (
        _edit(lambda header, names: header.update(__metadata__={"format": "pt\udfff"})),
        "not strict UTF-8 JSON",
    ),
    # Zero-size tensors tile nothing: within the header cap ~1.5M of them passed, one session 18.8 s.
    "zero-size-tensors-past-cap": (
        _edit(
            lambda header, names: header.update(
                {
                    f"z{index}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                    for index in range(checkpoints.SAFETENSORS_TENSORS_CAP)
                }
            )
        ),
        "tensors; expected at most",
    ),
    "unknown-dtype": (_set(0, dtype="F128"), "unknown dtype 'F128'"),
    "negative-shape": (_set(0, shape=[-1, 4]), "expected a shape of non-negative integers, found [-1, 4]"),
    "non-int-shape": (_set(0, shape=[2.5]), "expected a shape of non-negative integers, found [2.5]"),
    "bool-offsets": (_set(0, data_offsets=[False, True]), "expected data_offsets [begin, end]"),
    "extra-field": (_set(0, quantized=True), "expected an object of exactly dtype, shape and data_offsets"),
    "size-mismatch": (_edit(lambda header, names: header[names[0]]["shape"].append(2)), "needs"),
    "overlap": (_edit(_overlap), "overlaps"),
    "gap": (_gap, "unclaimed byte(s)"),
    "past-buffer": (lambda data: data[:-4], "run past the"),
    "trailing-bytes": (lambda data: data + b"\0" * 8, "trailing byte(s)"),
    "metadata-not-strings": (
        _edit(lambda header, names: header.update(__metadata__={"epoch": 3})),
        "expected __metadata__ to map strings to strings",
    ),
    "not-an-object": (
        lambda data: join_file(b"[1, 2]", b""),
        "expected the safetensors header to be a JSON object",
    ),
    "shorter-than-length": (lambda data: data[:5], "expected a safetensors file"),
    # Counts past any float: formatting their size as one raised OverflowError, three error verdicts.
    "dims-past-int64": (_set(0, shape=[10**200, 10**200]), "expected a shape of at most"),
    "bytes-past-float": (_set(0, shape=[1 << 62] * 17), "-digit number of bytes"),
    # Products of bignums: 6000 dimensions of 10**300 took 55 s to refuse; past the cap none is multiplied.
    "dims-past-the-cap": (
        _set(0, shape=[10**300] * (checkpoints.SAFETENSORS_MAX_DIMS + 1)),
        f"expected a shape of at most {checkpoints.SAFETENSORS_MAX_DIMS} dimensions",
    ),
    "ones-past-the-cap": (
        _edit(lambda header, names: header[names[0]]["shape"].extend([1] * checkpoints.SAFETENSORS_MAX_DIMS)),
        f"expected a shape of at most {checkpoints.SAFETENSORS_MAX_DIMS} dimensions",
    ),
}


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """Two float32 tensors and one int64, written by the library, with metadata."""
    path = tmp_path / "small.safetensors"
    tensors = {
        "a": np.arange(4, dtype=np.float32),
        "b": np.ones((2, 2), dtype=np.float32),
        "c": np.arange(3, dtype=np.int64),
    }
    save_numpy(tensors, str(path), metadata={"format": "np"})
    return path


# -- the reader, on files the library writes --------------------------------------------------------------


def test_reads_what_the_library_writes(small: Path) -> None:
    found = inspect(small)
    assert (found.format, found.tensors, found.numel, found.nonfinite) == ("safetensors", 3, 11, [])
    assert found.top_keys == ["a", "b", "c"] and found.weights_key == ""
    with safe_open(str(small), framework="np") as reference:
        assert found.metadata == reference.metadata() == {"format": "np"}


FLOATS = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz,
    "float8_e5m2fnuz": torch.float8_e5m2fnuz,
    "complex64": torch.complex64,
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -math.inf], ids=["finite", "nan", "inf", "-inf"])
def test_finiteness_from_the_bits_matches_torch(tmp_path: Path, dtype: str, bad: float | None) -> None:
    values = torch.linspace(-3, 3, 37, dtype=torch.float32)
    if bad is not None:
        values[17] = bad
    tensor = values.to(FLOATS[dtype])  # formats without inf turn it into NaN, as torch casts it
    path = tmp_path / "w.safetensors"
    save_torch({"clean": torch.zeros(5, dtype=FLOATS[dtype]), "w": tensor}, str(path))
    wide = tensor if tensor.is_complex() else tensor.to(torch.float32)
    expected = [] if bool(torch.isfinite(wide).all()) else ["w"]
    assert inspect(path).nonfinite == expected
    if bad is not None and math.isnan(bad):
        assert expected == ["w"]


def test_nonfinite_past_the_first_chunk_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints, "SCAN_BYTES", 4096)
    weights = torch.zeros(10_000, dtype=torch.bfloat16)
    weights[-1] = math.nan
    path = tmp_path / "big.safetensors"
    save_torch({"w": weights, "z": torch.zeros(3)}, str(path))
    assert inspect(path).nonfinite == ["w"]


def test_sub_byte_and_empty_tensors_are_sized_exactly(tmp_path: Path) -> None:
    path = tmp_path / "odd.safetensors"
    header = {
        "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
        "f4": {"dtype": "F4", "shape": [6], "data_offsets": [0, 3]},
        "f6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [3, 6]},
    }
    path.write_bytes(join_file(header, b"\x11" * 6))
    found = inspect(path)
    assert (found.tensors, found.numel, found.nonfinite) == (3, 10, [])
    header["f6"]["shape"] = [3]  # 18 bits: not a whole number of bytes
    path.write_bytes(join_file(header, b"\x11" * 6))
    with pytest.raises(CheckpointRefused, match="needs 2.25"):
        inspect(path)


def test_float8_e8m0_nan_is_its_all_ones_byte(tmp_path: Path) -> None:
    path = tmp_path / "scales.safetensors"
    header = {"s": {"dtype": "F8_E8M0", "shape": [3], "data_offsets": [0, 3]}}
    path.write_bytes(join_file(header, bytes([0x7F, 0x00, 0xFE])))
    assert inspect(path).nonfinite == []
    path.write_bytes(join_file(header, bytes([0x7F, 0xFF, 0xFE])))
    assert inspect(path).nonfinite == ["s"]


def test_one_helper_names_the_checkpoint_of_each_role(tmp_path: Path) -> None:
    assert checkpoint_file("best", tmp_path).name == "best.pth"  # absent: the default name
    assert checkpoint_file("best", tmp_path).alternatives == "best.pth or best.safetensors"
    (tmp_path / "best.safetensors").write_bytes(b"")
    (tmp_path / "last.pth").write_bytes(b"")
    best, last = checkpoint_file("best", tmp_path), checkpoint_file("last", tmp_path)
    assert (best.name, best.format, last.name, last.format) == (
        "best.safetensors",
        "safetensors",
        "last.pth",
        "pth",
    )
    assert checkpoint_formats(tmp_path) == {"safetensors", "pth"}
    (tmp_path / "best.pth").write_bytes(b"")
    assert (
        checkpoint_file("best", tmp_path).ambiguous and checkpoint_file("best", tmp_path).name == "best.pth"
    )
    inventory = classify(walk(tmp_path), kind="software", declared_tests=[])
    assert [checkpoint.found for checkpoint in inventory.ambiguous] == [("best.pth", "best.safetensors")]
    assert inventory.stray == ()


@pytest.mark.parametrize("attack", ATTACKS)
def test_hostile_header_is_refused_in_one_line(small: Path, attack: str) -> None:
    damage, expected = ATTACKS[attack]
    small.write_bytes(damage(small.read_bytes()))
    with pytest.raises(CheckpointRefused) as refused:
        inspect(small)
    message = str(refused.value)
    assert expected in message and message.startswith("small.safetensors")
    assert "\n" not in message


def test_a_safetensors_name_is_never_unpickled(tmp_path: Path) -> None:
    """A torch pickle renamed .safetensors is refused as a header, never handed to torch.load."""
    path = tmp_path / "best.safetensors"
    torch.save({"w": torch.ones(3)}, path)
    with pytest.raises(CheckpointRefused, match="header length"):
        inspect(path, allow_pickle=True)


# -- the capsule ------------------------------------------------------------------------------------------


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _weights(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return next((state[key] for key in WEIGHT_KEYS if isinstance(state.get(key), dict)), state)


@pytest.fixture(scope="module")
def safetensors_project(demo_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo re-saved as best.safetensors (float32) and last.safetensors (bfloat16), then closed by
    ``runaudit close``, listed in a pull manifest and verified: a sealed safetensors capsule with a receipt.
    """
    from runaudit.runners.close import close_run
    from runaudit.runners.custody import write_receipt
    from runaudit.runners.manifest import build_manifest

    root = tmp_path_factory.mktemp("safetensors") / "project"
    root.mkdir()
    shutil.copytree(demo_project / "_trust" / "selections", root / "_trust" / "selections")
    shutil.copytree(demo_project / "_trust" / "splits", root / "_trust" / "splits")
    sealed = demo_project / "export" / DEMO_RUN_ID
    active = root / "active" / DEMO_RUN_ID
    active.mkdir(parents=True)
    for name in ("config.yaml", "train.csv"):
        shutil.copy2(sealed / name, active / name)
    shutil.copytree(sealed / "test", active / "test")
    declared = json.loads((sealed / "run.json").read_text())
    for key in ("state", "closed_utc"):
        declared.pop(key, None)
    best = declared["checkpoints"]["best"]
    for role in ("best", "last"):
        declared["checkpoints"][role].pop("sha256")  # close binds the bytes it seals
    save_torch(
        _weights(torch.load(sealed / "best.pth", weights_only=True)),
        str(active / "best.safetensors"),
        metadata={"format": "pt", "epoch": str(best["epoch"]), "step": str(best["step"])},
    )
    last = {
        k: v.to(torch.bfloat16)
        for k, v in _weights(torch.load(sealed / "last.pth", weights_only=True)).items()
    }
    save_torch(last, str(active / "last.safetensors"))
    for metrics in (active / "test").glob("*/metrics.json"):
        document = json.loads(metrics.read_text())
        document["checkpoint_sha256"] = _sha(active / "best.safetensors")
        metrics.write_text(json.dumps(document, indent=2))
    (active / "run.json").write_text(json.dumps(declared, indent=2))

    result = close_run(root, DEMO_RUN_ID)
    assert result.sealed, result.reason
    build_manifest(root, [DEMO_RUN_ID], PULL_ID, log=lambda line: None)
    verification = write_receipt(root, PULL_ID, log=lambda line: None)
    assert verification.ok, verification.problems
    return root


@pytest.fixture
def project(safetensors_project: Path, tmp_path: Path) -> Path:
    """A private copy of the safetensors project, free to damage."""
    copy = tmp_path / "project"
    shutil.copytree(
        safetensors_project, copy, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports")
    )
    return copy


@pytest.fixture
def capsule_dir(project: Path) -> Path:
    return project / "export" / DEMO_RUN_ID


def _rebind(capsule: Path, name: str, data: bytes) -> None:
    """Write ``name`` and bind run.json to it (a consistent producer, so only the bytes' content is judged)."""
    (capsule / name).write_bytes(data)
    document = json.loads((capsule / "run.json").read_text())
    document["checkpoints"][name.split(".")[0]]["sha256"] = hashlib.sha256(data).hexdigest()
    (capsule / "run.json").write_text(json.dumps(document, indent=2))


def _failed(outcome: Any, gate: str) -> set[str]:
    return {audit for audit in outcome.verdicts("failed") if audit.startswith(gate)}


def _of(outcome: Any, audit: str, subject: str) -> dict[str, Any]:
    [item] = [item for item in outcome.find(audit) if item["subject"] == subject]
    return item


SESSION = pytest.mark.slow  # whole audit sessions on a closed, verified project: not the inner loop


@SESSION
def test_close_copies_and_binds_the_safetensors_files(safetensors_project: Path) -> None:
    capsule = safetensors_project / "export" / DEMO_RUN_ID
    assert sorted(path.name for path in capsule.glob("*.safetensors")) == [
        "best.safetensors",
        "last.safetensors",
    ]
    assert not list(capsule.glob("*.pth"))
    bound = json.loads((capsule / "run.json").read_text())["checkpoints"]
    assert bound["best"]["sha256"] == _sha(capsule / "best.safetensors")
    assert bound["last"]["sha256"] == _sha(capsule / "last.safetensors")


# Runs one pytest session in a fresh interpreter (this one imported torch long ago), then reports whether
# the session imported torch and whether it ran an audit that reads the safetensors files at all.
PROBE = """
import sys
import pytest
code = pytest.main(sys.argv[1:])
print("PROBE", int(code), "torch" in sys.modules, "runaudit.checkpoints" in sys.modules)
"""


@SESSION
def test_custody_gate_passes_without_importing_torch(safetensors_project: Path, tmp_path: Path) -> None:
    capsule = safetensors_project / "export" / DEMO_RUN_ID
    done = subprocess.run(
        [
            *(sys.executable, "-c", PROBE, "-p", "runaudit.fixtures.plugin", "-p", "no:cacheprovider", "-q"),
            *("--run", str(capsule), "--root", str(safetensors_project), "--report-dir", str(tmp_path)),
            *("-m", "custody"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    probe = next((line for line in done.stdout.splitlines() if line.startswith("PROBE ")), output[-3000:])
    assert probe == "PROBE 0 False True", output[-3000:]  # the gate passed, read the checkpoints, no torch
    report = json.loads((tmp_path / f"{DEMO_RUN_ID}.json").read_text())
    assert report["custody_ok"] is True
    verdicts = {(item["audit"], item["subject"]): item for item in report["verdicts"]}
    for role in ("best", "last"):
        safe_load = verdicts[("checkpoint.safe_load", f"{role}.safetensors")]
        assert safe_load["verdict"] == "passed" and safe_load["evidence"]["format"] == "safetensors"
        assert verdicts[("checkpoint.finite", f"{role}.safetensors")]["verdict"] == "passed"
    assert verdicts[("checkpoint.safe_load", "best.safetensors")]["evidence"]["metadata"]["format"] == "pt"
    selection = verdicts[("checkpoint.selection", "best.safetensors")]
    assert selection["verdict"] == "passed" and selection["evidence"]["lineage_from"] == "run.json"
    assert verdicts[("capsule.required_paths", "best.safetensors")]["verdict"] == "passed"


@SESSION
def test_resume_state_is_not_applicable_to_safetensors(run_audits, capsule_dir: Path, project: Path) -> None:
    outcome = run_audits(capsule_dir, project, "-k", "resume_state")
    item = _of(outcome, "checkpoint.resume_state", "last.safetensors")
    assert item["verdict"] == "not_applicable" and "weights only" in item["message"]


# Every attack is refused by the reader above; whole sessions (seconds each) carry one of each kind through
# the gate to its verdict and report: a header past its bounds, a header that is not strict JSON, and a
# tensor table that does not tile the buffer.
SESSION_ATTACKS = ("header-length-past-file", "duplicate-key", "overlap", "dims-past-int64")


@SESSION
@pytest.mark.parametrize("attack", SESSION_ATTACKS)
def test_hostile_header_fails_safe_load_and_the_report_is_written(
    run_audits, capsule_dir: Path, project: Path, attack: str
) -> None:
    damage, expected = ATTACKS[attack]
    _rebind(capsule_dir, "best.safetensors", damage((capsule_dir / "best.safetensors").read_bytes()))
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert outcome.report is not None, outcome.result.stdout.str()[-3000:]
    assert _failed(outcome, "checkpoint.") == {"checkpoint.safe_load"}
    item = _of(outcome, "checkpoint.safe_load", "best.safetensors")
    assert item["message"].startswith(f"run {DEMO_RUN_ID}: best.safetensors") and expected in item["message"]
    assert "\n" not in item["message"]
    for audit in ("checkpoint.tensors", "checkpoint.finite", "checkpoint.selection"):
        assert _of(outcome, audit, "best.safetensors")["verdict"] == "not_run"


@SESSION
def test_a_checkpoint_whose_reader_crashes_is_read_once(
    run_audits: Callable[..., Any], capsule_dir: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that raises other than CheckpointRefused (an OverflowError did, after 18 s of math.prod on a
    hostile shape) reads the file once: each audit that asks gets the same error, not another read."""
    read = []

    def crashing(path: Path, *, allow_pickle: bool = False) -> Any:
        read.append(path.name)
        raise OverflowError("integer division result too large for a float")

    monkeypatch.setattr(checkpoints, "inspect", crashing)
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint", "--fresh-hashes")  # no cached inspection
    assert read.count("best.safetensors") == 1, read
    for audit in ("checkpoint.tensors", "checkpoint.finite", "checkpoint.selection"):
        item = _of(outcome, audit, "best.safetensors")
        assert item["verdict"] == "error" and "\n" not in item["message"], item


@SESSION
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_nan_weight_fails_finite(run_audits, capsule_dir: Path, project: Path, dtype: torch.dtype) -> None:
    path = capsule_dir / "best.safetensors"
    with safe_open(str(path), framework="pt") as reader:
        weights = {name: reader.get_tensor(name).to(dtype) for name in reader.keys()}  # noqa: SIM118
        metadata = reader.metadata()
    first = sorted(weights)[0]
    weights[first].view(-1)[3] = math.nan
    save_torch(weights, str(path), metadata=metadata)
    _rebind(capsule_dir, "best.safetensors", path.read_bytes())
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.finite"}
    item = _of(outcome, "checkpoint.finite", "best.safetensors")
    assert item["evidence"]["nonfinite"] == [first] and first in item["message"]


@SESSION
def test_swapped_checkpoint_fails_safe_load(run_audits, capsule_dir: Path, project: Path) -> None:
    shutil.copy2(capsule_dir / "last.safetensors", capsule_dir / "best.safetensors")
    outcome = run_audits(capsule_dir, project, "-m", "custody")
    assert "checkpoint.safe_load" in _failed(outcome, "checkpoint.")
    assert (
        "not the checkpoint this run declares"
        in _of(outcome, "checkpoint.safe_load", "best.safetensors")["message"]
    )
    assert outcome.report["custody_ok"] is False


@SESSION
def test_metadata_epoch_disagreeing_with_run_json_fails_selection(
    run_audits, capsule_dir: Path, project: Path
) -> None:
    path = capsule_dir / "best.safetensors"
    with safe_open(str(path), framework="pt") as reader:
        weights = {name: reader.get_tensor(name) for name in reader.keys()}  # noqa: SIM118
        metadata = reader.metadata()
    save_torch(weights, str(path), metadata={**metadata, "epoch": str(int(metadata["epoch"]) - 1)})
    _rebind(capsule_dir, "best.safetensors", path.read_bytes())
    outcome = run_audits(capsule_dir, project, "-k", "checkpoint")
    assert _failed(outcome, "checkpoint.") == {"checkpoint.selection"}
    assert "__metadata__ says epoch" in _of(outcome, "checkpoint.selection", "best.safetensors")["message"]


@SESSION
def test_both_formats_of_one_role_fail_closed_world_only(
    run_audits, capsule_dir: Path, project: Path, demo_project: Path
) -> None:
    shutil.copy2(demo_project / "export" / DEMO_RUN_ID / "best.pth", capsule_dir / "best.pth")
    outcome = run_audits(capsule_dir, project, "-m", "custody")
    assert _failed(outcome, "capsule.") == {"capsule.closed_world"}
    assert "best.pth and best.safetensors both present" in outcome.find("capsule.closed_world")[0]["message"]
    assert _failed(outcome, "checkpoint.") == set()
    for audit in ("checkpoint.safe_load", "checkpoint.finite"):
        item = _of(outcome, audit, "best.pth")
        assert item["verdict"] == "not_run" and "capsule.closed_world" in item["message"]
