"""The capsule writer (runaudit/writer.py): a plain training loop writes a capsule that seals and passes
custody; a crash resumes; bad use is one line and never a half-written capsule.

tests/byo/wine_loop.py is a researcher's plain PyTorch loop on scikit-learn's wine data, not one of the
examples; the lines that adopt the writer are marked ``# runaudit``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from runaudit.workspace import HEARTBEAT_FILE
from runaudit.writer import Dataset, Metric, RunWriter, Split, WriterError, open_run

LOOP = Path(__file__).parent / "byo" / "wine_loop.py"
MAX_ADDED_LINES = 15  # issue 18: a capsule from a plain loop in no more than 15 added lines


def _loop(root: Path, run_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LOOP), str(root), run_id, *args], capture_output=True, text=True, check=False
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runaudit", *args], capture_output=True, text=True, check=False
    )


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_adopting_the_writer_costs_at_most_fifteen_lines() -> None:
    code = [line for line in LOOP.read_text().splitlines() if not line.lstrip().startswith(("#", '"', "``"))]
    added = [line for line in code if line.rstrip().endswith("# runaudit")]
    changed = [line for line in code if "# was:" in line]
    assert 0 < len(added) + len(changed) <= MAX_ADDED_LINES, added + changed


@pytest.mark.slow
def test_a_plain_loop_crashes_resumes_seals_and_passes_every_custody_audit(tmp_path: Path) -> None:
    root = tmp_path / "project"
    crashed = _loop(root, "wine-s0", "--epochs", "5", "--crash-after", "3")
    assert crashed.returncode != 0 and "crashed after epoch 3" in crashed.stderr
    history = root / "active" / "wine-s0" / "train.csv"
    with history.open("a") as handle:  # a row past the last checkpoint, and one torn by the crash
        handle.write("4,40,0.5,0.9,false\n5,5")
    done = _loop(root, "wine-s0", "--epochs", "5", "--seal")
    assert done.returncode == 0, done.stderr[-2000:]
    sealed = root / "export" / "wine-s0"
    roster = tmp_path / "roster.txt"
    roster.write_text("wine-s0\n")
    listed = _cli("manifest", "--root", str(root), "--roster", str(roster), "--pull-id", "p1")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    verified = _cli("verify", "--root", str(root), "--pull-id", "p1")  # every custody audit, hashed fresh
    assert verified.returncode == 0, verified.stdout + verified.stderr

    rows = _rows(sealed / "train.csv")
    assert [int(row["epoch"]) for row in rows] == [1, 2, 3, 4, 5]
    assert [row["resume"] for row in rows] == ["false", "false", "false", "true", "false"]
    steps = [int(row["step"]) for row in rows]
    assert steps == sorted(steps) and len(set(steps)) == 5
    run = json.loads((sealed / "run.json").read_text())
    assert run["source"]["entrypoint"].endswith("wine_loop.py")  # the script, never its arguments
    assert "--seal" not in json.dumps(run)
    best = run["checkpoints"]["best"]
    logged = {int(row["epoch"]): float(row["val_accuracy"]) for row in rows}
    assert best["selection"]["value"] == max(logged.values()) == logged[best["epoch"]]


# -- bad use: one line, nothing half-written --------------------------------------------------------------


def _open(root: Path, run_id: str = "tiny", **changes: Any) -> RunWriter:
    options: dict[str, Any] = {
        "task": "classification",
        "config": {"lr": 0.1},
        "metrics": [Metric("accuracy"), Metric("loss", "lower")],
        "data": Dataset.of("toy", "1", np.arange(10)),
        "split": Split("toy-split", "random", 6, 2, 2),
        "seed": 0,
        "epochs": 2,
        "batch_size": 2,
    }
    return open_run(root, run_id, **{**options, **changes})


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[RunWriter]:
    run = _open(tmp_path / "project")
    yield run
    run.release()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def test_a_second_writer_is_refused_and_the_first_one_keeps_going(writer: RunWriter) -> None:
    with pytest.raises(WriterError, match="another process is writing"):
        _open(writer.root, "tiny", metrics=["accuracy"])
    writer.log(epoch=1, step=3, train_loss=0.5, val_accuracy=0.5)


def test_opening_and_every_row_touch_the_heartbeat_launch_waits_for(writer: RunWriter) -> None:
    beat = writer.folder / HEARTBEAT_FILE
    assert beat.is_file()
    os.utime(beat, (0, 0))
    writer.log(epoch=1, step=3, train_loss=0.5, val_accuracy=0.5)
    assert beat.stat().st_mtime > 0
    os.utime(beat, (0, 0))
    writer.heartbeat()
    assert beat.stat().st_mtime > 0


def test_a_fifo_in_place_of_the_heartbeat_never_hangs_training(tmp_path: Path) -> None:
    folder = tmp_path / "project" / "active" / "tiny"
    folder.mkdir(parents=True)
    os.mkfifo(folder / HEARTBEAT_FILE)  # opening it to write would wait for a reader forever
    run = _open(tmp_path / "project")
    run.log(epoch=1, step=3, train_loss=0.5, val_accuracy=0.5)  # the heartbeat is skipped, the row written
    run.release()
    assert (folder / "train.csv").read_text().count("\n") == 2


def test_reopening_with_another_config_is_refused(writer: RunWriter) -> None:
    writer.release()
    with pytest.raises(WriterError, match="another configuration"):
        _open(writer.root, "tiny", config={"lr": 0.2}, metrics=["accuracy"])


def test_a_second_best_without_a_metric_is_refused(writer: RunWriter) -> None:
    writer.checkpoint(_model(), epoch=1, step=3, best=True)
    with pytest.raises(WriterError, match="second best checkpoint without a metric"):
        writer.checkpoint(_model(), epoch=2, step=6, best=True)


def test_best_follows_the_declared_selection_and_must_match_the_logged_value(writer: RunWriter) -> None:
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    assert writer.checkpoint(_model(), epoch=1, step=3, value=0.5)
    writer.log(epoch=2, step=6, train_loss=0.8, val_accuracy=0.4, val_loss=0.9)
    assert not writer.checkpoint(_model(), epoch=2, step=6, value=0.4)
    assert writer.best is not None and writer.best.epoch == 1
    writer.log(epoch=3, step=9, train_loss=0.7, val_accuracy=0.7, val_loss=0.8)
    with pytest.raises(WriterError, match="differs from train.csv's val_accuracy"):
        writer.checkpoint(_model(), epoch=3, step=9, value=0.75)
    with pytest.raises(WriterError, match="columns were fixed by its first row"):
        writer.log(epoch=4, step=12, train_loss=0.6, val_top5=0.9)


def _scored_writer(writer: RunWriter) -> list[str]:
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    writer.checkpoint(_model(), epoch=1, step=3, value=0.5)
    return [f"s{index}" for index in range(4)]


def test_a_metric_without_per_item_values_is_refused(writer: RunWriter) -> None:
    ids = _scored_writer(writer)
    with (
        pytest.raises(WriterError, match="loss have no per-item values"),
        writer.test(sample_ids=ids) as test,
    ):
        test.score("clean", ids, accuracy=[1, 0, 1, 1])
    assert not (writer.folder / "test").exists() and not (writer.folder / ".staging-main").exists()


def test_a_finite_forward_with_a_non_finite_output_is_refused(writer: RunWriter) -> None:
    """``forward_finite`` is what the collapse probes trust to leave broken outputs out: a row claiming it
    over a NaN output is refused where it is written, not first at the audit."""
    ids = _scored_writer(writer)
    outputs = np.ones((4, 3), dtype=np.float32)
    outputs[2, 1] = np.nan
    with (
        pytest.raises(WriterError, match="forward_finite is true for an output holding NaN"),
        writer.test(sample_ids=ids) as test,
    ):
        test.score(
            "clean",
            ids,
            accuracy=[1, 0, 1, 1],
            loss=[0.1, 0.2, 0.3, 0.4],
            output=outputs,
            forward_finite=[True] * 4,
        )
    assert not (writer.folder / "test").exists()


def test_an_undeclared_role_or_unselected_sample_is_refused(writer: RunWriter) -> None:
    ids = _scored_writer(writer)
    with writer.test(sample_ids=ids, roles=["input"]) as test:
        test.score("clean", ids, accuracy=[1, 0, 1, 1], loss=[0.1, 0.2, 0.3, 0.4])
        with pytest.raises(WriterError, match="render role"):
            test.render("clean", ids[0], prediction=np.zeros((2, 2)))
        with pytest.raises(WriterError, match="not in selection"):
            test.render("clean", "s9", input=np.zeros((2, 2)))
        for sample_id in test.selected:
            test.render("clean", sample_id, input=np.zeros((2, 2)))
    metrics = json.loads((writer.folder / "test" / "main" / "metrics.json").read_text())
    assert {row["metric"]: row["value"] for row in metrics["metrics"]} == {"accuracy": 0.75, "loss": 0.25}


def test_missing_renders_leave_no_test_behind(writer: RunWriter) -> None:
    ids = _scored_writer(writer)
    with pytest.raises(WriterError, match="render\\(s\\) missing"), writer.test(sample_ids=ids) as test:
        test.score("clean", ids, accuracy=[1, 0, 1, 1], loss=[0.1, 0.2, 0.3, 0.4])
    assert not (writer.folder / "test").exists() and not (writer.folder / ".staging-main").exists()


def test_finishing_refuses_a_test_scored_with_an_older_best(writer: RunWriter) -> None:
    ids = _scored_writer(writer)
    with writer.test(sample_ids=ids) as test:
        test.score("clean", ids, accuracy=[1, 0, 1, 1], loss=[0.1, 0.2, 0.3, 0.4])
        for sample_id in test.selected:
            test.render("clean", sample_id, input=np.zeros((2, 2)), prediction=np.ones((2, 2, 3)))
    writer.log(epoch=2, step=6, train_loss=0.8, val_accuracy=0.9, val_loss=0.9)
    writer.checkpoint(torch.nn.Linear(3, 2), epoch=2, step=6, value=0.9)
    with pytest.raises(WriterError, match="scored with another checkpoint"):
        writer.finish()
    assert not (writer.folder / "run.json").exists()


@pytest.mark.slow
def test_a_safetensors_run_seals_with_its_lineage(writer: RunWriter) -> None:
    writer.release()
    run = _open(writer.root, "tiny-st", checkpoint_format="safetensors")
    model = _model()
    for epoch, accuracy in ((1, 0.5), (2, 0.25)):
        run.log(epoch=epoch, step=3 * epoch, train_loss=1.0 / epoch, val_accuracy=accuracy, val_loss=0.5)
        run.checkpoint(model, epoch=epoch, step=3 * epoch, value=accuracy)
    ids = [f"s{index}" for index in range(4)]
    with run.test(sample_ids=ids) as test:
        test.score(
            "clean",
            ids,
            accuracy=[1, 0, 1, 1],
            loss=[0.1, 0.2, 0.3, 0.4],
            target=[0, 1, 0, 0],
            pred=[0, 0, 0, 0],
        )
        for sample_id in test.selected:
            test.render("clean", sample_id, input=np.zeros((2, 2)), prediction=np.ones((2, 2, 3)))
    sealed = run.close()
    assert sorted(path.name for path in sealed.iterdir() if path.is_file()) == [
        "best.safetensors",
        "config.yaml",
        "last.safetensors",
        "run.json",
        "train.csv",
    ]
    declared = json.loads((sealed / "run.json").read_text())["checkpoints"]
    assert (declared["best"]["epoch"], declared["last"]["epoch"]) == (1, 2)
    assert len(declared["best"]["sha256"]) == 64


def test_tied_weights_save_as_safetensors_and_load_back(writer: RunWriter) -> None:
    writer.release()
    run = _open(writer.root, "tied", metrics=["accuracy"], checkpoint_format="safetensors", epochs=1)
    embedding = torch.nn.Embedding(4, 3)
    head = torch.nn.Linear(3, 4, bias=False)
    head.weight = embedding.weight  # tied, as language models tie input and output embeddings
    model = torch.nn.ModuleDict({"embed": embedding, "head": head})
    run.log(epoch=1, step=1, train_loss=1.0, val_accuracy=0.5)
    run.checkpoint(model, epoch=1, step=1, value=0.5)
    loaded = run.best_weights()
    assert torch.equal(loaded["embed.weight"], loaded["head.weight"])
    assert torch.equal(loaded["head.weight"], embedding.weight.detach())
    run.release()


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        (".writer-state.json", b"{torn", "unreadable"),
        (".writer-state.json", b'{"best": {"epoch": 1}}', "not the writer's"),
        # Hand-edited into other types, each was a Python traceback rather than one line.
        (
            ".writer-state.json",
            b'{"latest": {"epoch": "2", "step": "20"}}',
            "latest record is not the writer's",
        ),
        (".writer-state.json", b'{"staged": [["best.pth"]]}', "staged record is not the writer's"),
        (".writer-state.json", b'{"staged": "best.pth"}', "staged record is not the writer's"),
        (".writer-state.json", b'{"tests": [1, 2]}', "tests record is not the writer's"),
        (".writer-state.json", b'{"saves": 5}', "saves record is not the writer's"),
        (".writer-state.json", b'{"selections": "x"}', "selections record is not the writer's"),
        ("train.csv", b"epoch,step,train_loss\n\xff\xfe\n", "cannot be continued"),
    ],
)
def test_a_damaged_run_folder_is_one_line_when_reopened(
    writer: RunWriter, name: str, data: bytes, said: str
) -> None:
    writer.release()
    (writer.folder / name).write_bytes(data)
    with pytest.raises(WriterError, match=said):
        _open(writer.root)


@pytest.mark.parametrize("hostile", ["../outside", "a/b", ".hidden", ""])
def test_a_sample_id_that_would_name_a_path_is_refused(writer: RunWriter, hostile: str) -> None:
    ids = [*_scored_writer(writer)[:3], hostile]
    with pytest.raises(WriterError, match="not safe ids|non-empty"):
        writer.test(sample_ids=ids)
    assert not (writer.folder / "test").exists() and not (writer.folder.parent / "outside.png").exists()
    assert not any(writer.folder.glob(".staging-*"))


def test_a_run_id_that_names_the_hardware_capsules_folder_is_refused(tmp_path: Path) -> None:
    """A run named ``hardware`` was sealed as ``export/hardware``, where hardware capsules live: no pull could
    list it, and ``runaudit down`` took each of its files for a hardware capsule of its own."""
    with pytest.raises(WriterError, match="run id 'hardware' is reserved"):
        _open(tmp_path, "hardware")
    assert not (tmp_path / "active" / "hardware").exists()


def test_a_row_value_that_is_not_one_number_is_a_writer_error(writer: RunWriter) -> None:
    """A tensor of several elements raised torch's own error from ``.item()``, and an integer of 5,000 digits
    Python's own ValueError: the user's loop saw no word of which column or why."""
    for value, why in ((torch.ones(3), "an array of 3 elements"), (10**5000, "at most 20 digits")):
        with pytest.raises(WriterError, match=f"train.csv train_loss: .*{why}"):
            writer.log(epoch=1, step=3, train_loss=value, val_accuracy=0.5)
    writer.log(epoch=1, step=3, train_loss=torch.tensor(0.5), val_accuracy=0.5)  # one element: a number


# -- crashes and failed writes: the run resumes from one whole checkpoint ----------------------------------


def _epochs(run: RunWriter, through: int) -> None:
    for epoch in range(run.epoch + 1, through + 1):
        accuracy = 0.1 * epoch
        run.log(
            epoch=epoch, step=3 * epoch, train_loss=1 / epoch, val_accuracy=accuracy, val_loss=1 - accuracy
        )
        model = torch.nn.Linear(3, 2)
        with torch.no_grad():
            model.weight.fill_(epoch)
        run.checkpoint(model, epoch=epoch, step=3 * epoch, value=accuracy, state={"epoch_seen": epoch})


def _killed_in_checkpoint(root: Path, moment: str, **changes: Any) -> None:
    """Train 3 epochs in a child process SIGKILLed inside the third checkpoint, at ``moment``: its files
    staged but not committed, committed but not renamed, or renamed but the state not yet rewritten."""
    import signal

    child = os.fork()
    if child == 0:  # pragma: no cover - the child dies by SIGKILL
        save = RunWriter._save_state

        def dying(self: RunWriter, staged: Any = ()) -> None:
            third = self.latest is not None and self.latest.epoch == 3
            if third and ((moment == "staged" and staged) or (moment == "renamed" and not staged)):
                os.kill(os.getpid(), signal.SIGKILL)
            save(self, staged)
            if third and moment == "committed" and staged:
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            RunWriter._save_state = dying  # type: ignore[method-assign]
            _epochs(_open(root, **changes), 3)
        finally:
            os._exit(0)  # never back into the test runner: a child that was not killed fails the test
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize(
    ("moment", "format_", "epoch"),
    [
        ("staged", "torch", 2),
        ("committed", "torch", 3),
        ("renamed", "torch", 3),
        ("staged", "safetensors", 2),
        ("committed", "safetensors", 3),
    ],
)
def test_a_run_killed_inside_a_checkpoint_resumes_from_one_whole_checkpoint(
    tmp_path: Path, moment: str, format_: str, epoch: int
) -> None:
    """latest.pth, best and the writer's state were written one after the other: a kill between them
    resumed at epoch 2 with epoch 3's weights (an epoch trained twice, sealed and passed), or left a best
    that no state knew (the run could never be sealed)."""
    root = tmp_path / "project"
    _killed_in_checkpoint(root, moment, checkpoint_format=format_)
    run = _open(root, checkpoint_format=format_)
    saved = run.resume_state()
    assert saved is not None and run.epoch == saved["epoch"] == saved["epoch_seen"] == epoch
    assert float(saved["model"]["weight"][0, 0]) == epoch
    assert [int(row["epoch"]) for row in run.history.kept] == list(range(1, epoch + 1))
    assert run.best is not None and run.best.epoch == epoch
    assert float(run.best_weights()["weight"][0, 0]) == epoch
    assert not list(run.folder.glob(".*.staged"))
    _epochs(run, 4)
    assert run.epoch == 4 and [int(row["epoch"]) for row in _rows(run.folder / "train.csv")] == [1, 2, 3, 4]


def test_rows_logged_before_the_first_checkpoint_are_not_kept(writer: RunWriter) -> None:
    """A crash before the first checkpoint kept every row, and the resumed loop, starting at epoch 1, logged
    them again: train.csv sealed each step twice with different losses, and the audits passed."""
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    writer.release()
    run = _open(writer.root)
    assert run.epoch == 0 and run.history.kept == []
    run.log(epoch=1, step=3, train_loss=0.8, val_accuracy=0.5, val_loss=1.0)
    assert [row["train_loss"] for row in _rows(run.folder / "train.csv")] == ["0.8"]
    run.release()


def _score_and_finish(writer: RunWriter) -> None:
    """Score the test on the current best and finish the run."""
    ids = [f"s{index}" for index in range(4)]
    with writer.test(sample_ids=ids) as test:
        test.score("clean", ids, accuracy=[1, 0, 1, 1], loss=[0.1, 0.2, 0.3, 0.4])
        for sample_id in test.selected:
            test.render("clean", sample_id, input=np.zeros((2, 2)), prediction=np.ones((2, 2, 3)))
    writer.finish()


def test_a_finished_run_reopened_without_a_change_is_sealed_as_it_was(writer: RunWriter) -> None:
    """Opening cut train.csv to the last checkpoint's rows at once: a finished run whose last epoch had no
    checkpoint, reopened by a status script or a re-queued job, lost that row under a run.json counting it."""
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    writer.checkpoint(_model(), epoch=1, step=3, value=0.5)
    writer.log(epoch=2, step=6, train_loss=0.8, val_accuracy=0.4, val_loss=0.9)
    _score_and_finish(writer)
    before = (writer.folder / "train.csv").read_bytes()
    _open(writer.root).release()
    assert (writer.folder / "train.csv").read_bytes() == before and (writer.folder / "run.json").is_file()
    closed = _cli("close", "tiny", "--root", str(writer.root))
    assert closed.returncode == 0, closed.stdout + closed.stderr


def test_train_csv_counters_never_go_back(writer: RunWriter) -> None:
    writer.log(epoch=2, step=6, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    with pytest.raises(WriterError, match=r"train.csv: step 3 comes after step 6; .* never go back"):
        writer.log(epoch=2, step=3, train_loss=0.8, val_accuracy=0.5, val_loss=1.0)
    with pytest.raises(WriterError, match=r"train.csv: epoch 1 comes after epoch 2"):
        writer.log(epoch=1, step=9, train_loss=0.8, val_accuracy=0.5, val_loss=1.0)
    writer.log(epoch=2, step=6, train_loss=0.8, val_accuracy=0.6, val_loss=0.9)  # the same step again


def test_a_row_whose_write_fails_is_cut_off_and_named(tmp_path: Path) -> None:
    """A full disk (here a file size limit) tore a row, and the next row joined its torn end: ``44,40,...``
    was sealed as epoch 44, with a bare OSError naming no run or file."""
    import resource
    import signal

    root = tmp_path / "project"
    run = _open(root)
    run.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    before = (run.folder / "train.csv").read_bytes()
    reader, writer_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - reports through the pipe
        os.close(reader)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 8, len(before) + 8))
        try:
            run.log(epoch=2, step=6, train_loss=0.25, val_accuracy=0.7, val_loss=0.3)
            said = "written"
        except BaseException as exc:  # never back into the test runner
            said = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(writer_end, said.encode())
            os._exit(0)
    os.close(writer_end)
    with os.fdopen(reader, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(child, 0)
    assert said.startswith(
        f"WriterError: {run.folder / 'train.csv'}: the row of epoch 2, step 6 was not written"
    )
    assert (run.folder / "train.csv").read_bytes() == before
    run.log(epoch=2, step=6, train_loss=0.25, val_accuracy=0.7, val_loss=0.3)
    assert [row["epoch"] for row in _rows(run.folder / "train.csv")] == ["1", "2"]
    run.release()


def test_a_finished_run_reopened_withdraws_its_finish_at_the_first_change(writer: RunWriter) -> None:
    """A finished run reopened to train on, then killed before finishing again, was sealed by close with
    the first finish's run.json (2 epochs run) and last.pth over a train.csv of 4 epochs: the audits passed."""
    ids = _scored_writer(writer)
    with writer.test(sample_ids=ids) as test:
        test.score("clean", ids, accuracy=[1, 0, 1, 1], loss=[0.1, 0.2, 0.3, 0.4])
        for sample_id in test.selected:
            test.render("clean", sample_id, input=np.zeros((2, 2)), prediction=np.ones((2, 2, 3)))
    writer.finish()
    looked = _open(writer.root)  # reopened and let go without a change: still finished
    looked.release()
    assert (writer.folder / "run.json").is_file() and (writer.folder / "last.pth").is_file()
    run = _open(writer.root)
    run.log(epoch=2, step=6, train_loss=0.8, val_accuracy=0.4, val_loss=0.9)
    assert not (writer.folder / "run.json").exists() and not (writer.folder / "last.pth").exists()
    run.release()
    closed = _cli("close", "tiny", "--root", str(writer.root))
    assert closed.returncode != 0 and "run.json is missing" in closed.stderr


