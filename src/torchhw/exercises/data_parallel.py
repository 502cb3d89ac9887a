"""Exercises of notebook 06 (DataParallel): scatter's chunks, the module. prefix, the GIL."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from typing import Any, Callable

import torch
from torch import nn

from ..checks import TorchCalls, Wrong, equal, exercise, hints_for, same_tensor, why
from ..i18n import _, tr


_SPLITS = {"chunk", "tensor_split", "split", "split_with_sizes", "unsafe_chunk", "unsafe_split"}


@exercise(1, "how scatter splits a batch",
          hint="torch.chunk first decides one chunk size for all, then cuts until the rows run "
               "out. What size is that, and what happens to the last chunk, or to chunks after "
               "the rows are gone?",
          more="scatter cuts the batch like torch.chunk: every chunk has ceil(batch / devices) "
               "rows except the last, which gets what is left. So there can be fewer chunks "
               "than devices: 5 rows on 4 devices give [2, 2, 1].")
def check_1(sizes: Callable[[int, int], list[int]]) -> str:
    for batch, devices in [(10, 4), (8, 4), (5, 4), (3, 4), (1, 2), (7, 3), (64, 3), (9, 6)]:
        want = [len(c) for c in torch.arange(batch).chunk(devices)]
        with TorchCalls() as ops:
            got = sizes(batch, devices)
        used = ops.names & _SPLITS
        if used:
            raise Wrong(tr("sizes({batch}, devices={devices}) calls {names}: the exercise is to "
                           "work the sizes out from the numbers, without torch.chunk or the "
                           "other functions that cut a tensor (torch.split, tensor_split).",
                           batch=batch, devices=devices, names=", ".join(sorted(used))))
        try:
            got = [int(n) for n in got]
        except (TypeError, ValueError):
            raise Wrong(tr("sizes({batch}, devices={devices}) returned {got}: return a list of "
                           "chunk sizes.", batch=batch, devices=devices, got=repr(got))) from None
        per = -(-batch // devices)
        call = tr("sizes({batch}, devices={devices})", batch=batch, devices=devices)
        equal(got, want, call, why(
            got, want,
            ([len(c) for c in torch.arange(batch).tensor_split(devices)],
             "that is tensor_split, which spreads the rows over all devices; chunk gives each "
             "chunk ceil(batch / devices) rows"),
            ([per] * devices, "the chunks add up to more rows than the batch has: the last one "
                              "gets what is left, and there may be fewer chunks than devices"),
            ([batch // devices] * devices, "the chunks must add up to the batch: "
                                           "ceil(batch / devices) rows each"),
            ([per] * (batch // per) + [0] * (devices - batch // per) if batch % per == 0 else None,
             "chunk makes no empty chunks: there are fewer chunks than devices"),
            ([per] * (batch // per) + [batch % per] + [0] * (devices - batch // per - 1)
             if batch % per else None,
             "chunk makes no empty chunks: there are fewer chunks than devices")))
    return ("With 5 rows on 4 GPUs one GPU gets nothing: keep the batch a multiple of the "
            "device count.")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.submodule = nn.Linear(4, 3)  # a name that contains 'module'
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(3, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.submodule(x))


class _Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x)


class _Letters(nn.Module):
    """Keys that begin with letters of 'module.' ('embed.weight', 'mlp.0.bias') and a child
    named 'module' itself: they expose lstrip("module."), which strips characters, not a
    prefix."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 3)
        self.mlp = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        self.module = _Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x) + self.mlp(self.embed(x))


@exercise(2, "load a DataParallel state_dict into a plain model",
          hint="print the keys of both state_dicts: what does DataParallel add to each, and "
               "where? Take away exactly that, nothing more.",
          more="DataParallel keeps your model as its attribute `module`, so every key starts "
               "with 'module.'. Remove that prefix at the start of each key only: "
               "{key.removeprefix('module.'): value for key, value in state.items()} (a plain "
               "replace() also hits 'submodule.').")
