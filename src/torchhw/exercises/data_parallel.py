"""Exercises of notebook 06 (DataParallel): scatter's chunks, the module. prefix, the GIL."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

import torch
from torch import nn

from ..checks import Wrong, equal, exercise, same_tensor


@exercise(1, "how scatter splits a batch",
          hint="scatter cuts the batch like torch.chunk: every chunk has ceil(batch / devices) "
               "rows except the last, which gets what is left. So there can be fewer chunks "
               "than devices.")
def check_1(sizes: Callable[[int, int], list[int]]) -> str:
    for batch, devices in [(10, 4), (8, 4), (5, 4), (3, 4), (1, 2), (7, 3), (64, 3)]:
        want = [len(c) for c in torch.arange(batch).chunk(devices)]
        equal(list(sizes(batch, devices)), want, f"sizes({batch}, devices={devices})")
    return ("With 5 rows on 4 GPUs one GPU gets nothing: keep the batch a multiple of the "
            "device count.")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.submodule = nn.Linear(4, 3)  # a name that contains 'module'
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(3, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.submodule(x))


@exercise(2, "load a DataParallel state_dict into a plain model",
          hint="DataParallel keeps your model as its attribute `module`, so every key starts "
               "with 'module.'. Remove that prefix at the start of each key only: "
               "key.removeprefix('module.') (a plain replace() also hits 'submodule.').")
def check_2(strip: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> str:
    torch.manual_seed(6)
    wrapped = nn.DataParallel(_Net())
    state = wrapped.state_dict()
    keys = list(state)
    plain = _Net()
    fixed = strip(state)
    if list(state) != keys:
        raise Wrong("your function changed the state_dict it was given; build a new dict.")
    try:
        plain.load_state_dict(fixed)
    except RuntimeError as err:
        raise Wrong(f"load_state_dict(strict=True) still fails: {str(err).splitlines()[-1].strip()}")
    x = torch.randn(5, 4)
    same_tensor(plain(x), wrapped.module(x), "the plain model's output")
    return ("torch also ships this: torch.nn.modules.utils."
            "consume_prefix_in_state_dict_if_present(state, 'module.'). Better still, save "
            "model.module.state_dict() in the first place.")


def _python_work(iterations: int) -> int:
    total = 0
    for i in range(iterations):  # pure Python: holds the GIL the whole time
        total += i * i
    return total


def _calibrate(seconds: float) -> int:
    probe = 200_000
    start = time.perf_counter()
    _python_work(probe)
    return max(1, int(probe * seconds / (time.perf_counter() - start)))


def _run_replicas(replicas: int, work: Callable[[], Any]) -> float:
    threads = [threading.Thread(target=work) for _ in range(replicas)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


@exercise(3, "predict the threads' wall time, then measure it",
          hint="Python runs one thread at a time (the GIL), so replicas whose time is spent "
               "in Python take turns: replicas x seconds. Replicas that wait outside Python "
               "(a GPU kernel, a sleep, most large torch ops) overlap: about seconds.")
def check_3(predict: Callable[[int, float, bool], float]) -> str:
    iterations = _calibrate(0.03)
    lines = []
    for replicas, holds_gil in [(6, True), (4, False)]:
        what = f"{replicas} replicas {'in Python' if holds_gil else 'waiting outside Python'}"
        for attempt in range(3):  # a busy machine can slow a run down: a near miss is retried
            if holds_gil:
                work: Callable[[], Any] = lambda: _python_work(iterations)  # noqa: E731
                work.holds_gil = True  # type: ignore[attr-defined]  # read by the tests' clock
                # one replica alone, just before, is the unit of time (the best of three runs)
                seconds = min(_run_replicas(1, work) for _ in range(3))
            else:
                seconds = 0.03
                work = lambda: time.sleep(seconds)  # noqa: E731
                work.holds_gil = False  # type: ignore[attr-defined]
            measured = _run_replicas(replicas, work)
            guess = float(predict(replicas, seconds, holds_gil))
            ratio = guess / measured if math.isfinite(guess) else math.inf
            if 0.5 <= ratio <= 2 or not 0.25 <= ratio <= 4:
                break
        if not 0.5 <= ratio <= 2:
            raise Wrong(f"{what}, {seconds * 1e3:.0f} ms each: you predicted {guess * 1e3:.0f} ms, "
                        f"the threads took {measured * 1e3:.0f} ms (within a factor of 2 passes).")
        lines.append(f"{what}, {seconds * 1e3:.0f} ms each: predicted {guess * 1e3:.0f} ms, "
                     f"measured {measured * 1e3:.0f} ms")
    return "; ".join(lines) + ". That is DataParallel's Python overhead: it does not overlap."


CHECKS = {1: check_1, 2: check_2, 3: check_3}

SOLUTIONS: dict[int, Any] = {
    1: lambda batch, devices: [len(c) for c in torch.arange(batch).chunk(devices)],
    2: lambda state: {k.removeprefix("module."): v for k, v in state.items()},
    3: lambda replicas, seconds, holds_gil: replicas * seconds if holds_gil else seconds,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda b, d: [len(c) for c in torch.arange(b).tensor_split(d)],
        lambda b, d: [b // d] * d,
        lambda b, d: [math.ceil(b / d)] * d],
    2: [lambda state: {k.replace("module.", ""): v for k, v in state.items()},
        lambda state: dict(state),
        lambda state: {k.split(".")[-2] + "." + k.split(".")[-1]: v for k, v in state.items()}],
    3: [lambda r, s, g: s, lambda r, s, g: r * s, lambda r, s, g: s / r],
}
