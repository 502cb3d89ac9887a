"""Functions and a torchrun script for the distributed tests and the stress harness.

Spawned ranks import the launch fixtures by module name, so the tests put this folder on
``sys.path`` (pytest does; multiprocessing's spawn passes the parent's ``sys.path`` on).
As a script it is a torchrun entry point::

    torchrun --standalone --nproc-per-node=2 tests/fixtures_distributed.py hello
    torchrun --nnodes=2 ... tests/fixtures_distributed.py train --steps 40 --checkpoint c.pt \\
        --out r.json --crash-at 25 --crash-node 1 --crash-marker crashed
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from torchhw import checkpoint as ckpt
from torchhw.data import regression
from torchhw.elastic import agreed_step, init_generation
from torchhw.models import MLP


# --------------------------------------------------------------------------- launch fixtures

def hello(info):
    print(f"hello from rank {info.rank} of {info.world_size}")
    return {"rank": info.rank, "world_size": dist.get_world_size(), "backend": dist.get_backend()}


def collectives(info):
    mine = torch.tensor([float(info.rank + 1)], device=info.device)
    total = mine.clone()
    dist.all_reduce(total)
    shared = mine * 100
    dist.broadcast(shared, src=0)
    gathered = [torch.zeros_like(mine) for _ in range(info.world_size)]
    dist.all_gather(gathered, mine)
    print(f"mine={mine.item():g} all_reduce={total.item():g}")
    return {"all_reduce": total.tolist(), "broadcast": shared.tolist(),
            "all_gather": [t.item() for t in gathered], "device": str(mine.device)}


def environment(info):
    """What a rank sees of the launcher's environment."""
    return {"probe": os.environ.get("TORCHHW_PROBE"), "debug": str(dist.get_debug_level())}


def fail_on(info, bad_rank=1):
    """Raise on ``bad_rank`` while the others wait in a collective (the crash path)."""
    if info.rank == bad_rank:
        raise ValueError(f"rank {info.rank} was told to fail")
    dist.barrier()


def killed_on(info, bad_rank=1):
    """A rank that dies without running Python's handlers (as when the OOM killer strikes)."""
    if info.rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def skips_collective(info, culprit=1):
    """The culprit skips an all_reduce that its peers then wait in (the time-out path)."""
    if info.rank != culprit:
        dist.all_reduce(torch.ones(1))
    return info.rank


def sleep_forever(info):
    """Never return (the time-out and interrupt paths)."""
    print("sleeping", flush=True)
    while True:
        time.sleep(0.2)


# --------------------------------------------------------------------------- torchrun script

def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def say(text: str) -> None:
    sys.stdout.write(text + "\n")  # one write per line: ranks sharing a pipe cannot interleave
    sys.stdout.flush()


def ordered_mean(state, bucket):
    """DDP communication hook: gather every rank's gradients and add them in rank order.

    A ring all-reduce adds each element in an order that depends on its place in the bucket,
    and DDP rebuilds its buckets after the first step, so a resumed run (first step again)
    would round differently from an uninterrupted one. A fixed order makes resume bitwise.
    """
    world = dist.get_world_size()
    grads = bucket.buffer()
    parts = [torch.empty_like(grads) for _ in range(world)]
    fut = dist.all_gather(parts, grads, async_op=True).get_future()

    def total(f):
        f.value()  # raises if the gather failed (a peer died): never continue on garbage
        out = parts[0].clone()
        for p in parts[1:]:
            out += p
        return out.div_(world)
    return fut.then(total)


def train(args: argparse.Namespace) -> None:
    """DDP training with rank-0 checkpoints; rank 0 decides whether and where to resume."""
    generation = init_generation("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data, _, _ = regression(n=1024, features=16, seed=0)
    X, Y = data.tensors
    torch.manual_seed(0)
    model = MLP(16, 1, hidden=32, depth=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    path = Path(args.checkpoint)
    found = int(torch.load(path, weights_only=False)["step"]) if rank == 0 and path.exists() else 0
    start = agreed_step(found)
    if start:
        ckpt.load(path, model, opt, restore_rng=False)
        say(f"rank {rank}: generation {generation}, resumed from step {start}")
    ddp = DDP(model)
    ddp.register_comm_hook(None, ordered_mean)
    per_rank = args.global_batch // world
    for step in range(start, args.steps):
        first = (step * args.global_batch) % (len(X) - args.global_batch)
        lo = first + rank * per_rank
        opt.zero_grad()
        nn.functional.mse_loss(ddp(X[lo:lo + per_rank]), Y[lo:lo + per_rank]).backward()
        opt.step()
        done = step + 1
        if done % args.every == 0:
            if rank == 0:
                ckpt.save(path, model, opt, step=done)
            dist.barrier()
        node = int(os.environ.get("GROUP_RANK", "0"))
        if (args.crash_at == done and node == args.crash_node and int(os.environ["LOCAL_RANK"]) == 0
                and not Path(args.crash_marker).exists()):
            Path(args.crash_marker).write_text(f"node {node} crashed at step {done}\n")
            say(f"rank {rank}: injected fault at step {done}")
            os._exit(1)
    if rank == 0:
        summary = {"steps": args.steps, "world_size": world, "generation": generation,
                   "digest": digest(model)}
        say(f"rank 0: done, {json.dumps(summary)}")
        Path(args.out).write_text(json.dumps(summary))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=["hello", "sleep", "train"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--checkpoint", default="ckpt.pt")
    parser.add_argument("--out", default="result.json")
    parser.add_argument("--crash-at", type=int, default=None)
    parser.add_argument("--crash-node", type=int, default=0)
    parser.add_argument("--crash-marker", default="crashed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.task == "sleep":
        say(f"rank {os.environ.get('RANK')}: sleeping")
        while True:
            time.sleep(0.2)
    if args.task == "hello":
        init_generation("gloo")
        t = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(t)
        say(f"rank {dist.get_rank()} of {dist.get_world_size()} "
            f"(node {os.environ.get('GROUP_RANK')}): sum of ranks = {t.item():g}")
        dist.barrier()
        dist.destroy_process_group()
    else:
        train(args)


if __name__ == "__main__":
    main()
