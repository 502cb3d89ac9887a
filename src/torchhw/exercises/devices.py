"""Exercises of notebook 05 (devices): predict a copy's time, move any batch, share the CPUs."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..bench import fmt_time, measure
from ..checkpoint import move
from ..checks import Wrong, equal, exercise
from ..device import pick_device

MIB = 2**20


def _copy_seconds(nbytes: int, device: torch.device) -> float:
    """Median time of one copy of ``nbytes``: host to GPU from pinned memory on CUDA,
    RAM to RAM elsewhere (the copy every CPU-only run makes when it moves data)."""
    if device.type == "cuda":
        src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
        run = lambda: dst.copy_(src, non_blocking=True)  # noqa: E731
    else:
        device = torch.device("cpu")
        src = torch.ones(nbytes, dtype=torch.uint8)
        dst = torch.empty(nbytes, dtype=torch.uint8)
        run = lambda: dst.copy_(src)  # noqa: E731
    return measure(run, label="copy", device=device, min_run_time=0.1).median


@exercise(1, "predict a copy's time, then measure it",
          hint="time = bytes / (bytes per second). The bandwidth is given in GB/s, that is "
               "1e9 bytes per second, and a copy of nbytes moves nbytes across.")
def check_1(predict: Callable[[int, float], float]) -> str:
    device = pick_device("auto")
    what = "host to GPU, pinned" if device.type == "cuda" else "RAM to RAM on the CPU"
    small, large = 32 * MIB, 128 * MIB
    for attempt in range(3):  # a busy machine can slow a timing down: a near miss is retried
        gbps = small / _copy_seconds(small, device) / 1e9
        predicted = float(predict(large, gbps))
        if not predicted > 0 or not math.isfinite(predicted):
            raise Wrong(f"predict({large}, {gbps:.1f}) = {predicted}: a time must be a positive "
                        f"number of seconds.")
        measured = _copy_seconds(large, device)
        ratio = predicted / measured
        report = (f"bandwidth measured on 32 MiB ({what}): {gbps:.1f} GB/s; your prediction "
                  f"for 128 MiB: {fmt_time(predicted)}; measured: {fmt_time(measured)}")
        if 0.5 <= ratio <= 2 or not 0.25 <= ratio <= 4:
            break
    if not 0.5 <= ratio <= 2:
        raise Wrong(f"{report}, {ratio:.3g} times the measurement (within a factor of 2 "
                    f"passes).")
    return f"{report}. Size over bandwidth predicts a large copy well; small ones add latency."


def _nested() -> Any:
    g = torch.Generator().manual_seed(5)
    return {"x": torch.randn(4, 3, generator=g), "labels": [torch.arange(4), torch.zeros(2)],
            "info": ("digits", 3, None), "extra": (torch.ones(1), {"mask": torch.ones(2, dtype=torch.bool)})}


def _compare(got: Any, want: Any, where: str, device: torch.device) -> None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"{where} should be a tensor, got {type(got).__name__}.")
        if got.device != device:
            raise Wrong(f"{where} is on {got.device}, expected {device}.")
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Wrong(f"{where} changed shape or dtype: {tuple(got.shape)} {got.dtype}.")
        return
    if type(got) is not type(want):
        raise Wrong(f"{where} is a {type(got).__name__}, expected a {type(want).__name__} "
                    f"(keep each container's type).")
    if isinstance(want, dict):
        equal(sorted(got), sorted(want), f"the keys of {where}")
        for k in want:
            _compare(got[k], want[k], f"{where}[{k!r}]", device)
    elif isinstance(want, (list, tuple)):
        equal(len(got), len(want), f"len({where})")
        for i, (a, b) in enumerate(zip(got, want)):
            _compare(a, b, f"{where}[{i}]", device)
    elif got is not want and got != want:
        raise Wrong(f"{where} = {got!r} should be left as it is ({want!r}).")


@exercise(2, "move any batch to a device",
          hint="recurse: a tensor -> tensor.to(device); a dict -> a dict of the moved values; "
               "a list or tuple -> the same type of the moved items; anything else unchanged.")
def check_2(to_device: Callable[[Any, Any], Any]) -> str:
    batch = _nested()
    meta = torch.device("meta")
    moved = to_device(batch, meta)
    _compare(moved, batch, "batch", meta)
    if batch["x"].device.type != "cpu":
        raise Wrong("the original batch was changed: tensor.to() returns a new tensor, use that.")
    return ("Checked on the meta device, which exists everywhere; the same function moves a "
            "batch to 'cuda' or 'mps'.")


def _threads(cpu_max: str, affinity: int, processes: int) -> int:
    quota, period = (cpu_max.split() + ["100000"])[:2]
    budget = affinity if quota == "max" else max(1, min(affinity, int(quota) // int(period)))
    return max(1, budget // processes)


@exercise(3, "threads per process in a container",
          hint="first the CPU budget: the affinity count, or, when cpu.max holds a quota, "
               "quota // period whole CPUs (at least 1, at most the affinity). Then share "
               "it: budget // processes, but never fewer than 1 thread.")
def check_3(threads: Callable[[str, int, int], int]) -> str:
    for cpu_max, affinity, procs in [("max 100000", 8, 1), ("max 100000", 8, 2),
                                     ("200000 100000", 64, 1), ("200000 100000", 64, 4),
                                     ("150000 100000", 64, 1), ("50000 100000", 16, 1),
                                     ("1600000 100000", 4, 2), ("max 100000", 3, 2)]:
        equal(threads(cpu_max, affinity, procs), _threads(cpu_max, affinity, procs),
              f"threads({cpu_max!r}, affinity={affinity}, processes={procs})")
    return "Every process's threads times the processes now fit in what the container pays for."


CHECKS = {1: check_1, 2: check_2, 3: check_3}


# the reference answer is the helper checkpoint.load uses for the same job
_to_device = move


SOLUTIONS: dict[int, Any] = {
    1: lambda nbytes, gbps: nbytes / (gbps * 1e9),
    2: _to_device,
    3: _threads,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda nbytes, gbps: nbytes / gbps, lambda nbytes, gbps: 8 * nbytes / (gbps * 1e9),
        lambda nbytes, gbps: gbps * 1e9 / nbytes],
    2: [lambda b, d: {k: v.to(d) if isinstance(v, torch.Tensor) else v for k, v in b.items()},
        lambda b, d: b,
        lambda b, d: {k: [_to_device(x, d) for x in v] if isinstance(v, (list, tuple))
                      else _to_device(v, d) for k, v in b.items()}],
    3: [lambda c, a, p: max(1, a // p),
        lambda c, a, p: a if c.startswith("max") else max(1, min(a, int(c.split()[0]) // int(c.split()[1]))),
        lambda c, a, p: max(1, (a if c.startswith("max") else min(a, math.ceil(int(c.split()[0]) / int(c.split()[1])))) // p)],
}
