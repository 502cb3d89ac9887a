"""Exercises of notebook 05 (devices): predict a copy's time, move any batch, share the CPUs."""

from __future__ import annotations

import math
import numbers
import statistics
import time
from typing import Any, Callable

import torch

from ..bench import beyond_cache, fmt_time
from ..checkpoint import move
from ..checks import Wrong, equal, exercise, hints_for, why
from ..device import pick_device, synchronize
from ..hardware import _caches
from ..i18n import _, tr

MIB = 2**20
_TRIES = 5   # a busy machine slows timings by any factor: measure again on a miss
_ROUNDS = 7  # copies of each size per try, alternating, so that a patch of load slows both
_WITHIN = 1.4  # a prediction within this factor of the measurement passes (twice does not)
_BUFFERS: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def _sizes() -> tuple[int, int]:
    """The bytes of the copy whose bandwidth is given, and of the one to predict (twice as
    many). Both lie well beyond this CPU's last-level cache (bench.beyond_cache: four times
    it, 64 MiB at least, here at most 256 MiB to stay quick): a copy that partly sits in a
    cache runs at the cache's speed, and its bandwidth would not predict one from memory."""
    small = beyond_cache(_caches(), cap=256 * MIB)
    return small, 2 * small


def _copy_seconds(nbytes: int, device: torch.device) -> float:
    """Seconds one copy of ``nbytes`` takes, timed once with the device synchronised at both
    ends: host to GPU from pinned memory on CUDA, RAM to RAM elsewhere (the copy every
    CPU-only run makes when it moves data). The buffers of a size are made, and copied once
    untimed (fresh memory pays for its pages on first touch), at its first call; check_1
    frees them when it ends."""
    if device.type != "cuda":
        device = torch.device("cpu")
    key = (nbytes, device.type)
    if key not in _BUFFERS:
        if device.type == "cuda":
            src = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
        else:
            src = torch.ones(nbytes, dtype=torch.uint8)
        dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dst.copy_(src)
        _BUFFERS[key] = (src, dst)
    src, dst = _BUFFERS[key]
    synchronize(device)
    start = time.perf_counter()
    dst.copy_(src, non_blocking=device.type == "cuda")
    synchronize(device)
    return time.perf_counter() - start


def _factor(ratios: list[float]) -> str:
    """What predictions ``ratios`` times the measurements most likely got wrong, or '': a
    factor is named only when every try lands near it (8 within 1.5 times either way, 2
    within 1.25, the far larger ones within 2), so noise on a busy machine is not taken for a
    mistake."""
    for factor, spread, reason in [
            (1e9, 2, _(" (GB/s means 1e9 bytes per second: divide by gbps * 1e9)")),
            (1e-9, 2, _(" (GB/s means 1e9 bytes per second: divide by gbps * 1e9, do not "
                        "multiply)")),
            (8, 1.5, _(" (8 times: nbytes counts bytes, and GB/s is bytes per second, not bits)")),
            (1e3, 2, _(" (a thousand times: the time is asked in seconds, not milliseconds)")),
            (2, 1.25, _(" (about twice: was the copy counted as read plus write? Here gbps "
                        "counts each byte once, nbytes over the copy's time, so a copy of "
                        "nbytes takes nbytes / (gbps * 1e9); notebook 00's bench.bandwidth "
                        "counts a copy's read and its write, twice the bytes)"))]:
        if ratios and all(factor / spread <= r <= factor * spread for r in ratios):
            return reason
    return ""


@exercise(1, "predict a copy's time, then measure it",
          hint="a copy's time is how much it moves over how fast it moves it. Mind the units: "
               "what is a GB/s in bytes per second?",
          more="time = bytes / (bytes per second). The bandwidth is given in GB/s, that is "
               "1e9 bytes per second, counting each byte of a copy once, and a copy of nbytes "
               "moves nbytes across: nbytes / (gbps * 1e9) seconds.")
