"""What a real H200 box gave (tests/recorded/h200, captured by capture.py there), read on the CPU-only auditor.

nvidia-smi's answers to the exact queries ``runaudit.gpu`` sends, idle and under a training load, must pass
the health rules on a healthy card; checkpoints written from CUDA tensors (float32 and bfloat16,
``torch.save`` and safetensors) must load with ``weights_only=True`` on a machine that has no GPU, and a
NaN planted in their bytes must still be found.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from runaudit import gpu
from runaudit.checkpoints import inspect

RECORDED = Path(__file__).parent / "recorded" / "h200"
CAPTURE = json.loads((RECORDED / "capture.json").read_text())
CHECKPOINTS = ("cuda-float32.pth", "cuda-bfloat16.pth", "cuda-float32.safetensors")


def _process_table(name: str) -> dict[int, str]:
    """``ps -eo pid,stat,comm`` as captured beside the nvidia-smi reading: pid -> its state letter."""
    rows = (RECORDED / name).read_text().splitlines()[1:]
    return {int(row.split()[0]): row.split()[1][0] for row in rows}


@pytest.mark.parametrize("state", ["idle", "load"])
def test_the_recorded_h200_is_healthy_idle_and_under_a_training_load(state: str) -> None:
    gpus = gpu.parse_csv((RECORDED / f"h200-{state}-query-gpu.csv").read_text())
    apps = gpu.parse_csv((RECORDED / f"h200-{state}-compute-apps.csv").read_text())
    assert [row["name"] for row in gpus] == ["NVIDIA H200"]
    assert bool(apps) == (state == "load")  # the training process is listed only while it runs
    health = gpu.judge(gpus, apps, _process_table(f"h200-{state}-ps.txt"))
    assert health.problems == []
    evidence = health.evidence["0"]
    assert evidence["memory_used_mib"] == gpu.number(gpus[0]["memory.used"])
    assert evidence["listed_processes_mib"] == sum(gpu.number(app["used_gpu_memory"]) or 0 for app in apps)


def test_the_recorded_load_fails_once_its_training_process_is_gone() -> None:
    """The same reading judged against a process table without the trainer: its VRAM has no live holder."""
    gpus = gpu.parse_csv((RECORDED / "h200-load-query-gpu.csv").read_text())
    apps = gpu.parse_csv((RECORDED / "h200-load-compute-apps.csv").read_text())
    (holder,) = (int(app["pid"]) for app in apps)
    table = _process_table("h200-load-ps.txt")
    del table[holder]
    (problem,) = gpu.judge(gpus, apps, table).problems
    assert f"pid {holder}" in problem and "not a live process here" in problem


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_checkpoints_written_from_cuda_tensors_load_safely_on_a_cpu_machine(name: str) -> None:
    inspection = inspect(RECORDED / name)
    tensors = CAPTURE["tensors"]
    assert inspection.tensors == len(tensors)
    assert inspection.numel == sum(math.prod(shape) for _, shape, _ in tensors.values())
    assert inspection.nonfinite == []
    assert not inspection.unsafe_load
    if name.endswith(".pth"):
        assert inspection.weights_key == "model" and inspection.meta["step"] == CAPTURE["steps"]
    assert all(device.startswith("cuda") for _, _, device in tensors.values())


def test_a_nan_planted_in_a_cuda_bfloat16_checkpoint_is_found(tmp_path: Path) -> None:
    """One bfloat16 NaN (0x7FC0) written over the first value of the largest stored tensor, in place, with
    the record's CRC-32 written to match, as ``torch.save`` writes a NaN a run produced: the archive keeps
    its layout. (A NaN written after the save fails its CRC-32 first: tests/test_custody_audits.py.)"""
    source = RECORDED / "cuda-bfloat16.pth"
    raw = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as archive:
        entry = max(
            (info for info in archive.infolist() if "/data/" in info.filename), key=lambda i: i.file_size
        )
    name_length, extra_length = struct.unpack_from("<HH", raw, entry.header_offset + 26)
    start = entry.header_offset + 30 + name_length + extra_length
    raw[start : start + 2] = struct.pack("<H", 0x7FC0)
    crc = struct.pack("<I", zlib.crc32(raw[start : start + entry.file_size]))
    raw[entry.header_offset + 14 : entry.header_offset + 18] = crc  # the local header's CRC-32
    central = raw.index(b"PK\x01\x02", start + entry.file_size)  # the directory follows every record
    while raw[central + 46 : central + 46 + len(entry.filename)] != entry.filename.encode():
        central = raw.index(b"PK\x01\x02", central + 4)
    raw[central + 16 : central + 20] = crc  # and its central entry's
    damaged = tmp_path / source.name
    damaged.write_bytes(bytes(raw))
    inspection = inspect(damaged)
    assert inspection.tensors == len(CAPTURE["tensors"]) and len(inspection.nonfinite) == 1
