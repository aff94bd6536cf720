"""Custody gate vs the seed-style verification, side by side on one corpus (medians of repeats).

Baseline (written here, as the seed's scripts do it): SHA-256 of every listed file, serially in 1 MiB
chunks, then a full ``torch.load`` of every checkpoint. runaudit: `runaudit verify` over the same pull —
the full custody gate of every capsule (capsule, manifest and checkpoint audits, with finiteness, exact
roster and selection lineage, hashing fresh) and the receipt.

Also: verify with every checkpoint hashed and then scanned vs hashed and scanned in one read (cold), multi-file
hashing on threads vs one core vs `sha256sum -c`, a second audit inside the same trust
boundary (stat-keyed cache) vs the first, and (from bench_checkpoint_formats.py, in the same run) the
checkpoint gate on safetensors vs the torch path and the fixed cost of a custody session.

    python benchmarks/bench_custody.py [--size-mib 300] [--capsules 2] [--repeats 3] [--dir DIR] [--formats-size-mib 300]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_checkpoint_formats import CHILD_ENV, compare_formats, fixed_cost

BASELINE = r"""
import hashlib, json, sys, torch
root, pull = sys.argv[1], sys.argv[2]
manifest = json.load(open(f"{root}/_trust/pulls/{pull}/PULL_MANIFEST.json"))
for entry in manifest["files"]:
    digest = hashlib.sha256()
    with open(f"{root}/export/{entry['path']}", "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    assert digest.hexdigest() == entry["sha256"], entry["path"]
for entry in manifest["files"]:
    if entry["path"].endswith(".pth"):
        torch.load(f"{root}/export/{entry['path']}", map_location="cpu", weights_only=True)
"""


# Not a verifier: the least any one-process, torch-based verification of the same bytes does (the torch
# import, every file hashed on threads while it runs, every tensor min/max-scanned through mmap), with no
# pytest, no per-file cases, no capsule audits and no receipt. It shows where the 0.5x target sits.
FLOOR = r"""
import hashlib, json, os, sys
from concurrent.futures import ThreadPoolExecutor
root, pull = sys.argv[1], sys.argv[2]
manifest = json.load(open(f"{root}/_trust/pulls/{pull}/PULL_MANIFEST.json"))
paths = sorted((f"{root}/export/{e['path']}" for e in manifest["files"]), key=lambda p: -os.path.getsize(p))
def sha256(path):
    digest, buffer = hashlib.sha256(), bytearray(4 << 20)
    with open(path, "rb", buffering=0) as handle:
        while read := handle.readinto(buffer):
            digest.update(memoryview(buffer)[:read])
    return digest.hexdigest()
pool = ThreadPoolExecutor(4)
digests = [pool.submit(sha256, path) for path in paths]
import torch
[future.result() for future in digests]
for path in paths:
    if path.endswith(".pth"):
        for tensor in torch.load(path, weights_only=True, mmap=True)["model"].values():
            torch.aminmax(tensor)
"""


def measure(command: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process (and the children it waited for)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=CHILD_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{process.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def big_checkpoint(path: Path, size_mib: int, meta: dict) -> None:
    import torch

    per_tensor = 1 << 22  # 16 MiB of float32
    count = max(1, size_mib * (1 << 20) // (per_tensor * 4))
    generator = torch.Generator().manual_seed(len(str(path)))
    weights = {f"layer{i}.weight": torch.randn(per_tensor, generator=generator) for i in range(count)}
    torch.save({**meta, "model": weights}, path)


def build_corpus(base: Path, capsules: int, size_mib: int) -> tuple[Path, str]:
    """A project root with ``capsules`` sealed runs, each holding best.pth and last.pth of ``size_mib``."""
    import torch

    from runaudit.examples.digits.build import ensure_demo
    from runaudit.runners.manifest import build_manifest

    demo_root = base / "demo"
    ensure_demo(demo_root, progress=io.StringIO())
    root = base / "corpus"
    if (root / "_trust" / "pulls" / "bench").is_dir():
        return root, "bench"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(demo_root / "_trust" / "selections", root / "_trust" / "selections")
    shutil.copytree(demo_root / "_trust" / "splits", root / "_trust" / "splits")
    roster = []
    for index in range(capsules):
        run_id = f"bench-{index}"
        capsule = root / "export" / run_id
        shutil.copytree(demo_root / "export" / "demo", capsule)
        run = json.loads((capsule / "run.json").read_text())
        run["run_id"] = run_id
        for role in ("best", "last"):
            original = torch.load(capsule / f"{role}.pth", weights_only=True)
            meta = {key: value for key, value in original.items() if key not in ("model",)}
            big_checkpoint(capsule / f"{role}.pth", size_mib, meta)
            run["checkpoints"][role]["sha256"] = hashlib.sha256(
                (capsule / f"{role}.pth").read_bytes()
            ).hexdigest()
        (capsule / "run.json").write_text(json.dumps(run, indent=2))
        metrics_path = capsule / "test" / "main" / "metrics.json"
        metrics = json.loads(metrics_path.read_text())
        metrics.update(run_id=run_id, checkpoint_sha256=run["checkpoints"]["best"]["sha256"])
        metrics_path.write_text(json.dumps(metrics, indent=2))
        roster.append(run_id)
    build_manifest(root, roster, "bench", log=lambda line: None)
    return root, "bench"


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def can_drop_caches() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def drop_caches(corpus: Path) -> None:
    """Every cached page dropped (root), else the corpus's own pages evicted file by file.

    ``posix_fadvise(DONTNEED)`` needs no privilege and evicts a file's clean pages: the corpus is then read
    from disk while the interpreter's and torch's files may stay cached (a cold pull on a warm machine).
    """
    subprocess.run(["sync"], check=True)
    if can_drop_caches():
        DROP_CACHES.write_text("3\n")
        return
    evict(corpus)


def evict(corpus: Path) -> None:
    """The corpus's own pages evicted from the page cache, file by file (no privilege needed)."""
    subprocess.run(["sync"], check=True)
    for path in corpus.rglob("*"):
        if path.is_file() and not path.is_symlink():
            descriptor = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)


