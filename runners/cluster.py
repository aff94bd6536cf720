"""``runaudit cluster``: a sweep's launch or audit job for Slurm (``sbatch --array``) or Kubernetes (Job).

One array task / one indexed pod per roster run. A launch job relaunches the identical command on
requeue or retry (the trainer resumes from its latest checkpoint), forwards the scheduler's SIGTERM to
it and never lets it read stdin; an audit job runs ``pytest --run=<run-id>`` and writes the report
beside the runs. Both are checked structurally before they are printed: there is no scheduler here, so
the checks are the rules a scheduler or the seed's gotchas (K8S2, K8S4, SLURM2, SLURM3) enforce.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from runaudit import isolated
from runaudit.options import REPORT_DIR_OPTION, ROOT_OPTION, RUN_OPTION
from runaudit.roster import read_roster
from runaudit.usage import Refusal

KILL_WAIT_S = 30  # Slurm's default KillWait; the warning must leave time for a full checkpoint save
SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}:\d{2}:\d{2}$|^\d+$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
ROSTER_ENV = "RUNAUDIT_ROSTER"


class ClusterSpecError(Refusal):
    """A rendered job failed its structural check; the message names the field."""


@dataclass(frozen=True)
class Sweep:
    name: str
    roster: tuple[str, ...]
    root: PurePosixPath  # the project root as the job sees it
    purpose: str  # "launch" or "audit"
    command: tuple[str, ...] = ()  # launch only; "{run_id}" and "{root}" are filled per task
    python: str = "python3"
    gpus: int = 0
    cpus: int = 4
    time: str = "24:00:00"
    parallel: int | None = None
    signal_lead_s: int = 120
    image: str = ""
    pvc: str = ""
    audit_args: tuple[str, ...] = ("-m", "custody")

    def task_command(self) -> str:
        """The per-task shell command; ``$RUN_ID`` is set by the surrounding script."""
        if self.purpose == "launch":
            return " ".join(_templated(part.replace("{root}", str(self.root))) for part in self.command)
        args = [
            *isolated.environment_words(),
            self.python,
            "-m",
            "pytest",
            *isolated.pytest_arguments(self.root, null_device="/dev/null"),
            "-q",
            ROOT_OPTION,
            str(self.root),
            REPORT_DIR_OPTION,
            str(self.root / "reports"),
            *self.audit_args,
        ]
        return f'{shlex.join(args)} {RUN_OPTION} "$RUN_ID"'


def _templated(part: str) -> str:
    """One shell word with every ``{run_id}`` expanded from ``$RUN_ID`` and the rest quoted."""
    pieces = part.split("{run_id}")
    return '"$RUN_ID"'.join(shlex.quote(piece) if piece else "" for piece in pieces) or "''"


def _check_sweep(sweep: Sweep) -> None:
    if sweep.purpose not in ("launch", "audit"):
        raise ClusterSpecError(f"purpose {sweep.purpose!r}: expected launch or audit")
    if sweep.purpose == "launch" and not sweep.command:
        raise ClusterSpecError(
            "a launch job needs the training command (after --), with {run_id} where the id goes"
        )
    if not sweep.root.is_absolute():
        raise ClusterSpecError(f"--root {sweep.root}: the project root on the cluster must be absolute")


# -- Slurm ----------------------------------------------------------------------------------------

SBATCH_BODY = """set -euo pipefail
RUN_IDS=({ids})
RUN_ID="${{RUN_IDS[$SLURM_ARRAY_TASK_ID]}}"
export RUNAUDIT_RUN_ID="$RUN_ID" PYTHONUNBUFFERED=1
# The scheduler's warning goes to this shell (--signal=B:...); pass it on, the trainer saves and exits.
trap 'kill -TERM "$child" 2>/dev/null' TERM
srun --cpus-per-task="$SLURM_CPUS_PER_TASK" {command} </dev/null &
child=$!
status=0
wait "$child" || status=$?
if kill -0 "$child" 2>/dev/null; then wait "$child" || status=$?; fi
exit "$status"
"""


def render_sbatch(sweep: Sweep) -> str:
    _check_sweep(sweep)
    array = f"0-{len(sweep.roster) - 1}" + (f"%{sweep.parallel}" if sweep.parallel else "")
    directives = [
        f"--job-name={sweep.name}",
        f"--array={array}",
        f"--time={sweep.time}",
        f"--chdir={sweep.root}",
        "--output=%x-%A_%a.out",
        f"--cpus-per-task={sweep.cpus}",
    ]
    if sweep.gpus:
        directives.append(f"--gres=gpu:{sweep.gpus}")
    if sweep.purpose == "launch":
        directives += [f"--signal=B:TERM@{sweep.signal_lead_s}", "--requeue", "--open-mode=append"]
    header = "#!/bin/bash\n" + f"# runaudit {sweep.purpose} sweep of {len(sweep.roster)} run(s)\n"
    header += "".join(f"#SBATCH {directive}\n" for directive in directives)
    body = SBATCH_BODY.format(
        ids=" ".join(shlex.quote(run_id) for run_id in sweep.roster), command=sweep.task_command()
    )
    script = header + body
    problems = sbatch_problems(script, sweep)
    if problems:
        raise ClusterSpecError(f"rendered sbatch script: {problems[0]}")
    return script


def sbatch_problems(script: str, sweep: Sweep) -> list[str]:
    """What sbatch would reject or silently ignore, and the seed's Slurm gotchas."""
    problems = []
    lines = script.split("\n")
    if "\r" in script:
        problems.append("CR characters: bash reads $'\\r' (save with LF endings)")
    if lines[0] != "#!/bin/bash":
        problems.append(f"line 1: expected #!/bin/bash, found {lines[0]!r}")
    first_command = next(
        (i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")), len(lines)
    )
    late = [i + 1 for i, line in enumerate(lines) if line.startswith("#SBATCH") and i > first_command]
    if late:
        problems.append(f"line {late[0]}: #SBATCH after the first command is ignored by sbatch")
    directives: dict[str, str] = {}
    for line in lines[:first_command]:
        if line.startswith("#SBATCH "):
            key, _, value = line.removeprefix("#SBATCH ").partition("=")
            directives[key] = value
    array = re.fullmatch(r"0-(\d+)(%\d+)?", directives.get("--array", ""))
    if array is None:
        problems.append(f"--array: expected 0-N[%P], found {directives.get('--array')!r}")
    elif int(array.group(1)) != len(sweep.roster) - 1:
        problems.append(
            f"--array: 0-{array.group(1)} covers {int(array.group(1)) + 1} tasks, the roster has {len(sweep.roster)}"
        )
    if not SLURM_TIME.match(directives.get("--time", "")):
        problems.append(f"--time: expected [D-]HH:MM:SS, found {directives.get('--time')!r}")
    if not directives.get("--job-name"):
        problems.append("--job-name: missing")
    gres = directives.get("--gres")
    if gres is not None and not re.fullmatch(r"gpu(:[A-Za-z0-9_]+)?:[1-9]\d*", gres):
        problems.append(f"--gres: expected gpu[:type]:N with N >= 1, found {gres!r}")
    if sweep.purpose == "launch":
        if "--requeue" not in directives:
            problems.append("--requeue: missing; a preempted launch would not come back to resume")
        signal = re.fullmatch(r"B:TERM@(\d+)", directives.get("--signal", ""))
        if signal is None or int(signal.group(1)) < 2 * KILL_WAIT_S:
            problems.append(
                f"--signal: expected B:TERM@<seconds> with at least {2 * KILL_WAIT_S} s (KillWait {KILL_WAIT_S} s "
                f"and a ±60 s jitter, SLURM2), found {directives.get('--signal')!r}"
            )
    ids_line = next((line for line in lines if line.startswith("RUN_IDS=(")), None)
    if (
        ids_line is None
        or tuple(shlex.split(ids_line.removeprefix("RUN_IDS=(").removesuffix(")"))) != sweep.roster
    ):
        problems.append("RUN_IDS: the array does not list the roster in order")
    if "</dev/null" not in script:
        problems.append("the task command must not read stdin (</dev/null)")
    return problems


# -- Kubernetes -----------------------------------------------------------------------------------

K8S_SCRIPT = """set -euo pipefail
read -r -a ids <<< "${roster}"
RUN_ID="${{ids[$JOB_COMPLETION_INDEX]}}"
export RUNAUDIT_RUN_ID="$RUN_ID" PYTHONUNBUFFERED=1
cd {root}
exec {command} </dev/null
"""


def job_name(name: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].strip("-")
    if not DNS_LABEL.match(label):
        raise ClusterSpecError(f"--name {name!r}: cannot form a Kubernetes name from it")
    return label


def render_job(sweep: Sweep) -> dict[str, Any]:
    _check_sweep(sweep)
    if not sweep.image:
        raise ClusterSpecError("a Kubernetes job needs --image (pin it by @sha256 digest)")
    if not sweep.pvc:
        raise ClusterSpecError(
            "a Kubernetes job needs --pvc: the project root must outlive the pod (K8s PVC)"
        )
    name = job_name(sweep.name)
    labels = {"app.kubernetes.io/managed-by": "runaudit", "runaudit/purpose": sweep.purpose}
    container: dict[str, Any] = {
        "name": "runaudit",
        "image": sweep.image,
        "command": [
            "/bin/bash",
            "-c",
            K8S_SCRIPT.format(
                roster=ROSTER_ENV, root=shlex.quote(str(sweep.root)), command=sweep.task_command()
            ),
        ],
        "env": [
            {"name": ROSTER_ENV, "value": " ".join(sweep.roster)},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "volumeMounts": [{"name": "project", "mountPath": str(sweep.root)}],
    }
    if sweep.gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": sweep.gpus}}
    document = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(sweep.roster),
            "parallelism": min(sweep.parallel or len(sweep.roster), len(sweep.roster)),
            "backoffLimit": 4,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": KILL_WAIT_S,
                    "containers": [container],
                    "volumes": [{"name": "project", "persistentVolumeClaim": {"claimName": sweep.pvc}}],
                },
            },
        },
    }
    problems = job_problems(document, sweep)
    if problems:
        raise ClusterSpecError(f"rendered Job: {problems[0]}")
    return document