def check_1(predict: Callable[[int, float], float]) -> str:
    # first the prediction's form: a copy 8 times larger takes about 8 times as long, and
    # twice the bandwidth about half the time. A constant or an upside-down formula fails here.
    base = float(predict(128 * MIB, 10.0))
    if not base > 0 or not math.isfinite(base):
        raise Wrong(tr("predict({nbytes}, {gbps}) = {time}: a time must be a positive number "
                       "of seconds.", nbytes=128 * MIB, gbps="10.0", time=base))
    larger, faster = float(predict(1024 * MIB, 10.0)) / base, float(predict(128 * MIB, 20.0)) / base
    if not 4 <= larger <= 16:
        raise Wrong(tr("your prediction for 1 GiB is {times} times the one for 128 MiB at "
                       "the same bandwidth: a copy of 8 times the bytes should take about 8 "
                       "times as long.", times=f"{larger:.3g}"))
    if not 0.25 <= faster <= 0.75:
        raise Wrong(tr("doubling the bandwidth changes your prediction {times} times: twice "
                       "the bytes per second should take about half the time.",
                       times=f"{faster:.3g}"))
    device = pick_device("auto")
    what = _("host to GPU, pinned") if device.type == "cuda" else _("RAM to RAM on the CPU")
    small, large = _sizes()
    # the two sizes alternate within a try, and each try is judged on its medians; a miss
    # measures again, and a mistake is named only when every try misses by its factor
    ratios: list[float] = []
    best: tuple[float, str] | None = None
    try:
        for attempt in range(_TRIES):
            times: dict[int, list[float]] = {small: [], large: []}
            for r in range(_ROUNDS):
                for nbytes in (small, large) if r % 2 == 0 else (large, small):
                    times[nbytes].append(_copy_seconds(nbytes, device))
            gbps = small / statistics.median(times[small]) / 1e9
            measured = statistics.median(times[large])
            predicted = float(predict(large, gbps))
            if not predicted > 0 or not math.isfinite(predicted):
                raise Wrong(tr("predict({nbytes}, {gbps}) = {time}: a time must be a positive "
                               "number of seconds.", nbytes=large, gbps=f"{gbps:.1f}",
                               time=predicted))
            ratio = predicted / measured
            ratios.append(ratio)
            report = tr("bandwidth of a {small} MiB copy ({what}): {gbps} GB/s; your "
                        "prediction for {large} MiB: {predicted}; measured: {measured}",
                        small=small // MIB, large=large // MIB, what=what, gbps=f"{gbps:.1f}",
                        predicted=fmt_time(predicted), measured=fmt_time(measured))
            if best is None or abs(math.log(ratio)) < abs(math.log(best[0])):
                best = (ratio, report)
            if 1 / _WITHIN <= ratio <= _WITHIN:
                break
    finally:
        _BUFFERS.clear()
    ratio, report = best
    if not 1 / _WITHIN <= ratio <= _WITHIN:
        tries = (tr(" (the best of {count} measurements)", count=len(ratios))
                 if len(ratios) > 1 else "")
        raise Wrong(tr("{report}, {ratio} times the measurement{tries}{mistake}; within a factor "
                       "of {within} passes.", report=report, ratio=f"{ratio:.3g}", tries=tries,
                       mistake=_factor(ratios), within=_WITHIN))
    return tr("{report}. Bytes over bandwidth predicted a copy twice as large: beyond the "
              "caches, a copy's time grows in proportion to its bytes.", report=report)


def _nested() -> Any:
    g = torch.Generator().manual_seed(5)
    return {"x": torch.randn(4, 3, generator=g), "labels": [torch.arange(4), torch.zeros(2)],
            "info": ("digits", 3, None), "extra": (torch.ones(1), {"mask": torch.ones(2, dtype=torch.bool)})}


def _compare(got: Any, want: Any, where: str, device: torch.device) -> None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Wrong(tr("{where} should be a tensor, got {kind}.", where=where,
                           kind=type(got).__name__))
        if got.device != device:
            raise Wrong(tr("{where} is on {got}, expected {want}: every tensor must move, "
                           "however deep in dicts, lists and tuples it sits (recurse).",
                           where=where, got=got.device, want=device))
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Wrong(tr("{where} changed shape or dtype: {shape} {dtype}.", where=where,
                           shape=tuple(got.shape), dtype=got.dtype))
        return
    if type(got) is not type(want) and not isinstance(want, (dict, list, tuple)):
        raise Wrong(tr("{where} = {got} should be left as it is ({want}): only tensors move; "
                       "strings, numbers and None stay what they are.", where=where,
                       got=_short(got), want=repr(want)))
    if type(got) is not type(want):
        what = type(want).__name__
        raise Wrong(tr("{where} is a {kind}, expected a {what} (keep each container's type: "
                       "type(value)(...) rebuilds a {what}).", where=where,
                       kind=type(got).__name__, what=what))
    if isinstance(want, dict):
        equal(sorted(got), sorted(want), tr("the keys of {where}", where=where))
        for k in want:
            _compare(got[k], want[k], f"{where}[{k!r}]", device)
    elif isinstance(want, (list, tuple)):
        equal(len(got), len(want), tr("len({where})", where=where))
        for i, (a, b) in enumerate(zip(got, want)):
            _compare(a, b, f"{where}[{i}]", device)
    elif got is not want and got != want:
        raise Wrong(tr("{where} = {got} should be left as it is ({want}).", where=where,
                       got=repr(got), want=repr(want)))


