"""The numbers a document states about metrics: Markdown, LaTeX and CSV read with real parsers.

A paper, a README or a slide's table quotes results; the claims gate (docs/claims.md) checks each against
the capsule it came from. This module only reads: it finds each number that is a statement about a metric
and what the document says it is about, and leaves the judging to :mod:`runaudit.delivery`.

- **Markdown** is parsed with markdown-it-py (CommonMark plus tables): fenced and inline code is never
  read, table cells keep their column's header, and paragraphs keep their source lines.
- **LaTeX** is parsed with pylatexenc: ``tabular`` environments are split into cells on the parser's own
  ``&`` and ``\\\\`` nodes (``\\multicolumn`` spans its columns), and cell and prose text is what
  ``latex2text`` prints (``$\\pm$`` is ±, ``\\%`` is %). Arguments of layout and reference macros
  (``\\vspace{0.5em}``, ``\\cite``, ``\\ref``, ...) are never numbers.
- **CSV** is read with :mod:`csv`; the CSV that ``runaudit table`` writes carries its provenance per row.

A number is a statement about a metric when it shows decimals, a percent sign or a ± error, and a metric
the capsules declare is named by its table column or, in prose, by its sentence (else the paragraph's last
metric before it). An integer ("10 epochs"), a delta ("by 1.2 points", "+0.4") and anything in code are
not. An anchor pins the next number: ``<!-- runaudit: RUN/TEST/METRIC/CONDITION -->`` in Markdown,
``% runaudit: RUN/TEST/METRIC/CONDITION`` in LaTeX, and ``runaudit: ignore`` says the next number is not a
claim. ``runaudit table`` stamps the tables it generates (``runaudit table: group G, test T; provenance of
every cell in FILE``), so their cells are checked against the group they were generated from.
"""

from __future__ import annotations

import bisect
import csv
import functools
import html
import html.entities
import io
import itertools
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

# A document is text a person wrote; a paper's source is well under this.
DOCUMENT_CAP = 16 << 20
# A paper states hundreds of numbers; each is a verdict of its own (~1 ms of pytest each), so a document
# stating 100k kept a session busy for minutes. Past this, the document is refused, not read in part.
STATEMENT_CAP = 5000
# pylatexenc walks a stretch of text with no macro in time quadratic in its length (1 MiB of plain words took
# 16.5 s, 4 MiB 190 s): LaTeX past this is refused, not read. A paper's source is a few hundred KB at most;
# one past it can name the file holding its results (\input{results}) instead.
LATEX_CAP = 512 << 10
# Markdown's link and emphasis delimiters cost markdown-it ~10 µs each: 16 MB of brackets took 100 s.
MARKUP_CAP = 200_000
# markdown-it builds a token per line break: 1 MiB of two-digit lines took 7.2 s of CPU and 443 MB (16 MiB took
# 142 s and 6.9 GB), 1 MiB of prose 0.6 s and 50 MB. A paper's or README's Markdown is a few hundred KB at
# most: past this it is refused, not read.
MARKDOWN_CAP = 1 << 20
# How deep markdown-it nests blocks (a list counts two, its list and its item; a quote one): past it, its block
# parser drops every remaining line of the document unread (an 11-deep list hid the two wrong numbers after
# it, and the gate passed the honest one before it). 20 is nine lists deep, more than a paper nests; a document
# that reaches it is refused, not read in part.
MARKDOWN_NESTING = 20
MARKUP = "[]!*_`<|"
FORMATS = {".md": "markdown", ".markdown": "markdown", ".tex": "latex", ".csv": "csv"}
# The header of the CSV that ``runaudit table --format csv`` writes (runaudit.tables).
GENERATED_CSV_HEADER = ["arm", "metric", "condition", "mean", "standard_error", "n", "shown", "runs"]
IGNORE = "ignore"

# A digit, a comma, point-like character or narrow space and a digit (98,05, 1,234.5, 88·05, 3·10⁻⁴,
# 10 000) is a decimal point, a digit group or a product, depending on the reader: neither side of it is read
# as a number (``05 %`` alone would claim 5 %). Nor is a number right after ``;``: the end of a character
# reference (``88&middot;05``) in Markdown's source.
_POINTS = "·\u0387\u2024\u2219\u22c5\u066b\uff0e\u00a0\u2007\u2009\u202f"
_PLUS_MINUS = r"(?:[±∓]|\+/-|\+-|\\(?:pm|mp)(?![A-Za-z]))"  # \pm and \mp as Markdown's math writes them
# A ± that states an error: digits after it, past markup (emphasis, a bracket, math, a tag or a command), or
# what the gate does not read (a code span, read as blank) before a percent sign, the end of the text or more
# blank.
_STATED_ERROR = (
    rf"(?:{_PLUS_MINUS}(?:(?:[^\w\n<\\]|_|<[A-Za-z][^<>\n]{{0,40}}>|\\[A-Za-z]{{1,12}}|\\[^A-Za-z\s]){{0,8}}?\d"
    r"|[^\S\n]*+(?:%|\Z)|[^\S\n]{3})"
    r"|(?<=\d)[_^]\{?[+\-−]\d)"  # an error above and one below (97.05^{+0.9}_{-0.9}): not read
)
# What may stand between a number and its ± on the page: white space with at most one line break (a
# paragraph's own wrapping), the number's percent sign, an index or superscript, a bracket, and characters
# drawn as nothing (``97.05 %<U+200B>± 0.3 %``).
_BEFORE_AN_ERROR = (
    "(?:[^\\S\n]|[%_^(\\[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]|<su[bp]>)"
)
_NUMBER = re.compile(
    rf"(?<![\w.;\\/#^-])(?<!\d[,{_POINTS}])(?P<sign>[+\-−])?(?P<int>\d++)(?:\.(?P<frac>\d++))?(?![\w.]*\d)"
    rf"(?![,{_POINTS}]\d)(?![a-zA-Z])"
    # The error may follow the number's own percent sign, on its line or the next, be set as an index or a
    # superscript and stand in brackets (``97.05 % ± 0.3 %``, ``$97.05_{\pm0.3}$``, ``$97.05^{(\pm0.3)}$``,
    # Markdown's ``97.05<sub>±0.3</sub>``, ``97.05 % (±0.3 %)``, ``97.05 % [±0.3]``, ``**97.05** ± 0.3``): read apart, it was a
    # claim of its own. Its digits end as the number's do (``± 0,9`` is no error of 0). Each run of white
    # space is matched one way only and possessively (two in a row made a number before 64 kB of spaces take
    # 27 s), and so are the digits (a number's digits given back one by one before 64 kB of letters took 18 s).
    rf"(?:(?P<pct_err>[^\S\n]?%)?\*{{0,3}}+[^\S\n]*+(?:\n[^\S\n]*+)?(?P<index>[_^]|<su[bp]>)?[^\S\n]*+(?P<bracket>[(\[{{])?"
    rf"[^\S\n]*+{_PLUS_MINUS}[^\S\n]*+(?:\n[^\S\n]*+)?\*{{0,3}}+(?P<err>\d++(?:\.\d++)?)(?![\w.]*\d)"
    rf"(?![,{_POINTS}]\d)(?![a-zA-Z])"
    r"(?P<pct_in>[^\S\n]?%)?\*{0,3}+[^\S\n]*+(?(bracket)[)\]}])[^\S\n]*+(?:</su[bp]>)?)?"
    r"(?P<pct>\s?(?:\$[^\S\n]?)?\\?%)?"  # Markdown's math writes $97.05\%$, $97.05$\% or $97.05$ %
)
# A ± and digits after a number that the number's pattern did not take as its error (``97.05 % (±.9)``,
# ``± 3e-1``, ``± 0,9``, ``(±0.3 pp)``): the error stated is not read, so the number's claim is not whole.
# (A ± that states no number, ``(± denotes the standard error)``, leaves the number whole.)
_UNREAD_ERROR = re.compile(rf"{_BEFORE_AN_ERROR}{{0,40}}+(?:\n{_BEFORE_AN_ERROR}{{0,40}}+)?{_STATED_ERROR}")
AMBIGUOUS = -1  # a spread column's partner where several columns of its metric could be it
# How far after the number it belongs to such an error may stand, in one sentence.
ERROR_REACH = 40
_ERROR_SIGN = re.compile(_STATED_ERROR)
_SENTENCE_OR_PARAGRAPH_END = re.compile(r"[.!?;](?=\s)|\n[^\S\n]*\n")
_DELTA_BEFORE = re.compile(r"\b(?:by|of up to|improves?|improved|gains?|drops? by)\s+$", re.IGNORECASE)
_DELTA_AFTER = re.compile(r"^\s*(?:points?|pp\b|p\.p\.|percentage points?|x\b|×|times\b)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?;](?=\s)|\n\s*\n")
_STAMP = re.compile(
    r"runaudit table:\s*group\s+(?P<group>.+?),\s*test\s+(?P<test>[^;]+);.*?\bin\s+(?P<sidecar>\S+)"
)
_ANCHOR = re.compile(r"^\s*runaudit:\s*(?P<target>\S+)\s*$")
_MD_COMMENT = re.compile(r"<!--(.*?)-->", re.DOTALL)
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")  # not [^>]*: from each unclosed "<b " it ran to the end (quadratic)
_PERCENT_HEAD = re.compile(r"%|\bpercent\b", re.IGNORECASE)
_DELTA_HEAD = re.compile(r"Δ|\\Delta|\bdelta\b|\bgain\b|\bdiff(?:erence)?\b|\bimprovement\b", re.IGNORECASE)
# A column of the spread beside its metric's (``accuracy_se``, ``Accuracy (std)``), not one of values with their
# error (``Accuracy (mean ± s.e.)``).
_SPREAD_HEAD = re.compile(
    r"(?<![A-Za-z])(?:std|stdev|stderr|sd|se|sem|s\.[de]\.(?:m\.)?|ci|standard[\s_-]+(?:error|deviation))(?![A-Za-z])",
    re.IGNORECASE,
)
# The spread the gate holds (the standard error over seeds): such a column's cell is the error of the value
# beside it in its row; another spread (a standard deviation, an interval) is not read.
_STANDARD_ERROR_HEAD = re.compile(
    r"(?<![A-Za-z])(?:stderr|se|sem|s\.e\.(?:m\.)?|standard[\s_-]+error|std\.?[\s_-]*err(?:or|\.)?)(?![A-Za-z])",
    re.IGNORECASE,
)
_VALUE_HEAD = re.compile(r"±|\\pm(?![A-Za-z])|\bmean\b|\baverage\b|\bavg\b", re.IGNORECASE)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# Markdown's character references, which the page draws as their characters (``&plusmn;`` is ±).
_CHARACTER_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_DRAWN_AS_WRITTEN = frozenset("`<>\n\r")  # markup to the reader, or a line break that would shift the lines
# Anchors travel through prose as these private-use markers, so they stay where the author put them.
_MARK = re.compile("\ue000([\ue100-\uf8ff])")
_MARK_BASE = 0xE100
# Macros whose arguments are layout, labels or references: never a stated result.
LATEX_SKIPPED = frozenset(
    {
        "vspace", "hspace", "label", "ref", "eqref", "autoref", "cref", "Cref", "cite", "citep", "citet",
        "includegraphics", "input", "include", "usepackage", "documentclass", "url", "setlength",
        "addtolength", "bibliography", "cmidrule",
        "toprule", "midrule", "bottomrule", "hline", "cline", "addlinespace", "begin", "end", "newcommand",
        "renewcommand", "arraystretch", "tabcolsep", "fontsize", "linewidth", "textwidth", "columnwidth",
    }
)  # fmt: skip
# natbib's citations: each prints what the bibliography makes of its key, never a stated result.
LATEX_CITATIONS = frozenset(
    {"citealt", "citealp", "citeauthor", "citefullauthor", "citeyear", "citeyearpar", "Citet", "Citep",
     "Citealt", "Citealp", "Citeauthor", "citenum", "citetalias", "citepalias"}
)  # fmt: skip
LATEX_SKIPPED |= LATEX_CITATIONS
# Skipped macros that still print something where they stand (a citation mark, a reference number, a link).
LATEX_SKIPPED_SHOWN = frozenset(
    {"cite", "citep", "citet", "bibliography", *LATEX_CITATIONS}
)  # fmt: skip
# Commands whose arguments pylatexenc's parser reads but which print nothing: settings and definitions.
LATEX_SETTINGS = frozenset(
    {"RequirePackage", "selectlanguage", "addlength", "setcounter", "addcounter", "addtocounter",
     "providecommand", "newenvironment", "renewenvironment", "provideenvironment", "DeclareMathOperator",
     "hypersetup", "definecolor", "providecolor", "colorlet", "pagecolor", "nopagecolor", "rowcolors",
     "defcitealias"}
)  # fmt: skip
# References and insertions print what the reader never sees (``\ref{nine}7.05`` may be typeset 97.05,
# ``\input{nine}7.05`` too; an empty ``\url{}`` or a blank image stands between two digits unseen).
LATEX_REFERENCES = frozenset(
    {
        "ref",
        "eqref",
        "autoref",
        "cref",
        "Cref",
        "pageref",
        "input",
        "include",
        "url",
        "includegraphics",
    }
)
# Commands that print a visible gap or mark: what stands either side of them is two things.
LATEX_GAPS = frozenset(
    {"hfill", "hfil", "hss", "quad", "qquad", "enspace", "enskip", "thinspace", "S", "P", "dag", "ddag",
     "textdagger", "textdaggerdbl", "checkmark", "ding", "tnote", "footnotemark"}
)  # fmt: skip
# Commands that print nothing, whatever the reader's converter prints for them (``\-`` a soft hyphen), and
# the font and size switches, which print nothing either.
# What the reader makes of a text colour and of a colour switch (:data:`_TEXT_COLOUR`), shorter than the
# commands they stand for (\textcolor{} and \color{}).
_COLOURED, _SWITCHED = "RAtextcolor", "RAcolor"
LATEX_SILENT = frozenset(
    {"-", "relax", "unskip", "ignorespaces", "nobreak", "allowbreak", "kern", "hskip", "xspace", "nolinebreak",
     "linebreak", "bfseries", "mdseries", "itshape", "slshape", "upshape", "scshape", "rmfamily", "sffamily",
     "ttfamily", "normalfont", "bf", "it", "rm", "sf", "tt", "sl", "sc", "em", "tiny", "scriptsize",
     "footnotesize", "small", "normalsize", "large", "Large", "LARGE", "huge", "Huge", "boldmath", "unboldmath",
     "centering", "raggedright", "raggedleft", _SWITCHED}
)  # fmt: skip
# siunitx: its commands print their number argument and unit; the reader reads them as such.
LATEX_SIUNITX = frozenset(
    {"num", "SI", "si", "qty", "unit", "tablenum", "numrange", "SIrange", "qtyrange", "ang", "percent"}
)
# Boxes: their last argument is what they print (an empty one, nothing); phantoms print a gap as wide as it.
LATEX_BOXES = {
    "mbox": "{", "hbox": "{", "makebox": "[[{", "framebox": "[[{", "raisebox": "{[[{", "resizebox": "*{{{",
    "scalebox": "{[{", "rlap": "{", "llap": "{", "clap": "{", "mathrlap": "{", "mathllap": "{", "mathclap": "{", "smash": "[{", "textsuperscript": "{", "textsubscript": "{",
    "phantom": "{", "hphantom": "{", "vphantom": "{", "discretionary": "{{{", _COLOURED: "{",
}  # fmt: skip
# Zero-width boxes: what they hold overprints its neighbours, never stands between them.
LATEX_OVERPRINTS = frozenset({"rlap", "llap", "clap", "mathrlap", "mathllap", "mathclap", "vphantom"})
# A width of nothing or less, as written: ``\makebox[0pt][l]{97.05}`` prints what it holds over what follows.
# A width as a box's width argument may plainly be written, of at least a tenth of a point or of the line: a
# length, a share of the line or of the box's own width, or the width of some text. Anything else (``0pt``,
# ``-1em``, ``\\z@``, ``\\dimexpr...``, ``1sp``) may be nothing or less.
_PLAIN_WIDTH = re.compile(
    r"\s*\+?\s*(?P<length>\d+(?:\.\d*)?|\.\d+)\s*(?:pt|em|ex|mm|cm|in|bp|pc|dd|cc|px)\s*"
    r"|\s*(?:(?P<share>\d+(?:\.\d*)?|\.\d+)\s*)?\\(?:linewidth|textwidth|columnwidth|hsize|width)\s*"
    r"|\s*\\widthof\s*\{[^{}]*\}\s*"
)