def check_2(strip: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> str:
    for net in (_Net, _Letters):
        _check_strip(strip, net)
    return ("torch also ships this: torch.nn.modules.utils."
            "consume_prefix_in_state_dict_if_present(state, 'module.'). Better still, save "
            "model.module.state_dict() in the first place.")


def _check_strip(strip: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
                 net: type[nn.Module]) -> None:
    torch.manual_seed(6)
    wrapped = nn.DataParallel(net())
    state = wrapped.state_dict()
    keys = list(state)
    given = dict(state)                                  # the very tensor objects handed over
    before = {k: v.clone() for k, v in state.items()}   # and their values
    plain = net()
    fixed = strip(state)
    if list(state) != keys:
        raise Wrong(tr("your function changed the state_dict it was given; build a new dict."))
    replaced = [k for k in keys if state[k] is not given[k]]
    if replaced:
        raise Wrong(tr("your function put new values into the state_dict it was given (under "
                       "{key}): leave that dict as it is, and put the tensors into the new one.",
                       key=repr(replaced[0])))
    changed = [k for k in keys if not torch.equal(given[k], before[k])]
    if changed:
        raise Wrong(tr("your function changed the tensor {key} of the state_dict it was given, "
                       "in place: a state_dict's tensors share memory with the model's own "
                       "weights, so the wrapped model changed too. Rename the keys only, and "
                       "leave the tensors untouched.", key=repr(changed[0])))
    if not isinstance(fixed, dict):
        raise Wrong(tr("return a dict of the same tensors, got {kind}.",
                       kind=type(fixed).__name__))
    if list(fixed) == keys:
        raise Wrong(tr("the keys still start with 'module.': the plain model's keys do not "
                       "have it."))
    lost = [k for k in keys if "submodule." in k.removeprefix("module.")
            and k.removeprefix("module.") not in fixed]
    if lost and any(k.replace("module.", "") in fixed for k in lost):
        raise Wrong(tr("'module.' was removed inside the key too: 'module.submodule.weight' "
                       "must become 'submodule.weight'. Remove the prefix at the start only "
                       "(replace() removes every occurrence)."))
    stripped = [k for k in keys if k.lstrip("module.") != k.removeprefix("module.")]
    if stripped and all(k.lstrip("module.") in fixed for k in stripped):
        k = stripped[0]
        raise Wrong(tr("{key} became {stripped}: lstrip() removes any of the characters m, o, "
                       "d, u, l, e and '.', not the prefix 'module.'. Remove exactly the prefix "
                       "(removeprefix(), or slice off len('module.')).", key=repr(k),
                       stripped=repr(k.lstrip("module."))))
    try:
        plain.load_state_dict(fixed)
    except RuntimeError as err:
        raise Wrong(tr("load_state_dict(strict=True) still fails: {error}",
                       error=str(err).splitlines()[-1].strip()))
    x = torch.randn(5, 4)
    same_tensor(plain(x), wrapped.module(x), "the plain model's output")


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


def _gil_enabled() -> bool:
    """False on a free-threaded CPython (3.13t, 3.14t) running without its GIL."""
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return True if is_enabled is None else bool(is_enabled())


def _cores() -> int:
    """The CPUs this process may run on (its affinity where the system reports one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


def _as_if_on_cores(guess: float, replicas: int, seconds: float) -> int | None:
    """k where ``guess`` is what ``replicas`` threads of ``seconds`` take in parallel on k
    cores (replicas x seconds / k, or rounds of k: ceil(replicas / k) x seconds), else None."""
    for k in range(2, replicas):
        for model in (replicas * seconds / k, math.ceil(replicas / k) * seconds):
            if math.isclose(guess, model, rel_tol=0.01):
                return k
    return None


# a prediction passes from LOW to HIGH times the measured time. Threads in Python can only be
# slowed by a busy machine, not sped up; sleeping threads wait at least `seconds`
_BANDS = {True: (0.7, 1.5), False: (0.5, 1.5)}


def _run_replicas(replicas: int, work: Callable[[], Any]) -> float:
    threads = [threading.Thread(target=work) for _ in range(replicas)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


@exercise(3, "predict the threads' wall time, then measure it",
          hint="which kind of work can two Python threads do at the same moment? Think of the "
               "GIL: what it lets run side by side, and what it makes take turns.",
          more="In standard CPython one thread runs Python at a time (the GIL), so replicas "
               "whose time is spent in Python take turns: replicas x seconds, however many "
               "cores there are. Replicas that wait with the GIL released (a sleep, a wait for "
               "the GPU) overlap: about seconds. Large torch operations on the CPU release the "
               "GIL too, but they need a core each: they overlap only as far as there are "
               "free cores. (A free-threaded Python, 3.13t or 3.14t, has no GIL: there the "
               "threads in Python run side by side on the cores as well.)")
def check_3(predict: Callable[[int, float, bool], float]) -> str:
    gil = _gil_enabled()
    iterations = _calibrate(0.03)
    lines, guesses = [], []
    for replicas, holds_gil in [(6, True), (4, False)]:
        what = (tr("{replicas} replicas in Python", replicas=replicas) if holds_gil else
                tr("{replicas} replicas waiting outside Python", replicas=replicas))
        low, high = _BANDS[holds_gil]
        for attempt in range(3):  # a busy machine can slow a run down: a near miss is retried
            if holds_gil:
                work: Callable[[], Any] = lambda: _python_work(iterations)  # noqa: E731
                work.holds_gil = True  # type: ignore[attr-defined]  # read by the tests' clock
                # the unit of time is one replica alone, the mean of runs just before and just
                # after the threads: a machine that is busy meanwhile slows both alike
                alone = [_run_replicas(1, work) for _ in range(3)]
                measured = _run_replicas(replicas, work)
                alone += [_run_replicas(1, work) for _ in range(3)]
                seconds = sum(alone) / len(alone)
            else:
                seconds = 0.03
                work = lambda: time.sleep(seconds)  # noqa: E731
                work.holds_gil = False  # type: ignore[attr-defined]
                measured = _run_replicas(replicas, work)
            guess = float(predict(replicas, seconds, holds_gil))
            ratio = guess / measured if math.isfinite(guess) else math.inf
            # the hint's misconception, threads shared out over cores, is refused even where a
            # busy machine's timing happens to land near it (not where threads in Python really
            # run in parallel: a free-threaded build)
            on_cores = (_as_if_on_cores(guess, replicas, seconds)
                        if gil or not holds_gil else None)
            if on_cores or low <= ratio <= high or not low / 2 <= ratio <= high * 2:
                break
        if on_cores and low <= ratio <= high:  # the timing alone would have passed it
            raise Wrong(tr("{what}, {each} ms each: you predicted {guess} ms and the threads "
                           "took {measured} ms, but {reason}.", what=what,
                           each=f"{seconds * 1e3:.0f}", guess=f"{guess * 1e3:.0f}",
                           measured=f"{measured * 1e3:.0f}",
                           reason=_reason(predict, guess, guesses, replicas, seconds, holds_gil,
                                          gil, ratio)))
        if on_cores or not low <= ratio <= high:
            raise Wrong(tr("{what}, {each} ms each: you predicted {guess} ms, the threads took "
                           "{measured} ms ({reason}); a prediction from {low} to {high} times "
                           "what they took passes.", what=what, each=f"{seconds * 1e3:.0f}",
                           guess=f"{guess * 1e3:.0f}", measured=f"{measured * 1e3:.0f}",
                           reason=_reason(predict, guess, guesses, replicas, seconds, holds_gil,
                                          gil, ratio), low=f"{low:g}", high=f"{high:g}"))
        guesses.append(guess)
        lines.append(tr("{what}, {each} ms each: predicted {guess} ms, measured {measured} ms",
                        what=what, each=f"{seconds * 1e3:.0f}", guess=f"{guess * 1e3:.0f}",
                        measured=f"{measured * 1e3:.0f}"))
    first, second = lines  # the threads in Python, then those waiting outside it
    if not gil:
        return tr("{first}; {second}. This Python is a free-threaded build running without the "
                  "GIL, so its threads ran Python side by side on the cores ({cores} here); in "
                  "standard CPython they take turns, which is DataParallel's Python overhead.",
                  first=first, second=second, cores=_cores())
    return tr("{first}; {second}. That is DataParallel's Python overhead: it does not overlap.",
              first=first, second=second)


def _reason(predict: Callable[[int, float, bool], float], guess: float, guesses: list[float],
            replicas: int, seconds: float, holds_gil: bool, gil: bool, ratio: float) -> str:
    """What a prediction that missed got wrong, as far as its numbers tell."""
    if holds_gil and not gil:
        return tr("this Python is a free-threaded build running without the GIL: here threads "
                  "in Python run side by side, one per core ({cores} cores), as they do not in "
                  "standard CPython", cores=_cores())
    if holds_gil and math.isclose(guess, seconds, rel_tol=0.01):
        return _("that is the time of one replica: threads in Python take turns under the "
                 "GIL, they do not overlap")
    if not holds_gil and math.isclose(guess, replicas * seconds, rel_tol=0.01):
        return _("threads that wait with the GIL released, as in a sleep or a wait for the "
                 "GPU, overlap")
    if holds_gil and math.isclose(guess, float(predict(replicas // 2, seconds, True)),
                                  rel_tol=0.01):
        if math.isclose(guess, float(predict(4, 0.03, False)), rel_tol=0.01):
            return _("your prediction is the same for both kinds of work, and it does not grow "
                     "with the number of replicas: in Python they take turns under the GIL")
        return _("your prediction does not grow with the number of replicas: in Python they "
                 "take turns under the GIL")
    cores = _as_if_on_cores(guess, replicas, seconds)
    if holds_gil and cores:
        return tr("that is {k} cores running the threads in parallel: under the GIL threads "
                  "in Python take turns however many cores there are", k=cores)
    if not holds_gil and cores:
        return tr("that is {k} threads at a time, as if each needed a core of its own: a "
                  "sleeping thread needs no core, so all of them wait at once", k=cores)
    if guesses and math.isclose(guess, guesses[0], rel_tol=0.01):
        return _("your prediction is the same for both kinds of work")
    return tr("{ratio} times what the threads took", ratio=f"{ratio:.3g}")


CHECKS = {1: check_1, 2: check_2, 3: check_3}
hint = hints_for(CHECKS)


def _scatter_sizes(batch: int, devices: int) -> list[int]:
    """torch.chunk's sizes, worked out: ceil(batch / devices) rows a chunk until they run out."""
    per = -(-batch // devices)
    sizes, left = [], batch
    while left > 0:
        sizes.append(min(per, left))
        left -= per
    return sizes


def _strip_in_place(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Right keys, but rewritten in the dict it was given."""
    for key in list(state):
        state[key.removeprefix("module.")] = state.pop(key)
    return state


def _replace_values(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Right keys in a new dict, but the given dict's values swapped for copies."""
    for key in state:
        state[key] = state[key].clone()
    return {k.removeprefix("module."): v for k, v in state.items()}


def _strip_with_torch(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """torch's own helper, on a copy: it changes the dict it is handed."""
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    copy = dict(state)
    consume_prefix_in_state_dict_if_present(copy, "module.")
    return copy


SOLUTIONS: dict[int, Any] = {
    1: _scatter_sizes,
    2: lambda state: {k.removeprefix("module."): v for k, v in state.items()},
    3: lambda replicas, seconds, holds_gil: replicas * seconds if holds_gil else seconds,
}

WRONG: dict[int, list[Any]] = {
    # the hint's warning (no empty chunks: fewer chunks than devices), and the task's rule
    # (without torch.chunk)
    1: [lambda b, d: [len(c) for c in torch.arange(b).tensor_split(d)],
        lambda b, d: [b // d] * d,
        lambda b, d: [math.ceil(b / d)] * d,
        lambda b, d: [len(c) for c in torch.arange(b).chunk(d)]],
    # the hint's warning (replace() hits 'submodule.'), and the task's rule (the given dict
    # unchanged)
    2: [lambda state: {k.replace("module.", ""): v for k, v in state.items()},
        lambda state: dict(state),
        lambda state: {k.split(".")[-2] + "." + k.split(".")[-1]: v for k, v in state.items()},
        _strip_in_place,
        # the review's: lstrip() strips characters, not a prefix
        lambda sd: {k.lstrip("module."): v for k, v in sd.items()},
        # the review's: right keys, but the given dict's tensors zeroed (the model's own
        # weights) or its values replaced
        lambda sd: {k.removeprefix("module."): v.zero_() for k, v in sd.items()},
        _replace_values],
    # a prediction that ignores the GIL, one that never overlaps, one off by a factor, and
    # constants
    3: [lambda r, s, g: s, lambda r, s, g: r * s, lambda r, s, g: s / r,
        lambda r, s, g: 0.1, lambda r, s, g: 0.05,
        lambda r, s, g: 5 * (r * s if g else s),
        # the review's: threads in Python in parallel on 2 cores (the hint's misconception),
        # and sleeping threads in rounds of 2
        lambda r, s, g: r * s / 2 if g else s,
        lambda r, s, g: r * s if g else math.ceil(r / 2) * s],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda b, d: [min(-(-b // d), b - i * -(-b // d)) for i in range(d) if i * -(-b // d) < b]],
    2: [lambda state: {k[len("module."):]: v for k, v in state.items()}, _strip_with_torch],
    3: [lambda r, s, g: r * s if g else 1.1 * s],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
