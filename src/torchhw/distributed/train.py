"""The training script the course's job files run: plain DistributedDataParallel under torchrun.

Run it as ``torchrun ... -m torchhw.distributed.train --checkpoint DIR/job.pt --out DIR/job.json``,
or copy this file next to your job file (:func:`torchhw.distributed.jobs.write_job` does) and
replace the model and the data. Around the training loop it has what a job on a shared cluster
needs:

- **Explicit time-outs** (``JOIN_TIMEOUT``, ``COLLECTIVE_TIMEOUT``): how long the ranks of a
  generation wait for each other to start, and how long one collective may wait for a peer.
- **Checkpoints** on rank 0 every ``--every`` steps, written atomically to storage every node
  sees. After a restart rank 0 decides the step to resume from, and every rank checks that the
  checkpoint it loaded is that step.
- **A stop signal ends the run with a checkpoint.** SIGTERM (a preemption, the job script's
  time-limit notice, torchrun stopping its workers) sets a flag; after each step the
  ranks all-reduce their flags, so all of them stop after the same step, rank 0 saves it, and
  every worker exits with ``STOPPED`` (75), so that torchrun and the scheduler start the job
  again, to resume from there.
- **One GPU per process**, or an error that says so (``--share-gpus`` allows fewer, with gloo).
- **The same result after a restart**: a run that crashed and resumed ends with the weights of
  a run that never stopped, bit for bit, with gloo at a fixed world size (the course's tests
  check it; see ``fix_buckets``). NCCL chooses its algorithms from the topology it finds, so a
  job requeued onto other nodes may round differently.

Two fire drills rehearse failures on purpose (leave them unset in production): ``--crash-at``
makes one worker die after a step, once; ``--hold-at`` makes every rank wait after a step for a
stop signal, so that a test can deliver a notice at a known moment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

# absolute imports: a copy of this file runs wherever the torchhw package is installed
from torchhw import checkpoint
from torchhw.data import regression
from torchhw.distributed.elastic import agreed_step, init_generation
from torchhw.distributed.placement import rank_device

# Once torchrun's agents have met (their own wait, for slow nodes and image pulls, is the
# rendezvous' join_timeout: 600 s for c10d unless --rdzv-conf says otherwise, 900 s for the
# static rendezvous of a TrainJob), the ranks of a generation must all reach the process
# group within this.
JOIN_TIMEOUT = timedelta(minutes=10)
# A rank waiting longer than this in one collective fails (torch's default for NCCL). The
# other ranks wait in a barrier while rank 0 writes a checkpoint: keep it above the slowest save.
COLLECTIVE_TIMEOUT = timedelta(minutes=10)
# How long a --hold-at drill waits for its stop signal before it goes on.
HOLD_LIMIT_S = 120.0
# The exit code of a worker that stopped on a signal after saving: not 0, so that torchrun and
# the scheduler restart the job (a peer that was not signalled would otherwise "finish"),
# and not 1, so that a log tells it from a crash. 75 is EX_TEMPFAIL: try again later.
STOPPED = 75
# Where a stopped run says so (see --stop-marker): the Slurm script sets it for every program
STOP_MARKER_VARIABLE = "TRAIN_STOP_MARKER"

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
parser.add_argument("--global-batch", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--check-every", type=int, default=1,
                    help="ask the other ranks for a stop signal every N steps (a 4-byte all-reduce "
                         "and, on a GPU, a wait for it); keep N x step time well inside the grace")
parser.add_argument("--checkpoint", required=True, help="on storage every node sees")
parser.add_argument("--out", required=True, help="the final summary (JSON), written by rank 0")
parser.add_argument("--stop-marker", default=os.environ.get(STOP_MARKER_VARIABLE, ""),
                    help=f"written by rank 0 once a stop signal has ended in a checkpoint (the "
                         f"Slurm script requeues the job when it finds it); by default "
                         f"${STOP_MARKER_VARIABLE}, which the Slurm script sets")
parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "xpu"])
parser.add_argument("--share-gpus", action="store_true",
                    help="allow fewer GPUs than processes on a node (gloo, slow); default: an error")
parser.add_argument("--one-machine", action="store_true",
                    help="every node is simulated on this machine: its GPUs serve all ranks")
drills = parser.add_argument_group("fire drills (for tests and rehearsals; never in production)")
drills.add_argument("--crash-at", type=int, help="a worker on --crash-node exits after this step, once")
drills.add_argument("--crash-node", type=int, default=1)
drills.add_argument("--hold-at", type=int, help="after this step, wait for a stop signal")
drills.add_argument("--drill-marker", default="", help="a drill happens once: while this file is absent")
drills.add_argument("--unsettled-buckets", action="store_true",
                    help="leave out fix_buckets, to see what it prevents (a lesson, not a drill)")


def say(text: str) -> None:
    sys.stdout.write(text + "\n")  # one write per line: workers share torchrun's output
    sys.stdout.flush()


class StopFlag:
    """Set by SIGTERM; the training loop reads it between steps.

    The same SIGTERM reaches a DataLoader's worker processes (a scheduler signals every
    process of the job; torchrun signals each worker's process group), which would die of it
    and make the next batch raise before the checkpoint is written. Give such a DataLoader
    ``worker_init_fn=ignore_stop_signals``.
    """

    def __init__(self) -> None:
        self.signal: int | None = None
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, signum: int, frame: object) -> None:
        self.signal = signum  # only a flag: a signal handler must not start a collective

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal else ""


def ignore_stop_signals(worker_id: int) -> None:
    """A DataLoader ``worker_init_fn``: its processes leave the stop signal to the trainer."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def place(args: argparse.Namespace) -> tuple[str, torch.device]:
    """This rank's backend and device; an error when the node has fewer GPUs than processes."""
    local = int(os.environ["LOCAL_RANK"])
    # simulated nodes each number their ranks from 0, so on one machine the global rank and
    # the world size say which GPU is whose
    index = int(os.environ["RANK"]) if args.one_machine else local
    sharing = int(os.environ["WORLD_SIZE" if args.one_machine else "LOCAL_WORLD_SIZE"])
    backend, where, note = rank_device(args.device, index, sharing, share=args.share_gpus)
    if note and local == 0:
        say(f"note: {note}")
    device = torch.device(where)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif device.type == "xpu":
        torch.xpu.set_device(device)
    return backend, device


