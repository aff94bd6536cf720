"""What the claims gate reads as a stated number, on the table and prose styles real papers and READMEs use."""

from __future__ import annotations

import contextlib
import re
from decimal import Decimal
from functools import partial
from pathlib import Path

import pytest
from cpu_time import least_cpu_seconds

from runaudit.documents import STATEMENT_CAP, DocumentError, Statement, Vocabulary, statements

# The linear-time bounds below read the CPU this test's own thread spent (tests/cpu_time.py): the other xdist
# workers sharing the cores stretch the wall clock (2.05 s on a loaded run) far more than that.
WORDS = Vocabulary(("accuracy", "cross_entropy"), ("clean", "noise"), ("baseline", "probe", "demo"))

# A NeurIPS-style booktabs table: a spanning header, \cmidrule, the best number in bold, row spacing, \%.
BOOKTABS = r"""\begin{table}[t]
  \caption{Results (mean $\pm$ s.e. over 3 seeds).}
  \begin{tabular}{lcc}
    \toprule
    & \multicolumn{2}{c}{Digits} \\
    \cmidrule(lr){2-3}
    Method & Accuracy [clean] (\%) & Cross-entropy [noise] \\
    \midrule
    baseline & 46.4 $\pm$ 2.0 & 1.51 $\pm$ 0.14 \\[2pt]
    probe & \textbf{49.12} & \underline{0.43} \\
    ResNet-18~\cite{he2016} & 51.0 & -- \\
    \bottomrule
  \end{tabular}
\end{table}
"""


def test_a_booktabs_table_gives_each_cell_its_column_and_row() -> None:
    found = statements(BOOKTABS, "latex", WORDS, "paper.tex")
    cells = {(item.subject, item.metric, item.condition): item.printed for item in found}
    assert cells[("baseline", "accuracy", "clean")].error == Decimal("2.0")
    assert cells[("baseline", "cross_entropy", "noise")].value == Decimal("1.51")
    assert cells[("probe", "accuracy", "clean")].decimals == 2  # \textbf{} read through
    assert cells[("probe", "cross_entropy", "noise")].text == "0.43"
    other = [item for item in found if item.subject is None]  # a row naming no run or arm of ours
    assert [item.printed.text for item in other] == ["51.0"]
    assert all(item.where == "table" for item in found) and {item.line for item in found} == {9, 10, 11}


def test_latex_prose_reads_percent_signs_and_math_and_skips_layout_and_references() -> None:
    text = (
        "Our model reaches an accuracy of 98.05\\,\\% on clean digits \\cite{x}, and\n"
        "its cross-entropy under noise is $0.4341$. \\vspace{0.5em} See Table~\\ref{tab:2}.\n"
        "% runaudit: ignore\n"
        "Chance accuracy is 10.0\\%.\n"
    )
    found = statements(text, "latex", WORDS, "paper.tex")
    assert [(item.line, item.printed.text, item.metric, item.condition) for item in found] == [
        (1, "98.05 %", "accuracy", "clean"),
        (2, "0.4341", "cross_entropy", "noise"),
    ]


def test_markdown_code_deltas_integers_and_other_metrics_are_not_claims() -> None:
    text = "\n".join(
        [
            "Accuracy improves by 1.2 points (+0.4 on noise) after 10 epochs; F1 is 0.91.",
            "",
            "```",
            "accuracy = 0.5",
            "```",
            "",
            "Run `pytest --accuracy 0.75` first.",
            "",
            "The probe reaches an accuracy of 49.12 and a cross entropy of 0.43 under noise.",
        ]
    )
    found = statements(text, "markdown", WORDS, "README.md")
    assert [(item.printed.text, item.metric, item.subject) for item in found] == [
        ("49.12", "accuracy", "probe"),  # "F1 is 0.91" names no declared metric
        ("0.43", "cross_entropy", "probe"),
    ]
    assert found[1].condition == "noise" and found[0].condition is None


def test_an_anchor_pins_the_result_after_it_not_a_count() -> None:
    text = "<!-- runaudit: probe/main/accuracy/clean --> Seed 4 of the probe ends at 49.12.\n"
    (item,) = statements(text, "markdown", WORDS, "README.md")
    assert (item.anchor, item.printed.text, item.line) == ("probe/main/accuracy/clean", "49.12", 1)


def test_a_plain_csv_and_a_long_csv_name_their_metrics() -> None:
    wide = "method,accuracy (clean),cross_entropy (noise)\nbaseline,0.834,1.51\nprobe,0.912,0.43\n"
    found = statements(wide, "csv", WORDS, "results.csv")
    assert [(item.line, item.subject, item.metric, item.printed.text) for item in found] == [
        (2, "baseline", "accuracy", "0.834"),
        (2, "baseline", "cross_entropy", "1.51"),
        (3, "probe", "accuracy", "0.912"),
        (3, "probe", "cross_entropy", "0.43"),
    ]
    long = "run,metric,condition,value\ndemo,accuracy,clean,0.9805\ndemo,f1,clean,0.97\n"
    (item,) = statements(long, "csv", WORDS, "long.csv")
    assert (item.subject, item.metric, item.condition, item.printed.decimals) == (
        "demo",
        "accuracy",
        "clean",
        4,
    )


@pytest.mark.parametrize(
    ("form", "text"),
    [
        ("latex", "{" * 100_000 + "accuracy 0.5" + "}" * 100_000),
        ("markdown", ">" * 100_000 + " accuracy 0.5"),
        ("csv", '"accuracy,0.5\n' * 1000),
    ],
    ids=["latex-nested-100k", "markdown-quotes-100k", "csv-unclosed-quote"],
)
def test_hostile_documents_are_one_error_or_read_without_a_crash(form: str, text: str) -> None:
    try:
        found = statements(text, form, WORDS, f"hostile.{form}")
    except DocumentError as exc:
        assert "hostile" in str(exc)
    else:
        assert all(item.metric in (None, "accuracy") for item in found)


def test_the_generated_csv_carries_its_provenance(tmp_path: Path) -> None:
    text = (
        "arm,metric,condition,mean,standard_error,n,shown,runs\n"
        "short,accuracy,clean,0.8341,0.054,3,0.834 ± 0.054,seed-1@aa seed-2@bb seed-3@cc\n"
    )
    (item,) = statements(text, "csv", WORDS, "results.csv")
    assert item.printed.text == "0.834 ± 0.054" and item.subject == "short"
    assert item.provenance == (("seed-1", "aa"), ("seed-2", "bb"), ("seed-3", "cc"))


# Styles a review of the gate found misread; each case failed before its fix.
TWO_ROW_HEADER = r"""\begin{tabular}{lcc}
\toprule
Model & \multicolumn{2}{c}{Accuracy (\%)} \\
\cmidrule(lr){2-3}
 & clean & noise \\
\midrule
\rowcolor{gray!20} demo & \cellcolor{blue!10}98.12 & 86.41 \\
\bottomrule
\end{tabular}
\begin{equation} L = 0.5 \cdot \mathrm{accuracy} \end{equation}
"""


def test_a_two_row_header_with_colours_and_a_percent_heading() -> None:
    found = statements(TWO_ROW_HEADER, "latex", WORDS, "paper.tex")
    assert [
        (item.subject, item.metric, item.condition, item.printed.text, item.printed.percent) for item in found
    ] == [
        ("demo", "accuracy", "clean", "98.12", True),
        ("demo", "accuracy", "noise", "86.41", True),
    ]


def test_each_number_takes_the_condition_of_its_own_part_of_the_sentence() -> None:
    text = "The demo reaches an accuracy of 98.12 % on clean and 86.41 % under noise.\n"
    found = statements(text, "markdown", WORDS, "README.md")
    assert [(item.printed.text, item.condition) for item in found] == [
        ("98.12 %", "clean"),
        ("86.41 %", "noise"),
    ]


def test_glued_names_delta_columns_and_code_in_cells() -> None:
    text = "| run | val_accuracy | Δ accuracy | cross_entropy |\n|---|---|---|---|\n| demo | 0.9812 | +0.61 | `0.43` |\n"
    found = statements(text, "markdown", WORDS, "README.md")
    assert [(item.metric, item.printed.text) for item in found] == [("accuracy", "0.9812")]


@pytest.mark.parametrize(
    "text", ["\ufeffrun,metric,value\ndemo,accuracy,0.9812\n", "run;metric;value\ndemo;accuracy;0.9812\n"]
)
def test_a_csv_with_a_byte_order_mark_or_semicolons(text: str) -> None:
    (item,) = statements(text, "csv", WORDS, "results.csv")
    assert (item.subject, item.metric, item.printed.text) == ("demo", "accuracy", "0.9812")


def test_a_long_sentence_of_numbers_is_read_in_linear_time() -> None:
    text = "accuracy " + ", ".join(f"0.{index:04d}" for index in range(STATEMENT_CAP)) + ".\n"
    assert len(statements(text, "markdown", WORDS, "README.md")) == STATEMENT_CAP
    with pytest.raises(DocumentError, match=f"more than {STATEMENT_CAP} numbers"):
        statements(text.replace(".\n", ", 0.5.\n"), "markdown", WORDS, "README.md")


@pytest.mark.parametrize("form", ["markdown", "latex", "csv"])
def test_a_nul_byte_refuses_the_document(form: str) -> None:
    """``demo,0.98\\x0005`` was read as 0.98 and passed against 0.9805: a NUL ends what a reader sees."""
    text = "run,accuracy\ndemo,0.98\x0005\n" if form == "csv" else "accuracy of 0.98\x0005 on clean.\n"
    with pytest.raises(DocumentError, match="NUL byte at line"):
        statements(text, form, WORDS, "results.csv")


def _prose(number: str) -> str:
    return f"The probe reaches an accuracy of {number} on clean.\n"


def _table(cell: str) -> str:
    return f"| run | accuracy (%) |\n|---|---|\n| probe | {cell} |\n"


