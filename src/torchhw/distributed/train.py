"""The training script the course's job files run: plain DistributedDataParallel under torchrun.

Run it as ``torchrun ... -m torchhw.distributed.train --checkpoint DIR/job.pt --out DIR/job.json``,
or copy this file next to your job file (:func:`torchhw.distributed.jobs.write_job` does) and
replace the model and the data. Around the training loop it has what a job on a shared cluster
needs:

- **Explicit time-outs** (``JOIN_TIMEOUT``, ``COLLECTIVE_TIMEOUT``): how long the ranks of a
  generation wait for each other to start, and how long one collective may wait for a peer.
- **Checkpoints** on rank 0 every ``--every`` steps, to storage every node sees: the step waits
  only while the state is copied to the CPU; a thread writes it (atomically: never half a file)
  while training goes on, and the checkpoint before it is kept as ``NAME.prev.pt``. After a
  restart rank 0 decides the step to resume from (the previous file if the newest cannot be
  read), and every rank checks that the checkpoint it loaded is that step. The ranks map the
  file rather than read it, so the processes of a node share one copy in the page cache.
- **A stop signal ends the run with a checkpoint.** SIGTERM (a preemption, the job script's
  time-limit notice, torchrun stopping its workers) sets a flag; every ``--check-every`` steps
  the ranks all-reduce their flags, so all of them stop after the same step, rank 0 saves it,
  and every worker exits with ``STOPPED`` (75), so that torchrun and the scheduler start the
  job again, to resume from there.
- **One GPU per process**, or an error that says so (``--share-gpus`` allows fewer, with gloo).
- **The same result after a restart**: a run that crashed and resumed ends with the weights of
  a run that never stopped, bit for bit, with gloo at a fixed world size (the course's tests
  check it; see ``fix_buckets``). Nothing random is carried in a generator's state: the data
  order of an epoch comes from ``(--seed, epoch)``, the same on every rank, and the randomness
  inside a step (here dropout) from ``(--seed, rank, step)``, different on every rank, so a
  resumed run draws exactly what the first run would have drawn without saving any state.
  NCCL chooses its algorithms from the topology it finds, so a job requeued onto other nodes
  may round differently.
- **A final evaluation shared by all ranks**, each on its part of the data, so that no rank
  waits in a barrier, under the collective time-out, while one of them evaluates everything.

Two fire drills rehearse failures on purpose (leave them unset in production): ``--crash-at``
makes one worker die after a step, once; ``--hold-at`` makes every rank wait after a step for a
stop signal, so that a test can deliver a notice at a known moment.
"""

from __future__ import annotations

import signal
from typing import Any

# Run as a program, catch a stop signal from the very start: torchrun may pass one on while this
# process is still importing torch or joining its process group (a preemption during a start or
# a restart), and the default action would end it before it could save anything.
#
# Not with a Python signal handler: Python runs one only on the main thread between bytecodes,
# and a worker stuck in a collective with a dead peer sits in C++ and would never run it. So
# SIGTERM is blocked here, before torch starts any thread (threads inherit the mask), and one
# thread of our own takes it with sigwait, whatever the main thread is doing.
_EARLY_STOP: list[int] = []
_ON_STOP: list[Any] = []      # what a StopFlag asks to be told (see StopFlag)
_WAITER: list[Any] = []       # the thread that takes the signal, when there is one


def _take_stop_signals() -> None:
    while True:
        signum = signal.sigwait({signal.SIGTERM})
        _EARLY_STOP.append(signum)
        for tell in list(_ON_STOP):
            tell(signum)


