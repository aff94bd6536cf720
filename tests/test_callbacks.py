"""The framework callbacks (runaudit.integrations), each with the real library on CPU and a tiny model.

Each framework gets a small user project written to a temporary folder as a user would write it: Lightning
trains an MLP on scikit-learn's wine, the Hugging Face Trainer a ``PreTrainedModel`` built from its config
on scikit-learn's digits (no hub download); beside it, the smoke adapter derived from the same objects
(README, "Lightning" and "Hugging Face Trainer"). Each run crashes once, resumes, is scored and sealed
through ``runaudit close``; ``runaudit manifest`` and ``runaudit verify`` prove the pull, and
``pytest --run=<export> -m "custody or smoke" -p <adapter>`` passes every custody audit and
``evaluation.fresh`` in a subprocess, as a user runs it. A misconfigured callback fails with one
``WriterError`` line and leaves no best checkpoint, ``run.json`` or export behind. The frameworks are
imported inside the tests, so collecting this file costs nothing.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from runaudit.integrations._common import release
from runaudit.usage import WriterError
from runaudit.writer import Dataset, Selection, Split, open_run

# Lightning 2.6 still uses torch's LeafSpec, which torch 2.13 deprecates; the suite's filterwarnings=error
# would turn that into failures that say nothing about runaudit. Lightning's PossibleUserWarnings are its
# advice about the user's setup (one fires wherever Slurm's srun is installed, as on CI for the Slurm test).
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"),
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
]

LIGHTNING_RUN, HF_RUN = "wine-lightning", "digits-hf"
CUSTODY_S = 300

# -- the users' projects, as files ---------------------------------------------------------------------------

WINE_PROJECT = '''
"""A Lightning project: a LightningModule on scikit-learn's wine."""
import lightning.pytorch as pl
import numpy as np
import torch
from sklearn.datasets import load_wine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def data():
    x, y = load_wine(return_X_y=True)
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(y))
    return x, y, {"train": order[:108], "val": order[108:143], "test": order[143:]}


def loader(rows, shuffle=False):
    x, y, _ = data()
    tensors = (torch.from_numpy(x[rows]), torch.from_numpy(y[rows]), torch.from_numpy(rows))
    return DataLoader(TensorDataset(*tensors), batch_size=16, shuffle=shuffle)


class WineModule(pl.LightningModule):
    def __init__(self, hidden=32, crash_at=0, val_name="val_accuracy"):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(13, hidden), nn.ReLU(), nn.Linear(hidden, 3))
        self.crash_at, self.val_name = crash_at, val_name

    def forward(self, inputs):
        return self.net(inputs)

    def training_step(self, batch, index):
        inputs, labels, _ = batch
        if self.crash_at and self.current_epoch + 1 == self.crash_at:
            raise RuntimeError(f"pre-empted in epoch {self.crash_at}")
        loss = nn.functional.cross_entropy(self(inputs), labels)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, index):
        inputs, labels, _ = batch
        logits = self(inputs)
        self.log(self.val_name, (logits.argmax(1) == labels).float().mean())
        self.log("val_loss", nn.functional.cross_entropy(logits, labels))

    def test_step(self, batch, index):
        inputs, labels, rows = batch
        logits = self(inputs)
        pred = logits.argmax(1)
        return {
            "sample_id": [f"wine-{row}" for row in rows.tolist()],
            "accuracy": pred == labels,
            "target": labels,
            "pred": pred,
            "output": logits,
            "render": {
                "input": (inputs[:, None, :] / 4 + 0.5).clamp(0, 1),
                "prediction": torch.eye(3)[pred][:, None, :],
            },
        }

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)}
'''

WINE_ADAPTER = '''
"""The smoke adapter of the wine project, derived from the same LightningModule."""
import pytest
import torch

import wine_project
from runaudit.adapter import Batch
from runaudit.integrations import checkpoint_weights


@pytest.fixture(scope="session")
def smoke_eval_model():
    def load(path, config):
        module = wine_project.WineModule(hidden=config["hidden"])
        module.load_state_dict(checkpoint_weights(path))
        return module.eval()

    return load


@pytest.fixture(scope="session")
def smoke_eval_inputs():
    def inputs(test_id, condition, sample_ids, config):
        x, y, _ = wine_project.data()
        rows = [int(sample_id.removeprefix("wine-")) for sample_id in sample_ids]
        return Batch(torch.from_numpy(x[rows]), torch.from_numpy(y[rows]))

    return inputs