# Each document shows 97.05 (or 98.05) where the gate read, before this check, 7.05, 50.89 or 74.05.
HIDDEN = {
    "zero-width space": ("markdown", _prose("9\u200b7.05 %"), "U+200B"),
    "joiner after the point": ("markdown", _prose("97.\u200d05 %"), "U+200D"),
    "soft hyphen in a csv cell": ("csv", "run,accuracy\ndemo,0.98\u00ad05\n", "U+00AD"),
    "grapheme joiner": ("markdown", _prose("9\u034f7.05 %"), "U+034F"),
    "variation selector": ("markdown", _prose("9\ufe0f7.05 %"), "U+FE0F"),
    "tag character": ("csv", "run,accuracy\ndemo,0.9\U000e00208\n", "U+E0020"),
    "between bold markers": ("markdown", _prose("9**\u200b**7.05 %"), "U+200B"),
    "in a table cell": ("markdown", _table("9**\u200b**7.05"), "U+200B"),
    "in a latex group": ("latex", "accuracy of 9{\u200b}7.05\\% on clean.\n", "U+200B"),
    "as a character reference": ("markdown", _prose("9&#8203;7.05 %"), "U+200B"),
    "as a named reference": ("markdown", _prose("9&ZeroWidthSpace;7.05 %"), "U+200B"),
    "an html comment": ("markdown", _prose("9<!-- -->7.05 %"), "inline HTML"),
    "an empty span": ("markdown", _prose("9<span></span>7.05 %"), "inline HTML"),
    "an empty subscript": ("markdown", _prose("9<sub></sub>7.05 %"), "inline HTML"),
    "right-to-left override": ("markdown", _prose("\u202e 50.89 \u202c%"), "override"),
    "override in a csv cell": ("csv", "run,accuracy\ndemo,\u202e 50.89\n", "override"),
    "override as a reference": ("markdown", _prose("&#x202E;50.89&#x202C; %"), "override"),
    "override in latex": ("latex", "accuracy of \u202e 50.89 \u202c\\% on clean.\n", "override"),
    "bengali digits beside ascii ones": ("markdown", _prose("\u09ed\u09ea.05 %"), "two scripts"),
    "a beamer overlay": ("latex", _prose(r"\only<2>{9}7.05\%"), "overlay"),
    "a beamer overlay with its other slides": ("latex", _prose(r"\alt<2>{9}{}7.05\%"), "overlay"),
    "an overlay over the point": ("latex", _prose(r"97\uncover<2->{.}05\%"), "overlay"),
    "a box scaled to nothing": ("latex", _prose(r"\scalebox{0}{9}7.05\%"), "inside a number"),
    "a box resized to nothing": ("latex", _prose(r"9\resizebox{0pt}{!}{7}.05\%"), "inside a number"),
    "a box of no width": ("latex", _prose(r"\makebox[0pt]{9}7.05\%"), "inside a number"),
    "a negative kern": ("latex", _prose(r"9\kern-1em 7.05\%"), "kern"),
    "a negative kern of nothing": ("latex", _prose(r"9\kern-0em{}9.99\%"), "kern"),
    "a grouped negative kern": ("latex", _prose(r"9{\kern-1em}7.05\%"), "kern"),
    "a box scaled to nothing, grouped": ("latex", _prose(r"\scalebox{0}{{9}}7.05\%"), "inside a number"),
    "a box raised out of the page": ("latex", _prose(r"\raisebox{99cm}{9}7.05\%"), "inside a number"),
    "a box scaled to nothing, then a comment": (
        "latex",
        _prose("\\scalebox{0}{9}%\n7.05\\%"),
        "inside a number",
    ),
    "a grouped overlay": ("latex", _prose(r"{\only<2>{9}}7.05\%"), "overlay"),
    "an overlay's other slides": ("latex", _prose(r"\alt<2>{}{9}7.05\%"), "overlay"),
    "an overlay, then a comment": ("latex", _prose("\\only<2>{9}%\n7.05\\%"), "overlay"),
    "a box placed in picture mode": ("latex", _prose(r"\makebox(0,0){9}7.05\%"), "picture-mode"),
    "a frame placed in picture mode": ("latex", _prose(r"\framebox(0,0)[l]{9}7.05\%"), "picture-mode"),
}


@pytest.mark.parametrize("case", list(HIDDEN))
def test_a_number_shown_otherwise_than_it_is_read_refuses_the_document(case: str) -> None:
    """An invisible character or inline HTML between two digits, a bidirectional override, or digits of two
    scripts: the page shows one number and the text held another, which the gate read and passed."""
    form, text, named = HIDDEN[case]
    with pytest.raises(DocumentError, match="what is checked would not be what is shown") as refused:
        statements(text, form, WORDS, "paper")
    assert named in str(refused.value)


def _latex(number: str) -> str:
    return f"The probe reaches an accuracy of {number}\\% on clean.\n"


@pytest.mark.parametrize(
    "command",
    [
        r"\hspace{0pt}", r"\hspace*{0pt}", r"\label{x}", r"\relax ", r"\kern0pt ", r"\hskip 0pt ", r"\!",
        r"\mbox{}", r"{\vspace{1em}}", r"\textcolor{red}{}", r"\cellcolor{red}", r"$\!$", r"\mycommand{}",
        r"\resizebox{1cm}{!}{8}", r"\iffalse{ }\fi", r"\makebox[0pt]{}", r"\-", r"\begin{math}\end{math}",
        r"\phantom{}", r"\textsuperscript{}", " \\unskip", r" \hspace{-\fontdimen2\font}",
    ],
)  # fmt: skip
def test_a_latex_command_that_prints_nothing_inside_a_number_refuses_the_document(command: str) -> None:
    """``9\\hspace{0pt}7.05`` is typeset 97.05 and was read as 7.05: a layout command's place is a space to the
    reader, and a command it does not know (one the paper defines) prints what the reader cannot see. Space
    before the command counts for nothing (``\\unskip`` takes it back), in prose and in table cells."""
    for number in (f"9{command}7.05", f"97.{command}05"):
        for document in (_latex(number), _latex_table(number)):
            with pytest.raises(DocumentError, match="stands (inside|against) a number"):
                statements(document, "latex", WORDS, "paper.tex")


def _latex_table(cell: str) -> str:
    return (
        "\\begin{tabular}{lc}\n\\toprule\nRun & Accuracy (clean) \\\\\n\\midrule\n"
        f"probe & {cell} \\\\\n\\bottomrule\n\\end{{tabular}}\n"
    )


@pytest.mark.parametrize(
    "document",
    [
        "\\newcommand{\\nine}{9}\n" + _latex("\\nine7.05"),
        "\\def\\one{1}\n" + _latex("7.05\\one"),
        _latex("9^^@7.05"),
        _latex("\\char`\\97.05"),
        "\\catcode`\\@=9\n" + _latex("9@7.05"),
        "\\newcommand{\\nine}{9}\n" + _latex("\\nine{}7.05"),
        "\\newcommand{\\todo}[1]{}\n" + _latex("9\\todo{: }7.05"),
        "\\renewcommand{\\ldots}{9}\n" + _latex("\\ldots7.05"),
        "\\def~{9}\n" + _latex("~7.05"),
        "\\DeclareUnicodeCharacter{2014}{9}\n" + _latex("\u20147.05"),
        "\\label{nine}\n" + _latex("\\ref{nine}7.05"),
        _latex("\\textbf{9 \\unskip7.05}"),
        _latex("9\\discretionary{(}{)}{}7.05"),
        _latex("9\\nolinebreak7.05"),
        _latex("9\\rlap{\\hphantom{:}}7.05"),
        _latex("\\num[round-mode=figures,round-precision=1]{97.05}"),
        _latex_table("9 & 7.05").replace("{lc}", "{lr@{}l}").replace("Run & Accuracy (clean)", "Run & \\multicolumn{2}{c}{Accuracy (clean)}"),
        _latex_table("7.05").replace("{lc}", "{l>{9}c}"),
        _latex_table("\\multicolumn{1}{>{9}c}{7.05}"),
    ],
    ids=[
        "a command of the paper's own before", "after", "a ^^ escape", "char", "catcode", "with an empty group",
        "with an argument it drops", "a known command redefined", "an active character defined",
        "a unicode character defined", "a reference", "inside a command the converter prints", "discretionary",
        "nolinebreak", "an overprinting box", "siunitx rounding", "columns joined by @{}",
        "a column that prints text", "a multicolumn that prints text",
    ],
)  # fmt: skip
def test_what_the_paper_defines_or_codes_beside_a_number_refuses_the_document(document: str) -> None:
    """A command the paper defines is not expanded by the reader (``\\nine7.05`` is typeset 97.05 and was read
    as 7.05), TeX's character codes typeset other characters than the text holds, a reference prints a
    number of its own, a column specification prints into cells or joins two, and siunitx rounds."""
    with pytest.raises(
        DocumentError, match="stands (inside|against) a number|character codes|columns?|rounds"
    ):
        statements(document, "latex", WORDS, "paper.tex")


@pytest.mark.parametrize(
    ("number", "read"),
    [
        ("97.05", ["97.05%"]),
        (r"9{}7.05", ["97.05%"]),  # an empty group: typeset and read as one number
        ("9%\n7.05", ["97.05%"]),  # a comment swallows the line's end in both
        (r"1\,000", []),  # a thin space between digits groups them: neither side is read alone
        (r"98.1\hfill 2", ["98.1", "2%"]),  # a visible gap
        (r"98.1\phantom{0}", ["98.1 %"]),
        (r"98.1\textsuperscript{1}", ["98.1 %"]),  # a note mark, not a digit of the number
        (r"\best{98.1}", ["98.1%"]),  # a command of the paper's own around the number: its argument is read
        ("$9 7.05$", ["97.05%"]),  # math prints no space
        (r"\ensuremath{9 7.05}", ["97.05%"]),
        (r"$9\,7.05$", []),  # a digit group in math too
        (r"\SI{97.05}{\percent}", ["97.05%"]),
        (r"{\bfseries 97.05}", ["97.05%"]),  # a font switch prints nothing before the number
        (r"97.05\tnote{a}", ["97.05 %"]),  # a table note's mark, a footnote mark, a symbol: shown beside it
        (r"97.05\footnotemark", ["97.05 %"]),
        (r"97.05\ding{51}", ["97.05 %"]),
        (r"9\cite{a}7.05", ["7.05%"]),  # a citation mark shows between
        (r"\label{x}97.05", ["97.05%"]),
        (r"\cellcolor{red}97.05", ["97.05%"]),
    ],
)
def test_latex_commands_beside_a_number_or_shown_inside_it_hide_nothing(number: str, read: list[str]) -> None:
    assert [item.printed.text for item in statements(_latex(number), "latex", WORDS, "paper.tex")] == read


@pytest.mark.parametrize(
    ("form", "text", "read"),
    [
        ("markdown", _prose("\u200e98.05 %"), ["98.05 %"]),  # a left-to-right mark before a number
        ("markdown", "On A100\u200cها the probe reaches an accuracy of 98.05 % on clean.\n", ["98.05 %"]),
        ("markdown", "\ufeffThe probe reaches an accuracy of 98.05 % on clean.\n", ["98.05 %"]),
        ("markdown", "ResNet\u00ad50: the probe reaches an accuracy of 98.05 % on clean.\n", ["98.05 %"]),
        ("markdown", _prose("98.05 %") + "Trained 10<sup>4</sup> steps 👩\u200d💻.\n", ["98.05 %"]),
        ("markdown", _prose("\u0669\u0668.\u0660\u0665 %"), ["\u0669\u0668.\u0660\u0665 %"]),  # Arabic-Indic
        ("markdown", "The probe's accuracy·98.05 % on clean.\n", ["98.05 %"]),
        ("markdown", "\ue000\ue100 The probe reaches an accuracy of 98.05 % on clean.\n", ["98.05 %"]),
    ],
)
def test_invisible_characters_beside_a_number_hide_nothing(form: str, text: str, read: list[str]) -> None:
    """A mark, joiner or BOM beside a number (not inside it) is read through; the document is not refused. A
    private-use character that the readers use for their own anchor marks is text (it raised IndexError)."""
    assert [item.printed.text for item in statements(text, form, WORDS, "README.md")] == read