def _get(document: Any, path: str) -> Any:
    for key in path.split("."):
        document = document.get(key) if isinstance(document, Mapping) else None
    return document


def job_problems(document: Any, sweep: Sweep) -> list[str]:
    """What the API server would reject, and the seed's Kubernetes gotchas (K8S2, K8S4, K8S6)."""
    problems = []
    if _get(document, "apiVersion") != "batch/v1" or _get(document, "kind") != "Job":
        return ["apiVersion/kind: expected batch/v1 Job"]
    if not DNS_LABEL.match(str(_get(document, "metadata.name"))):
        problems.append(f"metadata.name: {_get(document, 'metadata.name')!r} is not a DNS-1123 label")
    if _get(document, "spec.completionMode") != "Indexed":
        problems.append("spec.completionMode: must be Indexed (one pod per roster run)")
    completions = _get(document, "spec.completions")
    if completions != len(sweep.roster):
        problems.append(f"spec.completions: {completions!r}, the roster has {len(sweep.roster)}")
    parallelism = _get(document, "spec.parallelism")
    if not isinstance(parallelism, int) or not 1 <= parallelism <= len(sweep.roster):
        problems.append(f"spec.parallelism: {parallelism!r} is not between 1 and the roster size")
    backoff = _get(document, "spec.backoffLimit")
    if not isinstance(backoff, int) or backoff < 0:
        problems.append(f"spec.backoffLimit: {backoff!r} is not a non-negative integer")
    pod = _get(document, "spec.template.spec") or {}
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append(
            f"spec.template.spec.restartPolicy: {pod.get('restartPolicy')!r}; a Job allows Never or OnFailure (K8S2)"
        )
    containers = pod.get("containers") or []
    if not containers:
        problems.append("spec.template.spec.containers: empty")
    volumes = {volume.get("name"): volume for volume in pod.get("volumes") or []}
    for index, container in enumerate(containers):
        where = f"spec.template.spec.containers[{index}]"
        if not container.get("image"):
            problems.append(f"{where}.image: missing")
        if not container.get("command"):
            problems.append(f"{where}.command: missing")
        limits = _get(container, "resources.limits") or {}
        requests = _get(container, "resources.requests") or {}
        gpu = limits.get("nvidia.com/gpu")
        if "nvidia.com/gpu" in requests and requests["nvidia.com/gpu"] != gpu:
            problems.append(f"{where}.resources: nvidia.com/gpu belongs in limits (requests must equal it)")
        if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 1):
            problems.append(f"{where}.resources.limits.nvidia.com/gpu: {gpu!r} is not a positive integer")
        if sweep.gpus and gpu != sweep.gpus:
            problems.append(
                f"{where}.resources.limits.nvidia.com/gpu: {gpu!r}, the sweep asks for {sweep.gpus} (K8S6)"
            )
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                problems.append(f"{where}.volumeMounts: {mount.get('name')!r} is not a volume of the pod")
        env = {item.get("name"): item.get("value") for item in container.get("env") or []}
        if env.get(ROSTER_ENV) != " ".join(sweep.roster):
            problems.append(f"{where}.env.{ROSTER_ENV}: does not list the roster in order")
    if not any("persistentVolumeClaim" in volume for volume in volumes.values()):
        problems.append(
            "spec.template.spec.volumes: no persistentVolumeClaim; the pod's own disk dies with it"
        )
    return problems


