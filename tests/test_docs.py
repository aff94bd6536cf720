"""The shipped docs: the generated audit catalog is current, every citation of the docs resolves, and
nothing shipped cites a document users do not have.

Code and messages send readers to ``docs/<name>.md §N`` ("recognised, optional: docs/capsule.md §6").
A section renumbered or dropped leaves those readers at a dead end without any test noticing, and a
citation of the design-time specification (verify-spec, run-spec, the ``../shared`` tree) names files
that never ship. These tests read the shipped text as text; the catalog generator is run in-process.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import textwrap
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from runaudit.catalog import catalog

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TEXT_SUFFIXES = frozenset({".py", ".md", ".toml", ".json", ".html", ".js"})

# `docs/<file>.md` optionally followed by what it points at: `§2.5`, a range `§2–7`, a quoted heading
# (`docs/audits.md, "Verdicts"`) or rule ids (`docs/checks.md, PF04-PF07`).
CITATION = re.compile(
    r"docs/(?P<doc>[\w-]+\.md)"
    r"(?:\s+§(?P<first>\d+(?:\.\d+)*)(?:\s*[–-]\s*§?(?P<last>\d+(?:\.\d+)*))?"
    r"|,\s+\"(?P<heading>[^\"\n]+)\""
    r"|,\s+(?P<rule>PF\d+(?:-PF\d+)?))?"
)
# What users never have: the design documents the docs were written from. Each pattern, with the reason.
UNSHIPPED = {
    "a section of a design document, without the docs/ path": re.compile(
        r"(?<![\w/.-])(?:capsule|audits|runners|checks|OVERVIEW)\.md\s*§"
    ),
    "the design-time verify-spec": re.compile(r"verify-spec"),
    "the design-time run-spec": re.compile(r"run-spec"),
    "the development tree's shared folder": re.compile(r"\.\./shared\b|\bshared/(?:spec|reference)\b"),
}
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#L(?P<line>\d+))?\)")


def _generator() -> ModuleType:
    """tools/write_audit_catalog.py, loaded from its file (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "write_audit_catalog", ROOT / "tools" / "write_audit_catalog.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def shipped_folders() -> list[Path]:
    """The source folders pyproject.toml installs ([tool.setuptools.package-dir]), outermost only."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = sorted({ROOT / folder for folder in pyproject["tool"]["setuptools"]["package-dir"].values()})
    return [folder for folder in folders if not any(other in folder.parents for other in folders)]


def shipped_texts() -> dict[Path, str]:
    """Every shipped text file a user or a message can point at: the packages, README.md and docs/."""
    files = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    for folder in shipped_folders():
        files += [
            path
            for path in sorted(folder.rglob("*"))
            if path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts and path.is_file()
        ]
    return {path: path.read_text(encoding="utf-8") for path in files}


def _where(path: Path, text: str, offset: int) -> str:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return f"{shown}:{text.count(chr(10), 0, offset) + 1}"


def headings(markdown: str) -> list[str]:
    """The titles of the ATX headings of a Markdown text, outside fenced code blocks."""
    titles, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            titles.append(match["title"])
    return titles


@dataclass(frozen=True)
class Citation:
    where: str
    doc: str
    anchors: tuple[str, ...]  # heading texts that must exist: "§2.5", "Verdicts", "PF04-PF07"


def _sections(first: str, last: str | None) -> tuple[str, ...]:
    """``§2``–``§7`` -> every section in between; a dotted range -> its two ends."""
    if last is None:
        return (f"§{first}",)
    if first.isdigit() and last.isdigit():
        return tuple(f"§{number}" for number in range(int(first), int(last) + 1))
    return (f"§{first}", f"§{last}")


def citations(texts: Mapping[Path, str]) -> Iterator[Citation]:
    for path, text in texts.items():
        for match in CITATION.finditer(text):
            if match["first"]:
                anchors = _sections(match["first"], match["last"])
            else:
                anchors = tuple(filter(None, (match["heading"], match["rule"])))
            yield Citation(_where(path, text, match.start()), match["doc"], anchors)


def _has_heading(titles: list[str], anchor: str) -> bool:
    """A heading holds ``anchor``; a section number must not be the start of a longer one (§2 is not §2.1)."""
    if not anchor.startswith("§"):
        return any(anchor in title for title in titles)
    pattern = re.compile(re.escape(anchor) + r"(?!\d|\.\d)")
    return any(pattern.search(title) for title in titles)


def unresolved(texts: Mapping[Path, str], docs: Path = DOCS) -> list[str]:
    """Citations naming a file docs/ lacks, or a heading the file lacks."""
    problems = []
    for citation in citations(texts):
        target = docs / citation.doc
        if not target.is_file():
            problems.append(f"{citation.where}: docs/{citation.doc} does not exist")
            continue
        titles = headings(target.read_text(encoding="utf-8"))
        problems += [
            f"{citation.where}: docs/{citation.doc} has no heading with {anchor!r}"
            for anchor in citation.anchors
            if not _has_heading(titles, anchor)
        ]
    return problems


def uncitable(texts: Mapping[Path, str]) -> list[str]:
    """Every mention of a document users do not have, with where it is and why it is refused."""
    return [
        f"{_where(path, text, match.start())}: {match.group(0)!r} ({reason})"
        for path, text in texts.items()
        for reason, pattern in UNSHIPPED.items()
        for match in pattern.finditer(text)
    ]


# -- the generated catalog ----------------------------------------------------------------------------


def test_the_audit_catalog_in_the_docs_is_current() -> None:
    problem = GENERATOR.stale(GENERATOR.AUDITS_MD, catalog())
    assert problem is None, problem


def test_the_catalog_check_fails_on_a_stale_copy_and_the_writer_repairs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "audits.md"
    shutil.copy(GENERATOR.AUDITS_MD, copy)
    GENERATOR.write(copy, catalog())
    fresh = copy.read_text(encoding="utf-8")
    copy.write_text(fresh.replace(GENERATOR.END, f"| `capsule.ghost` |\n{GENERATOR.END}"), encoding="utf-8")
    monkeypatch.setattr(GENERATOR, "AUDITS_MD", copy)

    assert GENERATOR.main(["--check"]) == 1
    said = capsys.readouterr().err.strip()
    assert "\n" not in said and "out of date" in said and GENERATOR.REGENERATE in said

    assert GENERATOR.main([]) == 0
    assert copy.read_text(encoding="utf-8") == fresh
    assert GENERATOR.main([]) == 0 and "unchanged" in capsys.readouterr().out
    assert GENERATOR.main(["--check"]) == 0


def test_the_catalog_needs_its_markers(tmp_path: Path) -> None:
    bare = tmp_path / "audits.md"
    bare.write_text("# Audits\n\nno markers here\n", encoding="utf-8")
    with pytest.raises(GENERATOR.CatalogError, match="markers"):
        GENERATOR.stale(bare, catalog())


PROBE_FIXTURE = """
class Helper:
    def call(self, *, owned=False):
        self.broken(owned=owned)

    def broken(self, *, owned=False):
        if owned:
            self._audit.fail("the owner fails")
        self._audit.not_run("everyone else does not run")
"""

PROBE_AUDITS = """
import pytest

from runaudit_docs_probe_fixture import Helper

pytestmark = pytest.mark.science


def _needs(audit):
    audit.not_run("an input is absent")


def test_discloses(run, audit):
    _needs(audit)
    if run:
        return
    audit.disclose("a finding", affects=[])


def test_always_discloses(audit):
    audit.disclose("a draw", affects=[])


def test_through_fixture(helper: Helper, audit):
    helper.call()


def test_owns_fixture(helper: Helper, audit):
    helper.call(owned=True)


def test_asserts(audit):
    assert audit


@pytest.mark.custody
def test_not_applicable(audit):
    audit.not_applicable("declared")
    audit.require(True, "never reached")
"""


def test_verdicts_are_read_through_helpers_and_owned_fixture_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audits = tmp_path / "audits"
    audits.mkdir()
    (audits / "test_probe.py").write_text(textwrap.dedent(PROBE_AUDITS), encoding="utf-8")
    (tmp_path / "runaudit_docs_probe_fixture.py").write_text(textwrap.dedent(PROBE_FIXTURE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    found = {
        identity: [verdict.value for verdict in GENERATOR.verdicts(entry)]
        for identity, entry in catalog(audits).items()
    }

    assert found == {
        "probe.discloses": ["passed", "disclosed", "not_run", "error"],
        "probe.always_discloses": ["disclosed", "error"],
        "probe.through_fixture": ["passed", "not_run", "error"],
        "probe.owns_fixture": ["passed", "failed", "not_run", "error"],
        "probe.asserts": ["passed", "failed", "error"],
        "probe.not_applicable": ["passed", "failed", "not_applicable", "error"],
    }


# -- citations ----------------------------------------------------------------------------------------


def test_every_citation_of_the_docs_names_a_file_and_a_heading_that_exist() -> None:
    problems = unresolved(shipped_texts())
    assert not problems, "\n".join(problems)


def test_a_citation_of_a_missing_section_or_file_is_reported() -> None:
    texts = {
        ROOT / "planted.py": '"""See docs/capsule.md §2–3, docs/capsule.md §42, docs/checks.md §2.1 and '
        'docs/capsule.md §2.1, docs/audits.md, "Nowhere", and docs/missing.md."""'
    }

    assert unresolved(texts) == [
        "planted.py:1: docs/capsule.md has no heading with '§42'",
        "planted.py:1: docs/capsule.md has no heading with '§2.1'",
        "planted.py:1: docs/audits.md has no heading with 'Nowhere'",
        "planted.py:1: docs/missing.md does not exist",
    ]


