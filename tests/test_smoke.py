"""The smoke gate run as users run it: a small adapter module written into the pytester folder, loaded
with ``-p``, audited with ``-m smoke``. A healthy adapter passes everything; each seeded defect (a
one-fixture override of the healthy one) ends in exactly the audit that owns it. Then the two shipped
examples: the demo's adapter seals a real tiny capsule; the denoiser learns, resumes exactly, and its
trainer object serves as the training state."""

from __future__ import annotations

import copy
import csv
import json
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from runaudit.examples.denoise.build import produce as produce_denoise
from runaudit.examples.denoise.evaluate import noisy_inputs, psnr
from runaudit.examples.denoise.train import DEFAULT_CONFIG, clean_images

SMOKE_IDS = (
    "smoke.runs",
    "smoke.finite_loss",
    "smoke.train_eval_parity",
    "smoke.eval_mode",
    "smoke.gradient_flow",
    "smoke.params_update",
    "smoke.loss_floor",
    "smoke.resume_roundtrip",
    "smoke.capsule_roundtrip",
    "collapse.input_cosine",
    "collapse.live_output_cosine",
    "collapse.linear_probe",
)

# A real (tiny) classifier on separable synthetic features: BatchNorm and dropout, AdamW, a per-step
# schedule, a checkpoint that holds everything. Raw samples are unnormalised features (about 100 ± 20).
HEALTHY = """
import numpy as np
import pytest
import torch
from torch import nn

from runaudit.adapter import Batch, InputPaths, Training

CLASSES, FEATURES, MEAN, STD = 4, 16, 100.0, 20.0
CENTRES = np.random.default_rng(0).normal(0.0, 1.0, (CLASSES, FEATURES))


def raw_samples(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n)
    features = CENTRES[labels] + rng.normal(0.0, 0.5, (n, FEATURES))
    return (features * STD + MEAN).astype(np.float32), labels


def train_view(raw):
    return torch.as_tensor((raw - MEAN) / STD, dtype=torch.float32)


def eval_view(raw):
    return torch.as_tensor((raw - MEAN) / STD, dtype=torch.float32)


def batch(n, seed, view=train_view):
    raw, labels = raw_samples(n, seed)
    return Batch(view(raw), torch.as_tensor(labels))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(FEATURES, 32), nn.BatchNorm1d(32), nn.ReLU())
        self.dropout = nn.Dropout(0.3)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.head(self.dropout(self.backbone(x)))


def build(net=Net):
    torch.manual_seed(0)
    model = net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    return Training(model, optimizer, scheduler)


def checkpoint(state):
    return {
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "scheduler": state.scheduler.state_dict(),
        "rng": torch.get_rng_state(),
        "epoch": state.epoch,
        "step": state.step,
    }


def restore(state, saved):
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler.load_state_dict(saved["scheduler"])
    torch.set_rng_state(saved["rng"])
    state.epoch, state.step = saved["epoch"], saved["step"]
    return state


@pytest.fixture
def smoke_state():
    return build


@pytest.fixture
def smoke_train_batch():
    return batch(16, 1)


@pytest.fixture
def smoke_eval_batch():
    return batch(48, 2, eval_view)


@pytest.fixture
def smoke_loss():
    return lambda model, batch: nn.functional.cross_entropy(model(batch.inputs), batch.targets)


@pytest.fixture
def smoke_predict():
    def predict(model, inputs):
        model.eval()
        with torch.no_grad():
            return model(inputs)

    return predict


@pytest.fixture
def smoke_save():
    return lambda state, path: torch.save(checkpoint(state), path)


@pytest.fixture
def smoke_load(smoke_state):
    return lambda path: restore(smoke_state(), torch.load(path, weights_only=True))


@pytest.fixture
def smoke_input_paths():
    raw, _ = raw_samples(6, 3)
    return InputPaths(raw=list(raw), train=train_view, eval=eval_view)


@pytest.fixture
def smoke_probe_data():
    return Batch(*raw_samples(200, 4))
"""