def test_checkpoint_state_a_resume_cannot_load_is_refused_at_the_first_checkpoint(writer: RunWriter) -> None:
    """numpy's RNG state saved at every epoch, and only the resume (or finish) met torch's multi-paragraph
    UnpicklingError, naming no run."""
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    with pytest.raises(WriterError, match=r"checkpoint state 'numpy_rng' holds a numpy.ndarray, which torch"):
        writer.checkpoint(_model(), epoch=1, step=3, value=0.5, state={"numpy_rng": np.random.get_state()})
    assert not (writer.folder / "latest.pth").exists()
    plain = {"rng": torch.get_rng_state(), "sizes": torch.Size([2, 3]), "order": [(1, "a")]}
    writer.checkpoint(_model(), epoch=1, step=3, value=0.5, state={"extra": plain})


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"metrics": [Metric("accuracy", "max")]}, "metric accuracy direction must be one of higher, lower"),  # type: ignore[arg-type]
        ({"metrics": ["accuracy", "accuracy"]}, "metrics named more than once: accuracy"),
        ({"config": Path("no-such-config.yaml")}, "config no-such-config.yaml cannot be read"),
        ({"epochs": "ten"}, "epochs must be an integer >= 0, found 'ten'"),
        ({"batch_size": 2.5}, "batch_size must be an integer >= 0, found 2.5"),
    ],
)
def test_careless_arguments_are_one_writer_error_line(
    tmp_path: Path, changes: dict[str, Any], said: str
) -> None:
    """Each of these passed the writer (a selection kept in the wrong direction, a capsule that fails its
    metrics schema forever) or ended in a traceback naming no run."""
    with pytest.raises(WriterError, match=re.escape(said)) as refused:
        _open(tmp_path / "project", **changes)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"epoch": "3", "step": 3, "value": 0.5}, "epoch must be an integer >= 0, found '3'"),
        ({"epoch": 1, "step": -1, "value": 0.5}, "step must be an integer >= 0, found -1"),
        ({"epoch": 1, "step": 3, "value": "n/a"}, "checkpoint value must be a number, found 'n/a'"),
    ],
)
def test_careless_checkpoint_arguments_are_one_writer_error_line(
    writer: RunWriter, arguments: dict[str, Any], said: str
) -> None:
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    with pytest.raises(WriterError, match=re.escape(said)):
        writer.checkpoint(_model(), **arguments)
    writer.checkpoint(_model(), epoch=np.int64(1), step=torch.tensor(3), value=torch.tensor(0.5))


