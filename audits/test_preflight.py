"""Preflight gate (on the box): can this machine carry the run to its end without losing it?

Every reading comes from the kernel of the machine pytest runs on (statvfs, cgroup files, /dev/shm,
/proc, nvidia-smi), so run these on the box: ``runaudit audit <id> --host ... -- -m preflight``. They
need no sealed capsule (marked ``live``). A check whose budget was not given reports ``not_run`` and
names the ``--runaudit-budget`` key; a disk or memory already at its alarm level fails regardless.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from runaudit import cadence, clock, gpu, host
from runaudit.fixtures.preflight import Place, Preflight, places
from runaudit.fixtures.verdicts import AuditRecorder
from runaudit.platforms import STALE_AFTER_MONTHS
from runaudit.run import Run

pytestmark = [pytest.mark.preflight, pytest.mark.live]

FULL = 0.95  # the seed's patrol escalates at 95 % of bytes or inodes
MARGIN = 1.10
MEMORY_ALARM = 0.90
SHM_PER_JOB = 1 << 30
PROBE_BYTES = 4096
GiB = float(1 << 30)


def _measured(places_: list[Place]) -> list[tuple[Place, host.Space]]:
    """Each measurable place once per filesystem (data and durable often share one)."""
    seen: dict[int, tuple[Place, host.Space]] = {}
    for place in places_:
        if place.path is not None:
            measured = host.space(place.path)
            seen.setdefault(measured.device, (place, measured))
    return list(seen.values())


def _not_measurable(audit: AuditRecorder, places_: list[Place]) -> list[tuple[Place, host.Space]]:
    measured = _measured(places_)
    if not measured:
        audit.not_run("no data or durable folder can be measured here: " + "; ".join(p.note for p in places_))
    return measured


def test_disk_bytes(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Each filesystem holding the data or durable folder (measured once) fails when ≥ 95 % full, or when its
    free space is below the ``disk`` budget × 1.10 (not_run without that budget).
    """
    measured = _not_measurable(audit, places(run, preflight.profile))
    audit.evidence(
        places={
            place.role: {
                "path": str(place.path),
                "measured_at": str(space.measured_at),
                "free_bytes": space.free_bytes,
                "total_bytes": space.total_bytes,
                "note": place.note,
            }
            for place, space in measured
        }
    )
    full = [
        f"{place.role} {space.measured_at} is {space.used_fraction:.0%} full"
        for place, space in measured
        if space.used_fraction >= FULL
    ]
    audit.require(
        not full, f"run {run.run_id}: {'; '.join(full)} (alarm at {FULL:.0%}): free space before launching"
    )
    need = preflight.budget.disk
    if need is None:
        audit.not_run(
            "no disk budget: pass --runaudit-budget disk=SIZE (checkpoints x checkpoint size + scratch)"
        )
    short = [
        f"{place.role} {space.measured_at} has {space.free_bytes / GiB:.1f} GiB free"
        for place, space in measured
        if space.free_bytes < need * MARGIN
    ]
    audit.require(
        not short,
        f"run {run.run_id}: {'; '.join(short)}, the run needs {need / GiB:.1f} GiB plus {MARGIN - 1:.0%} margin",
    )
    audit.note(f"{len(measured)} filesystem(s) hold {need / GiB:.1f} GiB with margin")


