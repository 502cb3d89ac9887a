"""Exercises of notebook 07 (DDP): sharding, loss scaling, what communication costs, memory."""

from __future__ import annotations

import math
from typing import Any, Callable

from torch.utils.data import DistributedSampler

from ..checks import Wrong, close, equal, exercise, hints_for, mark, watching, why
from ..i18n import tr


def _shard(n: int, rank: int, world: int, wrap_once: bool = False) -> list[int]:
    """DistributedSampler's indices without shuffling. ``wrap_once=True`` is a typical wrong
    version: the padding repeats the start of the list once, too short when n < world / 2."""
    total = math.ceil(n / world) * world
    padded = ([i % n for i in range(total)] if not wrap_once else
              (list(range(n)) + list(range(n)))[:total])
    return padded[rank:total:world]


def _padded_with(n: int, rank: int, world: int, index: int) -> list[int]:
    """A wrong version: the padding repeats one index (the first or the last) instead of
    wrapping around."""
    total = math.ceil(n / world) * world
    return (list(range(n)) + [index] * (total - n))[rank::world]


def _dropped(n: int, rank: int, world: int) -> list[int]:
    """A wrong version: the tail is dropped, as DistributedSampler(drop_last=True) does."""
    return list(range(n))[:n // world * world][rank::world]


_CASES_1 = [(10, 2), (10, 3), (7, 4), (4, 4), (1, 4), (3, 8)]
_NEVER = object()  # a value no answer equals: a mistake that does not fit the whole answer


def _answers_1(shard: Callable[[int, int, int], Any]) -> dict[tuple[int, int, int], Any]:
    """The reader's indices for every case (None where the answer fails there)."""
    answers: dict[tuple[int, int, int], Any] = {}
    for n, world in _CASES_1:
        for rank in range(world):
            try:
                answers[n, rank, world] = [int(i) for i in shard(n, rank, world)]
            except Exception:
                answers[n, rank, world] = None
    return answers


def _sampler_calls() -> Any:
    """Watch DistributedSampler being made or iterated, however it was imported (its methods,
    looked up on the class at call time, are replaced; the class itself stays)."""
    return watching((DistributedSampler, "__init__", "DistributedSampler"),
                    (DistributedSampler, "__iter__", "DistributedSampler"))


@exercise(1, "which examples a rank gets",
          hint="every rank must get the same number of examples, even when n does not divide "
               "by world. How does DistributedSampler make up the difference, and in what "
               "order does it deal the indices out?",
          more="DistributedSampler (no shuffle) pads the index list by wrapping around to a "
               "multiple of world_size (0, 1, ..., n-1, 0, 1, ... again, as often as needed), "
               "then gives rank r every world_size-th index from r: padded[r::world].")
def check_1(shard: Callable[[int, int, int], list[int]]) -> str:
    # (1, 4) and (3, 8): fewer examples than ranks, so the padding wraps round more than once
    wants = {(n, rank, world): list(DistributedSampler(range(n), num_replicas=world, rank=rank,
                                                       shuffle=False))
             for n, world in _CASES_1 for rank in range(world)}
    with _sampler_calls() as seen:
        for (n, rank, world), want in wants.items():
            per = math.ceil(n / world)
            call = f"shard({n}, rank={rank}, world={world})"
            got = shard(n, rank, world)
            if seen.used:
                raise Wrong(tr("{call} uses DistributedSampler itself: the exercise asks you to "
                               "compute its indices without it.", call=call))
            try:
                got = [int(i) for i in got]
            except (TypeError, ValueError):
                raise Wrong(tr("{call} returned {got}: return a list of indices.", call=call,
                               got=repr(got))) from None
            if got == want:
                continue
            answers = _answers_1(shard)

            def fits(mistake: Callable[[int, int, int], list[int]]) -> Any:
                """``got`` if the answer is this mistake on every case, else a value nothing
                equals: the reason is then only the fallback's, from this case alone."""
                return got if all(answers[c] == mistake(*c) for c in answers) else _NEVER

            equal(got, want, call, why(
                got, want,
                # mistakes the whole answer makes, on every case: each has its own reason
                (fits(lambda n, r, w: _shard(n, r, w, wrap_once=True)),
                 "the padding wraps around as often as needed, not just once: with fewer "
                 "examples than ranks, 0, 1, ..., n-1 comes round again and again"),
                (fits(lambda n, r, w: list(range(r, n, w))),
                 "without padding the ranks get different numbers of examples: pad the list to "
                 "a multiple of world by wrapping around"),
                (fits(_dropped), "that drops the tail, as DistributedSampler(drop_last=True) "
                                 "does; by default it pads instead, by wrapping around to the "
                                 "start, so that no example is left out"),
                (fits(lambda n, r, w: _padded_with(n, r, w, n - 1)),
                 "the padding repeats the list from its start (0, 1, 2, ...), not the last "
                 "index"),
                (fits(lambda n, r, w: _padded_with(n, r, w, 0)),
                 "the padding repeats the list from its start (0, 1, 2, ...), not index 0 "
                 "alone"),
                # this case alone
                ([i % n for i in range(rank * per, (rank + 1) * per)],
                 "DistributedSampler deals the indices out in turn (every world-th from the "
                 "rank), not in blocks"),
                (list(range(n))[rank * per:(rank + 1) * per],
                 "DistributedSampler deals the indices out in turn, not in blocks, and pads "
                 "the list so that every rank gets as many"),
                (_shard(n, rank, world, wrap_once=True), "the padding wraps around as often "
                                                         "as needed, not just once"),
                (list(range(rank, n, world)), "without padding the ranks get different numbers "
                                              "of examples: pad the list to a multiple of "
                                              "world by wrapping around")))
    return "Every rank gets the same number of examples, so every rank runs the same number of steps."


@exercise(2, "matching one process with DDP",
          hint="DDP averages the ranks' gradients. Write out one process's gradient over the "
               "full batch, for a mean loss and for a sum loss, and compare it with that "
               "average.",
          more="DDP averages gradients over ranks. With a mean loss each rank's gradient is "
               "already an average, and averaging averages of equal shards gives the full "
               "batch's average: scale 1. A sum loss is not averaged over examples, so the "
               "full batch's gradient is the sum of the ranks' gradients, world_size times "
               "their average: scale world_size.")
def check_2(scale: Callable[[int, str], float]) -> str:
    for world in (1, 2, 8):
        for reduction, want in (("mean", 1.0), ("sum", float(world))):
            got = scale(world, reduction)
            call = f"scale({world}, {reduction!r})"
            close(got, want, call, extra=why(
                got, want,
                (float(world), "a mean loss needs no scaling: averaging equal shards' averages "
                               "gives the full batch's average"),
                (1.0, "with a sum loss DDP's average of the ranks' sums is world_size times "
                      "smaller than the full batch's sum"),
                (1 / world, "upside down: DDP divides by world_size when it averages, so a "
                            "sum loss must be multiplied by it")))
    return "That is why the equivalence in section 4 needs a mean loss and equal shards."


def _speedup(t: float, c: float, n: int) -> float:
    return t / (t / n + (c if n > 1 else 0.0))


@exercise(3, "the speed-up DDP can reach",
          hint="a speed-up is the old time over the new time. Which part of a step shrinks "
               "with N ranks and which does not? And what does a single rank pay?",
          more="with N ranks the computation takes t / N, but every step also pays the "
               "all-reduce time c, which does not shrink: speed-up = t / (t / N + c). One rank "
               "alone communicates with nobody: its speed-up is 1.")
def check_3(speedup: Callable[[float, float, int], float]) -> str:
    for t, c, n in [(1.0, 0.0, 4), (1.0, 0.1, 4), (0.02, 0.01, 8), (3.0, 0.5, 1)]:
        want = _speedup(t, c, n)
        got = speedup(t, c, n)
        call = f"speedup(t={t}, c={c}, N={n})"
        close(got, want, call, extra=why(
            got, want,
            (t / (t / n + c), "one rank alone has nobody to talk to: it pays no c"),
            (float(n), "that is the ideal speed-up: the all-reduce time c does not shrink "
                       "with N"),
            (t / (t / n + c / n), "the all-reduce time c does not shrink with N"),
            ((t / n + c) / t, "upside down: the speed-up is the old time over the new time"),
            (t / (t + c), "the computation is split over the N ranks: t / N each")))
    return "Communication that does not shrink with N caps the speed-up: keep per-rank work large."


def _bytes_per_rank(params: int, n: int, how: str) -> float:
    return 16 * params / (n if how == "fsdp" else 1)


def _mistakes_4(got: float, want: float, params: int, n: int, how: str) -> str:
    per = n if how == "fsdp" else 1
    return why(got, want,
               (16 * params / n, "DDP keeps a full copy of everything on every rank; only FSDP "
                                 "splits it"),
               (16 * params, "FSDP splits weights, gradients and Adam's state over the n ranks"),
               (8 * params + 8 * params / n if how == "fsdp" else _NEVER,
                "that splits only Adam's state, as ZeRO-1 (ZeroRedundancyOptimizer) does; FSDP "
                "splits the weights and the gradients too"),
               (4 * params + 12 * params / n if how == "fsdp" else _NEVER,
                "that splits the gradients and Adam's state, as ZeRO-2 does; FSDP splits the "
                "weights too"),
               (4 * params / per, "those are the weights alone: the gradients and Adam's two "
                                  "moments are held too"),
               (8 * params / per, "weights and gradients only: Adam keeps two moments, 8 "
                                  "bytes more"),
               (12 * params / per, "one piece is missing: weights 4, gradients 4, Adam's two "
                                   "moments 8"),
               (20 * params / per, "the task leaves DDP's buckets out: 16 bytes per parameter"),
               (params / per, "count bytes, not parameters"),
               rel=1e-6)


@exercise(4, "memory per rank, DDP and FSDP",
          hint="list what training with Adam keeps for each parameter and how many bytes each "
               "piece takes in float32; then ask which of the two methods splits it over the "
               "ranks.",
          more="float32 weights 4 bytes, gradients 4, Adam's two moments 8: 16 bytes per "
               "parameter (DDP's buckets not counted). DDP keeps all of it on every rank: "
               "16 * params; FSDP splits it over the n ranks: 16 * params / n.")
def _check_4(answer: tuple[Callable[[int, int, str], float], Any]) -> str:
    fn, measured = answer
    for params, n in [(1_000_000, 1), (1_000_000, 8), (67_210, 2), (7_000_000_000, 64)]:
        for how in ("ddp", "fsdp"):
            want = _bytes_per_rank(params, n, how)
            got = fn(params, n, how)
            call = f"bytes_per_rank({params:,}, {n}, {how!r})"
            close(got, want, call, rel=1e-6,
                  extra=_mistakes_4(got, want, params, n, how))
    if measured:
        n = len(measured)
        total = measured[0]["ddp"]["params"]
        held = [m["ddp"]["weights"] + m["ddp"]["grads"] + m["ddp"]["adam"] for m in measured]
        close(fn(total, n, "ddp"), held[0], tr("bytes_per_rank({total}, {n}, 'ddp') against the "
                                               "measurement of rank 0", total=total, n=n), rel=0.01)
        # FSDP's shards differ where a dimension does not divide by n: compare all ranks' sum
        shards = sum(m["fsdp"]["weights"] + m["fsdp"]["grads"] + m["fsdp"]["adam"] for m in measured)
        close(n * fn(total, n, "fsdp"), shards, tr("{n} x bytes_per_rank({total}, {n}, 'fsdp') "
                                                   "against the sum the {n} ranks measured",
                                                   total=total, n=n), rel=0.01)
        return ("It matches what the ranks measured. A 7B model needs 112 GB per GPU under DDP "
                "(140 GB with its buckets), before activations.")
    return ("A 7B-parameter model needs 112 GB per GPU under DDP (140 GB with its buckets), "
            "1.75 GB on 64 GPUs with FSDP, before activations and the gathered weights.")


def check_4(answer: Callable[[int, int, str], float] | None, measured: Any = None) -> Any:
    """Grades ``answer`` by the arithmetic and, given section 11's ``measured``, against it."""
    return _check_4(None if answer is None else (answer, measured))


mark(check_4, _check_4.number, _check_4.title, _check_4.nudge,  # type: ignore[attr-defined]
     _check_4.more)  # type: ignore[attr-defined]


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: _shard,
    2: lambda world, reduction: 1.0 if reduction == "mean" else float(world),
    3: _speedup,
    4: _bytes_per_rank,
}