def _unblock_stop_signals() -> None:
    """In a forked child (a DataLoader worker on Linux): take SIGTERM as a process normally does."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


if __name__ == "__main__":
    import os as _os
    import threading as _threading

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    # A child inherits the mask. A forked one (DataLoader's workers on Linux) gets SIGTERM back
    # here; one started by exec (subprocess, multiprocessing's spawn) starts with it blocked and
    # must unblock it itself if it wants it: _unblock_stop_signals().
    _os.register_at_fork(after_in_child=_unblock_stop_signals)
    _WAITER.append(_threading.Thread(target=_take_stop_signals, daemon=True, name="stop-signal"))
    _WAITER[0].start()

import argparse
import functools
import hashlib
import json
import os
import shutil
import sys
import threading
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
# rendezvous' read_timeout for reaching the store and join_timeout for the others: 60 s and
# 600 s for c10d unless --rdzv-conf says otherwise, as the job files do; 900 s for the static
# rendezvous of a TrainJob), the ranks of a generation must all reach the process group
# within this.
JOIN_TIMEOUT = timedelta(minutes=10)
# A rank waiting longer than this in one collective fails (torch's default for NCCL). The
# longest wait of a healthy run is the other ranks' while rank 0 copies the state to the CPU
# for a checkpoint and, when the run stops, writes it: keep it above the slowest save.
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
parser.add_argument("--every", type=int, default=100,
                    help="checkpoint every N steps (and after the last); choose N so that the copy "
                         "to the CPU, the part a step waits for, is a small share of N steps")
parser.add_argument("--global-batch", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=0, help="the initial weights, the data order, dropout")
parser.add_argument("--check-every", type=int, default=10,
                    help="ask the other ranks for a stop signal every N steps (a 4-byte all-reduce "
                         "and, on a GPU, a wait for the steps queued before it); keep N x step time "
                         "well inside the grace a stop signal leaves")
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


# torchrun's grace after SIGTERM: TORCH_ELASTIC_SHUTDOWN_TIMEOUT when torchrun itself is
# signalled (a scheduler's stop), but a fixed 30 s when it stops its workers to restart them
# after a fault (LocalElasticAgent._stop_workers calls _shutdown() with its default). A worker
# cannot tell the two apart, and need not: on a restart torchrun's SIGKILL at 30 s ends a wait
# that is longer, while a scheduler's stop may use its whole grace for the step and the save.
RESTART_GRACE_S = 30.0


def stop_grace_s() -> float:
    """The grace after a scheduler's stop, the longest a stopped worker may take to save."""
    return float(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30"))


class StopFlag:
    """Set by SIGTERM; the training loop reads it between steps.

    The same SIGTERM reaches a DataLoader's worker processes (a scheduler signals every
    process of the job; torchrun signals each worker's process group); forked ones take it as
    usual (the script unblocks it in every forked child), would die of it and make the next
    batch raise before the checkpoint is written. Give such a DataLoader
    ``worker_init_fn=ignore_stop_signals``.
    """

    def __init__(self) -> None:
        self.signal: int | None = _EARLY_STOP[0] if _EARLY_STOP else None  # one before main()
        # How long the loop may take to reach its next stop check after the signal. torchrun
        # stops the workers of every node with SIGTERM when it restarts them after a fault, and
        # a worker stuck in a collective with a dead peer never reaches the check: without a
        # limit it would sit out torchrun's whole grace before the SIGKILL, on every node, at
        # every restart. The loop sets it from the time between its checks (StopFlag.expect).
        # Until the loop has timed its checks, the grace less a second.
        self.wait_s = max(1.0, stop_grace_s() - 1)
        self.acknowledged = False  # the ranks agreed to stop: saving, not stuck
        if _WAITER:   # run as a program: the stop-signal thread tells us, even mid-collective
            _ON_STOP.append(self._stopped)
        else:         # imported: a handler, run between the main thread's bytecodes
            signal.signal(signal.SIGTERM, lambda signum, frame: self._stopped(signum))
        if self.signal is not None:  # signalled while importing: the clock runs from now
            threading.Thread(target=self._give_up, args=(self.wait_s,), daemon=True).start()

    def _stopped(self, signum: int) -> None:
        self.signal = signum  # only a flag: nothing here may start a collective
        threading.Thread(target=self._give_up, args=(self.wait_s,), daemon=True).start()

    def expect(self, longest_between_checks_s: float, save_s: float, grace_s: float) -> None:
        """The loop's checks have come at most ``longest_between_checks_s`` apart, and a save
        takes ``save_s``: wait twice the one plus the other (at least 5 s, less than the grace)
        for the next check before giving up."""
        self.wait_s = min(max(5.0, 2 * longest_between_checks_s + save_s), max(1.0, grace_s - 1))

    def _give_up(self, wait_s: float) -> None:
        time.sleep(wait_s)
        if not self.acknowledged:
            say(f"stop signal, and no stop check reached in {wait_s:.0f} s (stuck in a collective "
                f"with a peer that died?): exiting without a checkpoint")
            os._exit(128 + signal.SIGTERM)

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

    DDP first lays out its buckets from the reverse order of ``parameters()`` and, after the first
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


def previous(path: Path) -> Path:
    """Where the checkpoint before the newest is kept: ``job.pt`` -> ``job.prev.pt``."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def saved_step(path: Path) -> int | None:
    """The step a checkpoint holds, or None without one (or an unreadable one). The file is
    memory-mapped, so its tensors are not read into this rank's memory to get one number."""
    if not path.exists():
        return None
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"])
    except Exception as err:
        say(f"{path} cannot be read ({type(err).__name__}: {str(err)[:120]}); it is left as it is")
        return None


def newest_step(path: Path) -> int:
    """The step to resume from: the newest checkpoint's, else the previous one's, else 0."""
    for candidate in (path, previous(path)):
        step = saved_step(candidate)
        if step is not None:
            return step
    return 0


def load_agreed(path: Path, start: int, model: nn.Module, opt: torch.optim.Optimizer,
                device: torch.device, rank: int, wait_s: float = 60.0, **run: Any) -> None:
    """Load the checkpoint of step ``start`` (rank 0's decision); fail if this rank sees another.

    A network file system can show a node an older file for a while: wait for the right one.
    ``run`` (the seed and the global batch, which decide every step's rows) must equal what
    the checkpoint's run saved. The world size may change: the rows of a step stay the same.
    """
    deadline = time.monotonic() + wait_s
    while True:
        found = {candidate: saved_step(candidate) for candidate in (path, previous(path))}
        for candidate, step in found.items():
            if step == start:
                extra = torch.load(candidate, map_location="cpu", weights_only=True, mmap=True)["extra"]
                kept = {k: (extra or {}).get(k) for k in run}
                if kept != run:  # refused before anything is loaded
                    raise ValueError(f"{candidate} was saved by a run with {kept}, this run has "
                                     f"{run}: step {start}'s data would not be the data the run "
                                     f"trained up to it with. Resume with the same values, or "
                                     f"start a new run under a new name (a new --checkpoint)")
                checkpoint.load(candidate, model, opt, map_location=device, restore_rng=False,
                                mmap=True)
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank {rank} sees steps {list(found.values())} in {path} and its "
                               f"previous copy, rank 0 resumes from step {start}: every node must "
                               f"see the same checkpoint folder (shared storage mounted at the "
                               f"same path on every node)")
        time.sleep(1.0)


