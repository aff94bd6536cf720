"""``python -m runaudit.examples.digits produce --root R --run-id ID``: train (resuming), evaluate, declare.

Seal the result with ``runaudit close ID --root R``. A SIGTERM (a scheduler's warning, a spot notice)
stops it after the epoch in progress is checkpointed, with exit status 143; the same command resumes.
"""

from __future__ import annotations

import argparse
import copy
import math
import signal
import sys
from pathlib import Path

from runaudit.examples.digits.build import DEMO_ARM, DEMO_GROUP, produce
from runaudit.examples.digits.train import DEFAULT_CONFIG, STOP, Preempted
from runaudit.writer import WriterError

PREEMPTED_EXIT = 128 + signal.SIGTERM  # what a shell reports for a job that SIGTERM ended


def train_command(root: str, run_id: str, *, epochs: int, throttle_s: float = 0.0) -> list[str]:
    """The command line that trains (or resumes) the demo run ``run_id`` under ``root``, with this Python;
    ``root`` and ``run_id`` may be a scheduler's placeholders (``{root}``, ``{run_id}``)."""
    return [sys.executable, "-m", "runaudit.examples.digits", "produce", "--root", root, "--run-id", run_id,
            "--epochs", str(epochs), "--throttle", str(throttle_s)]  # fmt: skip


def _test_fraction(text: str) -> float:
    """A share of each class for the test split that leaves room for the validation split and training."""
    room = 1.0 - DEFAULT_CONFIG["data"]["val_fraction"]
    try:
        fraction = float(text)
    except ValueError:
        fraction = math.nan  # refused below, in the same words
    if not 0.0 < fraction < room:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and {room:g}, found {text}")
    return fraction


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m runaudit.examples.digits")
    parser.add_argument("verb", choices=["produce"])
    parser.add_argument("--root", type=Path, required=True, help="project root (active/, _trust/ ...)")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--epochs", type=int, default=DEFAULT_CONFIG["train"]["epochs"])
    parser.add_argument("--seed", type=int, default=DEFAULT_CONFIG["train"]["seed"])
    parser.add_argument("--throttle", type=float, default=0.0, help="seconds to sleep after each epoch")
    parser.add_argument("--zero-inputs", action="store_true", help="train on zeroed inputs (a broken model)")
    parser.add_argument("--arm", default=DEMO_ARM, help=f"the arm of group {DEMO_GROUP} it is a seed of")
    parser.add_argument(
        "--test-fraction",
        type=_test_fraction,
        default=DEFAULT_CONFIG["data"]["test_fraction"],
        help="share of each class held out as the test split (every run of one project must hold out the "
        "same: the split manifest is written once)",
    )
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        help="also log each row to trackers/tensorboard/ (needs tensorboard)",
    )
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="also log each row to a W&B offline run sealed under trackers/wandb/",
    )
    args = parser.parse_args()
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"].update(
        epochs=args.epochs, seed=args.seed, throttle_s=args.throttle, zero_inputs=args.zero_inputs
    )
    config["data"]["test_fraction"] = args.test_fraction
    if args.tensorboard:
        config["train"]["tensorboard"] = True
    if args.wandb:
        config["train"]["wandb"] = True
    signal.signal(signal.SIGTERM, lambda number, frame: STOP.set())
    try:
        produce(
            args.root.resolve(), args.run_id, config, arm=args.arm, log=lambda line: print(line, flush=True)
        )
    except WriterError as exc:
        print(f"digits: error: {exc}", file=sys.stderr)
        return 2
    except Preempted as exc:
        print(f"digits: {exc}", file=sys.stderr)
        return PREEMPTED_EXIT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
