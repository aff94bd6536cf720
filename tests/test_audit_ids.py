"""Every audit id written in the shipped code and docs names an audit that exists.

Ids travel as plain strings: ``runaudit/reader.py`` maps each contract file to the audit that reports it
(``OWNERS``), messages say "reported by capsule.run_json_schema", the report picks its figures' verdicts by
id, the README and docs/ name audits in prose. Renaming an audit leaves those strings naming nothing, and
nothing fails: a message points at a ghost, a figure quietly draws nothing. This scan finds every string
shaped like an id (``<module>.<check>`` for an audit module) and holds it against the catalog.
"""

from __future__ import annotations

import ast
import re
import shutil
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from runaudit.catalog import AUDITS_DIR, catalog

ROOT = Path(__file__).resolve().parent.parent
AUDIT_MODULES = (
    "capsule",
    "manifest",
    "checkpoint",
    "history",
    "leakage",
    "variance",
    "collapse",
    "determinism",
    "smoke",
    "evaluation",
    "preflight",
    "claims",
    "sweep",
)
# `capsule.md` and `smoke.py` are file names, not ids; no audit is named like a suffix (tested below).
FILE_SUFFIXES = frozenset({"md", "py", "json", "toml", "yaml", "csv", "parquet", "html", "txt", "png", "pth"})
# Not inside a dotted path or a file path (`runaudit.manifest.locate`, `docs/capsule.md`), nor continued by one.
ID_SHAPE = re.compile(rf"(?<![\w./-])(?:{'|'.join(AUDIT_MODULES)})\.(?P<check>[a-z0-9_]+)(?![\w/-]|\.\w)")
# Strings shaped like an audit id that are not one (a figure or evidence key), each with where it is used
# and why. None today: every such string names an audit (`variance.mde` in reports/figures.py selects the
# verdicts of the `variance.mde` audit). An entry that no shipped string uses any more is reported.
NOT_AUDIT_IDS: Mapping[str, str] = {}


@dataclass(frozen=True)
class Literal:
    where: str
    text: str


def shipped_folders() -> list[Path]:
    """The source folders pyproject.toml installs ([tool.setuptools.package-dir]), outermost only."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = sorted({ROOT / folder for folder in pyproject["tool"]["setuptools"]["package-dir"].values()})
    return [folder for folder in folders if not any(other in folder.parents for other in folders)]


def shipped_sources() -> list[Path]:
    """The shipped Python modules, README.md and docs/*.md."""
    modules = [
        path
        for folder in shipped_folders()
        for path in sorted(folder.rglob("*.py"))
        if "__pycache__" not in path.parts
    ]
    return [*modules, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _ids_in(text: str) -> Iterator[tuple[int, str]]:
    """(offset, id) for every id-shaped word of ``text``."""
    for match in ID_SHAPE.finditer(text):
        if match["check"] not in FILE_SUFFIXES:
            yield match.start(), match.group(0)


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant of a module: docstrings, dict keys, f-strings' constant parts."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def literals(paths: Iterable[Path]) -> Iterator[Literal]:
    """Every id-shaped string in ``paths``: Python through its string constants, Markdown as text."""
    for path in paths:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        pieces = _strings(path) if path.suffix == ".py" else [(1, path.read_text(encoding="utf-8"))]
        for line, text in pieces:
            for offset, found in _ids_in(text):
                yield Literal(f"{shown}:{line + text.count(chr(10), 0, offset)}", found)


def id_problems(found: Iterable[Literal], known: set[str], allowed: Mapping[str, str]) -> list[str]:
    """Id-shaped strings naming no audit, and allow-list entries that are ids or that nothing uses."""
    found = list(found)
    problems = [
        f"{literal.where}: {literal.text!r} names no audit"
        for literal in found
        if literal.text not in known and literal.text not in allowed
    ]
    used = {literal.text for literal in found}
    problems += [f"allowed non-id {text!r} is an audit id" for text in allowed if text in known]
    problems += [f"allowed non-id {text!r} is used nowhere any more" for text in allowed if text not in used]
    return problems


def test_every_audit_id_written_in_the_shipped_code_and_docs_names_an_audit() -> None:
    problems = id_problems(literals(shipped_sources()), set(catalog()), NOT_AUDIT_IDS)
    assert not problems, "\n".join(problems)


def test_the_scan_knows_every_audit_module_and_no_audit_looks_like_a_file() -> None:
    entries = catalog().values()
    assert {entry.module for entry in entries} == set(AUDIT_MODULES)
    assert not [entry.id for entry in entries if entry.id.partition(".")[2] in FILE_SUFFIXES]


def test_the_scan_reads_keys_fstrings_and_prose_but_not_paths(tmp_path: Path) -> None:
    module = tmp_path / "planted.py"
    module.write_text(
        'OWNERS = {"run.json": "capsule.run_json_schema"}\n'
        'where = f"{name} (reported by history.finite)"\n'
        '"""See docs/capsule.md, runaudit.manifest.locate, fixtures/smoke.py, capsule.md; not history.* nor smoke."""\n',
        encoding="utf-8",
    )
    prose = tmp_path / "planted.md"
    prose.write_text("Text\n`leakage.cross_split_bytes` discloses.\n", encoding="utf-8")

    found = sorted((literal.where.rsplit("/", 1)[1], literal.text) for literal in literals([module, prose]))

    assert found == [
        ("planted.md:2", "leakage.cross_split_bytes"),
        ("planted.py:1", "capsule.run_json_schema"),
        ("planted.py:2", "history.finite"),
    ]


def _copied_audits(folder: Path) -> Path:
    folder.mkdir()
    for module in AUDITS_DIR.glob("test_*.py"):
        shutil.copy(module, folder / module.name)
    return folder


def test_a_renamed_audit_leaves_its_written_ids_stale(tmp_path: Path) -> None:
    reader = tmp_path / "reader.py"
    shutil.copy(ROOT / "runaudit" / "reader.py", reader)
    assert not id_problems(literals([reader]), set(catalog(_copied_audits(tmp_path / "before"))), {})

    audits = _copied_audits(tmp_path / "after")  # catalog() caches per folder: a second one for the rename
    capsule = audits / "test_capsule.py"
    source = capsule.read_text(encoding="utf-8")
    assert source.count("def test_run_json_schema(") == 1
    capsule.write_text(
        source.replace("def test_run_json_schema(", "def test_run_document("), encoding="utf-8"
    )
    renamed = set(catalog(audits))
    assert "capsule.run_document" in renamed and "capsule.run_json_schema" not in renamed

    problems = id_problems(literals([reader]), renamed, {})

    assert problems
    assert all(
        "reader.py:" in line and "'capsule.run_json_schema' names no audit" in line for line in problems
    )


def test_an_allowed_non_id_must_be_used_and_must_not_be_an_id(tmp_path: Path) -> None:
    module = tmp_path / "figures.py"
    module.write_text('KEYS = ("variance.band_width",)\n', encoding="utf-8")
    known = set(catalog())

    assert id_problems(literals([module]), known, {}) == [f"{module}:1: 'variance.band_width' names no audit"]
    assert id_problems(literals([module]), known, {"variance.band_width": "an evidence key"}) == []
    assert id_problems(literals([module]), known, {"variance.band_width": "", "history.curve": ""}) == [
        "allowed non-id 'history.curve' is used nowhere any more"
    ]
    assert id_problems(literals([module]), known, {"variance.band_width": "", "variance.mde": ""}) == [
        "allowed non-id 'variance.mde' is an audit id",
        "allowed non-id 'variance.mde' is used nowhere any more",
    ]
