"""The layout's promise, enforced: audits read, fixtures resolve, runners move, reports tell.

Decisions that more than one part makes live once, in the pytest-free core (the ``runaudit`` package's
own modules); every other part calls the core and imports flow one way. This test reads the shipped tree's
imports with :mod:`ast` (deferred imports inside functions included, since they run too) and fails on:

- a core module that imports pytest or any other part (the core must serve runners and reports without
  pulling a pytest session into them);
- audits that import runners, reports or examples (an audit reads the run through fixtures);
- the plugin (``fixtures/``) importing runners, examples or audits, and a ``fixtures/`` module that is
  not about pytest (it belongs in the core);
- reports importing runners, examples or audits;
- any import cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
# Folder in the checkout -> the package it installs as (pyproject.toml [tool.setuptools.package-dir]).
PARTS = {
    "runaudit": "runaudit",
    # The framework callbacks: core modules in a subpackage (they import the frameworks, never pytest).
    "runaudit/integrations": "runaudit.integrations",
    "audits": "runaudit.audits",
    "fixtures": "runaudit.fixtures",
    "runners": "runaudit.runners",
    "reports": "runaudit.reports",
    "examples": "runaudit.examples",
    "profiles": "runaudit.profiles",
}
# The command line is the entry surface: it dispatches to the runner verbs and is no part of the core.
ENTRY = frozenset({"runaudit.cli", "runaudit.__main__"})
FORBIDDEN = {
    "core": (
        "pytest",
        "_pytest",
        *(f"runaudit.{part}" for part in ("audits", "fixtures", "runners", "reports", "examples", "cli")),
    ),
    "audits": ("runaudit.runners", "runaudit.reports", "runaudit.examples"),
    "fixtures": ("runaudit.runners", "runaudit.examples", "runaudit.audits"),
    "reports": ("runaudit.runners", "runaudit.examples", "runaudit.audits"),
}


def module_files(checkout: Path = CHECKOUT) -> dict[str, Path]:
    """Dotted module name -> file, for every shipped module."""
    found: dict[str, Path] = {}
    for folder, package in PARTS.items():
        for path in sorted((checkout / folder).rglob("*.py")):
            relative = path.relative_to(checkout / folder).with_suffix("").parts
            if folder == "runaudit" and len(relative) > 1:
                continue  # a subfolder of the core that is itself another part's install target
            parts = [*package.split("."), *relative]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """Every module ``name`` imports: top-level and deferred, resolved to a shipped module where it is one."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {module for module in found if module and module != name}


def graph(checkout: Path = CHECKOUT) -> dict[str, set[str]]:
    files = module_files(checkout)
    return {name: imports_of(name, path, files) for name, path in files.items()}


def part_of(module: str) -> str:
    if module in ENTRY:
        return "entry"
    for part in ("audits", "fixtures", "runners", "reports", "examples", "profiles"):
        if module == f"runaudit.{part}" or module.startswith(f"runaudit.{part}."):
            return part
    return "core"


def crossings(edges: Mapping[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import a boundary forbids."""
    return sorted(
        f"{module} -> {imported}"
        for module, imported_set in edges.items()
        for imported in imported_set
        for forbidden in FORBIDDEN.get(part_of(module), ())
        if imported == forbidden or imported.startswith(forbidden + ".")
    )


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), restricted to shipped modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _parents(module: str) -> Iterator[str]:
    parts = module.split(".")
    for end in range(1, len(parts)):
        yield ".".join(parts[:end])


def test_no_import_crosses_a_boundary() -> None:
    assert crossings(graph()) == []


def test_there_is_no_import_cycle() -> None:
    edges = graph()
    # A package's __init__ is imported before any of its modules: an edge to a parent package is no cycle.
    edges = {
        module: {target for target in targets if target not in _parents(module)}
        for module, targets in edges.items()
    }
    assert cycles(edges) == []


def test_fixtures_hold_pytest_code_only() -> None:
    """A module of ``fixtures/`` that never touches pytest is a domain module under a pytest name."""
    edges = graph()
    plain = [
        module
        for module, imported in edges.items()
        if part_of(module) == "fixtures"
        and module != "runaudit.fixtures"
        and not any(name == "pytest" or name.startswith(("pytest.", "_pytest")) for name in imported)
    ]
    assert plain == []


@pytest.mark.parametrize(
    ("folder", "source", "expected"),
    [
        (
            "audits",
            "from runaudit.runners.close import close_run\n",
            "runaudit.audits.test_x -> runaudit.runners.close",
        ),
        ("runaudit", "import pytest\n", "runaudit.test_x -> pytest"),
        (
            "reports",
            "def f():\n    from runaudit.runners import down\n",
            "runaudit.reports.test_x -> runaudit.runners.down",
        ),
        (
            "fixtures",
            "from runaudit.examples.digits import build\n",
            "runaudit.fixtures.test_x -> runaudit.examples.digits.build",
        ),
    ],
)
def test_a_forbidden_import_is_found(tmp_path: Path, folder: str, source: str, expected: str) -> None:
    """The scan sees top-level and deferred imports in every part (a planted tree, not the real one)."""
    for name in PARTS:
        (tmp_path / name).mkdir()
    (tmp_path / "runners" / "__init__.py").write_text("")
    (tmp_path / "runners" / "close.py").write_text("")
    (tmp_path / "runners" / "down.py").write_text("")
    (tmp_path / "examples" / "digits").mkdir()
    (tmp_path / "examples" / "digits" / "build.py").write_text("")
    (tmp_path / folder / "test_x.py").write_text(source)
    assert crossings(graph(tmp_path)) == [expected]


def test_a_cycle_is_found(tmp_path: Path) -> None:
    for name in PARTS:
        (tmp_path / name).mkdir()
    (tmp_path / "runaudit" / "a.py").write_text("from runaudit import b\n")
    (tmp_path / "runaudit" / "b.py").write_text("def f():\n    from runaudit.a import x\n")
    assert cycles(graph(tmp_path)) == [["runaudit.a", "runaudit.b"]]