@pytest.mark.parametrize(
    "number", ["88·05 %", "98\u202405 %", "88&middot;05 %", "98,05 %", "98\u202f05 %", "3·10⁻⁴ %", "1,234.5"]
)
def test_a_number_split_by_a_point_or_a_group_separator_is_not_read_in_part(number: str) -> None:
    """``98․05 %`` was read as ``05 %`` (5 %): a decimal comma, a raised point, a product or a digit group
    joins two digit runs that neither stand alone."""
    assert statements(_prose(number), "markdown", WORDS, "README.md") == []


@pytest.mark.parametrize(
    ("cell", "read"),
    [
        ("$9 7.05$", ["97.05"]),
        (r"{\footnotesize 97.05}", ["97.05"]),
        (r"97.05{\scriptsize$\pm$0.3}", ["97.05±0.3"]),
    ],
)
def test_latex_cells_read_as_typeset(cell: str, read: list[str]) -> None:
    assert [item.printed.text for item in statements(_latex_table(cell), "latex", WORDS, "paper.tex")] == read


def test_a_table_in_a_box_and_rows_ended_otherwise_are_read_row_by_row() -> None:
    """A tabular inside ``\\resizebox`` gave no claims at all; a row ended by ``\\tabularnewline`` was
    joined to the next, so one run's clean value was checked as another's."""
    table = (
        "\\resizebox{\\columnwidth}{!}{\\begin{tabular}{lcc}\n\\toprule\nRun & Accuracy (clean) & Accuracy "
        "(noise) \\tabularnewline\n\\midrule\nprobe & 97.05 & 86.41 \\tabularnewline\nbaseline & 7.05 & 8.00 \\\\\n"
        "\\bottomrule\n\\end{tabular}}\n"
    )
    found = statements(table, "latex", WORDS, "paper.tex")
    assert [(item.printed.text, item.subject, item.condition) for item in found] == [
        ("97.05", "probe", "clean"), ("86.41", "probe", "noise"), ("7.05", "baseline", "clean"),
        ("8.00", "baseline", "noise"),
    ]  # fmt: skip


@pytest.mark.parametrize("latex", [r"\textcolor{{r}}", r"{\colorbox{{a}}}", r"\fcolorbox{{a}}{b}"])
def test_latex_the_converter_cannot_print_is_not_a_crash(latex: str) -> None:
    statements(_latex(f"{latex} 97.05"), "latex", WORDS, "paper.tex")


def test_a_preamble_that_defines_colours_and_commands_away_from_numbers_is_read() -> None:
    """``\\definecolor`` starts like ``\\def`` followed by a character: it was refused as an active character
    defined. Commands the paper defines are refused only against a number."""
    preamble = "\\definecolor{best}{RGB}{0,128,0}\n\\newcommand{\\ours}{RunAudit\\xspace}\n\\let\\oldS\\S\n"
    found = statements(preamble + _latex("97.05") + "\\ours{} is ours.\n", "latex", WORDS, "paper.tex")
    assert [item.printed.text for item in found] == ["97.05%"]


# A third helper round: tables whose cells join or change meaning, and prose whose run is named twice.
JOINED = "\\toprule\nRun & \\multicolumn{2}{c}{Accuracy (clean)} \\\\\n\\midrule\nprobe & 9 & 7.05 \\\\\n\\bottomrule\n"


def _cell(cell: str) -> str:
    return f"\\toprule\nRun & Accuracy (clean) \\\\\n\\midrule\nprobe & {cell} \\\\\n\\bottomrule\n"


def _read_or_refused(document: str, kind: str) -> None:
    """Read ``document``; a refusal is an answer too, as long as it comes in time."""
    with contextlib.suppress(DocumentError):
        statements(document, kind, WORDS, f"p.{'tex' if kind == 'latex' else 'md'}")


def _probe_cell(cell: str) -> list[Statement]:
    """What a LaTeX table reads of the probe's cell under ``Accuracy (clean)``."""
    return statements(
        _tabular(f"Run & Accuracy (clean) \\\\\nprobe & {cell} \\\\\n"), "latex", WORDS, "p.tex"
    )


def _tabular(
    body: str, begin: str = "\\begin{tabular}{lc}", end: str = "\\end{tabular}", before: str = ""
) -> str:
    return f"{before}{begin}\n{body}{end}\n"


@pytest.mark.parametrize(
    "document",
    [
        _tabular(JOINED, "\\begin{tabular}[t]{lr@{}l}"),
        _tabular(JOINED, "\\begin{tabular}{lr@{{{}}}l}"),
        _tabular(JOINED, "\\begin{longtable}{lr@{}l}", "\\end{longtable}"),
        _tabular(JOINED, "\\begin{tabular}{lr@{\\hspace{0pt}}l}"),
        _tabular(JOINED, "\\begin{tabular}{lr!{\\hspace{-2\\tabcolsep}}l}"),
        _tabular(JOINED, "\\begin{tabular}{lr>{\\hspace{-2\\tabcolsep}}l}"),
        _tabular(JOINED, "\\begin{tabular}{lRl}", before="\\newcolumntype{R}{r@{}}\n"),
        _tabular(_cell("7.05"), "\\begin{tabular}{lN}", before="\\newcolumntype{N}{>{9}c}\n"),
        _tabular(JOINED, "\\begin{tabular}{l\\myspec}", before="\\newcommand{\\myspec}{r@{}l}\n"),
        _tabular(
            JOINED.replace("9 & 7.05", "\\multicolumn{1}{r@{}}{9} & \\multicolumn{1}{@{}l}{7.05}"),
            "\\begin{tabular}{lrl}",
        ),
        _tabular(
            "\\toprule\nRun & Accuracy (clean) \\\\\n\\midrule\nprobe & 97.05 \\\\\n\\midrule\n"
            "Run & Accuracy (noise) \\\\\n\\midrule\nprobe & 80.00 \\\\\n\\bottomrule\n"
        ),
        _tabular(
            "\\toprule\nRun & Accuracy \\\\\n\\midrule\n\\multicolumn{2}{l}{\\textit{clean}} \\\\\nprobe & 97.05 "
            "\\\\\n\\multicolumn{2}{l}{\\textit{noise}} \\\\\nprobe & 80.00 \\\\\n\\bottomrule\n"
        ),
        _tabular(
            "\\toprule\nRun & Accuracy (clean) \\\\\n\\midrule\nprobe & 7.05 \\\\[-\\normalbaselineskip]\n"
            " & 9\\hphantom{7.05} \\\\\n\\bottomrule\n",
            "\\begin{tabular}{lr}",
        ),
        _latex("\\rlap{9}\\phantom{9}7.05"),
        _latex("\\rlap{$-$}\\phantom{$-$}97.05"),
        _latex("\\input{nine}7.05"),
        _latex("9\\url{}7.05"),
        _latex("9\\includegraphics[width=1pt]{blank}7.05"),
        "\\expandafter\\let\\csname quad\\endcsname\\relax\n" + _latex("9\\quad7.05"),
        "\\RenewCommandCopy\\quad\\relax\n" + _latex("9\\quad7.05"),
        "\\sisetup{round-mode={figures},round-precision={1}}\n" + _latex("\\num{97.05}"),
        "\\sisetup{round-mode=%\nfigures}\n" + _latex("\\num{97.05}"),
        "The probe outperforms the baseline on clean, reaching an accuracy of 97.05\\%.\n",
    ],
    ids=[
        "[t] before the spec", "@{} in nested braces", "longtable", "@{\\hspace{0pt}}", "!{negative space}", ">{negative space}",
        "a column type with @{}", "a column type printing", "a spec from a command", "multicolumns' @{} edges",
        "a second header panel", "section rows naming conditions", "a row moved onto another",
        "an overprinted digit", "an overprinted sign", "an input", "an empty url", "an image",
        "a csname let", "a command copy", "rounding in braces", "rounding after a comment",
        "two runs before the number",
    ],
)  # fmt: skip
def test_tables_and_sentences_a_reader_reads_otherwise_refuse_the_document(document: str) -> None:
    """Each of these was accepted while the PDF shows another number, sign, condition or run than the one
    read: cells joined or shifted by the column specification, a header inside the body, a zero-width box
    over a digit, a reference or insertion against a number, a redefinition the check did not know, or a
    run named after a number as well as before it."""
    with pytest.raises(DocumentError):
        statements(document, "latex", WORDS, "paper.tex")


def _read(document: str) -> list[tuple[str, str | None, str | None, str | None]]:
    return [
        (item.printed.text, item.metric, item.condition, item.subject)
        for item in statements(document, "latex", WORDS, "paper.tex")
    ]


def test_tables_that_were_refused_or_shifted_are_read_as_typeset() -> None:
    """A row after a rule that starts with a digit (a seed, a noise level) was refused; a multicolumn whose
    last argument follows a space lost its span; a longtable's repeated head replaced its first head;
    NiceTabular and tblr tables gave no claims; a run named only after its number had none."""
    seeds = _tabular("Seed & Accuracy (clean) \\\\\n\\hline\n1 & 97.05 \\\\\n\\hline\n2 & 96.10 \\\\\n")
    assert _read(seeds) == [("97.05", "accuracy", "clean", None), ("96.10", "accuracy", "clean", None)]
    spanned = _tabular(
        "\\toprule\nRun & \\multicolumn{2}{c} {Accuracy (clean)} & Accuracy (noise) \\\\\n\\midrule\n"
        "probe & 97.05 & 96.80 & 80.00 \\\\\n\\bottomrule\n",
        "\\begin{tabular}{lccc}",
    )
    assert ("80.00", "accuracy", "noise", "probe") in _read(spanned)
    repeated = _tabular(
        "Run & Accuracy (noise) \\\\\n\\midrule\n\\endhead\nRun & Accuracy (clean) \\\\\n\\midrule\n"
        "\\endfirsthead\nprobe & 97.05 \\\\\n",
        "\\begin{longtable}{lc}",
        "\\end{longtable}",
    )
    assert _read(repeated) == [("97.05", "accuracy", "clean", "probe")]
    for environment in ("NiceTabular", "tblr"):
        nice = _tabular(_cell("97.05"), f"\\begin{{{environment}}}{{lc}}", f"\\end{{{environment}}}")
        assert _read(nice) == [("97.05", "accuracy", "clean", "probe")]
    assert _read("The accuracy on clean is 97.05\\% for the probe.\n") == [
        ("97.05%", "accuracy", "clean", "probe")
    ]


