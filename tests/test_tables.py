"""``runaudit table``: a comparison group's results table generated from its capsules, each cell's provenance
beside it. The group is the seed document's worked example (tests/test_variance.py): three baseline seeds
at clean accuracy 42.63 / 49.30 / 47.26 and one probe seed at 49.12, set by the test, not trained."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import statistics
from pathlib import Path

import pytest
from science_support import WORKED_BASELINE, declare_worked_group, edit_json

from runaudit.cli import main

BASELINE = WORKED_BASELINE


@pytest.fixture
def group(project: Path, capsule_dir: Path) -> Path:
    declare_worked_group(capsule_dir, project)
    return project


def test_a_markdown_table_shows_what_the_seed_error_supports_and_names_its_bytes(
    group: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.md"
    assert main(["table", "--root", str(group), "--group", "worked", "--out", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert (
        lines[0].startswith("<!-- runaudit table: group worked, test main")
        and "results.md.provenance.json" in lines[0]
    )
    heads = [cell.strip() for cell in lines[1].strip("|").split("|")]
    rows = {
        cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[3:])
    }
    column = heads.index("accuracy [clean]")
    values = [accuracy for _, accuracy in BASELINE.values()]
    error = statistics.stdev(values) / math.sqrt(len(values))  # 1.97: one decimal is what it supports
    assert rows["baseline"][column] == f"{statistics.mean(values):.1f} ± {error:.1f}" == "46.4 ± 2.0"
    assert rows["probe"][column] == "49.1200 (n=1)"  # no spread over one seed: the declared 4 decimals
    provenance = json.loads((tmp_path / "results.md.provenance.json").read_text())
    (cell,) = [
        c
        for c in provenance["cells"]
        if (c["arm"], c["metric"], c["condition"]) == ("baseline", "accuracy", "clean")
    ]
    assert [run["run_id"] for run in cell["runs"]] == list(BASELINE)
    for run in cell["runs"]:
        digest = hashlib.sha256((group / "export" / run["run_id"] / "run.json").read_bytes()).hexdigest()
        assert run["run_json_sha256"] == digest


def test_latex_and_csv_carry_the_same_cells(group: Path, tmp_path: Path) -> None:
    latex, table = tmp_path / "results.tex", tmp_path / "results.csv"
    assert (
        main(["table", "--root", str(group), "--group", "worked", "--format", "latex", "--out", str(latex)])
        == 0
    )
    assert (
        main(["table", "--root", str(group), "--group", "worked", "--format", "csv", "--out", str(table)])
        == 0
    )
    tex = latex.read_text(encoding="utf-8")
    assert tex.startswith("% runaudit table:") and r"\toprule" in tex and r"\bottomrule" in tex
    assert r"baseline & " in tex and r"46.4 $\pm$ 2.0" in tex
    with table.open(newline="", encoding="utf-8") as handle:
        rows = {(row["arm"], row["metric"], row["condition"]): row for row in csv.DictReader(handle)}
    baseline = rows[("baseline", "accuracy", "clean")]
    assert baseline["shown"] == "46.4 ± 2.0" and baseline["n"] == "3"
    assert float(baseline["mean"]) == pytest.approx(statistics.mean(v for _, v in BASELINE.values()))
    assert all(f"{run_id}@" in baseline["runs"] for run_id in BASELINE)


def test_a_group_no_capsule_declares_is_one_line(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", "--root", str(project), "--group", "nowhere"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "no sealed run" in line and "'nowhere'" in line


def test_a_run_that_lacks_a_tabled_metric_is_one_line(
    group: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit_json(
        group / "export" / "base-s2" / "test" / "main" / "metrics.json",
        lambda metrics: metrics.update(
            metrics=[row for row in metrics["metrics"] if row["metric"] != "accuracy"]
        ),
    )
    assert main(["table", "--root", str(group), "--group", "worked"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "run base-s2" in line and "no accuracy value" in line, line


def test_names_from_capsules_stay_text_in_latex_and_markdown(group: Path, tmp_path: Path) -> None:
    """Found in review: a metric name from a capsule went into the paper unescaped (``\\input{...}``)."""
    hostile = r"acc|\input{/etc/passwd}^~$"
    for run_id in (*BASELINE, "probe-s4"):
        edit_json(
            group / "export" / run_id / "test" / "main" / "metrics.json",
            lambda metrics: [
                row.update(metric=hostile) for row in metrics["metrics"] if row["metric"] == "accuracy"
            ],
        )
    latex, markdown = tmp_path / "t.tex", tmp_path / "t.md"
    assert (
        main(["table", "--root", str(group), "--group", "worked", "--format", "latex", "--out", str(latex)])
        == 0
    )
    assert main(["table", "--root", str(group), "--group", "worked", "--out", str(markdown)]) == 0
    tex = latex.read_text(encoding="utf-8")
    assert r"\input{" not in tex and r"acc|\textbackslash{}input\{/etc/passwd\}\textasciicircum{}" in tex
    header = markdown.read_text(encoding="utf-8").splitlines()[1]
    assert "acc\\|" in header and header.count(" | ") == header.replace("\\|", "").count(" | ")
