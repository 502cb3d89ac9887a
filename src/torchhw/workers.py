"""The functions that launched ranks run: notebooks 07 (DDP) and 08 (clusters) import them.

Spawned processes import their function by module and name, so these live in the package
rather than in a notebook. Each takes a :class:`~torchhw.distributed.RankInfo` first and
runs inside an initialised process group.

The module is also a torchrun entry point (notebook 08)::

    torchrun --standalone --nproc-per-node=2 -m torchhw.workers hello
    torchrun --standalone --nproc-per-node=2 --max-restarts=1 -m torchhw.workers train \\
        --steps 40 --checkpoint ckpt.pt --out result.json --crash-at 25 --crash-marker crashed
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from . import checkpoint as ckpt
from .distributed import RankInfo


def hello(info: RankInfo) -> dict[str, Any]:
    """Say who this rank is."""
    print(f"hello from rank {info.rank} of {info.world_size}, backend {info.backend}, "
          f"process {os.getpid()}")
    return {"rank": info.rank, "world_size": dist.get_world_size(), "backend": dist.get_backend()}


def collectives(info: RankInfo) -> dict[str, list[float]]:
    """all_reduce, broadcast and all_gather on small tensors; returns what this rank ended with."""
    device = torch.device(info.device)
    mine = torch.tensor([float(info.rank + 1)], device=device)

    total = mine.clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)      # every rank gets the sum

    shared = mine.clone() * 100
    dist.broadcast(shared, src=0)                      # every rank gets rank 0's value

    gathered = [torch.zeros_like(mine) for _ in range(info.world_size)]
    dist.all_gather(gathered, mine)                    # every rank gets everyone's value

    print(f"mine={mine.item():g}  all_reduce(sum)={total.item():g}  "
          f"broadcast(from 0)={shared.item():g}  all_gather={[t.item() for t in gathered]}")
    return {"mine": mine.tolist(), "all_reduce": total.tolist(), "broadcast": shared.tolist(),
            "all_gather": [t.item() for t in gathered]}


def make_data(n: int = 512, features: int = 16, seed: int = 0) -> TensorDataset:
    """A fixed regression set, identical on every rank (seeded, no global RNG touched)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    return TensorDataset(X, X @ w + 0.1 * torch.randn(n, 1, generator=g))


def make_model(features: int = 16, hidden: int = 32, batch_norm: bool = False, seed: int = 0) -> nn.Module:
    """A small MLP, the same on every rank for the same seed."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(features, hidden)]
    if batch_norm:
        layers.append(nn.BatchNorm1d(hidden))
    layers += [nn.ReLU(), nn.Linear(hidden, 1)]
    return nn.Sequential(*layers)


def ddp_train(info: RankInfo, config: dict[str, Any]) -> dict[str, Any]:
    """Train with DDP; each rank sees 1/world_size of every global batch.

    config: global_batch, steps, lr, loss ('mean' or 'sum'), batch_norm (bool), seed.
    Returns the final parameters and this rank's losses.
    """
    device = torch.device(info.device)
    data = make_data(seed=config.get("seed", 0))
    model = make_model(batch_norm=config.get("batch_norm", False), seed=config.get("seed", 0)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=config.get("lr", 0.05))
    per_rank = config["global_batch"] // info.world_size
    # no shuffling: the union of the ranks' batches at step s is the same global batch a
    # single process would take at step s
    sampler = DistributedSampler(data, num_replicas=info.world_size, rank=info.rank, shuffle=False)
    loader = DataLoader(data, batch_size=per_rank, sampler=sampler, drop_last=True)
    reduction = config.get("loss", "mean")
    losses: list[float] = []
    batches = iter(loader)
    for _ in range(config["steps"]):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x.to(device)), y.to(device), reduction=reduction)
        loss.backward()  # DDP averages the gradients across ranks during backward
        opt.step()
        losses.append(loss.item())
    if info.rank == 0:
        print(f"{config['steps']} steps, {per_rank} examples per rank per step, "
              f"final loss {losses[-1]:.6f}")
    return {"state": {k: v.cpu() for k, v in model.state_dict().items()}, "losses": losses}


def ddp_compare(info: RankInfo, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`ddp_train` once per config, in one launch (start-up is the slow part)."""
    return [ddp_train(info, config) for config in configs]