def test_a_run_named_right_after_its_number_is_its_run() -> None:
    """ "… 96.00 % for the baseline" after "The probe achieves …" credited the probe (two swapped values both
    passed); "97.05 % accuracy on clean data" lost its condition where the metric followed the number."""
    assert _read("The accuracy on clean is 97.05\\% for the probe and 96.00\\% for the baseline.\n") == [
        ("97.05%", "accuracy", "clean", "probe"),
        ("96.00%", "accuracy", "clean", "baseline"),
    ]
    compared = "The probe achieves 97.05\\% accuracy on clean data, compared to 96.00\\% for the baseline.\n"
    assert _read(compared) == [
        ("97.05%", "accuracy", "clean", "probe"),
        ("96.00%", "accuracy", "clean", "baseline"),
    ]


def test_a_positive_gap_between_columns_is_read() -> None:
    """``@{\\hspace{4mm}}``, ``@{\\quad}`` and ``\\extracolsep`` space columns apart; they were refused as joins."""
    for spec in ("{l@{\\hspace{4mm}}c}", "{l@{\\quad}c}", "{l@{\\extracolsep{\\fill}}c}"):
        assert _read(_tabular(_cell("97.05"), f"\\begin{{tabular}}{spec}")) == [
            ("97.05", "accuracy", "clean", "probe")
        ]


@pytest.mark.parametrize("stated", ["$97.05$%", "$97.05$ %", "$97.05$\\%", "$97.05\\%$", "97.05$\\%$"])
def test_a_percent_sign_after_markdown_math_is_the_numbers_own(stated: str) -> None:
    """``$97.05$%`` is drawn 97.05 %: read as a plain 97.05, a correct accuracy failed against its share."""
    [found] = statements(
        f"The probe reaches an accuracy of {stated} on clean data.", "markdown", WORDS, "p.md"
    )
    assert (found.printed.value, found.printed.percent) == (Decimal("97.05"), True)


@pytest.mark.parametrize(
    ("form", "stated"),
    [
        ("latex", r"$97.05_{\pm0.3}$\%"),
        ("latex", r"$\mathbf{97.05}_{\pm0.3}$\%"),
        ("latex", r"97.05\%$_{\pm 0.3}$"),
        ("latex", r"97.05\% $\pm$ 0.3\%"),
        ("latex", r"97.05~\% $\pm$ 0.3~\%"),
        ("latex", r"97.05\% ($\pm$0.3\%)"),
        ("latex", r"$97.05$\% {\small($\pm 0.3$)}"),
        ("markdown", "97.05 % (±0.3 %)"),
        ("markdown", "97.05% (+/- 0.3)"),
        ("markdown", "97.05 %<sub>±0.3</sub>"),
        ("markdown", "97.05<sub>± 0.3</sub> %"),
        ("markdown", "97.05 (±0.3 %)"),
        ("markdown", "97.05 % &plusmn; 0.3 %"),
        ("markdown", "97.05&nbsp;% (&#177;0.3&nbsp;%)"),
        ("markdown", "97.05<sub>(±0.3)</sub> %"),
        ("markdown", "97.05 %<sup>±0.3</sup>"),
        ("markdown", "97.05 % [±0.3]"),
        ("markdown", "**97.05 %** ± 0.3 %"),
        ("markdown", "97.05 % ± **0.3 %**"),
        ("markdown", "97.05 %\n± 0.3 %"),
        ("latex", r"$97.05_{(\pm 0.3)}$\%"),
        ("latex", r"$97.05^{\pm0.3}$\%"),
        ("latex", r"97.05\textsubscript{$\pm$0.3}\%"),
        ("latex", "97.05\\%\n$\\pm$ 0.3\\%"),
    ],
)
def test_an_error_after_the_percent_sign_set_as_an_index_or_in_parentheses_is_the_numbers_own(
    form: str, stated: str
) -> None:
    """Each was read as two claims, the error a second accuracy of 0.3 % that no artifact holds."""
    document = "p.tex" if form == "latex" else "p.md"
    [found] = statements(f"The probe reaches an accuracy of {stated} on clean data.", form, WORDS, document)
    assert (found.metric, found.condition, found.subject) == ("accuracy", "clean", "probe")
    assert (found.printed.value, found.printed.error, found.printed.percent) == (
        Decimal("97.05"),
        Decimal("0.3"),
        True,
    )


@pytest.mark.parametrize(
    ("form", "stated", "unread"),
    [
        ("markdown", "97.05 % ± 0,9 %", "± 0,9"),
        ("markdown", "97.05 % (±.9)", "(±.9)"),
        ("markdown", "97.05 % (±3e-1)", "(±3e-1)"),
        ("markdown", "97.05 % (±0.3 pp)", "(±0.3 pp)"),
        ("markdown", "97.05 %&#8203;&plusmn; 0.3 %", "\u200b± 0.3 %"),
        ("latex", r"97.05\% $\pm$ 0{,}3\%", "± 0,3%"),
    ],
)
def test_an_error_in_a_form_not_read_leaves_its_number_unwhole(form: str, stated: str, unread: str) -> None:
    """The ± was dropped and the number passed on its value (``± 0,9`` was read as ± 0): a wrong error was
    never checked. Now the number says what stood beside it, and the gate lists it ``not_run``; the error's
    own digits are no claim either (``0.3 %`` after an invisible character was a second accuracy)."""
    document = "p.tex" if form == "latex" else "p.md"
    [found] = statements(f"The probe reaches an accuracy of {stated} on clean data.", form, WORDS, document)
    assert (found.printed.value, found.printed.error) == (Decimal("97.05"), None)
    assert found.printed.error_unread is not None and found.printed.error_unread.startswith(unread)


@pytest.mark.parametrize(
    ("form", "stated"),
    [
        ("markdown", "97.05 %, ± 0.90 %"),
        ("markdown", "97.05 % (3 seeds) +/-0.9 %"),
        ("markdown", "97.05 % ($\\pm$0.9 over 3 seeds)"),
        ("markdown", "97.05 % ± `0.9` %"),
        ("markdown", "97.05 %<sup>1</sup> ± 0.90 %"),
        ("markdown", "97.05 % (3 seeds) ± 0.90 %"),
        ("markdown", "97.05 % ± 0.3 % ± 0.9 %"),
        ("latex", r"\textbf{97.05\%}$^\dagger$ $\pm$ 0.90"),
    ],
)
def test_an_error_the_pattern_cannot_join_is_no_value_and_leaves_its_number_unwhole(
    form: str, stated: str
) -> None:
    """Its digits were a claim of their own, and skipping them passed a wrong error with its value: the
    error belongs to the number read just before it, which the gate then lists ``not_run``."""
    document = "p.tex" if form == "latex" else "p.md"
    [found] = statements(f"The probe reaches an accuracy of {stated} on clean data.", form, WORDS, document)
    assert found.printed.value == Decimal("97.05") and found.printed.error_unread is not None
    assert "0.9" in found.printed.error_unread or "`" in stated  # a code span is blank to the reader
    # A ± with no number near before it leaves what follows a number of its own.
    for text in (
        "The probe, within ±\n99.99 % accuracy on clean data.",
        "It took 2.5 h. The probe reaches ± 99.99 % accuracy on clean data.",
    ):
        alone = statements(text, "markdown", WORDS, "p.md")[-1]
        assert (alone.printed.value, alone.printed.error_unread) == (Decimal("99.99"), None), text


def test_a_plus_minus_in_a_superscript_of_an_integer_is_a_power() -> None:
    """``$2^{\\pm1}$`` is two to the power ±1, no number with its error; after a decimal or a percent sign, a
    whole error in a superscript is the number's own (``97.05 %<sup>±2</sup>`` passed unchecked)."""
    read = statements(
        r"Its accuracy on clean data scales by $2^{\pm1}$ and is 97.05\%.", "latex", WORDS, "p.tex"
    )
    assert [(found.printed.value, found.printed.error) for found in read] == [(Decimal("97.05"), None)]
    for stated in ("97.05 %<sup>±2</sup>", "97.05<sup>(±2)</sup> %"):
        [found] = statements(
            f"The probe reaches an accuracy of {stated} on clean data.", "markdown", WORDS, "p.md"
        )
        assert found.printed.error == Decimal("2"), stated


def test_an_error_is_joined_on_its_line_only_and_in_linear_time() -> None:
    """Two runs of white space in a row made the pattern quadratic: a number before a 64 kB code span (blank to
    the pattern) took 27 s. A ± after a percent sign in the next paragraph is a number of its own."""
    code_span = "The probe reaches an accuracy of 97.05 `" + "x" * (64 << 10) + "` on clean data."
    assert least_cpu_seconds(lambda: statements(code_span, "markdown", WORDS, "p.md"), 2) < 2
    apart = statements(
        "Accuracy of the probe on clean data: 97.05 %\n\n± 0.3 % is the baseline's spread.",
        "markdown",
        WORDS,
        "p.md",
    )
    assert [(found.printed.text, found.printed.error) for found in apart][:1] == [("97.05 %", None)]
    apart = statements(
        "The probe reaches an accuracy of 97.05 % (\n\n± 0.3 %) on clean data.", "markdown", WORDS, "p.md"
    )
    assert [(found.printed.text, found.printed.error) for found in apart][:1] == [("97.05 %", None)]
    # digits before 64 kB of letters: each digit given back rescanned them all
    digits = "The probe reaches an accuracy of 1" + "1" * (64 << 10) + "a" * (64 << 10)
    assert least_cpu_seconds(lambda: statements(digits, "markdown", WORDS, "p.md"), 2) < 2
    for joiners in (
        "_",
        "(",
        "<sub>",
        " \n",
        "\u200b",
    ):  # what may stand before an error, never followed by one
        joined = f"The probe reaches an accuracy of 97.05{joiners * (64 << 10)}±"
        # zero-width spaces took 2.4 s, quadratic before
        assert least_cpu_seconds(partial(statements, joined, "markdown", WORDS, "p.md"), 2) < 2, joiners


def test_a_multirow_cell_prints_its_text() -> None:
    """``\\multirow{2}{*}{probe}`` read as ``2*probe``, which names no run; the row it spans below is not given
    its text (which rows a reader groups under it is not read)."""
    table = _tabular(
        "\\toprule\nRun & Accuracy (clean) \\\\\n\\midrule\n\\multirow[t]{2}{*}[1pt]{\\textbf{probe}} & 97.05 \\\\\n"
        " & 96.90 \\\\\n\\bottomrule\n"
    )
    assert _read(table) == [("97.05", "accuracy", "clean", "probe"), ("96.90", "accuracy", "clean", None)]


