"""Close a run (docs/capsule.md §1): active → export/.partial → audits → one atomic rename, or quarantine.

Nothing is deleted and nothing is overwritten: ``active/<id>`` is copied, never moved; a sealed
``export/<id>`` is never replaced; a candidate that fails its custody audits moves whole to
``quarantine/<id>--<attempt-id>/`` with ``QUARANTINE_REASON.txt`` and the audit report beside it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runaudit.atomic import fsync_dir, write_bytes_atomic, write_json_atomic
from runaudit.capsule import CHECKPOINT_FILES, CHECKPOINT_ROLES, checkpoint_file
from runaudit.clock import attempt_id, utc_now
from runaudit.hashing import sha256_file
from runaudit.ids import is_safe_id
from runaudit.manifest import load_json
from runaudit.runners.suite import failures, run_suite
from runaudit.safeio import JSON_CAP, read_regular
from runaudit.usage import Refusal, existing_dir

CLOSURE_GATES = ("test_capsule.py", "test_checkpoint.py")
# Every checkpoint format a role may take is copied (best.pth or best.safetensors, docs/capsule.md §2); a
# role found in two formats is copied as found and fails the closure audits (capsule.closed_world).
SEALED = ("config.yaml", "train.csv", *CHECKPOINT_FILES)
REASON_FILE = "QUARANTINE_REASON.txt"
REPORT_FILE = "AUDIT_REPORT.json"


class CloseError(Refusal):
    """Closing was refused before anything moved; the message is the line the user sees."""


@dataclass(frozen=True)
class CloseResult:
    run_id: str
    sealed: bool
    path: Path  # export/<id> when sealed, quarantine/<id>--<attempt> when not
    reason: str
    report: dict[str, Any] | None


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One closer at a time per export folder (the check-then-rename must not race)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".close.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def missing_gate_modules(active: Path) -> list[str]:
    """The modules the closure audits import that this interpreter cannot find: torch only when a ``.pth``
    is to be sealed (a safetensors capsule is audited without it)."""
    from importlib.util import find_spec

    wanted = ["pyarrow", "jsonschema", "numpy", "PIL", "yaml"]
    if any((active / name).suffix == ".pth" and (active / name).is_file() for name in SEALED):
        wanted.append("torch")
    return [name for name in wanted if find_spec(name) is None]


def seal_bindings(draft: dict[str, Any], candidate: Path, root: Path) -> dict[str, Any]:
    """The producer's declaration plus the identity hashes of the bytes being sealed.

    A binding the producer already declared is kept as declared, so that a stale one is caught by the
    audits instead of being silently recomputed.
    """
    sealed: dict[str, Any] = json.loads(json.dumps(draft))
    sealed["state"] = "closed"
    sealed["closed_utc"] = utc_now()
    if (candidate / "config.yaml").is_file() and isinstance(sealed.get("config"), dict):
        sealed["config"].setdefault("sha256", sha256_file(candidate / "config.yaml"))
    for role in CHECKPOINT_ROLES:
        checkpoint = sealed.get("checkpoints", {}).get(role)
        path = candidate / checkpoint_file(role, candidate).name
        if isinstance(checkpoint, dict) and path.is_file():
            checkpoint.setdefault("sha256", sha256_file(path))
    for selection in sealed.get("selections", []):
        path = root / "_trust" / "selections" / f"{selection.get('selection_id')}.json"
        if isinstance(selection, dict) and is_safe_id(selection.get("selection_id")) and path.is_file():
            selection.setdefault("sha256", sha256_file(path))
    return sealed


def quarantine(candidate: Path, root: Path, run_id: str, reason: str, report: dict[str, Any] | None) -> Path:
    target = root / "quarantine" / f"{run_id}--{attempt_id()}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(candidate, target)
    fsync_dir(target.parent)
    write_bytes_atomic(target / REASON_FILE, (reason.rstrip() + "\n").encode("utf-8"))
    if report is not None:
        write_json_atomic(target / REPORT_FILE, report)
    return target


def close_run(root: Path, run_id: str, *, log: Callable[[str], None] = lambda line: None) -> CloseResult:
    """Seal ``root/active/<run_id>`` as ``root/export/<run_id>``, or quarantine the attempt."""
    if not is_safe_id(run_id):
        raise CloseError(f"close: run id {run_id!r} is not a safe id (^[A-Za-z0-9][A-Za-z0-9._-]*$)")
    root = root.resolve()
    active = root / "active" / run_id
    exports = root / "export"
    final = exports / run_id
    candidate = exports / ".partial" / run_id
    if not active.is_dir():
        raise CloseError(f"close {run_id}: {active} does not exist; there is no active run to close")
    if final.exists():
        raise CloseError(
            f"close {run_id}: {final} is already sealed; a sealed capsule is never overwritten, "
            "a re-run mints a new run id"
        )
    try:
        draft = load_json(read_regular(active / "run.json", JSON_CAP))
    except FileNotFoundError:
        raise CloseError(
            f"close {run_id}: {active / 'run.json'} is missing; the producer must declare the run"
        ) from None
    except OSError as exc:  # a FIFO, device or symlink in its place, or past the cap: never read
        raise CloseError(f"close {run_id}: {exc}") from None
    except ValueError as exc:
        raise CloseError(f"close {run_id}: {active / 'run.json'} is not valid JSON ({exc})") from None
    if not isinstance(draft, dict):
        raise CloseError(f"close {run_id}: {active / 'run.json'} must hold a JSON object")
    missing = missing_gate_modules(active)
    if missing:
        raise CloseError(
            f"close {run_id}: this interpreter ({sys.executable}) cannot run the closure audits: no module "
            f"named {', '.join(missing)}. That is the environment, not the run: nothing was sealed or "
            "quarantined; install runaudit's dependencies there (on a box: --python names the interpreter)"
        )

    with _locked(exports):
        if candidate.exists():
            stale = quarantine(candidate, root, run_id, "stale candidate left by an interrupted close", None)
            log(f"close {run_id}: moved a stale candidate to {stale}")
        candidate.mkdir(parents=True)
        for name in SEALED:
            if (active / name).is_file():
                shutil.copy2(active / name, candidate / name)
        if (active / "test").is_dir():
            shutil.copytree(active / "test", candidate / "test", symlinks=True)
        write_json_atomic(candidate / "run.json", seal_bindings(draft, candidate, root))
        fsync_dir(candidate)

        log(f"close {run_id}: auditing the candidate at {candidate}")
        report, output = run_suite(candidate, root, modules=CLOSURE_GATES, args=("-m", "custody"))
        if report is None:  # no verdict at all: the harness or the environment broke, not the capsule
            shutil.rmtree(candidate)  # a copy; active/<id> is untouched
            said = output.strip().splitlines()
            raise CloseError(
                f"close {run_id}: the closure audits wrote no report ({said[-1] if said else 'no output'}); "
                "nothing was sealed or quarantined"
            )
        problems = failures(report)
        if not problems and final.exists():
            problems = [f"{final} appeared while the candidate was audited; it is never overwritten"]
        if problems:
            reason = f"close {run_id} refused at {utc_now()}: {len(problems)} closure audit(s) did not pass\n"
            reason += "".join(f"- {line}\n" for line in problems)
            target = quarantine(candidate, root, run_id, reason, report)
            return CloseResult(run_id, False, target, reason, report)
        os.rename(candidate, final)
        fsync_dir(exports)
    assert report is not None  # no report is a problem, and problems were returned above
    passed = sum(1 for item in report["verdicts"] if item["verdict"] == "passed")
    return CloseResult(run_id, True, final, f"{passed} closure audits passed", report)


def _main(args: argparse.Namespace) -> int:
    result = close_run(args.root, args.run_id, log=lambda line: print(line, file=sys.stderr))
    if result.sealed:
        print(f"close {result.run_id}: sealed {result.path} ({result.reason})")
        return 0
    print(result.reason.rstrip(), file=sys.stderr)
    print(f"close {result.run_id}: quarantined at {result.path}", file=sys.stderr)
    return 1


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser("close", help="seal active/<id> as export/<id> once the closure audits pass")
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--root", type=existing_dir, default=Path.cwd(), help="project root (default: .)")
    parser.set_defaults(handler=_main)
