"""Determinism gate (science): can this run be re-run to the same numbers, as it claims? (docs/checks.md §2.11)

Read from run.json's ``seed``, ``environment`` and ``source`` blocks and the resolved config.yaml: an
irreproducible delta is explained here before anyone calls it an effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from runaudit.claims import run_claim
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.reader import CapsuleReader
from runaudit.run import Run

pytestmark = pytest.mark.science

REPRODUCIBILITY = run_claim("reproducibility")
CUBLAS_KEY = "cublas_workspace_config"
CUBLAS_VALUES = frozenset({":4096:8", ":16:8"})


def _seed_block(audit: AuditRecorder, run: Run) -> Mapping[str, Any] | None:
    if run.declared is None:
        audit.not_run(f"run.json is unreadable (reported by capsule.run_json_schema): {run.problem}")
    seed = run.get("seed")
    return seed if isinstance(seed, Mapping) else None


def test_seeds_recorded(run: Run, audit: AuditRecorder) -> None:
    """DET-01: ``seed.values`` in ``run.json`` must hold at least one integer and only integers; no usable
    seed is disclosed.

    Without a recorded seed the run cannot be re-drawn, nor its variance attributed.
    """
    seed = _seed_block(audit, run)
    values = seed.get("values") if seed is not None else None
    recorded = [value for value in values or () if isinstance(value, int) and not isinstance(value, bool)]
    audit.evidence(seed_values=recorded)
    if recorded and len(recorded) == len(values or ()):
        audit.note(f"seed(s) {', '.join(map(str, recorded))} recorded")
        return
    audit.disclose(
        f"run {run.run_id}: run.json records no usable seed (seed.values: "
        f"{list(values) if isinstance(values, tuple) else values!r}): "
        "the run cannot be re-drawn, and its variance cannot be attributed",
        affects=[REPRODUCIBILITY],
    )


def _config_value(document: Any, key: str) -> Any:
    """The first value under ``key`` (case-insensitive) anywhere in a parsed config."""
    if isinstance(document, Mapping):
        for name, value in document.items():
            if str(name).lower() == key:
                return value
        for value in document.values():
            found = _config_value(value, key)
            if found is not None:
                return found
    elif isinstance(document, list):
        for value in document:
            found = _config_value(value, key)
            if found is not None:
                return found
    return None


def _cublas_setting(audit: AuditRecorder, capsule: CapsuleReader) -> Any:
    """The cuBLAS workspace setting the config records. The reader parses config.yaml only once it is a
    bounded tree, so the key search below visits at most its budget of nodes (an alias bomb is not_run)."""
    return _config_value(audit.need(capsule.config), CUBLAS_KEY)


def test_flags(run: Run, capsule: CapsuleReader, audit: AuditRecorder) -> None:
    """DET-02, DET-05: ``seed.deterministic`` not true, ``seed.cudnn_benchmark`` not false, or a CUDA
    software run claiming determinism whose ``config.yaml`` does not record ``cublas_workspace_config``
    (any case, any depth) as ``:4096:8`` or ``:16:8``, is disclosed (topic ``determinism``).
    """
    seed = _seed_block(audit, run)
    if seed is None:
        audit.not_run("run.json has no seed block (reported by determinism.seeds_recorded)")
    deterministic, benchmark = seed.get("deterministic"), seed.get("cudnn_benchmark")
    environment = run.get("environment")
    cuda = environment.get("cuda") if isinstance(environment, Mapping) else None
    findings = []
    if deterministic is not True:
        findings.append(
            "deterministic algorithms are off (seed.deterministic is not true): reruns of one seed differ "
            "by a run-to-run band"
        )
    if benchmark is not False:
        findings.append(
            f"cudnn.benchmark is {benchmark!r}"
            + (" although the run claims determinism" if deterministic is True else "")
            + ": autotuned kernels differ between runs"
        )
    cublas = None
    if cuda and deterministic is True and run.kind == "software":
        cublas = _cublas_setting(audit, capsule)
        if cublas not in CUBLAS_VALUES:
            findings.append(
                f"a CUDA run claims determinism but config.yaml records {CUBLAS_KEY.upper()}={cublas!r} "
                f"(deterministic cuBLAS needs one of {sorted(CUBLAS_VALUES)})"
            )
    audit.evidence(deterministic=deterministic, cudnn_benchmark=benchmark, cuda=cuda, cublas_workspace=cublas)
    if not findings:
        audit.note(
            "deterministic algorithms on, cudnn.benchmark off"
            + (f", {CUBLAS_KEY.upper()}={cublas}" if cublas else " (CPU run: no cuBLAS workspace needed)")
        )
        return
    audit.disclose(
        f"run {run.run_id}: run.json seed flags: {'; '.join(findings)}",
        affects=[REPRODUCIBILITY],
        topic="determinism",
    )


def test_declared_vs_achieved(run: Run, audit: AuditRecorder) -> None:
    """DET-03, DET-08: a seeded run whose data-loader workers are not seeded (``seed.worker_seeding``), a
    dirty or unknown-dirty source tree, or a source with neither commit nor tree hash is disclosed.
    """
    seed = _seed_block(audit, run)
    if seed is None:
        audit.not_run("run.json has no seed block (reported by determinism.seeds_recorded)")
    source = run.get("source")
    source = source if isinstance(source, Mapping) else {}
    findings = []
    if seed.get("values") and seed.get("worker_seeding") is not True:
        findings.append(
            "seeded, but data-loader workers are not seeded (seed.worker_seeding is not true): "
            "augmentation draws repeat or vary across workers"
        )
    if source.get("dirty") is True:
        findings.append(
            f"the source tree was dirty at commit {source.get('commit')}: the commit does not reproduce the code"
        )
    elif source.get("dirty") is None and source.get("commit"):
        findings.append(f"whether the source tree at commit {source.get('commit')} was dirty is unknown")
    if not source.get("commit") and not source.get("tree_sha256"):
        findings.append("no commit and no tree hash identify the source that trained the run")
    audit.evidence(
        worker_seeding=seed.get("worker_seeding"),
        commit=source.get("commit"),
        dirty=source.get("dirty"),
        tree_sha256=source.get("tree_sha256"),
    )
    if not findings:
        audit.note("seeding reaches the data-loader workers; the source is a clean, identified commit")
        return
    audit.disclose(
        f"run {run.run_id}: reproducibility declared, not achieved: {'; '.join(findings)}",
        affects=[REPRODUCIBILITY],
    )