@pytest.mark.parametrize(
    "shown",
    [
        r"\textcolor{white}{9}7.05",
        r"\textcolor{white}97.05",
        r"\textcolor[rgb]{1,1,1}{9}7.05",
        r"{\color{white}9}7.05",
        r"9\textcolor{white}{7}.05",
        r"9{\color{white}7}.05",
        r"97\textcolor{white}{.}05",
        r"97.\textcolor{white}{05}",
        # However TeX joins it: doubled or emptied groups, a comment's line end, a line break in the argument.
        r"\textcolor{white}{{9}}7.05",
        r"\textcolor{white}{9{}}7.05",
        "\\textcolor{white}{9}%\n7.05",
        "{\\color{white}%\n9}7.05",
        "\\textcolor{white}%\n{9}7.05",
        "\\textcolor{white}{\n9}7.05",
    ],
)
def test_a_colour_over_part_of_a_number_refuses_the_document(shown: str) -> None:
    """Drawn in the page's colour, the coloured digits are not seen: 97.05 was checked where 7.05 shows."""
    with pytest.raises(DocumentError, match="colours part of a number"):
        statements(f"The probe reaches an accuracy of {shown}\\% on clean data.", "latex", WORDS, "p.tex")


def test_whole_numbers_in_boxes_and_overlays_are_read() -> None:
    read = _read(
        "The probe reaches an accuracy of \\only<2>{97.05}\\% on clean data, up from "
        "\\scalebox{0.9}{96.90\\%} and \\resizebox{\\linewidth}{!}{96.80}. Its accuracy is \\makebox[2cm]{96.70}."
    )
    assert [text for text, *_ in read] == ["97.05%", "96.90%", "96.80", "96.70"]


def test_a_box_beside_other_digits_in_a_table_cell_refuses_the_document() -> None:
    """The gate reads one number per cell: ``\\scalebox{0}{97.05} 99.99`` passed as 97.05, which the page does
    not show, once the box's content was printed; so did one box inside another, two boxes, a box's literal
    arguments that looked harmless (a factor of 0.25 on a tiny font, a share of 0 of the line, a starred
    resizebox) and a negative skip."""
    for cell in (
        r"\scalebox{0}{97.05} 99.99",
        r"\raisebox{50cm}{97.05} 99.99",
        r"{\scalebox{0}{\mbox{97.05}}}\,99.99",
        r"\scalebox{1}{\scalebox{0}{97.05} 99.99}",
        r"\makebox[3em]{\makebox[0pt]{97.05} 99.99}",
        r"\scalebox{0}{97.05} / \scalebox{1}{99.99}",
        r"\scalebox{\factor}{97.05} 99.99",
        r"\scalebox{0.25}{\tiny 97.05} 99.99",
        r"\resizebox{0\linewidth}{!}{97.05} 99.99",
        r"\resizebox*{0pt}{!}{97.05} 99.99",
        r"\framebox[0pt]{97.05} 99.99",
        r"\hspace{-50cm}97.05\hspace{50cm} 99.99",
        r"\hspace{{-50cm}}97.05\hspace{50cm} 99.99",
        r"\scalebox{0}{+1 97.05} 99.99",
        r"$^{}$\scalebox{0}{97.05} 99.99",
        r"97.05 \scalebox{0}{$\pm$0.3 97.05} $\pm$ 0.9",
    ):
        with pytest.raises(DocumentError, match="what is checked would not be what is shown"):
            _probe_cell(cell)
    with pytest.raises(DocumentError, match="over what stands beside it"):  # a zero-width box, as \\rlap
        statements(
            _tabular("Run & Accuracy (clean) \\\\\nprobe & \\clap{97.05} 99.99 \\\\\n"),
            "latex",
            WORDS,
            "p.tex",
        )


def test_an_error_after_markup_in_a_table_cell_is_not_dropped() -> None:
    """``**97.05** ± 0.90``: the cell's one claim was 97.05, and its wrong error was never read. Markdown's
    math ``$97.05 \\pm 0.9$`` and a superscript error of a whole value are read; an error past other markup,
    or after an abbreviation's point (no sentence ends in a cell), leaves the value ``not_run``."""
    for cell, error in (
        ("**97.05** ± 0.90", "0.90"),
        ("$97.05 \\pm 0.9$", "0.9"),
        ("99<sup>±0.9</sup>", "0.9"),
        ("$97.05_{\\pm0.3}$", "0.3"),
        ("97.05 ∓ 0.9", "0.9"),
        ("$97.05 \\mp 0.9$", "0.9"),
    ):
        [found] = statements(_table(cell), "markdown", WORDS, "p.md")
        assert found.printed.error == Decimal(error), cell
    for cell in (
        "97.05 (n=3) ± 0.90",
        "**97.05**, +/-0.9",
        "97.05$^*$ ± 0.90",
        "97.05 ± `0.9`",
        "97.05 (s.e. ± 0.9)",
        "97.05 ± (0.9)",
        "97.05 ± [0.9](#n)",
        "97.05 ± <b>0.9</b>",
        "97.05 ± _0.9_",
        "97.05 $\\pm$ 0.9",
        "$\\mathbf{97.05} \\pm \\mathbf{0.9}$",
        '97.05 ± <span title="x">0.9</span>',  # a styled one refuses the document (test below)
        "$97.05^{+0.9}_{-0.9}$",
        "$97.05 \\,\\pm\\, 0.9$",
    ):
        [found] = statements(_table(cell), "markdown", WORDS, "p.md")
        assert found.printed.error_unread is not None and (
            "0.9" in found.printed.error_unread or "`" in cell
        ), cell


def test_whole_numbers_in_boxes_and_errors_set_as_indices_are_read_in_table_cells() -> None:
    """A table cell's text printed nothing for a box (``\\scalebox{0.9}{99.99}``, ``\\mbox{97.05}``), so its
    number went unchecked, and dropped an error set with ``\\textsubscript``, so a wrong one passed."""
    table = _tabular(
        "Run & Accuracy (clean) & Accuracy (noise) \\\\\n\\midrule\n"
        "probe & \\scalebox{0.9}{97.05} & \\mbox{80.00} \\\\\n"
        "baseline & 96.00\\textsubscript{$\\pm$0.4} & \\makebox[2em]{79.10} \\\\\n",
        "\\begin{tabular}{lcc}",
    )
    found = statements(table, "latex", WORDS, "paper.tex")
    assert [(item.printed.value, item.printed.error, item.subject, item.condition) for item in found] == [
        (Decimal("97.05"), None, "probe", "clean"),
        (Decimal("80.00"), None, "probe", "noise"),
        (Decimal("96.00"), Decimal("0.4"), "baseline", "clean"),
        (Decimal("79.10"), None, "baseline", "noise"),
    ]


def test_whole_numbers_in_colour_are_read() -> None:
    read = _read(
        "The probe reaches an accuracy of \\textcolor{red}{97.05}\\% on clean data, up from "
        "{\\color{red}96.90}. It reaches \\textcolor{red}{97.05\\%} on clean data, "
        "{\\color{blue}96.00}\\% for the baseline. Under noise the probe reaches "
        "80.00\\textcolor{gray}{\\scriptsize$\\pm$0.1}\\%."
    )
    assert [text for text, *_ in read] == ["97.05%", "96.90", "97.05%", "96.00%", "80.00±0.1%"]


def test_columns_whose_heads_read_alike_pin_no_number_to_their_run() -> None:
    """Over a header row of epochs, three columns read as accuracy (clean): each cell was held to the probe's
    one clean accuracy, so the two earlier epochs failed a correct paper. Distinct heads still pin."""
    table = (
        "\\begin{tabular}{lcccc}\n\\toprule\nRun & \\multicolumn{3}{c}{Accuracy (clean)} & Accuracy (noise) \\\\\n"
        " & 1 & 5 & 10 & 10 \\\\\n\\midrule\nprobe & 90.10 & 95.20 & 97.05 & 80.00 \\\\\n\\bottomrule\n"
        "\\end{tabular}\n"
    )
    found = statements(table, "latex", WORDS, "paper.tex")
    assert [(item.printed.text, item.subject, item.condition) for item in found] == [
        ("90.10", "probe", "clean"),
        ("95.20", "probe", "clean"),
        ("97.05", "probe", "clean"),
        ("80.00", "probe", "noise"),
    ]
    assert [item.unpinned is not None for item in found] == [True, True, True, False]
    assert "2 other column(s)" in str(found[0].unpinned)
    # A delta or spread column beside the metric's is no second column of its values: the metric's cells pin.
    for heads in (
        "| run | accuracy | Δ accuracy |",
        "| run | accuracy | accuracy_se |",
        "| run | accuracy | accuracy gain |",
    ):
        found = statements(f"{heads}\n|---|---|---|\n| probe | 99.10 % | 1.05 |\n", "markdown", WORDS, "p.md")
        assert (found[0].printed.text, found[0].subject, found[0].unpinned) == ("99.10 %", "probe", None), (
            heads
        )


@pytest.mark.parametrize(
    ("form", "table"),
    [
        ("csv", "run,accuracy,accuracy_se\nprobe,0.9705,0.0030\n"),
        ("markdown", "| run | accuracy (%) | accuracy (s.e.) |\n|---|---|---|\n| probe | 97.05 | 0.30 |\n"),
        (
            "latex",
            _tabular(
                "Method & Accuracy (\\%) & Accuracy SE \\\\\nprobe & 97.05 & 0.30 \\\\\n",
                "\\begin{tabular}{lcc}",
            ),
        ),
    ],
)
def test_a_standard_error_column_is_the_error_of_the_values_beside_it(form: str, table: str) -> None:
    """Its cells were read as values of the metric: a correct standard error of 0.30 failed as an accuracy."""
    found = statements(table, form, WORDS, {"csv": "p.csv", "markdown": "p.md", "latex": "p.tex"}[form])
    assert [(item.subject, item.metric, item.printed.error) for item in found] == [
        ("probe", "accuracy", Decimal("0.0030") if form == "csv" else Decimal("0.30"))
    ]


