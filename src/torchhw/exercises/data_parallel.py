"""Exercises of notebook 06 (DataParallel): scatter's chunks, the module. prefix, the GIL."""

from __future__ import annotations

import math
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
                           "work the sizes out from the numbers, without torch.chunk.",
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
    plain = net()
    fixed = strip(state)
    if list(state) != keys:
        raise Wrong(tr("your function changed the state_dict it was given; build a new dict."))
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
          more="Python runs one thread at a time (the GIL), so replicas whose time is spent "
               "in Python take turns: replicas x seconds. Replicas that wait outside Python "
               "(a GPU kernel, a sleep, most large torch ops) overlap: about seconds.")
def check_3(predict: Callable[[int, float, bool], float]) -> str:
    iterations = _calibrate(0.03)
    lines, guesses = [], []
    for replicas, holds_gil in [(6, True), (4, False)]:
        what = (tr("{replicas} replicas in Python", replicas=replicas) if holds_gil else
                tr("{replicas} replicas waiting outside Python", replicas=replicas))
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
            if holds_gil and math.isclose(guess, seconds, rel_tol=0.01):
                reason = _("that is the time of one replica: threads in Python take turns "
                           "under the GIL, they do not overlap")
            elif not holds_gil and math.isclose(guess, replicas * seconds, rel_tol=0.01):
                reason = _("threads that wait outside Python, as in a GPU kernel or a sleep, "
                           "let go of the GIL and overlap")
            elif holds_gil and math.isclose(guess, float(predict(replicas // 2, seconds, True)),
                                            rel_tol=0.01):
                reason = _("your prediction does not grow with the number of replicas: in "
                           "Python they take turns under the GIL")
            elif guesses and math.isclose(guess, guesses[0], rel_tol=0.01):
                reason = _("your prediction is the same for both kinds of work")
            else:
                reason = tr("{ratio} times what the threads took", ratio=f"{ratio:.3g}")
            raise Wrong(tr("{what}, {each} ms each: you predicted {guess} ms, the threads took "
                           "{measured} ms ({reason}); within a factor of 2 passes.", what=what,
                           each=f"{seconds * 1e3:.0f}", guess=f"{guess * 1e3:.0f}",
                           measured=f"{measured * 1e3:.0f}", reason=reason))
        guesses.append(guess)
        lines.append(tr("{what}, {each} ms each: predicted {guess} ms, measured {measured} ms",
                        what=what, each=f"{seconds * 1e3:.0f}", guess=f"{guess * 1e3:.0f}",
                        measured=f"{measured * 1e3:.0f}"))
    first, second = lines  # the threads in Python, then those waiting outside it
    return tr("{first}; {second}. That is DataParallel's Python overhead: it does not overlap.",
              first=first, second=second)


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
        lambda sd: {k.lstrip("module."): v for k, v in sd.items()}],
    # a prediction that ignores the GIL, one that never overlaps, one off by a factor, and
    # constants
    3: [lambda r, s, g: s, lambda r, s, g: r * s, lambda r, s, g: s / r,
        lambda r, s, g: 0.1, lambda r, s, g: 0.05,
        lambda r, s, g: 5 * (r * s if g else s)],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda b, d: [min(-(-b // d), b - i * -(-b // d)) for i in range(d) if i * -(-b // d) < b]],
    2: [lambda state: {k[len("module."):]: v for k, v in state.items()}, _strip_with_torch],
    3: [lambda r, s, g: r * s if g else 1.1 * s],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
