"""Joining a process group under torchrun in a way that survives restarts across nodes.

The problem. torchrun hands its workers a key-value store (``MASTER_ADDR:MASTER_PORT``) that
outlives the workers: after a restart, the new workers find the dead workers' keys (their
addresses) still there, and plain ``init_process_group()`` can read a dead worker's address
and fail with "Connection refused". Prefixing the keys with ``TORCHELASTIC_RESTART_COUNT``
fixes it on one node only: each node's agent keeps its own count and raises it only when a
worker *on that node* failed, so after a crash on node 1, node 0's workers look under
``restart0`` and node 1's under ``restart1``, and they never meet.

The fix (:func:`generation_store`). The workers agree on a fresh key prefix through the store
itself. Global rank 0 takes a new number from an atomic counter (``store.add``); every other
rank posts a random token and waits for rank 0 to answer *that token* with the number. A
token is new, so no answer left over from an earlier generation can match it; the number is
new, so no key left over can fall under the prefix. Every rank, on every node, then uses the
same prefix, whatever each agent's restart count says.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta

import torch
import torch.distributed as dist


def generation_store(timeout: timedelta) -> tuple[dist.Store, int]:
    """The torchrun store under a prefix all ranks of this generation share; and its number.

    ``timeout``: how long the ranks wait for each other to arrive (and any later store call).
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=not agent_store and rank == 0, timeout=timeout)
    deadline = time.monotonic() + timeout.total_seconds()
    if rank == 0:
        generation = store.add("torchhw/generation", 1)      # atomic: a number never used before
        waiting = set(range(1, world))
        answered: set[str] = set()
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ranks {sorted(waiting)} never joined generation {generation}")
            for r in sorted(waiting):
                if store.check([f"torchhw/hello/{r}"]):
                    token = store.get(f"torchhw/hello/{r}").decode()
                    if token not in answered:                    # maybe stale: answering is harmless
                        store.set(f"torchhw/answer/{token}", str(generation))
                        answered.add(token)
                if store.check([f"torchhw/gen{generation}/joined/{r}"]):
                    waiting.discard(r)
            time.sleep(0.01)
    else:
        token = uuid.uuid4().hex                                   # fresh: only this rank knows it
        store.set(f"torchhw/hello/{rank}", token)
        generation = int(store.get(f"torchhw/answer/{token}"))   # blocks until rank 0 answers
        store.set(f"torchhw/gen{generation}/joined/{rank}", "1")
    return dist.PrefixStore(f"torchhw/gen{generation}", store), generation


def init_generation(backend: str, *, join_timeout: timedelta, timeout: timedelta,
                    device_id: torch.device | None = None) -> int:
    """``init_process_group`` on :func:`generation_store`; returns the generation number.

    Both time limits are the caller's to state (there is no default to forget):
    ``join_timeout`` for the ranks of a generation to find each other, ``timeout`` for any one
    collective (torch's own default is 10 minutes for NCCL, 30 for gloo). ``device_id``, this
    rank's GPU, binds the process group to it: NCCL then creates its communicator during this
    call rather than at the first collective, and never has to guess the GPU of a rank.
    """
    store, generation = generation_store(join_timeout)
    bound = {"device_id": device_id} if device_id is not None else {}
    dist.init_process_group(backend, store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout, **bound)
    return generation


def agreed_step(local_step: int, device: torch.device | str = "cpu") -> int:
    """Rank 0's value of ``local_step``, on every rank (rank 0 decides whether to resume).

    ``device``: where the backend's tensors live (this rank's GPU under NCCL or XCCL).
    """
    t = torch.tensor([local_step], dtype=torch.int64, device=device)
    dist.broadcast(t, src=0)
    return int(t.item())