def compare(
    baseline: list[str], ours: list[str], floor: list[str], *, corpus: Path, cold: bool, repeats: int
) -> None:
    """Both sides interleaved, so that drift in machine load hits both alike; cold: caches dropped first.

    Cold, every library and every byte comes from disk (a verification right after a reboot); warm, from
    the page cache (right after the pull wrote them), after one unmeasured run of each side.
    """
    commands = {"baseline": baseline, "runaudit verify": ours, "floor (see FLOOR)": floor}
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    if not cold:
        for command in commands.values():
            measure(command)  # warms the page cache and the bytecode cache
    for _ in range(repeats):
        for name, command in commands.items():
            if cold:
                drop_caches(corpus)
            rows[name].append(measure(command))
    wall = {name: statistics.median(w for w, _ in values) for name, values in rows.items()}
    rss = {name: statistics.median(r for _, r in values) for name, values in rows.items()}
    state = "warm" if not cold else "cold" if can_drop_caches() else "cold corpus (evicted), warm libraries"
    print(f"\n[full custody audit, {state} page cache]  wall s   peak RSS MiB")
    for name in rows:
        print(f"  {name:<28} {wall[name]:8.2f} {rss[name]:12.0f}")
    ratio_wall = wall["runaudit verify"] / wall["baseline"]
    ratio_rss = rss["runaudit verify"] / rss["baseline"]
    print(f"  ratio runaudit/baseline       {ratio_wall:8.2f} {ratio_rss:12.2f}   (targets: <= 0.5, <= 0.25)")
    floor_wall = wall["floor (see FLOOR)"] / wall["baseline"]
    print(f"  ratio floor/baseline          {floor_wall:8.2f}")
    ours_floor = wall["runaudit verify"] / wall["floor (see FLOOR)"]
    print(f"  ratio runaudit/floor          {ours_floor:8.2f}   (target: <= 1.25)")