WRONG: dict[int, list[Any]] = {
    # blocks instead of turns; the hint's warning (padding, wrapping as often as needed)
    1: [lambda n, r, w: list(range(n))[r * math.ceil(n / w):(r + 1) * math.ceil(n / w)],
        lambda n, r, w: list(range(r, n, w)),
        # pads by repeating the start once: wrong where the padding is longer than the data
        lambda n, r, w: _shard(n, r, w, wrap_once=True),
        # the review's: the tail dropped, the padding by the last index, and the very class
        # the exercise is about (the task forbids it)
        _dropped, lambda n, r, w: _padded_with(n, r, w, n - 1),
        lambda n, r, w: list(DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=False))],
    # constants, and the scale upside down
    2: [lambda w, red: 1.0, lambda w, red: float(w),
        lambda w, red: 1.0 if red == "mean" else 1 / w],
    # the ideal speed-up (c ignored), c shrinking with N, and the hint's warning (one rank
    # pays no c)
    3: [lambda t, c, n: float(n), lambda t, c, n: t / (t / n), lambda t, c, n: t / (t / n + c),
        lambda t, c, n: t / (t / n + c / n) if n > 1 else 1.0],
    # DDP sharded like FSDP, pieces of the 16 bytes left out, and the buckets counted against
    # the task's rule
    4: [lambda p, n, how: 16 * p / n, lambda p, n, how: 4 * p / (n if how == "fsdp" else 1),
        lambda p, n, how: 12 * p / (n if how == "fsdp" else 1),
        lambda p, n, how: 20 * p if how == "ddp" else 16 * p / n,
        # the review's: only Adam's state split (ZeRO-1), not FSDP
        lambda p, n, how: 16 * p if how == "ddp" else 8 * p + 8 * p / n],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda n, r, w: [(r + k * w) % n for k in range(math.ceil(n / w))]],
    2: [lambda world_size, reduction: {"mean": 1, "sum": world_size}[reduction]],
    3: [lambda t, c, n: 1.0 if n == 1 else t / (t / n + c)],
    4: [lambda params, n, how: (4 + 4 + 8) * params / (n if how == "fsdp" else 1)],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
