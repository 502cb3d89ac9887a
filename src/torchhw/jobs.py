"""One description of a distributed job, two schedulers: Slurm and Kubernetes (Kubeflow).

    job = Job("digits-ddp", script="/shared/code/train.py", nodes=2, gpus_per_node=4)
    print(slurm_script(job))             # sbatch job.sbatch
    print(pytorchjob_yaml(job))          # kubectl apply -f job.yaml  (Kubeflow training operator)

Everything that must agree between the two (nodes, processes per node, CPUs, memory, GPUs,
restarts, the program) is derived from the one :class:`Job`, and the torchrun command comes
from :func:`torchhw.agents.torchrun_command`, the course's only builder of torchrun arguments.
Both files are run for real by the tests: the Slurm script under a stand-in for ``srun`` and
``scontrol`` on 127.0.0.1, the PyTorchJob's container command with the operator's variables.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from .agents import torchrun_command


@dataclass
class Job:
    """A multi-node torchrun job. ``procs_per_node`` defaults to one per GPU, else 1."""

    name: str
    script: str = "/shared/code/train.py"  # on storage every node sees (or in the image)
    args: list[str] = field(default_factory=lambda: ["--checkpoint", "/shared/ckpt/job.pt"])
    nodes: int = 2
    gpus_per_node: int = 0
    procs_per_node: int | None = None
    cpus_per_proc: int = 4
    memory_gib: int = 16
    shm_gib: int = 8                       # /dev/shm for DataLoader workers and NCCL
    time_limit: str = "01:00:00"           # Slurm's HH:MM:SS
    max_restarts: int = 3                  # torchrun restarts the workers after a failure
    setup: list[str] = field(default_factory=lambda: ["source /shared/venv/bin/activate"])
    shared_dir: str = "/shared/ckpt"       # checkpoints: a volume every node mounts
    image: str = "registry.example.org/torchhw:latest"  # a container with torch and the code
    partition: str | None = None

    def __post_init__(self) -> None:
        if self.procs_per_node is None:
            self.procs_per_node = self.gpus_per_node or 1
        if self.nodes < 1 or self.procs_per_node < 1:
            raise ValueError("a job needs at least one node and one process per node")
        if self.gpus_per_node and self.procs_per_node > self.gpus_per_node:
            raise ValueError(f"{self.procs_per_node} processes per node but only "
                             f"{self.gpus_per_node} GPUs: NCCL needs one GPU per process")
        if not self.name.replace("-", "").isalnum() or not self.name.islower():
            raise ValueError(f"job name {self.name!r}: use lower-case letters, digits and '-' "
                             f"(Kubernetes requires it)")

    @property
    def world_size(self) -> int:
        return self.nodes * (self.procs_per_node or 1)

    @property
    def cpus_per_node(self) -> int:
        return self.cpus_per_proc * (self.procs_per_node or 1)


def _shell_word(arg: str) -> str:
    """Quote for bash, leaving $variables to expand (inside double quotes)."""
    return f'"{arg}"' if "$" in arg else shlex.quote(arg)


def _setup_lines(setup: list[str]) -> list[str]:
    """The environment set-up, telling shellcheck not to look for files only the cluster has."""
    out: list[str] = []
    for line in setup:
        if line.startswith(("source ", ". ")):
            out.append("# shellcheck source=/dev/null")
        out.append(line)
    return out


def slurm_script(job: Job) -> str:
    """An sbatch script: one torchrun agent per node (srun), c10d rendezvous on the first node."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1            # one torchrun agent per node; it starts the ranks",
        f"#SBATCH --cpus-per-task={job.cpus_per_node}",
        f"#SBATCH --mem={job.memory_gib}G",
        f"#SBATCH --time={job.time_limit}",
        "#SBATCH --requeue                      # preempted or requeued: back in the queue",
        "#SBATCH --signal=B:USR1@120            # 120 s before the time limit, USR1 to this script",
    ]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    command = torchrun_command(job.script, job.args, nproc_per_node=job.procs_per_node or 1,
                               nnodes=job.nodes, rdzv_endpoint="$head_node:$port",
                               rdzv_id="$SLURM_JOB_ID", max_restarts=job.max_restarts,
                               monitor_interval=None, launcher=["torchrun"])
    lines += [
        "",
        "set -euo pipefail",
        *_setup_lines(job.setup),
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)  # sed reads all: no SIGPIPE',
        "port=$((20000 + SLURM_JOB_ID % 20000))  # per job: jobs sharing a head node do not collide",
        f"export OMP_NUM_THREADS={job.cpus_per_proc}",
        "",
        "# Near the time limit (or when preempted with a signal) go back in the queue; the",
        "# checkpoint in the shared folder lets the next run resume.",
        "trap 'echo \"USR1: requeueing\"; scontrol requeue \"$SLURM_JOB_ID\"' USR1",
        "",
        "# srun does not pass --cpus-per-task on to the step (Slurm 22.05+): say it again.",
        "# --kill-on-bad-exit: one node's agent failing for good ends the other nodes' too.",
        'srun --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1 \\',
        "  " + " ".join(_shell_word(c) for c in command) + " &",
        'wait "$!"  # in the background, so the trap runs as soon as USR1 arrives',
        "",
    ]
    return "\n".join(lines)


