"""Exercises of notebook 07 (DDP): sharding, loss scaling, what communication costs, memory."""

from __future__ import annotations

import math
from typing import Any, Callable

from torch.utils.data import DistributedSampler

from ..checks import close, equal, exercise


@exercise(1, "which examples a rank gets",
          hint="DistributedSampler (no shuffle) pads the index list by wrapping around to a "
               "multiple of world_size, then gives rank r every world_size-th index from r.")
def check_1(shard: Callable[[int, int, int], list[int]]) -> str:
    # (1, 4) and (3, 8): fewer examples than ranks, so the padding wraps round more than once
    for n, world in [(10, 2), (10, 3), (7, 4), (4, 4), (1, 4), (3, 8)]:
        for rank in range(world):
            equal(list(shard(n, rank, world)),
                  list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False)),
                  f"shard({n}, rank={rank}, world={world})")
    return "Every rank gets the same number of examples, so every rank runs the same number of steps."


@exercise(2, "matching one process with DDP",
          hint="DDP averages gradients over ranks. With a mean loss each rank's gradient is "
               "already an average, and averaging averages of equal shards gives the full "
               "batch's average. A sum loss is not averaged over examples...")
def check_2(scale: Callable[[int, str], float]) -> str:
    for world in (1, 2, 8):
        close(scale(world, "mean"), 1.0, f"scale({world}, 'mean')")
        close(scale(world, "sum"), float(world), f"scale({world}, 'sum')")
    return "That is why the equivalence in section 4 needs a mean loss and equal shards."


@exercise(3, "the speed-up DDP can reach",
          hint="with N ranks the computation takes t / N, but every step also pays the "
               "all-reduce time c, which does not shrink: speed-up = t / (t / N + c). One rank "
               "alone communicates with nobody: its speed-up is 1.")
def check_3(speedup: Callable[[float, float, int], float]) -> str:
    for t, c, n in [(1.0, 0.0, 4), (1.0, 0.1, 4), (0.02, 0.01, 8), (3.0, 0.5, 1)]:
        close(speedup(t, c, n), _speedup(t, c, n), f"speedup(t={t}, c={c}, N={n})")
    return "Communication that does not shrink with N caps the speed-up: keep per-rank work large."


def _speedup(t: float, c: float, n: int) -> float:
    return t / (t / n + (c if n > 1 else 0.0))


def _bytes_per_rank(params: int, n: int, how: str) -> float:
    return 16 * params / (n if how == "fsdp" else 1)


@exercise(4, "memory per rank, DDP and FSDP",
          hint="float32 weights 4 bytes, gradients 4, Adam's two moments 8: 16 bytes per "
               "parameter (DDP's buckets not counted). DDP keeps all of it on every rank; FSDP "
               "splits it over the n ranks.")
def _check_4(answer: tuple[Callable[[int, int, str], float], Any]) -> str:
    fn, measured = answer
    for params, n in [(1_000_000, 1), (1_000_000, 8), (67_210, 2), (7_000_000_000, 64)]:
        for how in ("ddp", "fsdp"):
            close(fn(params, n, how), _bytes_per_rank(params, n, how),
                  f"bytes_per_rank({params:,}, {n}, {how!r})", rel=1e-6)
    if measured:
        n = len(measured)
        total = measured[0]["ddp"]["params"]
        held = [m["ddp"]["weights"] + m["ddp"]["grads"] + m["ddp"]["adam"] for m in measured]
        close(fn(total, n, "ddp"), held[0], f"bytes_per_rank({total}, {n}, 'ddp') against the "
              f"measurement of rank 0", rel=0.01)
        # FSDP's shards differ where a dimension does not divide by n: compare all ranks' sum
        shards = sum(m["fsdp"]["weights"] + m["fsdp"]["grads"] + m["fsdp"]["adam"] for m in measured)
        close(n * fn(total, n, "fsdp"), shards, f"{n} x bytes_per_rank({total}, {n}, 'fsdp') "
              f"against the sum the {n} ranks measured", rel=0.01)
        return ("It matches what the ranks measured. A 7B model needs 112 GB per GPU under DDP "
                "(140 GB with its buckets), before activations.")
    return ("A 7B-parameter model needs 112 GB per GPU under DDP (140 GB with its buckets), "
            "1.75 GB on 64 GPUs with FSDP, before activations and the gathered weights.")


def check_4(answer: Callable[[int, int, str], float] | None, measured: Any = None) -> Any:
    """Grades ``answer`` by the arithmetic and, given section 11's ``measured``, against it."""
    return _check_4(None if answer is None else (answer, measured))


check_4.number = 4  # type: ignore[attr-defined]
check_4.title = "memory per rank, DDP and FSDP"  # type: ignore[attr-defined]


def _shard(n: int, rank: int, world: int) -> list[int]:
    total = math.ceil(n / world) * world
    padded = [i % n for i in range(total)]
    return padded[rank:total:world]


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}

SOLUTIONS: dict[int, Any] = {
    1: _shard,
    2: lambda world, reduction: 1.0 if reduction == "mean" else float(world),
    3: _speedup,
    4: _bytes_per_rank,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda n, r, w: list(range(n))[r * math.ceil(n / w):(r + 1) * math.ceil(n / w)],
        lambda n, r, w: list(range(r, n, w)),
        # pads by repeating the start once: wrong where the padding is longer than the data
        lambda n, r, w: (list(range(n)) + list(range(n))[:math.ceil(n / w) * w - n])[r::w]],
    2: [lambda w, red: 1.0, lambda w, red: float(w)],
    3: [lambda t, c, n: float(n), lambda t, c, n: t / (t / n), lambda t, c, n: t / (t / n + c)],
    4: [lambda p, n, how: 16 * p / n, lambda p, n, how: 4 * p / (n if how == "fsdp" else 1),
        lambda p, n, how: 12 * p / (n if how == "fsdp" else 1)],
}
