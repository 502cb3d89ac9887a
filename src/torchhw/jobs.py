"""One description of a distributed job, three ways to run it: torchrun, Slurm, Kubernetes.

    job = Job("digits-ddp", nodes=2, gpus_per_node=4, args=["train", "--steps", "1000"])
    print(slurm_script(job))             # sbatch job.sbatch
    print(pytorchjob_yaml(job))          # kubectl apply -f job.yaml  (Kubeflow training operator)
    torchrun_args(job, "head:29500")     # what each node runs

Everything that must agree between the three (nodes, processes per node, CPUs, memory,
GPUs, restarts, the command) is derived from the one :class:`Job`, so they cannot drift.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass
class Job:
    """A multi-node torchrun job. ``procs_per_node`` defaults to one per GPU, else 1."""

    name: str
    module: str = "torchhw.workers"
    args: list[str] = field(default_factory=lambda: ["train", "--steps", "1000"])
    nodes: int = 2
    gpus_per_node: int = 0
    procs_per_node: int | None = None
    cpus_per_proc: int = 4
    memory_gib: int = 16
    time_limit: str = "01:00:00"           # Slurm's HH:MM:SS
    max_restarts: int = 3                  # torchrun restarts the workers after a failure
    port: int = 29500                      # rendezvous port on the first node
    image: str = "registry.example.org/torchhw:latest"  # a container with torch and torchhw
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
        return self.nodes * self.procs_per_node

    @property
    def cpus_per_node(self) -> int:
        return self.cpus_per_proc * self.procs_per_node


def torchrun_args(job: Job, rdzv_endpoint: str, rdzv_id: str = "$JOB_ID") -> list[str]:
    """What each node runs: torchrun with c10d rendezvous at ``rdzv_endpoint``."""
    return ["torchrun", f"--nnodes={job.nodes}", f"--nproc-per-node={job.procs_per_node}",
            f"--max-restarts={job.max_restarts}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}",
            "-m", job.module, *job.args]


def slurm_script(job: Job) -> str:
    """An sbatch script: one torchrun agent per node (srun), rendezvous on the first node."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1           # one torchrun agent per node; it starts the ranks",
        f"#SBATCH --cpus-per-task={job.cpus_per_node}",
        f"#SBATCH --mem={job.memory_gib}G",
        f"#SBATCH --time={job.time_limit}",
    ]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    command = torchrun_args(job, f"$head_node:{job.port}", "$SLURM_JOB_ID")
    lines += [
        "",
        "set -euo pipefail",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"export OMP_NUM_THREADS={job.cpus_per_proc}",
        "",
        "srun " + " ".join(c if c.startswith(("--rdzv-endpoint=$", "--rdzv-id=$")) else shlex.quote(c)
                           for c in command),
        "",
    ]
    return "\n".join(lines)


def pytorchjob(job: Job) -> dict[str, Any]:
    """A Kubeflow PyTorchJob (training operator, kubeflow.org/v1) as a dict.

    The operator starts one pod per node (a Master and nodes-1 Workers) and sets
    PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT, which torchrun reads.
    """
    resources: dict[str, Any] = {"cpu": str(job.cpus_per_node), "memory": f"{job.memory_gib}Gi"}
    if job.gpus_per_node:
        resources["nvidia.com/gpu"] = job.gpus_per_node
    command = ["torchrun", f"--nnodes={job.nodes}", f"--nproc-per-node={job.procs_per_node}",
               f"--max-restarts={job.max_restarts}", "-m", job.module, *job.args]

    def replica(count: int) -> dict[str, Any]:
        # fresh copies for each replica: shared objects would become YAML anchors (&id001)
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [{
                "name": "pytorch",  # the operator looks for this container name
                "image": job.image,
                "command": list(command),
                "env": [{"name": "OMP_NUM_THREADS", "value": str(job.cpus_per_proc)}],
                "resources": {"limits": dict(resources), "requests": dict(resources)},
            }]}},
        }

    specs = {"Master": replica(1)}
    if job.nodes > 1:
        specs["Worker"] = replica(job.nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job.name},
        "spec": {"nprocPerNode": str(job.procs_per_node), "pytorchReplicaSpecs": specs},
    }


def pytorchjob_yaml(job: Job) -> str:
    """The PyTorchJob manifest as YAML, ready for ``kubectl apply -f``."""
    return yaml.safe_dump(pytorchjob(job), sort_keys=False)
