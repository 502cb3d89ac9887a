"""One description of a distributed job, three ways to submit it: Slurm, PyTorchJob, TrainJob.

    job = Job("digits-ddp", nodes=2, gpus_per_node=8, image="registry.example.org/digits:1.4.2")
    write_job(job, folder)     # train.py, digits-ddp.sbatch, digits-ddp.pytorchjob.yaml,
                               # digits-ddp.trainjob.yaml

- :func:`slurm_script`: ``sbatch`` it. One torchrun agent per node, c10d rendezvous on the
  first node, exclusive nodes, a log per node, and a time-limit notice that ends in a
  checkpoint and a requeue.
- :func:`pytorchjob_yaml`: the Kubeflow training operator's ``PyTorchJob`` (kubeflow.org/v1, the
  operator Kubeflow Trainer v2 replaces), elastic with c10d, gang-scheduled.
- :func:`trainjob_yaml`: Kubeflow Trainer v2's ``TrainJob`` and the ``TrainingRuntime`` it
  runs on (trainer.kubeflow.org/v1alpha1), gang-scheduled; a failure restarts the whole job.

Everything the files must agree on (nodes, processes per node, CPUs, memory, GPUs, restarts,
time-outs, the program) comes from the one :class:`Job`. The Slurm script's torchrun command
comes from :func:`torchhw.distributed.agents.torchrun_command`; the pods' command
(:func:`container_command`) names only the logs and the program, since the operators pass the
rest as PET_* variables. The program is
:mod:`torchhw.distributed.train` (``train_script()`` is its text), plain DDP, which saves a
checkpoint when a stop signal arrives. The tests run every file under a stand-in for its
scheduler, with a crash and a preemption notice, and compare the final weights with a run
without a fault.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .agents import torchrun_command

# The restarts the course's fault drills allow: one fault, one restart. torchrun counts them
# per agent (each node's agent restarts its workers up to --max-restarts times), Kubernetes
# and JobSet per job.
DRILL_RESTARTS = 1
# The Trainer v2 torch plugin's rendezvous port (PET_MASTER_PORT).
TRAINER_MASTER_PORT = 29500


@dataclass
class Job:
    """A multi-node torchrun job. ``procs_per_node`` defaults to one per GPU, else 1.

    Left out, the program and its paths follow ``shared_dir`` and ``name``: the script at
    ``{shared_dir}/code/train.py``, its checkpoint and summary at ``{shared_dir}/ckpt/{name}.pt``
    and ``.json``, the device ``cuda`` when the job asks for GPUs, and the environment
    ``{shared_dir}/venv``. A job submitted again under the same name resumes from that
    checkpoint: give a new run a new name (or another checkpoint path).

    ``stop_marker`` is the file the training script writes when a stop signal has ended in a
    checkpoint: the Slurm script names it in ``$TRAIN_STOP_MARKER`` (train.py's
    ``--stop-marker`` reads it from there) and requeues the job when it finds it, and only then.
    A script of your own must write it too, or a stopped job is not requeued.
    ``time_limit`` is Slurm's, which counts only the time the job runs. ``deadline_s`` (none by
    default) is Kubernetes' ``activeDeadlineSeconds`` for both manifests: it counts from the
    job's creation (Trainer) or the operator's first look at it (PyTorchJob), the time the pods
    wait in the queue for their gang included, and a job past it fails for good, with no
    restart: give it the training time plus the longest wait you accept, or leave it unset.
    """

    name: str
    nodes: int = 2
    gpus_per_node: int = 0
    procs_per_node: int | None = None
    cpus_per_proc: int = 4
    memory_gib_per_proc: int = 16          # host memory (Kubernetes; Slurm gives the whole node)
    shm_gib_per_proc: int = 2              # /dev/shm for DataLoader workers and NCCL, per process
    time_limit: str = "01:00:00"           # Slurm's HH:MM:SS
    notice_s: int = 120                    # the time-limit notice, seconds before the end
    stop_grace_s: int = 60                 # a stopped worker's time to finish a step and save
    max_restarts: int = 3                  # after a failure; see DRILL_RESTARTS for what counts
    max_stalls: int = 3                    # Slurm: requeues in a row whose checkpoint did not move
    shared_dir: str = "/shared"            # code, checkpoints and logs: a volume every node mounts
    script: str | None = None              # the training script, on shared_dir or in the image
    args: list[str] | None = None
    setup: list[str] | None = None         # Slurm: the environment each node needs
    image: str | None = None               # Kubernetes: torch, torchhw and (if not mounted) the code
    # Kubernetes: the gang scheduler's name (scheduler-plugins' coscheduling, as it usually runs);
    # None: the default scheduler, and no gang (the manifests' first comment says what that costs)
    gang_scheduler: str | None = "scheduler-plugins-scheduler"
    deadline_s: int | None = None          # Kubernetes: activeDeadlineSeconds (queueing counts)
    partition: str | None = None
    stop_marker: str | None = None         # written when a stop signal ended in a checkpoint

    def __post_init__(self) -> None:
        if self.procs_per_node is None:
            self.procs_per_node = self.gpus_per_node or 1
        if self.script is None:
            self.script = f"{self.shared_dir}/code/train.py"
        if self.stop_marker is None:
            self.stop_marker = f"{self.shared_dir}/ckpt/{self.name}.stopped"
        if self.args is None:
            self.args = ["--device", "cuda" if self.gpus_per_node else "cpu",
                         "--checkpoint", f"{self.shared_dir}/ckpt/{self.name}.pt",
                         "--out", f"{self.shared_dir}/ckpt/{self.name}.json"]
        if self.setup is None:
            self.setup = [f"source {self.shared_dir}/venv/bin/activate"]
        if self.nodes < 1 or self.procs_per_node < 1:
            raise ValueError("a job needs at least one node and one process per node")
        if self.gpus_per_node and self.procs_per_node > self.gpus_per_node:
            raise ValueError(f"{self.procs_per_node} processes per node but only "
                             f"{self.gpus_per_node} GPUs: NCCL needs one GPU per process")
        if not re.fullmatch(r"[a-z]([a-z0-9-]{0,40}[a-z0-9])?", self.name):
            raise ValueError(f"job name {self.name!r}: use lower-case letters, digits and '-', "
                             f"at most 42 characters, starting with a letter and ending with a "
                             f"letter or digit (Kubernetes names pods and services after it)")
        self.time_limit_s  # refuses a limit Slurm would not read
        if self.time_limit_s <= self.notice_s:
            raise ValueError(f"time_limit {self.time_limit!r} is not longer than the notice "
                             f"({self.notice_s} s before it): give the job more time or a shorter "
                             f"notice_s")
        if self.deadline_s is not None and self.deadline_s <= self.time_limit_s:
            raise ValueError(f"deadline_s {self.deadline_s} is not longer than the time limit "
                             f"({self.time_limit_s} s): a Kubernetes deadline counts the time in "
                             f"the queue too; give the training time plus the wait you accept")
        if self.stop_grace_s + MARKER_WAIT_S >= self.notice_s:
            raise ValueError(f"stop_grace_s ({self.stop_grace_s}) plus the {MARKER_WAIT_S} s the "
                             f"Slurm script may wait for the stop marker on a network file system "
                             f"must be shorter than the notice ({self.notice_s} s): the checkpoint "
                             f"and the requeue must both happen before the time limit")
        if self.max_stalls < 1:
            raise ValueError(f"max_stalls {self.max_stalls}: give 1 or more")

    @property
    def time_limit_s(self) -> int:
        """``time_limit`` in seconds (Slurm's ``HH:MM:SS`` or ``D-HH:MM:SS``)."""
        found = re.fullmatch(r"(?:(\d+)-)?(\d+):([0-5]\d):([0-5]\d)", self.time_limit)
        if not found:
            raise ValueError(f"time_limit {self.time_limit!r}: write it as HH:MM:SS or D-HH:MM:SS "
                             f"(Slurm's form), for example '01:00:00' or '2-00:00:00'")
        days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds

    @property
    def world_size(self) -> int:
        return self.nodes * (self.procs_per_node or 1)

    @property
    def cpus_per_node(self) -> int:
        return self.cpus_per_proc * (self.procs_per_node or 1)

    @property
    def shm_gib(self) -> int:
        """A pod's /dev/shm: each process's DataLoader workers hand batches through it, and NCCL
        keeps buffers there for its peers on the node, so it grows with the processes."""
        return self.shm_gib_per_proc * (self.procs_per_node or 1)

    @property
    def memory_gib(self) -> int:
        """A pod's memory: the processes' and /dev/shm's, which a memory-backed volume counts in."""
        return self.memory_gib_per_proc * (self.procs_per_node or 1) + self.shm_gib

    def pull_policy(self) -> str:
        """``IfNotPresent`` for an image pinned by digest; ``Always`` for a tag, which can be
        pushed again: every node then asks the registry instead of running an older cached
        copy. A push during the job still reaches the pods that start after it: only a digest
        gives every pod the same bytes."""
        return "IfNotPresent" if "@sha256:" in self.pinned_image() else "Always"

    def pinned_image(self) -> str:
        """The image, refused unless pinned: a tag other than ``latest``, or a digest.

        Only a digest pins the bytes: a tag can be pushed again, and a node that has an older
        image of that tag cached runs that one."""
        image = self.image or ""
        last = image.rsplit("/", 1)[-1]
        if not image or ("@sha256:" not in image and (":" not in last or last.endswith(":latest"))):
            raise ValueError(
                f"image {self.image!r}: a Kubernetes job needs an image pinned by a version tag "
                f"or a digest (registry/name:1.4.2 or registry/name@sha256:...), so that every "
                f"pod, and every pod after a restart, runs the same code; ':latest' or no tag "
                f"can change under a running job")
        return image


def train_script() -> str:
    """The text of :mod:`torchhw.distributed.train`, to copy next to a job file and edit."""
    return (Path(__file__).parent / "train.py").read_text()


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


# NCCL and network settings differ per cluster: placeholders to fill in, commented out.
_NETWORK = [
    "# Network: ask your cluster's documentation, then uncomment what applies.",
    "# export NCCL_SOCKET_IFNAME=ib0       # interface for NCCL's own connections (see `ip addr`)",
    "# export GLOO_SOCKET_IFNAME=ib0       # the same for gloo (the CPU backend)",
    "# export NCCL_IB_HCA=mlx5             # which InfiniBand adapters NCCL may use",
    "# export NCCL_DEBUG=INFO              # once: which transport and topology NCCL chose",
    "# If a node's host name resolves to the wrong interface, give each node's torchrun its own",
    "# address (the one the other nodes reach it at): the srun line runs on every node, so",
    "# compute it there from the interface the others reach, not from `hostname -i` (127.0.1.1 on",
    "# many systems), e.g. srun ... bash -c 'exec torchrun --local-addr=\"$(ip -o -4 addr show ib0 |",
    "# awk \"{print \\$4}\" | cut -d/ -f1)\" ...' with ib0 the interface of NCCL_SOCKET_IFNAME.",
    "# For a hang: NCCL's flight recorder keeps each rank's last collectives (on by default in",
    "# torch 2.13: TORCH_FR_BUFFER_SIZE, once TORCH_NCCL_TRACE_BUFFER_SIZE, 2000 entries) and can write them out when the watchdog",
    "# times out (TORCH_NCCL_DUMP_ON_TIMEOUT, set below); this puts the files with the logs, for `torchfrtrace`:",
    "export TORCH_FR_DUMP_TEMP_FILE=\"$PWD/logs/$SLURM_JOB_ID/nccl_trace_rank_\"  # not node-local /tmp",
    "export TORCH_NCCL_DUMP_ON_TIMEOUT=1   # as the Kubernetes files: dump on a watchdog time-out",
]


# How long the Slurm script looks for the stop marker after a failed step (6 x 5 s): on a
# network file system rank 0's file can take seconds to show on another node.
MARKER_WAIT_S = 30

# How long an agent waits for the rendezvous store, which the first node's (worker-0's) torchrun
# hosts: c10d's read_timeout, 60 s by default, is shorter than a cold node's start (an image
# pull, a shared environment read over the network), and an agent that gives up fails its node
# (Slurm: the step; a PyTorchJob: a restart of the backoffLimit). join_timeout: for the others.
RDZV_CONF = {"read_timeout": "600", "join_timeout": "600"}


def slurm_script(job: Job) -> str:
    """An sbatch script: one torchrun agent per node (srun), c10d rendezvous on the first node."""
    logs = "logs/$SLURM_JOB_ID"
    command = torchrun_command(job.script, job.args, nproc_per_node=job.procs_per_node or 1,
                               nnodes=job.nodes, rdzv_endpoint="$head_node:$port",
                               rdzv_id="$SLURM_JOB_ID", max_restarts=job.max_restarts,
                               monitor_interval=None, launcher=["torchrun"],
                               log_dir=logs, tee=3,
                               rdzv_conf=",".join(f"{k}={v}" for k, v in RDZV_CONF.items()))
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1            # one torchrun agent per node; it starts the ranks",
        f"#SBATCH --cpus-per-task={job.cpus_per_node}",
        "#SBATCH --exclusive                    # whole nodes: their GPUs, CPUs and network adapters",
        "#SBATCH --mem=0                        # and all of each node's memory",
        f"#SBATCH --time={job.time_limit}",
        "#SBATCH --requeue                      # preempted or requeued: back in the queue",
        f"#SBATCH --signal=B:USR1@{job.notice_s}            # {job.notice_s} s before the limit: USR1 to this script",
        "#SBATCH --output=%x-%j.out             # this script's own lines; each node's are in logs/",
        "#SBATCH --open-mode=append             # a requeued run adds to the logs",
        "#SBATCH --dependency=singleton         # one run of this name at a time: they share its checkpoint",
    ]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    lines += [
        "",
        "set -eo pipefail",
        "# -u (unset variables are errors) after the set-up: conda's and Lmod's scripts read unset ones",
        *_setup_lines(job.setup),
        "set -u",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)  # sed reads all: no SIGPIPE',
        "# The rendezvous runs at the first node's Slurm name: where that name does not resolve, on",
        "# the other nodes, to the address they reach it at (check: getent hosts <name> on another",
        "# node; some sites give a management network's address), put the right address here.",
        "# Not `hostname -i`, which on many systems answers 127.0.1.1 from /etc/hosts.",
        "# per job, so that a job never meets an earlier job's leftovers on its node; below 32768,",
        "# where Linux hands out ephemeral ports (ip_local_port_range), so no outgoing connection holds it",
        "port=$((10000 + SLURM_JOB_ID % 20000))",
        f"export OMP_NUM_THREADS={job.cpus_per_proc}",
        f"export TORCH_ELASTIC_SHUTDOWN_TIMEOUT={job.stop_grace_s}  # see notice() below",
        "# No store shared between torchrun and its workers (as in the PyTorchJob): with it,",
        "# torch 2.13 makes every store a worker opens a client of torchrun's, so a script whose",
        "# init_process_group names a tcp:// address of its own waits for a server nobody starts.",
        "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
        "# logs/ is made under the submit directory, which must be on storage every node sees",
        f'mkdir -p "{logs}"',
        "",
        *_NETWORK,
        "",
        "# The notice (USR1, near the time limit; Slurm may send it up to a minute early):",
        "# SIGTERM to the job step's processes (not to this script), so the workers finish their",
        "# step, save a checkpoint, write the stop marker and exit; then back in the queue, where",
        "# the next run resumes from it. torchrun gives its workers TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
        "# seconds after SIGTERM (30 unless set), then kills them.",
        "# A preemption (PreemptMode=REQUEUE) sends the step's processes the same SIGTERM, and",
        "# after the partition's GraceTime (0 unless set) SIGTERM to the batch step too, when srun",
        "# kills every task. Within the grace the workers save and stop as above, the step fails,",
        "# and finish() requeues the job (Slurm itself requeues only a job still running when the",
        "# grace ends). With no GraceTime nothing is saved past the last checkpoint: ask for one",
        "# that holds a step and a save, or for PreemptParameters=send_user_signal (the notice).",
        "# Not SIGTERM to srun: srun answers that with SIGKILL to every task, and nothing is saved.",
        f"stopped={_shell_word(job.stop_marker)}  # the workers write it once they have saved on a stop signal",
        'export TRAIN_STOP_MARKER="$stopped"     # where: the course\'s train.py reads it',
        'rm -f "$stopped"',
        f"max_stalls={job.max_stalls}  # requeues in a row without a newer checkpoint, then the job ends",
        "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then  # a fresh submission starts its count again",
        '  rm -f "$stopped.step" "$stopped.stalls"',
        "fi",
        "noticed=\"\"  # set by the notice: near the time limit, an unfinished run is requeued anyway",
        "finish() {  # after the step: requeue a stopped run, else end with the step's status",
        '  if [ "$1" != 0 ]; then  # rank 0 may have written the marker on another node: on a network',
        '    for _ in 1 2 3 4 5 6; do  # file system it can take seconds to show here, so look again',
        '      [ -e "$stopped" ] && break',
        '      ls "$(dirname "$stopped")" > /dev/null 2>&1; sleep 5',
        "    done",
        "  fi",
        '  if [ ! -e "$stopped" ] && [ -n "$noticed" ] && [ "$1" != 0 ]; then',
        '    # the workers were stopped before they could save (starting, restarting, a save too',
        '    # slow for the grace): requeue, to resume from the last periodic checkpoint',
        '    echo "stopped by the notice, without a new checkpoint" > "$stopped"',
        "  fi",
        '  if [ -e "$stopped" ]; then',
        '    # a requeue whose checkpoint step is the last one again is a stall (a hang before the',
        '    # first checkpoint, a data stall): after max_stalls in a row the job ends, not requeues',
        '    step=$(sed -n "s/.*checkpoint of step \\([0-9][0-9]*\\).*/\\1/p" "$stopped")',
        '    stalls=0',
        '    if [ -z "$step" ] || [ "$step" = "$(cat "$stopped.step" 2>/dev/null)" ]; then',
        '      stalls=$(( $(cat "$stopped.stalls" 2>/dev/null || echo 0) + 1 ))',
        '    fi',
        '    echo "$stalls" > "$stopped.stalls"',
        '    if [ -n "$step" ]; then echo "$step" > "$stopped.step"; fi',
        '    if [ "$stalls" -ge "$max_stalls" ]; then',
        '      echo "$(date +%T) $(cat "$stopped"): $stalls requeues in a row without a newer" \\',
        '           "checkpoint, so not again (max_stalls). Find what stops it, then resubmit"',
        '      exit 1',
        '    fi',
        '    echo "$(date +%T) $(cat "$stopped"): requeueing"',
        '    scontrol requeue "$SLURM_JOB_ID"',
        "    exit 0",
        "  fi",
        '  exit "$1"',
        "}",
        'srun_pid=""  # set once the step starts; a notice before that has nothing to stop',
        "# shellcheck disable=SC2329  # run by the trap below",
        "notice() {",
        '  echo "$(date +%T) time limit near: stopping the workers with a checkpoint"',
        '  noticed=1',
        '  [ -n "$srun_pid" ] || exit 1',
        '  scancel --signal=TERM "$SLURM_JOB_ID" || true',
        '  status=0; wait "$srun_pid" || status=$?',
        '  finish "$status"',
        "}",
        "trap notice USR1",
        "",
        "echo \"$(date +%T) job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, restart ${SLURM_RESTART_COUNT:-0}\"",
        "# --cpus-per-task: what sbatch asked for on every node (Slurm 22.05 to 23.02 did not pass",
        "# it on to a step; naming it is right on every version, and on nodes of different sizes).",
        "# --kill-on-bad-exit: one node's agent failing for good ends the others' too.",
        "# --output: one log per node (%n: the node's number in the job).",
        'srun --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1 \\',
        f'  --output="{logs}/node%n.out" --open-mode=append \\',
        "  " + " ".join(_shell_word(c) for c in command) + " &",
        "srun_pid=$!",
        'status=0; wait "$srun_pid" || status=$?  # in the background: the trap runs as soon as USR1 arrives',
        'finish "$status"',
        "",
    ]
    return "\n".join(lines)


