"""Every third-party module the shipped packages import comes from a distribution pyproject.toml declares.

A dependency that only arrives with another one (paramiko through fabric) or only happens to be installed
on the developer's machine (tqdm, before it was declared) works here and breaks on a clean install. The
check reads the source with ``ast``, so it sees imports inside functions, and imports that are never run
here, as well as module-level ones. Relative imports, the standard library and ``runaudit`` itself are
the project's own. An import guarded by ``try: ... except ImportError`` gets no exemption: an optional
dependency is still declared, in an extra, so that users can ask for it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
PYPROJECT = CHECKOUT / "pyproject.toml"
OWN = "runaudit"
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


@dataclass(frozen=True)
class Imported:
    module: str  # the top-level import name: "PIL" for "from PIL import Image"
    where: str  # path:line
    guarded: bool  # inside the body of a try whose handlers catch ImportError


@dataclass(frozen=True)
class Declared:
    core: frozenset[str]  # normalised distribution names of [project].dependencies
    extras: frozenset[str]  # ... of every [project.optional-dependencies] extra


def normalise(name: str) -> str:
    """PEP 503: runs of ``-``, ``_`` and ``.`` are one ``-``, case-insensitively."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The distribution a PEP 508 requirement names (``numpy>=1.26; python_version<'4'`` -> numpy)."""
    match = re.match(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)", requirement)
    assert match, f"not a PEP 508 requirement: {requirement!r}"
    return normalise(match.group(1))


def declared_from(pyproject: Mapping) -> Declared:
    project = pyproject["project"]
    extras = project.get("optional-dependencies", {})
    return Declared(
        core=frozenset(requirement_name(item) for item in project.get("dependencies", [])),
        extras=frozenset(requirement_name(item) for items in extras.values() for item in items),
    )


def shipped_folders(pyproject: Mapping) -> list[Path]:
    """The source folders of the installed packages ([tool.setuptools.package-dir]), outermost only."""
    package_dir = pyproject["tool"]["setuptools"]["package-dir"]
    folders = sorted({CHECKOUT / folder for folder in package_dir.values()})
    return [folder for folder in folders if not any(other in folder.parents for other in folders)]


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:  # a bare except
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = [ast.unparse(node).split(".")[-1] for node in types if isinstance(node, ast.Name | ast.Attribute)]
    return any(name in IMPORT_ERRORS for name in names)


def imports_in(source: str, where: str) -> list[Imported]:
    """Absolute imports anywhere in ``source`` (in functions and classes too), each with its guard."""
    found: list[Imported] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Import):
            at = f"{where}:{node.lineno}"
            found.extend(Imported(alias.name.split(".")[0], at, guarded) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(Imported(node.module.split(".")[0], f"{where}:{node.lineno}", guarded))
        if isinstance(node, ast.Try | ast.TryStar):
            body_guarded = guarded or any(_catches_import_error(handler) for handler in node.handlers)
            for child in node.body:
                visit(child, body_guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(source, filename=where), False)
    return found


def third_party_imports(folders: Iterable[Path]) -> list[Imported]:
    found: list[Imported] = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            found += imports_in(path.read_text(encoding="utf-8"), path.relative_to(CHECKOUT).as_posix())
    return [item for item in found if item.module not in sys.stdlib_module_names and item.module != OWN]


def undeclared(
    imports: Iterable[Imported], declared: Declared, distributions: Mapping[str, list[str]]
) -> list[str]:
    """One line per import whose distribution pyproject.toml does not declare; empty when all are.

    ``distributions`` maps import names to the distributions that provide them
    (``importlib.metadata.packages_distributions()``); a name no installed distribution provides is taken
    as its own distribution name, so a guarded import of an absent optional package is still checked.
    """
    problems = []
    for item in imports:
        candidates = {normalise(name) for name in distributions.get(item.module, [item.module])}
        allowed = declared.core | declared.extras  # a guard is no exemption: optional means an extra
        if candidates & allowed:
            continue
        kind = "guarded import" if item.guarded else "import"
        problems.append(
            f"{item.where}: {kind} of {item.module!r} comes from {sorted(candidates)}, which pyproject.toml "
            "declares neither in [project].dependencies nor in an extra"
        )
    return problems


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def shipped_imports(pyproject: dict) -> list[Imported]:
    return third_party_imports(shipped_folders(pyproject))


@pytest.fixture(scope="module")
def distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


def test_every_shipped_import_is_declared(pyproject, shipped_imports, distributions) -> None:
    folders = shipped_folders(pyproject)
    assert {folder.name for folder in folders} >= {"runaudit", "audits", "fixtures", "runners", "reports"}
    assert shipped_imports, "no third-party import found: the walk is broken"
    problems = undeclared(shipped_imports, declared_from(pyproject), distributions)
    assert not problems, "\n".join(problems)


def test_dropping_a_used_dependency_is_caught(pyproject, shipped_imports, distributions) -> None:
    """tqdm draws the hashing progress bars; a pyproject without it must fail the check above."""
    assert any(item.module == "tqdm" for item in shipped_imports), "the shipped code no longer imports tqdm"
    scratch = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))  # a copy; the real file is untouched
    scratch["project"]["dependencies"] = [
        item for item in scratch["project"]["dependencies"] if requirement_name(item) != "tqdm"
    ]
    before = set(undeclared(shipped_imports, declared_from(pyproject), distributions))
    after = set(undeclared(shipped_imports, declared_from(scratch), distributions))
    added = sorted(after - before)
    assert added and all("'tqdm'" in line for line in added), added
    assert before <= after


