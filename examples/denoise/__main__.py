"""``python -m runaudit.examples.denoise --root R --run-id ID [--epochs N]``: train (resuming), score,
declare ``R/active/ID`` through the capsule writer, and print the test PSNR of the denoised digits next to
that of the noisy input they started from. Seal it with ``runaudit close ID --root R``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from runaudit.examples.denoise.build import TEST_ID, produce
from runaudit.examples.denoise.evaluate import noisy_inputs, psnr
from runaudit.examples.denoise.train import DEFAULT_CONFIG, clean_images
from runaudit.writer import WriterError


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m runaudit.examples.denoise")
    parser.add_argument("--root", type=Path, required=True, help="project root (active/, _trust/ ...)")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--epochs", type=int, default=DEFAULT_CONFIG["train"]["epochs"])
    args = parser.parse_args()
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"]["epochs"] = args.epochs
    try:
        folder = produce(args.root.resolve(), args.run_id, config, log=lambda line: print(line, flush=True))
    except WriterError as exc:
        print(f"denoise: error: {exc}", file=sys.stderr)
        return 2
    test = clean_images(config)["test"]
    scored = json.loads((folder / "test" / TEST_ID / "metrics.json").read_text(encoding="utf-8"))
    for row in scored["metrics"]:
        sigma = config["eval"]["sigmas"][row["condition_id"]]
        before = psnr(noisy_inputs(test, sigma, seed=config["eval"]["noise_seed"]), test).mean().item()
        print(
            f"test {row['condition_id']} (sigma {sigma}): noisy input {before:.2f} dB -> denoised {row['value']} dB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
