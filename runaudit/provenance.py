"""What can be known about the code and the machine that trained a run, for ``run.json``'s ``source``,
``environment`` and ``seed`` (docs/capsule.md §3). torch is read only when the caller already loaded it.
"""

from __future__ import annotations

import hashlib
import platform
import re
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

SOURCE_FILE_CAP = 16 * 1024 * 1024  # larger tracked files enter the source tree hash by size only


def source_identity(source_dir: Path | None = None, entrypoint: str | None = None) -> dict[str, Any]:
    """The code that trained the run: git commit and dirty flag where the folder is a checkout, and a
    SHA-256 over the tree's files (tracked and untracked-but-not-ignored, else every ``*.py``) always.

    The entry point is the script or module that ran, never its arguments (they may hold secrets).
    """
    script = _user_script()
    folder = (source_dir or (script.parent if script is not None else Path.cwd())).resolve()
    top = _git(folder, "rev-parse", "--show-toplevel")
    commit = _git(folder, "rev-parse", "HEAD") if top else None
    status = _git(folder, "status", "--porcelain", "--untracked-files=normal", "--", ".") if top else None
    if top:
        listed = _git(folder, "ls-files", "-z", "-co", "--exclude-standard", "--", ".") or ""
        files = sorted(folder / name for name in listed.split("\0") if name)
    else:
        files = sorted(folder.rglob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        if not path.is_file() or path.is_symlink():
            continue
        size = path.stat().st_size
        digest.update(path.relative_to(folder).as_posix().encode("utf-8", "surrogateescape") + b"\0")
        digest.update(path.read_bytes() if size <= SOURCE_FILE_CAP else f"<{size} bytes>".encode())
        digest.update(b"\0")
    if entrypoint is None:
        main_module = getattr(sys.modules.get("__main__"), "__spec__", None)
        if main_module is not None and main_module.name:
            entrypoint = f"python -m {main_module.name.removesuffix('.__main__')}"
        elif script is not None:
            shown = script.resolve()
            base = Path(top) if top else folder
            entrypoint = f"python {shown.relative_to(base) if shown.is_relative_to(base) else shown.name}"
        else:
            entrypoint = "python"
    return {
        "repo": Path(top).name if top else folder.name,
        "commit": commit if commit and re.fullmatch(r"[0-9a-f]{7,64}", commit) else None,
        "dirty": None if status is None else bool(status.strip()),
        "entrypoint": entrypoint,
        "tree_sha256": digest.hexdigest(),
    }


def _user_script() -> Path | None:
    """The script the user ran, or None under ``-c``, a notebook, or a tool installed in the environment
    (``python -m pytest``, ipykernel), whose folder is not the user's code: the current folder stands."""
    if not sys.argv or sys.argv[0] in ("", "-c", "-m"):
        return None
    script = Path(sys.argv[0]).resolve()
    installed = {
        Path(path).resolve()
        for key in ("purelib", "platlib", "stdlib", "scripts")
        if (path := sysconfig.get_path(key))
    }
    if not script.is_file() or any(script.is_relative_to(folder) for folder in installed):
        return None
    return script


def environment() -> dict[str, Any]:
    """Python, and torch/CUDA/GPU when torch is already loaded (the writer never imports it for this)."""
    found: dict[str, Any] = {"python": platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is None:
        return found
    found["torch"] = str(torch.__version__)
    cuda = torch.cuda.is_available()
    found["cuda"] = torch.version.cuda if cuda else None
    found["gpu"] = torch.cuda.get_device_name(0) if cuda else None
    found["gpu_count"] = torch.cuda.device_count() if cuda else 0
    return found


def determinism() -> dict[str, bool]:
    torch = sys.modules.get("torch")
    if torch is None:
        return {"deterministic": False, "cudnn_benchmark": False}
    return {
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip("\n") if args[0] != "ls-files" else done.stdout
