"""Every capsule.* audit fails on a seeded defect, alone: one defect is one failure.

Each case copies a clean capsule, seeds one mistake, and runs ``pytest --run=<capsule> -m custody -k
capsule`` through pytester as users do. The failed set must be exactly the defect's audit id; other audits
may say not_run when the broken file is their input, never failed or error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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


def _with_a_private_chunk(render: Path, size: int) -> None:
    """``render`` with a private ancillary chunk of ``size`` zero bytes after its header, CRC and all, the
    chunk a hole of a sparse file: Pillow read such chunks whole and kept them (1 GiB each held 3.4 GB)."""
    import zlib

    data = render.read_bytes()
    header, rest = data[:33], data[33:]  # the signature and IHDR
    crc, zeros = zlib.crc32(b"prVt"), bytes(1 << 20)
    for _ in range(size >> 20):
        crc = zlib.crc32(zeros, crc)
    with render.open("wb") as handle:
        handle.write(header + size.to_bytes(4, "big") + b"prVt")
        handle.seek(size, 1)
        handle.write(crc.to_bytes(4, "big") + rest)


def test_renders_of_another_format_or_past_the_pixel_bound_fail_decode_and_stop_the_similarity_probe(
    capsule_dir: Path, project: Path, run_audits: Any
) -> None:
    """JPEGs under .png names passed ``collapse.vis_identical`` while ``capsule.vis_decode`` failed them, and
    400 renders of 9000×9000 (78 KB each, under Pillow's bomb limit) took the two audits 215 s to decode."""
    import io

    from PIL import Image

    renders = sorted((capsule_dir / "test" / "main" / "vis").rglob("*.png"))
    as_jpeg, too_large = renders[0], renders[1]
    buffer = io.BytesIO()
    Image.open(as_jpeg).convert("RGB").save(buffer, format="JPEG")
    as_jpeg.write_bytes(buffer.getvalue())
    buffer = io.BytesIO()
    Image.new("L", (4097, 4096)).save(buffer, format="PNG")
    too_large.write_bytes(buffer.getvalue())
    _with_a_private_chunk(renders[2], 129 << 20)
    buffer = io.BytesIO()
    Image.new("L", (1, 16385)).save(buffer, format="PNG")  # 1 × 16,777,216 decoded row by row took 0.5 s each
    renders[3].write_bytes(buffer.getvalue())
    outcome = run_audits(capsule_dir, project, "-k", "vis_decode or vis_identical")
    [decode] = outcome.find("capsule.vis_decode")
    assert decode["verdict"] == "failed" and "4097×4096 pixels, past the 16,777,216" in decode["message"]
    huge = re.escape(f"{renders[2].relative_to(capsule_dir)} (RenderRefused: ")
    assert re.search(huge + r"[0-9,]+ bytes, past the 134,217,728", decode["message"])
    assert "1×16385 pixels, a side past the 16,384" in decode["message"]
    assert f"{as_jpeg.relative_to(capsule_dir)} (UnidentifiedImageError" in decode["message"]
    [identical] = outcome.find("collapse.vis_identical")
    assert identical["verdict"] == "not_run" and "a render does not decode" in identical["message"]


def test_every_listing_of_a_metric_is_re_derived_a_condition_listed_twice_included(
    capsule_dir: Path, project: Path, run_audits: Any
) -> None:
    """metrics.json listing accuracy on clean twice, a wrong value first: ``capsule.metrics_schema`` failed
    the twin, but ``capsule.metrics_rederived`` kept the last listing per condition and passed, while the
    report's headline showed the first."""
    import json

    path = capsule_dir / "test" / "main" / "metrics.json"
    document = json.loads(path.read_text())
    [true] = [
        row for row in document["metrics"] if (row["metric"], row["condition_id"]) == ("accuracy", "clean")
    ]
    document["metrics"].insert(0, {**true, "value": 0.9999 if true["value"] != 0.9999 else 0.5})
    path.write_text(json.dumps(document))
    outcome = run_audits(capsule_dir, project, "-k", "metrics_rederived or metrics_schema")
    assert {item["verdict"] for item in outcome.find("capsule.metrics_schema")} == {"failed"}
    [accuracy] = [
        item for item in outcome.find("capsule.metrics_rederived") if item["subject"].endswith("accuracy")
    ]
    assert accuracy["verdict"] == "failed" and "clean: declared" in accuracy["message"]


def test_the_renders_of_a_test_are_decoded_within_one_pixel_budget(
    capsule_dir: Path, project: Path, run_audits: Any
) -> None:
    """Renders each within every per-render bound (4096×4096, a few KB of zeros), 400 of them, kept the two
    audits that decode them 265 s: the renders of one test share one budget of pixels, and decoding stops at it."""
    import io

    from PIL import Image

    from runaudit.renders import RENDERS_PIXELS_BUDGET

    buffer = io.BytesIO()
    Image.new("L", (4096, 4096)).save(buffer, format="PNG")
    renders = sorted((capsule_dir / "test" / "main" / "vis").glob("*/*/*.png"))
    within = RENDERS_PIXELS_BUDGET // (4096 * 4096)
    assert len(renders) > within  # more renders than the budget holds at this size
    for render in renders:
        render.write_bytes(buffer.getvalue())
    outcome = run_audits(capsule_dir, project, "-k", "vis_decode or vis_identical")
    [decode] = outcome.find("capsule.vis_decode")
    past = f"{len(renders) - within} render(s) from {renders[within].relative_to(capsule_dir)} on were not decoded"
    assert decode["verdict"] == "failed" and past in decode["message"]
    assert f"more than the {RENDERS_PIXELS_BUDGET:,} pixels in all" in decode["message"]
    [identical] = outcome.find("collapse.vis_identical")
    assert (
        identical["verdict"] == "not_run"
        and f"{RENDERS_PIXELS_BUDGET:,} pixels in all" in identical["message"]
    )