def _of_no_width(macro: str, arguments: Sequence[Any]) -> bool:
    """Whether a ``\\makebox`` or ``\\framebox`` is given a width that may be nothing or less: such a box
    overprints its neighbours as ``\\rlap`` does (a hidden 97.05 passed under a visible 91.00 so). It is
    refused where it holds a number the reader would take for a claim; a mark (``$^{1}$``) or an error
    (``$\\pm$0.30``) hung beside a number is read."""
    width = arguments[0] if macro in ("makebox", "framebox") and arguments else None
    if width is None:
        return False
    written = width.latex_verbatim().strip()[1:-1].strip()
    if written.startswith("{") and written.endswith("}"):
        written = written[1:-1]
    plain = _PLAIN_WIDTH.fullmatch(written)
    amount = plain and (plain.group("length") or plain.group("share"))
    return plain is None or (amount is not None and float(amount) < 0.1)


# Boxes that may draw what they hold at no size, out of place or over its neighbour (``\scalebox{0}{9}7.05``
# shows 7.05): what they print is read as a word of its own, so a number they split is refused.
LATEX_RESHAPING = frozenset({"scalebox", "resizebox", "makebox", "framebox", "raisebox"})
# Arguments pylatexenc does not know, which it would read as text (``\nolinebreak[4]``, ``\ding{51}``).
LATEX_OPTIONS = {
    "nolinebreak": "[",
    "linebreak": "[",
    "footnotemark": "[",
    "tnote": "{",
    "ding": "{",
    "href": "[{{",
}
# Boxes shown as a mark or a gap beside what they follow, never part of it: ``98.1\\textsuperscript{1}`` is
# 98.1 with a note mark. Read as a space when they hold anything visible, as nothing when they do not.
LATEX_MARKS = frozenset({"phantom", "hphantom", "textsuperscript", "textsubscript"})
# The marks that print what they hold, as the index the number pattern reads (``97.05_±0.3``).
LATEX_INDICES = {"textsubscript": "_", "textsuperscript": "^"}
# TeX's own character codes: a catcode change, ``\char`` or a ``^^`` escape makes the typeset characters
# others than the text's, and no reader of the text follows them.
_TEX_CHARACTER_CODES = re.compile(
    r"\^\^|\\(?:catcode|char|chardef|mathchardef|mathcode|lccode|uccode|sfcode|delcode|DeclareUnicodeCharacter"
    r"|newunicodechar)(?![A-Za-z@])"
    r"|\\(?:[gex]?def|let)(?![A-Za-z@])\s*(?!\\)\S"  # an active character defined (\def~{9})
)
# A colour that starts or ends against a digit or point of the number beside it: those digits may be drawn
# in the page's own colour (\textcolor{white}{9}7.05 shows 7.05).
_COLOUR_ARGUMENTS = r"\s*(?:\[[^\]\n]{0,100}\])?\{[^{}\n]{0,100}\}"  # a model, a name or values
# \colorbox{black}{9} and \fcolorbox hide their digits as well as a text colour (black on black).
_COLOUR = rf"\\(?:textcolor|color|colorbox|fcolorbox{_COLOUR_ARGUMENTS}){_COLOUR_ARGUMENTS}"


def _part_of_a_number(opening: str, closing: str = r"\}") -> re.Pattern[str]:
    """Where a group that ``opening`` opens (up to its brace) starts or ends against a digit or point of the
    number beside it, or holds only the number's point: what it does to those digits is not in the text."""
    return re.compile(
        rf"\d\.?(?:{opening})\.?\d"  # 9\textcolor{white}{7}, 9{\color{white}7}
        rf"|(?:{opening})[^{{}}\n]{{0,200}}\d\.?\s*{closing}\.?\d"  # \textcolor{white}{9}7.05
        rf"|\d(?:{opening})\s*\.\s*{closing}\d"  # 97\textcolor{white}{.}05
    )


_COLOURED_DIGITS = re.compile(
    _part_of_a_number(rf"{_COLOUR}\s*\{{|\{{\s*{_COLOUR}\s*").pattern
    # \textcolor's argument unbraced is one character: \textcolor{white}97.05 colours the 9 alone.
    + rf"|\\textcolor{_COLOUR_ARGUMENTS}\s*[\d.](?=[\d.\\])"
)
# What a colour's group may end in and what may follow it, such that the number goes on past it: closing
# braces and math, then opening ones, empty groups, math and font commands, then a digit or point
# (\textcolor{white}{9}7.05, {{9}}7.05, {9}{7.05}, {9}\textrm{7.05}, {$9$}7.05, {9}{}7.05, \(\color{white}9\)7.05).
# An index or a mark after it (\textsubscript{0.30}) is no continuation.
_CLOSERS = frozenset(" \t\n}$")  # what may stand after a colour's last digit, inside its reach (and \))
_OPENERS = frozenset("{}$")  # what may stand between the end of its reach and the digit that goes on
_FONT_OPENING = re.compile(
    r"\\(?:text(?:rm|bf|it|sf|tt|md|up|sl|sc|normal)?|emph|mbox|hbox|ensuremath|math(?:rm|bf|it|sf|tt)|[()])"
    r"\s*\{?"
)
_COLOUR_GROUP = re.compile(rf"\\(?:textcolor|colorbox|fcolorbox{_COLOUR_ARGUMENTS}){_COLOUR_ARGUMENTS}\s*\{{")
_BRACE = re.compile(r"(?<!\\)[{}]")
_MATH_CLOSE = re.compile(r"(?<!\\)\$|\\\)")


def _colour_ends_inside_a_number(typeset: str) -> int | None:
    """Where a colour's reach (a ``\\textcolor`` or colour box's group, or a ``\\color`` switch up to the end of
    its group or math) ends in a digit or point that the number goes on past, or None. Groups are matched,
    so no window bounds the colour's reach, and a closing brace of another group is not the colour's.
    Linear: the braces and math delimiters are indexed once."""
    positions, ends, enclosing = _paired_braces(typeset)
    math_closes = [found.start() for found in _MATH_CLOSE.finditer(typeset)]
    reaches: list[tuple[int, int, int]] = []  # (command start, reach start, reach end: its closing character)
    for found in _COLOUR_GROUP.finditer(typeset):
        if (end := ends.get(found.end() - 1)) is not None:
            reaches.append((found.start(), found.end(), end))
    for found in _COLOUR_SWITCH.finditer(typeset):
        before = bisect.bisect_right(positions, found.start()) - 1
        group = enclosing[before] if before >= 0 else -1
        end = ends.get(group, len(typeset)) if group >= 0 else len(typeset)
        math = bisect.bisect_left(math_closes, found.end())
        if math < len(math_closes):
            end = min(end, math_closes[math])
        reaches.append((found.start(), found.end(), end))
    # The last character before each index that is no closer, and the first at or after it that is no opener
    # (a backslash counts with the bracket it escapes), each in one pass: no reach scans its own stretch.
    last_shown, shown = [-1] * (len(typeset) + 1), -1
    for index, char in enumerate(typeset):
        last_shown[index] = shown
        closes_math = typeset[index : index + 2] == "\\)" or typeset[index - 1 : index + 1] == "\\)"
        if char not in _CLOSERS and not closes_math:
            shown = index
    last_shown[len(typeset)] = shown
    first_shown, shown = [len(typeset)] * (len(typeset) + 1), len(typeset)
    for index in range(len(typeset) - 1, -1, -1):
        if typeset[index] not in _OPENERS:
            shown = index
        first_shown[index] = shown
    for start, reach, end in reaches:
        last = last_shown[end]
        if last < reach or not (typeset[last].isdigit() or typeset[last] == "."):
            continue
        after = first_shown[end]
        for _ in range(8):  # a few font commands opened after it, each a group of its own
            opening = _FONT_OPENING.match(typeset, after)
            if opening is None:
                break
            after = first_shown[opening.end()] if opening.end() < len(typeset) else len(typeset)
        following = typeset[after : after + 2]
        if following[:1].isdigit() or (following[:1] == "." and following[1:].isdigit()):
            return start
    return None


# Beamer's overlays draw what they hold on some slides only: \only<2>{9}7.05 shows 7.05 on the first, where the
# text reads 97.05. (Boxes that may draw what they hold at no size end a number in the reader instead:
# :data:`LATEX_RESHAPING`.) The overlay's arguments may end in a digit however deeply grouped
# (``{\only<2>{9}}7.05``, ``\alt<2>{}{9}7.05``).
_OVERLAY = r"\\(?:only|uncover|visible|invisible|onslide|alt|temporal)\s*<[^>\n]{0,100}>"
_ON_SOME_SLIDES = _part_of_a_number(rf"{_OVERLAY}\s*\{{", r"\}(?:\s*\{[^{}\n]{0,200}\})?")
_OVERLAY_BEFORE_DIGITS = re.compile(rf"{_OVERLAY}[^\n]{{0,200}}?\d\.?\s*\}}+\s*\.?\d")
# A negative kern between digits draws one over the other.
_OVERLAPPED_DIGITS = re.compile(
    r"\d\.?[\s{]{0,20}\\(?:kern|hskip|mkern|mskip)\s*-\s*[\d.]{1,20}\s*[a-z]{2}[\s{}]{0,20}(?:\\relax\s*)?\.?\d"
)
# siunitx rounding typesets another number than the one written.
_ROUNDING = re.compile(r"round-mode\s*=\s*(?:%[^\n]*\n\s*)*\{?\s*(?!none\b)\w")
# A column type the paper defines stands between other columns wherever it is used.
_COLUMN_TYPE = re.compile(
    r"\\newcolumntype\s*\{[^{}]*\}\s*(?:\[\d\]\s*)?\{((?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\}){0,2000})\}"
)
# Commands the document defines or redefines: what they print is the document's, not the reader's.
_DEFINED = re.compile(
    r"\\(?:(?:re)?newcommand|providecommand|DeclareRobustCommand|DeclareMathOperator"
    r"|(?:New|Renew|Provide|Declare)DocumentCommand)\*?\s*\{?\s*\\([A-Za-z@]+|[^A-Za-z@\s])"
    r"|\\(?:[gex]?def|let)(?![A-Za-z@])\s*\\(?!csname)([A-Za-z@]+|[^A-Za-z@\s])"
    r"|\\(?:(?:New|Renew|Declare)CommandCopy|LetLtxMacro|cslet|csdef|csgdef|csedef|csxdef|letcs|csletcs)\s*\{?\s*\\?([A-Za-z@]+)"
    r"|\\csname\s*([A-Za-z@]+)\s*\\endcsname"
)
# In math mode spaces are not printed, and a spacing command between digits groups them.
_MATH_DIGIT_GAP = re.compile(r"(?<=\d)(?:\s|~|\\[,;:> ])+(?=\.?\d)")
_MATH = re.compile(  # bounded: an unclosed one scans at most this far, however many there are
    r"\$[^$]{0,4000}\$|\\\((?:(?!\\\)).){0,4000}\\\)|\\ensuremath\{(?:[^{}]|\{[^{}]{0,400}\}){0,4000}\}",
    re.DOTALL,
)


def _math_spaced(latex: str) -> str:
    """``latex`` with the space between two digits in math as TeX sets it: none (``$9 7.05$`` is 97.05), or
    a digit group's thin space where a spacing command stands there (``$1\\,000$``)."""
    return _MATH.sub(
        lambda math: _MATH_DIGIT_GAP.sub(lambda gap: "" if gap.group().isspace() else "\u202f", math.group()),
        latex,
    )


LATEX_UNREAD = frozenset(
    {"equation", "align", "gather", "multline", "eqnarray", "displaymath", "verbatim", "lstlisting",
     "minted", "algorithm", "algorithmic", "comment"}
)  # fmt: skip
# Table decoration whose arguments pylatexenc does not know: "\cellcolor{blue!10}98.1" is 98.1.
_LATEX_DECORATION = re.compile(  # each part bounded: \cellcolor[ repeated 20,000 times took 9 s
    r"\\(?:cellcolor|rowcolor|columncolor)(?:\[[^\]\n]{0,100}\])?\{[^{}\n]{0,100}\}"
    r"|\\(?:cmidrule|cline)(?:\([^)\n]{0,100}\))?\{[^{}\n]{0,100}\}"
    r"|\\specialrule\{[^{}\n]{0,100}\}\{[^{}\n]{0,100}\}\{[^{}\n]{0,100}\}"
)
# A text colour may be the page's own (``\textcolor{white}{97.05} 99.99`` shows 99.99), and no colour's name
# says whether it shows. Its name is dropped, and the command becomes one of these, of the same length or
# shorter: a box around what ``\textcolor`` colours, and a switch that colours the rest of its group. In a
# table cell they are read as boxes that may hide their digits (:func:`_hides_its_claim`).
# TeX's conditionals and their ends. \iff (a math symbol) and \ifthenelse (a macro of its own) are none.
_CONDITIONAL = re.compile(r"\\(?:(?!iff(?![A-Za-z@])|ifthenelse)(if[A-Za-z@]*)|(fi))(?![A-Za-z@])")


