"""``python -m runaudit.examples.denoise --workdir DIR [--epochs N]``: train (resuming), then score.

Prints the test PSNR of the denoised digits next to the PSNR of the noisy input they started from.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

from runaudit.examples.denoise.evaluate import mean_psnr, noisy_inputs, psnr
from runaudit.examples.denoise.train import DEFAULT_CONFIG, clean_images, fit


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m runaudit.examples.denoise")
    parser.add_argument("--workdir", type=Path, required=True, help="where latest.pth lives (resumed from)")
    parser.add_argument("--epochs", type=int, default=DEFAULT_CONFIG["train"]["epochs"])
    args = parser.parse_args()
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"]["epochs"] = args.epochs
    trainer = fit(args.workdir, config, log=lambda line: print(line, flush=True))
    test = clean_images(config)["test"]
    seed = config["eval"]["noise_seed"]
    for condition, sigma in config["eval"]["sigmas"].items():
        before = psnr(noisy_inputs(test, sigma, seed=seed), test).mean().item()
        after = mean_psnr(trainer.model, test, sigma, seed=seed)
        print(f"test {condition} (sigma {sigma}): noisy input {before:.2f} dB -> denoised {after:.2f} dB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