def _short(value: Any) -> str:
    """A value as feedback shows it: a tensor by its kind and device, not its numbers."""
    if isinstance(value, torch.Tensor):
        return tr("a tensor on {device}", device=value.device)
    return repr(value)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    return [t for item in items for t in _tensors(item)]


@exercise(2, "move any batch to a device",
          hint="a batch is a tree: tensors at the leaves, dicts, lists and tuples above them. "
               "A function that moves one level can call itself for the next.",
          more="recurse: a tensor -> tensor.to(device); a dict -> a dict of the moved values; "
               "a list or tuple -> the same type of the moved items (type(batch)(...)); "
               "anything else (strings, numbers, None) unchanged. Build new containers rather "
               "than changing the given ones.")
def check_2(to_device: Callable[[Any, Any], Any]) -> str:
    batch = _nested()
    before = _nested()
    meta = torch.device("meta")
    moved = to_device(batch, meta)
    try:
        _compare(batch, before, "batch", torch.device("cpu"))
    except Wrong:
        raise Wrong(tr("the original batch was changed: build new dicts and lists of the "
                       "moved values (tensor.to() returns a new tensor) and leave the given "
                       "ones as they were.")) from None
    _compare(moved, batch, "batch", meta)
    return ("Checked on the meta device, which exists everywhere; the same function moves a "
            "batch to 'cuda' or 'mps'.")