def container_command(job: Job) -> list[str]:
    """What each pod runs. torchrun takes the nodes, restarts and the rendezvous from the PET_*
    variables the operator sets; the processes per node are named as well, since the training
    operator before 1.8 sets PET_NPROC_PER_NODE only for a job with a Master (and torchrun would
    start one process per pod). The logs go to the shared volume."""
    return ["torchrun", f"--nproc-per-node={job.procs_per_node}",
            f"--log-dir={job.shared_dir}/logs/{job.name}", "--tee=3", job.script, *job.args]


def _volumes(job: Job) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts: the shared claim (code, checkpoints,
    logs) and a memory-backed /dev/shm (a container's default is 64 MB)."""
    volumes = [
        {"name": "shared", "persistentVolumeClaim": {"claimName": f"{job.name}-shared"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{job.shm_gib}Gi"}},
    ]
    mounts = [{"name": "shared", "mountPath": job.shared_dir},
              {"name": "dshm", "mountPath": "/dev/shm"}]
    return volumes, mounts


def _env(job: Job) -> list[dict[str, str]]:
    return [{"name": "OMP_NUM_THREADS", "value": str(job.cpus_per_proc)},
            # torchrun's wait for its workers after SIGTERM, before SIGKILL (default 30 s)
            {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(job.stop_grace_s)},
            # NCCL's flight recorder writes its dumps here, not to the pod's own /tmp
            {"name": "TORCH_FR_DUMP_TEMP_FILE",
             "value": f"{job.shared_dir}/logs/{job.name}/nccl_trace_rank_"},
            {"name": "TORCH_NCCL_DUMP_ON_TIMEOUT", "value": "1"}]


def _scheduling(job: Job) -> dict[str, Any]:
    """The pod spec's scheduler, and the toleration GPU nodes' usual taint needs."""
    out: dict[str, Any] = {"schedulerName": job.gang_scheduler} if job.gang_scheduler else {}
    if job.gpus_per_node:
        # GPU pools are often tainted so that only GPU work lands there; where the cluster
        # does not add this toleration itself (ExtendedResourceToleration), the pods would wait
        out["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return out


def _resources(job: Job) -> dict[str, Any]:
    quantities: dict[str, Any] = {"cpu": str(job.cpus_per_node), "memory": f"{job.memory_gib}Gi"}
    if job.gpus_per_node:
        quantities["nvidia.com/gpu"] = str(job.gpus_per_node)  # a quantity: a string
    return {"limits": dict(quantities), "requests": dict(quantities)}


def pytorchjob(job: Job) -> dict[str, Any]:
    """A Kubeflow PyTorchJob (training operator, kubeflow.org/v1) as a dict.

    ``elasticPolicy`` with c10d: the operator sets PET_RDZV_BACKEND, PET_RDZV_ENDPOINT,
    PET_NNODES, PET_NPROC_PER_NODE and PET_MAX_RESTARTS for torchrun, so the agents meet and
    restart together. ``runPolicy.schedulingPolicy`` asks for gang scheduling: every pod or
    none (the operator must run with ``--gang-scheduler-name``; without it one pod can start and
    hold its GPUs while the others wait). The pods name the gang scheduler themselves
    (``job.gang_scheduler``): the operator would otherwise copy the flag's value, which is not
    the name under which scheduler-plugins usually runs, and the pods would stay Pending.
    """
    volumes, mounts = _volumes(job)

    def worker() -> dict[str, Any]:
        # fresh copies for each use: shared objects would become YAML anchors (&id001)
        return {
            "replicas": job.nodes,
            "restartPolicy": "OnFailure",
            "template": {"spec": {
                # SIGTERM at eviction, then this long before SIGKILL: a step and a checkpoint
                "terminationGracePeriodSeconds": job.stop_grace_s + 15,
                **_scheduling(job),
                "containers": [{
                    "name": "pytorch",  # the operator looks for this container name
                    "image": job.pinned_image(),
                    "imagePullPolicy": job.pull_policy(),
                    "command": container_command(job),
                    "env": _env(job) + [
                        # torchrun (2.13) publishes the workers' store address at its first
                        # rendezvous only; a pod that replaces an evicted one then waits for an
                        # address nobody writes. Without the shared store, every round
                        # publishes its own (torch/distributed/elastic/rendezvous/
                        # dynamic_rendezvous.py, next_rendezvous).
                        {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}],
                    "resources": _resources(job),
                    "volumeMounts": mounts,
                }],
                "volumes": volumes,
            }},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job.name},
        "spec": {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": job.nodes,
                              "maxReplicas": job.nodes, "maxRestarts": job.max_restarts,
                              "rdzvConf": [{"key": k, "value": v} for k, v in RDZV_CONF.items()]},
            "nprocPerNode": str(job.procs_per_node),
            # the operator fails the job once the pods' restarts reach backoffLimit (>=, in its
            # PastBackoffLimit), so max_restarts restarts need one more
            "runPolicy": {"backoffLimit": job.max_restarts + 1, "cleanPodPolicy": "Running",
                          **_deadline(job),
                          **({"schedulingPolicy": {"minAvailable": job.nodes,
                                                   "scheduleTimeoutSeconds": 600}}
                             if job.gang_scheduler else {})},
            "pytorchReplicaSpecs": {"Worker": worker()},
        },
    }


# The TrainJob's container: torchrun, then exit 75 (the training script's STOPPED) when the
# workers stopped on a signal with a checkpoint, as their stop marker says; torchrun itself
# exits 1 for a stop and a crash alike. The Job's podFailurePolicy tells the two apart by it.
# The shell is the container's first process (PID 1), which Kubernetes' SIGTERM reaches: as
# PID 1 without a handler it would ignore the signal, so it traps it and passes it to torchrun
# (which passes it to the workers), then waits for torchrun to finish saving. A marker written
# on another node may take a few seconds to show on a network file system: a failed run looks
# again before it decides.
STOPPED_EXIT = 75
TRAINER_WRAPPER = (
    'rm -f "$TRAIN_STOP_MARKER"; '
    'torchrun "$@" & pid=$!; '
    "trap 'kill -TERM \"$pid\" 2>/dev/null' TERM INT; "
    'wait "$pid"; code=$?; '
    'while kill -0 "$pid" 2>/dev/null; do wait "$pid"; code=$?; done; '
    'if [ "$code" != 0 ]; then for _ in 1 2 3 4 5; do [ -e "$TRAIN_STOP_MARKER" ] && break; '
    'ls "$(dirname "$TRAIN_STOP_MARKER")" > /dev/null 2>&1; sleep 2; done; fi; '
    f'if [ -e "$TRAIN_STOP_MARKER" ]; then exit {STOPPED_EXIT}; fi; exit "$code"')


def _deadline(job: Job) -> dict[str, int]:
    """``activeDeadlineSeconds`` where the job asks for one (see ``Job.deadline_s``)."""
    return {} if job.deadline_s is None else {"activeDeadlineSeconds": job.deadline_s}


def operator_env(job: Job, rdzv_endpoint: str) -> dict[str, str]:
    """The variables the training operator gives each pod of an elastic PyTorchJob."""
    return {"PET_NNODES": f"{job.nodes}:{job.nodes}", "PET_NPROC_PER_NODE": str(job.procs_per_node),
            "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": rdzv_endpoint,
            "PET_MAX_RESTARTS": str(job.max_restarts),
            "PET_RDZV_CONF": ",".join(f"{k}={v}" for k, v in RDZV_CONF.items())}


# What the manifests leave to the cluster, said at the top of each file: without it NCCL
# falls back, silently, to TCP over the pod network.
_K8S_NETWORK = [
    "# Network: this file asks for no fast interconnect. Without one, NCCL talks TCP over the",
    "# pod network, silently (check once: NCCL_DEBUG=INFO logs NET/IB, not NET/Socket). Ask your cluster's",
    "# documentation what to add to the container, typically:",
    "#   resources.limits: the RDMA devices (e.g. rdma/ib: 1, or the name its device plugin uses)",
    "#   securityContext.capabilities.add: [IPC_LOCK]  (NCCL pins memory for RDMA)",
    "#   env: NCCL_IB_HCA, NCCL_SOCKET_IFNAME, and NCCL_DEBUG=INFO once to see what NCCL chose",
    "# and, for a job that must survive losing the first pod, a rendezvous host outside the job.",
    "# Scheduling: the pods name a gang scheduler (Job.gang_scheduler, scheduler-plugins'",
    "# coscheduling as 'scheduler-plugins-scheduler'). On a cluster that does not run one under",
    "# that name they stay Pending and no event says why: give your scheduler's name, or",
    "# gang_scheduler=None for the default scheduler (then one node's pod may start and hold its",
    "# GPUs while the other waits). GPU pods tolerate the usual nvidia.com/gpu taint.",
]


def _with_network_note(text: str) -> str:
    return "\n".join(_K8S_NETWORK) + "\n" + text


def pytorchjob_yaml(job: Job) -> str:
    """The PyTorchJob manifest as YAML, ready for ``kubectl apply -f`` (with a comment at the
    top on the network settings it leaves to the cluster)."""
    return _with_network_note(yaml.safe_dump(pytorchjob(job), sort_keys=False))


def training_runtime(job: Job) -> dict[str, Any]:
    """The Trainer v2 ``TrainingRuntime`` the job's TrainJob runs on (same namespace).

    The torch plugin gives each node PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
    PET_MASTER_ADDR and PET_MASTER_PORT: a static rendezvous, so torchrun cannot restart one
    node's workers alone. Trainer runs the nodes as one indexed Job; with ``restartPolicy:
    Never`` and ``backoffLimit: 0`` a failed pod fails that Job, and the JobSet's
    ``failurePolicy`` recreates every node (up to ``max_restarts`` times), which resume from
    the checkpoint. A pod that Kubernetes disrupted (preempted, evicted, its node drained: the
    pod condition ``DisruptionTarget``) fails the Job through its ``podFailurePolicy``, and the
    JobSet's rule for that reason recreates the nodes without counting a restart, so
    preemptions do not use up ``max_restarts``. So does a pod whose workers stopped with a
    checkpoint on a stop signal (exit 75, see ``TRAINER_WRAPPER``): whichever pod the Job sees
    fail first after an eviction, its failure is free, while a crash still counts.
    ``podGroupPolicy`` gang-schedules the nodes (the scheduler-plugins coscheduling plugin).
    """
    volumes, mounts = _volumes(job)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": f"{job.name}-runtime",
                     "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": job.nodes, "torch": {}},
            **({"podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 600}}}
               if job.gang_scheduler else {}),
            "template": {"spec": {
                "failurePolicy": {"maxRestarts": job.max_restarts, "rules": [
                    {"name": "disruptions-are-free", "action": "RestartJobSetAndIgnoreMaxRestarts",
                     "onJobFailureReasons": ["PodFailurePolicy"]}]},
                "replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        # a failed pod fails the Job at once (Kubernetes would otherwise restart
                        # the container in place, up to 6 times, while the other nodes wait in a
                        # collective), and the JobSet recreates every node
                        "spec": {"backoffLimit": 0,
                                 "podFailurePolicy": {"rules": [
                                     {"action": "FailJob", "onPodConditions": [
                                         {"type": "DisruptionTarget", "status": "True"}]},
                                     {"action": "FailJob", "onExitCodes": {
                                         "containerName": "node", "operator": "In",
                                         "values": [STOPPED_EXIT]}}]},
                                 "template": {"spec": {
                            "restartPolicy": "Never",
                            # the coscheduling plugin labels the pods but names no scheduler: unless
                            # it is the cluster's default one, name it, or there is no gang
                            **_scheduling(job),
                            "terminationGracePeriodSeconds": job.stop_grace_s + 15,
                            "containers": [{"name": "node", "image": job.pinned_image(),
                                            "imagePullPolicy": job.pull_policy(),
                                            "volumeMounts": mounts}],
                            "volumes": volumes,
                        }}},
                    },
                }],
            }},
        },
    }