def no_sync_accumulation(info: RankInfo, micro_batches: int = 4, per_rank: int = 8) -> dict[str, Any]:
    """Accumulate gradients over micro-batches, syncing only on the last one (``no_sync``).

    Returns how many gradient all-reduces ran with and without no_sync, and the largest
    difference between the two runs' accumulated gradients.
    """
    device = torch.device(info.device)
    data = make_data()
    grads, calls = {}, {}
    for use_no_sync in (False, True):
        model = make_model().to(device)
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        count = {"n": 0}

        def counting_hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
            count["n"] += 1
            tensor = bucket.buffer().div_(info.world_size)
            return dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0])

        ddp.register_comm_hook(None, counting_hook)
        for i in range(micro_batches):
            start = (i * info.world_size + info.rank) * per_rank
            x, y = data.tensors[0][start:start + per_rank], data.tensors[1][start:start + per_rank]
            if use_no_sync and i < micro_batches - 1:
                with ddp.no_sync():  # forward and backward inside: gradients stay local
                    (nn.functional.mse_loss(ddp(x.to(device)), y.to(device)) / micro_batches).backward()
            else:
                (nn.functional.mse_loss(ddp(x.to(device)), y.to(device)) / micro_batches).backward()
        grads[use_no_sync] = torch.cat([p.grad.flatten() for p in model.parameters()])
        calls[use_no_sync] = count["n"]
    diff = (grads[True] - grads[False]).abs().max().item()
    if info.rank == 0:
        print(f"all-reduce rounds: {calls[False]} without no_sync, {calls[True]} with it; "
              f"largest gradient difference {diff:.2e}")
    return {"rounds_without": calls[False], "rounds_with": calls[True], "max_diff": diff}


def checkpoint_rank0(info: RankInfo, path: str, steps: int = 5) -> dict[str, Any]:
    """Train briefly, save from rank 0 only, then every rank loads the file and compares."""
    device = torch.device(info.device)
    result = ddp_train(info, {"global_batch": 32 * info.world_size, "steps": steps, "lr": 0.05})
    model = make_model().to(device)
    model.load_state_dict(result["state"])
    wrote = False
    if info.rank == 0:  # one writer: ranks writing the same file at once would corrupt it
        ckpt.save(path, model, step=steps)
        wrote = True
    dist.barrier()      # nobody reads before rank 0 has finished writing
    fresh = make_model(seed=123).to(device)
    ckpt.load(path, fresh, map_location=device, restore_rng=False)
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    print(f"wrote the checkpoint: {wrote}; loaded weights equal mine: {same}")
    return {"wrote": wrote, "same": same}


def throughput(info: RankInfo, global_batch: int = 256, steps: int = 30, hidden: int = 256) -> dict[str, float]:
    """Samples per second of DDP training with a fixed global batch split across ranks."""
    device = torch.device(info.device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 10)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    per_rank = global_batch // info.world_size
    x = torch.randn(per_rank, 128, device=device)
    y = torch.randint(0, 10, (per_rank,), device=device)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(3):  # warm-up
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    seconds = time.perf_counter() - start
    return {"samples_per_s": global_batch * steps / seconds, "seconds": seconds}


def fail_on(info: RankInfo, bad_rank: int = 1) -> None:
    """Raise on ``bad_rank`` while the others wait in a collective (for the crash path)."""
    if info.rank == bad_rank:
        raise ValueError(f"rank {info.rank} was told to fail")
    dist.barrier()


def sleep_forever(info: RankInfo) -> None:
    """Never return (for the timeout and interrupt paths)."""
    print("sleeping", flush=True)
    while True:
        time.sleep(0.2)


# --------------------------------------------------------------------------- torchrun entry

