"""Functions and a torchrun script for the distributed tests.

Spawned ranks import the launch fixtures by module name, so the tests put this folder on
``sys.path`` (pytest does; multiprocessing's spawn passes the parent's ``sys.path`` on).
As a script it is a torchrun entry point::

    torchrun --standalone --nproc-per-node=2 tests/fixtures_distributed.py hello

(The training job the tests run under torchrun is the course's own, torchhw.distributed.train.)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from torchhw.distributed.elastic import init_generation


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

def say(text: str) -> None:
    sys.stdout.write(text + "\n")  # one write per line: ranks sharing a pipe cannot interleave
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=["hello", "sleep"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.task == "sleep":
        say(f"rank {os.environ.get('RANK')}: sleeping")
        while True:
            time.sleep(0.2)
    if args.task == "hello":
        init_generation("gloo", join_timeout=timedelta(seconds=60), timeout=timedelta(seconds=60))
        t = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(t)
        say(f"rank {dist.get_rank()} of {dist.get_world_size()} "
            f"(node {os.environ.get('GROUP_RANK')}): sum of ranks = {t.item():g}")
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
