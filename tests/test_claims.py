"""The claims gate on real documents: a README and a LaTeX paper section whose numbers were generated from
the demo and a 3-seed arm trained here (``runaudit table``, the capsules' metrics.json), then edited by hand.

Every number the tests write is read from the capsules or the generated tables, never typed: float bits of
a training run differ across CPUs.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from science_support import produce_demo_seeds

from runaudit.cli import main
from runaudit.documents import DOCUMENT_CAP
from runaudit.examples.digits.build import DEMO_GROUP, DEMO_RUN_ID
from runaudit.siblings import capsule_folders

SEEDS = ("seed-1", "seed-2", "seed-3")
ARM = "short"
AuditRun = Any  # conftest.AuditRun (tests/box has a conftest of its own: "import conftest" is ambiguous)


def _close(root: Path, run_id: str) -> None:
    assert main(["close", "--root", str(root), run_id]) == 0
    capsule_folders.cache_clear()  # found once per process, as in a user's session; this one goes on sealing


def _table(root: Path, form: str, out: Path) -> str:
    assert (
        main(["table", "--root", str(root), "--group", DEMO_GROUP, "--format", form, "--out", str(out)]) == 0
    )
    return out.read_text(encoding="utf-8")


def metrics(root: Path, run_id: str) -> dict[tuple[str, str], float]:
    document = json.loads((root / "export" / run_id / "test" / "main" / "metrics.json").read_text())
    return {(row["metric"], row["condition_id"]): row["value"] for row in document["metrics"]}


@pytest.fixture(scope="module")
def delivered(demo_project: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo's project with a second arm of three real 2-epoch seeds, sealed and verified; and the
    documents generated from it: results tables (one made before the third seed was sealed), a README and
    a LaTeX results section quoting the capsules' values."""
    base = tmp_path_factory.mktemp("claims")
    root = base / "project"
    shutil.copytree(demo_project, root, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports"))
    produce_demo_seeds(root, SEEDS, arm=ARM)
    docs = base / "docs"
    docs.mkdir()
    for run_id in SEEDS[:2]:
        _close(root, run_id)
    stale = _table(root, "markdown", docs / "stale.md")  # generated before seed-3 was sealed
    _close(root, SEEDS[2])
    roster = base / "roster.txt"
    roster.write_text("\n".join([DEMO_RUN_ID, *SEEDS]) + "\n")
    assert main(["manifest", "--root", str(root), "--roster", str(roster), "--pull-id", "delivery"]) == 0
    assert main(["verify", "--root", str(root), "--pull-id", "delivery"]) == 0
    markdown = _table(root, "markdown", docs / "results.md")
    latex = _table(root, "latex", docs / "results.tex")
    _table(root, "csv", docs / "results.csv")
    demo = metrics(root, DEMO_RUN_ID)
    seed2 = metrics(root, "seed-2")
    readme = "\n".join(
        [
            "# Digits",
            "",
            f"The demo reaches a clean accuracy of {100 * demo['accuracy', 'clean']:.2f} % after training, "
            f"with a clean cross-entropy of {demo['cross_entropy', 'clean']:.4f}.",
            f"Under noise its accuracy is {demo['accuracy', 'noise']:.4f}. It trains in 10 epochs on 1797 digits.",
            "",
            f"<!-- runaudit: seed-2/main/cross_entropy/clean --> Seed 2 alone ends at {seed2['cross_entropy', 'clean']:.4f}.",
            "",
            "Install it with `pip install torch==2.13.0` first.",
            "",
            "<!-- runaudit: ignore -->",
            "Chance accuracy on ten digits is 10.0 %.",
            "",
            "## Seeds",
            "",
            markdown.rstrip("\n"),
            "",
        ]
    )
    paper = "\n".join(
        [
            r"\section{Results}",
            r"\label{sec:results}",
            f"Our network reaches an accuracy of {100 * demo['accuracy', 'clean']:.2f}\\,\\% on clean digits "
            r"\cite{digits}, and",
            f"its cross-entropy under noise is ${demo['cross_entropy', 'noise']:.4f}$. \\vspace{{0.5em}}",
            "",
            r"\begin{table}[t]",
            r"\centering",
            latex.rstrip("\n"),
            r"\caption{Mean $\pm$ standard error over seeds.}",
            r"\end{table}",
            "",
        ]
    )
    (docs / "README.md").write_text(readme, encoding="utf-8")
    (docs / "paper.tex").write_text(paper, encoding="utf-8")
    return {"root": root, "docs": docs, "stale": stale, "demo": demo, "seed2": seed2}


def _claims(run_audits: Callable[..., AuditRun], delivered: dict[str, Any], *documents: Path) -> AuditRun:
    return run_audits(
        DEMO_RUN_ID,
        delivered["root"],
        "-m",
        "claims",
        "--runaudit-claims",
        *(str(path) for path in documents),
    )


def _by_line(outcome: AuditRun) -> dict[str, dict[str, Any]]:
    assert outcome.report is not None, outcome.result.stdout.str()
    return {  # keyed by the document's file name: the report names it by its path from where pytest ran
        Path(item["subject"]).name: item
        for item in outcome.report["verdicts"]
        if item["audit"] == "claims.number"
    }


def _line_of(document: Path, needle: str) -> int:
    return next(number for number, line in enumerate(document.read_text().splitlines(), 1) if needle in line)


def test_the_unedited_documents_pass_every_number(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any]
) -> None:
    docs = delivered["docs"]
    outcome = _claims(run_audits, delivered, docs / "README.md", docs / "paper.tex", docs / "results.csv")
    verdicts = _by_line(outcome)
    assert {item["verdict"] for item in verdicts.values()} == {"passed"}, verdicts
    readme = {subject for subject in verdicts if subject.startswith("README.md:")}
    # 4 prose numbers (the ignored chance level, the epoch and item counts and the install line are not
    # claims) and the generated table's 2 arms x 4 columns.
    assert len(readme) == 4 + 2 * 4
    assert len([subject for subject in verdicts if subject.startswith("paper.tex:")]) == 2 + 2 * 4
    assert len([subject for subject in verdicts if subject.startswith("results.csv:")]) == 2 * 4
    first = verdicts[f"README.md:{_line_of(docs / 'README.md', 'clean accuracy')}:1"]
    assert "run demo, test main: accuracy [clean]" in first["message"]
    assert (
        first["evidence"]["document"] == str(docs / "README.md")
        and "clean accuracy" in first["evidence"]["text"]
    )
    assert outcome.result.ret == 0