@pytest.fixture(scope="session")
def smoke_predict():
    return lambda module, inputs: module(inputs)
'''

DIGITS_PROJECT = '''
"""A Hugging Face project: a PreTrainedModel built from its config, on scikit-learn's digits."""
import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


def data():
    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    return x, y, {"train": order[:600], "val": order[600:800], "test": order[800:1000]}


class Items(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.x, self.y, _ = data()
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        row = self.rows[index]
        return {"pixel_values": torch.from_numpy(self.x[row]), "labels": torch.tensor(self.y[row])}


class DigitsConfig(PretrainedConfig):
    model_type = "runaudit-digits"

    def __init__(self, hidden=32, **kwargs):
        super().__init__(**kwargs)
        self.hidden = hidden


class DigitsClassifier(PreTrainedModel):
    config_class = DigitsConfig
    base_model_prefix = "digits"

    def __init__(self, config):
        super().__init__(config)
        self.body = nn.Sequential(nn.Linear(64, config.hidden), nn.ReLU())
        self.head = nn.Linear(config.hidden, 10)
        self.post_init()

    def forward(self, pixel_values, labels=None):
        logits = self.head(self.body(pixel_values))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)
'''

DIGITS_ADAPTER = '''
"""The smoke adapter of the digits project, derived from the same model class and config."""
import pytest
import torch

import digits_project
from runaudit.adapter import Batch
from runaudit.integrations import checkpoint_weights


@pytest.fixture(scope="session")
def smoke_eval_model():
    def load(path, config):
        model = digits_project.DigitsClassifier(digits_project.DigitsConfig.from_dict(config))
        model.load_state_dict(checkpoint_weights(path))
        return model.eval()

    return load


@pytest.fixture(scope="session")
def smoke_eval_inputs():
    def inputs(test_id, condition, sample_ids, config):
        x, y, _ = digits_project.data()
        rows = [int(sample_id.removeprefix("digit-")) for sample_id in sample_ids]
        return Batch(torch.from_numpy(x[rows]), torch.from_numpy(y[rows]))

    return inputs


@pytest.fixture(scope="session")
def smoke_predict():
    return lambda model, inputs: model(pixel_values=inputs).logits