def trainjob(job: Job) -> dict[str, Any]:
    """Kubeflow Trainer v2's ``TrainJob`` (trainer.kubeflow.org/v1alpha1) as a dict."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": job.name},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                           "name": f"{job.name}-runtime"},
            **_deadline(job),  # Trainer v2.2 or later
            "trainer": {
                "image": job.pinned_image(),
                # no restarts inside torchrun: the rendezvous is static, the JobSet restarts
                "command": ["sh", "-c", TRAINER_WRAPPER, "torchrun", "--max-restarts=0",
                            *container_command(job)[1:]],
                "numNodes": job.nodes,
                "numProcPerNode": job.procs_per_node,
                "env": _env(job) + [{"name": "TRAIN_STOP_MARKER", "value": job.stop_marker}],
                "resourcesPerNode": _resources(job),
            },
        },
    }


def trainer_env(job: Job, node_rank: int, master_addr: str,
                master_port: int = TRAINER_MASTER_PORT) -> dict[str, str]:
    """The variables Trainer v2's torch plugin gives the node with ``node_rank``."""
    return {"PET_NNODES": str(job.nodes), "PET_NPROC_PER_NODE": str(job.procs_per_node),
            "PET_NODE_RANK": str(node_rank), "PET_MASTER_ADDR": master_addr,
            "PET_MASTER_PORT": str(master_port)}


def trainjob_yaml(job: Job) -> str:
    """The TrainingRuntime and the TrainJob, one YAML file: ``kubectl apply -f`` it."""
    return _with_network_note(yaml.safe_dump_all([training_runtime(job), trainjob(job)], sort_keys=False))


def write_job(job: Job, folder: str | Path) -> dict[str, Path]:
    """Write the training script and the three job files into ``folder``; return their paths.

    Copy ``train.py`` to ``job.script`` on the shared volume (or into the image).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train.py": train_script(), f"{job.name}.sbatch": slurm_script(job)}
    if job.image is not None:
        files[f"{job.name}.pytorchjob.yaml"] = pytorchjob_yaml(job)
        files[f"{job.name}.trainjob.yaml"] = trainjob_yaml(job)
    paths = {}
    for name, text in files.items():
        (folder / name).write_text(text)
        paths[name] = folder / name
    return paths
