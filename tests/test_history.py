"""History audits on the demo's real train.csv, each seeded with one defect: only that audit discloses."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from science_support import copy_capsule, digits, edit_config, edit_csv, edit_json, verdict

HISTORY = ("-m", "science", "-k", "test_history")
Rows = list[dict[str, str]]


@functools.cache
def bce_with_scaled_targets(epochs: int) -> list[float]:
    """Per-epoch mean loss of the demo CNN trained with BCE whose one-hot targets were scaled ×5.

    Scaling targets to "weight" a loss is a real bug: BCE is bounded below by 0 only for targets in [0, 1].
    """
    import torch
    from torch import nn

    from runaudit.examples.digits.model import build
    from runaudit.examples.digits.train import DEFAULT_CONFIG

    torch.manual_seed(0)
    data = digits()
    inputs = torch.from_numpy(data.inputs(np.arange(256)))
    targets = nn.functional.one_hot(torch.from_numpy(data.labels[:256]), 10).float() * 5.0
    model = build(DEFAULT_CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(epochs):
        batch_losses = []
        for start in range(0, 256, 64):
            optimizer.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(
                model(inputs[start : start + 64]), targets[start : start + 64]
            )
            loss.backward()
            optimizer.step()
            batch_losses.append(loss.item())
        losses.append(float(np.mean(batch_losses)))
    return losses


def _set(column: str, epoch: int, value: Callable[[float], float] | str) -> Callable[[Rows], None]:
    def change(rows: Rows) -> None:
        row = rows[epoch - 1]
        row[column] = value if isinstance(value, str) else repr(value(float(row[column])))

    return change


def _negative_loss(rows: Rows) -> None:
    for row, loss in zip(rows, bce_with_scaled_targets(len(rows)), strict=True):
        row["train_loss"] = repr(loss)


def _counter_reset(rows: Rows) -> None:
    """Resumed after epoch 12 from model weights only: the counters restart at epoch 1, step 17."""
    for number, row in enumerate(rows[12:], start=1):
        row["epoch"], row["step"] = str(number), str(17 * number)
    rows[12]["resume"] = "True"


def _constant_lr(rows: Rows) -> None:
    for row in rows:
        row["lr"] = "0.003"  # the config scalar logged instead of the scheduler's value


def _warmup_replayed(rows: Rows) -> None:
    """Resumed after epoch 12 without the scheduler state: the cosine schedule starts over."""
    for row, original in zip(rows[12:], rows[: len(rows) - 12], strict=True):
        row["lr"] = original["lr"]
    rows[12]["resume"] = "True"


CASES: dict[str, tuple[str, Callable[[Rows], None] | None, Callable[[dict[str, Any]], None] | None]] = {
    "nan": ("history.finite", _set("val_cross_entropy", 7, "nan"), None),
    "loss-spike": ("history.loss_spikes", _set("train_loss", 12, lambda value: value * 50), None),
    "negative-bce-loss": ("history.loss_bound", _negative_loss, None),
    "epoch-reset-after-resume": ("history.counters", _counter_reset, None),
    "constant-lr-under-cosine": ("history.lr_schedule", _constant_lr, None),
    "schedule-replayed-after-resume": ("history.lr_schedule", _warmup_replayed, None),
    "best-at-first-epoch": ("history.best_at_first_epoch", _set("val_accuracy", 1, "0.999"), None),
    "grad-spike": ("history.grad_spikes", _set("grad_norm", 15, lambda value: value * 40), None),
    "early-finish": ("history.early_finish", None, lambda run: run["training"].update(epochs_planned=40)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_seeded_defect_is_disclosed_by_its_own_audit(
    run_audits, project: Path, capsule_dir: Path, case: str
) -> None:
    audit, history_change, run_change = CASES[case]
    if history_change is not None:
        edit_csv(capsule_dir / "train.csv", history_change)
    if run_change is not None:
        edit_json(capsule_dir / "run.json", run_change)
    outcome = run_audits(capsule_dir, project, *HISTORY)
    disclosed = {item for item in outcome.verdicts("disclosed") if item.startswith("history.")}
    assert disclosed == {audit}, {
        item["audit"]: item["message"] for item in outcome.report["verdicts"] if item["audit"] in disclosed
    }
    found = verdict(outcome, audit)
    assert found["message"].startswith("run demo: ")
    assert "run:training" in found["affects"] or "run:checkpoint_selection" in found["affects"]
    assert found["evidence"]["epochs"], found["evidence"]
    assert outcome.result.ret == 0


def test_the_negative_loss_is_real_and_named(run_audits, project: Path, capsule_dir: Path) -> None:
    edit_csv(capsule_dir / "train.csv", _negative_loss)
    found = verdict(run_audits(capsule_dir, project, *HISTORY), "history.loss_bound")
    assert found["evidence"]["column"] == "train_loss"
    minimum = found["evidence"]["findings"]["train_loss"]["minimum"]
    assert minimum < -1 and math.isfinite(minimum)
    assert "goes negative" in found["message"]


def test_a_missing_recognised_column_makes_its_audit_not_run(
    run_audits, project: Path, capsule_dir: Path
) -> None:
    def drop(rows: Rows) -> None:
        for row in rows:
            row["grad_norm"] = ""
            row["lr"] = ""

    edit_csv(capsule_dir / "train.csv", drop)
    outcome = run_audits(capsule_dir, project, *HISTORY)
    for audit, column in (("history.grad_spikes", "grad_norm"), ("history.lr_schedule", "lr")):
        found = verdict(outcome, audit)
        assert found["verdict"] == "not_run" and f"does not log {column}" in found["message"]


def test_stale_repeat_against_siblings(run_audits, project: Path, capsule_dir: Path) -> None:
    stale = copy_capsule(capsule_dir, project / "export" / "demo-seed1")
    edit_json(
        stale / "run.json", lambda run: (run.update(run_id="demo-seed1"), run["seed"].update(values=[1]))
    )
    edit_config(stale, lambda config: config["train"].update(seed=1))
    rerun = copy_capsule(capsule_dir, project / "export" / "demo-rerun")
    edit_json(rerun / "run.json", lambda run: run.update(run_id="demo-rerun"))

    outcome = run_audits(capsule_dir, project, *HISTORY)
    repeat = verdict(outcome, "history.stale_repeat", "demo-seed1")
    assert repeat["verdict"] == "disclosed"
    assert (
        "byte-identical to sibling demo-seed1" in repeat["message"]
        and repeat["evidence"]["column"] == "train_loss"
    )
    rerun_verdict = verdict(outcome, "history.stale_repeat", "demo-rerun")
    assert rerun_verdict["verdict"] == "passed" and "deterministic rerun" in rerun_verdict["message"]


def _robust_z_by_rows(values: np.ndarray) -> np.ndarray:
    """HIS-05's robust z as its docstring defines it, one row at a time."""
    from runaudit.audits.test_history import GRAD_MIN_WINDOW, GRAD_WINDOW, MAD_TO_SD

    scores = np.full(len(values), np.nan)
    for index in range(GRAD_MIN_WINDOW, len(values)):
        window = values[max(0, index - GRAD_WINDOW) : index]
        median = np.median(window)
        spread = MAD_TO_SD * np.median(np.abs(window - median))
        scores[index] = (values[index] - median) / max(spread, 0.01 * abs(median), 1e-12)
    return scores