def container_command(job: Job) -> list[str]:
    """What each PyTorchJob pod runs: torchrun reads nodes, processes per node, restarts and
    the rendezvous from the PET_* variables the training operator sets from elasticPolicy."""
    return ["torchrun", job.script, *job.args]


def pytorchjob(job: Job) -> dict[str, Any]:
    """A Kubeflow PyTorchJob (training operator, kubeflow.org/v1) as a dict.

    ``elasticPolicy`` with c10d: the operator sets PET_RDZV_BACKEND, PET_RDZV_ENDPOINT,
    PET_NNODES, PET_NPROC_PER_NODE and PET_MAX_RESTARTS for torchrun, so the agents meet
    and restart together. Checkpoints go to a shared volume (a ReadWriteMany claim named
    ``<name>-ckpt``), /dev/shm is memory-backed, and ``runPolicy.backoffLimit`` bounds how
    often pods are recreated.
    """
    resources: dict[str, Any] = {"cpu": str(job.cpus_per_node), "memory": f"{job.memory_gib}Gi"}
    if job.gpus_per_node:
        resources["nvidia.com/gpu"] = str(job.gpus_per_node)  # a quantity: a string

    def worker() -> dict[str, Any]:
        # fresh copies for each use: shared objects would become YAML anchors (&id001)
        return {
            "replicas": job.nodes,
            "restartPolicy": "OnFailure",
            "template": {"spec": {
                "containers": [{
                    "name": "pytorch",  # the operator looks for this container name
                    "image": job.image,
                    "command": container_command(job),
                    "env": [{"name": "OMP_NUM_THREADS", "value": str(job.cpus_per_proc)}],
                    "resources": {"limits": dict(resources), "requests": dict(resources)},
                    "volumeMounts": [{"name": "checkpoints", "mountPath": job.shared_dir},
                                     {"name": "dshm", "mountPath": "/dev/shm"}],
                }],
                "volumes": [
                    {"name": "checkpoints", "persistentVolumeClaim": {"claimName": f"{job.name}-ckpt"}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{job.shm_gib}Gi"}},
                ],
            }},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job.name},
        "spec": {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": job.nodes,
                              "maxReplicas": job.nodes, "maxRestarts": job.max_restarts},
            "nprocPerNode": str(job.procs_per_node),
            "runPolicy": {"backoffLimit": job.max_restarts, "cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {"Worker": worker()},
        },
    }


def operator_env(job: Job, rdzv_endpoint: str) -> dict[str, str]:
    """The variables the training operator gives each pod of an elastic PyTorchJob."""
    return {"PET_NNODES": f"{job.nodes}:{job.nodes}", "PET_NPROC_PER_NODE": str(job.procs_per_node),
            "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": rdzv_endpoint,
            "PET_RDZV_ID": job.name, "PET_MAX_RESTARTS": str(job.max_restarts)}


def pytorchjob_yaml(job: Job) -> str:
    """The PyTorchJob manifest as YAML, ready for ``kubectl apply -f``."""
    return yaml.safe_dump(pytorchjob(job), sort_keys=False)