def test_other_spread_columns_are_not_values_and_an_unread_error_cell_is_said() -> None:
    """A standard deviation or an interval is no spread the capsules hold: its cells are no values, and are
    listed unchecked (a value column whose head only looks like one, ``accuracy (CI)`` for class-incremental,
    is not dropped unseen). A standard-error cell that is no plain number leaves the value beside it unwhole."""
    for heads in (
        "| run | accuracy | accuracy (std) |",
        "| run | accuracy | accuracy 95% CI |",
        "| run | accuracy | accuracy (CI) |",
    ):
        found = statements(f"{heads}\n|---|---|---|\n| probe | 97.05 % | 0.52 |\n", "markdown", WORDS, "p.md")
        assert [(item.printed.text, item.printed.error, item.unchecked is not None) for item in found] == [
            ("97.05 %", None, False),
            ("0.52", None, True),
        ], heads
    found = statements("run,accuracy,accuracy_se\nprobe,0.9705,n/a\n", "csv", WORDS, "p.csv")
    assert [(item.printed.error, item.printed.error_unread) for item in found] == [(None, "n/a")]
    # Two standard errors for one value, or one that contradicts the value's own: neither is read.
    for table in (
        "run,accuracy,accuracy_se,accuracy_sem\nprobe,0.9705,0.0090,0.0030\n",
        "run,accuracy,accuracy_se\nprobe,0.9705 ± 0.003,0.009\n",
    ):
        [found] = statements(table, "csv", WORDS, "p.csv")
        assert found.printed.error_unread is not None and "0.009" in found.printed.error_unread, table
    # A row shorter than its header (an IndexError before), and a standard error in % beside a share.
    short = statements("run,accuracy,accuracy_se\nprobe,0.9705\n", "csv", WORDS, "p.csv")
    assert [item.printed.error for item in short] == [None]
    [share] = statements("run,accuracy,accuracy_se (%)\nprobe,0.9705,0.3\n", "csv", WORDS, "p.csv")
    assert (share.printed.percent, share.printed.error, share.printed.error_percent) == (
        False,
        Decimal("0.3"),
        True,
    )


def test_a_standard_error_column_pairs_with_the_value_column_left_of_it() -> None:
    """``\\multicolumn{4}{c}{Accuracy (\\%)}`` over ``Clean & SE & Noise & SE``: the SE heads name no condition,
    and their cells were read as accuracies (a correct paper failed). ``std. err.`` is a standard error too."""
    table = _tabular(
        "Run & \\multicolumn{4}{c}{Accuracy (\\%)} \\\\\n & Clean & SE & Noise & SE \\\\\n\\midrule\n"
        "probe & 97.05 & 0.30 & 88.12 & 0.50 \\\\\n",
        "\\begin{tabular}{lcccc}",
    )
    found = statements(table, "latex", WORDS, "p.tex")
    assert [(item.printed.value, item.condition, item.printed.error) for item in found] == [
        (Decimal("97.05"), "clean", Decimal("0.30")),
        (Decimal("88.12"), "noise", Decimal("0.50")),
    ]
    [found] = statements("run,accuracy,accuracy std. err.\nprobe,0.9705,0.0090\n", "csv", WORDS, "p.csv")
    assert found.printed.error == Decimal("0.0090")


def test_boxes_beside_no_other_value_are_read_in_table_cells() -> None:
    """A box holding the cell's only value, or only an error, a gain or a mark beside it, hides no other
    value: read, not refused (each was refused by a first version); nor is a row's label or a table no column
    of which names a metric refused for its boxes."""
    for cell, value, error in (
        (r"97.05\scalebox{0.75}{$\pm$0.3}", "97.05", "0.3"),
        (r"\makebox[2.5em][r]{97.05}\,$\pm$\,0.3", "97.05", "0.3"),
        (r"\makebox[\widthof{00.00}][r]{97.05} $\pm$ 0.3", "97.05", "0.3"),
        (r"97.05 \scalebox{0.7}{(+1.05)}", "97.05", None),
        (r"\raisebox{1pt}{97.05} $\pm$ 0.3", "97.05", "0.3"),
        (r"97.05\makebox[0pt][l]{$^{1}$}", "97.05", None),
        (r"97.05 \scalebox{0.8}{(0.3)}", "97.05", None),
        (r"97.05 \scalebox{0.75}{(n=3)}", "97.05", None),
        (r"97.05 \kern-0.2em (3)", "97.05", None),
    ):
        [found] = _probe_cell(cell)
        assert (found.printed.value, found.printed.error) == (Decimal(value), error and Decimal(error)), cell
    labelled = _tabular("Model & Accuracy (clean) \\\\\nprobe-18 \\scalebox{0.8}{(11M)} & 97.05 \\\\\n")
    assert [item.printed.value for item in statements(labelled, "latex", WORDS, "p.tex")] == [
        Decimal("97.05")
    ]
    settings = _tabular("Setting & Value \\\\\nbatch & 64 \\scalebox{0}{($\\times$2)} \\\\\n")
    assert statements(
        settings + "The probe reaches an accuracy of 97.05\\% on clean data.", "latex", WORDS, "p.tex"
    )


def test_a_coloured_value_beside_other_digits_in_a_table_cell_refuses_the_document() -> None:
    """``\\textcolor{white}{97.05} 99.99`` passed as 97.05 where the page shows 99.99: no colour's name says
    whether it shows. Coloured like a box, a value alone, with its error or before a gain is read; and an error
    coloured inside its index (``\\textsubscript{\\textcolor{gray}{$\\pm$0.9}}``) is the value's, not dropped."""
    for cell in (
        r"\textcolor{white}{97.05} 99.99",
        r"\textcolor[rgb]{1,1,1}{97.05} 99.99",
        r"\textcolor{white}{\textbf{97.05}} 99.99",
        r"{\color{white}97.05} 99.99",
        r"{ \color{white}{97.05}} 99.99",
        r"\color{white}97.05 / \color{black}99.99",
    ):
        with pytest.raises(DocumentError, match="what is checked would not be what is shown"):
            _probe_cell(cell)
    for cell, error in (
        (r"\textcolor{red}{97.05}", None),
        (r"{\color{red}\textbf{97.05}}", None),
        (r"\color{red} 97.05", None),
        (r"\textcolor{red}{97.05} $\pm$ 0.3", "0.3"),
        (r"\color{red} 97.05 $\pm$ 0.3", "0.3"),
        (r"\textcolor{red}{97.05}\textsubscript{\textcolor{gray}{$\pm$0.9}}", "0.9"),
        (r"97.05\textsubscript{\scalebox{0.7}{$\pm$0.9}}", "0.9"),
        (r"97.05 \textcolor{gray}{(+1.2)}", None),
        (r"\textbf{97.05} {\color{gray}\scriptsize (+1.2)}", None),
    ):
        [found] = _probe_cell(cell)
        assert (found.printed.value, found.printed.error) == (Decimal("97.05"), error and Decimal(error)), (
            cell
        )


def test_a_spread_head_alone_names_the_column_of_values() -> None:
    """``accuracy (95% CI)`` over ``99.99 (96.50-97.60)`` says what the cells carry with their values: with
    no other column of the metric, its cells are its values (skipped, a wrong one passed its document)."""
    for heads, cell in (
        ("| run | accuracy (95% CI) |", "99.99 (96.50-97.60)"),
        ("| run | accuracy (std) |", "99.99 ± 0.52"),
    ):
        [found] = statements(f"{heads}\n|---|---|\n| probe | {cell} |\n", "markdown", WORDS, "p.md")
        assert (found.printed.value, found.subject) == (Decimal("99.99"), "probe"), heads


def test_only_whole_character_references_are_drawn_as_their_characters() -> None:
    """``&plusmn0;`` is no reference: the page shows it as written, so no ± joins 0 to the number before it."""
    found = statements(
        "The probe reaches an accuracy of 97.05 % &plusmn0; 0.3 % on clean data.", "markdown", WORDS, "p.md"
    )
    assert (found[0].printed.text, found[0].printed.error) == ("97.05 %", None)


def test_boxes_colours_and_overlays_left_open_are_checked_in_linear_time() -> None:
    """Each check scanned a whole line from every unclosed ``\\only<``, ``\\makebox[``, ``\\textcolor[`` or
    ``\\cellcolor[``."""
    for opened in (
        "\\only<",
        "\\makebox[",
        "\\textcolor[",
        "\\scalebox{",
        "\\cellcolor[",
        "\\cmidrule(",
        "\\color[",
    ):
        document = f"The probe reaches an accuracy of 97.05\\% on clean. {opened * 20000}"
        # the parser may refuse so many unclosed groups: in time
        assert least_cpu_seconds(partial(_read_or_refused, document, "latex"), 2) < 2, opened


def test_what_commands_the_converter_does_not_know_hold_is_read_in_cells_and_prose() -> None:
    """pylatexenc's parser reads the arguments of ``\\textsf``, ``\\texttt``, ``\\textmd``, ``\\textup`` and
    ``\\citetext``, and its converter printed nothing for them: a wrong value in ``\\textsf{91.00}`` went
    unread in a cell (the table passed on its other rows) and in prose, and a wrong ``\\texttt{$\\pm$ 9.90}``
    left its value checked alone."""
    for command in ("textsf", "texttt", "textmd", "textup", "citetext"):
        table = _tabular(
            f"Arm & Accuracy (\\%) \\\\\nprobe & \\{command}{{91.00}} \\\\\nbaseline & 96.00 \\\\\n"
        )
        found = statements(table, "latex", WORDS, "p.tex")
        assert [(item.subject, item.printed.text) for item in found] == [
            ("probe", "91.00"),
            ("baseline", "96.00"),
        ], command
        prose = f"The probe reaches an accuracy of \\{command}{{91.00\\%}}."
        assert [item.printed.value for item in statements(prose, "latex", WORDS, "p.tex")] == [
            Decimal("91.00")
        ]
    [cell] = statements(
        _tabular("Arm & Accuracy (\\%) \\\\\nprobe & 97.05 \\texttt{$\\pm$ 9.90} \\\\\n"),
        "latex",
        WORDS,
        "p.tex",
    )
    assert cell.printed.error == Decimal("9.90")
    # Settings print nothing and citations a mark: neither is a stated number.
    quiet = (
        "\\setcounter{secnumdepth}{3}\\definecolor{ours}{rgb}{0.1,0.5,0.9}The probe reaches an accuracy of "
        "97.05\\% \\citeyear{he2016} on clean digits."
    )
    assert [item.printed.value for item in statements(quiet, "latex", WORDS, "p.tex")] == [Decimal("97.05")]