def fix_buckets(ddp: DDP, sample: torch.Tensor) -> None:
    """One backward of a zero loss, so DDP settles its gradient buckets before the first step.

    DDP first lays out its buckets from the order of ``parameters()`` and, after the first
    backward, again in the order in which the gradients became ready. An all-reduce over more than two
    ranks adds each element in an order that depends on its place in the bucket, so a resumed
    run, whose first step would use the first layout, would round differently from a run that
    never stopped. Settling the layout first makes every step of every run use the same one.
    Buffers (BatchNorm's running statistics) are put back, and nothing reaches the optimizer.
    """
    saved = {name: b.clone() for name, b in ddp.module.named_buffers()}
    (ddp(sample) * 0).sum().backward()
    with torch.no_grad():
        for name, b in ddp.module.named_buffers():
            b.copy_(saved[name])
    ddp.module.zero_grad(set_to_none=True)


def saved_step(path: Path) -> int | None:
    """The step a checkpoint holds, or None without one. The file is memory-mapped, so its
    tensors are not read into this rank's memory to get one number."""
    if not path.exists():
        return None
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"])


def load_agreed(path: Path, start: int, model: nn.Module, opt: torch.optim.Optimizer,
                device: torch.device, rank: int, wait_s: float = 60.0) -> None:
    """Load the checkpoint of step ``start`` (rank 0's decision); fail if this rank sees another.

    A network file system can show a node an older file for a while: wait for the right one.
    """
    deadline = time.monotonic() + wait_s
    while True:
        found = saved_step(path)
        if found == start:
            checkpoint.load(path, model, opt, map_location=device, restore_rng=False)
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank {rank} sees step {found} in {path}, rank 0 resumes from step "
                               f"{start}: every node must see the same checkpoint folder (shared "
                               f"storage mounted at the same path on every node)")
        time.sleep(1.0)