'''


def _project(tmp_path: Path, name: str, source: str, adapter: str) -> ModuleType:
    """Write the project and its adapter into ``tmp_path/src``, and import the project as its scripts do."""
    folder = tmp_path / "src"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}_project.py").write_text(textwrap.dedent(source))
    (folder / f"{name}_adapter.py").write_text(textwrap.dedent(adapter))
    spec = importlib.util.spec_from_file_location(f"{name}_project", folder / f"{name}_project.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert text and "\n" not in text, text
    return text


def _history(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _prove_custody(root: Path, run_id: str, tmp_path: Path, adapter: str) -> None:
    """``runaudit manifest`` + ``runaudit verify`` (the receipt), then the custody gate and the fresh
    re-evaluation through the project's adapter in a fresh pytest, as a user runs them."""
    roster = tmp_path / "roster.txt"
    roster.write_text(f"{run_id}\n")
    for verb in (
        ["manifest", "--root", str(root), "--roster", str(roster), "--pull-id", "p1"],
        ["verify", "--root", str(root), "--pull-id", "p1"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "runaudit", *verb],
            capture_output=True,
            text=True,
            timeout=CUSTODY_S,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    reports = tmp_path / "reports"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            adapter,
            f"--run={root / 'export' / run_id}",
            "--runaudit-root",
            str(root),
            "--runaudit-report-dir",
            str(reports),
            "--runaudit-report-format",
            "json",
            "-m",
            "custody or smoke",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=CUSTODY_S,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), *sys.path])},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = json.loads((reports / f"{run_id}.json").read_text())
    verdicts: dict[str, set[str]] = {}
    for item in report["verdicts"]:
        verdicts.setdefault(item["audit"], set()).add(item["verdict"])
    custody = {
        audit: found for audit, found in verdicts.items() if audit.startswith(("manifest.", "capsule."))
    }
    custody.update({audit: found for audit, found in verdicts.items() if audit.startswith("checkpoint.")})
    assert {"manifest.receipt", "manifest.sha256", "checkpoint.selection", "checkpoint.finite"} <= set(
        custody
    )
    assert all(found <= {"passed", "not_applicable"} for found in custody.values()), custody
    assert verdicts["evaluation.fresh"] == {"passed"}, report["verdicts"]


# -- Lightning ----------------------------------------------------------------------------------------------


def _lightning_fit(
    tmp_path: Path,
    root: Path,
    *,
    epochs: int,
    seal: bool = True,
    trainer_options: dict[str, Any] | None = None,
    capsule_options: dict[str, Any] | None = None,
    **module_options: Any,
) -> tuple[Any, Any, Any, Any]:
    import lightning.pytorch as pl
    import torch

    from runaudit.integrations.lightning import CapsuleCallback

    project = _project(tmp_path, "wine", WINE_PROJECT, WINE_ADAPTER)
    x, y, rows = project.data()
    torch.manual_seed(0)
    module = project.WineModule(hidden=32, **module_options)
    capsule = CapsuleCallback(
        root,
        LIGHTNING_RUN,
        task="classification",
        config={"lr": 0.01, "hidden": 32, "batch": 16},
        metrics=["accuracy"],
        data=Dataset.of("wine", "sklearn-1", x, y),
        split=Split("wine-s0", "random", 108, 35, 35),
        seed=0,
        batch_size=16,
        source_dir=tmp_path / "src",
        seal=seal,
        **(capsule_options or {}),
    )
    options = dict(trainer_options or {})
    trainer = pl.Trainer(
        max_epochs=options.pop("max_epochs", epochs),
        callbacks=[capsule, *options.pop("callbacks", ())],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
        **options,
    )
    trainer.fit(module, project.loader(rows["train"], True), project.loader(rows["val"]))
    return trainer, module, capsule, project.loader(rows["test"])


@pytest.mark.slow
def test_lightning_capsule_resumes_seals_and_passes_custody(tmp_path: Path) -> None:
    root = tmp_path / "project"
    with pytest.raises(RuntimeError, match="pre-empted in epoch 2"):
        _lightning_fit(tmp_path, root, epochs=2, crash_at=2)
    active = root / "active" / LIGHTNING_RUN
    assert [row["epoch"] for row in _history(active / "train.csv")] == ["1"]
    assert not (active / "run.json").exists()

    # The same script run again resumes the run (the crash let go of its folder): epoch 2 only.
    trainer, module, capsule, test_loader = _lightning_fit(tmp_path, root, epochs=2)
    assert trainer.current_epoch == 2 and trainer.global_step == 14
    resumed = _history(active / "train.csv")
    assert [(row["epoch"], row["step"], row["resume"]) for row in resumed] == [
        ("1", "7", "false"),
        ("2", "14", "true"),
    ]
    # Weights, optimizer, scheduler, loop progress and RNG came back: the resumed history is the
    # uninterrupted one, number for number.
    _, _, straight, _ = _lightning_fit(tmp_path, tmp_path / "straight", epochs=2, seal=False)
    release(straight.run)
    uninterrupted = _history(tmp_path / "straight" / "active" / LIGHTNING_RUN / "train.csv")
    assert [{**row, "resume": ""} for row in resumed] == [{**row, "resume": ""} for row in uninterrupted]
    assert [float(row["lr"]) for row in resumed] == [0.01, 0.005]  # StepLR went on where it stopped

    trainer.test(module, test_loader)
    sealed = root / "export" / LIGHTNING_RUN
    assert capsule.sealed == sealed
    assert sorted(path.name for path in sealed.iterdir()) == [
        "best.pth",
        "config.yaml",
        "last.pth",
        "run.json",
        "test",
        "train.csv",
    ]
    run = json.loads((sealed / "run.json").read_text())
    assert run["state"] == "closed" and run["training"]["epochs_run"] == 2
    assert run["checkpoints"]["best"]["selection"]["metric"] == "accuracy"
    metrics = json.loads((sealed / "test" / "main" / "metrics.json").read_text())
    assert metrics["n_test"] == 35 and metrics["metrics"][0]["metric"] == "accuracy"
    _prove_custody(root, LIGHTNING_RUN, tmp_path, "wine_adapter")


def test_lightning_records_the_batch_of_one_optimizer_step(tmp_path: Path) -> None:
    """With gradient accumulation, run.json's effective batch was the loader's (16), not what one optimizer
    step sees (16 x 4)."""
    _, _, capsule, _ = _lightning_fit(
        tmp_path, tmp_path / "project", epochs=1, seal=False, trainer_options={"accumulate_grad_batches": 4}
    )
    assert capsule.run.batch_size == 16 * 4
    release(capsule.run)


def test_lightning_records_the_batch_an_accumulation_scheduler_holds_and_refuses_one_that_changes(
    tmp_path: Path,
) -> None:
    """A GradientAccumulationScheduler sets the trainer's accumulation as each epoch starts: run.json
    recorded the loader's batch (16) where every step saw 16 x 3, and one that changes by epoch has no one
    batch size to record."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    steady = {"callbacks": [GradientAccumulationScheduler(scheduling={0: 3})]}
    _, _, capsule, _ = _lightning_fit(
        tmp_path, tmp_path / "steady", epochs=1, seal=False, trainer_options=steady
    )
    assert capsule.run.batch_size == 16 * 3
    release(capsule.run)

    changing = {"callbacks": [GradientAccumulationScheduler(scheduling={0: 2, 1: 4})]}
    root = tmp_path / "changing"
    with pytest.raises(WriterError) as caught:
        _lightning_fit(tmp_path, root, epochs=2, trainer_options=changing)
    message = _one_line(caught.value)
    assert "GradientAccumulationScheduler" in message and "2, 4" in message, message
    assert not (root / "active" / LIGHTNING_RUN / "latest.pth").exists()


@pytest.mark.parametrize("epochs", ["numpy-integer", "short-of-max-epochs"])
def test_lightning_refuses_a_schedule_that_changes_within_the_epochs_the_trainer_runs(
    tmp_path: Path, epochs: str
) -> None:
    """Attack round: both recorded the loader's batch (16) for a run whose second epoch stepped on 64: a
    numpy integer (open_run takes one) had the schedule looked at for epoch 0 only, and ``epochs=1`` under
    ``max_epochs=2`` for the first epoch only, while the trainer runs two."""
    import numpy as np
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    planned = np.int64(2) if epochs == "numpy-integer" else 1
    options = {"callbacks": [GradientAccumulationScheduler(scheduling={0: 1, 1: 4})]}
    with pytest.raises(WriterError, match="GradientAccumulationScheduler"):
        _lightning_fit(
            tmp_path, tmp_path / "p", epochs=2, trainer_options=options, capsule_options={"epochs": planned}
        )


def test_lightning_reads_a_schedule_at_its_own_epochs_under_a_step_bound(tmp_path: Path) -> None:
    """Attack round: ``max_epochs=10**9`` with ``max_steps``, the usual way to train by steps, made the
    callback ask the schedule about every epoch, minutes of CPU before the first step."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    options = {
        "callbacks": [GradientAccumulationScheduler(scheduling={0: 2})],
        "max_epochs": 10**9,
        "max_steps": 2,
    }
    _, _, capsule, _ = _lightning_fit(tmp_path, tmp_path / "p", epochs=1, seal=False, trainer_options=options)
    assert capsule.run.batch_size == 16 * 2
    release(capsule.run)


def test_lightning_misconfigured_selection_is_one_line_and_writes_no_capsule(tmp_path: Path) -> None:
    root = tmp_path / "project"
    with pytest.raises(WriterError) as caught:
        _lightning_fit(tmp_path, root, epochs=1, val_name="val_acc")
    message = _one_line(caught.value)
    assert "validation logged no val_accuracy" in message and "val_acc" in message
    active = root / "active" / LIGHTNING_RUN
    assert not any((active / name).exists() for name in ("best.pth", "latest.pth", "run.json"))
    assert not (root / "export").exists()
    # The failure let go of the folder: the run can be reopened (and fixed) at once.
    reopened = open_run(
        root,
        LIGHTNING_RUN,
        task="classification",
        config={"lr": 0.01, "hidden": 32, "batch": 16},
        metrics=["accuracy"],
        data=Dataset("wine", "sklearn-1", "0" * 64),
        split=Split("wine-s0", "random", 108, 35, 35),
        seed=0,
        epochs=1,
        batch_size=16,
    )
    assert not reopened.resumed
    release(reopened)


def test_lightning_callback_refuses_bad_use_in_one_line(tmp_path: Path) -> None:
    from runaudit.integrations.lightning import CapsuleCallback

    with pytest.raises(WriterError) as caught:
        CapsuleCallback(tmp_path, "r", task="classification", metrics=["accuracy"], tsk="typo")
    assert "unknown open_run option(s) tsk" in _one_line(caught.value)
    with pytest.raises(WriterError) as caught:
        CapsuleCallback(tmp_path, "r", task="classification", metrics=["accuracy"])
    assert "needs open_run's" in _one_line(caught.value) and "data" in str(caught.value)

    # A test_step returning something else than the documented dict.
    trainer, module, _, test_loader = _lightning_fit(tmp_path, tmp_path / "project", epochs=1)
    module.test_step = lambda batch, *rest: module(batch[0])
    with pytest.raises(WriterError) as caught:
        trainer.test(module, test_loader)
    assert "test_step must return a dict with sample_id" in _one_line(caught.value)
    assert not (tmp_path / "project" / "active" / LIGHTNING_RUN / "test").exists()

    # A debugging run would have sealed one step under the real run id, and passed.
    with pytest.raises(WriterError) as caught:
        _lightning_fit(tmp_path, tmp_path / "debug", epochs=1, trainer_options={"fast_dev_run": True})
    assert "fast_dev_run" in _one_line(caught.value)
    assert not (tmp_path / "debug" / "active" / LIGHTNING_RUN).exists()


# -- Hugging Face Trainer -----------------------------------------------------------------------------------


def _hf_trainer(
    tmp_path: Path,
    root: Path,
    *,
    crash_in_epoch: int = 0,
    metric: str = "accuracy",
    compute: str = "accuracy",
    save_total_limit: int | None = None,
    **options: Any,
) -> tuple[Any, Any, ModuleType]:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from runaudit.integrations.transformers import CapsuleCallback

    project = _project(tmp_path, "digits", DIGITS_PROJECT, DIGITS_ADAPTER)
    x, y, rows = project.data()

    class Preempted(TrainerCallback):
        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if crash_in_epoch and state.epoch is not None and state.epoch >= crash_in_epoch - 1 > 0:
                raise RuntimeError(f"pre-empted in epoch {crash_in_epoch}")

    def accuracy(prediction: Any) -> dict[str, float]:
        return {compute: float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}

    torch.manual_seed(0)
    config = project.DigitsConfig()
    capsule = CapsuleCallback(
        root,
        HF_RUN,
        task="classification",
        config=config.to_dict(),
        metrics=["accuracy"],
        data=Dataset.of("digits", "sklearn-1", x, y),
        split=Split("digits-s0", "random", 600, 200, 200),
        seed=0,
        source_dir=tmp_path / "src",
        **options,
    )
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        num_train_epochs=2,
        per_device_train_batch_size=32,
        learning_rate=1e-2,
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_strategy="epoch",
        metric_for_best_model=metric,
        save_total_limit=save_total_limit,
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=project.DigitsClassifier(config),
        args=args,
        train_dataset=project.Items(rows["train"]),
        eval_dataset=project.Items(rows["val"]),
        compute_metrics=accuracy,
        callbacks=[capsule, Preempted()],
    )
    return trainer, capsule, project


@pytest.mark.slow
def test_transformers_capsule_resumes_seals_safetensors_and_passes_custody(tmp_path: Path) -> None:
    root = tmp_path / "project"
    crashed, crashed_capsule, _ = _hf_trainer(tmp_path, root, crash_in_epoch=2)
    with pytest.raises(RuntimeError, match="pre-empted in epoch 2"):
        crashed.train()
    active = root / "active" / HF_RUN
    assert [row["epoch"] for row in _history(active / "train.csv")] == ["1"]
    assert crashed_capsule._run is not None  # the Trainer tells no callback about an exception

    # Resuming without the Trainer's checkpoint would repeat epoch 1 under the same run: refused, by a
    # new callback that took the run over from the crashed one (as a notebook's next cell would).
    trainer, _, _ = _hf_trainer(tmp_path, root)
    with pytest.raises(WriterError) as caught:
        trainer.train()
    assert "checkpoint-19" in _one_line(caught.value)
    assert crashed_capsule._run is None

    trainer, capsule, project = _hf_trainer(tmp_path, root)
    trainer.train(resume_from_checkpoint=True)
    history = _history(active / "train.csv")
    assert [(row["epoch"], row["step"], row["resume"]) for row in history] == [
        ("1", "19", "false"),
        ("2", "38", "true"),
    ]
    assert {"lr", "grad_norm", "val_accuracy", "val_loss"} <= set(history[0])
    assert not any(name.startswith("val_runtime") for name in history[0])

    from runaudit.integrations.transformers import score_test

    x, _, rows = project.data()

    def render(sample_id: str, condition: str) -> dict[str, Any]:
        image = x[int(sample_id.removeprefix("digit-"))].reshape(8, 8)
        return {"input": image, "prediction": image > 0.5}

    ids = [f"digit-{row}" for row in rows["test"]]
    sealed = score_test(trainer, project.Items(rows["test"]), sample_ids=ids, render=render)
    assert sealed == root / "export" / HF_RUN == capsule.sealed
    names = sorted(path.name for path in sealed.iterdir())
    assert names == ["best.safetensors", "config.yaml", "last.safetensors", "run.json", "test", "train.csv"]
    run = json.loads((sealed / "run.json").read_text())
    assert run["checkpoints"]["best"]["selection"] == {
        "metric": "accuracy",
        "split": "val",
        "mode": "max",
        "value": max(float(row["val_accuracy"]) for row in history),
    }
    assert run["training"]["effective_batch"] == 32 and run["training"]["epochs_planned"] == 2
    _prove_custody(root, HF_RUN, tmp_path, "digits_adapter")


def test_transformers_misconfigured_selection_is_one_line_and_writes_no_capsule(tmp_path: Path) -> None:
    root = tmp_path / "project"
    # metric_for_best_model names no protocol metric: refused before any step.
    trainer, _, _ = _hf_trainer(tmp_path, root, metric="loss")
    with pytest.raises(WriterError) as caught:
        trainer.train()
    assert "metric_for_best_model 'loss' is not a protocol metric (accuracy)" in _one_line(caught.value)
    assert not (root / "active" / HF_RUN).exists()

    # compute_metrics never returns the selection metric: refused at the first evaluation.
    trainer, _, _ = _hf_trainer(tmp_path, root, metric="accuracy", compute="acc")
    with pytest.raises(WriterError) as caught:
        trainer.train()
    assert "gave no eval_accuracy" in _one_line(caught.value)
    active = root / "active" / HF_RUN
    assert not any((active / name).exists() for name in ("best.safetensors", "latest.pth", "run.json"))
    assert not (root / "export").exists()

    # An explicit selection that contradicts the Trainer's is refused too.
    trainer, _, _ = _hf_trainer(tmp_path, tmp_path / "other", selection=Selection("accuracy", "min"))
    with pytest.raises(WriterError) as caught:
        trainer.train()
    assert "differs from the Trainer's metric_for_best_model" in _one_line(caught.value)

    # One checkpoint kept: the Trainer deletes the one a resume needs before the capsule commits the next
    # (a kill in between left the run unsealable for good); refused before any step.
    # With metric_for_best_model the best checkpoint keeps a place of its own: two are too few.
    for kept in (1, 2):
        trainer, _, _ = _hf_trainer(tmp_path, tmp_path / f"kept-{kept}", save_total_limit=kept)
        with pytest.raises(WriterError) as caught:
            trainer.train()
        assert f"save_total_limit is {kept}" in _one_line(caught.value) and ">= 3" in _one_line(caught.value)
        assert not (tmp_path / f"kept-{kept}" / "active" / HF_RUN).exists()


# -- without the frameworks -------------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "named"), [("lightning", "Lightning"), ("transformers", "transformers")])
def test_an_integration_without_its_framework_says_how_to_install_it(
    tmp_path: Path, module: str, named: str
) -> None:
    script = (
        "import sys\n"
        f"sys.modules[{module!r}] = None  # as if not installed\n"
        "import runaudit.integrations\n"
        f"import runaudit.integrations.{module}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert (
        last == f"ImportError: runaudit.integrations.{module} needs {named}: pip install 'runaudit[{module}]'"
    )
    assert "During handling" not in done.stderr  # no chained ModuleNotFoundError
