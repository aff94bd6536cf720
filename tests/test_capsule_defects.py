"""Every capsule.* audit fails on a seeded defect, alone: one defect is one failure.

Each case copies a clean capsule, seeds one mistake, and runs ``pytest --run=<capsule> -m custody -k
capsule`` through pytester as users do. The failed set must be exactly the defect's audit id; other audits
may say not_run when the broken file is their input, never failed or error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from capsules import DEFECTS, HARDWARE_RUN_ID, Defect, build_hardware_capsule

from runaudit.examples.digits.build import DEMO_RUN_ID

CAPSULE_AUDITS = {
    "capsule.required_paths",
    "capsule.forbidden_paths",
    "capsule.closed_world",
    "capsule.ids",
    "capsule.run_json_schema",
    "capsule.config_hash",
    "capsule.train_csv",
    "capsule.tests_declared",
    "capsule.metrics_schema",
    "capsule.results_table",
    "capsule.selection",
    "capsule.vis_coverage",
    "capsule.vis_decode",
    "capsule.metrics_rederived",
    "capsule.n_scored",
    "capsule.ground_truth_branch",
}
GATE = ("-m", "custody", "-k", "capsule")


@pytest.fixture
def hardware_capsule(project: Path) -> Path:
    return build_hardware_capsule(project, project / "export" / DEMO_RUN_ID)


def test_every_capsule_audit_has_a_seeded_defect() -> None:
    assert {defect.audit for defect in DEFECTS} == CAPSULE_AUDITS


def test_clean_hardware_capsule_passes_every_capsule_audit(
    run_audits, project: Path, hardware_capsule: Path
) -> None:
    outcome = run_audits(hardware_capsule, project, *GATE)
    # Only the capsule audits ran (-k capsule): every verdict holds, but the gate is not complete (exit 1).
    assert outcome.result.ret == pytest.ExitCode.TESTS_FAILED, outcome.result.stdout.str()
    verdicts = {(item["audit"], item["verdict"]) for item in outcome.report["verdicts"]}
    assert {audit for audit, _ in verdicts} == CAPSULE_AUDITS
    # No weights, no history and no metrics to re-derive: those three do not apply; everything else holds.
    assert {audit for audit, verdict in verdicts if verdict == "not_applicable"} == {
        "capsule.config_hash",
        "capsule.train_csv",
        "capsule.metrics_rederived",
    }
    assert {verdict for _, verdict in verdicts} == {"passed", "not_applicable"}
    assert outcome.report["custody_ok"] is False


@pytest.mark.parametrize("defect", DEFECTS, ids=[defect.name for defect in DEFECTS])
def test_seeded_defect_fails_exactly_its_audit(run_audits, project: Path, defect: Defect) -> None:
    if defect.base == "hardware":
        capsule = build_hardware_capsule(project, project / "export" / DEMO_RUN_ID)
        stem = HARDWARE_RUN_ID
    else:
        capsule, stem = project / "export" / DEMO_RUN_ID, DEMO_RUN_ID
    defect.seed(capsule, project)
    outcome = run_audits(capsule, project, *GATE, report_stem=stem)
    assert outcome.report is not None, outcome.result.stdout.str()
    assert outcome.verdicts("failed") == {defect.audit}, outcome.result.stdout.str()
    assert outcome.verdicts("error") == set()
    assert outcome.result.ret == 1
    failed = [item for item in outcome.find(defect.audit) if item["verdict"] == "failed"]
    # The one line a user reads names the run and says what was found.
    assert all(item["message"].startswith(f"run {stem}") for item in failed), failed
    assert outcome.report["custody_ok"] is False
