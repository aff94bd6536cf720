"""A box the remote verbs act on: an SSH endpoint, its project root and where job state lives.

Every remote verb takes the same arguments (``add_box_arguments``), so a user learns them once:
``--host/--port/--user/--identity/--known-hosts`` for the connection (secrets only by file path or
variable name), ``--remote-root`` for the project root on the box, and ``--profile`` for the platform.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runaudit.ids import is_safe_id
from runaudit.platforms import Profile, load_profile
from runaudit.runners.ssh import Endpoint
from runaudit.usage import Refusal

DEFAULT_STATE_DIR = ".runaudit/jobs"  # relative to the login directory: per-instance, never shared storage


@dataclass(frozen=True)
class Box:
    endpoint: Endpoint
    root: PurePosixPath  # the project root on the box (active/, export/, _trust/ ...)
    state_dir: str = DEFAULT_STATE_DIR
    python: str = "python3"
    profile: Profile | None = None

    @property
    def key(self) -> str:
        """A short stable name for this project root: the tmux socket and the state folder use it."""
        return hashlib.sha256(str(self.root).encode()).hexdigest()[:12]

    @property
    def tmux_socket(self) -> str:
        return f"runaudit-{self.key}"

    def run_state(self, run_id: str) -> str:
        """The per-run job-state folder on the box (relative paths resolve against the login dir)."""
        require_run_id(run_id)
        return f"{self.state_dir}/{self.key}/{run_id}"

    def path(self, *parts: str) -> str:
        return str(self.root.joinpath(*parts))


def require_run_id(run_id: str) -> str:
    if not is_safe_id(run_id):
        raise Refusal(f"run id {run_id!r} is not a safe id (^[A-Za-z0-9][A-Za-z0-9._-]*$)")
    return run_id


def remote_root(value: str) -> PurePosixPath:
    """An absolute path without ``..``, printable: a line break in it reached rsync's protocol, whose own
    error was all the user saw."""
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts or not value.isprintable():
        raise argparse.ArgumentTypeError(
            f"--remote-root must be an absolute, printable path without '..', given {value!r}"
        )
    return path


def add_endpoint_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    group = parser.add_argument_group("the box (secrets only by file path or variable name)")
    group.add_argument("--host", required=required, help="the box's address")
    group.add_argument("--port", type=int, default=22)
    group.add_argument("--user", default="", help="login (default: the profile's SSH_USER, else yours)")
    group.add_argument("--identity", type=Path, help="private key file")
    group.add_argument(
        "--identity-passphrase-env", metavar="NAME", help="environment variable holding the key's passphrase"
    )
    group.add_argument(
        "--known-hosts",
        type=Path,
        help="known_hosts file pinning the box's key (default: the profile's pinned file, else ~/.ssh/known_hosts)",
    )
    group.add_argument("--connect-timeout", type=float, default=15.0, metavar="SECONDS")
    group.add_argument(
        "--profile", help="platform profile: a name such as autodl or china:gpushare, or a .toml file"
    )


def add_box_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    add_endpoint_arguments(parser, required=required)
    group = parser.add_argument_group("the project on the box")
    group.add_argument(
        "--remote-root", type=remote_root, required=required, help="absolute project root on the box"
    )
    group.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        help=f"where job state and the environment file live on the box (default: ~/{DEFAULT_STATE_DIR})",
    )
    group.add_argument(
        "--python", default="", help="interpreter on the box (default: the profile's PY, else python3)"
    )


def add_workdir_argument(parser: argparse.ArgumentParser) -> None:
    """One meaning for every verb that runs something on the box: the pushed code's folder, where the
    command runs and whose modules shadow any installed copy (it goes first on PYTHONPATH)."""
    parser.add_argument(
        "--workdir",
        help="folder on the box holding the pushed code: the command runs there and imports from it first "
        "(default: run in --remote-root, import what is installed)",
    )


def endpoint_from_args(args: argparse.Namespace, profile: Profile | None) -> Endpoint:
    known_hosts = args.known_hosts or (profile.known_hosts if profile else None) or Path("~/.ssh/known_hosts")
    user = args.user or ((profile.setting("SSH_USER").value() or "") if profile else "")
    return Endpoint(
        host=args.host,
        port=args.port,
        user=user,
        identity=args.identity,
        known_hosts=known_hosts,
        passphrase_env=args.identity_passphrase_env,
        connect_timeout=args.connect_timeout,
    )


def profile_from_args(args: argparse.Namespace) -> Profile | None:
    return load_profile(args.profile) if getattr(args, "profile", None) else None


def box_from_args(args: argparse.Namespace) -> Box:
    profile = profile_from_args(args)
    python = args.python or ((profile.setting("PY").value() or "") if profile else "") or "python3"
    return Box(
        endpoint=endpoint_from_args(args, profile),
        root=args.remote_root,
        state_dir=args.state_dir.removeprefix("~/").rstrip("/") or DEFAULT_STATE_DIR,
        python=python,
        profile=profile,
    )