def _conditionals_read(latex: str) -> tuple[str, int | None]:
    """``latex`` with what ``\\iffalse ... \\fi`` holds dropped, as TeX never typesets it (a table's rows kept
    there were read), and where another conditional in the document's body holds a claim-like number (which
    of its branches is typeset is not read), or None. One pass; each dropped stretch becomes ``\\relax`` and
    blanks of its length, line breaks kept, so a number it splits is still refused and lines stay."""
    body = latex.find("\\begin{document}")
    opened: list[tuple[int, str]] = []
    dropped: list[tuple[int, int]] = []
    undecided: int | None = None
    for found in _CONDITIONAL.finditer(latex):
        if found.group(1):
            opened.append((found.start(), found.group(1)))
            continue
        if not opened:
            continue
        start, name = opened.pop()
        if name == "iffalse" and not any(other == "iffalse" for _, other in opened):
            dropped.append((start, found.end()))
        elif name not in ("iffalse", "iftrue") and start > body and undecided is None:
            undecided = start if _CLAIM_LIKE.search(latex, start, found.start()) else None
    if not dropped:
        return latex, undecided
    pieces, last = [], 0
    for start, end in dropped:
        blank = re.sub(r"[^\n]", " ", latex[start:end])
        pieces += [latex[last:start], "\\relax" + blank[6:]]
        last = end
    return "".join(pieces) + latex[last:], undecided


_URL = re.compile(r"\\(?:url|href|nolinkurl|path)\s*(?:\[[^\]\n]{0,200}\])?\s*\{[^{}\n]{0,2000}\}")
_TEXT_COLOUR = re.compile(rf"\\(?:textcolor|colorbox|fcolorbox{_COLOUR_ARGUMENTS}){_COLOUR_ARGUMENTS}")
_COLOUR_SWITCH = re.compile(rf"\\color{_COLOUR_ARGUMENTS}")
_SWITCH = re.compile(rf"\\{_SWITCHED}(?![A-Za-z])")  # a colour switch, as the reader has it
# A group that a colour switch opens colours all it holds, as \textcolor colours its argument.
_SWITCHED_GROUP = re.compile(rf"\{{(\s*){_SWITCH.pattern}")
TABULARS = frozenset(
    {"tabular", "tabular*", "tabularx", "longtable", "array", "tabulary", "tabu", "NiceTabular", "tblr"}
)
LATEX_RULES = frozenset({"toprule", "midrule", "bottomrule", "hline", "cline", "cmidrule", "addlinespace"})


class DocumentError(ValueError):
    """The document cannot be read as its format; the message names the file and what was found."""


@dataclass(frozen=True)
class Printed:
    """A number as the document prints it: its value, the decimals shown, a percent sign, a ± error."""

    text: str
    value: Decimal
    decimals: int
    percent: bool
    error: Decimal | None = None
    error_decimals: int | None = None
    # A ± the document states beside the number in a form the gate does not read (``(±.9)``, ``± 0,9``).
    error_unread: str | None = None
    error_percent: bool = False  # the error has a percent sign of its own, the value none (a column's)


@dataclass(frozen=True)
class Stamp:
    """The stamp of a table ``runaudit table`` generated: which group and test, and its provenance file."""

    group: str
    test_id: str
    sidecar: str


@dataclass(frozen=True)
class Statement:
    """One number the document states about a metric, and everything it says the number is about."""

    document: str
    line: int
    ordinal: int  # 1 for the first number on its line, 2 for the next, ...
    printed: Printed
    context: str  # the source line, trimmed
    metric: str | None
    condition: str | None = None
    subject: str | None = None  # a run id or arm the row or sentence names
    anchor: str | None = None  # RUN/TEST/METRIC/CONDITION
    stamp: Stamp | None = None
    provenance: tuple[tuple[str, str], ...] = ()  # (run id, run.json sha256) a generated CSV row names
    where: str = "prose"  # "prose" or "table"
    # Why its row and column cannot pin it to one artifact, though they name its run, metric and condition.
    unpinned: str | None = None
    # Why it is no value the capsules hold at all (a cell of a standard deviation's column): never checked.
    unchecked: str | None = None

    @property
    def subject_id(self) -> str:
        return f"{Path(self.document).name}:{self.line}:{self.ordinal}"


@dataclass(frozen=True)
class Vocabulary:
    """The names the capsules in scope use: a document's words are matched against these."""

    metrics: tuple[str, ...]
    conditions: tuple[str, ...]
    subjects: tuple[str, ...]  # run ids and arms
    _patterns: dict[str, re.Pattern[str]] = field(default_factory=dict, compare=False, repr=False)

    def _pattern(self, kind: str) -> re.Pattern[str]:
        if kind not in self._patterns:
            names = sorted(getattr(self, kind), key=len, reverse=True)
            alternatives = "|".join(_spelled(name) for name in names) or r"(?!x)x"
            # Case is ignored in ASCII only: Unicode folding matched a dotless ı or a dotted İ to "i", a name
            # no declared one casefolds to (a KeyError stopped the whole session at collection).
            self._patterns[kind] = re.compile(
                rf"(?<![A-Za-z0-9-])({alternatives})(?![A-Za-z0-9-])", re.IGNORECASE | re.ASCII
            )
        return self._patterns[kind]

    def mentions(self, kind: str, text: str) -> list[tuple[int, str]]:
        """(offset, declared name) of each mention of a metric, condition or subject in ``text``."""
        canonical = {_key(name): name for name in getattr(self, kind)}
        return [
            (found.start(), canonical[_key(found.group(1))]) for found in self._pattern(kind).finditer(text)
        ]

    def first(self, kind: str, text: str) -> str | None:
        found = self.mentions(kind, text)
        return found[0][1] if found else None


def _spelled(name: str) -> str:
    """A name as prose writes it: ``cross_entropy`` is also cross-entropy, cross entropy, cross\\_entropy."""
    return r"(?:_|\\_|[ -])".join(re.escape(part) for part in name.split("_"))


def _key(text: str) -> str:
    return re.sub(r"(?:\\_|[ _-])", "_", text).casefold()


def format_of(path: Path) -> str | None:
    return FORMATS.get(path.suffix.lower())


def parse_number(found: re.Match[str]) -> Printed | None:
    """The :class:`Printed` of one match of the number pattern; None for a number that is no result.

    A ± set as a superscript of a whole number (``$2^{\\pm1}$``) makes a power, not an error.
    """
    integer, fraction = found.group("int"), found.group("frac")
    error = found.group("err")
    percent = any(found.group(name) is not None for name in ("pct", "pct_err", "pct_in"))
    whole = fraction is None and not percent and error is not None and "." not in error
    if whole and found.group("index") in ("^", "<sup>"):
        return None  # a power of a whole number, 2^{±1}
    if fraction is None and not percent and error is None:
        return None  # an integer: a count, a year, an epoch
    sign = "-" if found.group("sign") in ("-", "−") else ""
    try:
        value = Decimal(f"{sign}{integer}.{fraction or '0'}")
        spread = Decimal(error) if error is not None else None
    except InvalidOperation:
        return None
    unread = None
    if error is None and (beside := _UNREAD_ERROR.match(found.string, found.end())) is not None:
        unread = " ".join(found.string[beside.start() : beside.end() + 12].split())
    error_decimals = len(error.partition(".")[2]) if error is not None else None
    shown = " ".join(
        found.group(0).replace("*", "").split()
    )  # one line, though the error may stand on the next
    return Printed(shown, value, len(fraction or ""), percent, spread, error_decimals, unread)


def read_numbers(text: str, *, cell: bool = False) -> list[tuple[re.Match[str], Printed | None]]:
    """Every number in ``text`` with its :class:`Printed` (None for one that is no result).

    A ± stating an error that no number's pattern took, near after a result in its sentence, is that
    result's error, which the gate does not read (``**97.05 %** ± 0.90 %``, ``97.05 % (3 seeds) +/-0.9 %``, a
    second ±): the result is noted so, and a number after that ± is never a value of its own. A ± with no
    result near before it leaves what follows a number of its own. In a table ``cell`` a point or semicolon
    ends no sentence (``97.05 (s.e. ± 0.9)``).
    """
    read: list[tuple[re.Match[str], Printed | None]] = [
        (found, parse_number(found)) for found in _NUMBER.finditer(text)
    ]
    results = [index for index, (_, printed) in enumerate(read) if printed is not None]
    ends = [read[index][0].end() for index in results]
    starts = [found.start() for found, _ in read]
    for sign in _ERROR_SIGN.finditer(text):
        inside = bisect.bisect_right(starts, sign.start()) - 1
        if inside >= 0 and read[inside][0].end() > sign.start():
            continue  # the error of a number that took it
        before = bisect.bisect_right(ends, sign.start()) - 1
        if before < 0:
            continue
        entry = results[before]
        found, printed = read[entry]
        if printed is None or sign.start() - found.end() > ERROR_REACH:
            continue
        if not cell and _SENTENCE_OR_PARAGRAPH_END.search(text, found.end(), sign.start()):
            continue
        line_end = text.find("\n", sign.end(), sign.end() + 16)
        stated = " ".join(
            text[found.end() : min(sign.end() + 16, line_end if line_end >= 0 else len(text))].split()
        )
        read[entry] = (found, replace(printed, error_unread=printed.error_unread or stated))
        digit = sign.end() - 1  # the error's first digit, where the ± reached one
        holder = bisect.bisect_right(starts, digit) - 1
        if text[digit].isdigit() and holder >= 0 and read[holder][0].start() <= digit < read[holder][0].end():
            read[holder] = (read[holder][0], None)  # the error's digits, not a value
    return read


# -- prose -------------------------------------------------------------------------------------------------


@dataclass
class Prose:
    """Text with anchors marked, and the source line of every offset (for paragraphs spread over lines)."""

    text: str = ""
    starts: list[int] = field(default_factory=list)  # offsets where a new source line begins
    lines: list[int] = field(default_factory=list)  # ... and that line's number
    anchors: list[str] = field(default_factory=list)
    # LaTeX: the line of a command that printed nothing right after a digit, until the next printed text.
    silenced_after_digit: int | None = None
    last_visible: str = ""  # the last two characters added that are not white space
    defined: frozenset[str] = frozenset()  # LaTeX: commands the document defines or redefines
    checking: bool = False  # a walk that only checks (a table's cells, a command's argument): no tables read

    def add(self, text: str, line: int) -> None:
        if visible := text.rstrip():
            self.last_visible = (self.last_visible + visible)[-2:]
        position = len(self.text)
        for index, piece in enumerate(text.split("\n")):
            self.starts.append(position)
            self.lines.append(line + index)
            position += len(piece) + 1
        self.text += text

    def anchor(self, target: str) -> str:
        self.anchors.append(target)
        if len(self.anchors) > 0xF8FF - _MARK_BASE:
            raise DocumentError(f"more than {0xF8FF - _MARK_BASE} runaudit anchors in one document")
        return "\ue000" + chr(_MARK_BASE + len(self.anchors) - 1)

    def line_of(self, offset: int) -> int:
        return self.lines[max(bisect.bisect_right(self.starts, offset) - 1, 0)]


def prose_statements(
    prose: Prose, vocabulary: Vocabulary, document: str, source: Sequence[str]
) -> Iterator[Statement]:
    """Every claim in ``prose``: numbers of a sentence naming a metric, or anchored."""
    text = prose.text
    metrics = vocabulary.mentions("metrics", text)
    conditions = vocabulary.mentions("conditions", text)
    subjects = vocabulary.mentions("subjects", text)
    separators = [hit.start() for hit in _SEPARATOR.finditer(text)]
    bounds = [0, *(found.end() for found in _SENTENCE_END.finditer(text)), len(text)]
    paragraph_breaks = [found.start() for found in re.finditer(r"\n\s*\n", text)]
    numbers = read_numbers(text)
    anchors = _anchored(text, prose.anchors, numbers, paragraph_breaks)
    for index, (found, printed) in enumerate(numbers):
        anchor = anchors.get(index)
        if anchor == IGNORE:
            continue
        if printed is None:
            if anchor is None:
                continue
            # An anchored count, a power's base or an error read alone: the number as written, no more.
            sign = "-" if found.group("sign") in ("-", "−") else ""
            fraction = found.group("frac") or ""
            printed = Printed(
                sign + found.group("int") + (f".{fraction}" if fraction else ""),
                Decimal(f"{sign}{found.group('int')}.{fraction or '0'}"),
                len(fraction),
                False,
            )
        if anchor is None and _is_delta(text, found):
            continue
        sentence = bisect.bisect_right(bounds, found.start())
        start, end = bounds[sentence - 1], bounds[min(sentence, len(bounds) - 1)]
        metric = _nearest(metrics, found.start(), start, end)
        if metric is None:
            earlier = _before_in_paragraph(metrics, found.start(), paragraph_breaks)
            if anchor is None and (not earlier or not (printed.percent or printed.error is not None)):
                continue  # only a result-shaped number (%, ±) borrows a metric from its paragraph
            metric = earlier.pop() if len(earlier) == 1 else None  # several: which one is not said
        lower, upper = _clause(metrics, found.start(), start, end)
        part_lower, part_upper = _part(separators, found, lower, upper)
        line = prose.line_of(found.start())
        # The run: one named right after the number in its part ("compared to 96.00 % for the baseline"),
        # else the one run named before it in its sentence. Two named before and none after ("the probe
        # outperforms the baseline, reaching 97.05 %") leave it to grammar the reader does not parse.
        after = _within(subjects, found.end(), part_upper)
        named_before = {name for _, name in _within(subjects, start, found.start())}
        if not after and len(named_before) > 1 and anchor is None:
            raise DocumentError(
                f"{document}: the number {printed.text} at line {line} follows {len(named_before)} runs in its "
                f"sentence ({', '.join(sorted(named_before))}): which one it belongs to is not clear; name its "
                "run right after it, or anchor it (docs/claims.md)"
            )
        before = _closest(_within(subjects, start, found.start()), found.start())
        yield _statement(
            document,
            source,
            line,
            printed,
            metric=metric,
            condition=_closest(_within(conditions, part_lower, part_upper), found.start())
            or _closest(_within(conditions, lower, upper), found.start()),
            subject=after[0][1] if after else before,
            anchor=anchor,
        )


