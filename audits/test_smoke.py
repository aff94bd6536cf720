"""Smoke gate: the project's own training code, a few steps on CPU, before any GPU is rented.

Every audit takes the project's pieces from its smoke adapter (runaudit/adapter.py) and builds its own
fresh training state, so any one audit can run alone. A green smoke is necessary, not sufficient: it
catches import, configuration, shape, scale, wiring and checkpoint bugs, never convergence. Ids follow
docs/checks.md §2.1: gates fail (runs, finite_loss, params_update, loss_floor, the two round trips); the
rest disclose. torch and the probes are imported only once the adapter has answered, so a session
without an adapter never imports torch.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runaudit.adapter import (
    CAPSULE,
    EVAL_BATCH,
    INPUT_PATHS,
    LOAD,
    LOSS,
    LOSS_FLOOR,
    PREDICT,
    SAVE,
    TRAIN_BATCH,
)
from runaudit.fixtures.smoke import Adapter
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.rng import global_rng_state, set_global_rng_state

pytestmark = [pytest.mark.smoke, pytest.mark.live]

STEPS = 2  # runs: 1–2 batches
UPDATE_STEPS = 3  # params_update: a snapshot differs after 2–3 steps
REACH_RETRY_STEPS = 2  # gradient_flow: zero-initialised layers pass gradient only after a step or two
RESUME_BEFORE, RESUME_AFTER = 3, 2  # resume_roundtrip: steps before the save, and after it
RANDOM_SCALES: tuple[float | None, ...] = (None, 1.0, 30.0, 1000.0)  # None: per element, 0.1 to 1000
DESCENT_STEPS, DESCENT_LR = 50, 1.0  # loss_floor: Adam on the outputs themselves, toward the targets
PARITY_RTOL, PARITY_ATOL = 1e-4, 1e-5
CLOSE_ID = "smoke-capsule"
CLOSE_DEADLINE_S = 600  # runaudit close audits the tiny capsule in a pytest session of its own


def _kind(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"a {type(value).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")


def _number(value: Any) -> float:
    """A loss as a float (NaN when it is not a number at all)."""
    try:
        return float(value.detach() if hasattr(value, "detach") else value)
    except (TypeError, ValueError, RuntimeError):
        return math.nan


def test_runs(adapter: Adapter, audit: AuditRecorder) -> None:
    """SMK-01: build, two optimizer steps and one evaluation forward, on CPU, trackers off."""
    started = time.perf_counter()
    state = adapter.new_state()
    devices = sorted({param.device.type for param in state.model.parameters()})
    audit.require(
        devices in ([], ["cpu"]),
        f"{adapter.label}: the model is built on {', '.join(devices)}; the smoke runs on CPU "
        "(CUDA_VISIBLE_DEVICES is empty), so the build must not hard-code a device",
    )
    losses = [_number(value) for value in adapter.train_steps(state, STEPS)]
    predict = adapter.optional(PREDICT, None)
    if predict is not None:
        adapter.call(PREDICT, predict, state.model, adapter.fixture(EVAL_BATCH).inputs)
    elapsed = time.perf_counter() - started
    evaluated = " and one evaluation forward" if predict is not None else " (no smoke_predict: no evaluation)"
    audit.note(
        f"{adapter.label}: built, {STEPS} optimizer steps{evaluated} on CPU in {elapsed:.2f} s",
        losses=losses,
        seconds=round(elapsed, 3),
    )


def test_finite_loss(adapter: Adapter, audit: AuditRecorder) -> None:
    """SMK-02 and SMK-10: the training loss is a finite scalar that autograd can differentiate."""
    state = adapter.new_state()

    import torch

    loss = adapter.call(LOSS, adapter.fixture(LOSS), state.model, adapter.fixture(TRAIN_BATCH))
    where = f"{adapter.label}: the training loss on the train batch"
    audit.require(
        isinstance(loss, torch.Tensor) and loss.numel() == 1,
        f"{where} is {_kind(loss)}, expected a scalar tensor",
    )
    value = loss.item()
    audit.evidence(loss=value)
    audit.require(math.isfinite(value), f"{where} is {value} at initialisation, expected a finite number")
    audit.require(
        loss.requires_grad and loss.grad_fn is not None,
        f"{where} has no grad_fn: it is detached from the parameters, so backward cannot train them",
    )
    audit.note(
        f"{where} is {value:.4g} at initialisation: finite, scalar and differentiable "
        "(a shallow check: it says nothing about correctness)"
    )


def test_train_eval_parity(adapter: Adapter, audit: AuditRecorder) -> None:
    """SMK-03: one raw sample through the training and the evaluation input paths gives one tensor."""
    paths = adapter.fixture(INPUT_PATHS)

    import torch

    if not paths.raw:
        audit.not_run(f"{adapter.label}: {INPUT_PATHS} holds no raw samples")

    def through(path: Any, raw: Any) -> Any:
        return torch.as_tensor(path(raw))

    mismatches = []
    for index, raw in enumerate(paths.raw):
        trained = adapter.call("the training input path", through, paths.train, raw, owned=True)
        scored = adapter.call("the evaluation input path", through, paths.eval, raw, owned=True)
        if trained.shape != scored.shape:
            mismatches.append(f"sample {index}: shape {tuple(trained.shape)} vs {tuple(scored.shape)}")
            continue
        trained, scored = trained.double(), scored.double()
        if not torch.allclose(trained, scored, rtol=PARITY_RTOL, atol=PARITY_ATOL):
            mismatches.append(
                f"sample {index}: max |Δ| {(trained - scored).abs().max().item():.3g}, "
                f"mean {trained.mean().item():.3g} vs {scored.mean().item():.3g}, "
                f"std {trained.std().item():.3g} vs {scored.std().item():.3g}"
            )
    total = len(paths.raw)
    audit.evidence(samples=total, mismatches=mismatches)
    if mismatches:
        audit.disclose(
            f"{adapter.label}: the training and evaluation input paths disagree on {len(mismatches)}/{total} "
            f"raw samples ({mismatches[0]}): the model is scored on inputs of another shape or scale "
            "than it trained on",
            affects=["run:inputs"],
        )
        return
    audit.note(f"{adapter.label}: {total}/{total} raw samples give the same tensor through both input paths")


def test_eval_mode(adapter: Adapter, audit: AuditRecorder) -> None:
    """SMK-04: the evaluation forward runs every module in eval mode, without autograd."""
    state = adapter.new_state()

    from runaudit import training as probe

    predict, inputs = adapter.fixture(PREDICT), adapter.fixture(EVAL_BATCH).inputs
    state.model.train()  # the evaluator is called from the training loop, with the model in training mode
    training, grad = adapter.call(
        PREDICT, probe.modes_during, state.model, lambda: predict(state.model, inputs)
    )
    if grad is None:
        audit.not_run(f"{adapter.label}: {PREDICT} never calls the model, so its modes cannot be observed")
    audit.evidence(training_modules=training, grad_enabled=grad)
    findings = []
    if training:
        findings.append(f"{len(training)} module(s) ran in training mode: {probe.shown(training)}")
    if grad:
        findings.append("autograd was on (no torch.no_grad or torch.inference_mode)")
    if findings:
        audit.disclose(
            f"{adapter.label}: the evaluation forward: {'; '.join(findings)}; scores then depend on "
            "dropout draws and batch statistics",
            affects=["run:evaluation"],
        )
        return
    audit.note(f"{adapter.label}: the evaluation forward runs every module in eval mode, under no_grad")


def test_gradient_flow(adapter: Adapter, audit: AuditRecorder) -> None:
    """SMK-05 and SMK-10: one backward on the train batch reaches every trainable tensor."""
    state = adapter.new_state()

    from runaudit import training as probe

    loss, batch = adapter.fixture(LOSS), adapter.fixture(TRAIN_BATCH)

    def backward() -> tuple[list[str], list[str]]:
        probe.zero_gradients(state.model)
        adapter.call(f"{LOSS} and its backward", lambda: loss(state.model, batch).backward())
        return probe.gradient_reach(state.model)

    reached, starved = backward()
    at_start = len(reached)
    if starved:
        adapter.train_steps(state, REACH_RETRY_STEPS)
        reached, starved = backward()
    total = len(reached) + len(starved)
    count = f"{len(reached)}/{total} trainable tensors received gradient"
    audit.evidence(reached=len(reached), trainable=total, starved=starved, reached_at_start=at_start)
    audit.require(total > 0, f"{adapter.label}: the model has no trainable tensors")
    audit.require(
        bool(reached),
        f"{adapter.label}: {count} after one backward on the train batch: no gradient reaches the "
        "parameters (a detached or non-differentiable loss)",
    )
    if starved:
        audit.disclose(
            f"{adapter.label}: {count}, expected {total}/{total}; never reached: {probe.shown(starved)} "
            "(a detach(), an unused branch or a frozen path)",
            affects=["run:training"],
        )
        return
    audit.note(f"{adapter.label}: {count}")


def test_params_update(adapter: Adapter, audit: AuditRecorder) -> None:
    """SMK-08 and SMK-09: steps move the trainable tensors, and only them; the optimizer holds exactly them."""
    state = adapter.new_state()

    from runaudit import training as probe

    model = state.model
    before, frozen = probe.tensors(model), probe.frozen(model)
    trainable = list(probe.trainable(model))
    orphans, frozen_held = probe.optimizer_coverage(model, state.optimizer)
    adapter.train_steps(state, UPDATE_STEPS)
    moved = probe.changed(before, model)
    updated = [name for name in trainable if name in moved]
    frozen_moved = sorted(frozen & moved)
    coverage = []
    if orphans:
        coverage.append(
            f"{len(orphans)} trainable tensor(s) are in no optimizer group: {probe.shown(orphans)}"
        )
    if frozen_held:
        coverage.append(
            f"the optimizer holds {len(frozen_held)} frozen tensor(s): {probe.shown(frozen_held)}"
        )
    audit.evidence(
        updated=len(updated), trainable=len(trainable), frozen_changed=frozen_moved, coverage=coverage
    )
    also = f"; also {'; '.join(coverage)}" if coverage else ""
    audit.require(
        bool(updated),
        f"{adapter.label}: 0/{len(trainable)} trainable tensors changed after {UPDATE_STEPS} optimizer steps{also}",
    )
    audit.require(
        not frozen_moved,
        f"{adapter.label}: {len(frozen_moved)} frozen tensor(s) changed during {UPDATE_STEPS} training steps: "
        f"{probe.shown(frozen_moved)} (a frozen module left in training mode updates its batch-norm "
        f"statistics, or frozen weights are still updated){also}",
    )
    if coverage:
        audit.disclose(f"{adapter.label}: {'; '.join(coverage)}", affects=["run:training"])
        return
    audit.note(
        f"{adapter.label}: {len(updated)}/{len(trainable)} trainable tensors changed after {UPDATE_STEPS} "
        "steps; no frozen tensor moved"
    )


def test_loss_floor(adapter: Adapter, audit: AuditRecorder) -> None:
    """SMK-12: fed random extreme outputs, and outputs optimised toward the targets, the loss stays
    finite and never below its floor (0 for cross-entropy, BCE, MSE unless the adapter says otherwise)."""
    state = adapter.new_state()

    import torch

    from runaudit import training as probe

    model, loss, batch = state.model, adapter.fixture(LOSS), adapter.fixture(TRAIN_BATCH)
    floor = float(adapter.optional(LOSS_FLOOR, 0.0))
    own_forward, captured = model.forward, []

    def recording(*args: Any, **kwargs: Any) -> Any:
        captured.append(own_forward(*args, **kwargs))
        return captured[-1]

    with torch.no_grad(), probe.forward_replaced(model, recording):
        adapter.call(LOSS, loss, model, batch)
    if not captured:
        audit.not_run(f"{adapter.label}: {LOSS} never calls the model, so other outputs cannot be fed to it")

    def loss_on(outputs: Any) -> Any:
        with probe.forward_replaced(model, lambda *_, **__: outputs):
            return adapter.call("the loss on substituted outputs", loss, model, batch, owned=True)

    generator = torch.Generator().manual_seed(0)
    values: dict[str, float] = {}
    try:
        for scale in RANDOM_SCALES:
            with torch.no_grad():
                value = loss_on(probe.random_like(captured[0], generator, scale))
            values["random, per element 0.1-1000" if scale is None else f"random x{scale:g}"] = _number(value)
        outputs, leaves = probe.free_outputs(probe.random_like(captured[0], generator, 1.0))
    except TypeError as exc:
        audit.not_run(f"{adapter.label}: {exc}; the loss-floor probe substitutes floating tensors")
    descent: list[float] = []
    if math.isfinite(floor):  # an unbounded loss has no floor to descend to
        optimizer = torch.optim.Adam(leaves, lr=DESCENT_LR)
        for _ in range(DESCENT_STEPS):
            optimizer.zero_grad()
            value = loss_on(outputs)
            descent.append(_number(value))
            if not (value.requires_grad and floor <= descent[-1] < math.inf):
                break  # settled: below the floor, not finite, or not a function of the outputs
            adapter.call("the backward of the loss on substituted outputs", value.backward, owned=True)
            optimizer.step()
        values[f"optimised outputs, lowest of {len(descent)} steps"] = min(descent)
    audit.evidence(floor=floor, losses=values, descent_first_last=descent[:1] + descent[-1:])
    broken = {name: value for name, value in values.items() if not math.isfinite(value)}
    audit.require(
        not broken,
        f"{adapter.label}: the loss is not finite on {', '.join(broken)}: an unstable formulation, "
        "e.g. the log of a saturated sigmoid or softmax",
    )
    lowest_name = min(values, key=values.__getitem__)
    lowest = values[lowest_name]
    audit.require(
        lowest >= floor - 1e-6 * max(1.0, abs(floor)),
        f"{adapter.label}: the loss reaches {lowest:.4g} on {lowest_name}, below its floor {floor:g}: "
        "targets outside the loss's domain (e.g. BCE targets not in [0, 1]) or a sign error",
    )
    audit.note(
        f"{adapter.label}: on random outputs up to x1000 and on outputs optimised toward the targets the "
        f"loss stays finite and >= {floor:g} (lowest {lowest:.4g})"
    )


def test_resume_roundtrip(adapter: Adapter, audit: AuditRecorder, smoke_scratch: Path) -> None:
    """Train, save, restore in a fresh state, continue: equal to the run that was never interrupted."""
    save, load = adapter.fixture(SAVE), adapter.fixture(LOAD)

    from runaudit import training as probe

    start = global_rng_state()
    first = adapter.new_state()
    built = global_rng_state()
    adapter.train_steps(first, RESUME_BEFORE)
    watched = ["torch", *(name for name in probe.consumed_rngs(built, global_rng_state()) if name != "torch")]
    first.epoch += 1  # an epoch boundary, where a loop saves
    probe.advance_rngs(first, watched)
    saved = probe.snapshot(first, watched)
    path = smoke_scratch / "resume.pth"
    adapter.call(SAVE, save, first, path, owned=True)
    adapter.train_steps(first, RESUME_AFTER)
    first.epoch += 1
    uninterrupted = probe.snapshot(first, watched)

    set_global_rng_state(start)  # a fresh process, seeded as the first one was
    second = adapter.call(LOAD, load, path, owned=True)
    restored = probe.differences(saved, probe.snapshot(second, watched))
    adapter.train_steps(second, RESUME_AFTER)
    second.epoch += 1
    continued = probe.differences(uninterrupted, probe.snapshot(second, watched))
    rngs = [*watched, *getattr(first, "generators", {})]
    audit.evidence(
        steps_before=RESUME_BEFORE,
        steps_after=RESUME_AFTER,
        rngs=rngs,
        restored=restored,
        continued=continued,
        tolerance={"rtol": probe.RTOL, "atol": probe.ATOL},
    )
    problems = []
    if restored:
        problems.append(f"the state {LOAD} restores is not the one saved ({probe.shown(restored, 4)})")
    if continued:
        problems.append(
            f"{RESUME_AFTER} steps later it differs from the uninterrupted run ({probe.shown(continued, 3)})"
        )
    audit.require(
        not problems,
        f"{adapter.label}: saved after step {RESUME_BEFORE} with {SAVE} and resumed with {LOAD}: "
        + "; ".join(problems),
    )
    audit.note(
        f"{adapter.label}: saved after {RESUME_BEFORE} steps, restored in a fresh state and continued "
        f"{RESUME_AFTER} steps: model, optimizer, scheduler, RNG ({', '.join(rngs)}), epoch and step "
        "equal the uninterrupted run"
    )


def test_capsule_roundtrip(adapter: Adapter, audit: AuditRecorder, smoke_scratch: Path) -> None:
    """A tiny capsule written by the project's own code seals through ``runaudit close``.

    ``runaudit close`` runs as the user runs it, in its own process: the audit sees what the user would.
    """
    write = adapter.fixture(CAPSULE, owned=True)
    root = smoke_scratch / "project"
    root.mkdir()
    adapter.call(CAPSULE, write, root, CLOSE_ID, owned=True)
    command = [sys.executable, "-m", "runaudit", "close", CLOSE_ID, "--root", str(root)]
    try:
        closed = subprocess.run(
            command, capture_output=True, text=True, timeout=CLOSE_DEADLINE_S, check=False
        )
    except subprocess.TimeoutExpired:
        audit.fail(f"{adapter.label}: runaudit close did not finish within {CLOSE_DEADLINE_S} s")
    said = [line for line in (closed.stdout + closed.stderr).splitlines() if line.strip()]
    if closed.returncode not in (0, 1):  # 2: refused before anything moved
        audit.fail(
            f"{adapter.label}: {CAPSULE} left nothing to close: {said[-1] if said else closed.returncode}"
        )
    reasons = [line.removeprefix("- ") for line in said if line.startswith("- ")]
    audit.evidence(sealed=closed.returncode == 0, closure=reasons or said[-1:])
    audit.require(
        closed.returncode == 0,
        f"{adapter.label}: the tiny capsule written by {CAPSULE} was quarantined by runaudit close: "
        + "; ".join(reasons[:3] or said[-1:]),
    )
    audit.note(f"{adapter.label}: a tiny capsule written by the project's own code sealed ({said[-1]})")
