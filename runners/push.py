"""``runaudit push``: rsync the project's code to the box, then prove the box holds exactly those bytes.

The proof is a tree hash: SHA-256 of every pushed file, computed here and again on the box with
``sha256sum``. It is stored in the run's job-state folder so ``launch`` can record which code ran.
Caches, checkpoints and run outputs never travel (they are data, and ``push`` is code).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runaudit.clock import utc_now
from runaudit.hashing import sha256_file
from runaudit.runners.box import Box, add_box_arguments, box_from_args
from runaudit.runners.ssh import Remote
from runaudit.runners.transfer import remote_path, rsync
from runaudit.usage import Refusal

EXCLUDES = (
    ".git",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".venv",
    "venv",
    "*.egg-info",
    "build",
    "dist",
    ".ipynb_checkpoints",
    "wandb",
    "*.pth",
    "*.pt",
    "*.ckpt",
    "*.safetensors",
    "/active",
    "/export",
    "/runs",
    "/quarantine",
    "/cache",
    "/_trust",
)
PUSH_RECORD = "push.json"


@dataclass(frozen=True)
class Tree:
    files: dict[str, str]  # posix relative path -> sha256

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for name in sorted(self.files):
            digest.update(f"{name}\0{self.files[name]}\n".encode())
        return digest.hexdigest()


def excluded(relative: PurePosixPath, patterns: tuple[str, ...]) -> bool:
    """rsync-like matching: ``/name`` matches the top level only, ``name`` any path component."""
    for pattern in patterns:
        if pattern.startswith("/"):
            if fnmatch.fnmatch(relative.parts[0], pattern[1:]):
                return True
        elif any(fnmatch.fnmatch(part, pattern) for part in relative.parts):
            return True
    return False


def local_tree(source: Path, patterns: tuple[str, ...]) -> Tree:
    """Every file to push, hashed; symlinks and names a remote listing cannot carry are refused."""
    root = source.resolve()
    if not root.is_dir():
        raise Refusal(f"push: {source} is not a directory")
    files: dict[str, str] = {}
    for folder, dirs, names in os.walk(root):
        here = PurePosixPath(Path(folder).relative_to(root).as_posix())
        dirs[:] = sorted(name for name in dirs if not excluded(here / name, patterns))
        for name in [*dirs, *names]:
            path = Path(folder, name)
            relative = here / name
            if excluded(relative, patterns):
                continue
            _check_name(path, relative)
            if name in names:
                files[relative.as_posix()] = sha256_file(path)
    if not files:
        raise Refusal(f"push: nothing to push under {root} after excluding caches and run outputs")
    return Tree(dict(sorted(files.items())))


def _check_name(path: Path, relative: PurePosixPath) -> None:
    if "\n" in relative.as_posix() or "\\" in relative.as_posix():
        raise Refusal(f"push: {path}: a name with a newline or backslash cannot be verified remotely")
    if path.is_symlink():
        raise Refusal(f"push: {path} is a symlink; push copies files only (leave it out with --exclude)")


def remote_tree(remote: Remote, destination: str, patterns: tuple[str, ...]) -> Tree:
    listing = remote.run(
        f"cd {shlex.quote(destination)} && find . -type f -print0 | sort -z | xargs -0 -r sha256sum --",
        timeout=600,
    )
    if not listing.ok:
        raise Refusal(f"push: hashing the pushed tree on the box failed: {listing.tail()}")
    files = {}
    for line in listing.stdout.splitlines():
        digest, _, name = line.partition("  ")
        relative = PurePosixPath(name.removeprefix("./"))
        if not excluded(relative, patterns):
            files[relative.as_posix()] = digest
    return Tree(files)


def push(box: Box, source: Path, destination: str, *, patterns: tuple[str, ...] = EXCLUDES) -> Tree:
    """Push ``source`` to ``destination`` on the box; raise unless the box's tree hash equals ours."""
    tree = local_tree(source, patterns)
    rsync(
        box.endpoint,
        f"{source.resolve()}/",
        remote_path(box.endpoint, f"{destination}/"),
        files=sorted(tree.files),
    )
    with Remote(box.endpoint) as remote:
        landed = remote_tree(remote, destination, patterns)
        missing = sorted(set(tree.files) - set(landed.files))
        changed = sorted(
            name for name in tree.files if name in landed.files and landed.files[name] != tree.files[name]
        )
        extra = sorted(set(landed.files) - set(tree.files))
        if missing or changed or extra:
            problems = [
                f"{len(items)} {what} (e.g. {items[0]})"
                for what, items in (("missing", missing), ("different", changed), ("extra on the box", extra))
                if items
            ]
            raise Refusal(
                f"push: the tree at {box.endpoint.label}:{destination} differs from {source}: "
                f"{'; '.join(problems)}; remove stale files or push to a fresh --dest"
            )
        record = {
            "destination": destination,
            "tree_sha256": tree.sha256,
            "files": len(tree.files),
            "source": str(source.resolve()),
            "from_node": socket.gethostname(),
            "pushed_utc": utc_now(),
        }
        state = f"{box.state_dir}/{box.key}"
        made = remote.run(f"mkdir -p -m 700 {shlex.quote(state)}")
        if not made.ok:
            raise Refusal(f"push: cannot create {state} on the box: {made.tail()}")
        remote.write_file(f"{state}/{PUSH_RECORD}", (json.dumps(record, indent=2) + "\n").encode())
    return tree


def _main(args: argparse.Namespace) -> int:
    box = box_from_args(args)
    destination = args.dest if args.dest.startswith("/") else box.path(args.dest)
    tree = push(box, args.source, destination, patterns=EXCLUDES + tuple(args.exclude))
    print(
        f"push: {len(tree.files)} files at {box.endpoint.label}:{destination}, "
        f"tree sha256 {tree.sha256} (equal on both sides)"
    )
    return 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser("push", help="rsync the project code to the box and prove it landed by hash")
    parser.add_argument(
        "source", type=Path, nargs="?", default=Path.cwd(), help="project folder (default: .)"
    )
    add_box_arguments(parser)
    parser.add_argument("--dest", default="code", help="folder on the box, absolute or under --remote-root")
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="PATTERN", help="also leave out PATTERN"
    )
    parser.set_defaults(handler=_main)