class Saver:
    """Rank 0's checkpoints: copied to the CPU in the step, written by a thread.

    :meth:`save` waits for the previous write to finish (one at a time), copies the model's and
    the optimizer's state to the CPU, which is all a step waits for, and starts a thread that
    first keeps the newest file as :func:`previous` (a hard link, so the newest name never
    points at nothing) and then writes the copy atomically over the newest. :meth:`wait` waits
    for the write and raises its error, if it had one. A write cut short by a crash leaves a
    temporary file that :meth:`tidy` removes at the next start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.keep_newest = True  # False while the newest file is one that cannot be read
        self.seconds = 0.0       # the last save's copy and write, once it has finished
        self._copy_s = 0.0

    def tidy(self) -> None:
        """At the start: remove what a cut write left, and keep an unreadable newest file from
        replacing a good previous one at the first save."""
        for pattern in (f".{self.path.name}.*.tmp", f".{previous(self.path).name}.link"):
            for leftover in self.path.parent.glob(pattern):
                leftover.unlink(missing_ok=True)
        self.keep_newest = not self.path.exists() or saved_step(self.path) is not None

    def save(self, model: nn.Module, opt: torch.optim.Optimizer, step: int, **run: Any) -> None:
        """``run``: what the data order depends on (kept in the file, checked on resuming)."""
        self.wait()
        began = time.monotonic()
        payload = checkpoint.state(model, opt, step=step, copy=True, **run)
        self._copy_s = time.monotonic() - began
        self.thread = threading.Thread(target=self._write, args=(payload,), name="checkpoint")
        self.thread.start()

    def _write(self, payload: dict) -> None:
        began = time.monotonic()
        try:
            if self.path.exists() and self.keep_newest:
                link = self.path.with_name(f".{previous(self.path).name}.link")
                link.unlink(missing_ok=True)
                try:
                    os.link(self.path, link)
                except OSError:  # a file system without hard links
                    shutil.copyfile(self.path, link)
                os.replace(link, previous(self.path))
            checkpoint.write(self.path, payload)
            self.keep_newest = True
            self.seconds = self._copy_s + time.monotonic() - began
        except BaseException as err:
            self.error = err

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise RuntimeError(f"writing the checkpoint {self.path} failed: {error}") from error


class GraceCheck:
    """Warns once when a stop could outlast its grace: after a stop signal up to --check-every
    steps pass before the ranks see it, then rank 0 copies and writes a checkpoint, all within
    the seconds torchrun gives its workers after SIGTERM (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, which
    the job files set from the job's stop_grace_s) before it kills them."""

    def __init__(self, check_every: int) -> None:
        self.grace = float(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30"))
        self.check_every, self.last, self.warned = check_every, None, False
        self.longest: float | None = None  # the most seconds between two checks so far

    def __call__(self, saver: Saver, warn: bool = True) -> str:
        now, text = time.monotonic(), ""
        if self.last is not None:
            self.longest = max(self.longest or 0.0, now - self.last)
        if warn and self.last is not None and saver.seconds and not self.warned:
            need = now - self.last + saver.seconds
            if need > 0.8 * self.grace:
                self.warned = True
                text = (f"warning: a stop signal may need {need:.0f} s ({self.check_every} steps, then "
                        f"a checkpoint of {saver.seconds:.0f} s), more than 80% of the {self.grace:.0f} s "
                        f"torchrun waits before it kills the workers: raise the job's stop_grace_s "
                        f"(TORCH_ELASTIC_SHUTDOWN_TIMEOUT) or lower --check-every")
                say(text)
        self.last = now
        return text


@functools.lru_cache(maxsize=2)
def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The order of the rows in one epoch: the same on every rank, and again after a resume."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def rows(seed: int, step: int, global_batch: int, n: int, rank: int, per_rank: int) -> torch.Tensor:
    """The rows ``rank`` trains on at ``step``: its slice of the step's part of the epoch."""
    epoch, slot = divmod(step, n // global_batch)
    first = slot * global_batch + rank * per_rank
    return epoch_order(seed, epoch, n)[first:first + per_rank]


def step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of one rank's randomness in one step (dropout): other on every rank and step."""
    return ((seed * 1_000_003 + rank) * 1_000_003 + step) % 2**63


def evaluate(model: nn.Module, X: torch.Tensor, Y: torch.Tensor, rank: int, world: int) -> float:
    """The mean squared error over all the rows, every rank computing every world-th row."""
    model.eval()
    with torch.no_grad():
        mine = slice(rank, None, world)
        error = nn.functional.mse_loss(model(X[mine]), Y[mine], reduction="sum")
        total = torch.stack([error, torch.tensor(float(Y[mine].numel()), device=X.device)])
    dist.all_reduce(total)
    model.train()
    return (total[0] / total[1]).item()


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
    # device_id binds NCCL's or XCCL's process group to this rank's GPU; it connects at once
    generation = init_generation(backend, join_timeout=JOIN_TIMEOUT, timeout=COLLECTIVE_TIMEOUT,
                                 device_id=device if backend in ("nccl", "xccl") else None)
    rank, world = dist.get_rank(), dist.get_world_size()

    X, Y = (t.to(device) for t in regression(n=1024, features=16, seed=0)[0].tensors)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    path = Path(args.checkpoint)
    run = {"seed": args.seed, "global_batch": args.global_batch}  # they decide every step's rows
    saver = Saver(path)
    if rank == 0:
        saver.tidy()
    start = agreed_step(newest_step(path) if rank == 0 else 0, device)  # rank 0 decides
    if start:
        load_agreed(path, start, model, opt, device, rank, **run)
        say(f"rank {rank}: generation {generation}, resumed from step {start}")

    ddp = DDP(model, device_ids=[device.index] if device.type in ("cuda", "xpu") else None)
    if args.global_batch % world or args.global_batch > len(X):
        raise ValueError(f"--global-batch {args.global_batch} does not divide among {world} ranks "
                         f"or exceeds the {len(X)} rows: choose a multiple of {world}, at most {len(X)}")
    per_rank = args.global_batch // world
    if not args.unsettled_buckets:
        fix_buckets(ddp, X[:per_rank])
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    drill = Path(args.drill_marker) if args.drill_marker else None
    node = int(os.environ.get("GROUP_RANK", "0"))
    grace = GraceCheck(args.check_every)
    for s in range(start, args.steps):
        # the rows and the dropout depend only on (seed, rank, step): a resume draws them again
        mine = rows(args.seed, s, args.global_batch, len(X), rank, per_rank).to(device)
        torch.manual_seed(step_seed(args.seed, rank, s))
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(ddp(X[mine]), Y[mine]).backward()
        opt.step()
        done = s + 1
        held = done == args.hold_at and drill is not None and not drill.exists()
        if held:
            hold(stop, flag, rank, done)
        # every rank stops after the same step: the ranks ask each other every --check-every
        # steps (every rank asks at the same steps, or the all-reduces would not pair up)
        stopping = (done % args.check_every == 0 or held) and any_rank(flag, stop)
        stop.acknowledged = stopping
        if done % args.check_every == 0:
            grace(saver, rank == 0)         # a stop in time for the grace? (a warning if not)
            if grace.longest is not None:
                stop.expect(grace.longest, saver.seconds or 0.0, grace.grace)
        if rank == 0 and (done % args.every == 0 or done == args.steps or stopping):
            saver.save(model, opt, done, **run)
        if stopping:
            if rank == 0:
                saver.wait()  # the file is complete before anyone exits
                if args.stop_marker:
                    # before the barrier: once past it, the other nodes exit, and srun may stop
                    # this one (--kill-on-bad-exit) before a later write reached the disk
                    Path(args.stop_marker).write_text(f"stopped with the checkpoint of step {done}\n")
                if drill is not None:
                    drill.write_text(f"stopped by a signal after step {done}\n")
            dist.barrier()
            say(f"rank {rank}: stop signal {stop.name or '(a peer got it)'}: checkpoint of step "
                f"{done} saved, exiting")
            dist.destroy_process_group()
            return STOPPED
        if (done == args.crash_at and node == args.crash_node and int(os.environ["LOCAL_RANK"]) == 0
                and drill is not None and not drill.exists()):
            drill.write_text(f"node {node} crashed after step {done}\n")
            say(f"rank {rank}: injected fault at step {done}")
            os._exit(1)

    loss = evaluate(model, X, Y, rank, world)  # every rank evaluates its part
    if rank == 0:
        saver.wait()
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