def test_a_guarded_optional_import_must_be_declared_in_an_extra() -> None:
    source = (
        "def render():\n"
        "    try:\n"
        "        import fancy_optional_renderer\n"
        "    except ImportError:\n"
        "        return None\n"
        "    return fancy_optional_renderer\n"
    )
    imports = imports_in(source, "example.py")
    assert imports == [Imported("fancy_optional_renderer", "example.py:3", guarded=True)]
    nothing = Declared(core=frozenset(), extras=frozenset())
    assert len(undeclared(imports, nothing, {})) == 1
    # Extras are matched by the PEP 503 name: Fancy_Optional.Renderer declares fancy-optional-renderer.
    in_extra = declared_from(
        {"project": {"dependencies": [], "optional-dependencies": {"fancy": ["Fancy_Optional.Renderer>=1"]}}}
    )
    assert undeclared(imports, in_extra, {}) == []


def test_the_walk_sees_function_level_and_from_imports_but_not_relative_ones() -> None:
    source = (
        "from __future__ import annotations\n"
        "import os.path\n"
        "from . import sibling\n"
        "from .sibling import thing\n"
        "def later():\n"
        "    from PIL import Image\n"
        "    import yaml, numpy.linalg\n"
    )
    found = imports_in(source, "m.py")
    modules = [item.module for item in found if item.module not in sys.stdlib_module_names]
    assert modules == ["PIL", "yaml", "numpy"]


def test_every_shipped_module_imports_with_the_declared_dependencies(pyproject) -> None:
    """The declared versions import: every module of every shipped package, in a fresh interpreter.

    The walk above proves each import is declared; this proves the versions the environment resolved
    from the declared ranges (pinned by constraints.txt) import together, module by module.
    """
    import subprocess

    package_dir = pyproject["tool"]["setuptools"]["package-dir"]
    modules = sorted(
        f"{package}.{path.stem}" if path.stem != "__init__" else package
        for package, folder in package_dir.items()
        for path in (CHECKOUT / folder).glob("*.py")
        # The audits are collected by pytest, not imported as a library; a __main__ runs a command.
        if not path.stem.startswith("test_") and path.stem != "__main__"
    )
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    done = subprocess.run(
        [sys.executable, "-c", script, *modules], capture_output=True, text=True, timeout=300, cwd=CHECKOUT
    )
    assert done.returncode == 0, done.stderr[-3000:]