def limited_cache(limit_bytes: int) -> Path | None:
    """A child of this process's memory cgroup (v1 or v2) capped at ``limit_bytes``, page cache included,
    or None where it cannot be made (no privilege, no controller): a machine whose memory cannot hold the
    checkpoints between two reads, without needing one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            folder, limit = (
                Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "runaudit-bench",
                "memory.limit_in_bytes",
            )
            break
    else:
        path = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
        if path is None:
            return None
        folder, limit = Path("/sys/fs/cgroup") / path.lstrip("/") / "runaudit-bench", "memory.max"
    try:
        folder.mkdir(exist_ok=True)
        (folder / limit).write_text(str(limit_bytes))
    except OSError:
        return None
    return folder


def one_pass(ours: list[str], *, corpus: Path, checkpoint_bytes: int, repeats: int) -> None:
    """``runaudit verify`` on a cold corpus, each checkpoint hashed then scanned through the map (``never``) against
    hashed and scanned in one read (``always``) and verify's own choice (unset), interleaved, in a memory
    cgroup whose cap (half the checkpoints' bytes) leaves the page cache unable to keep a checkpoint
    between two reads. Reported: wall and MiB read from the disk (``ru_inblock``)."""
    cgroup = limited_cache(checkpoint_bytes // 2)
    where = (
        f"memory capped at {checkpoint_bytes // 2 / 2**20:.0f} MiB"
        if cgroup
        else "no memory cap (cgroup not writable)"
    )

    def enter() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    rows: dict[str, list[tuple[float, float]]] = {"never": [], "always": [], "(unset)": []}
    try:
        for _ in range(repeats):
            for mode in rows:
                evict(corpus)  # the libraries stay cached: the disk reads are the corpus's
                env = {**CHILD_ENV, "RUNAUDIT_ONE_PASS": mode if mode != "(unset)" else ""}
                started = time.perf_counter()
                process = subprocess.Popen(
                    ours, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=enter
                )
                _, status, usage = os.wait4(process.pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"failed: {' '.join(ours)}\n{process.stderr.read().decode()[-2000:]}")
                rows[mode].append((time.perf_counter() - started, usage.ru_inblock * 512 / 2**20))
    finally:
        if cgroup is not None:
            cgroup.rmdir()
    print(
        f"\n[one read per checkpoint byte: verify, cold corpus, {where}; checkpoints {checkpoint_bytes / 2**20:.0f} MiB]"
    )
    print("  RUNAUDIT_ONE_PASS             wall s   disk MiB   disk / checkpoints")
    medians = {}
    for mode, values in rows.items():
        medians[mode] = (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
        wall, disk = medians[mode]
        print(f"  {mode:<28} {wall:8.2f} {disk:10.0f} {disk * 2**20 / checkpoint_bytes:12.2f}")
    print(
        f"  wall always/never             {medians['always'][0] / medians['never'][0]:8.2f}   (target: disk / checkpoints ~1.0 unset)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=300, help="size of each checkpoint")
    parser.add_argument("--capsules", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="keep the corpus here between runs (default: a temp dir)")
    parser.add_argument(
        "--formats-size-mib", type=int, default=300, help="checkpoint size for the .pth vs .safetensors gate"
    )
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="runaudit-bench-custody-"))
    base.mkdir(parents=True, exist_ok=True)
    if args.build_only:
        build_corpus(base, args.capsules, args.size_mib)
        return
    # The corpus is built in a child, so that this process stays small: a child's peak RSS as wait4
    # reports it starts from its parent's at fork.
    subprocess.run(
        [
            sys.executable,
            __file__,
            "--build-only",
            "--dir",
            str(base),
            "--capsules",
            str(args.capsules),
            "--size-mib",
            str(args.size_mib),
        ],
        check=True,
    )
    root, pull = base / "corpus", "bench"
    files = sorted(p for p in (root / "export").rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    print(
        f"corpus: {args.capsules} capsules, {len(files)} files, {total / 2**20:.0f} MiB "
        f"({2 * args.capsules} checkpoints of {args.size_mib} MiB); cpus={os.cpu_count()}; "
        f"python {sys.executable}"
    )

    baseline = [sys.executable, "-c", BASELINE, str(root), pull]
    ours = [sys.executable, "-m", "runaudit", "verify", "--root", str(root), "--pull-id", pull]
    floor = [sys.executable, "-c", FLOOR, str(root), pull]
    for cold in (True, False):
        compare(baseline, ours, floor, corpus=root, cold=cold, repeats=args.repeats)
    checkpoint_bytes = sum(p.stat().st_size for p in files if p.suffix == ".pth")
    one_pass(ours, corpus=root, checkpoint_bytes=checkpoint_bytes, repeats=args.repeats)

    from runaudit.hashing import HashCache, hash_files, sha256_file

    def timed(action) -> float:
        started = time.perf_counter()
        action()
        return time.perf_counter() - started

    def one_core() -> None:
        for path in files:
            sha256_file(path)

    check = base / "SHA256SUMS"
    check.write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p}\n" for p in files))
    timings: dict[str, list[float]] = {
        "threads": [], "one core": [], "sha256sum -c": [], "threads, cold": [], "one core, cold": []
    }  # fmt: skip
    for _ in range(args.repeats):
        timings["threads"].append(timed(lambda: hash_files(files)))
        timings["one core"].append(timed(one_core))
        drop_caches(root)
        timings["threads, cold"].append(timed(lambda: hash_files(files)))
        drop_caches(root)
        timings["one core, cold"].append(timed(one_core))
        timings["sha256sum -c"].append(
            timed(lambda: subprocess.run(["sha256sum", "-c", "--quiet", str(check)], check=True))
        )
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(f"\n[multi-file hashing, {total / 2**20:.0f} MiB]  median s   MiB/s")
    for name, seconds in medians.items():
        print(f"  {name:<28} {seconds:8.2f} {total / 2**20 / seconds:8.0f}")
    print(
        f"  threads vs one core           {medians['one core'] / medians['threads']:8.2f}x  (target >= 1.6x)"
    )
    cold_ratio = medians["one core, cold"] / medians["threads, cold"]
    print(f"  threads vs one core, cold     {cold_ratio:8.2f}x  (target >= 1.6x)")
    print(
        f"  threads vs sha256sum -c       {medians['sha256sum -c'] / medians['threads']:8.2f}x  (target >= 4x)"
    )

    # A second audit inside the trust boundary, as users run it: after verify, the custody gate of each
    # capsule in its own session, hashes from the stat-keyed cache, against the seed-style check again.
    capsules = sorted(
        path for path in (root / "export").iterdir() if path.is_dir() and path.name != ".partial"
    )
    reaudit, again = [], []
    for _ in range(args.repeats):
        again.append(measure(baseline)[0])
        started = time.perf_counter()
        for capsule in capsules:
            subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                 "--run", str(capsule), "--runaudit-root", str(root), "-m", "custody",
                 "--runaudit-report-format", "json"],
                cwd=root, env=CHILD_ENV, capture_output=True, check=True,
            )  # fmt: skip
        reaudit.append(time.perf_counter() - started)
    print("\n[cached re-audit: pytest --run=<id> -m custody per capsule, after verify]  median s")
    print(f"  baseline                      {statistics.median(again):8.2f}")
    print(f"  runaudit re-audit             {statistics.median(reaudit):8.2f}")
    print(
        f"  ratio re-audit/baseline       {statistics.median(reaudit) / statistics.median(again):8.2f}  "
        "(target <= 0.6)"
    )

    cache_root = base / "cache-boundary"
    shutil.rmtree(cache_root, ignore_errors=True)
    first = timed(lambda: hash_files(files, cache=HashCache(cache_root)))
    second = [timed(lambda: hash_files(files, cache=HashCache(cache_root))) for _ in range(args.repeats)]
    print("\n[second audit in the same trust boundary]")
    print(
        f"  first (fresh) {first:.3f} s, second (stat-keyed cache) {statistics.median(second):.4f} s, "
        f"ratio {statistics.median(second) / first:.4f}"
    )

    # The two targets of issue 15 that a checkpoint format and a tiny capsule decide, in the same run.
    compare_formats(args.formats_size_mib, args.repeats)
    fixed_cost(args.repeats)


if __name__ == "__main__":
    main()