def test_a_row_takes_the_counters_a_checkpoint_takes(writer: RunWriter) -> None:
    """log() refused numpy's and torch's integers, which checkpoint() takes, and had a check of its own."""
    writer.log(epoch=np.int64(1), step=torch.tensor(3), train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    writer.checkpoint(_model(), epoch=1, step=3, value=0.5)
    rows = (writer.folder / "train.csv").read_text().splitlines()
    assert rows[1].startswith("1,3,"), rows
    for epoch, said in (("2", "epoch must be an integer >= 0, found '2'"), (True, "found True")):
        with pytest.raises(WriterError, match=re.escape(said)):
            writer.log(epoch=epoch, step=6, train_loss=0.8, val_accuracy=0.6, val_loss=0.9)


def test_a_run_id_past_the_file_name_limit_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(WriterError, match=r"run a{300}: cannot create .*: File name too long"):
        _open(tmp_path / "project", "a" * 300)


def test_a_reopened_run_that_only_finishes_keeps_its_rows_past_the_last_checkpoint(writer: RunWriter) -> None:
    """The first change cut train.csv to the last checkpoint's rows even when it was finish() or a test: a
    run whose last, uncheckpointed epoch beat its best (close refused it) was re-finished without that row,
    sealed, and passed."""
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    writer.checkpoint(_model(), epoch=1, step=3, value=0.5)
    writer.log(epoch=2, step=6, train_loss=0.8, val_accuracy=0.9, val_loss=0.9)
    _score_and_finish(writer)
    _open(writer.root).finish()
    assert [row["epoch"] for row in _rows(writer.folder / "train.csv")] == ["1", "2"]
    training = json.loads((writer.folder / "run.json").read_text())["training"]
    assert training["epochs_run"] == 2 and training["steps_run"] == 6


def test_a_resume_point_that_is_gone_is_one_line_not_a_fresh_start(writer: RunWriter) -> None:
    """With latest.pth deleted (or a folder or FIFO in its place) restore() said "fresh run": the loop trained
    the remaining epochs on new weights and sealed a last.pth that lied, and the audits passed."""
    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    writer.checkpoint(_model(), epoch=1, step=3, value=0.5)
    writer.release()
    (writer.folder / "latest.pth").unlink()
    run = _open(writer.root)
    with pytest.raises(
        WriterError, match=r"names a checkpoint at epoch 1, but .*latest.pth is not a regular file"
    ):
        run.restore(_model())
    run.release()


def test_a_checkpoint_whose_commit_fails_leaves_the_writer_at_the_last_one(
    writer: RunWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk at the commit raised a bare OSError with the writer's memory already at the new best: the
    next checkpoint committed that best over the older best file, and the run could never be sealed."""
    import errno

    import runaudit.writer

    writer.log(epoch=1, step=3, train_loss=0.9, val_accuracy=0.5, val_loss=1.0)
    writer.checkpoint(_model(), epoch=1, step=3, value=0.5)
    writer.log(epoch=2, step=6, train_loss=0.8, val_accuracy=0.9, val_loss=0.9)
    write_json = runaudit.writer.write_json_atomic

    def full(path: Path, document: Any, **options: Any) -> Path:
        if document.get("staged"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_json(path, document, **options)

    monkeypatch.setattr(runaudit.writer, "write_json_atomic", full)
    with pytest.raises(
        WriterError, match=r"epoch 2, step 6 was not written \(No space left on device\); .* epoch 1"
    ):
        writer.checkpoint(_model(), epoch=2, step=6, value=0.9)
    assert writer.epoch == 1 and writer.best is not None and writer.best.epoch == 1
    monkeypatch.undo()
    writer.log(epoch=3, step=9, train_loss=0.7, val_accuracy=0.6, val_loss=0.8)
    assert writer.checkpoint(_model(), epoch=3, step=9, value=0.6)
    saved = torch.load(writer.folder / "best.pth", weights_only=True)
    assert writer.best.epoch == saved["epoch"] == 3 and saved["selection"]["value"] == 0.6