def _anchored(
    text: str,
    targets: Sequence[str],
    numbers: Sequence[tuple[re.Match[str], Printed | None]],
    breaks: Sequence[int],
) -> dict[int, str]:
    """Which number each anchor pins: the first result after it in its paragraph ("Seed 2 ends at 1.45"
    pins 1.45, not the 2), else the first number there; an anchor with neither pins nothing.

    The next unpinned number (and result) is found through skip pointers, so that thousands of anchors over
    thousands of integers cost linear time, not one scan of the paragraph per anchor."""
    pinned: dict[int, str] = {}
    starts = [found.start() for found, _ in numbers]
    next_any = list(range(len(numbers) + 1))
    next_result = [
        index if index == len(numbers) or numbers[index][1] is not None else index + 1 for index in next_any
    ]
    for mark in _MARK.finditer(text):
        paragraph = bisect.bisect_right(breaks, mark.start())
        end = bisect.bisect_left(starts, breaks[paragraph] if paragraph < len(breaks) else len(text))
        first = bisect.bisect_right(starts, mark.start())
        chosen = _free(next_result, first)
        if chosen >= end:
            chosen = _free(next_any, first)
        if chosen < end:
            pinned[chosen] = targets[ord(mark.group(1)) - _MARK_BASE]
            next_any[chosen] = next_result[chosen] = chosen + 1
    return pinned


def _free(following: list[int], index: int) -> int:
    """The first index at or after ``index`` that ``following`` leaves free, compressing the path walked."""
    root = index
    while following[root] != root:
        root = following[root]
    while following[index] != root:
        following[index], index = root, following[index]
    return root


def _is_delta(text: str, found: re.Match[str]) -> bool:
    if found.group("sign") == "+":
        return True
    return bool(_DELTA_BEFORE.search(text[max(0, found.start() - 20) : found.start()])) or bool(
        _DELTA_AFTER.match(text[found.end() : found.end() + 24])
    )


def _nearest(mentions: list[tuple[int, str]], offset: int, start: int, end: int) -> str | None:
    """The metric named closest before ``offset`` in its sentence, else the first after it there."""
    before = _within(mentions, start, offset)
    if before:
        return before[-1][1]
    after = _within(mentions, offset, end)
    return after[0][1] if after else None


def _clause(mentions: list[tuple[int, str]], offset: int, start: int, end: int) -> tuple[int, int]:
    """The part of the sentence that speaks of the number's metric: from after the metric named before
    its own (or the sentence's start) to the next metric named after the number (or the sentence's end).
    "accuracy of 98.1 % on clean digits, and its cross-entropy under noise is 0.43": clean goes with
    98.1, noise with 0.43."""
    before = _within(mentions, start, offset)
    after = _within(mentions, offset + 1, end)
    if not before and after:  # its own metric is named after it ("97.05 % accuracy on clean data")
        return start, after[1][0] if len(after) > 1 else end
    lower = before[-2][0] + 1 if len(before) >= 2 else start
    return lower, after[0][0] if after else end


def _within(mentions: list[tuple[int, str]], lower: int, upper: int) -> list[tuple[int, str]]:
    """The mentions at offsets in [lower, upper), by bisection (mentions are in offset order)."""
    return mentions[bisect.bisect_left(mentions, (lower, "")) : bisect.bisect_left(mentions, (upper, ""))]


_SEPARATOR = re.compile(r",|;|\band\b|\bwhile\b|\bwhereas\b")


def _part(separators: list[int], found: re.Match[str], lower: int, upper: int) -> tuple[int, int]:
    """The part of a clause between separators (",", ";", "and"; their offsets, in order) that holds the
    number: "98.1 % on clean and 86.4 % under noise" gives each number its own condition."""
    left = bisect.bisect_left(separators, found.start()) - 1
    right = bisect.bisect_left(separators, found.end())
    start = separators[left] if left >= 0 and separators[left] >= lower else lower
    end = separators[right] if right < len(separators) and separators[right] < upper else upper
    return start, end


def _closest(mentions: list[tuple[int, str]], offset: int) -> str | None:
    return min(mentions, key=lambda item: abs(item[0] - offset))[1] if mentions else None


def _before_in_paragraph(mentions: list[tuple[int, str]], offset: int, breaks: list[int]) -> set[str]:
    """The metrics named earlier in the paragraph ("accuracy is 98.1 %. Under noise, 86.4 %.")."""
    paragraph = bisect.bisect_right(breaks, offset)
    start = breaks[paragraph - 1] if paragraph else 0
    return {name for _, name in _within(mentions, start, offset)}


def _statement(document: str, source: Sequence[str], line: int, printed: Printed, **about: Any) -> Statement:
    """A statement of ``document`` at ``line``, quoting that source line; numbered once all are found."""
    return Statement(
        document=document, line=line, ordinal=0, printed=printed, context=_context(source, line), **about
    )


def _context(source: Sequence[str], line: int) -> str:
    text = source[line - 1].strip() if 0 < line <= len(source) else ""
    return text if len(text) <= 160 else text[:157] + "..."


# -- tables ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    line: int
    cells: tuple[str, ...]


def table_statements(
    heads: Sequence[str],
    rows: Iterable[Row],
    vocabulary: Vocabulary,
    document: str,
    source: Sequence[str],
    stamp: Stamp | None,
) -> Iterator[Statement]:
    """One statement per number in a cell whose column header names a metric; its row's label is the subject."""
    columns = [(vocabulary.first("metrics", head), vocabulary.first("conditions", head)) for head in heads]
    percent = [bool(_PERCENT_HEAD.search(head)) for head in heads]
    deltas = [bool(_DELTA_HEAD.search(head)) for head in heads]
    # A column of a metric's spread (``accuracy_se``, ``Accuracy (std)``) beside a column of its values (the
    # nearest one left of it, else any of its metric and condition) has no values of its own. Alone, its head
    # only says what its cells carry (``accuracy (95% CI)`` over ``97.05 (96.50-97.60)``): a column of values.
    spread_heads = [bool(_SPREAD_HEAD.search(head) and not _VALUE_HEAD.search(head)) for head in heads]
    # A spread head naming no metric (``s.e.``, ``std``) right of a column of values is that column's spread:
    # its cells were dropped unread, so a wrong standard error beside a value passed with it.
    for index in range(2, len(heads)):
        before = index - 1
        of_values_before = columns[before][0] is not None and not (deltas[before] or spread_heads[before])
        if spread_heads[index] and columns[index][0] is None and of_values_before:
            columns[index] = columns[before]
    plain = {
        columns[index]: index
        for index in reversed(range(1, len(heads)))
        if columns[index][0] is not None and not deltas[index] and not spread_heads[index]
    }
    plain_of_metric: dict[str, list[int]] = {}
    for (metric, _), index in plain.items():
        plain_of_metric.setdefault(str(metric), []).append(index)
    partners: list[int | None] = [None] * len(heads)  # AMBIGUOUS: a spread, of which value column unread
    left_of_metric: dict[str, int] = {}
    left_of_column: dict[tuple[str | None, str | None], int] = {}
    for index in range(1, len(heads)):
        metric, condition = columns[index]
        if metric is None or deltas[index]:
            continue
        if spread_heads[index] and condition is not None:
            left = left_of_column.get(columns[index])
            partners[index] = left if left is not None else plain.get(columns[index])
        elif spread_heads[index]:
            # Naming no condition, it is the spread of the column just left of it, or of its metric's only one;
            # beside several, whose it is is not read (its cells are listed, never values).
            if left_of_metric.get(metric) == index - 1 or len(plain_of_metric.get(metric, ())) == 1:
                partners[index] = left_of_metric.get(metric, plain_of_metric[metric][0])
            elif metric in plain_of_metric:
                partners[index] = AMBIGUOUS
        else:
            left_of_metric[metric] = left_of_column[columns[index]] = index
    spreads = [partner is not None for partner in partners]
    # Columns whose heads read the same (``accuracy (clean)`` over a header row of epochs or shots): what
    # tells them apart is not read, so a row names its run but no column pins a number to that run's value.
    repeated = Counter(
        columns[index]
        for index in range(1, len(heads))
        if columns[index][0] is not None and not deltas[index] and not spreads[index]
    )
    # A standard-error column's cell is the error of its partner's value in the row (two such columns state
    # two errors, and the value's is not read); another spread's (a deviation, an interval) is not read.
    errors_of: dict[int, list[int]] = {}
    for index, partner in enumerate(partners):
        if partner not in (None, AMBIGUOUS) and _STANDARD_ERROR_HEAD.search(heads[index]):
            errors_of.setdefault(partner, []).append(index)
    standard_errors = {index for indices in errors_of.values() for index in indices}
    unread_spreads = {
        index
        for index, partner in enumerate(partners)
        if partner is not None and index not in standard_errors
    }
    for row in rows:
        label = row.cells[0] if row.cells else ""
        if not any(
            parse_number(found)
            for cell in row.cells[1:]
            if SPAN not in cell
            for found in _NUMBER.finditer(cell)
        ):
            # A header inside the body (a second panel, a section row) changes what the columns below mean
            # to a reader; the gate reads the one header above the body.
            named = next(
                (
                    mention
                    for cell in row.cells
                    for kind in ("metrics", "conditions")
                    if (mention := vocabulary.first(kind, cell))
                ),
                None,
            )
            if named is not None:
                raise DocumentError(
                    f"{document}: the table's row at line {row.line} names {named!r} below its header; the gate "
                    "reads one header per table: split the table, or name the condition in each column's head "
                    "(docs/claims.md)"
                )
        subject = _exact_subject(vocabulary, label) if stamp is None else label.strip()
        for column, ((metric, condition), cell) in enumerate(
            zip(columns[1:], row.cells[1:], strict=False), 1
        ):
            if deltas[column] or (spreads[column] and column not in unread_spreads) or SPAN in cell:
                continue  # a difference or standard-error column (no stated value), or a cell spanning columns
            anchor = None
            marked = re.search(r"runaudit:\s*(\S+)", cell)
            if marked:
                anchor = marked.group(1)
                if anchor == IGNORE:
                    continue
            if metric is None and anchor is None:
                continue
            if cell.startswith(_HIDDEN_BESIDE):
                raise DocumentError(
                    f"{document}: a cell of the table's row at line {row.line} holds a box or colour that may draw "
                    f"its digits at no size, out of place or unseen, or a negative skip or colour switch, beside "
                    f"other digits "
                    f"({_escaped(cell[1:].translate(_UNBOXED).strip()[:40])}): what is checked would not be what is "
                    "shown (docs/claims.md)"
                )
            for found, printed in read_numbers(_CODE_SPAN.sub(" ", _MD_COMMENT.sub(" ", cell)), cell=True):
                if printed is None or (found.group("sign") == "+" and anchor is None):
                    continue
                if percent[column] and not printed.percent:
                    printed = replace(printed, percent=True)
                if column in errors_of:
                    printed = _with_error_from(
                        printed,
                        [
                            (heads[index], row.cells[index])
                            for index in errors_of[column]
                            if index < len(row.cells)
                        ],
                    )
                yield _statement(
                    document,
                    source,
                    row.line,
                    printed,
                    metric=metric,
                    condition=condition,
                    subject=subject,
                    anchor=anchor,
                    stamp=stamp,
                    where="table",
                    unchecked=(
                        f"its column's head ({heads[column].strip()[:40]!r}) reads as a spread of {metric} other "
                        "than the standard error over seeds, which is what the capsules hold"
                        if column in unread_spreads
                        else None
                    ),
                    unpinned=(
                        f"its column's head reads {metric}{f' ({condition})' if condition else ''} as "
                        f"{repeated[metric, condition] - 1} other column(s) do: what tells them apart (a header "
                        "row of epochs or shots, a sub-column) is not read"
                        if stamp is None and repeated[metric, condition] > 1
                        else None
                    ),
                )
                break  # one claim per cell: "46.4 ± 2.0 (n=3)" is one number with its error


def _with_error_from(printed: Printed, columns: Sequence[tuple[str, str]]) -> Printed:
    """``printed`` with the standard error its row states in a column of its own (``accuracy_se``: head and
    cell of each such column). A cell that is no plain number, a second such column, or an error the value's
    own cell states otherwise, is noted as an error the gate does not read; an empty cell states none."""
    stated = [(head, " ".join(cell.split())) for head, cell in columns if cell.strip()]
    if not stated:
        return printed
    head, shown = stated[0]
    numbers = [
        (found, number)
        for found, number in read_numbers(_CODE_SPAN.sub(" ", _MD_COMMENT.sub(" ", shown)), cell=True)
        if number is not None
    ]
    if (
        len(stated) > 1
        or len(numbers) != 1
        or numbers[0][1].error is not None
        or numbers[0][1].error_unread is not None
        or numbers[0][0].group("sign") is not None
        or (printed.error is not None and printed.error != numbers[0][1].value)
    ):
        return replace(printed, error_unread=printed.error_unread or "; ".join(cell for _, cell in stated))
    error = numbers[0][1]
    return replace(
        printed,
        error=error.value,
        error_decimals=error.decimals,
        error_percent=error.percent or bool(_PERCENT_HEAD.search(head)),
    )


def _exact_subject(vocabulary: Vocabulary, label: str) -> str | None:
    """A row label that is a run id or an arm (after markup is dropped), else None."""
    plain = re.sub(r"[*_`\\{}]|\\text\w+", "", label).strip()
    return next((name for name in vocabulary.subjects if name.casefold() == plain.casefold()), None)


def _stamp(comment: str) -> Stamp | None:
    found = _STAMP.search(comment)
    return (
        Stamp(found.group("group").strip(), found.group("test").strip(), found.group("sidecar").strip())
        if found
        else None
    )


def _anchor(comment: str) -> str | None:
    found = _ANCHOR.match(comment)
    return found.group("target") if found else None


# -- Markdown ----------------------------------------------------------------------------------------------