def any_rank(flag: torch.Tensor, stop: StopFlag) -> bool:
    """Whether a stop signal reached any rank: every rank calls it after the same step."""
    flag.fill_(1 if stop.signal is not None else 0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def hold(stop: StopFlag, flag: torch.Tensor, rank: int, step: int) -> None:
    """The --hold-at drill: wait until a stop signal reaches any rank (at most HOLD_LIMIT_S).

    The ranks ask each other ten times a second, so a signal to one node's processes only
    (one pod evicted) ends every rank's wait; they count the questions rather than read a
    clock, so that all of them ask equally often.
    """
    if rank == 0:
        say(f"rank 0: holding after step {step} for a stop signal")
    for _ in range(int(HOLD_LIMIT_S * 10)):
        if any_rank(flag, stop):
            return
        time.sleep(0.1)


def digest(model: nn.Module) -> str:
    """A hash of every parameter and buffer: equal digests mean bit-identical weights."""
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@record  # an uncaught error goes to the file torchrun names, and into its failure report
def main(argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    if (args.crash_at or args.hold_at) and not args.drill_marker:
        parser.error("--crash-at and --hold-at need --drill-marker FILE (a drill happens once: "
                     "while that file, on storage every node sees, is absent)")
    stop = StopFlag()  # before joining: a signal during the start is not lost either
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    backend, device = place(args)
    generation = init_generation(backend, join_timeout=JOIN_TIMEOUT, timeout=COLLECTIVE_TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()

    X, Y = (t.to(device) for t in regression(n=1024, features=16, seed=0)[0].tensors)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    path = Path(args.checkpoint)
    found = (saved_step(path) or 0) if rank == 0 else 0
    start = agreed_step(found, device)  # rank 0 decides; every rank gets its number
    if start:
        load_agreed(path, start, model, opt, device, rank)
        say(f"rank {rank}: generation {generation}, resumed from step {start}")

    ddp = DDP(model, device_ids=[device.index] if device.type in ("cuda", "xpu") else None)
    if args.global_batch % world:
        raise ValueError(f"--global-batch {args.global_batch} does not divide among {world} ranks: "
                         f"choose a multiple of {world}")
    per_rank = args.global_batch // world
    if not args.unsettled_buckets:
        fix_buckets(ddp, X[:per_rank])
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    drill = Path(args.drill_marker) if args.drill_marker else None
    node = int(os.environ.get("GROUP_RANK", "0"))
    for s in range(start, args.steps):
        # the batch depends only on the step, so a resumed run sees exactly the same data
        first = (s * args.global_batch) % (len(X) - args.global_batch) + rank * per_rank
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ddp(X[first:first + per_rank]), Y[first:first + per_rank]).backward()
        opt.step()
        done = s + 1
        held = done == args.hold_at and drill is not None and not drill.exists()
        if held:
            hold(stop, flag, rank, done)
        # every rank stops after the same step: the ranks ask each other every --check-every
        # steps (every rank asks at the same steps, or the all-reduces would not pair up)
        stopping = (done % args.check_every == 0 or held) and any_rank(flag, stop)
        if done % args.every == 0 or stopping:
            if rank == 0:
                checkpoint.save(path, model, opt, step=done)  # atomic: never half a file
                if stopping and args.stop_marker:
                    # before the barrier: once past it, the other nodes exit, and srun may stop
                    # this one (--kill-on-bad-exit) before a later write reached the disk
                    Path(args.stop_marker).write_text(f"stopped with the checkpoint of step {done}\n")
            dist.barrier()
        if stopping:
            if drill is not None and rank == 0:
                drill.write_text(f"stopped by a signal after step {done}\n")
            say(f"rank {rank}: stop signal {stop.name or '(a peer got it)'}: checkpoint of step "
                f"{done} saved, exiting")
            dist.destroy_process_group()
            return STOPPED
        if (done == args.crash_at and node == args.crash_node and int(os.environ["LOCAL_RANK"]) == 0
                and drill is not None and not drill.exists()):
            drill.write_text(f"node {node} crashed after step {done}\n")
            say(f"rank {rank}: injected fault at step {done}")
            os._exit(1)

    if rank == 0:
        with torch.no_grad():
            loss = nn.functional.mse_loss(model(X), Y).item()
        summary = {"steps": args.steps, "world_size": world, "backend": backend,
                   "generation": generation, "digest": digest(model), "loss": loss}
        say(f"rank 0: done, {json.dumps(summary)}")
        Path(args.out).write_text(json.dumps(summary))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def run(argv: list[str] | None = None) -> None:
    """:func:`main`, then an exit that skips the interpreter's shutdown.

    gloo runs each collective on threads of its own, and DDP keeps the process group (with
    those threads) alive after ``destroy_process_group()``. If Python shuts down while such a
    thread still releases the tensors of a finished collective, the thread needs the GIL that
    the shutdown has taken away, and the process aborts (SIGABRT, "terminate called without an
    active exception") after its work is done. So, once the output is flushed, the process
    ends at once (``os._exit``), as the children of Python's multiprocessing do.
    """
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's errors and --help
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()  # @record has written it for torchrun as well
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
