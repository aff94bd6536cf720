"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd on 127.0.0.1, in a temp dir.

Debian's ``slurm-wlm`` and ``munge``, configured from scratch in the test's folder (its own munge key and
socket, state and spool folders, free ports), so nothing of the machine's own configuration is read or
changed. Every daemon runs as the current user (``SlurmUser`` and ``SlurmdUser``), who also submits, so
it needs no root. It skips with the reason when the daemons are missing; CI installs them, so nothing
skips there.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
READY_S = 60

CONFIG = """ClusterName=runaudit
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={home}/munge/munge.sock
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool
SlurmctldPidFile={home}/slurmctld.pid
SlurmdPidFile={home}/slurmd.pid
SlurmctldLogFile={home}/log/slurmctld.log
SlurmdLogFile={home}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait={kill_wait}
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Slurm:
    home: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment every Slurm command of this cluster runs with."""
        return {**os.environ, "SLURM_CONF": str(self.home / "slurm.conf")}

    def run(self, *argv: str, check: bool = True, environment: Mapping[str, str] | None = None) -> str:
        done = subprocess.run(
            list(argv),
            env={**self.env, **(environment or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}\n{self.logs()}"
            )
        return done.stdout

    def submit(self, script: Path, environment: Mapping[str, str] | None = None) -> str:
        """sbatch ``script`` from a shell with ``environment`` too (sbatch exports it to the tasks); the job id."""
        return self.run("sbatch", "--parsable", str(script), environment=environment).strip().split(";")[0]

    def queued(self, job: str) -> list[str]:
        """``<task id> <state>`` of each task of ``job`` still in the queue."""
        return self.run("squeue", "-h", "-j", job, "-o", "%i %T", check=False).split("\n")[:-1]

    def logs(self) -> str:
        return "".join(
            f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]) + "\n"
            for path in sorted((self.home / "log").glob("*.log"))
        )

    def stop(self) -> None:
        subprocess.run(
            ["scancel", "--full", "--quiet", "-u", pwd.getpwuid(os.getuid()).pw_name],
            env=self.env,
            check=False,
            timeout=30,
        )
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()


@contextlib.contextmanager
def running_slurm(home: Path, *, cpus: int = 2, kill_wait_s: int = 30) -> Iterator[Slurm]:
    """munged, slurmctld and slurmd in the foreground under ``home``, answering ``sinfo`` with an idle node;
    every job cancelled and every daemon stopped on the way out."""
    missing = [tool for tool in DAEMONS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"a real Slurm needs {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")
    for folder in ("munge", "state", "spool", "log"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    (home / "munge").chmod(0o700)
    subprocess.run(
        ["mungekey", "-c", "-f", "-k", str(home / "munge" / "munge.key")], check=True, capture_output=True
    )
    (home / "slurm.conf").write_text(
        CONFIG.format(
            home=home,
            user=pwd.getpwuid(os.getuid()).pw_name,
            ctld_port=_free_port(),
            slurmd_port=_free_port(),
            cpus=cpus,
            kill_wait=kill_wait_s,
        ),
        encoding="utf-8",
    )
    cluster = Slurm(home)
    conf = str(home / "slurm.conf")
    munge = home / "munge"
    commands = [
        ["munged", "-F", "-f", f"--key-file={munge / 'munge.key'}", f"--socket={munge / 'munge.sock'}",
         f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'seed'}"],
        ["slurmctld", "-D", "-i", "-f", conf],
        ["slurmd", "-D", "-N", "localhost", "-f", conf],
    ]  # fmt: skip
    try:
        for command in commands:
            cluster.processes.append(
                subprocess.Popen(
                    command, env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            )
            if command[0] == "munged":
                _wait_for(lambda: (munge / "munge.sock").exists(), "munged's socket", cluster)
        _wait_for(
            lambda: "idle" in cluster.run("sinfo", "-h", "-o", "%T", check=False), "an idle node", cluster
        )
        yield cluster
    finally:
        cluster.stop()


def _wait_for(ready: Callable[[], bool], what: str, cluster: Slurm) -> None:
    deadline = time.monotonic() + READY_S
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"the test cluster never showed {what}:\n{cluster.logs()}")
        time.sleep(0.2)