# HTML in Markdown that may keep what it holds off the page while the reader, which drops tags, reads it: an
# element hidden, styled or classed to hide, coloured, or turned right to left (``<bdo dir=rtl>0.9705</bdo>``
# shows 5079.0), the elements that never render what they hold as text, and a stylesheet that may hide any
# element. ``<span hidden>97.05</span> `91.00``` in a cell passed 97.05 where the page shows 91.00.
_ANY_TAG = re.compile(r"<(/?)([A-Za-z][^\s/<>]*)([\s/][^<>]*)?>")  # linear: it stops at the next "<"
_ATTRIBUTE = re.compile(r"""([^\s"'>/=]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]*))?""")
_HIDING_CSS = re.compile(
    r"display\s*:\s*none|visibility|opacity|font-size\s*:\s*0|(?<![-\w])color\s*:|clip|transform|text-indent"
    r"|position\s*:|content\s*:|(?<![-\w])(?:width|height)\s*:\s*0|overflow|filter|mix-blend",
    re.IGNORECASE,
)
_HIDING_CLASS = frozenset(
    {"hidden", "hide", "sr-only", "visually-hidden", "visuallyhidden", "d-none", "invisible", "collapse",
     "screen-reader-text", "offscreen"}
)  # fmt: skip
_NEVER_RENDERED = frozenset(
    {"template", "noscript", "script", "textarea", "dialog", "rp", "datalist", "title", "noembed", "noframes",
     "canvas", "video", "audio", "object", "iframe", "bdo", "select", "option", "mphantom"}
)  # fmt: skip
_VOID = frozenset(
    {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
)
_CLAIM_LIKE = re.compile(r"\d[.,·]\d|\d\s*%")  # what the reader may take for a stated result


def _hides(name: str, attributes: str) -> bool:
    """Whether an element, by its name and attributes as written, may keep what it holds off the page."""
    if name in _NEVER_RENDERED:
        return True
    for found in _ATTRIBUTE.finditer(attributes):
        attribute, value = found.group(1).lower(), (found.group(2) or "").strip("\"'")
        if attribute in ("hidden", "popover", "color") or (attribute == "dir" and value.lower() == "rtl"):
            return True
        if attribute == "style" and _HIDING_CSS.search(value):
            return True
        if attribute == "class" and _HIDING_CLASS.intersection(value.lower().split()):
            return True
    return False


def _hiding_html(content: str) -> int | None:
    """Where ``content`` (code blanked) opens an element that may keep a number it holds off the page, or a
    stylesheet that may hide elements (``<style>`` with display, visibility, colour...), or None.

    An element holds what stands up to its own closing tag, nested ones of its name counted (up to the end
    of the text if it has none). Linear in ``content``: tags are paired in one pass, the numbers outside
    every tag counted once, and a stylesheet inside one already searched is not searched again: elements
    nest, so it lies wholly inside the one that hid nothing (20,000 unclosed ``<style>``, each searched to
    the end of the text, took 256 s). A match in a stretch of text is one in any stretch around it, as
    :data:`_HIDING_CSS` looks neither ahead nor for the text's end.
    """
    tags = list(_ANY_TAG.finditer(content))
    shown = _TAG.sub(lambda found: " " * len(found.group(0)), content)
    claims = [0] * (len(content) + 1)
    for found in _CLAIM_LIKE.finditer(shown):
        claims[found.start() + 1] += 1
    claims_before = list(itertools.accumulate(claims))
    closed_at: dict[int, int] = {}  # an opening tag's start -> where its closing tag starts
    open_of: dict[str, list[int]] = {}
    for found in tags:
        name = found.group(2).lower()
        if found.group(1):
            if open_of.get(name):
                closed_at[open_of[name].pop()] = found.start()
        elif name not in _VOID and not (found.group(3) or "").rstrip().endswith("/"):
            open_of.setdefault(name, []).append(found.start())
    searched = 0  # where the stylesheets searched so far, which hide nothing, end
    for found in tags:
        name = found.group(2).lower()
        if found.group(1) or name in _VOID:
            continue
        end = closed_at.get(found.start(), len(content))
        if name == "style" and found.start() >= searched:
            if _HIDING_CSS.search(content, found.end(), end):
                return found.start()
            searched = end
        if _hides(name, found.group(3) or "") and claims_before[end] > claims_before[found.end()]:
            return found.start()
    return None


def _code_blanked(text: str, tokens: Sequence[Any]) -> str:
    """``text`` with its code as spaces, lines kept: fenced and indented blocks, and code spans line by line
    and, in a table, cell by cell (a backtick left open in one paragraph or cell pairs with none in another,
    as markdown-it reads them); then comments, which a code span's ``<!--`` does not open."""
    lines = text.split("\n")
    in_table: set[int] = set()
    for token in tokens:
        if token.type in ("fence", "code_block") and token.map:
            for number in range(token.map[0], min(token.map[1], len(lines))):
                lines[number] = " " * len(lines[number])
        elif token.type == "table_open" and token.map:
            in_table.update(range(token.map[0], token.map[1]))

    def spans_blanked(piece: str) -> str:
        return _CODE_SPAN.sub(lambda found: " " * len(found.group(0)), piece)

    for number, line in enumerate(lines):
        cells = re.split(r"(?<!\\)(\|)", line) if number in in_table else [line]
        lines[number] = "".join(spans_blanked(cell) for cell in cells)
    return _MD_COMMENT.sub(lambda found: re.sub(r"[^\n]", " ", found.group(0)), "\n".join(lines))


def markdown_statements(text: str, vocabulary: Vocabulary, document: str) -> Iterator[Statement]:
    from markdown_it import MarkdownIt

    if len(text) > MARKDOWN_CAP:
        raise DocumentError(
            f"{document}: {len(text):,} characters of Markdown, past the {MARKDOWN_CAP:,} this gate reads in "
            "bounded time and memory; split it (docs/claims.md)"
        )
    source = text.splitlines()
    tokens = MarkdownIt("commonmark", {"maxNesting": MARKDOWN_NESTING}).enable("table").parse(text)
    # A token opening a block at the limit's depth: the parser may have dropped what follows it.
    deepest = next((token for token in tokens if token.level + token.nesting >= MARKDOWN_NESTING), None)
    if deepest is not None:
        raise DocumentError(
            f"{document}:{_first_line(deepest)}: lists and quotes nested {MARKDOWN_NESTING} blocks deep (a list "
            f"counts two); the gate reads at most {MARKDOWN_NESTING - 1}, as its Markdown parser drops what lies "
            "deeper and all after it (docs/claims.md)"
        )
    if (opened := _hiding_html(_code_blanked(text, tokens))) is not None:
        element = text[opened : text.find(">", opened) + 1 or opened + 60]
        raise DocumentError(
            f"{document}:{_line(text, opened)}: {element[:60]!r} may keep a number off the page (hidden, styled, "
            "coloured, classed, turned or never rendered, or a stylesheet), while the reader, which drops tags, "
            "would read it: what is checked may not be what is shown (docs/claims.md)"
        )
    prose = Prose()
    stamp: Stamp | None = None
    pending = ""  # anchors on lines of their own, for the paragraph that follows
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.type == "html_block" and _TAG.sub("", _MD_COMMENT.sub("", token.content)).strip():
            # "<!-- runaudit: ... --> Seed 2 ends at 1.45." opens an HTML block: its text is prose all the same
            content = _MD_COMMENT.sub(lambda found: _marked(prose, found.group(1)), token.content)
            prose.add("\n\n" + pending + _references_decoded(_TAG.sub(" ", content)), _first_line(token) - 2)
            pending = ""
        elif token.type == "html_block":
            for comment in _MD_COMMENT.findall(token.content):
                if (found := _stamp(comment)) is not None:
                    stamp = found
                elif (target := _anchor(comment)) is not None:
                    pending += prose.anchor(target)
        elif token.type == "table_open":
            pending = ""  # an anchor above a table pins none of its cells: anchor the cell itself
            end = next(i for i in range(index, len(tokens)) if tokens[i].type == "table_close")
            heads, rows = _markdown_table(tokens[index:end])
            yield from table_statements(heads, rows, vocabulary, document, source, stamp)
            stamp = None
            index = end
        elif token.type == "inline" and token.map is not None:
            content = _MD_COMMENT.sub(lambda found: _marked(prose, found.group(1)), token.content)
            content = _CODE_SPAN.sub(lambda found: re.sub(r"[^\n]", " ", found.group(0)), content)
            prose.add("\n\n" + pending + _references_decoded(content), _first_line(token) - 2)
            pending = ""
        elif token.type in ("fence", "code_block"):
            prose.add("\n\n", _first_line(token))
        index += 1
    yield from prose_statements(prose, vocabulary, document, source)


def _references_decoded(text: str) -> str:
    """``text`` with its character references outside code spans as the page draws them, so that
    ``97.05 &plusmn; 0.3 %`` is read as one number with its error, as shown (it was 97.05 and a claim of 0.3 %
    of its own); one that would draw markup or a line break is left as written."""

    def decoded(found: re.Match[str]) -> str:
        written = found.group()
        if not written.startswith("&#") and written[1:] not in html.entities.html5:
            return written  # no reference (&plusmn0; is drawn as written, not as ±0;)
        drawn = html.unescape(written)
        return written if _DRAWN_AS_WRITTEN.intersection(drawn) else drawn

    parts, last = [], 0
    for span in _CODE_SPAN.finditer(text):
        parts += [_CHARACTER_REFERENCE.sub(decoded, text[last : span.start()]), span.group()]
        last = span.end()
    return "".join(parts) + _CHARACTER_REFERENCE.sub(decoded, text[last:])


def _marked(prose: Prose, comment: str) -> str:
    """An anchor comment as its marker in the prose; any other comment as a space."""
    target = _anchor(comment)
    return prose.anchor(target) if target is not None else " "


def _first_line(token: object) -> int:
    mapped = getattr(token, "map", None)
    return mapped[0] + 1 if mapped else 1


def _markdown_table(tokens: Sequence[object]) -> tuple[list[str], list[Row]]:
    heads: list[str] = []
    rows: list[Row] = []
    current: list[str] = []
    line = 1
    in_head = False
    for token in tokens:
        kind = getattr(token, "type", "")
        if kind == "thead_open":
            in_head = True
        elif kind == "thead_close":
            in_head = False
        elif kind == "tr_open":
            current, line = [], _first_line(token)
        elif kind == "inline":
            current.append(_references_decoded(getattr(token, "content", "")))
        elif kind == "tr_close":
            if in_head:
                heads = current
            else:
                rows.append(Row(line, tuple(current)))
    return heads, rows


# -- LaTeX -------------------------------------------------------------------------------------------------


def latex_statements(text: str, vocabulary: Vocabulary, document: str) -> Iterator[Statement]:
    from pylatexenc.latexwalker import LatexWalker, LatexWalkerError

    if len(text) > LATEX_CAP:
        raise DocumentError(
            f"{document}: {len(text):,} characters of LaTeX, past the {LATEX_CAP:,} this gate reads in bounded "
            "time; name the file that holds the results instead (docs/claims.md)"
        )
    source = text.splitlines()
    newlines = [found.start() for found in re.finditer("\n", text)]

    def line_at(position: int) -> int:
        return bisect.bisect_left(newlines, position) + 1

    text, undecided = _conditionals_read(text)
    if undecided is not None:
        raise DocumentError(
            f"{document}: a TeX conditional at line {_line(text, undecided)} holds a number; which branch is "
            "typeset is not read, so what is checked may not be what is shown (docs/claims.md)"
        )
    # A URL's % is a character, not a comment (url and hyperref read the address verbatim): taken for one, it
    # swallowed the rest of the line and the link's text the next lines, so their numbers went unread.
    text = _URL.sub(lambda found: found.group(0).replace("%", "_"), text)
    # Decoration becomes a command that prints nothing, of the same length (the lines stay where they were).
    text = _LATEX_DECORATION.sub(lambda found: "\\relax".ljust(len(found.group(0))), text)
    text = _TEXT_COLOUR.sub(lambda found: f"\\{_COLOURED}".ljust(len(found.group(0))), text)
    text = _COLOUR_SWITCH.sub(lambda found: f"\\{_SWITCHED}".ljust(len(found.group(0))), text)
    try:
        nodes, _, _ = LatexWalker(
            text, latex_context=_walker_context(), tolerant_parsing=True
        ).get_latex_nodes()
    except (LatexWalkerError, RecursionError) as exc:
        raise DocumentError(f"{document}: not LaTeX the parser can read ({type(exc).__name__})") from None
    prose = Prose(
        defined=frozenset(name for found in _DEFINED.finditer(text) for name in found.groups() if name)
    )
    tables: list[Statement] = []
    stamp: list[Stamp | None] = [None]
    _walk_latex(nodes, prose, tables, stamp, line_at, vocabulary, document, source)
    yield from tables
    yield from prose_statements(prose, vocabulary, document, source)


@functools.cache
def _walker_context() -> Any:
    """pylatexenc's LaTeX with the arguments of the boxes it does not know (``\\makebox[0pt]{}`` is one node)."""
    from pylatexenc.latexwalker import get_default_latex_context_db
    from pylatexenc.macrospec import MacroSpec

    context = get_default_latex_context_db()
    context.add_context_category(
        "runaudit-boxes",
        macros=[MacroSpec(name, arguments) for name, arguments in {**LATEX_BOXES, **LATEX_OPTIONS}.items()],
    )
    return context


@functools.cache
def _known_to_the_converter(macro: str) -> bool:
    return _converter().latex_context.get_macro_spec(macro) is not None


def _walk_latex(nodes, prose, tables, stamp, line_at, vocabulary, document, source) -> None:  # type: ignore[no-untyped-def]
    from pylatexenc.latexwalker import (
        LatexCharsNode,
        LatexCommentNode,
        LatexEnvironmentNode,
        LatexGroupNode,
        LatexMacroNode,
        LatexMathNode,
    )

    def check(inner: Any) -> None:
        """Walk ``inner`` for its refusals only (what it prints is read elsewhere, or not at all)."""
        scratch = Prose(defined=prose.defined, checking=True)
        _walk_latex(inner, scratch, [], [None], line_at, vocabulary, document, source)

    nodes = [node for node in nodes or () if node is not None]
    argument_of_unknown: int | None = None
    for index, node in enumerate(nodes):
        line = line_at(node.pos)
        if isinstance(node, LatexCommentNode):
            if (found := _stamp(node.comment)) is not None:
                stamp[0] = found
            elif (target := _anchor(node.comment)) is not None:
                prose.add(prose.anchor(target), line)
        elif isinstance(node, LatexEnvironmentNode):
            # Its boundaries print nothing: an empty inline environment between two digits joins them.
            _silence(prose, line)
            if node.environmentname in TABULARS:
                if problem := _column_problem(node, prose.defined):
                    raise DocumentError(f"{document}: the tabular at line {line} {problem} (docs/claims.md)")
                if not prose.checking:
                    check(node.nodelist)  # the cells' numbers are checked as prose is
                    heads, rows = _latex_table(node, line_at, document)
                    tables.extend(table_statements(heads, rows, vocabulary, document, source, stamp[0]))
                    stamp[0] = None
                else:
                    _walk_latex(node.nodelist, prose, tables, stamp, line_at, vocabulary, document, source)
                prose.add("\n\n", line)
            elif node.environmentname == "math":  # inline math, as $...$ (it was read as displayed math)
                check(node.nodelist)
                _print(prose, _latex_text(_math_spaced(node.latex_verbatim())), line, document)
            elif node.environmentname.rstrip("*") in LATEX_UNREAD:
                prose.add("\n\n", line)  # displayed math and code: constants, not results
            else:
                prose.add("\n\n", line)
                _walk_latex(node.nodelist, prose, tables, stamp, line_at, vocabulary, document, source)
                _silence(prose, line_at(node.pos + node.len))
                prose.add("\n\n", line_at(node.pos + node.len))
        elif isinstance(node, LatexCharsNode):
            _add_printed(prose, node.chars, line, document)
        elif isinstance(node, LatexMathNode):
            check(node.nodelist)
            _print(prose, _latex_text(_math_spaced(node.latex_verbatim())), line, document)
        elif not isinstance(node, LatexMacroNode):
            if getattr(node, "specials_chars", None) == "&":  # a cell's end: what follows is another cell
                _add_printed(prose, " & ", line, document)
                prose.last_visible = ""
            elif isinstance(node, LatexGroupNode):
                _walk_latex(node.nodelist, prose, tables, stamp, line_at, vocabulary, document, source)
                if (
                    argument_of_unknown == index
                ):  # what follows an unknown command's argument may be its number
                    prose.silenced_after_digit = prose.silenced_after_digit or line
            else:
                _print(prose, _latex_text(node.latex_verbatim()), line, document)
        elif node.macroname in LATEX_ROW_ENDS:  # a line's or a row's end: what follows stands apart
            _add_printed(prose, "\n", line, document)
            prose.last_visible = ""
        elif (
            node.macroname in LATEX_REFERENCES
            or node.macroname in prose.defined
            or not (
                _known_to_the_converter(node.macroname)
                or node.macroname in LATEX_SKIPPED
                or node.macroname in LATEX_GAPS
                or node.macroname in LATEX_SILENT
                or node.macroname in LATEX_BOXES
                or node.macroname in LATEX_SIUNITX
                or node.macroname in ("section", "subsection", "paragraph", "item", ",")
            )
        ):
            # A command the paper (or a package) defines, or a reference: what it prints is not read, and
            # against a digit it may be part of the number (\\newcommand{\\nine}{9} ... \\nine7.05).
            if _DIGIT_AT_END.search(prose.text[-2:]):
                raise DocumentError(_unknown_beside_a_number(document, node.macroname, line))
            following = nodes[index + 1] if index + 1 < len(nodes) else None
            if node.macroname in LATEX_REFERENCES:
                prose.add(" ", line)
                prose.silenced_after_digit = prose.silenced_after_digit or line
            elif isinstance(following, LatexGroupNode) and not node.macro_post_space:
                argument_of_unknown = index + 1  # its argument is read as printed; a digit after it is not
            else:
                prose.silenced_after_digit = prose.silenced_after_digit or line
        elif node.macroname in LATEX_SKIPPED:
            if node.macroname in LATEX_SKIPPED_SHOWN:
                _add_printed(prose, " ", line, document)
            else:
                _silence(prose, line)
                prose.add(" ", line)
        elif node.macroname in LATEX_GAPS:
            _add_printed(prose, " ", line, document)
        elif node.macroname == ",":
            # A thin space: between digits it groups them (1\\,000), and neither side is read alone.
            following = nodes[index + 1] if index + 1 < len(nodes) else None
            grouping = isinstance(following, LatexCharsNode) and following.chars[:1].isdigit()
            _add_printed(prose, "\u202f" if grouping else " ", line, document)
        elif node.macroname in LATEX_SILENT:
            _silence(prose, line)
        elif node.macroname in LATEX_BOXES:
            _silence(prose, line)
            arguments = node.nodeargd.argnlist if node.nodeargd and node.nodeargd.argnlist else []
            if any(argument is not None and argument.latex_verbatim() == "(" for argument in arguments):
                # \makebox(0,0){9}7.05: picture mode places what the box holds, at no width; the reader
                # would take its coordinates and contents as text.
                raise DocumentError(
                    f"{document}: \\{node.macroname} at line {line} takes picture-mode coordinates: where it "
                    "draws what it holds is not read, so what is checked would not be what is shown "
                    "(docs/claims.md)"
                )
            content = arguments[-1] if arguments else None
            inner = content.nodelist if isinstance(content, LatexGroupNode) else [content]
            if _of_no_width(node.macroname, arguments):
                shown = _latex_text("".join(part.latex_verbatim() for part in inner if part is not None))
                an_error = re.match(_PLUS_MINUS, shown.strip())
                if not an_error and any(printed is not None for _, printed in read_numbers(shown)):
                    raise DocumentError(
                        f"{document}: \\{node.macroname} at line {line} is given no width and prints "
                        f"{shown.strip()[:20]!r} over what stands beside it, which may hide it: what is checked "
                        "would not be what is shown (docs/claims.md)"
                    )
            if node.macroname in LATEX_OVERPRINTS:
                check(inner)
                shown = _latex_text("".join(part.latex_verbatim() for part in inner if part is not None))
                if _DIGIT_OR_SIGN.search(shown):
                    raise DocumentError(
                        f"{document}: \\{node.macroname} at line {line} prints {shown.strip()[:20]!r} over what "
                        "stands beside it: a digit or sign the reader cannot place (docs/claims.md)"
                    )
            elif node.macroname in LATEX_MARKS:
                check(inner)
                shown = _latex_text(
                    "".join(part.latex_verbatim() for part in inner if part is not None)
                ).strip()
                if shown:
                    _add_printed(prose, _mark_printed(node.macroname, shown), line, document)
            else:
                _walk_latex(inner, prose, tables, stamp, line_at, vocabulary, document, source)
                if node.macroname in LATEX_RESHAPING:
                    _silence(prose, line)
        elif node.macroname in ("section", "subsection", "paragraph", "item"):
            prose.add("\n\n" + _latex_text(node.latex_verbatim()) + ". ", line)
        else:
            # What the converter prints is read; its arguments are checked as prose is (\\textbf{9\\relax 7.05}).
            for argument in node.nodeargd.argnlist if node.nodeargd and node.nodeargd.argnlist else ():
                if isinstance(argument, LatexGroupNode):
                    check(argument.nodelist)
            _print(prose, _latex_text(_math_spaced(node.latex_verbatim())), line, document)


def _column_problem(environment: Any, defined: frozenset[str]) -> str | None:
    """Why a tabular's column specification makes its cells read otherwise than typeset, or None.

    ``@{}`` between two columns joins their cells (``9 & 7.05`` typeset 97.05), a negative space in a
    column's decoration moves them together, and ``>{9}``, ``<{9}`` or ``@{9}`` print text into every cell
    of a column; ``@{}`` at either end only trims the table's edge. Every argument of ``\\begin`` is read
    from the source (pylatexenc knows neither ``longtable``'s nor an optional ``[t]``'s).
    """
    arguments = _begin_arguments(environment.latex_verbatim())
    for argument in arguments:
        if own := [name for name in re.findall(r"\\([A-Za-z@]+)", argument) if name in defined]:
            return f"builds its column specification from \\{own[0]}, a command the paper defines: it is not read"
    return next(filter(None, (_spec_problem(argument) for argument in arguments)), None)


_BEGIN = re.compile(r"\\begin\s*\{[^{}]*\}")


def _paired_braces(text: str) -> tuple[list[int], dict[int, int], list[int]]:
    """The unescaped braces of ``text`` in one pass: their indexes, each closed ``{``'s closing brace, and for
    each brace the innermost group open just after it (-1: none)."""
    positions: list[int] = []
    ends: dict[int, int] = {}
    enclosing: list[int] = []
    opened: list[int] = []
    for found in _BRACE.finditer(text):
        index = found.start()
        if found.group() == "{":
            opened.append(index)
        elif opened:
            ends[opened.pop()] = index
        positions.append(index)
        enclosing.append(opened[-1] if opened else -1)
    return positions, ends, enclosing


def _group_ends(text: str) -> dict[int, int]:
    """For each unescaped ``{`` of ``text`` that is closed, the index just past its closing brace (one pass:
    :func:`_closing` from each of a thousand ``@{`` of a column specification took 37 s)."""
    return {opening: closing + 1 for opening, closing in _paired_braces(text)[1].items()}


def _closing(text: str, opening: int) -> int:
    """The index just past the brace that closes the one at ``opening``, at any depth; -1 if none does."""
    depth = 0
    for index in range(opening, len(text)):
        if text[index] == "{" and text[index - 1 : index] != "\\":
            depth += 1
        elif text[index] == "}" and text[index - 1 : index] != "\\":
            depth -= 1
            if depth == 0:
                return index + 1
    return -1


def _begin_arguments(verbatim: str) -> list[str]:
    """The ``{...}`` arguments of ``\\begin{name}[...]{...}...`` (their insides), braces matched at any depth."""
    opening = _BEGIN.match(verbatim)
    found: list[str] = []
    at = opening.end() if opening else 0
    while opening and len(found) < 4:
        while at < len(verbatim) and verbatim[at].isspace():
            at += 1
        if verbatim.startswith("[", at):
            close = verbatim.find("]", at)
            if close < 0:
                break
            at = close + 1
        elif verbatim.startswith("{", at) and (end := _closing(verbatim, at)) > 0:
            found.append(verbatim[at + 1 : end - 1])
            at = end
        else:
            break
    return found


_INSERT = re.compile(r"([@!<>])\s*(?=\{)")
SPEC_CAP = 4000  # characters of one column specification: a real one is a few dozen
# A space between two columns: a positive length or a named space (``\\quad``, ``\\,``).
_GAP = re.compile(
    r"\\(?:quad|qquad|enspace|enskip|thinspace|extracolsep|hfill|hfil|[,;:]|(?:hspace\*?|hskip|kern)\s*\{?\s*\+?0*[1-9.])|~"
)


def _spec_problem(spec: str, *, edges_trim: bool = True) -> str | None:
    """Why a column specification joins cells or prints into them, or None. ``edges_trim``: ``@{}`` at its
    ends only trims the table's edge (false for a ``\\multicolumn`` or a column type, which stand between
    other columns). Braces are matched at any depth: ``@{{{}}}`` is an ``@{}``."""
    stripped = spec.strip()
    if len(stripped) > SPEC_CAP:
        return (
            f"has a column specification of {len(stripped)} characters, past the {SPEC_CAP} the reader reads"
        )
    ends = _group_ends(stripped)
    for found in _INSERT.finditer(stripped):
        end = ends.get(found.end(), -1)
        if end < 0:
            continue
        kind, content = found.group(1), stripped[found.end() + 1 : end - 1]
        printed = _latex_text(content).strip()
        if printed and kind in "@<>":
            return f"prints {printed[:20]!r} into its cells from its column specification ({kind}{{...}})"
        if "-" in content or "\\!" in content or "negthinspace" in content:
            return (
                f"moves its cells together with a negative space in its column specification ({kind}{{...}})"
            )
        inner = not edges_trim or (found.start() > 0 and end < len(stripped))
        if kind == "@" and inner and not printed and not _GAP.search(content):
            return "joins two columns with @{} in its column specification: their cells are typeset as one"
    return None


def _print(prose: Prose, printed: str, line: int, document: str) -> None:
    """Add what a node prints; one that prints nothing is a silence (:func:`_silence`)."""
    if printed:
        _add_printed(prose, printed, line, document)
    else:
        _silence(prose, line)


def _silence(prose: Prose, line: int) -> None:
    """Note a LaTeX command that prints nothing: right after a digit, it may sit inside a number (white
    space between them counts for nothing: ``9 \\unskip7.05`` is typeset 97.05)."""
    if prose.silenced_after_digit is None and _DIGIT_AT_END.search(prose.last_visible):
        prose.silenced_after_digit = line


def _unknown_beside_a_number(document: str, macro: str, line: int) -> str:
    return (
        f"{document}: \\{macro} stands against a number at line {line}; what a command of the paper's own "
        "prints is not read, so the number typeset there may not be the one read (docs/claims.md)"
    )


def _add_printed(prose: Prose, printed: str, line: int, document: str) -> None:
    """Add what a LaTeX node prints, refusing a number that a command printing nothing splits.

    ``9\\hspace{0pt}7.05`` is typeset 97.05; the reader, which gives a layout command's place a space,
    would read 7.05 (likewise ``\\label``, ``\\relax``, ``\\kern0pt``, an empty ``\\mbox{}`` or ``$\\!$``).
    """
    if prose.silenced_after_digit is not None and printed:
        if _NUMBER_GOES_ON.match(printed):
            raise DocumentError(
                f"{document}: a LaTeX command whose output is not read stands inside a number at line "
                f"{prose.silenced_after_digit}: it is typeset as one number and would be read otherwise; "
                "what is checked would not be what is shown (docs/claims.md)"
            )
        prose.silenced_after_digit = None
    prose.add(printed, line)


_DIGIT_OR_SIGN = re.compile(r"[\d+\-\u2212±]")
_DIGIT_AT_END = re.compile(r"\d\.?$")  # "9" or "9." before a command: the number may go on after it
_NUMBER_GOES_ON = re.compile(r"\.?\d")


def _mark_printed(macro: str, shown: str) -> str:
    """What a mark (:data:`LATEX_MARKS`) holding visible ``shown`` is read as: an error set as an index
    (``97.05\\textsubscript{$\\pm$0.3}``) is the number's own, anything else a space beside it."""
    if macro in LATEX_INDICES and re.match(_PLUS_MINUS, shown.translate(_UNBOXED).strip()):
        # in the boxes it stands in (97.05\textsubscript{\textcolor{gray}{$\pm$0.3}})
        return LATEX_INDICES[macro] + shown
    return " "


@functools.cache
def _converter() -> Any:
    """latex2text, printing what the boxes it does not know print (it dropped ``\\scalebox{0.9}{99.99}`` and
    ``\\mbox{97.05}`` from a table cell, and an error set with ``\\textsubscript``)."""
    from pylatexenc.latex2text import LatexNodes2Text, MacroTextSpec, get_default_latex_context_db

    def box(spaced: bool) -> Callable[[Any, Any], str]:
        def printed(node: Any, l2tobj: Any) -> str:  # pylatexenc passes its converter by this name
            arguments = node.nodeargd.argnlist if node.nodeargd and node.nodeargd.argnlist else []
            content = l2tobj.nodelist_to_text([arguments[-1]]) if arguments and arguments[-1] else ""
            if node.macroname in LATEX_INDICES:
                return _mark_printed(node.macroname, content.strip())
            return f" {_BOXED[0]}{content}{_BOXED[1]} " if spaced else content

        return printed

    def first(node: Any, l2tobj: Any) -> str:
        parsed = node.nodeargd.argnlist if node.nodeargd and node.nodeargd.argnlist else []
        return l2tobj.nodelist_to_text([parsed[0]]) if parsed and parsed[0] is not None else ""

    def arguments(node: Any, l2tobj: Any) -> str:
        parsed = node.nodeargd.argnlist if node.nodeargd and node.nodeargd.argnlist else []
        return " ".join(l2tobj.nodelist_to_text([part]) for part in parsed if part is not None)

    context = get_default_latex_context_db()
    context.add_context_category(
        "runaudit-boxes",
        prepend=True,
        macros=[
            MacroTextSpec(name, simplify_repl=box(name in LATEX_RESHAPING or name == _COLOURED))
            for name in LATEX_BOXES
            if name not in LATEX_OVERPRINTS and (name not in LATEX_MARKS or name in LATEX_INDICES)
        ],
    )
    # A link prints its text, never its address (\\href{x}{91.00} was read as "x91.00", no number at all).
    context.add_context_category(
        "runaudit-links",
        prepend=True,
        macros=[
            MacroTextSpec("href", simplify_repl=box(False)),
            # The page prints its first argument (the second goes to the PDF's bookmarks).
            MacroTextSpec("texorpdfstring", simplify_repl=first),
        ],
    )
    # The commands whose arguments the parser reads and the converter does not know were printed as nothing
    # (``\textsf{91.00}`` went unread in a cell and in prose): they print what their arguments hold, but
    # settings (nothing), citations (a mark) and ``\verb`` (code, never a claim, as in Markdown).
    unknown = [
        spec.macroname
        for spec in _walker_context().iter_macro_specs()
        if context.get_macro_spec(spec.macroname) is None
    ]
    context.add_context_category(
        "runaudit-parsed",
        macros=[
            MacroTextSpec(name, simplify_repl=" " if name in LATEX_CITATIONS else "")
            if name in LATEX_SETTINGS or name in LATEX_CITATIONS or name == "verb"
            else MacroTextSpec(name, simplify_repl=arguments)
            for name in unknown
        ],
    )
    return LatexNodes2Text(latex_context=context, math_mode="text")


# What a box that may draw at no size or out of place prints is set between these in a table cell's text.
_BOXED = ("\ue004", "\ue005")
_UNBOXED = str.maketrans("", "", "".join(_BOXED))
_NOT_A_MARK = str.maketrans(dict.fromkeys(_BOXED, "\ufffd"))  # the same characters in a source are no marks


def _latex_text(latex: str, *, boxed: bool = False) -> str:
    """What ``latex`` prints, through pylatexenc's latex2text (``\\percent`` as %, siunitx's unit); with
    ``boxed``, what a reshaping box prints stands between the :data:`_BOXED` marks."""
    try:
        # The walker's context, built once: a fresh default one per call was most of a small cell's cost.
        source = latex.replace("\\percent", "\\%").translate(_NOT_A_MARK)
        text = str(_converter().latex_to_text(source, latex_context=_walker_context()))
    except Exception:  # noqa: BLE001 - pylatexenc on hostile input (a KeyError for \\textcolor{{r}}): text unread
        return " "
    return text if boxed else text.translate(_UNBOXED)


def _hides_its_claim(marked: str) -> bool:
    """Whether a cell's number, as :func:`table_statements` reads it (its first result), may not be what its
    page shows: it stands in a reshaping box (by the :data:`_BOXED` marks) beside any digit out of that box, or
    its error comes from a box that holds more than that error (``97.05 \\scalebox{0}{$\\pm$0.3 97.05} $\\pm$
    0.9``). A box holding the cell's only value, or only the value's error (``97.05\\scalebox{0.75}{$\\pm$0.3}``),
    or what follows a value shown outside every box (a gain, a mark, a count), hides nothing it stands for."""
    owners: list[int] = []  # the box each character of the text stands in; 0 outside every box
    shown: list[str] = []
    stack, opened = [0], 0
    for char in marked:
        if char == _BOXED[0]:
            opened += 1
            stack.append(opened)
        elif char == _BOXED[1]:
            if len(stack) > 1:
                stack.pop()
        else:
            shown.append(char)
            owners.append(stack[-1])
    text = "".join(shown)
    claim = next(
        (found for found, printed in read_numbers(text, cell=True) if printed and found.group("sign") != "+"),
        None,
    )
    if claim is None:
        return False
    inside = range(claim.start(), claim.end())
    box = owners[claim.start("int")]
    if box:
        return any(
            char.isascii() and char.isdigit() and owners[index] != box and index not in inside
            for index, char in enumerate(text)
        )
    boxes_of_its_error = {owners[index] for index in inside} - {0}
    return any(
        owners[index] in boxes_of_its_error and index not in inside and not char.isspace()
        for index, char in enumerate(text)
    )


# A negative skip moves what follows it back over what stands before it (\hspace{-50cm}97.05\hspace{50cm} 99.99,
# \hspace{{-50cm}}, \hspace{\dimexpr 0pt-50cm\relax}).
_NEGATIVE_SKIP = re.compile(r"\\(?:hspace\*?|hskip|kern|mkern|mskip)\s*\{?[^}\n]{0,40}?-")
# Starts a cell's text where a box that may hide its digits stands beside other digits: such a cell is refused
# where the gate would read it, in a column of a metric (a row's label or a table of settings is not read).
_HIDDEN_BESIDE = "\ue003"


def _latex_table(environment, line_at, document) -> tuple[list[str], list[Row]]:  # type: ignore[no-untyped-def]
    """The header and rows of a tabular, split on the parser's ``&`` and row-ending nodes."""
    from pylatexenc.latexwalker import LatexCommentNode, LatexMacroNode, LatexSpecialsNode

    rows: list[Row] = []
    cells: list[str] = []
    cell: list[str] = []
    start: int | None = None
    pending_span = 1

    def close_cell() -> None:
        nonlocal pending_span
        raw = "".join(cell)
        if not cells:  # a row's first cell: "\\[2pt]" leaves its spacing ahead of the label
            if re.match(r"\s*\[\s*-", raw):
                raise DocumentError(
                    f"{document}: a row of the tabular at line {line_at(environment.pos)} is moved up onto the one "
                    "above (a negative space after \\\\): two rows are typeset as one"
                )
            raw = re.sub(r"^\s*\[[^\]]*\]", "", raw)
        raw = _SWITCHED_GROUP.sub(rf"\\{_COLOURED}{{\1", raw)
        text = _latex_text(_math_spaced(raw), boxed=True).strip()
        switched = _SWITCH.search(raw) is not None
        if _BOXED[0] in text or _NEGATIVE_SKIP.search(raw) or switched:
            # The gate reads one number per cell: a box that may draw its digits at no size, out of place or
            # unseen (\\scalebox{0}{97.05} 99.99, \\textcolor{white}{97.05} 99.99, in one box or another), or
            # digits a negative skip moves or a colour switch may hide, would stand for what the page shows
            # beside them.
            results = [printed for _, printed in read_numbers(text.translate(_UNBOXED), cell=True) if printed]
            moved = (switched or _NEGATIVE_SKIP.search(raw) is not None) and len(results) > 1
            hidden = cells and (moved or _hides_its_claim(text))
            text = _HIDDEN_BESIDE + text if hidden else text.translate(_UNBOXED)
        if pending_span > 1:  # spans columns: a heading over each, never one column's number
            text = SPAN + text
        cells.extend([text] * pending_span)
        cell.clear()
        pending_span = 1

    nodes = list(environment.nodelist or ())
    # longtable: the rows before \endfirsthead head the table; those before \endhead repeat on later pages
    # (dropped where a first head exists), and those before \endfoot or \endlastfoot close pages.
    marks = {node.macroname for node in nodes if isinstance(node, LatexMacroNode)} & LONGTABLE_BLOCKS
    dropped = {"endfoot", "endlastfoot"} | ({"endhead"} if "endfirsthead" in marks else set())
    block_start = 0
    index = 0
    while index < len(nodes):
        node = nodes[index]
        if node is None:
            index += 1
            continue
        if isinstance(node, LatexMacroNode) and node.macroname in LONGTABLE_BLOCKS:
            close_cell()
            if any(cells) and start is not None:
                rows.append(Row(line_at(start), tuple(cells)))
            cells, start = [], None
            if node.macroname in dropped:
                del rows[block_start:]
            block_start = len(rows)
            index += 1
            continue
        if isinstance(node, LatexSpecialsNode) and node.specials_chars == "&":
            close_cell()
        elif isinstance(node, LatexMacroNode) and node.macroname in LATEX_ROW_ENDS:
            if re.search(r"\[\s*-", node.latex_verbatim()):
                raise DocumentError(
                    f"{document}: a row of the tabular at line {line_at(node.pos)} is moved up onto the next one "
                    "(a negative space after \\\\): two rows are typeset as one"
                )
            close_cell()
            if any(cells) and start is not None:
                rows.append(Row(line_at(start), tuple(cells)))
            cells, start = [], None
        elif isinstance(node, LatexMacroNode) and node.macroname in LATEX_RULES:
            pass
        elif isinstance(node, LatexCommentNode):
            if (target := _anchor(node.comment)) is not None:
                cell.append(f" runaudit: {target} ")
        elif isinstance(node, LatexMacroNode) and node.macroname == "multicolumn":
            groups = _three_arguments(nodes, index, _SPACE)
            if len(groups) == 3:
                if problem := _spec_problem(groups[1][1].latex_verbatim()[1:-1], edges_trim=False):
                    raise DocumentError(
                        f"{document}: the \\multicolumn at line {line_at(node.pos)} {problem}"
                    )
                span = re.sub(r"\D", "", groups[0][1].latex_verbatim())
                pending_span = int(span[:4]) if span else 1
                cell.append(groups[2][1].latex_verbatim()[1:-1])
                start = node.pos if start is None else start
                index += groups[2][0] + 2
                continue
        elif isinstance(node, LatexMacroNode) and node.macroname == "multirow":
            # \multirow[vpos]{rows}[struts]{width}[move]{text} prints its text (it read as "2*Noise"); the
            # rows it spans are not given it: which rows a reader groups under it is not read (docs/claims.md).
            groups = _three_arguments(nodes, index, _SPACE_OR_OPTIONS)
            if len(groups) == 3:
                cell.append(groups[2][1].latex_verbatim()[1:-1])
                start = node.pos if start is None else start
                index += groups[2][0] + 2
                continue
            cell.append(node.latex_verbatim())
        else:
            verbatim = node.latex_verbatim()
            if start is None and verbatim.strip():
                start = node.pos + len(verbatim) - len(verbatim.lstrip())
            cell.append(node.latex_verbatim())
        index += 1
    close_cell()
    if any(cells) and start is not None:
        rows.append(Row(line_at(start), tuple(cells)))
    return _headed(rows)


SPAN = "\ue002"
_SPACE = re.compile(r"\s+")
_SPACE_OR_OPTIONS = re.compile(r"\s*(?:\[[^\]]*\]\s*)*")  # \multirow's optional arguments are not parsed


def _three_arguments(nodes: Sequence[Any], index: int, between: re.Pattern[str]) -> list[tuple[int, Any]]:
    """The first three brace groups after ``nodes[index]`` (within 12 nodes), each with its offset, past
    comments and what ``between`` matches (TeX skips space); fewer when something else comes first."""
    from pylatexenc.latexwalker import LatexCommentNode, LatexGroupNode

    groups: list[tuple[int, Any]] = []
    for at, following in enumerate(nodes[index + 1 : index + 13]):
        if isinstance(following, LatexGroupNode):
            groups.append((at, following))
            if len(groups) == 3:
                break
        elif not (
            following is None
            or isinstance(following, LatexCommentNode)
            or between.fullmatch(following.latex_verbatim())
        ):
            break
    return groups


LONGTABLE_BLOCKS = frozenset({"endfirsthead", "endhead", "endfoot", "endlastfoot"})
# What ends a row of a tabular: ``\\\\`` and its spellings.
LATEX_ROW_ENDS = frozenset({"\\", "tabularnewline", "cr", "crcr"})


def _as_head(cell: str) -> str:
    """A cell's text as a column's head: no span or box marks."""
    return cell.replace(SPAN, "").replace(_HIDDEN_BESIDE, "").translate(_UNBOXED)


def _headed(rows: list[Row]) -> tuple[list[str], list[Row]]:
    """Header and body: header rows are merged until a row holds a number ("Accuracy" spanning "clean" and
    "noise" heads "Accuracy clean" and "Accuracy noise"). A body cell spanning columns keeps its mark: it
    is no number, and a row of them may be a header inside the body."""
    if not rows:
        return [], []
    heads = [_as_head(cell) for cell in rows[0].cells]
    body = rows[1:]
    while body and not any(
        parse_number(found) for cell in body[0].cells[1:] for found in _NUMBER.finditer(cell)
    ):
        below = body.pop(0).cells
        width = max(len(heads), len(below))
        heads = [
            " ".join(
                part
                for part in (
                    heads[i] if i < len(heads) else "",
                    _as_head(below[i]) if i < len(below) else "",
                )
                if part
            )
            for i in range(width)
        ]
    return heads, body


# -- CSV ---------------------------------------------------------------------------------------------------


def csv_statements(text: str, vocabulary: Vocabulary, document: str) -> Iterator[Statement]:
    source = text.splitlines()
    text = text.removeprefix("\ufeff")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:8192], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    try:
        table = list(csv.reader(io.StringIO(text), dialect))
    except csv.Error as exc:
        raise DocumentError(f"{document}: not CSV ({exc})") from None
    if not table:
        return
    heads = [head.strip() for head in table[0]]
    if heads == GENERATED_CSV_HEADER:
        yield from _generated_csv(table[1:], document, source)
        return
    lowered = [head.casefold() for head in heads]
    if "metric" in lowered and (value := _first_of(lowered, ("value", "mean", "score"))) is not None:
        metric_at = lowered.index("metric")
        condition_at = _first_of(lowered, ("condition", "condition_id"))
        subject_at = _first_of(lowered, ("run", "run_id", "arm", "model", "method"))
        for number, row in enumerate(table[1:], start=2):
            if len(row) <= max(value, metric_at):
                continue
            found = _NUMBER.search(row[value])
            printed = parse_number(found) if found else None
            metric = vocabulary.first("metrics", row[metric_at])
            if printed is None or metric is None:
                continue
            yield _statement(
                document,
                source,
                number,
                printed,
                metric=metric,
                condition=vocabulary.first("conditions", row[condition_at])
                if condition_at is not None and condition_at < len(row)
                else None,
                subject=_exact_subject(vocabulary, row[subject_at])
                if subject_at is not None and subject_at < len(row)
                else None,
                where="table",
            )
        return
    rows = [Row(number, tuple(row)) for number, row in enumerate(table[1:], start=2)]
    yield from table_statements(heads, rows, vocabulary, document, source, None)