VARIANT = "import pytest\nimport torch\nfrom torch import nn\n\nimport healthy\nfrom healthy import *\n\n"


def verdicts(report: dict | None) -> dict[str, str]:
    """Audit -> verdict; ``-m smoke`` also selects evaluation.fresh, which does not apply to these active
    runs (tests/test_evaluation_fresh.py holds it to that)."""
    assert report is not None, "the harness wrote no report"
    return {
        item["audit"]: item["verdict"]
        for item in report["verdicts"]
        if (item["audit"], item["verdict"]) != ("evaluation.fresh", "not_applicable")
    }


def findings(report: dict | None) -> dict[str, str]:
    """Every verdict that is not a pass, except the capsule round trip these adapters do not offer."""
    return {
        audit: verdict
        for audit, verdict in verdicts(report).items()
        if verdict != "passed" and audit != "smoke.capsule_roundtrip"
    }


def message(report: dict | None, audit: str) -> str:
    return next(item["message"] for item in (report or {})["verdicts"] if item["audit"] == audit)


@pytest.fixture
def smoke(pytester: pytest.Pytester, run_audits: Callable[..., object]) -> Callable[..., object]:
    """Audit the healthy adapter with ``overrides`` applied, against an active run, as a user would."""
    pytester.makepyfile(healthy=HEALTHY)
    pytester.syspathinsert()
    root = pytester.path / "project"
    (root / "active" / "plan").mkdir(parents=True)

    def audit(overrides: str = "", *args: str) -> object:
        pytester.makepyfile(variant=VARIANT + textwrap.dedent(overrides))
        return run_audits("plan", root, "-p", "variant", "-m", "smoke", *args)

    return audit


def test_the_healthy_adapter_passes_every_smoke_audit(smoke) -> None:
    outcome = smoke()
    assert outcome.result.ret == 0, outcome.result.stdout.str()
    expected = dict.fromkeys(SMOKE_IDS, "passed") | {"smoke.capsule_roundtrip": "not_run"}
    assert verdicts(outcome.report) == expected
    assert "no adapter provides the fixture smoke_capsule" in message(
        outcome.report, "smoke.capsule_roundtrip"
    )
    assert message(outcome.report, "smoke.gradient_flow").endswith("6/6 trainable tensors received gradient")


def test_a_frozen_backbone_whose_batch_norm_still_trains_fails_params_update(smoke) -> None:
    outcome = smoke("""
        def frozen():
            state = healthy.build()
            for param in state.model.backbone.parameters():
                param.requires_grad_(False)  # frozen, yet still in the optimizer and in training mode
            return state

        @pytest.fixture
        def smoke_state():
            return frozen
    """)
    assert findings(outcome.report) == {"smoke.params_update": "failed"}
    text = message(outcome.report, "smoke.params_update")
    assert "frozen tensor(s) changed" in text and "backbone.1.running_mean" in text
    assert "the optimizer holds 4 frozen tensor(s)" in text


def test_a_detach_that_starves_the_backbone_is_counted_by_gradient_flow(smoke) -> None:
    outcome = smoke("""
        class Detached(healthy.Net):
            def forward(self, x):
                return self.head(self.dropout(self.backbone(x).detach()))

        @pytest.fixture
        def smoke_state():
            return lambda: healthy.build(Detached)
    """)
    assert findings(outcome.report) == {"smoke.gradient_flow": "disclosed"}
    text = message(outcome.report, "smoke.gradient_flow")
    assert "2/6 trainable tensors received gradient, expected 6/6" in text
    assert "backbone.0.weight" in text


def test_an_evaluation_that_leaves_dropout_on_is_disclosed_by_eval_mode(smoke) -> None:
    outcome = smoke("""
        @pytest.fixture
        def smoke_predict():
            def predict(model, inputs):
                model.eval()
                model.dropout.train()
                with torch.no_grad():
                    return model(inputs)
            return predict
    """)
    assert findings(outcome.report) == {"smoke.eval_mode": "disclosed"}
    assert "1 module(s) ran in training mode: dropout (Dropout)" in message(outcome.report, "smoke.eval_mode")


