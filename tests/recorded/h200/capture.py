"""Capture, on a real NVIDIA H200, what the CPU-only test suite cannot make: nvidia-smi's answers to the
exact queries ``runaudit.gpu`` sends (idle, and under a training load with a memory hog beside it), and
checkpoints written from CUDA tensors by a real training loop (float32 and bfloat16, torch.save and
safetensors). Run once on the device machine: ``python3 tests/recorded/h200/capture.py OUT``; the files in
OUT are committed beside this script, byte for byte (README.md there says when and where).

It imports runaudit's nvidia-smi field lists and the demo's model by file path, not through the package:
the capture machine has torch but not runaudit's other dependencies.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[3]


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _smi(out: Path, name: str, *arguments: str) -> None:
    done = subprocess.run(["nvidia-smi", *arguments], capture_output=True, text=True, timeout=60)
    (out / name).write_text(done.stdout)
    if done.returncode or done.stderr:
        (out / f"{name}.stderr").write_text(f"exit {done.returncode}\n{done.stderr}")


def _capture(out: Path, state: str, gpu: ModuleType) -> None:
    _smi(out, f"h200-{state}-query-gpu.csv", f"--query-gpu={','.join(gpu.QUERY_FIELDS)}", "--format=csv")
    _smi(
        out,
        f"h200-{state}-compute-apps.csv",
        f"--query-compute-apps={','.join(gpu.APP_FIELDS)}",
        "--format=csv",
    )
    ps = subprocess.run(["ps", "-eo", "pid,stat,comm"], capture_output=True, text=True)
    (out / f"h200-{state}-ps.txt").write_text(ps.stdout)


def main(out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from sklearn.datasets import load_digits

    out.mkdir(parents=True, exist_ok=True)
    gpu = _module("capture_gpu", REPO / "runaudit" / "gpu.py")
    model_module = _module("capture_model", REPO / "examples" / "digits" / "model.py")
    _smi(out, "h200-version.txt", "--version")
    _capture(out, "idle", gpu)

    device = torch.device("cuda")
    torch.manual_seed(0)
    digits = load_digits()
    inputs = torch.tensor(digits.images, dtype=torch.float32, device=device)[:, None] / 16.0
    labels = torch.tensor(digits.target, dtype=torch.long, device=device)
    model = model_module.DigitsNet().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    hog = torch.empty(24 * 2**30, dtype=torch.uint8, device=device)  # a second holder of memory
    hog.fill_(1)
    started = time.perf_counter()
    steps = 0
    while time.perf_counter() - started < 20:  # long enough for nvidia-smi to see a busy card
        for batch in torch.randperm(len(labels), device=device).split(64):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(inputs[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
        if (
            steps > 200
            and time.perf_counter() - started > 10
            and not (out / "h200-load-query-gpu.csv").exists()
        ):
            torch.cuda.synchronize()
            _capture(out, "load", gpu)
    torch.cuda.synchronize()
    del hog
    with torch.no_grad():
        accuracy = float((model(inputs).argmax(1) == labels).float().mean())
    state = model.state_dict()  # CUDA tensors, saved as they are on a real box
    torch.save({"model": state, "step": steps}, out / "cuda-float32.pth")
    torch.save(
        {"model": {k: v.to(torch.bfloat16) for k, v in state.items()}, "step": steps},
        out / "cuda-bfloat16.pth",
    )
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "cuda-float32.safetensors"))
    properties = torch.cuda.get_device_properties(0)
    (out / "capture.json").write_text(
        json.dumps(
            {
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "device": properties.name,
                "steps": steps,
                "train_accuracy": accuracy,
                "tensors": {k: [str(v.dtype), list(v.shape), str(v.device)] for k, v in state.items()},
                "captured": time.strftime("%Y-%m-%d", time.gmtime()),
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