def _first_of(heads: list[str], names: Sequence[str]) -> int | None:
    return next((heads.index(name) for name in names if name in heads), None)


def _generated_csv(rows: list[list[str]], document: str, source: Sequence[str]) -> Iterator[Statement]:
    """The CSV ``runaudit table`` writes: its ``shown`` column is the claim, its ``runs`` the provenance."""
    for number, row in enumerate(rows, start=2):
        if len(row) != len(GENERATED_CSV_HEADER):
            raise DocumentError(f"{document}:{number}: a generated table row has {len(row)} fields, not 8")
        arm, metric, condition, _, _, _, shown, runs = row
        found = _NUMBER.search(shown)
        printed = parse_number(found) if found else None
        if printed is None:
            raise DocumentError(f"{document}:{number}: the shown cell {shown!r} holds no number")
        provenance = tuple(tuple(item.split("@", 1)) for item in runs.split() if "@" in item)
        yield _statement(
            document,
            source,
            number,
            printed,
            metric=metric,
            condition=condition,
            subject=arm,
            provenance=provenance,
            where="table",
        )


# -- what a page shows of a number, against what is read ---------------------------------------------------

# Characters a page draws as nothing: format controls (zero-width spaces and joiners, soft hyphens, tags),
# combining and enclosing marks (the grapheme joiner, variation selectors), line and paragraph separators,
# and the letters that render blank.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Zl", "Zp"})
_BLANK_LETTERS = "\u115f\u1160\u3164\uffa0\u2800"
# Markdown and LaTeX markup a page draws as nothing, dropped before the check (9**<ZWSP>**7.05, 9{<ZWSP>}7.05).
_EMPTY_MARKUP = str.maketrans("", "", "*_~{}`")
# Inline HTML between two digits (9<!-- -->7.05, 9<span></span>7.05): the page joins them, a reader of the
# text does not. Superscripts and subscripts (10<sup>4</sup>) stay apart on the page too, unless empty.
_HTML_INSIDE_A_NUMBER = re.compile(
    r"[0-9](?:<!--(?:(?!-->)[^\n]){0,200}-->|</?(?!su[bp]\b)[A-Za-z][^<>\n]{0,200}>"
    r"|<(su[bp])\b[^<>\n]{0,200}>[^\S\n]{0,200}</\1[^\S\n]{0,20}>)+[.,]?[0-9]"  # an empty sub or sup draws nothing
)
# An override (LRO, RLO) draws what follows in the order it says, up to the PDF that closes it or the end of
# the line; embeddings and isolates keep digits in order. A paper holds none: past this many the document is
# refused rather than walked control by control.
_OVERRIDES = "\u202d\u202e"
_OVERRIDE = re.compile(f"[{_OVERRIDES}]")
_EMBEDDING = re.compile("[\u202a-\u202e]")  # the embeddings and overrides that U+202C (PDF) closes
_ASCII_DIGIT = re.compile("[0-9]")
BIDI_CAP = 1000