@pytest.mark.parametrize(
    "markdown",
    [
        "| run | accuracy (%) |\n|---|---|\n| probe | <span hidden>97.05</span> `91.00` |\n",
        'The probe reaches an accuracy of <span style="display:none">97.05 %</span> `91.00 %`.\n',
        "<div hidden>\nThe probe reaches an accuracy of 97.05 %.\n</div>\n\nIt reaches `91.00 %`.\n",
        "The probe reaches an accuracy of <font color=white>97.05 %</font> `91.00 %`.\n",
        'The probe reaches an accuracy of <span class="sr-only">97.05 %</span> `91.00 %`.\n',
        "The probe reaches an accuracy of <template>97.05 %</template> `91.00 %`.\n",
        "The probe reaches an accuracy of <SPAN HIDDEN=true>97.05 %</SPAN> `91.00 %`.\n",
        f'The probe reaches an accuracy of <span hidden title="{"x" * 2500}">97.05 %</span> `91.00 %`.\n',
        # Found by a second attack: a hidden block around paragraphs of their own, a nested element of the
        # same name, attributes without a space, content past 10,000 characters, elements that never render,
        # a stylesheet, a turned direction.
        "<div hidden>\n\nThe probe reaches an accuracy of 97.05 %.\n\n</div>\n\nIt reaches `91.00 %`.\n",
        "The probe reaches an accuracy of <span hidden><span></span>97.05 %</span>`91.00 %`.\n",
        '<div title="a"hidden>The probe reaches an accuracy of 97.05 %.</div> `91.00 %`\n',
        "<span/hidden>The probe reaches an accuracy of 97.05 %.</span> `91.00 %`\n",
        f"The probe reaches an accuracy of <span hidden>{'x' * 10_001} 97.05 %</span>`91.00 %`.\n",
        "The probe reaches an accuracy of <dialog>97.05 %</dialog>`91.00 %`.\n",
        "<style>b{display:none}</style>\n\nThe probe reaches an accuracy of <b>97.05 %</b>`91.00 %`.\n",
        'The probe reaches an accuracy of <bdo dir="rtl">0.9705</bdo>.\n',
    ],
)
def test_html_that_may_keep_a_number_off_the_page_refuses_a_markdown_document(markdown: str) -> None:
    """The reader drops tags and reads what they hold; a hidden, styled, coloured or classed element, or one
    that never renders, may keep its number off the page: `<span hidden>97.05</span>` beside a wrong value
    in code passed as 97.05."""
    with pytest.raises(DocumentError, match="may keep a number off the page"):
        statements(markdown, "markdown", WORDS, "p.md")


def test_html_that_shows_what_it_holds_is_read_in_markdown() -> None:
    text = (
        '<p align="center"><img src="curve.png" class="wide"></p>\n\n'
        "The probe reaches <b>97.05 %</b> accuracy (`<span hidden>0</span>` is code).\n\n"
        "<details><summary>Seeds</summary>The baseline reaches 96.00 % accuracy.</details>\n"
    )
    assert [item.printed.value for item in statements(text, "markdown", WORDS, "p.md")] == [
        Decimal("97.05"),
        Decimal("96.00"),
    ]


def test_unclosed_html_tags_are_read_in_linear_time() -> None:
    """The tag pattern ran to the end of the text from every unclosed ``<b x=``: a 200 kB HTML block took 8.8 s."""
    for document in ("<div>\n" + "<b x=" * 40_000, "<b hidden=" * 20_000, "<div>\n<b " + "x" * 200_000):
        assert least_cpu_seconds(partial(_read_or_refused, document, "markdown"), 2) < 2, document[:20]


def test_a_column_specification_is_read_in_linear_time_and_refused_past_its_cap() -> None:
    """Each of a thousand ``@{\\}`` looked for its closing brace to the end of the specification (an escaped
    brace closes nothing): a 284 kB ``\\newcolumntype`` took 37 s before the parser refused the document."""
    document = "\\newcolumntype{x}{" + "@{\\}" * 999 + "{" + "a" * 280_000 + "}}\n"

    def refused() -> None:
        with pytest.raises(DocumentError, match="column specification of"):
            statements(document, "latex", WORDS, "p.tex")

    assert least_cpu_seconds(refused, 2) < 2


def test_a_links_text_and_inline_math_as_an_environment_are_read() -> None:
    """``\\href{x}{91.00\\%}`` was read as "x91.00%" (no number) and ``\\begin{math}`` as displayed math (not
    read): a wrong value shown either way went unchecked."""
    for shown in ("\\href{https://example.org/run}{91.00\\%}", "\\begin{math}91.00\\%\\end{math}"):
        [found] = statements(f"The probe reaches an accuracy of {shown}.", "latex", WORDS, "p.tex")
        assert found.printed.value == Decimal("91.00") and found.printed.percent, shown


@pytest.mark.parametrize("width", ["0pt", "0 pt", "-1em", "0.0\\linewidth", "\\z@", ""])
def test_a_box_of_no_width_holding_a_number_refuses_the_document(width: str) -> None:
    """``\\makebox[0pt][l]{\\textcolor{white}{97.05\\%}}`` overprints what follows as ``\\rlap`` does: 97.05
    passed where the page shows the number after it (one the reader does not read, as ``\\verb|91.00|``)."""
    hidden = "\\textcolor{white}{97.05\\%}"
    document = f"The probe reaches an accuracy of \\makebox[{width}][l]{{{hidden}}}\\verb|91.00|."
    with pytest.raises(DocumentError, match="is given no width"):
        statements(document, "latex", WORDS, "p.tex")
    # Without a width the box is as wide as what it holds, which is read; with one, too.
    for box in (f"\\makebox{{{hidden}}}", f"\\makebox[2cm][l]{{{hidden}}}"):
        found = statements(f"The probe reaches an accuracy of {box}.", "latex", WORDS, "p.tex")
        assert [item.printed.value for item in found] == [Decimal("97.05")], box
    # A mark in a box of no width is read beside its number, as before.
    marked = f"The probe reaches an accuracy of 97.05\\%\\makebox[{width}][l]{{$^{{1}}$}}."
    assert [item.printed.value for item in statements(marked, "latex", WORDS, "p.tex")] == [Decimal("97.05")]


def test_a_spread_head_naming_no_metric_is_the_spread_of_the_values_left_of_it() -> None:
    """``s.e.`` or ``std`` alone over a column right of a metric's values named nothing, so its cells were
    dropped: a wrong standard error of 9.90 beside 97.05 passed with it."""
    for form, table in (
        (
            "latex",
            _tabular(
                "Arm & Accuracy (\\%) & s.e. \\\\\nprobe & 97.05 & \\textsf{9.90} \\\\\n",
                "\\begin{tabular}{lcc}",
            ),
        ),
        ("markdown", "| run | accuracy (%) | SE | loss |\n|---|---|---|---|\n| probe | 97.05 | 9.90 | 1 |\n"),
        ("csv", "run,accuracy,sem\nprobe,0.9705,0.0990\n"),
    ):
        [found] = statements(table, form, WORDS, "p")
        assert (found.printed.value, found.printed.error) == (
            Decimal("0.9705") if form == "csv" else Decimal("97.05"),
            Decimal("0.0990") if form == "csv" else Decimal("9.90"),
        ), form
    # Another spread is listed unchecked, as one that names its metric is.
    found = statements(
        "| run | accuracy (%) | std |\n|---|---|---|\n| probe | 97.05 | 0.52 |\n", "markdown", WORDS, "p"
    )
    assert [(item.printed.text, item.unchecked is not None) for item in found] == [
        ("97.05", False),
        ("0.52", True),
    ]


@pytest.mark.parametrize(
    "latex",
    [
        "The probe reaches an accuracy of \\textcolor{white}{9}{7.05}\\%.",
        "The probe reaches an accuracy of {\\color{white}9}{7.05}\\%.",
        "The probe reaches an accuracy of \\textcolor{white}{9}\\textrm{7.05}\\%.",
        "The probe reaches an accuracy of \\textcolor{white}{9}{}7.05\\%.",
        "The probe reaches an accuracy of \\textcolor{white}{$9$}7.05\\%.",
        "The probe reaches an accuracy of $\\textcolor{white}{9}$7.05\\%.",
        "The probe reaches an accuracy of \\colorbox{black}{9}7.05\\%.",
        "The probe reaches an accuracy of \\fcolorbox{red}{black}{9}7.05\\%.",
    ],
)
def test_a_colour_before_the_group_or_math_the_number_goes_on_in_refuses_the_document(latex: str) -> None:
    """Found by a second attack: the colour check wanted the digits right after its closing braces, so a
    group, a font command, an empty group or math opened there let 97.05 pass where 7.05 shows; a colour box
    (``\\colorbox{black}``) hides digits as a text colour does."""
    with pytest.raises(DocumentError, match="colours part of a number"):
        statements(latex, "latex", WORDS, "p.tex")


def test_what_hyperref_prints_is_read_and_a_urls_percent_sign_is_no_comment() -> None:
    """``\\texorpdfstring{91.00\\%}{97.05\\%}`` prints its first argument on the page (the second is for the
    PDF's bookmarks); a ``%`` in a URL was read as a comment that swallowed the sentence after the link."""
    for document in (
        "The probe reaches an accuracy of \\texorpdfstring{91.00\\%}{97.05\\%}.",
        "See \\href{https://x.org/a%20b}{the log}: the probe reaches an accuracy of 91.00\\% on clean data.",
        "See \\url{https://x.org/a%20b}: the probe reaches an accuracy of 91.00\\% on clean data.",
    ):
        found = statements(document, "latex", WORDS, "p.tex")
        assert [item.printed.value for item in found] == [Decimal("91.00")], document


@pytest.mark.parametrize(
    "markdown",
    [
        "Press the ` key.\n\nProbe accuracy is <span hidden>97.05 %</span> `91.00 %`.\n",
        "| Model | Accuracy (%) |\n|---|---|\n| baseline | 96.00 ` |\n| probe | <span hidden>97.05</span> `91.00` |\n",
        "Write `<!--` to open a comment.\n\nProbe accuracy is <span hidden>97.05 %</span> `91.00 %`.\n\n"
        "Close it with `-->`.\n",
        "<div>\n<x_y hidden>Probe accuracy is 97.05 %.</x_y>\n</div>\n\nProbe accuracy is `91.00 %`.\n",
        "Probe accuracy is <span popover>97.05 %</span> `91.00 %`.\n",
        "Probe accuracy is <select><option>`91.00 %`</option><option>97.05 %</option></select>.\n",
        "Probe accuracy is <math><mphantom><mn>97.05 %</mn></mphantom></math> `91.00 %`.\n",
        'Probe accuracy is <span class="sr-only">97.05 %</span> `91.00 %`.\n',
        'Probe accuracy is <span style="display: none">97.05 %</span> `91.00 %`.\n',
    ],
)
def test_markdown_hiding_found_by_a_third_attack_refuses_the_document(markdown: str) -> None:
    """Code spans were blanked across the whole document, so a backtick left open in one paragraph or cell,
    or a ``<!--`` in code, blanked a hiding element in another; a tag name with other characters, and
    elements and attributes that hide but were not listed, passed."""
    with pytest.raises(DocumentError, match="may keep a number off the page"):
        statements(markdown, "markdown", WORDS, "p.md")


@pytest.mark.parametrize(
    "markdown",
    [
        '<p style="text-align:center">The probe reaches an accuracy of 97.05 %.</p>\n',
        'Install with <code class="language-bash">pip install probe==1.2</code>. The probe reaches an accuracy '
        "of 97.05 %.\n",
        '<a href="https://github.com/u/r/tree/main/examples/style/">Example 2</a>: the probe reaches an accuracy '
        "of 97.05 %.\n",
        '<p dir="auto">The probe reaches an accuracy of 97.05 %.</p>\n',
        '<video src="demo.mp4" controls>Your browser does not support HTML5 video.</video>\n\n'
        "The probe reaches an accuracy of 97.05 %.\n",
        '<p align="center" class="logo"><img src="logo.png">\n\nThe probe reaches an accuracy of 97.05 %.\n',
        '<details open class="results"><summary>Results</summary>The probe reaches an accuracy of 97.05 %.'
        "</details>\n",
    ],
)
def test_html_that_aligns_labels_or_links_is_read_in_markdown(markdown: str) -> None:
    """Found over-refused by an attack on the first version: a style that only aligns, a class that names no
    hiding, a path segment named ``style`` inside a link, ``dir="auto"``, a video's fallback text."""
    assert [item.printed.value for item in statements(markdown, "markdown", WORDS, "p.md")] == [
        Decimal("97.05")
    ]