def test_nothing_shipped_cites_a_document_users_do_not_have() -> None:
    problems = uncitable(shipped_texts())
    assert not problems, "\n".join(problems)


def test_the_design_documents_are_recognised_wherever_they_are_cited() -> None:
    texts = {
        ROOT / "planted.py": "# capsule.md §2\n'(verify-spec §2.5)'\n# run-spec PF04-PF07\n# ../shared/spec\n"
        "# docs/capsule.md §2 and docs/checks.md §2.5 are fine\n"
    }

    assert [line.split(": ", 1)[0] for line in uncitable(texts)] == [
        "planted.py:1",
        "planted.py:2",
        "planted.py:3",
        "planted.py:4",
    ]


def test_every_relative_link_in_the_docs_reaches_its_file_and_line() -> None:
    problems = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in LINK.finditer(text):
            if "://" in match["target"]:
                continue
            target = (page.parent / match["target"]).resolve()
            where = _where(page, text, match.start())
            if not target.is_file():
                problems.append(f"{where}: {match['target']} does not exist")
            elif match["line"] and int(match["line"]) > len(target.read_text(encoding="utf-8").splitlines()):
                problems.append(f"{where}: {match['target']} has no line {match['line']}")
    assert not problems, "\n".join(problems)


def test_the_box_walkthrough_in_the_readme_parses_as_written(tmp_path: Path) -> None:
    """Found by a new user: an option as the README showed it (`--budget disk=… files=…`) was refused.
    Every `runaudit` line of the walkthrough must be accepted by the command line it documents."""
    import shlex

    from runaudit.cli import build_parser

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### A run on a rented box, step by step", 1)[1].split("\n## ", 1)[0]
    box = re.search(r"e\.g\.\s*`([^`]+)`", section)
    assert box is not None, "the walkthrough shows what $BOX stands for"
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [
        line.split("  #", 1)[0].replace("$BOX", " ".join(box.group(1).split())) for line in block.splitlines()
    ]
    home = str(tmp_path)  # where `~` points for this test
    for line in commands:
        if line.startswith("mkdir -p "):
            Path(line.split()[-1].replace("~", home, 1)).mkdir(parents=True)
    verbs = [
        [token.replace("~", home, 1) if token.startswith("~") else token for token in shlex.split(line)[1:]]
        for line in commands
        if line.startswith("runaudit ")
    ]
    assert len(verbs) >= 8
    parser = build_parser()
    for argv in verbs:
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"the README's `runaudit {shlex.join(argv)}` is refused") from exc