def test_disk_inodes(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Each filesystem holding the data or durable folder fails when ≥ 95 % of its inodes are used, or when
    its free inodes are below the ``files`` budget × 1.10 (not_run without that budget).
    """
    measured = _not_measurable(audit, places(run, preflight.profile))
    cap = preflight.profile.facts["inode_cap"] if preflight.profile else None
    audit.evidence(
        profile_inode_cap=cap,
        places={
            place.role: {
                "measured_at": str(space.measured_at),
                "free_inodes": space.free_inodes,
                "total_inodes": space.total_inodes,
            }
            for place, space in measured
        },
    )
    full = [
        f"{place.role} {space.measured_at} has {space.inode_used_fraction:.0%} of its inodes used"
        for place, space in measured
        if space.inode_used_fraction >= FULL
    ]
    audit.require(
        not full, f"run {run.run_id}: {'; '.join(full)} (alarm at {FULL:.0%}); 'No space left' comes next"
    )
    need = preflight.budget.files
    if need is None:
        audit.not_run("no file budget: pass --runaudit-budget files=N (checkpoints + every render + logs)")
    short = [
        f"{place.role} {space.measured_at} has {space.free_inodes} free inodes"
        for place, space in measured
        if space.total_inodes and space.free_inodes < need * MARGIN
    ]
    audit.require(
        not short, f"run {run.run_id}: {'; '.join(short)}, the run creates {need} files plus margin"
    )
    audit.note(f"{len(measured)} filesystem(s) have inodes for {need} files")


def test_memory_limit(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Fails when usage already exceeds 90 % of the cgroup memory limit, or when the ``memory`` budget
    exceeds 90 % of the ceiling (the cgroup limit, else ``MemTotal``).

    Past the limit the kernel OOM-kills the run with a bare "Killed".
    """
    limit = host.memory_limit()
    audit.evidence(
        limit_bytes=limit.limit_bytes,
        source=limit.source,
        usage_bytes=limit.usage_bytes,
        oom_kills=limit.oom_kills,
        mem_total_bytes=limit.total_bytes,
    )
    ceiling = limit.effective_bytes
    where = limit.source if limit.limit_bytes is not None else f"MemTotal; {limit.source} sets no limit"
    if ceiling is None:
        audit.not_run(f"neither a cgroup memory limit nor MemTotal could be read ({limit.source})")
    if limit.usage_bytes is not None and limit.limit_bytes is not None:
        audit.require(
            limit.usage_bytes <= MEMORY_ALARM * limit.limit_bytes,
            f"run {run.run_id}: {limit.usage_bytes / GiB:.1f} of {limit.limit_bytes / GiB:.1f} GiB of the cgroup "
            f"limit already in use (alarm at {MEMORY_ALARM:.0%}; {limit.source})",
        )
    need = preflight.budget.memory
    if need is None:
        audit.not_run("no memory budget: pass --runaudit-budget memory=SIZE (main process + workers at peak)")
    audit.require(
        need <= MEMORY_ALARM * ceiling,
        f"run {run.run_id}: needs {need / GiB:.1f} GiB but the limit is {ceiling / GiB:.1f} GiB ({where}); "
        "the kernel OOM-kills with a bare 'Killed'",
    )
    audit.note(f"{need / GiB:.1f} GiB fits under {ceiling / GiB:.1f} GiB ({where})")


def test_shm(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """With a ``workers`` budget above 0, ``/dev/shm`` must exist and hold the ``shm`` budget (default
    1 GiB), else fails: data-loader workers die with SIGBUS.
    """
    workers = preflight.budget.workers
    if workers is None:
        audit.not_run(
            "no worker count: pass --runaudit-budget workers=N (dataloader workers share tensors via /dev/shm)"
        )
    if workers == 0:
        audit.note("no dataloader workers: /dev/shm is not used")
        return
    shm = Path("/dev/shm")
    audit.require(shm.is_dir(), f"run {run.run_id}: {workers} workers but this machine has no /dev/shm")
    size = host.space(shm).total_bytes
    need = preflight.budget.shm or SHM_PER_JOB
    audit.evidence(shm_bytes=size, need_bytes=need, workers=workers)
    audit.require(
        size >= need,
        f"run {run.run_id}: /dev/shm is {size / (1 << 20):.0f} MiB, {workers} workers need {need / (1 << 20):.0f} MiB "
        "(workers die with SIGBUS: --shm-size / --ipc=host, or fewer workers)",
    )
    audit.note(f"/dev/shm {size / GiB:.1f} GiB for {workers} workers")


def test_gpu_health(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Fails on a GPU breaking rules PF04–PF07 (hard faults, throttling, VRAM held by dead processes,
    unaccounted memory above 5 % of total), on fewer GPUs than the ``gpus`` budget, or on an ``nvidia-smi``
    that does not answer; no ``nvidia-smi`` is not_applicable unless ``gpus`` expects one.
    """
    expected = preflight.budget.gpus
    if shutil.which("nvidia-smi") is None:
        audit.require(
            not expected, f"run {run.run_id}: expects {expected} GPU(s) but nvidia-smi is not installed here"
        )
        audit.not_applicable("no NVIDIA GPU on this machine (nvidia-smi is not installed)")
    try:
        gpus, apps, _ = gpu.query()
    except (gpu.GpuQueryError, subprocess.TimeoutExpired) as exc:
        audit.fail(f"run {run.run_id}: nvidia-smi did not answer: {exc}")
    health = gpu.judge(gpus, apps, host.process_states())
    audit.evidence(gpus=health.evidence, warnings=health.warnings)
    if expected:
        audit.require(
            len(gpus) >= expected,
            f"run {run.run_id}: expects {expected} GPU(s), nvidia-smi shows {len(gpus)}",
        )
    audit.require(not health.problems, f"run {run.run_id}: {'; '.join(health.problems)}")
    audit.note(f"{len(gpus)} GPU(s) healthy" + (f"; {'; '.join(health.warnings)}" if health.warnings else ""))


def test_env_hygiene(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Fails on conda base (unless the profile's image is the environment), an interpreter other than the
    profile's ``PY``, a workstation outside a project environment, torch from the user site on a rental,
    or, on a GPU machine, a CPU torch, a torch CUDA newer than the driver's or ``torch.cuda.is_available()``
    false.
    """
    profile = preflight.profile
    problems = []
    base_allowed = bool(profile and profile.env["base_is_env"])
    if host.in_conda_base() and not base_allowed:
        problems.append(f"{sys.executable} is conda base; create and use the project's own environment")
    wanted = profile.setting("PY").value() if profile else None
    if wanted and os.path.realpath(wanted) != os.path.realpath(sys.executable):
        problems.append(f"running {sys.executable}, but the profile's interpreter is {wanted}")
    if profile and profile.kind == "workstation" and not host.in_project_env():
        problems.append(f"{sys.executable} is not a project environment (venv or conda env)")
    spec = importlib.util.find_spec("torch")
    user_site = site.getusersitepackages()
    if (
        spec is not None
        and spec.origin
        and profile
        and profile.kind != "workstation"
        and spec.origin.startswith(user_site)
    ):
        problems.append(f"torch comes from the user site {user_site}, shadowing the image's build")
    audit.evidence(executable=sys.executable, prefix=sys.prefix, torch=spec.origin if spec else None)
    if shutil.which("nvidia-smi") is not None and spec is not None:
        problems += _cuda_problems(audit)
    audit.require(not problems, f"run {run.run_id}: {'; '.join(problems)}")
    audit.note(f"{sys.executable}" + ("" if spec else " (torch not installed here)"))


def _cuda_problems(audit: AuditRecorder) -> list[str]:
    import torch  # only on a GPU machine: this is the check that torch can use it

    version = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60).stdout
    driver = host.driver_cuda_version(version)
    audit.evidence(
        torch_cuda=torch.version.cuda, driver_cuda=driver, cuda_available=torch.cuda.is_available()
    )
    problems = []
    if torch.version.cuda is None:
        problems.append(f"torch {torch.__version__} is a CPU build on a GPU machine")
    elif driver and host.version_tuple(torch.version.cuda) > host.version_tuple(driver):
        problems.append(f"torch needs CUDA {torch.version.cuda} but the driver supports up to {driver}")
    if not torch.cuda.is_available():
        problems.append("torch.cuda.is_available() is False although nvidia-smi sees a GPU")
    return problems


def test_durable_writable(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Fails unless a 4 KiB probe file can be exclusively created, fsynced, read back and removed in the
    project root (``--runaudit-root``; ``--remote-root`` on a box: where ``active/`` and ``export/`` will
    be written) and in each durable folder of the profile, and ``export/.partial`` and ``export/`` sit on
    one filesystem (closing is an atomic rename). Discloses when ``active/`` and ``export/`` do not (closing
    must then copy the capsule instead of linking it).
    """
    durable = [place for place in places(run, preflight.profile) if place.role == "durable"]
    targets = [place.path for place in durable if place.path is not None]
    if run.root not in targets:
        targets.insert(0, run.root)
    problems = []
    for folder in targets:
        if not folder.is_dir():
            problems.append(f"{folder} does not exist: is the durable mount there?")
            continue
        probe = folder / f".runaudit-probe-{secrets.token_hex(4)}"
        payload = secrets.token_bytes(PROBE_BYTES)
        try:
            descriptor = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.write(descriptor, payload)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            if probe.read_bytes() != payload:
                problems.append(f"{probe} read back other bytes than were written")
        except OSError as exc:
            problems.append(f"{folder}: cannot create and write a file ({exc.strerror})")
        finally:
            with contextlib.suppress(OSError):  # a read-only folder: the problem above says so
                probe.unlink(missing_ok=True)
    exports = [run.root / "export", run.root / "export" / ".partial"]
    if all(folder.is_dir() for folder in exports) and len({folder.stat().st_dev for folder in exports}) > 1:
        problems.append(
            "export/.partial and export/ are on different filesystems: closing would not be atomic"
        )
    audit.evidence(durable=[str(folder) for folder in targets])
    audit.require(not problems, f"run {run.run_id}: {'; '.join(problems)}")
    audit.note(f"wrote, read back and removed a probe in {', '.join(str(folder) for folder in targets)}")
    apart = [run.root / "active", run.root / "export"]
    if all(folder.is_dir() for folder in apart) and len({folder.stat().st_dev for folder in apart}) > 1:
        audit.disclose(
            "active/ and export/ are on different filesystems: closing copies the capsule (it needs as "
            "much free space again in export/) instead of linking it (docs/capsule.md §1)",
            affects=["runaudit close"],
        )


def test_detach_available(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Fails when neither tmux nor the profile's ``setsid nohup`` fallback is installed (``sbatch`` for a
    Slurm profile), and discloses the fallback, which survives only an SSH drop; platform-run detach
    (``k8s-job``, ``kaggle-commit``, ``onstart``) is not_applicable.
    """
    detach = preflight.profile.detach if preflight.profile else {"primitive": "tmux", "fallback": "nohup"}
    primitive, fallback = detach["primitive"], detach["fallback"]
    audit.evidence(primitive=primitive, fallback=fallback, tmux=shutil.which("tmux"))
    if primitive in ("k8s-job", "kaggle-commit", "onstart"):
        audit.not_applicable(
            f"the profile detaches with {primitive}, which the platform runs, not this machine"
        )
    if primitive == "sbatch":
        audit.require(
            shutil.which("sbatch") is not None,
            f"run {run.run_id}: the profile detaches with sbatch, which is not installed here",
        )
        audit.note("sbatch is available")
        return
    if shutil.which("tmux"):
        audit.note(f"tmux at {shutil.which('tmux')}")
        return
    has_fallback = fallback == "nohup" and shutil.which("setsid") and shutil.which("nohup")
    audit.require(
        bool(has_fallback),
        f"run {run.run_id}: neither tmux nor the profile's fallback ({fallback}) is available",
    )
    note = detach.get("note", "")
    audit.disclose(
        f"tmux is missing; runs detach with setsid nohup, which survives an SSH drop only{f' ({note})' if note else ''}",
        affects=["run:detach"],
    )


def test_profile_stamps(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Fails when a stamp of the ``--runaudit-profile`` is dated in the future, or a governing teardown fact
    (teardown, billing, clocks) was last verified more than 6 months ago; not_run without a profile.
    """
    profile = preflight.profile
    if profile is None:
        audit.not_run("no --runaudit-profile given: the platform's teardown facts cannot be date-checked")
    today = clock.today()
    governing = profile.governing_stamps()
    audit.evidence(
        profile=profile.name,
        measured_live=profile.measured_live(),
        stamps={
            stamp.fact: {
                "verified": stamp.verified,
                "age_months": stamp.age_months(today),
                "trust": stamp.trust,
            }
            for stamp in profile.stamps
        },
    )
    future = [f"{stamp.fact} ({stamp.verified})" for stamp in profile.stamps if stamp.age_months(today) < 0]
    audit.require(not future, f"profile {profile.name}: stamped in the future: {', '.join(future)}")
    stale = [f"{stamp.fact} ({stamp.verified})" for stamp in profile.stale_stamps(today)]
    audit.require(
        not stale,
        f"profile {profile.name}: governing teardown fact(s) older than {STALE_AFTER_MONTHS} months: "
        f"{', '.join(stale)}; re-verify them with the provider before `runaudit down`",
    )
    if not governing:
        audit.note(f"profile {profile.name} has no billable teardown facts to date")
        return
    audit.note(
        f"{len(governing)} governing fact(s) of {profile.name} verified within {STALE_AFTER_MONTHS} months"
    )


def test_checkpoint_cadence(run: Run, preflight: Preflight, audit: AuditRecorder) -> None:
    """Discloses when the run checkpoints more than 2× off the Young/Daly interval √(2·μ·C) (μ the
    ``mtbf`` budget, C a save's seconds), and when the profile's spot grace is shorter than one save.
    C and the interval are measured from the writer's recorded saves while the run trains (else the
    ``save`` and ``every`` budget keys); not_run without a save time, or without ``mtbf`` when the grace
    leaves nothing to say.
    """
    found = cadence.measured(run.path)
    save = found.save_s if found.save_s is not None else preflight.budget.save
    every = found.every_s if found.every_s is not None else preflight.budget.every
    mtbf = preflight.budget.mtbf
    grace = preflight.profile.facts.get("spot_grace_s") if preflight.profile else None
    audit.evidence(save_s=save, every_s=every, saves_measured=found.saves, mtbf_s=mtbf, spot_grace_s=grace)
    if save is None or save <= 0:  # a measured save can round to zero: nothing to weigh
        why = found.problem or "the recorded saves took no measurable time"
        audit.not_run(f"no save time: {why}; pass --runaudit-budget save=SECONDS (one checkpoint write)")
    findings: list[tuple[str, str]] = []
    if isinstance(grace, (int, float)) and not isinstance(grace, bool) and save > grace:
        findings.append(
            (
                f"a checkpoint save takes {save:.1f} s but the profile's spot grace is {grace} s: a preemption "
                "notice leaves no time to save, only the cadence protects the run",
                "resume after an interruption",
            )
        )
    if mtbf is None:
        if not findings:
            audit.not_run(
                "no interruption rate: pass --runaudit-budget mtbf=DURATION (e.g. 3h between spot reclaims)"
            )
        audit.note("no mtbf budget: the cadence was not weighed")
    else:
        optimum = cadence.young_daly(mtbf, save)
        audit.evidence(young_daly_s=round(optimum, 1))
        if every is None:
            audit.note(f"checkpoint about every {optimum:.0f} s (Young/Daly, C={save:.1f} s, μ={mtbf:.0f} s)")
        elif every > optimum * cadence.FAR_OFF or every < optimum / cadence.FAR_OFF:
            lost, least = cadence.wasted_share(every, mtbf, save), cadence.wasted_share(optimum, mtbf, save)
            findings.append(
                (
                    f"run {run.run_id} checkpoints every {every:.0f} s; Young/Daly gives {optimum:.0f} s for saves "
                    f"of {save:.1f} s and an interruption every {mtbf:.0f} s: about {lost:.1%} of its time goes "
                    f"to saving and redoing work, against {least:.1%} at the optimum",
                    "wall time and cost",
                )
            )
        else:
            audit.note(f"checkpoints every {every:.0f} s, within 2× of Young/Daly's {optimum:.0f} s")
    for message, affects in findings:
        audit.disclose(message, affects=[affects])
