"""The preflight readers and rules against recorded real nvidia-smi output and real-shaped kernel files."""

from __future__ import annotations

import csv
import io
import subprocess
import time
from pathlib import Path

import pytest

from runaudit import gpu, host

RECORDED = Path(__file__).parent / "recorded" / "nvidia-smi"
H100_LOAD_PIDS = {11327: "S", 11328: "S", 11345: "R"}  # memhog, memhog, gpu_burn in the recorded load


def recorded(name: str) -> str:
    return (RECORDED / name).read_text(encoding="utf-8")


def with_cell(text: str, field: str, value: str) -> str:
    """The recorded CSV with one cell of the first GPU row replaced."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    column = [name.split(" [")[0] for name in rows[0]].index(field)
    rows[1][column] = value
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def test_the_recorded_h100_parses_by_header_with_units_stripped() -> None:
    gpus = gpu.parse_csv(recorded("h100-load-query-gpu.csv"))
    assert len(gpus) == 1
    row = gpus[0]
    assert row["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu.number(row["memory.total"]) == 81559 and gpu.number(row["memory.used"]) == 19818
    assert gpu.number(row["ecc.errors.uncorrected.volatile.total"]) == 0
    assert gpu.number(row["retired_pages.pending"]) is None  # "[N/A]" is not a number
    apps = gpu.parse_csv(recorded("h100-load-compute-apps.csv"))
    assert [int(app["pid"]) for app in apps] == [11327, 11328, 11345]
    assert sum(gpu.number(app["used_gpu_memory"]) for app in apps) == 19798


@pytest.mark.parametrize(
    ("query", "apps", "pids"),
    [
        ("h100-idle-query-gpu.csv", "h100-idle-compute-apps.csv", {}),
        ("h100-load-query-gpu.csv", "h100-load-compute-apps.csv", H100_LOAD_PIDS),
        ("rtx2080-idle-query-gpu.csv", "rtx2080-idle-compute-apps.csv", {}),  # 214 MiB of desktop use
        ("rtx4080-load-query-gpu.csv", "rtx4080-load-compute-apps.csv", {2165: "S", 5021: "R", 5022: "R"}),
    ],
)
def test_healthy_recorded_gpus_pass(query: str, apps: str, pids: dict[int, str]) -> None:
    health = gpu.judge(gpu.parse_csv(recorded(query)), gpu.parse_csv(recorded(apps)), pids)
    assert health.problems == []


def test_a_zombie_process_holding_vram_fails() -> None:
    gpus = gpu.parse_csv(recorded("h100-load-query-gpu.csv"))
    apps = gpu.parse_csv(recorded("h100-load-compute-apps.csv"))
    health = gpu.judge(gpus, apps, {**H100_LOAD_PIDS, 11345: "Z"})
    assert health.problems == [
        "GPU 0 (NVIDIA H100 80GB HBM3): zombie process 11345 (./gpu_burn) still holds 15690 MiB of VRAM"
    ]


def test_a_vram_holder_missing_from_the_process_table_fails() -> None:
    gpus = gpu.parse_csv(recorded("h100-load-query-gpu.csv"))
    apps = gpu.parse_csv(recorded("h100-load-compute-apps.csv"))
    health = gpu.judge(gpus, apps, {11327: "S", 11328: "S"})
    assert len(health.problems) == 1 and "pid 11345 (./gpu_burn) holds 15690 MiB" in health.problems[0]


def test_vram_held_by_no_listed_process_fails() -> None:
    """The recorded load row (19818 MiB used) read with the idle compute-apps list (nobody listed)."""
    gpus = gpu.parse_csv(recorded("h100-load-query-gpu.csv"))
    health = gpu.judge(gpus, gpu.parse_csv(recorded("h100-idle-compute-apps.csv")), {})
    assert (
        len(health.problems) == 1
        and "19818 MiB of VRAM in use that no listed process accounts for" in health.problems[0]
    )


def test_an_uncorrectable_ecc_error_and_pending_remaps_fail() -> None:
    # No public capture of a failing card exists: the real idle H100 row with its counters raised.
    text = with_cell(recorded("h100-idle-query-gpu.csv"), "ecc.errors.uncorrected.volatile.total", "3")
    text = with_cell(text, "remapped_rows.pending", "Yes")
    health = gpu.judge(gpu.parse_csv(text), [], {})
    assert health.problems == [
        "GPU 0 (NVIDIA H100 80GB HBM3): 3 uncorrectable ECC error(s) since the driver loaded",
        "GPU 0 (NVIDIA H100 80GB HBM3): remapped_rows.pending = Yes (memory awaits retirement: reset the GPU or reboot first)",
    ]


def test_an_active_hardware_slowdown_and_a_hot_crushed_clock_fail() -> None:
    text = with_cell(
        recorded("h100-load-query-gpu.csv"), "clocks_event_reasons.hw_thermal_slowdown", "Active"
    )
    text = with_cell(text, "temperature.gpu", "88")
    text = with_cell(text, "clocks.current.sm", "1100 MHz")
    problems = gpu.judge(
        gpu.parse_csv(text), gpu.parse_csv(recorded("h100-load-compute-apps.csv")), H100_LOAD_PIDS
    ).problems
    assert "held down by hw_thermal_slowdown" in problems[0]
    assert "88 °C with the SM clock at 1100 of 1980 MHz" in problems[1]


def test_the_driver_cuda_version_reads_from_both_recorded_formats() -> None:
    assert host.driver_cuda_version(recorded("h100-version.txt")) == "13.1"
    assert host.driver_cuda_version(recorded("h100-idle-table.txt")) == "13.1"
    assert host.version_tuple("12.4") < host.version_tuple("13.1")


def _cgroup_tree(tmp_path: Path, cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "meminfo").write_text("MemTotal:       65536000 kB\nMemFree:        1000 kB\n")
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return proc, root


def test_cgroup_v2_takes_the_tightest_limit_up_the_tree(tmp_path: Path) -> None:
    proc, root = _cgroup_tree(
        tmp_path,
        "0::/job/step\n",
        {
            "job/memory.max": "8589934592\n",
            "job/step/memory.max": "max\n",
            "job/step/memory.current": "1073741824\n",
            "job/step/memory.events": "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n",
        },
    )
    limit = host.memory_limit(proc, root)
    assert (limit.limit_bytes, limit.usage_bytes, limit.oom_kills) == (8 << 30, 1 << 30, 1)
    assert limit.source.endswith("job/memory.max")


def test_cgroup_v1_no_limit_falls_back_to_memtotal(tmp_path: Path) -> None:
    proc, root = _cgroup_tree(
        tmp_path,
        "4:memory:/docker/abc\n0::/\n",
        {
            "memory/memory.limit_in_bytes": "9223372036854771712\n",
            "memory/memory.usage_in_bytes": "2259718144\n",
            "memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        },
    )
    limit = host.memory_limit(proc, root)
    assert limit.limit_bytes is None and limit.effective_bytes == 65536000 * 1024
    assert limit.usage_bytes == 2259718144 and limit.oom_kills == 0


def test_the_process_table_sees_a_real_zombie(tmp_path: Path) -> None:
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while host.process_states().get(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert host.process_states()[child.pid] == "Z"  # exited, not yet reaped
    finally:
        child.wait()
    assert child.pid not in host.process_states()


def test_conda_base_and_project_envs_are_told_apart(tmp_path: Path) -> None:
    base = tmp_path / "miniconda3"
    (base / "conda-meta").mkdir(parents=True)
    named = base / "envs" / "proj"
    (named / "conda-meta").mkdir(parents=True)
    assert host.in_conda_base({}, str(base))
    assert not host.in_conda_base({}, str(named))
    assert host.in_conda_base({"CONDA_DEFAULT_ENV": "base"}, str(named))
    assert host.in_project_env(str(named), str(base)) and not host.in_project_env("/usr", "/usr")