def test_input_paths_that_normalise_differently_are_disclosed_by_parity(smoke) -> None:
    outcome = smoke("""
        @pytest.fixture
        def smoke_input_paths():
            raw, _ = healthy.raw_samples(6, 3)
            return healthy.InputPaths(raw=list(raw), train=healthy.train_view, eval=lambda x: torch.as_tensor(x / 255.0))
    """)
    assert findings(outcome.report) == {"smoke.train_eval_parity": "disclosed"}
    assert "disagree on 6/6 raw samples" in message(outcome.report, "smoke.train_eval_parity")


def test_bce_with_scaled_targets_goes_below_its_floor(smoke) -> None:
    outcome = smoke("""
        @pytest.fixture
        def smoke_loss():
            def loss(model, batch):
                targets = nn.functional.one_hot(batch.targets, CLASSES).float() * 2.0  # meant to be in [0, 1]
                return nn.functional.binary_cross_entropy_with_logits(model(batch.inputs), targets)
            return loss
    """)
    assert findings(outcome.report) == {"smoke.loss_floor": "failed"}
    assert "below its floor 0" in message(outcome.report, "smoke.loss_floor")


@pytest.mark.parametrize(
    ("forgotten", "symptom"),
    [("scheduler", "scheduler.last_epoch"), ("rng", "rng.torch")],
)
def test_a_save_that_forgets_part_of_the_state_fails_resume_roundtrip(
    smoke, forgotten: str, symptom: str
) -> None:
    outcome = smoke(f'''
        def forgetful(state):
            saved = healthy.checkpoint(state)
            del saved["{forgotten}"]
            return saved

        def partial_restore(state, saved):
            saved.setdefault("scheduler", state.scheduler.state_dict())
            saved.setdefault("rng", torch.get_rng_state())
            return healthy.restore(state, saved)

        @pytest.fixture
        def smoke_save():
            return lambda state, path: torch.save(forgetful(state), path)

        @pytest.fixture
        def smoke_load(smoke_state):
            return lambda path: partial_restore(smoke_state(), torch.load(path, weights_only=True))
    ''')
    assert findings(outcome.report) == {"smoke.resume_roundtrip": "failed"}
    text = message(outcome.report, "smoke.resume_roundtrip")
    assert "is not the one saved" in text and symptom in text


def test_a_model_that_ignores_its_input_is_disclosed_by_the_live_collapse_probe(smoke) -> None:
    outcome = smoke("""
        class Ignoring(healthy.Net):
            def forward(self, x):
                return super().forward(torch.zeros_like(x))

        @pytest.fixture
        def smoke_state():
            return lambda: healthy.build(Ignoring)
    """)
    found = findings(outcome.report)
    assert found.pop("collapse.live_output_cosine") == "disclosed"
    assert found == {"smoke.gradient_flow": "disclosed"}  # the input layer is starved too, rightly
    assert "the model ignores its input" in message(outcome.report, "collapse.live_output_cosine")


def test_invariant_inputs_and_labels_without_signal_are_disclosed(smoke) -> None:
    outcome = smoke("""
        @pytest.fixture
        def smoke_eval_batch():
            noise = torch.randn(48, FEATURES, generator=torch.Generator().manual_seed(0))
            return Batch(0.5 + 0.001 * noise, torch.zeros(48, dtype=torch.long))

        @pytest.fixture
        def smoke_probe_data():
            raw, _ = healthy.raw_samples(200, 4)
            return Batch(raw, np.random.default_rng(9).integers(0, CLASSES, 200))
    """)
    assert findings(outcome.report) == {
        "collapse.input_cosine": "disclosed",
        "collapse.linear_probe": "disclosed",
    }
    assert "nearly one vector" in message(outcome.report, "collapse.input_cosine")
    assert "no linear signal" in message(outcome.report, "collapse.linear_probe")


