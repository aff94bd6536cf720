"""Cluster sweeps: rendered sbatch scripts and Kubernetes Jobs pass bash and the structural rules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml
from starter_env import HOSTILE_PYTEST_ENV

from runaudit.cli import main
from runaudit.examples.digits.build import DEMO_RUN_ID
from runaudit.runners.cluster import (
    ClusterSpecError,
    Sweep,
    job_problems,
    render_job,
    render_sbatch,
    sbatch_problems,
)

ROSTER = ("seed0", "seed1", "seed2")
TRAIN = ("python", "-m", "runaudit.examples.digits", "produce", "--root", "{root}", "--run-id", "{run_id}")


def sweep(purpose: str, **changes: object) -> Sweep:
    values = {
        "name": "digits-seeds",
        "roster": ROSTER,
        "root": PurePosixPath("/scratch/me/proj"),
        "purpose": purpose,
        "command": TRAIN if purpose == "launch" else (),
        "gpus": 1 if purpose == "launch" else 0,
        "image": "ghcr.io/me/train@sha256:" + "0" * 64,
        "pvc": "proj-checkpoints",
    }
    return Sweep(**{**values, **changes})


@pytest.mark.parametrize("purpose", ["launch", "audit"])
def test_sbatch_scripts_are_valid_bash_with_one_task_per_run(purpose: str, tmp_path: Path) -> None:
    script = render_sbatch(sweep(purpose))
    assert "#SBATCH --array=0-2\n" in script and "RUN_IDS=(seed0 seed1 seed2)" in script
    if purpose == "launch":
        assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:TERM@120" in script
        assert '--run-id "$RUN_ID"' in script and "--root /scratch/me/proj" in script
    else:
        assert '--run "$RUN_ID"' in script and "-m custody" in script
    if shutil.which("bash"):
        path = tmp_path / "job.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def test_the_launch_task_expands_the_run_id_per_array_index(tmp_path: Path) -> None:
    """Run the rendered task body with srun replaced by echo: each index gets its own run id."""
    script = render_sbatch(sweep("launch", command=("echo", "train", "--run-id={run_id}")))
    body = script.replace('srun --cpus-per-task="$SLURM_CPUS_PER_TASK" ', "")
    path = tmp_path / "job.sh"
    path.write_text(body)
    for index, run_id in enumerate(ROSTER):
        done = subprocess.run(
            ["bash", str(path)],
            capture_output=True,
            text=True,
            env={"SLURM_ARRAY_TASK_ID": str(index), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0 and done.stdout.strip() == f"train --run-id={run_id}"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda s: s.replace("#SBATCH --array=0-2", "#SBATCH --array=0-5"), "--array: 0-5 covers 6 tasks"),
        (lambda s: s.replace("#SBATCH --requeue\n", ""), "--requeue: missing"),
        (
            lambda s: s.replace("B:TERM@120", "B:TERM@10"),
            "--signal: expected B:TERM@<seconds> with at least 60",
        ),
        (
            lambda s: s.replace("set -euo pipefail\n", "set -euo pipefail\n#SBATCH --mem=8G\n"),
            "#SBATCH after the first command",
        ),
        (lambda s: s.replace("\n", "\r\n"), "CR characters"),
        (lambda s: s.replace(" </dev/null", ""), "must not read stdin"),
    ],
)
def test_broken_sbatch_scripts_are_named(edit, problem: str) -> None:
    plan = sweep("launch")
    assert problem in " | ".join(sbatch_problems(edit(render_sbatch(plan)), plan))


@pytest.mark.parametrize("purpose", ["launch", "audit"])
def test_kubernetes_jobs_are_indexed_one_pod_per_run(purpose: str) -> None:
    plan = sweep(purpose)
    job = render_job(plan)
    text = yaml.safe_dump(job, sort_keys=False)
    assert yaml.safe_load(text) == job
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["backoffLimit"]) == ("Indexed", 3, 4)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "proj-checkpoints"
    container = pod["containers"][0]
    assert ("resources" in container) == (purpose == "launch")
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", "-c", container["command"][2]]).returncode == 0


def _break(job: dict, path: str, value: object) -> dict:
    node = job
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    node[keys[-1]] = value
    return job


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (
            "spec.template.spec.restartPolicy",
            "Always",
            "restartPolicy: 'Always'; a Job allows Never or OnFailure (K8S2)",
        ),
        ("spec.completions", 2, "spec.completions: 2, the roster has 3"),
        (
            "spec.template.spec.containers.0.resources",
            {"requests": {"nvidia.com/gpu": 1}},
            "nvidia.com/gpu belongs in limits",
        ),
        (
            "spec.template.spec.containers.0.resources",
            {"limits": {"nvidia.com/gpu": "1"}},
            "is not a positive integer",
        ),
        ("spec.template.spec.volumes", [{"name": "project", "emptyDir": {}}], "no persistentVolumeClaim"),
        ("metadata.name", "Digits_Seeds", "not a DNS-1123 label"),
    ],
)
def test_broken_jobs_are_named(path: str, value: object, problem: str) -> None:
    plan = sweep("launch")
    assert problem in " | ".join(job_problems(_break(render_job(plan), path, value), plan))


def test_a_launch_without_a_command_or_a_job_without_a_pvc_is_refused() -> None:
    with pytest.raises(ClusterSpecError, match="needs the training command"):
        render_sbatch(sweep("launch", command=()))
    with pytest.raises(ClusterSpecError, match="needs --pvc"):
        render_job(sweep("audit", pvc=""))


def test_the_cluster_verb_writes_a_checked_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    roster = tmp_path / "roster.txt"
    roster.write_text("# seeds\nseed0\nseed1\nseed2\n")
    out = tmp_path / "audit.sbatch"
    assert (
        main(
            [
                "cluster",
                "--scheduler",
                "slurm",
                "--purpose",
                "audit",
                "--roster",
                str(roster),
                "--root",
                "/scratch/me/proj",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "RUN_IDS=(seed0 seed1 seed2)" in out.read_text()
    assert (
        main(
            [
                "cluster",
                "--scheduler",
                "kubernetes",
                "--purpose",
                "launch",
                "--roster",
                str(roster),
                "--root",
                "/ckpt/proj",
                "--gpus",
                "1",
                "--image",
                "img@sha256:" + "1" * 64,
                "--pvc",
                "ckpt",
                "--",
                "python",
                "train.py",
                "--id",
                "{run_id}",
            ]
        )
        == 0
    )
    container = yaml.safe_load(capsys.readouterr().out)["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert 'exec python train.py --id "$RUN_ID" </dev/null' in container["command"][2]


def test_an_audit_task_ignores_the_pytest_settings_of_the_shell_that_submitted_it(
    project: Path, tmp_path: Path
) -> None:
    """sbatch exports the submitting shell's environment to every task by default: a ``PYTEST_ADDOPTS``
    kept there for the user's own tests made each audit task deselect every audit (or fail to start).
    The rendered task body runs here as a task would, with srun replaced by the command itself."""
    plan = sweep("audit", roster=(DEMO_RUN_ID,), root=PurePosixPath(project), python=sys.executable)
    body = render_sbatch(plan).replace('srun --cpus-per-task="$SLURM_CPUS_PER_TASK" ', "")
    path = tmp_path / "audit.sh"
    path.write_text(body)
    done = subprocess.run(
        ["bash", str(path)],
        capture_output=True,
        text=True,
        cwd=project,
        env={**os.environ, **HOSTILE_PYTEST_ENV, "SLURM_ARRAY_TASK_ID": "0"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((project / "reports" / f"{DEMO_RUN_ID}.json").read_text())
    assert report["teardown"]["answer"] == "yes", report["teardown"]
