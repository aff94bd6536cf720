"""Write the audit catalog in ``docs/audits.md`` from the audit modules' source, or check that it is current.

The catalog (every audit id, its gate class, where its code is, what it checks and which verdicts it can
give) changes whenever an audit is added, renamed, moved or redocumented; a table kept by hand drifts
from the code the first time someone forgets it. So the part of ``docs/audits.md`` between
:data:`START` and :data:`END` is written here, from :func:`runaudit.catalog.catalog` (the same reading of
the source the custody gate uses), and everything outside the markers stays hand-written.

    python3 tools/write_audit_catalog.py           # rewrite the generated part (idempotent)
    python3 tools/write_audit_catalog.py --check   # exit 1 with one line when docs/audits.md is stale

The verdicts an audit can give are read statically (:func:`verdicts`) from its body, the helpers of its
module it reaches and the fixture methods it calls (:func:`reached`); no audit module is imported or run.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from runaudit.catalog import AuditEntry, catalog
from runaudit.fixtures.subjects import SUBJECTS
from runaudit.verdict import GATE_CLASSES, Verdict

ROOT = Path(__file__).resolve().parent.parent
AUDITS_MD = ROOT / "docs" / "audits.md"
START = "<!-- catalog:start -->"
END = "<!-- catalog:end -->"
REGENERATE = "python3 tools/write_audit_catalog.py"

# Every audit and every helper it hands its recorder to call that recorder ``audit`` (fixtures/verdicts.py).
RECORDER = "audit"
RECORDER_VERDICTS = {
    "fail": Verdict.FAILED,
    "require": Verdict.FAILED,
    "disclose": Verdict.DISCLOSED,
    "not_run": Verdict.NOT_RUN,
    "need": Verdict.NOT_RUN,
    "not_applicable": Verdict.NOT_APPLICABLE,
}
OWNED = "owned"  # the keyword by which an audit takes ownership of what a fixture runs for it
# A function whose last top-level statement is one of these calls, and that never returns early, cannot pass.
FINAL_CALLS = frozenset({"fail", "disclose", "not_run", "not_applicable"})
NO_DOCSTRING = "(no docstring)"
NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


class CatalogError(RuntimeError):
    """docs/audits.md or the audit modules cannot carry a generated catalog; the message says why."""


Scope = Mapping[str, ast.FunctionDef]


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def module_functions(path: Path) -> Scope:
    """The module-level functions of a module, by name."""
    return {node.name: node for node in _parsed(path).body if isinstance(node, ast.FunctionDef)}


@functools.cache
def _imported(path: Path) -> Mapping[str, str]:
    """Name -> the module it comes from, for every ``from module import Name`` at the top of ``path``."""
    return {
        alias.asname or alias.name: node.module
        for node in _parsed(path).body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


@functools.cache
def class_methods(module: str, name: str) -> Scope:
    """The methods of class ``name`` in ``module``, read from its source; empty when it is not found there."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return {}
    for node in _parsed(Path(spec.origin)).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {item.name: item for item in node.body if isinstance(item, ast.FunctionDef)}
    return {}


def _fixture_methods(function: ast.FunctionDef, path: Path) -> dict[str, Scope]:
    """Parameter -> the methods of the class its annotation names: the fixture objects ``function`` uses."""
    imported = _imported(path)
    return {
        arg.arg: class_methods(imported[arg.annotation.id], arg.annotation.id)
        for arg in function.args.args
        if isinstance(arg.annotation, ast.Name) and arg.annotation.id in imported
    }


def _recorder_method(node: ast.AST) -> str | None:
    """``fail`` for ``audit.fail(...)`` (or ``self._audit.fail(...)`` in a fixture); None otherwise."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    receiver = node.func.value
    named = isinstance(receiver, ast.Name) and receiver.id == RECORDER
    held = (
        isinstance(receiver, ast.Attribute)
        and receiver.attr == f"_{RECORDER}"
        and isinstance(receiver.value, ast.Name)
        and receiver.value.id == "self"
    )
    return node.func.attr if named or held else None


def _own_nodes(function: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``function`` that belong to it, not to a function or lambda defined inside it."""
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, NESTED):
            pending.extend(ast.iter_child_nodes(node))


def can_pass(function: ast.FunctionDef) -> bool:
    """Whether some path through the audit ends without a verdict call: it then passes.

    The only audits that cannot pass end, at the top level, in a verdict call they never return before
    (``variance.baseline_draw`` always discloses the draw it places).
    """
    ends_in_verdict = (
        isinstance(last := function.body[-1], ast.Expr) and _recorder_method(last.value) in FINAL_CALLS
    )
    return not ends_in_verdict or any(isinstance(node, ast.Return) for node in _own_nodes(function))


def _owned(call: ast.Call, inherited: bool) -> bool:
    """Whether ``call`` hands its failures to the calling audit: ``owned=True``, or ``owned=owned`` passed on."""
    for keyword in call.keywords:
        if keyword.arg == OWNED:
            return keyword.value.value is True if isinstance(keyword.value, ast.Constant) else inherited
    return False