def test_the_windowed_spike_statistics_are_those_of_each_row_alone() -> None:
    """The grad and loss spike audits take their trailing windows at once (a million-row per-step log took
    seconds per audit row by row); on short, nan- and inf-holding series they agree with the definition."""
    from runaudit.audits.test_history import SPIKE_WINDOW, _robust_z, _trailing_medians

    rng = np.random.default_rng(0)
    for trial in range(200):
        values = rng.lognormal(0, 1.5, int(rng.integers(0, 40)))
        if values.size and trial % 3 == 0:
            values[rng.integers(0, values.size, 3)] = np.nan
        if values.size and trial % 5 == 0:
            values[rng.integers(0, values.size, 2)] = np.inf
        assert np.allclose(_robust_z(values), _robust_z_by_rows(values), rtol=1e-12, atol=0, equal_nan=True)
        medians = _trailing_medians(values, SPIKE_WINDOW, 1)
        by_rows = [np.median(values[max(0, index - SPIKE_WINDOW) : index]) for index in range(1, values.size)]
        assert np.allclose(medians[1:], by_rows, rtol=0, atol=0, equal_nan=True)


def test_a_counter_float64_cannot_hold_exactly_breaks_the_contract() -> None:
    """Steps near 1e17 one apart parse to the same float64: a decreasing step passed ``history.counters``
    ("never decrease") while ``capsule.train_csv`` accepted the 18-digit cells."""
    from runaudit.history import contract_problems

    header = ["epoch", "step", "train_loss"]
    exact = [["0", "999999999999998", "0.5"], ["0", "999999999999999", "0.4"]]  # 15 digits: exact in float64
    assert contract_problems(header, exact) == []
    big = [["0", "100000000000000001", "0.5"], ["0", "100000000000000000", "0.4"]]
    assert float(big[0][1]) == float(big[1][1])  # why: the decrease is invisible once parsed
    problems = contract_problems(header, big)
    assert problems == [
        "line 2: step='100000000000000001' is not an integer counter",
        "line 3: step='100000000000000000' is not an integer counter",
    ]


def test_a_byte_order_mark_before_the_header_is_no_part_of_the_first_column(
    capsule_dir: Path, project: Path, run_audits: Callable[..., Any]
) -> None:
    """A spreadsheet's UTF-8 byte-order mark made the first column "\\ufeffepoch": train.csv "lacked" epoch."""
    path = capsule_dir / "train.csv"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    outcome = run_audits(capsule_dir, project, "-k", "train_csv or counters")
    assert {item["verdict"] for item in outcome.find("capsule.train_csv")} == {"passed"}
    assert {item["verdict"] for item in outcome.find("history.counters")} == {"passed"}