_HIDDEN, _FOREIGN_DIGIT = "\x01", "\x02"  # what the check's copy of a text spells them as


@functools.cache
def _marking() -> dict[int, str]:
    """A translation that spells every invisible character :data:`_HIDDEN` and every digit of a script other
    than ASCII :data:`_FOREIGN_DIGIT` (and leaves the rest), built from the Unicode database once per
    process: a regular expression class of the thousands of marks is tested range by range, a dict is one
    lookup per character."""
    marking = {ord(char): _HIDDEN for char in _BLANK_LETTERS}
    for code in range(0x80, sys.maxunicode + 1):
        category = unicodedata.category(chr(code))
        if category in _INVISIBLE_CATEGORIES:
            marking[code] = _HIDDEN
        elif category == "Nd":
            marking[code] = _FOREIGN_DIGIT
    return marking


# In the marked copy: a run of non-ASCII characters between two parts of a number that holds an invisible
# character (after a digit, before a digit, sign or point; or after a sign or point, before a digit), or a
# digit of another script beside an ASCII digit. Each branch starts only where a run starts, looks for its
# mark once and takes the run whole, so the scan is linear (a lazy run before the mark, given back character
# by character, made 64k zero-width spaces after a digit take 2.4 s).
_OTHER = "[\x01\x02\x80-\U0010ffff]"
_SPLITTING = re.compile(
    rf"(?P<after_digit>(?<=[0-9])(?={_OTHER}*\x01){_OTHER}*+(?=[0-9.,+\-−]))"
    rf"|(?P<after_point>(?<=[.,+\-−])(?={_OTHER}*\x01){_OTHER}*+(?=[0-9]))"
    rf"|(?P<mixed>(?<=[0-9])[.,]?{_OTHER}*?\x02|(?<!{_OTHER})(?={_OTHER}*\x02){_OTHER}*+(?=[.,]?[0-9]))"
)


