"""Exercises of notebook 01 (tensors): broadcasting, loop-free code, strides."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from ..checks import Wrong, equal, exercise, same_tensor


@exercise(1, "the broadcasting rule",
          hint="line the shapes up from the right; each pair of sizes must be equal or "
               "contain a 1, and the result takes the size that is not 1 (so 1 and 0 give 0, "
               "not the larger). Missing sizes count as 1.")
def check_1(broadcast_shape: Callable[[tuple, tuple], tuple]) -> str:
    for a, b in [((3, 1, 5), (4, 5)), ((1,), (7, 2)), ((2, 3), (2, 3)), ((), (4,)),
                 ((8, 1, 6, 1), (7, 1, 5)), ((0,), (1,)), ((1, 3), (0, 1)), ((2, 0), (0,))]:
        equal(tuple(broadcast_shape(a, b)), tuple(torch.broadcast_shapes(a, b)),
              f"broadcast_shape({a}, {b})")
    for a, b in [((3,), (4,)), ((2, 3), (3, 2)), ((0,), (3,))]:
        try:
            got = broadcast_shape(a, b)
        except ValueError:
            continue
        raise Wrong(f"{a} and {b} cannot broadcast, but you returned {got}: raise ValueError.")
    return "That is exactly what torch.broadcast_shapes does."


@exercise(2, "pairwise squared distances without a loop",
          hint="X[:, None, :] has shape (n, 1, d) and Y[None, :, :] has shape (1, m, d); "
               "their difference broadcasts to (n, m, d). Square and sum the last axis.")
def check_2(sq_dists: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    g = torch.Generator().manual_seed(1)
    calls = {}
    for n, m, d in [(4, 5, 3), (1, 4, 16), (32, 32, 2)]:
        X, Y = torch.randn(n, d, generator=g), torch.randn(m, d, generator=g)
        with _CountOps() as ops:
            got = sq_dists(X, Y)
        same_tensor(got, torch.cdist(X, Y) ** 2, f"sq_dists for n={n}, m={m}, d={d}", atol=1e-4)
        calls[n * m] = ops.calls
        left = ops.names & _LEAVES_TENSORS
        if left:
            raise Wrong(f"the values are right, but your answer calls {', '.join(sorted(left))}: "
                        "it takes the numbers out into Python, which is the loop this exercise "
                        "replaces. Stay with tensor operations.")
    if calls[1024] > calls[20] + 8:
        raise Wrong(f"the values are right, but the number of torch operations grew with the "
                    f"number of pairs ({calls[20]} for 4 x 5 pairs, {calls[1024]} for 32 x 32): "
                    "that is a Python loop over pairs, not broadcasting.")
    return "Broadcasting turned a double loop into one expression."


@exercise(3, "strides of a contiguous tensor",
          hint="the last dimension moves one element at a time; each dimension to its left "
               "jumps over everything to its right (the product of the later sizes).")
def check_3(contiguous_strides: Callable[[tuple], tuple]) -> str:
    for shape in [(2, 3, 4), (5,), (3, 1, 2), (6, 7)]:
        got, want = tuple(contiguous_strides(shape)), torch.empty(shape).stride()
        equal(got, want, f"contiguous_strides({shape})", " (reversed?)" if got == want[::-1] else "")
    return "Transposing swaps strides without moving data: that is why .T is free."


_LEAVES_TENSORS = {"tolist", "item", "numpy", "__iter__"}


class _CountOps(TorchFunctionMode):
    """Counts the torch operations run inside it, and remembers their names."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.names: set[str] = set()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.calls += 1
        self.names.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


def _broadcast_shape(a: tuple, b: tuple, take_larger: bool = False) -> tuple:
    """The broadcasting rule. ``take_larger`` is the typical wrong version: right for every
    size but 0, since it takes the larger size where the rule takes the one that is not 1."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ValueError(f"sizes {x} and {y} do not broadcast")
        out.append(max(x, y) if take_larger else (y if x == 1 else x))  # 1 against 0 gives 0
    return tuple(reversed(out))


def _broadcast_shape_max(a: tuple, b: tuple) -> tuple:
    return _broadcast_shape(a, b, take_larger=True)


def _sq_dists_double_loop(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    out = torch.empty(X.shape[0], Y.shape[0])
    for i in range(X.shape[0]):
        for j in range(Y.shape[0]):
            out[i, j] = ((X[i] - Y[j]) ** 2).sum()
    return out


def _sq_dists_python_lists(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    xs, ys = X.tolist(), Y.tolist()
    return torch.tensor([[sum((a - b) ** 2 for a, b in zip(x, y)) for y in ys] for x in xs])


def _contiguous_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


CHECKS = {1: check_1, 2: check_2, 3: check_3}

SOLUTIONS: dict[int, Any] = {
    1: _broadcast_shape,
    2: lambda X, Y: ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1),
    3: _contiguous_strides,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda a, b: tuple(max(x, y) for x, y in zip(a, b)),
        lambda a, b: a if len(a) >= len(b) else b, _broadcast_shape_max],
    2: [lambda X, Y: ((X - Y) ** 2).sum(-1), lambda X, Y: torch.cdist(X, Y),
        _sq_dists_double_loop, _sq_dists_python_lists],
    3: [lambda s: tuple(reversed(_contiguous_strides(s))), lambda s: (1,) * len(s)],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    2: [lambda X, Y: (X**2).sum(1, keepdim=True) - 2 * X @ Y.T + (Y**2).sum(1)],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
