"""``python -m runaudit.examples.digits produce --root R --run-id ID``: train (resuming), evaluate, declare.

Seal the result with ``runaudit close ID --root R``.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

from runaudit.examples.digits.build import produce
from runaudit.examples.digits.train import DEFAULT_CONFIG
from runaudit.writer import WriterError


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m runaudit.examples.digits")
    parser.add_argument("verb", choices=["produce"])
    parser.add_argument("--root", type=Path, required=True, help="project root (active/, _trust/ ...)")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--epochs", type=int, default=DEFAULT_CONFIG["train"]["epochs"])
    parser.add_argument("--seed", type=int, default=DEFAULT_CONFIG["train"]["seed"])
    parser.add_argument("--throttle", type=float, default=0.0, help="seconds to sleep after each epoch")
    parser.add_argument("--zero-inputs", action="store_true", help="train on zeroed inputs (a broken model)")
    args = parser.parse_args()
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"].update(
        epochs=args.epochs, seed=args.seed, throttle_s=args.throttle, zero_inputs=args.zero_inputs
    )
    try:
        produce(args.root.resolve(), args.run_id, config, log=lambda line: print(line, flush=True))
    except WriterError as exc:
        print(f"digits: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
