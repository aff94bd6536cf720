"""Write ``constraints.txt``: the exact versions this environment resolved for ``runaudit[test]``.

The README's test command and ``.ci/run`` install with ``-c constraints.txt``, so a fresh machine tests
against the versions the project last passed with, not whatever was released since. Refresh deliberately:
install ``-e ".[test]"`` without the constraints in a fresh virtualenv, run the tests, then run this script
there and commit the result beside the passing run. Only the dependency closure of the ``test`` extra is
written (pip, setuptools and tools installed by hand are left out).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
HEADER = (
    "# Exact versions the test suite last passed with; regenerate with python tools/refresh_constraints.py\n"
)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(project: str, extras: set[str]) -> dict[str, str]:
    """Every distribution ``project[extras]`` needs, transitively, with its installed version."""
    found: dict[str, str] = {}
    pending: list[tuple[str, set[str]]] = [(project, extras)]
    while pending:
        name, wanted = pending.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional marker-gated requirement not installed here
        for text in dist.requires or []:
            requirement = Requirement(text)
            environment = [{"extra": extra} for extra in (wanted or {""})]
            if requirement.marker is not None and not any(
                requirement.marker.evaluate(env) for env in environment
            ):
                continue
            key = canonical(requirement.name)
            if key == canonical(project):  # runaudit[demo] inside runaudit[test]
                pending.append((project, set(requirement.extras)))
                continue
            if key not in found:
                try:
                    found[key] = metadata.version(requirement.name)
                except metadata.PackageNotFoundError:
                    continue
                pending.append((requirement.name, set(requirement.extras)))
    return dict(sorted(found.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--extra", action="append", default=["test"], help="extras to include (default: test)"
    )
    parser.add_argument("--output", type=Path, default=ROOT / "constraints.txt")
    args = parser.parse_args()
    pins = closure("runaudit", set(args.extra))
    # The public version only: ``torch==2.13.0`` admits the ``+cpu`` build a CPU machine installs and the
    # CUDA build of the same release a GPU box does.
    lines = "".join(f"{name}=={version.split('+', 1)[0]}\n" for name, version in pins.items())
    args.output.write_text(HEADER + lines)
    print(f"wrote {len(pins)} pins to {args.output}")


if __name__ == "__main__":
    main()
