"""The checkpoint gate on the same tensors saved twice, as ``best.pth`` and as ``best.safetensors``.

What the custody gate does with one checkpoint (``runaudit.checkpoints.inspect``: a safe load, every
tensor counted and scanned for NaN/inf), each in a fresh interpreter as a custody session pays it: the torch
path imports torch and ``torch.load(weights_only=True, mmap=True)``s the archive; the safetensors path
parses the header and reads the mapped buffer with numpy, without torch. Target (issue 15): safetensors
>= 3x faster at 300 MiB. Also: the fixed cost of a custody session on the smallest capsule against
``python -c "import torch"`` plus a bare pytest session (target: within 1.3x), and what the torch path's
check of every record's CRC-32 costs.

    python benchmarks/bench_checkpoint_formats.py [--size-mib 300] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INSPECT = r"""
import sys
from pathlib import Path
from runaudit.checkpoints import inspect
found = inspect(Path(sys.argv[1]))
assert found.tensors and not found.nonfinite, found
print("torch" in sys.modules)
"""
# The same, with the CRC-32 pass over every record left out: what checking the CRCs torch wrote costs.
INSPECT_WITHOUT_CRC = INSPECT.replace(
    "from runaudit.checkpoints import inspect\n",
    "from runaudit.checkpoints import inspect\nimport runaudit.checkpoints\n"
    "runaudit.checkpoints._record_not_as_written = lambda handle, archive: None\n",
)


# Every child runs as an installed harness does: pip compiled its bytecode at install, and pytest caches
# the audit modules it rewrites. PYTHONDONTWRITEBYTECODE (set on some build machines) would make each
# session recompile both, a cost no user of a pip install pays; both sides run without it.
CHILD_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def wall(command: list[str], cwd: Path | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=cwd, env=CHILD_ENV)
    return time.perf_counter() - started, done.stdout


def write_checkpoints(folder: Path, size_mib: int) -> tuple[Path, Path]:
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    per_tensor = 4 * 2**20  # 4 MiB float32 tensors, as a transformer's blocks hold
    weights = {
        f"block{index}.weight": torch.randn(per_tensor // 4 // 1024, 1024)
        for index in range(max(1, size_mib * 2**20 // per_tensor))
    }
    pth, safetensors = folder / "best.pth", folder / "best.safetensors"
    torch.save({"model": weights, "epoch": 1, "step": 1}, pth)
    save_file(weights, str(safetensors), metadata={"epoch": "1", "step": "1"})
    return pth, safetensors


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    compare_formats(args.size_mib, args.repeats)
    fixed_cost(args.repeats)


def compare_formats(size_mib: int, repeats: int) -> None:
    """The checkpoint gate on ``best.pth`` (torch) against ``best.safetensors`` (numpy), same tensors."""
    with tempfile.TemporaryDirectory(prefix="runaudit-bench-formats-") as scratch:
        pth, safetensors = write_checkpoints(Path(scratch), size_mib)
        runs = (
            ("best.pth (torch)", INSPECT, pth),
            ("best.pth, no CRC-32 pass", INSPECT_WITHOUT_CRC, pth),
            ("best.safetensors", INSPECT, safetensors),
        )
        timings: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        imported: dict[str, str] = {}
        for _ in range(repeats):  # interleaved, so that a noisy neighbour hits all alike
            for name, program, path in runs:
                seconds, said = wall([sys.executable, "-c", program, str(path)])
                timings[name].append(seconds)
                imported[name] = said.strip()
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(f"\n[one checkpoint, {size_mib} MiB, fresh interpreter each]  median s   torch imported")
    for name, seconds in medians.items():
        print(f"  {name:<28} {seconds:8.3f}   {imported[name]}")
    ratio = medians["best.pth (torch)"] / medians["best.safetensors"]
    print(f"  safetensors vs torch path     {ratio:8.2f}x  (target >= 3x)")
    crc = medians["best.pth (torch)"] / medians["best.pth, no CRC-32 pass"]
    print(f"  torch path, with vs without its CRC-32 pass {crc:6.2f}x")


def fixed_cost(repeats: int) -> None:
    """A custody session on the smallest sealed capsule against ``import torch`` plus a bare pytest."""
    with tempfile.TemporaryDirectory(prefix="runaudit-bench-fixed-") as scratch:
        folder = Path(scratch)
        fixed: dict[str, list[float]] = {
            "import torch + bare pytest": [],
            "custody session, tiny capsule": [],
        }
        bare = folder / "bare"
        bare.mkdir()
        (bare / "test_one.py").write_text("def test_one():\n    pass\n")
        tiny = tiny_capsule(folder / "tiny")
        for _ in range(repeats):
            torch_import, _ = wall([sys.executable, "-c", "import torch"])
            pytest_bare, _ = wall(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-c",
                    "/dev/null",
                    str(bare),
                ],
                cwd=bare,
            )
            fixed["import torch + bare pytest"].append(torch_import + pytest_bare)
            session, _ = wall(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null", "--run",
                 str(tiny / "export" / "tiny"), "--runaudit-root", str(tiny), "-m", "custody",
                 "--runaudit-report-format", "json"],
                cwd=tiny,
            )  # fmt: skip
            fixed["custody session, tiny capsule"].append(session)
    medians = {name: statistics.median(values) for name, values in fixed.items()}
    print("\n[fixed cost of a custody session]  median s")
    for name, seconds in medians.items():
        print(f"  {name:<34} {seconds:8.3f}")
    ratio = medians["custody session, tiny capsule"] / medians["import torch + bare pytest"]
    print(f"  session vs torch + bare pytest     {ratio:8.2f}x  (target <= 1.3x)")


def tiny_capsule(root: Path) -> Path:
    """The smallest capsule the writer seals: one epoch of a 3x2 linear model, four test items."""
    import numpy as np
    import torch

    from runaudit.writer import Dataset, Metric, Split, open_run

    run = open_run(
        root, "tiny", task="classification", config={"lr": 0.1}, metrics=[Metric("accuracy")],
        data=Dataset.of("toy", "1", np.arange(10)), split=Split("toy", "random", 6, 2, 2), seed=0, epochs=1,
        batch_size=2, source_dir=root,
    )  # fmt: skip
    run.log(epoch=1, step=1, train_loss=1.0, val_accuracy=0.5)
    run.checkpoint(torch.nn.Linear(3, 2), epoch=1, step=1, value=0.5)
    ids = ["a", "b", "c", "d"]
    with run.test(sample_ids=ids) as test:
        test.score("clean", ids, accuracy=[1, 0, 1, 1])
        for sample_id in test.selected:
            test.render("clean", sample_id, input=np.zeros((2, 2)), prediction=np.ones((2, 2)))
    run.close()
    subprocess.run(
        [sys.executable, "-m", "runaudit", "manifest", "--root", str(root), "--roster", str(roster(root)),
         "--pull-id", "tiny"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "runaudit", "verify", "--root", str(root), "--pull-id", "tiny"],
        check=True,
        capture_output=True,
    )
    return root


def roster(root: Path) -> Path:
    path = root / "roster.txt"
    path.write_text("tiny\n")
    return path


if __name__ == "__main__":
    main()