def test_train_csv_lines_end_any_way_and_are_bounded_before_they_are_kept() -> None:
    """A file saved with lone carriage returns (classic Mac line ends) failed with the csv module's own
    advice; the report's curves read a byte-order mark as part of ``epoch``; a line of a million columns
    or 64 MiB of blank lines was kept whole, one list per line, for minutes and gigabytes."""
    from runaudit.reader import CSV_FIELDS_CAP, CSV_LINES_CAP, csv_lines

    rows = [["epoch", "step", "train_loss"], ["0", "1", "2.5"], ["1", "2", "2.0"]]
    for ending in ("\n", "\r\n", "\r"):
        data = "\ufeff" + ending.join(",".join(row) for row in rows) + ending
        assert csv_lines(data.encode()) == rows, repr(ending)
    with pytest.raises(ValueError, match=f"line 1 has {CSV_FIELDS_CAP + 1:,} fields"):
        csv_lines(",".join(["x"] * (CSV_FIELDS_CAP + 1)).encode())
    assert len(csv_lines(b"epoch\n" + b"\n" * (CSV_LINES_CAP - 1))) == CSV_LINES_CAP
    with pytest.raises(ValueError, match=f"more than {CSV_LINES_CAP:,} lines"):
        csv_lines(b"epoch\n" + b"\n" * CSV_LINES_CAP)


def test_train_csv_cells_are_bounded_across_lines() -> None:
    """256,000 lines of 1,023 commas (1,024 empty fields each, at the per-line cap) stayed under the file's
    size cap and were kept one 8 KiB list per line: 3.7 GB from a 250 MB file. The cells of all lines
    together are bounded too."""
    from runaudit.reader import CSV_CELLS_CAP, CSV_FIELDS_CAP, csv_lines

    line = b"," * (CSV_FIELDS_CAP - 1) + b"\n"
    lines = CSV_CELLS_CAP // CSV_FIELDS_CAP
    assert len(csv_lines(line * lines)) == lines
    with pytest.raises(ValueError, match=f"more than {CSV_CELLS_CAP:,} fields"):
        csv_lines(line * (lines + 1))


def test_a_train_csv_refused_once_is_not_parsed_again_by_each_audit(
    project: Path, capsule_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 MiB of blank lines after the rows: each of the ten history audits parsed the file up to the line
    cap again (~1 s each), since a refusal was not kept. The same bytes refuse the same way, once."""
    from runaudit import reader as reading
    from runaudit.history import load_history
    from runaudit.reader import CapsuleReader, Unavailable
    from runaudit.resolve import Location, Root
    from runaudit.run import Run

    with (capsule_dir / "train.csv").open("ab") as handle:
        handle.write(b"\n" * (reading.CSV_LINES_CAP + 1))
    parses = []
    parse = reading.csv_lines
    monkeypatch.setattr(reading, "csv_lines", lambda data: parses.append(len(data)) or parse(data))
    capsule = CapsuleReader(Run.load(Location(capsule_dir, Root(project, "--root"), "export")))
    refusals = []
    for read in (
        lambda: capsule.csv_rows("train.csv"),
        lambda: load_history(capsule),
        lambda: load_history(capsule),
    ):
        with pytest.raises(Unavailable) as refused:
            read()
        refusals.append(refused.value)
    assert len(parses) == 1
    assert {(str(item), item.owner) for item in refusals} == {
        (f"train.csv is not readable CSV (more than {reading.CSV_LINES_CAP:,} lines)", "capsule.train_csv")
    }
    assert (
        len({id(item) for item in refusals}) == 3
    )  # a fresh exception each: no traceback grows across audits


def test_a_refusal_the_system_gave_is_not_kept_for_the_file_s_own_audit(
    project: Path, capsule_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Too many open files (or a stale NFS handle) while another audit read config.yaml first: kept as the
    file's outcome, it failed the file's own custody audit, which read it fine a moment later."""
    import errno

    from runaudit import reader as reading
    from runaudit.reader import CapsuleReader, Unavailable
    from runaudit.resolve import Location, Root
    from runaudit.run import Run

    read = reading.read_regular
    failures = [OSError(errno.EMFILE, "Too many open files")]

    def once_busy(path: Path, cap: int) -> bytes:
        if failures:
            raise failures.pop()
        return read(path, cap)

    monkeypatch.setattr(reading, "read_regular", once_busy)
    capsule = CapsuleReader(Run.load(Location(capsule_dir, Root(project, "--root"), "export")))
    with pytest.raises(Unavailable, match="Too many open files"):
        capsule.bytes("config.yaml")
    assert capsule.bytes("config.yaml") == (capsule_dir / "config.yaml").read_bytes()