def _main(args: argparse.Namespace) -> int:
    import yaml

    command = tuple(args.command[1:] if args.command[:1] == ["--"] else args.command)
    sweep = Sweep(
        name=args.name,
        roster=tuple(read_roster(args.roster)),
        root=PurePosixPath(args.root),
        purpose=args.purpose,
        command=command,
        python=args.python,
        gpus=args.gpus,
        cpus=args.cpus,
        time=args.time,
        parallel=args.parallel,
        image=args.image or "",
        pvc=args.pvc or "",
    )
    if args.scheduler == "slurm":
        rendered = render_sbatch(sweep)
    else:
        rendered = yaml.safe_dump(render_job(sweep), sort_keys=False, width=1000)
    if args.out is None:
        sys.stdout.write(rendered)
    else:
        args.out.write_text(rendered, encoding="utf-8")
        print(
            f"cluster: wrote the {args.scheduler} {args.purpose} job for {len(sweep.roster)} run(s) to {args.out}"
        )
    return 0


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "cluster",
        help="render a sweep's launch or audit job: Slurm sbatch --array, or a Kubernetes indexed Job",
        usage="runaudit cluster --scheduler {slurm,kubernetes} --purpose {launch,audit} [options] [-- COMMAND ...]",
        description="For launch, put the training command last, after --, with {run_id} (and {root}) placeholders.",
    )
    parser.add_argument("--scheduler", choices=["slurm", "kubernetes"], required=True)
    parser.add_argument("--purpose", choices=["launch", "audit"], required=True)
    parser.add_argument("--roster", type=Path, required=True, help="file: one run id per line (# comments)")
    parser.add_argument("--root", required=True, help="the project root as the job sees it (absolute)")
    parser.add_argument("--name", default="runaudit-sweep", help="job name (default: %(default)s)")
    parser.add_argument("--python", default="python3")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs per task (default: %(default)s)")
    parser.add_argument("--cpus", type=int, default=4)
    parser.add_argument("--time", default="24:00:00", help="Slurm time limit (default: %(default)s)")
    parser.add_argument("--parallel", type=int, help="at most this many tasks at once")
    parser.add_argument("--image", help="Kubernetes: the container image, pinned by @sha256")
    parser.add_argument("--pvc", help="Kubernetes: the PersistentVolumeClaim that holds the project root")
    parser.add_argument("--out", type=Path, help="write here instead of stdout")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND with {run_id} (launch only)")
    parser.set_defaults(handler=_main)
