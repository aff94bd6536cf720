"""docs/ci/: the GitHub Actions workflow and the GitLab CI job run their gate commands here, on the demo's
pull, as the CI runner would: they pass a good pull with the answer yes, publish the report and the JUnit
XML, and stop at the first failing command when a checkpoint byte changed after the pull.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from runaudit.examples.digits.build import DEMO_RUN_ID

CI = Path(__file__).resolve().parent.parent / "docs" / "ci"
INSTALL = "pip install"  # the install step needs the network and is the runner's business, not the gate's


def github_commands() -> list[str]:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    steps = workflow["jobs"]["gate"]["steps"]
    return [step["run"] for step in steps if "run" in step and INSTALL not in step["run"]]


def gitlab_commands() -> list[str]:
    job = yaml.safe_load((CI / "gitlab-ci.yml").read_text())["runaudit-gate"]
    assert all(INSTALL in line for line in job["before_script"])
    return list(job["script"])


def run_job(commands: list[str], project: Path, workspace: Path) -> list[subprocess.CompletedProcess[str]]:
    """Each command in a shell, in order, stopping at the first that fails (as both CIs do)."""
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "RUNAUDIT_ROOT": str(project),
        "RUN_ID": DEMO_RUN_ID,
        "PULL_ID": DEMO_RUN_ID,
        "REPORT_DIR": "runaudit-report",
        # The demo's run id brings the demo's own adapter along, whose smoke gate trains and seals a capsule
        # of its own (seconds); a user's run has no adapter unless the job loads one.
        "PYTEST_ADDOPTS": "-m 'not smoke'",
    }
    done = []
    for command in commands:
        shell = (
            command.replace("python ", f"{sys.executable} ", 1) if command.startswith("python ") else command
        )
        done.append(
            subprocess.run(["bash", "-c", shell], cwd=workspace, env=env, capture_output=True, text=True)
        )
        if done[-1].returncode != 0:
            break
    return done


def test_both_ci_files_run_the_same_gate() -> None:
    assert gitlab_commands() == github_commands()  # so one run below proves both


@pytest.mark.slow
def test_the_ci_gate_passes_a_good_pull_and_publishes_its_report(project: Path, tmp_path: Path) -> None:
    done = run_job(github_commands(), project, tmp_path)
    assert [step.returncode for step in done] == [0, 0, 0], [
        step.stdout[-600:] + step.stderr[-600:] for step in done
    ]
    assert done[-1].stdout.startswith("safe to tear down? YES:")
    published = tmp_path / "runaudit-report"
    assert (published / f"{DEMO_RUN_ID}.html").is_file()
    suites = ElementTree.parse(published / "junit.xml").getroot()
    assert int(suites.iter("testsuite").__next__().get("tests", "0")) > 0


@pytest.mark.slow
def test_the_ci_gate_fails_when_a_checkpoint_changed_after_the_pull(project: Path, tmp_path: Path) -> None:
    checkpoint = project / "export" / DEMO_RUN_ID / "best.pth"
    data = bytearray(checkpoint.read_bytes())
    data[-100] ^= 0xFF
    checkpoint.write_bytes(bytes(data))
    done = run_job(github_commands(), project, tmp_path)
    assert len(done) == 1 and done[0].returncode == 1, done[0].stdout + done[0].stderr