def _edited(delivered: dict[str, Any], name: str, change: Callable[[str], str], tmp_path: Path) -> Path:
    """A copy of a generated document (and its sidecar) with one hand edit; the edit must change it."""
    source = delivered["docs"] / name
    target = tmp_path / name
    for sidecar in delivered["docs"].glob("results.*.provenance.json"):
        shutil.copy(sidecar, tmp_path / sidecar.name)
    text = source.read_text(encoding="utf-8")
    edited = change(text)
    assert edited != text
    target.write_text(edited, encoding="utf-8")
    return target


def _transpose(number: str) -> str:
    """The first two adjacent different digits of ``number`` swapped (what a hurried typist does)."""
    digits = [index for index, char in enumerate(number) if char.isdigit()]
    for left, right in zip(digits, digits[1:], strict=False):
        if right == left + 1 and number[left] != number[right]:
            return number[:left] + number[right] + number[left] + number[right + 1 :]
    raise AssertionError(f"{number} has no two adjacent different digits to transpose")


def _arm_cell(document: str, arm: str, column: int) -> str:
    """The text of ``arm``'s cell in the ``column``-th metric column of a generated Markdown table."""
    row = next(line for line in document.splitlines() if line.startswith(f"| {arm} |"))
    return [cell.strip() for cell in row.strip("|").split("|")][column]