@pytest.mark.parametrize(
    "latex",
    [
        "The probe reaches an accuracy of \\(\\color{white}9\\)7.05\\%.",
        _tabular("Model & Accuracy (\\%) \\\\\nprobe & \\(\\color{white}9\\)7.05 \\\\\n"),
        "The probe reaches an accuracy of \\textcolor{white}{" + "\\relax " * 40 + "9}7.05\\%.",
        "The probe reaches an accuracy of \\textcolor{white}{" + " " * 250 + "9}7.05\\%.",
        "The probe reaches an accuracy of \\textcolor{white}{" + "{}" * 110 + "9}7.05\\%.",
    ],
)
def test_a_colours_reach_is_its_group_or_its_math_however_long(latex: str) -> None:
    """The colour check looked 200 characters past the colour for a digit before ``}`` (padding beat it) and
    knew no ``\\)``; it now matches the colour's own group, or a switch's group or math."""
    with pytest.raises(DocumentError, match="colours part of a number"):
        statements(latex, "latex", WORDS, "p.tex")


def test_a_coloured_label_or_value_beside_an_index_and_a_box_of_the_lines_width_are_read() -> None:
    """Found over-refused: the 200-character window crossed rows to another group's ``}``, and a bare
    ``\\linewidth`` read as a width of nothing."""
    rows = (
        "Arm & Accuracy (clean, \\%) \\\\\n\\textcolor{gray}{baseline} & 96.00\\textsubscript{0.40} \\\\\n"
        "probe & \\textcolor{blue}{97.05}\\textsubscript{0.30} \\\\\n"
    )
    assert [item.printed.value for item in statements(_tabular(rows), "latex", WORDS, "p.tex")] == [
        Decimal("96.00"),
        Decimal("97.05"),
    ]
    centred = (
        "\\makebox[\\linewidth][c]{%\n"
        + _tabular("Arm & Accuracy (clean, \\%) \\\\\nprobe & 97.05 \\\\\n")
        + "}"
    )
    assert [item.printed.value for item in statements(centred, "latex", WORDS, "p.tex")] == [Decimal("97.05")]
    hung = _tabular(
        "Arm & Accuracy (clean, \\%) \\\\\nprobe & 97.05\\makebox[0pt][l]{\\,\\tiny$\\pm$0.30} \\\\\n"
    )
    assert [item.printed.value for item in statements(hung, "latex", WORDS, "p.tex")] == [Decimal("97.05")]
    for width in ("{0pt}", "\\dimexpr-1em\\relax", "0\\width", "0.00001pt", "1sp"):
        with pytest.raises(DocumentError, match="is given no width"):
            statements(
                f"The probe reaches an accuracy of \\makebox[{width}][l]{{97.05\\%}}.",
                "latex",
                WORDS,
                "p.tex",
            )


def test_what_iffalse_holds_is_not_read_and_another_conditional_holding_a_number_refuses_the_document() -> (
    None
):
    """A table's row kept inside ``\\iffalse ... \\fi`` was read (97.05 passed where the page shows the row
    below it), and so was the branch of ``\\ifx`` that TeX skips."""
    table = _tabular(
        "Model & Accuracy (\\%) \\\\\n\\iffalse probe & 97.05 \\\\ \\fi\nprobe & 91.00 \\\\\n",
        "\\begin{tabular}{lc}",
    )
    assert [item.printed.value for item in statements(table, "latex", WORDS, "p.tex")] == [Decimal("91.00")]
    for undecided in (
        "The probe reaches an accuracy of \\ifx ab 97.05\\%\\fi \\verb|91.00%|.",
        "\\begin{document}The probe reaches an accuracy of \\ifarxiv 97.05\\else 91.00\\fi\\%.",
    ):
        with pytest.raises(DocumentError, match="a TeX conditional at line 1 holds a number"):
            statements(undecided, "latex", WORDS, "p.tex")
    # A preamble's conditionals and \iff (a symbol) are read as before.
    for read in (
        "\\ifx\\pdfoutput\\undefined\\setlength{\\textwidth}{6.5in}\\fi\n\\begin{document}\n"
        "The probe reaches an accuracy of 97.05\\%.",
        "The probe reaches \\(a \\iff b\\) an accuracy of 97.05\\%.",
    ):
        assert [item.printed.value for item in statements(read, "latex", WORDS, "p.tex")] == [
            Decimal("97.05")
        ]


def test_colour_reaches_are_checked_in_linear_time() -> None:
    """Each colour switch searched its whole reach for a final digit: 20,000 nested ``{\\color{red}`` took 23 s."""
    for document in (
        "{\\color{red}" * 20_000 + "}" * 20_000,
        "\\color{red}x" * 20_000,
        "\\textcolor{red}{9}" + "\\textrm{" * 20_000,
        "{\\color{red}9" + "}" * 100_000,
    ):
        assert least_cpu_seconds(partial(_read_or_refused, document, "latex"), 2) < 2, document[:20]


def test_a_name_spelled_with_a_dotless_or_dotted_i_is_no_mention_and_stops_nothing() -> None:
    """Unicode case folding matched "noıse" (U+0131) and "NOİSE" (U+0130) to the condition noise, a name no
    declared one casefolds to: a KeyError in the reader stopped every audit of the session at collection."""
    for spelled in ("no\u0131se", "NO\u0130SE", "\u0130"):
        found = statements(f"On {spelled} the accuracy is 97.05 %.", "markdown", WORDS, "p.md")
        assert [(number.printed.text, number.condition) for number in found] == [("97.05 %", None)]
    # The names themselves are still matched in any ASCII case.
    [found] = statements("On NOISE the accuracy is 97.05 %.", "markdown", WORDS, "p.md")
    assert found.condition == "noise"


def test_latex_past_its_cap_is_refused_whole_before_the_quadratic_walker_reads_it() -> None:
    """3 MiB of plain words kept a session's collection busy 112 s (pylatexenc's walker is quadratic in a
    stretch without a macro); the 16 MiB document cap allowed half an hour."""
    from runaudit.documents import LATEX_CAP

    def refused() -> None:
        with pytest.raises(DocumentError, match=r"p.tex: 524,289 characters of LaTeX, past the 524,288"):
            statements("x" * (LATEX_CAP + 1), "latex", WORDS, "p.tex")

    assert least_cpu_seconds(refused, 1) < 1
    assert statements(
        "The probe reaches an accuracy of 97.05\\%. " + "x" * (LATEX_CAP - 100), "latex", WORDS, "p.tex"
    )


@pytest.mark.parametrize(
    "nested",
    [
        "".join("  " * depth + "- notes\n" for depth in range(11)),  # an 11-deep list
        "> " * 20 + "The probe reaches an accuracy of 91.00 % on noise.\n",
        "- " * 15 + "The probe reaches an accuracy of 91.00 % on noise.\n",
    ],
    ids=["list", "quotes", "list-markers"],
)
def test_markdown_nested_as_deep_as_the_parser_reads_is_refused_not_read_in_part(nested: str) -> None:
    """markdown-it drops every line past its nesting limit: an 11-deep list between an honest 98.05 % and two
    wrong numbers hid them, and the gate passed the document on the one number it read."""
    from runaudit.documents import MARKDOWN_NESTING

    text = f"The probe reaches an accuracy of 98.05 % on clean.\n\n{nested}\nThe probe reaches an accuracy of 91.00 % on noise.\n"
    with pytest.raises(DocumentError, match=rf"^p\.md:\d+: .*nested {MARKDOWN_NESTING} .*at most") as refused:
        statements(text, "markdown", WORDS, "p.md")
    assert "\n" not in str(refused.value)
    # Nine lists deep, the deepest item's number is read, and so is what follows.
    nine = (
        "".join("  " * depth + "- notes\n" for depth in range(8)) + "  " * 8 + "- accuracy 97.05 % on clean\n"
    )
    found = statements(
        f"{nine}\nThe probe reaches an accuracy of 91.00 % on noise.\n", "markdown", WORDS, "p.md"
    )
    assert [(item.line, item.printed.text) for item in found] == [(9, "97.05 %"), (11, "91.00 %")]


def test_stylesheets_are_searched_once_each_not_each_to_the_end_of_the_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20,000 unclosed ``<style>x`` (180 KB) took 256 s: each searched the rest of the document for CSS that
    hides. The characters searched are counted: linear in the document, however the styles nest."""
    from runaudit import documents

    hiding_css = documents._HIDING_CSS
    searched: list[int] = []

    class Counted:
        def search(self, text: str, pos: int = 0, endpos: int | None = None) -> re.Match[str] | None:
            endpos = len(text) if endpos is None else endpos
            searched.append(endpos - pos)
            return hiding_css.search(text, pos, endpos)

    monkeypatch.setattr(documents, "_HIDING_CSS", Counted())
    claim = "The probe reaches an accuracy of 98.05 %.\n"
    for styles in ("<style>x\n" * 1000, "<style>x\n" * 1000 + "</style>\n" * 1000):
        searched.clear()
        assert [item.printed.text for item in statements(styles + claim, "markdown", WORDS, "p.md")] == [
            "98.05 %"
        ]
        assert sum(searched) <= 2 * len(styles + claim), styles[-20:]
    # A stylesheet that hides, after a thousand that do not, is still found.
    with pytest.raises(DocumentError, match=r"^p\.md:1: '<style>' may keep a number off the page"):
        statements("<style>x\n" * 1000 + "<style>.a {display: none}\n" + claim, "markdown", WORDS, "p.md")


def test_markdown_past_its_cap_is_refused_whole_before_the_parser_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """16 MiB of two-digit lines (under the document cap) took 142 s and 6.9 GB: markdown-it builds a token
    per line break."""
    from runaudit import documents

    claim = "The probe reaches an accuracy of 97.05 %.\n"
    cap = len(claim) + 100
    monkeypatch.setattr(documents, "MARKDOWN_CAP", cap)
    assert [item.printed.text for item in statements(claim + "12\n" * 33, "markdown", WORDS, "p.md")] == [
        "97.05 %"
    ]
    with pytest.raises(
        DocumentError, match=rf"^p\.md: {cap + 2:,} characters of Markdown, past the {cap:,} "
    ):
        statements(claim + "12\n" * 34, "markdown", WORDS, "p.md")
