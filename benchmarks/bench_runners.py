"""Runner hot paths vs the seed's way, side by side against one real sshd on 127.0.0.1 (medians).

1. ``watch``: one status in one SSH round trip (runaudit's probe) vs the seed's patrol style, one
   OpenSSH connection per signal (tmux session, PID, log age, log tail, train.csv, disk bytes, inodes,
   GPU), as its poll scripts do.
2. Re-running a pull when nothing changed: hash the local copy against the manifest's sizes and
   SHA-256 (what ``runaudit pull`` does before fetching) vs ``rsync -a --checksum`` of the capsule
   (the way to be equally sure with rsync alone: it hashes both ends and compares over the wire).

    python benchmarks/bench_runners.py [--repeats 5] [--size-mib 256] [--files 64]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT / "tests" / "box"))

SEED_PATROL = (  # one ssh connection each, as the seed's poll scripts do
    "tmux -L {sock} has-session -t runaudit-bench 2>/dev/null; echo $?",
    "cat {state}/current",
    "stat -c %Y {state}/$(cat {state}/current)/log",
    "tail -n 1 {state}/$(cat {state}/current)/log",
    "tail -n 1 {root}/active/bench/train.csv 2>/dev/null; true",
    "df -Pk {root}",
    "df -Pi {root}",
    "command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=utilization.gpu --format=csv; true",
)


def median_seconds(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def report(name: str, ours: float, baseline: float) -> None:
    print(
        f"{name}: runaudit {ours * 1000:.0f} ms, baseline {baseline * 1000:.0f} ms, ratio {baseline / ours:.1f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--files", type=int, default=64)
    args = parser.parse_args()

    import pytest  # start_sshbox skips (raises) when sshd, rsync or tmux is missing
    from sshbox import start_sshbox

    from runaudit.runners.launch import launch
    from runaudit.runners.manifest import build_manifest
    from runaudit.runners.pull import fetch_manifest, stale_files
    from runaudit.runners.transfer import remote_path, rsync
    from runaudit.runners.watch import watch

    with tempfile.TemporaryDirectory(prefix="runaudit-bench-") as scratch:
        base = Path(scratch)
        (base / "sshd").mkdir()
        try:
            sshbox = start_sshbox(base / "sshd")
        except pytest.skip.Exception as exc:
            print(f"skipped: {exc}")
            return 0
        box = None
        try:
            box_root = base / "box"
            (box_root / "active" / "bench").mkdir(parents=True)
            box = sshbox.box(box_root, base / "state")
            launch(box, "bench", ["bash", "-c", "echo started; exec sleep 600"], alive_timeout_s=30)
            state = box.run_state("bench")
            ssh = shlex.join(sshbox.endpoint().ssh_argv())
            patrol = [
                f"{ssh} 127.0.0.1 {shlex.quote(cmd.format(sock=box.tmux_socket, state=state, root=box_root))}"
                for cmd in SEED_PATROL
            ]

            def seed_watch() -> None:
                for command in patrol:
                    subprocess.run(command, shell=True, capture_output=True, check=False)

            assert watch(box, "bench").state == "running"
            report(
                f"watch, one status ({len(SEED_PATROL)} signals)",
                median_seconds(lambda: watch(box, "bench"), args.repeats),
                median_seconds(seed_watch, args.repeats),
            )

            capsule = box_root / "export" / "bench"
            capsule.mkdir(parents=True)
            chunk = max(1, args.size_mib * (1 << 20) // args.files)
            for index in range(args.files):
                (capsule / f"blob-{index:03d}.bin").write_bytes(os.urandom(chunk))
            build_manifest(box_root, ["bench"], "bench", log=lambda line: None)
            local = base / "local"
            (local / "runs").mkdir(parents=True)
            source = remote_path(sshbox.endpoint(), f"{capsule}/")
            rsync(sshbox.endpoint(), source, f"{local / 'runs' / 'bench'}/")  # the first pull, not timed
            manifest = fetch_manifest(box, local, "bench")

            def ours() -> None:
                stale, _ = stale_files(local / "runs", fetch_manifest(box, local, "bench"))
                assert not stale

            def checksum_rsync() -> None:
                subprocess.run(
                    [
                        "rsync",
                        "-a",
                        "--checksum",
                        "--partial",
                        "-e",
                        ssh,
                        source,
                        f"{local / 'runs' / 'bench'}/",
                    ],
                    check=True,
                    capture_output=True,
                )

            report(
                f"pull re-check, {len(manifest.entries)} files, {args.size_mib} MiB unchanged",
                median_seconds(ours, args.repeats),
                median_seconds(checksum_rsync, args.repeats),
            )
        finally:
            if box is not None:
                subprocess.run(
                    ["tmux", "-L", box.tmux_socket, "kill-server"], capture_output=True, check=False
                )
            sshbox.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