def test_a_non_finite_loss_fails_finite_loss(smoke) -> None:
    outcome = smoke("""
        @pytest.fixture
        def smoke_train_batch():
            data = healthy.batch(16, 1)
            data.inputs[3, 5] = float("nan")  # one poisoned pixel
            return data
    """)
    assert findings(outcome.report) == {"smoke.finite_loss": "failed"}
    assert "is nan at initialisation" in message(outcome.report, "smoke.finite_loss")


@pytest.mark.parametrize(
    ("build", "line"),
    [
        (
            'raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x8 and 16x32)")',
            "smoke_state raised RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x8 and 16x32) (variant.py:",
        ),
        (
            "return healthy.build().model  # the model, not a training state",
            "smoke_state builds a Net, not a training state: it lacks model, optimizer, epoch, step",
        ),
    ],
    ids=["crash", "not-a-state"],
)
def test_a_broken_build_fails_runs_once(smoke, build: str, line: str) -> None:
    outcome = smoke(f"""
        def broken():
            {build}

        @pytest.fixture
        def smoke_state():
            return broken
    """)
    found = verdicts(outcome.report)
    assert found.pop("smoke.runs") == "failed"
    assert line in message(outcome.report, "smoke.runs")
    needs_a_model = {audit for audit, verdict in found.items() if verdict == "not_run"}
    assert "smoke.resume_roundtrip" in needs_a_model and "collapse.live_output_cosine" in needs_a_model
    assert "(reported by smoke.runs)" in message(outcome.report, "smoke.gradient_flow")
    assert set(found.values()) == {"passed", "not_run"}  # probes that need no model still ran


def test_without_an_adapter_every_smoke_audit_is_not_run(run_audits, pytester: pytest.Pytester) -> None:
    root = pytester.path / "project"
    (root / "active" / "plan").mkdir(parents=True)
    outcome = run_audits("plan", root, "-m", "smoke")
    assert outcome.result.ret == 0
    assert set(verdicts(outcome.report)) == set(SMOKE_IDS)
    assert set(verdicts(outcome.report).values()) == {"not_run"}
    strict = run_audits("plan", root, "-m", "smoke", "--strict")
    assert strict.result.ret == 1  # an unaudited smoke never passes a strict gate


def test_the_project_code_runs_on_cpu_on_one_thread_with_trackers_off(smoke) -> None:
    outcome = smoke(
        """
        import os

        def checked():
            assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and os.environ["WANDB_MODE"] == "disabled"
            assert torch.get_num_threads() == 1
            return healthy.build()

        @pytest.fixture
        def smoke_state():
            return checked
        """,
        "-k",
        "test_runs",  # -k also matches folder names: a checkout under "My Runs/" matched every audit
    )
    assert verdicts(outcome.report) == {"smoke.runs": "passed"}


def test_a_session_without_an_adapter_never_imports_torch(pytester: pytest.Pytester) -> None:
    (pytester.path / "project" / "active" / "plan").mkdir(parents=True)
    pytester.makepyfile(
        torch_probe="import sys\n\n\ndef pytest_unconfigure():\n    print('torch imported:', 'torch' in sys.modules)\n"
    )
    result = pytester.runpytest_subprocess(
        "-p", "torch_probe", "-p", "runaudit.fixtures.plugin", "--run", "plan", "--root", "project"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*not run*", "torch imported: False"])


def test_a_capsule_writer_whose_capsule_is_quarantined_fails_capsule_roundtrip(smoke) -> None:
    outcome = smoke(
        """
        import json

        def write(root, run_id):
            folder = root / "active" / run_id
            folder.mkdir(parents=True)
            (folder / "run.json").write_text(json.dumps({"run_id": run_id}))

        @pytest.fixture
        def smoke_capsule():
            return write
    """,
        "-k",
        "capsule_roundtrip",
    )
    assert verdicts(outcome.report) == {"smoke.capsule_roundtrip": "failed"}
    assert "was quarantined by runaudit close" in message(outcome.report, "smoke.capsule_roundtrip")


# -- selecting the gate without --run -----------------------------------------------------------------


def test_minus_m_smoke_with_an_adapter_runs_the_gate_without_a_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(healthy=HEALTHY)
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "runaudit.fixtures.plugin", "-p", "healthy", "-m", "smoke", "-v")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*::test_runs PASSED*",
            "*::test_capsule_roundtrip NOT RUN*",
            f"*{len(SMOKE_IDS) - 1} passed*1 not run*",
        ]
    )
    assert not (pytester.path / "reports").exists()  # no run, so no report to file


