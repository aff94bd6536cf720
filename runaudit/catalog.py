"""The audit catalog, read from the audit modules' source: which audits exist, of which gate class.

An audit id is its test's own name (docs/audits.md, "Naming"): ``audits/test_<module>.py::test_<check>``
is ``<module>.<check>``. Several parts need the list without running pytest: the custody gate's
completeness (what a YES must have seen), the generated catalog in ``docs/audits.md``, and the test that
every audit id written in the code names a real audit. They all read it here, from the source with
:mod:`ast` (the modules are never imported twice, and nothing is executed).

An audit's gate class is its closest gate mark, as the plugin reads it from the collected item: a
decorator on the function (``@pytest.mark.custody`` or a module-level alias of it), else the module's
``pytestmark``. ``tests/test_teardown_trust.py`` checks this reading against what pytest collects.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from runaudit.verdict import GATE_CLASSES

AUDIT_MODULE_PREFIX = "test_"


def _audits_dir() -> Path:
    """The folder of the audit modules, in a checkout (``audits/``) or installed (``runaudit/audits/``)."""
    spec = importlib.util.find_spec("runaudit.audits")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("runaudit.audits is not installed: pip install -e . from the checkout (see README)")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


AUDITS_DIR = _audits_dir()


@dataclass(frozen=True)
class AuditEntry:
    """One audit as its source declares it."""

    id: str
    gate_class: str
    path: Path
    function: str
    line: int
    arguments: tuple[str, ...]  # every parameter: fixtures, and the subjects it is parametrized over
    doc: str  # the function's docstring, or ""

    @property
    def module(self) -> str:
        return self.id.partition(".")[0]

    @property
    def summary(self) -> str:
        """The docstring's first paragraph on one line."""
        return " ".join(self.doc.strip().split("\n\n")[0].split())


def audit_id(module_stem: str, function: str) -> str | None:
    """``test_capsule`` + ``test_ids`` -> ``capsule.ids``; None for a name that is not an audit's."""
    if not (module_stem.startswith(AUDIT_MODULE_PREFIX) and function.startswith(AUDIT_MODULE_PREFIX)):
        return None
    return f"{module_stem.removeprefix(AUDIT_MODULE_PREFIX)}.{function.removeprefix(AUDIT_MODULE_PREFIX)}"


@functools.cache
def catalog(folder: Path = AUDITS_DIR) -> dict[str, AuditEntry]:
    """Audit id -> entry, for every audit function with a gate mark, in module then source order."""
    found: dict[str, AuditEntry] = {}
    for module in sorted(folder.glob(f"{AUDIT_MODULE_PREFIX}*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
        aliases = {
            target.id: gate
            for node in tree.body
            if isinstance(node, ast.Assign) and (gate := gate_named(node.value)) is not None
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        module_gate = aliases.get("pytestmark")
        for node in tree.body:
            if (
                not isinstance(node, ast.FunctionDef)
                or (identity := audit_id(module.stem, node.name)) is None
            ):
                continue
            marked = [
                gate_named(item) or aliases.get(getattr(item, "id", "")) for item in node.decorator_list
            ]
            gate = next((item for item in marked if item is not None), module_gate)
            if gate is None:
                continue
            found[identity] = AuditEntry(
                id=identity,
                gate_class=gate,
                path=module,
                function=node.name,
                line=node.lineno,
                arguments=tuple(arg.arg for arg in node.args.args),
                doc=ast.get_docstring(node) or "",
            )
    return found


def gate_named(node: ast.expr) -> str | None:
    """The gate class a mark expression names (``pytest.mark.custody``, or the first of a list), else None."""
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    for item in items:
        text = ast.unparse(item)
        for gate in GATE_CLASSES:
            if text in (f"pytest.mark.{gate}", f"mark.{gate}"):
                return gate
    return None
