"""What the run page says, rendered from real capsules and verdict records (the browser tests load it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from report_records import HOSTILE, build, demo_run, hostile_records, record, science_records

from runaudit.reports import claims, coverage, figures, findings, html, page, visuals


def custody_records(verdict: str = "passed") -> list[dict[str, Any]]:
    """The custody verdicts a clean demo earns (the ones the claims look at)."""
    return [
        record("capsule.ids", verdict, gate_class="custody"),
        *(
            record("capsule.metrics_rederived", "passed", gate_class="custody", subject=f"main/{metric}")
            for metric in ("accuracy", "cross_entropy")
        ),
        record(
            "capsule.vis_coverage",
            "passed",
            gate_class="custody",
            subject="main",
            expected=400,
            found=400,
            missing=[],
            extra=[],
        ),
    ]


def stored(project: Path, metric: str, condition: str) -> str:
    """The headline as the capsule stores it: trained values differ across CPUs, so never a literal."""
    document = json.loads((project / "export" / "demo" / "test" / "main" / "metrics.json").read_text())
    [row] = [
        row for row in document["metrics"] if row["metric"] == metric and row["condition_id"] == condition
    ]
    return f"{metric} [{condition}] {row['value']:.{row['precision']}f}"


def sentences(doc: dict[str, Any]) -> dict[str, str]:
    return {f"{claim.metric}/{claim.condition_id}": claim.sentence for claim in claims.claims(doc)}


def test_each_headline_number_names_its_gates_and_what_rides_with_it(project: Path) -> None:
    said = sentences(build(demo_run(project), [*custody_records(), *science_records()]))
    assert said["accuracy/clean"].startswith(
        f"{stored(project, 'accuracy', 'clean')} — custody ok, 7 disclosures: "
    )
    assert "declared seeds=single" in said["accuracy/clean"]
    assert "leakage.group_overlap" not in said["accuracy/clean"]  # not run, and names no conclusion
    assert said["cross_entropy/noise"] == (
        f"{stored(project, 'cross_entropy', 'noise')} — custody ok, 3 disclosures: "
        "history.grad_spikes; leakage.cross_split_bytes; declared seeds=single"
    )


def test_a_number_whose_gates_did_not_run_reads_unverified(project: Path) -> None:
    run = demo_run(project)
    said = sentences(build(run, science_records()))
    assert said["accuracy/clean"].startswith(
        f"{stored(project, 'accuracy', 'clean')} — custody unverified (no custody audit ran)"
    )
    no_rederivation = [item for item in custody_records() if item["audit"] != "capsule.metrics_rederived"]
    said = sentences(build(run, no_rederivation))
    assert said["accuracy/noise"] == (
        f"{stored(project, 'accuracy', 'noise')} — custody unverified (capsule.metrics_rederived did not run), "
        "science not audited"
    )
    said = sentences(build(run, custody_records("failed")))
    assert said["accuracy/noise"].startswith(
        f"{stored(project, 'accuracy', 'noise')} — custody failed (capsule.ids)"
    )


def test_disclosures_are_grouped_under_every_conclusion_they_affect(project: Path) -> None:
    groups = {
        group.conclusion: group
        for group in findings.disclosure_groups(build(demo_run(project), science_records()))
    }
    assert list(groups) == [
        "test/main:accuracy",
        "test/main:cross_entropy",
        "run:training",
        findings.NOT_RUN_GROUP,
    ]
    assert {item.name for item in groups["test/main:cross_entropy"].findings} == {
        "leakage.cross_split_bytes",
        "variance.seed_count",
    }
    mde = next(item for item in groups["test/main:accuracy"].findings if item.audit == "variance.mde")
    assert ("mde", "7.75") in mde.evidence and ("t_crit", "2.776") in mde.evidence
    assert groups[findings.NOT_RUN_GROUP].findings[0].message == "the split manifest has no group column"


def test_evidence_rows_are_bounded_and_never_dropped_silently() -> None:
    rows, left_out = findings.evidence_rows({"big": list(range(100)), **{f"k{i}": i for i in range(40)}})
    assert rows[0] == ("big", "[0, 1, 2, 3, 4, 5, 6, 7, … (100 in all)]")
    assert len(rows) == findings.EVIDENCE_ROWS and left_out == 41 - findings.EVIDENCE_ROWS


def test_figures_are_drawn_from_evidence_and_say_not_audited_without_it(project: Path) -> None:
    run = demo_run(project)
    bare = {figure.key: figure for figure in figures.figures(build(run, custody_records()), run.path)}
    assert bare["history"].svg is not None  # the curves come from train.csv itself
    assert bare["history"].status.startswith("anomalies not audited")
    for key in ("seed-bands", "variance-mde", "variance-baseline_draw", "leakage"):
        assert bare[key].svg is None and bare[key].status.startswith("not audited"), key
    rich = {figure.key: figure for figure in figures.figures(build(run, science_records()), run.path)}
    assert all(figure.svg and figure.svg.startswith("<svg ") for figure in rich.values())
    assert "history.loss_spikes on train_loss at epoch(s) 9" in rich["history"].notes
    assert any("1.11% of the test split seen in training" in note for note in rich["leakage"].notes)
    assert "leakage.group_overlap not run: the split manifest has no group column" in rich["leakage"].notes
    ids = re.findall(r'\bid="([^"]+)"', "".join(figure.svg for figure in rich.values()))
    assert len(ids) == len(set(ids)), "inline SVGs share ids"


def test_malformed_evidence_is_named_and_skipped(project: Path) -> None:
    broken = [
        record("history.loss_spikes", "disclosed", epochs="nine", column=3),
        record("variance.seed_band", "disclosed", arms={"a": {"values": ["x"]}}),
        record("variance.mde", "disclosed", mde="wide", effect=None),
        record("leakage.cross_split_bytes", "disclosed", overlap={"train|test": -4}),
    ]
    run = demo_run(project)
    drawn = {figure.key: figure for figure in figures.figures(build(run, broken), run.path)}
    assert (
        drawn["seed-bands"].svg is None and drawn["leakage"].svg is None and drawn["variance-mde"].svg is None
    )
    notes = [note for figure in drawn.values() for note in figure.notes]
    assert (
        len(
            [
                note
                for note in notes
                if "malformed" in note or "no usable" in note or "not a map" in note or "no finite" in note
            ]
        )
        == 4
    )


def test_the_coverage_matrix_counts_gaps_per_condition_and_role(project: Path) -> None:
    gaps = record(
        "capsule.vis_coverage",
        "failed",
        "covers 397/400",
        gate_class="custody",
        subject="main",
        expected=400,
        found=398,
        missing=["clean/input/d0000.png", "clean/input/d0006.png", "noise/prediction/d0037.png"],
        extra=["noise/input/zz.png"],
    )
    run = demo_run(project)
    k = json.loads((run.path / "run.json").read_text())["selections"][0]["k"]
    (matrix,) = coverage.matrices(build(run, [gaps]))
    assert matrix.cell("clean", "input") == coverage.Cell(f"{k - 2}/{k} (2 missing)", False)
    assert matrix.cell("noise", "input") == coverage.Cell(f"{k}/{k} (1 extra)", False)
    assert matrix.cell("clean", "prediction") == coverage.Cell(f"{k}/{k}", True)
    (unaudited,) = coverage.matrices(build(run, science_records()))
    assert unaudited.cells is None and unaudited.status.startswith("not audited")


def test_the_visual_strip_embeds_bounded_thumbnails_and_follows_no_link_out(project: Path) -> None:
    run = demo_run(project)
    doc = build(run, custody_records())
    (strip,) = visuals.strips(doc, run.path, run.root)
    assert len(strip.samples) == visuals.SAMPLES and len(strip.rows) == 4
    first = strip.rows[0][2][0]
    assert first.src is not None and first.src.startswith("data:image/png;base64,")
    outside = project / "secret.png"
    outside.write_bytes((run.path / "test/main/vis/clean/input" / f"{strip.samples[1]}.png").read_bytes())
    target = run.path / "test/main/vis/clean/input" / f"{strip.samples[1]}.png"
    target.unlink()
    target.symlink_to(outside)
    selection = run.root / "_trust/selections/digits-stratified-s0-test.json"
    listed = json.loads(selection.read_text())
    listed["sample_ids"][2] = "../../../secret"
    selection.write_text(json.dumps(listed))
    (strip,) = visuals.strips(doc, run.path, run.root)
    assert "../../../secret" not in strip.samples
    thumbs = dict(zip(strip.samples, strip.rows[0][2], strict=True))
    assert thumbs[listed["sample_ids"][1]] == visuals.Thumb(None, "resolves outside the capsule: not read")


def test_every_value_is_escaped_on_the_page(project: Path) -> None:
    run = demo_run(project)
    page = html.render_run(build(run, [*custody_records(), *hostile_records()]))
    assert HOSTILE not in page
    assert "<script" not in page.lower() and "<img src=x" not in page
    assert page.count("&lt;script&gt;window.__pwned=1&lt;/script&gt;") >= 10
    assert "ünïcødé ✓ $x$" in page


def test_long_runs_of_passed_subjects_fold_but_a_failure_never_hides() -> None:
    many = [record("manifest.sha256", "passed", gate_class="custody", subject=f"f{i}.png") for i in range(20)]
    mixed = [record("manifest.size", "passed", gate_class="custody", subject=f"f{i}.png") for i in range(19)]
    mixed.append(
        record(
            "manifest.size",
            "failed",
            "f19.png is 3 bytes, the manifest says 4",
            gate_class="custody",
            subject="f19.png",
        )
    )
    few = [record("capsule.ids", "passed", gate_class="custody")]
    rows = page.verdict_rows([*few, *mixed, *many])
    folded = [row for row in rows if isinstance(row, page.Folded)]
    assert [(row.audit, len(row.subjects)) for row in folded] == [("manifest.sha256", 20)]
    assert len(rows) == 1 + 20 + 1  # capsule.ids, every manifest.size row, one folded row


def test_audits_that_measured_nothing_give_their_reason_not_a_malformed_note(project: Path) -> None:
    quiet = [
        record("variance.seed_band", "not_applicable", "run.json declares a single seed", metric="accuracy"),
        record("variance.mde", "not_applicable", "the group holds one arm", metric="accuracy"),
        record("leakage.val_split_exists", "passed", "359 validation items", overlap={}),
    ]
    run = demo_run(project)
    drawn = {figure.key: figure for figure in figures.figures(build(run, quiet), run.path)}
    assert drawn["seed-bands"].notes == (
        "variance.seed_band not applicable: run.json declares a single seed",
    )
    assert drawn["variance-mde"].notes == ("variance.mde not applicable: the group holds one arm",)
    assert drawn["leakage"].notes == () and drawn["leakage"].svg is None
