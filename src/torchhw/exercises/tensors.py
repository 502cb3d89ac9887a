"""Exercises of notebook 01 (tensors): broadcasting, loop-free code, strides."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..checks import Wrong, equal, exercise, same_tensor


@exercise(1, "the broadcasting rule",
          hint="line the shapes up from the right; each pair of sizes must be equal or "
               "contain a 1, and the result takes the larger. Missing sizes count as 1.")
def check_1(broadcast_shape: Callable[[tuple, tuple], tuple]) -> str:
    for a, b in [((3, 1, 5), (4, 5)), ((1,), (7, 2)), ((2, 3), (2, 3)), ((), (4,)),
                 ((8, 1, 6, 1), (7, 1, 5))]:
        equal(tuple(broadcast_shape(a, b)), tuple(torch.broadcast_shapes(a, b)),
              f"broadcast_shape({a}, {b})")
    for a, b in [((3,), (4,)), ((2, 3), (3, 2))]:
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
    for n, m, d in [(5, 7, 3), (1, 4, 16), (32, 32, 2)]:
        X, Y = torch.randn(n, d, generator=g), torch.randn(m, d, generator=g)
        same_tensor(sq_dists(X, Y), torch.cdist(X, Y) ** 2, f"sq_dists for n={n}, m={m}, d={d}",
                    atol=1e-4)
    return "Broadcasting turned a double loop into one expression."


@exercise(3, "strides of a contiguous tensor",
          hint="the last dimension moves one element at a time; each dimension to its left "
               "jumps over everything to its right (the product of the later sizes).")
def check_3(contiguous_strides: Callable[[tuple], tuple]) -> str:
    for shape in [(2, 3, 4), (5,), (3, 1, 2), (6, 7)]:
        got, want = tuple(contiguous_strides(shape)), torch.empty(shape).stride()
        equal(got, want, f"contiguous_strides({shape})", " (reversed?)" if got == want[::-1] else "")
    return "Transposing swaps strides without moving data: that is why .T is free."


def _broadcast_shape(a: tuple, b: tuple) -> tuple:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ValueError(f"sizes {x} and {y} do not broadcast")
        out.append(max(x, y))
    return tuple(reversed(out))


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
        lambda a, b: a if len(a) >= len(b) else b],
    2: [lambda X, Y: ((X - Y) ** 2).sum(-1), lambda X, Y: torch.cdist(X, Y)],
    3: [lambda s: tuple(reversed(_contiguous_strides(s))), lambda s: (1,) * len(s)],
}
