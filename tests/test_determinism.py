"""Determinism audits: what the demo's run.json claims against what it records."""

from __future__ import annotations

from pathlib import Path

from science_support import edit_config, edit_json, verdict

DETERMINISM = ("-m", "science", "-k", "test_determinism")


def test_unrecorded_seed_benchmark_kernels_and_unseeded_workers(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    def claim(run: dict) -> None:
        run["seed"].update(values=[], cudnn_benchmark=True, worker_seeding=False)
        run["source"].update(dirty=True)

    edit_json(capsule_dir / "run.json", claim)
    outcome = run_audits(capsule_dir, project, *DETERMINISM)
    assert verdict(outcome, "determinism.seeds_recorded")["verdict"] == "disclosed"
    flags = verdict(outcome, "determinism.flags")
    assert (
        flags["verdict"] == "disclosed"
        and "cudnn.benchmark is True although the run claims determinism" in flags["message"]
    )
    achieved = verdict(outcome, "determinism.declared_vs_achieved")
    assert achieved["verdict"] == "disclosed"
    assert (
        "workers are not seeded" not in achieved["message"]
    )  # no seed recorded: nothing to reach the workers
    assert "the source tree was dirty" in achieved["message"]
    assert achieved["affects"] == ["run:reproducibility"]


def test_unseeded_workers_and_a_cuda_run_without_a_cublas_workspace(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    def claim(run: dict) -> None:
        run["seed"].update(worker_seeding=False)
        run["environment"].update(cuda="12.4", gpu="NVIDIA H100", gpu_count=1)
        run["source"].update(dirty=False)

    edit_json(capsule_dir / "run.json", claim)
    outcome = run_audits(capsule_dir, project, *DETERMINISM)
    flags = verdict(outcome, "determinism.flags")
    assert flags["verdict"] == "disclosed" and "CUBLAS_WORKSPACE_CONFIG=None" in flags["message"]
    achieved = verdict(outcome, "determinism.declared_vs_achieved")
    assert achieved["verdict"] == "disclosed" and "workers are not seeded" in achieved["message"]

    edit_config(capsule_dir, lambda config: config.update(env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}))
    outcome = run_audits(capsule_dir, project, *DETERMINISM, report_stem="demo")
    flags = verdict(outcome, "determinism.flags")
    assert flags["verdict"] == "passed" and flags["evidence"]["cublas_workspace"] == ":4096:8"