def _param_digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def init_elastic_group(backend: str) -> int:
    """init_process_group for a torchrun worker that may be a restart; returns the restart count.

    After a restart the agent's key-value store still holds the previous workers' addresses.
    Plain ``init_process_group()`` can read a dead worker's address before the new one has
    replaced it, and fail with "Connection refused" (seen here about one restart in three).
    A key prefix per restart keeps each generation to itself.
    """
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=not agent_store and rank == 0,
                          timeout=timedelta(seconds=60))
    dist.init_process_group(backend, store=dist.PrefixStore(f"restart{restart}", store),
                            rank=rank, world_size=world, timeout=timedelta(seconds=60))
    return restart


def _elastic_train(args: argparse.Namespace) -> None:
    """DDP training that checkpoints from rank 0 and resumes after a restart (torchrun)."""
    backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]) else "gloo"
    local = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{local}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    restart = init_elastic_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    data = make_data(n=1024)
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    path = Path(args.checkpoint) if args.checkpoint else None
    if path is not None and path.exists():
        start = int(ckpt.load(path, model, opt, map_location=device, restore_rng=False)["step"])
        print(f"rank {rank}: restart {restart}, resumed from step {start}", flush=True)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    per_rank = args.global_batch // world
    X, Y = data.tensors
    for step in range(start, args.steps):
        # the batch depends only on the step, so a resumed run sees exactly the same data
        first = (step * args.global_batch) % (len(X) - args.global_batch)
        lo = first + rank * per_rank
        x, y = X[lo:lo + per_rank].to(device), Y[lo:lo + per_rank].to(device)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        done = step + 1
        if path is not None and done % args.every == 0:
            if rank == 0:
                ckpt.save(path, model, opt, step=done)
            dist.barrier()
        if (args.crash_at is not None and done == args.crash_at and rank == args.crash_rank
                and args.crash_marker and not Path(args.crash_marker).exists()):
            Path(args.crash_marker).write_text(f"crashed at step {done}\n")
            print(f"rank {rank}: injected fault at step {done}", flush=True)
            os._exit(1)
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(X.to(device)), Y.to(device)).item()
    if rank == 0:
        summary = {"steps": args.steps, "world_size": world, "restarts": restart,
                   "digest": _param_digest(model), "loss": loss}
        print(f"rank 0: done, {json.dumps(summary)}", flush=True)
        if args.out:
            tmp = Path(args.out + ".tmp")
            tmp.write_text(json.dumps(summary))
            tmp.replace(args.out)
    dist.barrier()
    dist.destroy_process_group()


def _hello_torchrun() -> None:
    init_elastic_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    node = os.environ.get("GROUP_RANK", "0")
    local = os.environ.get("LOCAL_RANK", "0")
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    print(f"rank {rank} of {world} (node {node}, local rank {local}, host {socket.gethostname()}): "
          f"sum of ranks = {t.item():g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m torchhw.workers",
                                     description="torchrun entry points of the course")
    sub = parser.add_subparsers(dest="task", required=True)
    sub.add_parser("hello", help="each rank reports itself; an all_reduce of the ranks")
    sub.add_parser("sleep", help="never finish (for testing time-outs and interrupts)")
    t = sub.add_parser("train", help="DDP training with rank-0 checkpoints and resume")
    t.add_argument("--steps", type=int, default=40)
    t.add_argument("--global-batch", type=int, default=64)
    t.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    t.add_argument("--checkpoint", default="")
    t.add_argument("--out", default="")
    t.add_argument("--crash-at", type=int, default=None, help="inject a fault after this step")
    t.add_argument("--crash-rank", type=int, default=1)
    t.add_argument("--crash-marker", default="", help="the fault happens once: when this file is absent")
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.task == "hello":
        _hello_torchrun()
    elif args.task == "sleep":
        print(f"rank {os.environ.get('RANK')}: sleeping", flush=True)
        while True:
            time.sleep(0.2)
    else:
        _elastic_train(args)


if __name__ == "__main__":
    main()