def _threads(cpu_max: str, affinity: int, processes: int) -> int:
    quota, period = (cpu_max.split() + ["100000"])[:2]
    budget = affinity if quota == "max" else max(1, min(affinity, int(quota) // int(period)))
    return max(1, budget // processes)


def _budget(cpu_max: str, affinity: int, rounding: Callable[[float], int] = math.floor,
            cap: bool = True) -> int:
    """The CPU budget; ``rounding=math.ceil`` and ``cap=False`` are typical wrong versions."""
    quota, period = (cpu_max.split() + ["100000"])[:2]
    if quota == "max":
        return affinity
    whole = rounding(int(quota) / int(period))
    return max(1, min(affinity, whole) if cap else whole)


@exercise(3, "threads per process in a container",
          hint="two steps: first how many CPUs the container may use at all (the affinity, or "
               "the quota in cpu.max when there is one), then how to share them among the "
               "processes. Check the edge cases the task names.",
          more="first the CPU budget: the affinity count, or, when cpu.max holds a quota, "
               "quota // period whole CPUs (at least 1, at most the affinity). Then share "
               "it: budget // processes, but never fewer than 1 thread.")
def check_3(threads: Callable[[str, int, int], int]) -> str:
    for cpu_max, affinity, procs in [("max 100000", 8, 1), ("max 100000", 8, 2),
                                     ("200000 100000", 64, 1), ("200000 100000", 64, 4),
                                     ("150000 100000", 64, 1), ("50000 100000", 16, 1),
                                     ("1600000 100000", 4, 2), ("max 100000", 3, 2),
                                     ("max 100000", 2, 4)]:
        want = _threads(cpu_max, affinity, procs)
        got = threads(cpu_max, affinity, procs)
        call = tr("threads({cpu_max}, affinity={affinity}, processes={processes})",
                  cpu_max=repr(cpu_max), affinity=affinity, processes=procs)
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            raise Wrong(tr("{call} returned {got}, a {kind}: the count goes to "
                           "torch.set_num_threads, which takes an int and raises a RuntimeError "
                           "for a {kind}. Threads come whole: divide with // and return an int.",
                           call=call, got=repr(got), kind=type(got).__name__))
        equal(got, want, call, why(
            got, want,
            (max(1, affinity // procs), "the quota in cpu.max is left out: a container may own "
                                        "fewer CPUs than the affinity shows"),
            (max(1, min(affinity, _budget(cpu_max, affinity, cap=False) // procs)),
             "cap the budget at the affinity before sharing it: min(affinity, quota // "
             "period), then // processes (capped after sharing, the processes together may "
             "ask for more CPUs than the affinity has)"),
            (_budget(cpu_max, affinity), "the budget is not shared: divide it among the "
                                         "processes"),
            (max(1, _budget(cpu_max, affinity, math.ceil) // procs),
             "a part of a CPU is not a CPU: round the quota down (//)"),
            (max(1, _budget(cpu_max, affinity, cap=False) // procs),
             "a quota above the affinity cannot use more CPUs than the affinity allows"),
            (_budget(cpu_max, affinity) // procs, "never fewer than 1 thread per process")))
    return "Every process's threads times the processes now fit in what the container pays for."


CHECKS = {1: check_1, 2: check_2, 3: check_3}
hint = hints_for(CHECKS)


# the reference answer is the helper checkpoint.load uses for the same job
_to_device = move


def _to_list(batch: Any, device: Any) -> Any:
    """Moves every tensor, but turns each tuple into a list."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to_list(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [_to_list(v, device) for v in batch]
    return batch


def _move_in_place(batch: Any, device: Any) -> Any:
    """Moves every tensor by writing into the given containers (tuples rebuilt)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        for k in batch:
            batch[k] = _move_in_place(batch[k], device)
        return batch
    if isinstance(batch, list):
        batch[:] = [_move_in_place(v, device) for v in batch]
        return batch
    if isinstance(batch, tuple):
        return tuple(_move_in_place(v, device) for v in batch)
    return batch


def _to_device_written_out(batch: Any, device: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {key: _to_device_written_out(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device_written_out(item, device) for item in batch)
    return batch


SOLUTIONS: dict[int, Any] = {
    1: lambda nbytes, gbps: nbytes / (gbps * 1e9),
    2: _to_device,
    3: _threads,
}

WRONG: dict[int, list[Any]] = {
    # a prediction off by a factor (the hint's units: 1e9 bytes per second; bits; ms), the
    # time upside down, a constant, and the copy counted as read plus write (twice the time)
    1: [lambda nbytes, gbps: nbytes / gbps, lambda nbytes, gbps: 8 * nbytes / (gbps * 1e9),
        lambda nbytes, gbps: gbps * 1e9 / nbytes, lambda nbytes, gbps: 0.02,
        lambda nbytes, gbps: 1e3 * nbytes / (gbps * 1e9),
        lambda nbytes, gbps: 2 * nbytes / (gbps * 1e9)],
    # the hint's recursion missing, nothing moved, one level only; the task's rules broken:
    # a tuple turned into a list, the given batch changed in place
    2: [lambda b, d: {k: v.to(d) if isinstance(v, torch.Tensor) else v for k, v in b.items()},
        lambda b, d: b,
        lambda b, d: {k: [_to_device(x, d) for x in v] if isinstance(v, (list, tuple))
                      else _to_device(v, d) for k, v in b.items()},
        lambda b, d: _to_list(b, d),
        _move_in_place],
    # the quota left out, not shared, rounded up, no floor of 1, no cap at the affinity, the
    # cap applied after sharing, a float (which torch.set_num_threads refuses), / for //
    3: [lambda c, a, p: max(1, a // p),
        lambda c, a, p: a if c.startswith("max") else max(1, min(a, int(c.split()[0]) // int(c.split()[1]))),
        lambda c, a, p: max(1, (a if c.startswith("max") else min(a, math.ceil(int(c.split()[0]) / int(c.split()[1])))) // p),
        lambda c, a, p: max(1, _budget(c, a, cap=False) // p),
        lambda c, a, p: _budget(c, a) // p,
        lambda c, a, p: max(1, min(a, _budget(c, a, cap=False) // p)),
        lambda c, a, p: float(_threads(c, a, p)),
        lambda c, a, p: max(1, _budget(c, a) / p)],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda nbytes, gbps: nbytes / gbps / 1e9, lambda nbytes, gbps: nbytes / (gbps * 2**30)],
    2: [_to_device_written_out],
    3: [lambda c, a, p: max(1, (a if c.split()[0] == "max" else
                                max(1, min(a, int(c.split()[0]) // int(c.split()[1])))) // p)],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