def reached(entry: AuditEntry) -> Iterator[tuple[ast.FunctionDef, bool]]:
    """Every function the audit can run, and whether a failure there is the audit's own.

    That is the audit's function, the helpers of its own module that it calls or passes on
    (transitively), and the methods it calls on the fixture objects it is given (the smoke adapter, the
    custody fixture) with the methods those call on ``self``. A fixture fails only the audit that owns
    the broken input, which says so with ``owned=True`` (fixtures/smoke.py); any other audit is told
    ``not_run`` there, so a fixture's ``fail`` counts only on an owned path.
    """
    functions = module_functions(entry.path)
    pending: list[tuple[ast.FunctionDef, Scope | None, bool]] = [(functions[entry.function], None, True)]
    seen: set[tuple[int, bool]] = set()
    while pending:
        function, own_class, owned = pending.pop()
        if (id(function), owned) in seen:
            continue
        seen.add((id(function), owned))
        yield function, owned
        names = functions if own_class is None else {}
        objects = _fixture_methods(function, entry.path) if own_class is None else {"self": own_class}
        calls = {
            id(node.func): _owned(node, owned and own_class is not None)
            for node in ast.walk(function)
            if isinstance(node, ast.Call)
        }
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id in names:
                pending.append((names[node.id], None, True))
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.attr in objects.get(node.value.id, {})
            ):
                methods = objects[node.value.id]
                pending.append((methods[node.attr], methods, calls.get(id(node), False)))


def verdicts(entry: AuditEntry) -> tuple[Verdict, ...]:
    """The verdicts ``entry`` can give, in the vocabulary's order.

    Read from every function the audit reaches (:func:`reached`): ``audit.fail``/``audit.require`` and
    ``assert`` give failed, ``audit.disclose`` disclosed, ``audit.not_run``/``audit.need`` not_run,
    ``audit.not_applicable`` not_applicable. Any audit can crash (error).
    """
    found = {Verdict.ERROR}
    if can_pass(module_functions(entry.path)[entry.function]):
        found.add(Verdict.PASSED)
    for function, owned in reached(entry):
        for node in ast.walk(function):
            verdict = RECORDER_VERDICTS.get(_recorder_method(node) or "")
            if isinstance(node, ast.Assert):
                found.add(Verdict.FAILED)
            elif verdict is not None and (owned or verdict is not Verdict.FAILED):
                found.add(verdict)
    return tuple(verdict for verdict in Verdict if verdict in found)


def _relative(path: Path) -> str:
    """The audit module's path from the checkout's root, which the links in docs/ are relative to."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        raise CatalogError(
            f"the audit modules are read from {path.parent}, outside this checkout {ROOT}: "
            "install it editable (pip install -e .) to generate its catalog"
        ) from None


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return text.replace("|", "\\|")


def _row(entry: AuditEntry) -> str:
    where = f"{_relative(entry.path)}:{entry.line}"
    code = f"[`{where}`](../{_relative(entry.path)}#L{entry.line}) `{entry.function}`"
    subjects = ", ".join(f"`{name}`" for name in entry.arguments if name in SUBJECTS) or "—"
    given = ", ".join(verdict.value for verdict in verdicts(entry))
    summary = _cell(entry.summary) if entry.doc else NO_DOCSTRING
    return f"| `{entry.id}` | {entry.gate_class} | {code} | {subjects} | {given} | {summary} |"


def render(entries: Mapping[str, AuditEntry]) -> str:
    """The generated catalog: a count per gate class, then one table per audit module, in source order."""
    counts = {gate: sum(entry.gate_class == gate for entry in entries.values()) for gate in GATE_CLASSES}
    lines = [
        f"_Generated by `{REGENERATE}` from the audit modules; edit the code, not this part._",
        "",
        f"{len(entries)} audits: " + ", ".join(f"{count} {gate}" for gate, count in counts.items()) + ".",
    ]
    modules: dict[str, list[AuditEntry]] = {}
    for entry in entries.values():
        modules.setdefault(entry.module, []).append(entry)
    for module, members in modules.items():
        lines += [
            "",
            f"### {module} — `{_relative(members[0].path)}`",
            "",
            "| id | gate | code | per | verdicts | what it checks |",
            "| --- | --- | --- | --- | --- | --- |",
            *(_row(entry) for entry in members),
        ]
    return "\n".join(lines)


def updated(document: str, generated: str) -> str:
    """``document`` with the text between the markers replaced by ``generated``."""
    start, end = document.find(START), document.find(END)
    if start < 0 or end < start:
        raise CatalogError(f"docs/audits.md needs the markers {START} and then {END} around the catalog")
    return f"{document[: start + len(START)]}\n{generated}\n{document[end:]}"


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def stale(path: Path, entries: Mapping[str, AuditEntry]) -> str | None:
    """Why ``path`` does not hold the catalog of ``entries``, in one line; None when it does."""
    current = path.read_text(encoding="utf-8")
    if updated(current, render(entries)) == current:
        return None
    return f"{_shown(path)} is out of date with the audit modules: run {REGENERATE}"


def write(path: Path, entries: Mapping[str, AuditEntry]) -> bool:
    """Rewrite the generated part of ``path``; whether anything changed."""
    current = path.read_text(encoding="utf-8")
    fresh = updated(current, render(entries))
    if fresh != current:
        path.write_text(fresh, encoding="utf-8")
    return fresh != current


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/audits.md is out of date")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problem = stale(AUDITS_MD, catalog())
            if problem:
                print(problem, file=sys.stderr)
            return 1 if problem else 0
        changed = write(AUDITS_MD, catalog())
        print(f"{'wrote' if changed else 'unchanged:'} {_shown(AUDITS_MD)}")
        return 0
    except CatalogError as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