def test_a_transposed_digit_fails_in_prose_and_in_a_table(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    demo = delivered["demo"]
    stated = f"{100 * demo['accuracy', 'clean']:.2f}"
    readme = _edited(
        delivered, "README.md", lambda text: text.replace(stated, _transpose(stated), 1), tmp_path
    )
    cell = _arm_cell((delivered["docs"] / "results.md").read_text(), ARM, 1)
    mean = cell.split(" ± ")[0]
    table = _edited(
        delivered,
        "results.md",
        lambda text: text.replace(f"| {cell} |", f"| {_transpose(mean)} ± {cell.split(' ± ')[1]} |"),
        tmp_path,
    )
    verdicts = _by_line(_claims(run_audits, delivered, readme, table))
    prose = verdicts[f"README.md:{_line_of(readme, 'clean accuracy')}:1"]
    assert prose["verdict"] == "failed" and f"{_transpose(stated)} %" in prose["message"]
    row = verdicts[f"results.md:{_line_of(table, f'| {ARM} |')}:1"]
    assert row["verdict"] == "failed" and f"group {DEMO_GROUP} arm {ARM}" in row["message"]
    others = [item for item in verdicts.values() if item["subject"] not in (prose["subject"], row["subject"])]
    assert others and {item["verdict"] for item in others} == {"passed"}


def test_a_stale_table_and_a_stale_number_fail(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    docs = delivered["docs"]
    stale = tmp_path / "stale.md"
    shutil.copy(docs / "stale.md", stale)
    shutil.copy(docs / "stale.md.provenance.json", tmp_path / "stale.md.provenance.json")
    seed2 = f"{delivered['seed2']['cross_entropy', 'clean']:.4f}"
    seed1 = f"{metrics(delivered['root'], 'seed-1')['cross_entropy', 'clean']:.4f}"
    assert seed1 != seed2, "seeds 1 and 2 ended at the same cross-entropy: no stale number to plant"
    readme = _edited(
        delivered, "README.md", lambda text: text.replace(f"ends at {seed2}", f"ends at {seed1}"), tmp_path
    )
    verdicts = _by_line(_claims(run_audits, delivered, stale, readme))
    short = [
        item
        for subject, item in verdicts.items()
        if subject.startswith(f"stale.md:{_line_of(stale, f'| {ARM} |')}:")
    ]
    assert len(short) == 4
    assert all(
        item["verdict"] == "failed" and "stale" in item["message"] and "seed-3" in item["message"]
        for item in short
    )
    number = verdicts[f"README.md:{_line_of(readme, 'Seed 2 alone')}:1"]
    assert number["verdict"] == "failed" and seed1 in number["message"] and "run seed-2" in number["message"]


def test_more_digits_than_the_seeds_or_the_capsule_support_fail(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    demo = delivered["demo"]
    four, five = f"{demo['cross_entropy', 'noise']:.4f}", f"{demo['cross_entropy', 'noise']:.5f}"
    paper = _edited(delivered, "paper.tex", lambda text: text.replace(f"${four}$", f"${five}$"), tmp_path)
    provenance = json.loads((delivered["docs"] / "results.md.provenance.json").read_text())
    (cell,) = [
        c
        for c in provenance["cells"]
        if (c["arm"], c["metric"], c["condition"]) == (ARM, "cross_entropy", "clean")
    ]
    shown = cell["text"]
    decimals = len(shown.split(" ± ")[0].partition(".")[2])
    finer = f"{cell['mean']:.{decimals + 1}f} ± {shown.split(' ± ')[1]}"
    table = _edited(
        delivered, "results.md", lambda text: text.replace(f"| {shown} |", f"| {finer} |"), tmp_path
    )
    verdicts = _by_line(_claims(run_audits, delivered, paper, table))
    line = verdicts[f"paper.tex:{_line_of(paper, five)}:1"]
    assert (
        line["verdict"] == "failed"
        and "claims 5 decimals" in line["message"]
        and "declares cross_entropy to 4" in line["message"]
    )
    row = [
        item
        for item in verdicts.values()
        if item["evidence"].get("number", "").startswith(finer.split(" ")[0])
    ]
    assert len(row) == 1 and row[0]["verdict"] == "failed"
    assert (
        f"claims {decimals + 1} decimals" in row[0]["message"]
        and "standard error over 3 seeds" in row[0]["message"]
    )


def test_a_number_with_no_artifact_is_listed_not_run(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    def add(text: str) -> str:
        text = text.replace(
            "## Seeds",
            "<!-- runaudit: seed-9/main/accuracy/clean --> Seed 9 reaches 0.9123.\n\n"
            "Prior work reports a clean accuracy of 95.21 % [3].\n\n## Seeds",
        )
        row = next(line for line in text.splitlines() if line.startswith(f"| {ARM} |"))
        text = text.replace(row, row + "\n| literature | 0.9912 | 0.0400 | 0.9000 | 0.3000 |")
        # a spread that one run cannot hold, and one in a form the gate does not read
        text = text.replace(f"ends at {seed2}.", f"ends at {seed2} (± 0.0100).")
        text = text.replace(f"its accuracy is {noise}.", f"its accuracy is {noise} (±.0100).")
        # Two columns read as the same metric and condition, told apart by a header row the gate does not read:
        # the first one's value (after 1 epoch) is no other artifact, and was failed as the demo's final one.
        return text.replace(
            "## Seeds",
            "| Run | Accuracy (clean) | Accuracy (clean) |\n|---|---|---|\n| epochs | 1 | 10 |\n"
            f"| {DEMO_RUN_ID} | 0.1234 | {final} |\n\n## Seeds",
        )

    seed2 = f"{delivered['seed2']['cross_entropy', 'clean']:.4f}"
    final = f"{delivered['demo']['accuracy', 'clean']:.4f}"
    noise = f"{delivered['demo']['accuracy', 'noise']:.4f}"
    readme = _edited(delivered, "README.md", add, tmp_path)
    assert f"ends at {seed2} (± 0.0100)." in readme.read_text()
    outcome = _claims(run_audits, delivered, readme)
    verdicts = _by_line(outcome)
    anchored = verdicts[f"README.md:{_line_of(readme, 'Seed 9')}:1"]
    assert anchored["verdict"] == "not_run" and "seed-9/main/accuracy/clean" in anchored["message"]
    prior = verdicts[f"README.md:{_line_of(readme, 'Prior work')}:1"]  # another paper's number names no run
    assert prior["verdict"] == "not_run" and "closest" in prior["message"]
    literature = [
        item
        for subject, item in verdicts.items()
        if subject.startswith(f"README.md:{_line_of(readme, '| literature |')}:")
    ]
    assert len(literature) == 4 and {item["verdict"] for item in literature} == {"not_run"}
    spread = verdicts[f"README.md:{_line_of(readme, 'Seed 2 alone')}:1"]
    assert spread["verdict"] == "not_run", spread  # passed with its value before: the ± was never checked
    assert "agrees" in spread["message"] and "one run" in spread["message"]
    unread = verdicts[f"README.md:{_line_of(readme, 'Under noise')}:1"]
    assert unread["verdict"] == "not_run" and "(±.0100)" in unread["message"], unread  # passed before
    assert "does not read" in unread["message"]
    early, last = (verdicts[f"README.md:{_line_of(readme, f'| {DEMO_RUN_ID} | 0.1234')}:{n}"] for n in (1, 2))
    assert early["verdict"] == "not_run" and "other column" in early["message"], early  # failed before
    assert last["verdict"] == "passed", last
    assert {item["verdict"] for item in verdicts.values()} == {"passed", "not_run"}
    assert outcome.result.ret == 0  # listed as disclosures; --runaudit-strict would fail them


def test_an_error_is_held_in_its_values_units_and_a_standard_error_column_in_percent_is_read(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    """``97.05 % ± 0.003 %`` passed against a standard error of 0.003: the error was read on the other meaning
    of its percent sign than its value. A standard-error column in % beside a share failed as a value."""
    with (delivered["docs"] / "results.csv").open(encoding="utf-8") as stream:
        [shown] = [
            row["shown"]
            for row in csv.DictReader(stream)
            if (row["arm"], row["metric"], row["condition"]) == (ARM, "accuracy", "clean")
        ]
    value, error = re.findall(r"\d+\.\d+", shown)[:2]  # as generated: "0.97 ± 0.012 (n=3)"
    decimals = len(error.partition(".")[2])
    in_percent = f"{Decimal(error) * 100:.{max(decimals - 2, 0)}f}"
    percent_value = f"{Decimal(value) * 100:.{max(len(value.partition('.')[2]) - 2, 0)}f}"
    document = tmp_path / "spread.md"
    document.write_text(
        f"| arm | accuracy (clean) | accuracy (clean) s.e. (%) |\n|---|---|---|\n| {ARM} | {value} | {in_percent} % |\n\n"
        f"The {ARM} arm reaches a clean accuracy of {percent_value} % ± {error} %.\n",
        encoding="utf-8",
    )
    verdicts = _by_line(_claims(run_audits, delivered, document))
    column = verdicts["spread.md:3:1"]
    assert column["verdict"] == "passed", column  # the s.e. cell was a failed accuracy of its own
    scaled = verdicts["spread.md:5:1"]
    assert scaled["verdict"] == "failed" and "standard error" in scaled["message"], scaled  # passed before


def test_a_number_naming_no_condition_is_held_to_the_headline_condition(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    """A number naming no condition matched any condition's value: the demo's noise accuracy, stated as its
    accuracy, passed as if the sentence had said noise."""
    noise = 100 * delivered["demo"]["accuracy", "noise"]
    sentence = f"The demo reaches an accuracy of {noise:.2f} % after training."
    readme = _edited(
        delivered, "README.md", lambda text: text.replace("## Seeds", f"{sentence}\n\n## Seeds"), tmp_path
    )
    stated = _by_line(_claims(run_audits, delivered, readme))[f"README.md:{_line_of(readme, sentence)}:1"]
    assert stated["verdict"] == "failed" and "clean" in stated["message"], stated


def test_a_number_resting_on_a_capsule_that_lost_custody_fails(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    root = tmp_path / "project"
    shutil.copytree(
        delivered["root"], root, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports")
    )
    best = root / "export" / "seed-1" / "best.pth"
    data = bytearray(best.read_bytes())
    data[len(data) // 2] ^= 0xFF
    best.write_bytes(bytes(data))
    outcome = run_audits(
        DEMO_RUN_ID, root, "-m", "claims", "--runaudit-claims", str(delivered["docs"] / "results.md")
    )
    verdicts = _by_line(outcome)
    short = [item for item in verdicts.values() if f"arm {ARM}" in item["message"]]
    assert len(short) == 4
    assert all(
        item["verdict"] == "failed" and "seed-1, which has not held custody" in item["message"]
        for item in short
    )
    demo = [item for item in verdicts.values() if "arm cnn" in item["message"]]
    assert demo and {item["verdict"] for item in demo} == {"passed"}


def test_a_document_with_no_claim_or_an_unknown_format_is_refused(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    empty = tmp_path / "NOTES.md"
    empty.write_text("# Notes\n\nWe trained for 10 epochs on 1797 digits.\n")
    verdicts = _by_line(_claims(run_audits, delivered, empty))
    assert [item["verdict"] for item in verdicts.values()] == ["failed"]
    assert "found no number stated about a metric" in next(iter(verdicts.values()))["message"]
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.7")
    outcome = _claims(run_audits, delivered, pdf)
    assert outcome.result.ret == 4
    assert re.search(
        r"--runaudit-claims/--claims reads .*\.tex.* documents, given: .*paper\.pdf",
        outcome.result.stderr.str(),
    )


@pytest.mark.parametrize(
    ("body", "said"),
    [
        # 100k stated numbers were 100k verdicts: 106 s and a 55 MB report
        pytest.param(
            "accuracy of 98.05 % on clean.\n\n" * 6000, "states more than 5000 numbers", id="numbers"
        ),
        # 16 MB of brackets kept markdown-it busy for 100 s
        pytest.param(
            "accuracy of 98.05 %. " + "[" * 150_000 + "x" + "]" * 150_000, "markup characters", id="markup"
        ),
    ],
)
def test_a_document_past_what_a_paper_holds_is_refused_whole_in_seconds(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path, body: str, said: str
) -> None:
    document = tmp_path / "HUGE.md"
    document.write_text(f"# Results\n\n{body}\n")
    verdicts = list(_by_line(_claims(run_audits, delivered, document)).values())
    assert [item["verdict"] for item in verdicts] == ["failed"]
    assert said in verdicts[0]["message"]


def test_a_stamp_never_names_a_path_outside_its_folder_nor_blocks_on_a_fifo(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    """The sidecar a stamp names is read beside the document only: "../x.json" is not followed (here the
    stale sidecar one folder up would turn every cell stale), and a FIFO in its place never blocks."""
    inner = tmp_path / "inner"
    inner.mkdir()
    shutil.copy(delivered["docs"] / "stale.md.provenance.json", tmp_path / "stale.md.provenance.json")
    table = (delivered["docs"] / "results.md").read_text()
    escaping = inner / "escaping.md"
    escaping.write_text(table.replace("results.md.provenance.json", "../stale.md.provenance.json"))
    fifo = inner / "fifo.md"
    fifo.write_text(table.replace("results.md.provenance.json", "pipe.json"))
    os.mkfifo(inner / "pipe.json")
    huge = inner / "huge.md"
    with huge.open("wb") as handle:
        handle.truncate(DOCUMENT_CAP + 1)
    verdicts = _by_line(_claims(run_audits, delivered, escaping, fifo, huge))
    cells = [item for name, item in verdicts.items() if not name.startswith("huge.md")]
    assert len(cells) == 2 * 2 * 4 and {item["verdict"] for item in cells} == {"passed"}
    assert verdicts["huge.md"]["verdict"] == "failed" and "limit" in verdicts["huge.md"]["message"]


def test_a_group_session_checks_the_documents_against_its_runs_in_a_report_of_its_own(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], pytester: pytest.Pytester
) -> None:
    """``--run=<group> -m claims``: the same verdicts with the group in focus, written to
    ``<group>@group.json`` (a member's report, which ``down`` and the index read, is never replaced); a
    name that is neither run nor group says it tried both."""
    docs, root = delivered["docs"], delivered["root"]
    documents = [str(docs / "README.md"), str(docs / "paper.tex"), str(docs / "results.csv")]
    member = run_audits(DEMO_RUN_ID, root, "-m", "claims", "--runaudit-claims", *documents)
    assert member.report is not None
    group = run_audits(
        DEMO_GROUP, root, "-m", "claims", "--runaudit-claims", *documents, report_stem=f"{DEMO_GROUP}@group"
    )
    verdicts = _by_line(group)
    assert verdicts.keys() == _by_line(member).keys()
    assert {item["verdict"] for item in verdicts.values()} == {"passed"}, verdicts
    assert {item["audit"] for item in group.report["verdicts"]} == {"claims.number"}  # no capsule audits
    assert group.report["origin"] == "group" and group.report["teardown"]["answer"] == "no"
    assert "per run" in group.report["teardown"]["reason"]
    assert group.result.ret == 0
    page = (pytester.path / "reports" / f"{DEMO_GROUP}@group.html").read_text(encoding="utf-8")
    assert "claims.number" in page and "could not be drawn" not in page
    kept = json.loads((pytester.path / "reports" / f"{DEMO_RUN_ID}.json").read_text())
    assert kept["run_id"] == DEMO_RUN_ID and kept["origin"] != "group"

    nothing = run_audits("no-such-group", root, "--runaudit-claims", documents[0])
    assert nothing.result.ret == 4
    assert "a comparison group no-such-group" in nothing.result.stderr.str()


def test_a_group_session_audits_each_member_in_a_session_of_its_own(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """``pytest --run=<group> -n 2 -k seed``: one ``sweep.member`` verdict per selected run, each from the
    run's own session and report; a checkpoint changed after the pull fails its member alone."""
    root = tmp_path / "project"
    shutil.copytree(
        delivered["root"], root, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports")
    )
    with (root / "export" / "seed-2" / "best.pth").open("r+b") as checkpoint:
        checkpoint.seek(-64, os.SEEK_END)
        byte = checkpoint.read(1)
        checkpoint.seek(-1, os.SEEK_CUR)
        checkpoint.write(bytes([byte[0] ^ 0xFF]))
    outcome = run_audits(
        DEMO_GROUP,
        root,
        "-n",
        "2",
        "-k",
        "seed",
        "--runaudit-pull",
        "delivery",
        report_stem=f"{DEMO_GROUP}@group",
    )
    assert outcome.report is not None and outcome.result.ret == 1
    members = {item["subject"]: item for item in outcome.report["verdicts"]}
    assert set(members) == set(SEEDS) and {item["audit"] for item in members.values()} == {"sweep.member"}
    reports = pytester.path / "reports"
    for run_id, item in members.items():
        own = json.loads((reports / f"{run_id}.json").read_text())
        assert own["run_id"] == run_id and own["origin"] != "group"
        assert "--runaudit-pull=delivery" in own["command"]  # the group's options, passed on
        assert item["evidence"]["teardown"] == own["teardown"]["answer"]
        broken = {entry["audit"] for entry in own["verdicts"] if entry["verdict"] in ("failed", "error")}
        assert (item["verdict"] == "failed") == (run_id == "seed-2"), item
        assert (run_id == "seed-2") == bool(broken), broken
        if broken:
            assert "did not hold" in item["message"] and any(audit in item["message"] for audit in broken)
    assert (
        outcome.report["teardown"]["answer"] == "no" and "own report" in outcome.report["teardown"]["reason"]
    )
    assert main(["report-index", "--root", str(root), "--report-dir", str(reports)]) == 0
    index = (reports / "index.html").read_text(encoding="utf-8")
    assert all(run_id in index for run_id in SEEDS) and f"{DEMO_GROUP}@group" not in index

    # A verdict a box once reached for seed-1 (kept in its report, where=<host>) is not this session's.
    own = json.loads((reports / "seed-1.json").read_text())
    box = {
        **own["verdicts"][0],
        "where": "box-a",
        "session": "earlier",
        "verdict": "failed",
        "message": "old",
    }
    own["verdicts"].append(box)
    (reports / "seed-1.json").write_text(json.dumps(own))
    again = run_audits(
        DEMO_GROUP, root, "-k", "seed-1", "--runaudit-pull", "delivery", report_stem=f"{DEMO_GROUP}@group"
    )
    kept = [
        item
        for item in json.loads((reports / "seed-1.json").read_text())["verdicts"]
        if item.get("where") == "box-a"
    ]
    assert kept, "the member's report no longer keeps the box's verdict: this case tests nothing"
    (member,) = [item for item in again.report["verdicts"] if item["subject"] == "seed-1"]
    assert member["verdict"] in ("passed", "disclosed"), member


def test_a_capsule_copied_without_a_run_id_of_its_own_fails_the_member_it_hides(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    """A seed's capsule copied to a second folder keeps its run id: only one of the two is audited and
    counted, so the member's verdict fails and names the copy (before, the copy was dropped in silence)."""
    root = tmp_path / "project"
    shutil.copytree(
        delivered["root"], root, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports")
    )
    shutil.copytree(root / "export" / "seed-1", root / "export" / "seed-1-rerun")
    outcome = run_audits(DEMO_GROUP, root, "-k", "seed-1 or seed-2", report_stem=f"{DEMO_GROUP}@group")
    assert outcome.report is not None and outcome.result.ret == 1
    members = {item["subject"]: item for item in outcome.report["verdicts"]}
    assert set(members) == {"seed-1", "seed-2"}  # the copy is no member of its own
    for run_id, item in members.items():
        assert (item["verdict"] == "failed") == (run_id == "seed-1"), item
    hidden = members["seed-1"]
    assert "seed-1-rerun" in hidden["message"] and "run id" in hidden["message"]
    assert hidden["evidence"]["copies"] == [str(root / "export" / "seed-1-rerun")]


def test_a_member_session_that_writes_no_report_is_failed_never_read_from_an_older_report(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], pytester: pytest.Pytester
) -> None:
    """A report left by an earlier session of the member is not this session's: the verdict says the
    member's session wrote none, with its exit status, and never repeats what the old report said."""
    pytester.makepyfile(
        break_members="""
        import runaudit.fixtures.sweep as sweep

        member_arguments = sweep.member_arguments
        sweep.member_arguments = lambda config, member: [*member_arguments(config, member), "--no-such-option"]
        """
    )
    pytester.syspathinsert()
    reports = pytester.path / "reports"
    reports.mkdir()
    stale = {"audit": "capsule.stale", "subject": "", "verdict": "failed", "message": "from an older session"}
    (reports / "seed-1.json").write_text(json.dumps({"run_id": "seed-1", "verdicts": [stale]}))
    outcome = run_audits(
        DEMO_GROUP,
        delivered["root"],
        "-p",
        "break_members",
        "-k",
        "seed-1",
        report_stem=f"{DEMO_GROUP}@group",
    )
    assert outcome.report is not None
    (member,) = outcome.report["verdicts"]
    assert member["verdict"] == "failed" and "wrote no report (exit 4)" in member["message"], member
    assert "capsule.stale" not in member["message"]


def test_a_capsule_whose_run_json_does_not_read_fails_the_group_session(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], tmp_path: Path
) -> None:
    """A capsule folder whose run.json is nested too deep to read was left out of ``--run=<group>``, and the
    sweep gate passed: whether it was a member nobody could say."""
    root = tmp_path / "project"
    shutil.copytree(
        delivered["root"], root, symlinks=True, ignore=shutil.ignore_patterns("*.lock", "reports")
    )
    (root / "export" / "broken").mkdir()
    (root / "export" / "broken" / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    outcome = run_audits(DEMO_GROUP, root, "-k", "broken", report_stem=f"{DEMO_GROUP}@group")
    assert outcome.report is not None and outcome.result.ret == 1
    (item,) = [entry for entry in outcome.report["verdicts"] if entry["audit"] == "sweep.member"]
    assert item["subject"] == "export/broken" and item["verdict"] == "failed"
    assert "whether it belongs to this group is unknown" in item["message"]
    assert outcome.report["teardown"]["answer"] == "no"


def test_a_group_past_the_member_cap_audits_none_until_told_how_many(
    run_audits: Callable[..., AuditRun], delivered: dict[str, Any], pytester: pytest.Pytester
) -> None:
    """A group session starts one session per member (~1 s each): 150 members ran past two minutes, and a
    root of thousands would keep the gate busy for hours. Past ``--runaudit-max-members`` it is one failed
    case that says how many there are, and no member session starts."""
    root = delivered["root"]
    listed = run_audits(DEMO_GROUP, root, "--collect-only", "-q", report_stem=f"{DEMO_GROUP}@group")
    members = [line for line in listed.result.outlines if "test_member[" in line]
    assert len(members) > 1, listed.result.outlines
    outcome = run_audits(
        DEMO_GROUP, root, f"--runaudit-max-members={len(members) - 1}", report_stem=f"{DEMO_GROUP}@group"
    )
    assert outcome.report is not None and outcome.result.ret == 1
    (item,) = outcome.report["verdicts"]
    assert (item["audit"], item["subject"], item["verdict"]) == (
        "sweep.member",
        f"{len(members)} members",
        "failed",
    )
    assert f"--runaudit-max-members={len(members)}" in item["message"]
    assert sorted(path.name for path in (pytester.path / "reports").glob("*.json")) == [
        f"{DEMO_GROUP}@group.json"
    ]
    allowed = run_audits(
        DEMO_GROUP, root, f"--runaudit-max-members={len(members)}", "--collect-only", "-q", report_stem="-"
    )
    assert [line for line in allowed.result.outlines if "test_member[" in line] == members


@pytest.mark.parametrize("value", ["0", "-3", "many", "2.5", "9" * 5000])
def test_a_member_cap_that_is_no_count_is_one_usage_line(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest("-p", "runaudit.fixtures.plugin", f"--runaudit-max-members={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [line for line in result.stderr.lines if "--runaudit-max-members" in line]
    assert "must be a whole number of runs" in line and len(line) < 200, line
