"""The verdict vocabulary (docs/audits.md, "Verdicts"): one enum that knows what each verdict means.

Every part that judges verdicts asks this module: the pytest plugin settling an outcome, the report
deciding whether custody holds and what rides with a conclusion, the report index ranking runs, the
runners reading a finished session. A verdict *holds* when the evidence was checked and stands
(``passed``) or the run declares the audit does not apply (``not_applicable``); it is *broken* when a
gate found a violation or the audit itself crashed; it *rides* with the conclusions it affects when it
must be shown beside them (``disclosed``, ``not_run``, ``error``).

Also here: the gate classes an audit belongs to, and the two rules that make any value safe to write
into a report (:func:`printable`, :func:`jsonable`).
"""

from __future__ import annotations

import enum
import math
import re
import shlex
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

# The gate class of an audit (its pytest marker): the teardown gate, the science probes, the pre-launch
# smoke checks of the user's code, the checks of a live box, the numbers of the user's documents, and each run
# of a comparison group audited in a session of its own. Not to be confused with the audit module
# an audit lives in (``audits/test_capsule.py`` holds capsule audits of the custody class).
GATE_CLASSES = ("custody", "science", "smoke", "preflight", "claims", "sweep")


class Verdict(enum.StrEnum):
    """What an audit concluded. Members compare equal to their strings, as the JSON report holds them."""

    PASSED = "passed"
    FAILED = "failed"
    DISCLOSED = "disclosed"
    NOT_APPLICABLE = "not_applicable"
    NOT_RUN = "not_run"
    ERROR = "error"

    @property
    def holds(self) -> bool:
        """Checked and standing, or declared not to apply: nothing needs to ride with a conclusion."""
        return self in _HOLDS

    @property
    def broken(self) -> bool:
        """A violation found, or an audit that could not finish: a gate with one never passes."""
        return self in (Verdict.FAILED, Verdict.ERROR)

    @property
    def rides(self) -> bool:
        """Shown beside the conclusions it affects: a disclosure, an audit that did not run, a crash."""
        return self in (Verdict.DISCLOSED, Verdict.NOT_RUN, Verdict.ERROR)

    @property
    def measured(self) -> bool:
        """The audit looked at evidence (not ``not_run``, not ``not_applicable``)."""
        return self not in (Verdict.NOT_RUN, Verdict.NOT_APPLICABLE)

    @property
    def strict_fails(self) -> bool:
        """pytest's ``--strict`` turns this verdict into a failure (user declarations are exempt)."""
        return self in (Verdict.DISCLOSED, Verdict.NOT_RUN)

    @property
    def rank(self) -> int:
        """Severity, for showing the worst of several verdicts: not_applicable lowest, error highest."""
        return _RANK.index(self) + 1

    @property
    def mark(self) -> str:
        """One character for tables too narrow for the word."""
        return _MARKS[self]


_HOLDS = frozenset({Verdict.PASSED, Verdict.NOT_APPLICABLE})
_RANK = (
    Verdict.NOT_APPLICABLE,
    Verdict.PASSED,
    Verdict.DISCLOSED,
    Verdict.NOT_RUN,
    Verdict.FAILED,
    Verdict.ERROR,
)
_MARKS = {
    Verdict.NOT_APPLICABLE: "·",
    Verdict.PASSED: "✓",
    Verdict.DISCLOSED: "D",
    Verdict.NOT_RUN: "N",
    Verdict.FAILED: "✗",
    Verdict.ERROR: "E",
}


# Evidence deeper than this is cut (the cut is named in its place): it crosses xdist, is written with
# ``json.dumps`` and drawn by the page, each of which recurses per level. Evidence nests a few levels.
EVIDENCE_DEPTH = 32
# A verdict's message, and each string of its evidence, is cut past this many characters (the cut says how
# much): a value from the box (a 300 MiB cell of a results table, a file's first line) repeated in the
# messages of every audit that reads it would otherwise be copied into the terminal, the xdist channel,
# the JSON report and the page, tens of GiB for one file.
SHOWN_CHARS = 2000


# Characters that act on whoever reads the text instead of showing: control codes (an ESC starts a terminal
# sequence that can retitle the window or hide the line), the Unicode line and paragraph separators, and the
# bidirectional overrides that make text display in another order than it reads. Tab and newline stay.
_ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` as valid UTF-8 that still says what it held, and only shows: undecodable bytes, lone
    surrogates and characters that act on a terminal or a page (:data:`_ACTING`) escaped.

    File names from a box are bytes: Python hands a non-UTF-8 name over as surrogate escapes
    (``b"bad\\xff"`` -> ``"bad\\udcff"``), and a JSON string may carry a lone ``"\\ud800"``. Neither can be
    encoded as UTF-8, so a message, the JSON report or the page holding one would fail to be written.
    The name is shown as its bytes would be (``bad\\xff``), any other lone surrogate as ``\\ud800``, an
    ESC as ``\\x1b``.
    """
    if _ACTING.search(text) is not None:
        text = _ACTING.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that no undecodable byte explains
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shell_word(text: str) -> str:
    """``text`` as one shell word that only shows: :func:`shlex.quote`'d, or where it holds a character that
    is not printable (a line break, an ESC, an undecodable byte of a file name), in bash's ``$'...'`` quoting
    with that character escaped.

    The report shows every string printable (:func:`printable`), which turned the ESC of a
    project path in the reproduce line into the four characters ``\x1b``: a line naming a folder that does
    not exist. Escaped for the shell first, the line is printable already and names the real one.
    """
    if text.isprintable():
        return shlex.quote(text)
    escaped = []
    for char in text:
        code = ord(char)
        if char in "\\'":
            escaped.append("\\" + char)
        elif char.isprintable():
            escaped.append(char)
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as Python carries it (surrogateescape)
            escaped.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x80:
            escaped.append(f"\\x{code:02x}")
        else:  # bash writes \u and \U as UTF-8, as Python encodes the character (\x would be one raw byte)
            escaped.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "$'" + "".join(escaped) + "'"


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """:func:`printable` ``text``, cut after ``limit`` characters with the count of what was cut."""
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit} more characters)"
    return printable(text)


# Every line break str.splitlines knows, with the spaces around it: a pyarrow or torch error a message
# quotes may span lines ("...No more data to read.\n)"), and a verdict's message is one line.
_LINE_BREAK = re.compile(r"\s*(?:\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029])\s*")


def one_line(text: str) -> str:
    """A verdict's message: :func:`shown`, its line breaks joined with a space."""
    return shown(_LINE_BREAK.sub(" ", text).strip())


def jsonable(value: Any, depth: int = EVIDENCE_DEPTH) -> Any:
    """Evidence as plain JSON values: it crosses xdist and lands in the report verbatim.

    Strings (and keys) become :func:`shown`; containers deeper than ``depth`` become one line saying so,
    so that no value a box supplied can make the report writer recurse or copy without bound.
    """
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) and depth <= 0:
        return f"<a {type(value).__name__} nested too deeply to show>"
    if isinstance(value, Mapping):
        return {shown(str(key)): jsonable(item, depth - 1) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable(item, depth - 1) for item in value]
        return sorted(items, key=str) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, PurePath):
        return shown(value.as_posix())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None:
        return None
    if isinstance(value, str):
        return shown(str(value))  # str(): numpy.str_ is a subclass
    for plain in (bool, int, float):  # exact builtins: numpy.float64 is a subclass
        if isinstance(value, plain):
            return plain(value)
    if hasattr(value, "item"):  # numpy scalars
        return jsonable(value.item(), depth)
    return shown(str(value))