def test_an_adapter_alone_leaves_the_projects_own_tests_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(healthy=HEALTHY, test_own="def test_own():\n    pass\n")
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "runaudit.fixtures.plugin", "-p", "healthy")
    result.assert_outcomes(passed=1)


def test_the_adapter_can_be_named_in_pyproject(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(healthy=HEALTHY)
    pytester.syspathinsert()
    pytester.makefile(".toml", pyproject='[tool.runaudit]\nadapter = "healthy"\n')
    result = pytester.runpytest(
        "-p", "runaudit.fixtures.plugin", "-m", "smoke", "-k", "test_runs or test_gradient"
    )
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*no adapter provides*")


def test_an_adapter_that_cannot_be_imported_is_one_usage_line(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject='[tool.runaudit]\nadapter = "no_such_adapter"\n')
    result = pytester.runpytest("-p", "runaudit.fixtures.plugin", "-m", "smoke")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the smoke adapter 'no_such_adapter' cannot be imported*"])
    assert "Traceback" not in result.stderr.str()


def test_run_demo_brings_the_demos_own_adapter(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNAUDIT_DEMO_ROOT", str(project))  # the bundled demo, already built there
    reports = pytester.path / "reports"
    result = pytester.runpytest(
        "-p",
        "runaudit.fixtures.plugin",
        "--run",
        "demo",
        "--report-dir",
        str(reports),
        "-m",
        "smoke",
        "-k",
        "test_runs",  # -k also matches folder names: a checkout under "My Runs/" matched every audit
    )
    assert result.ret == 0, result.stdout.str()
    report = json.loads((reports / "demo.json").read_text())
    assert verdicts(report) == {"smoke.runs": "passed"}
    assert "smoke of runaudit.examples.digits.adapter" in message(report, "smoke.runs")


def test_a_project_that_turns_warnings_into_errors_still_gets_the_gate_and_its_report(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``filterwarnings = ["error"]``, common in a project's own pytest configuration, applies to the
    audits too: loading the adapter warned, and the session ended in an internal error with no report."""
    monkeypatch.setenv("RUNAUDIT_DEMO_ROOT", str(project))
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n')
    reports = pytester.path / "reports"
    # A process of its own, as users run it (in process, pytester's earlier imports hid the warning), with
    # runaudit alone: another installed plugin's own warnings would be errors too.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess(
        *(
            "-p",
            "runaudit.fixtures.plugin",
            "-p",
            "runaudit.examples.digits.plugin",
            "-p",
            "no:cacheprovider",
        ),
        *("--run", "demo", "--report-dir", str(reports)),
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    report = json.loads((reports / "demo.json").read_text())
    assert report["custody_ok"] is True and report["summary"]["failed"] == 0
    assert verdicts(report)["smoke.runs"] == "passed"


# -- the shipped examples ---------------------------------------------------------------------------


def test_the_demo_adapter_passes_the_whole_gate_including_a_sealed_capsule(
    run_audits, tmp_path: Path
) -> None:
    (tmp_path / "active" / "plan").mkdir(parents=True)
    basetemp = tmp_path / "pytest-temp"
    outcome = run_audits(
        "plan", tmp_path, "-p", "runaudit.examples.digits.adapter", "-m", "smoke", f"--basetemp={basetemp}"
    )
    assert outcome.result.ret == 0, outcome.result.stdout.str()
    assert verdicts(outcome.report) == dict.fromkeys(SMOKE_IDS, "passed")
    # The roundtrips wrote in folders of their own, since deleted: the session never made pytest's temp
    # tree, whose cleanup at exit deletes the leftovers of other sessions it finds beside it.
    assert not basetemp.exists()


# -- the second example: a denoising autoencoder whose trainer object is the training state ------------


DENOISE_ADAPTER = "runaudit.examples.denoise.adapter"


def denoise_config(epochs: int) -> dict:
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["train"]["epochs"] = epochs
    return config


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny tensors train faster on one thread, and a shared CI box has no idle core to spare."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Interrupted(Exception):
    """Stands for a process killed after a checkpoint."""


@pytest.mark.usefixtures("one_thread")
def test_the_denoiser_writes_a_capsule_learns_and_resumes_exactly(tmp_path: Path) -> None:
    config = denoise_config(3)
    straight = produce_denoise(tmp_path, "straight", config)

    def interrupt_after_two(line: str) -> None:
        if line.startswith("epoch 2/"):
            raise Interrupted(line)

    with pytest.raises(Interrupted):
        produce_denoise(tmp_path, "resumed", config, log=interrupt_after_two)
    resumed = produce_denoise(tmp_path, "resumed", config)  # a restarted process resumes after epoch 2
    with (resumed / "train.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["epoch"], row["resume"]) for row in rows] == [("1", "false"), ("2", "false"), ("3", "true")]
    weights = {
        name: torch.load(folder / "last.pth", weights_only=True)["model"]
        for name, folder in (("straight", straight), ("resumed", resumed))
    }
    for name, value in weights["straight"].items():
        torch.testing.assert_close(weights["resumed"][name], value, msg=name)
    test = clean_images(DEFAULT_CONFIG)["test"]
    scored = json.loads((straight / "test" / "main" / "metrics.json").read_text())
    assert scored["n_scored"] == len(test)
    gains = {}
    for row in scored["metrics"]:
        sigma = config["eval"]["sigmas"][row["condition_id"]]
        noisy = psnr(noisy_inputs(test, sigma, seed=config["eval"]["noise_seed"]), test).mean().item()
        gains[row["condition_id"]] = row["value"] - noisy
    assert gains["high"] > 1.0, gains  # dB better than its input under the heavier noise


def test_the_denoise_adapter_passes_the_gate(run_audits, tmp_path: Path) -> None:
    (tmp_path / "active" / "plan").mkdir(parents=True)
    outcome = run_audits("plan", tmp_path, "-p", DENOISE_ADAPTER, "-m", "smoke")
    assert outcome.result.ret == 0, outcome.result.stdout.str()
    assert verdicts(outcome.report) == dict.fromkeys(SMOKE_IDS, "passed")  # its capsule seals, too
    assert "RNG (torch, noise)" in message(outcome.report, "smoke.resume_roundtrip")


def test_a_checkpoint_without_the_noise_generator_fails_resume(
    run_audits, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(
        forgetful=f"""
        import pytest
        import torch
        from {DENOISE_ADAPTER} import *
        from runaudit.examples.denoise.train import DenoiseTrainer

        class Forgetful(DenoiseTrainer):
            def state_dict(self):
                state = super().state_dict()
                state["rng"]["noise"] = torch.Generator().manual_seed(0).get_state()  # not the live one
                return state

        @pytest.fixture(scope="session")
        def smoke_state():
            return lambda: Forgetful(CONFIG)

        @pytest.fixture(scope="session")
        def smoke_load():
            def load(path):
                trainer = Forgetful(CONFIG)
                trainer.load_state_dict(torch.load(path, weights_only=True))
                return trainer
            return load
        """
    )
    pytester.syspathinsert()
    (tmp_path / "active" / "plan").mkdir(parents=True)
    outcome = run_audits("plan", tmp_path, "-p", "forgetful", "-m", "smoke", "-k", "test_resume")
    assert verdicts(outcome.report) == {"smoke.resume_roundtrip": "failed"}
    assert "rng.noise" in message(outcome.report, "smoke.resume_roundtrip")
