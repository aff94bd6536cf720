"""``runaudit manifest``: the producer's PULL_MANIFEST.json, built from an explicit roster.

The roster names every run to pull; the export folder must hold exactly those sealed capsules, or with
``--subset`` at least those (a box that sealed earlier runs, one manifest per run as ``watch --then
close,manifest`` writes them: ``runaudit down`` refuses a teardown until each sealed run is pulled). Every
file is hashed fresh (this is the producer's trust boundary) and the manifest is written atomically
under ``_trust/pulls/<pull-id>/``, never inside a capsule, and never over an existing one.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable
from pathlib import Path

import runaudit
from runaudit import manifest as manifests
from runaudit.atomic import write_json_atomic
from runaudit.clock import utc_now
from runaudit.hashing import hash_files, progress_bar
from runaudit.ids import casefold_collisions, is_safe_id
from runaudit.roster import parse_roster, read_roster
from runaudit.usage import Refusal, existing_dir

SCHEMA_VERSION = "runaudit.pull/1"
IGNORED_IN_EXPORT = (".partial", "hardware")  # closure workspace and hardware capsules' own folder


class ManifestError(Refusal):
    """The manifest was refused; nothing was written."""


def build_manifest(
    root: Path,
    roster: list[str],
    pull_id: str,
    *,
    node: str | None = None,
    subset: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    if not is_safe_id(pull_id):
        raise ManifestError(f"pull id {pull_id!r} is not a safe id")
    exports = root / "export"
    target = manifests.pulls_dir(root) / pull_id / manifests.MANIFEST
    if target.exists():
        raise ManifestError(f"{target} already exists; a manifest is immutable, use a new pull id")
    if not exports.is_dir():
        raise ManifestError(f"{exports} does not exist: no sealed capsules to list")
    present = {
        entry.name
        for entry in exports.iterdir()
        if not entry.name.startswith(".") and entry.name not in IGNORED_IN_EXPORT
    }
    missing = [name for name in roster if name not in present]
    unexpected = [] if subset else sorted(present - set(roster))
    if missing or unexpected:
        raise ManifestError(
            f"{exports} does not match the roster: missing {missing or 'none'}, unexpected {unexpected or 'none'}"
            + ("; list the other sealed runs too, or pass --subset to list these alone" if unexpected else "")
        )
    files: dict[str, Path] = {}
    empty_dirs: list[str] = []
    for run_id in roster:
        if (exports / run_id).is_symlink() or not (exports / run_id).is_dir():
            raise ManifestError(f"{exports / run_id} is not a capsule directory")
        tree = manifests.local_tree(exports, run_id)
        refused = tree.refusals()
        refused += [f"{rel} (*.tmp residue)" for rel in tree.files if rel.endswith(".tmp")]
        refused += [f"{' / '.join(group)} (case-fold collision)" for group in casefold_collisions(tree.files)]
        if refused:
            raise ManifestError(f"capsule {run_id} cannot be listed: {', '.join(refused[:5])}")
        if too_many := manifests.capsule_size_problems(tree.files):
            raise ManifestError(too_many[0])
        files.update({rel: exports / rel for rel in tree.files})
        empty_dirs += tree.empty_dirs
    total = sum(path.stat().st_size for path in files.values())
    bar = progress_bar(total, f"sha256 of {len(files)} files")
    digests = hash_files(files.values(), on_bytes=bar.update if bar is not None else None)
    if bar is not None:
        bar.close()
    document = {
        "schema_version": SCHEMA_VERSION,
        "pull_id": pull_id,
        "roster": roster,
        "created_utc": utc_now(),
        "producer": {
            "node": node or socket.gethostname(),
            "tool": "runaudit",
            "version": runaudit.__version__,
        },
        "hash": "sha256",
        "files": [
            {"path": rel, "bytes": digests[path].size, "sha256": digests[path].sha256}
            for rel, path in sorted(files.items())
        ],
        "empty_dirs": sorted(empty_dirs),
        "totals": {"files": len(files), "bytes": total},
    }
    write_json_atomic(target, document)
    log(f"manifest {pull_id}: {len(roster)} run(s), {len(files)} files, {total / 2**20:.1f} MiB -> {target}")
    return target


def roster_from_args(args: argparse.Namespace) -> list[str]:
    """The roster from ``--roster FILE`` or ``--runs ID ...`` (exactly one of them), checked here."""
    if args.runs:
        return parse_roster("\n".join(args.runs), "--runs")
    return read_roster(args.roster)


def _main(args: argparse.Namespace) -> int:
    if args.root is None:
        raise ManifestError("manifest needs --root (the project root here), or --host and --remote-root")
    roster = roster_from_args(args)
    build_manifest(
        args.root.resolve(),
        roster,
        args.pull_id,
        node=args.node,
        subset=args.subset,
        log=lambda line: print(line),
    )
    return 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "manifest", help="write the producer's PULL_MANIFEST.json from an explicit roster"
    )
    parser.add_argument("--root", type=existing_dir, help="project root on the producer (without --host)")
    listed = parser.add_mutually_exclusive_group(required=True)
    listed.add_argument("--roster", type=Path, help="file: one run id per line, # comments")
    listed.add_argument("--runs", nargs="+", metavar="RUN_ID", help="the roster as run ids")
    parser.add_argument("--pull-id", required=True)
    parser.add_argument("--node", help="producer node name (default: this host's name)")
    parser.add_argument(
        "--subset",
        action="store_true",
        help="list these runs alone, though export/ holds other sealed runs (each needs a pull of its own "
        "before runaudit down approves a teardown)",
    )
    parser.set_defaults(handler=_main)