def _jump(jumps: list[tuple[int, int]], here: int, there: int) -> None:
    """Record that offset ``here`` of the joined text is offset ``there`` of the source, forgetting the jumps
    recorded past ``here`` (a group dropped whole takes back what was kept after its brace)."""
    while jumps and jumps[-1][0] >= here:
        jumps.pop()
    jumps.append((here, there))


def _as_typeset(latex: str) -> tuple[str, Callable[[int], int]]:
    """``latex`` as TeX joins it for the patterns that find part of a number coloured or under an overlay, and
    the offset in ``latex`` of each offset in it.

    A comment takes its line break and the next line's leading blanks with it (``\\textcolor{white}{9}%``
    over ``7.05`` typesets 97.05 with the 9 white), an empty group after a digit prints nothing
    (``{9{}}7.05``), and any other single line break is a space. Each of these had let a coloured digit pass
    the patterns. One pass.
    """
    kept: list[str] = []  # pieces of one or two characters (an escape)
    jumps: list[tuple[int, int]] = [(0, 0)]  # (offset here, offset in latex) wherever text was dropped
    groups: list[list[int]] = []  # each open group: [its piece index, its offset here, whether it holds text]
    length, index = 0, 0
    while index < len(latex):
        char = latex[index]
        if char == "%":
            end = latex.find("\n", index)
            index = len(latex) if end < 0 else end + 1
            while index < len(latex) and latex[index] in " \t":
                index += 1
            _jump(jumps, length, index)
            continue
        if (
            char == "}"
            and groups
            and not groups[-1][2]
            and _DIGIT_AT_END.search("".join(kept[max(0, groups[-1][0] - 2) : groups[-1][0]]))
        ):
            # An empty group after a digit prints nothing there (an empty argument is kept: \\textcolor{red}{})
            first, length, _ = groups.pop()
            del kept[first:]
            _jump(jumps, length, index + 1)
            index += 1
            continue
        if char == "}" and groups:
            groups.pop()
        piece = latex[index : index + 2] if char == "\\" else char
        if piece == "\n" and latex[index + 1 : index + 2] != "\n" and latex[index - 1 : index] != "\n":
            piece = " "
        if char == "{":  # what it holds, not its brace, makes the group around it hold text
            groups.append([len(kept), length, False])
        elif groups and not piece.isspace():
            groups[-1][2] = True
        kept.append(piece)
        length, index = length + len(piece), index + len(piece)
    starts = [here for here, _ in jumps]

    def origin(offset: int) -> int:
        here, there = jumps[bisect.bisect_right(starts, offset) - 1]
        return there + offset - here

    return "".join(kept), origin


def hidden_number(text: str, form: str) -> str | None:
    """Where ``text`` shows a number otherwise than the claims gate reads it, or None.

    A reader of the text splits a number at any character that is not a digit or its point, and takes any
    script's digits; a page draws invisible characters as nothing, joins what inline HTML separates, and
    reorders digits under a bidirectional override. So a number is refused when it holds an invisible
    character or inline HTML between two of its parts (``9<U+200B>7.05`` is read as 7.05 and shown as
    97.05), mixes digits of two scripts, or sits under an override (``<U+202E>50.89`` is shown as 98.05).
    Markdown is checked with its character references decoded (``&#8203;`` is U+200B). An invisible
    character beside a number, not inside it (a BOM, a left-to-right mark, a joiner before ``%``), hides
    nothing.
    """
    if form == "markdown":
        inline = _HTML_INSIDE_A_NUMBER.search(text)
        if inline is not None:
            return f"inline HTML inside the number {_where(text, inline.start(), inline.end())}"
        if "&" in text:
            text = html.unescape(text)
    if form == "latex" and (code := _TEX_CHARACTER_CODES.search(text)) is not None:
        return f"TeX character codes ({code.group()}) at line {_line(text, code.start())}"
    typeset, origin = _as_typeset(text) if form == "latex" else (text, int)
    coloured = _COLOURED_DIGITS.search(typeset) if form == "latex" else None
    if (
        form == "latex"
        and (at := coloured.start() if coloured else _colour_ends_inside_a_number(typeset)) is not None
    ):
        return (
            f"a colour command colours part of a number at line {_line(text, origin(at))} (its "
            "digits may be drawn in the page's colour): colour whole numbers"
        )
    if form == "latex" and (
        overlaid := _ON_SOME_SLIDES.search(typeset) or _OVERLAY_BEFORE_DIGITS.search(typeset)
    ):
        return (
            f"a beamer overlay holds part of a number at line {_line(text, origin(overlaid.start()))} (it draws "
            "those digits on some slides only): put whole numbers under overlays"
        )
    if form == "latex" and (kerned := _OVERLAPPED_DIGITS.search(text)) is not None:
        return f"a negative kern draws digits over each other at line {_line(text, kerned.start())}"
    if form == "latex" and (rounding := _ROUNDING.search(text)) is not None:
        return f"siunitx rounds the numbers it typesets ({rounding.group()}) at line {_line(text, rounding.start())}"
    if form == "latex":
        for column_type in _COLUMN_TYPE.finditer(text):
            if problem := _spec_problem(column_type.group(1), edges_trim=False):
                return f"a column type the paper defines at line {_line(text, column_type.start())} {problem}"
    if text.isascii():
        return None
    shown = text.translate(_EMPTY_MARKUP)
    split = _SPLITTING.search(shown.translate(_marking()))
    if split is not None:
        where = _where(shown, split.start(), split.end())
        if split.lastgroup == "mixed":
            return f"digits of two scripts in one number {where}"
        hidden = shown[split.start() + split.group().index(_HIDDEN)]
        return f"an invisible character (U+{ord(hidden):04X}) inside the number {where}"
    overrides = sum(map(shown.count, _OVERRIDES))
    if overrides > BIDI_CAP:
        return f"{overrides} bidirectional overrides, more than the {BIDI_CAP} the gate walks (a paper holds none)"
    walked = 0
    for opener in _OVERRIDE.finditer(shown):
        # Its scope: up to the PDF that closes it (embeddings and overrides nest) or the end of its line.
        line_end = shown.find("\n", opener.end())
        depth, end = 1, len(shown) if line_end < 0 else line_end
        for found in _EMBEDDING.finditer(shown, opener.end(), end):
            walked += 1
            if walked > 10 * BIDI_CAP:
                return f"more than {10 * BIDI_CAP} bidirectional controls after overrides, which a paper does not hold"
            depth += -1 if found.group() == "\u202c" else 1
            if depth == 0:
                end = found.start()
                break
        if _ASCII_DIGIT.search(shown, opener.end(), end):
            return f"a bidirectional override (U+202D/U+202E) reorders the digits at line {_line(shown, opener.start())}"
    return None


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _escaped(text: str) -> str:
    """``text`` quoted with everything beyond ASCII escaped, so that an invisible character shows, and line
    breaks and other control characters too, so that the message stays one line."""
    shown = text.encode("ascii", "backslashreplace").decode("ascii")
    return "'" + _CONTROL.sub(lambda found: repr(found.group())[1:-1], shown) + "'"


def _where(text: str, start: int, end: int) -> str:
    return f"{_escaped(text[max(0, start - 8) : min(end, start + 40) + 8])} at line {_line(text, start)}"


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# -- entry point -------------------------------------------------------------------------------------------

READERS = {"markdown": markdown_statements, "latex": latex_statements, "csv": csv_statements}


def statements(text: str, form: str, vocabulary: Vocabulary, document: str) -> list[Statement]:
    """Every claim of one document, numbered per line in document order."""
    if "\x00" in text:  # a reader stops at it (0.98\x0005 read as 0.98): what is checked is not what is shown
        raise DocumentError(
            f"{document}: holds a NUL byte at line {text.count(chr(10), 0, text.index(chr(0))) + 1}"
        )
    hidden = hidden_number(text, form)
    if hidden is not None:
        raise DocumentError(f"{document}: {hidden}: what is checked would not be what is shown")
    # U+E000 opens the readers' own anchor marks (:data:`_MARK`): one in the document itself is text.
    text = text.replace("\ue000", "\ufffd")
    if form == "markdown":
        markup = sum(map(text.count, MARKUP))
        if markup > MARKUP_CAP:
            raise DocumentError(
                f"{document}: {markup} markup characters ({' '.join(MARKUP)}); the claims gate reads Markdown "
                f"of at most {MARKUP_CAP} (docs/claims.md)"
            )
    try:
        found = list(itertools.islice(READERS[form](text, vocabulary, document), STATEMENT_CAP + 1))
    except RecursionError:
        raise DocumentError(f"{document}: nested too deeply to read") from None
    if len(found) > STATEMENT_CAP:
        raise DocumentError(
            f"{document}: states more than {STATEMENT_CAP} numbers; the claims gate checks at most "
            f"{STATEMENT_CAP} per document (docs/claims.md): split it"
        )
    found.sort(key=lambda item: item.line)
    counted: dict[int, int] = {}
    numbered = []
    for item in found:
        counted[item.line] = counted.get(item.line, 0) + 1
        numbered.append(replace(item, ordinal=counted[item.line]))
    return numbered
