"""Exercises of notebook 01 (tensors): broadcasting, loop-free code, strides."""

from __future__ import annotations

import dis
import math
import types
from typing import Any, Callable

import numpy as np
import torch
import torch._refs
from torch.utils._python_dispatch import TorchDispatchMode

from ..checks import TorchCalls, Wrong, equal, exercise, hints_for, same_tensor, watching, why
from ..i18n import tr


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


def _broadcast_shape_from_left(a: tuple, b: tuple) -> tuple:
    """The rule with the shapes lined up from the left (the shorter one padded with 1s on its
    right): the other typical wrong version."""
    pad = max(len(a), len(b))
    return _broadcast_shape(tuple(a) + (1,) * (pad - len(a)), tuple(b) + (1,) * (pad - len(b)))


def _call(name: str, *args: Any) -> str:
    """A call as Python writes it, e.g. ``broadcast_shape((3, 1, 5), (4, 5))``: code, the same
    in every language, so a name for equal() that needs no translation."""
    return f"{name}({', '.join(str(arg) for arg in args)})"


def _maybe(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return tuple(fn(*args))
    except Exception:
        return None


def _shape_calls() -> Any:
    """Watch torch's ways to have the shape computed for you, however imported (the inner
    function is looked up at call time). NumPy is found in the code instead (_numpy_use):
    replacing its classes while the reader's code runs breaks NumPy itself."""
    return watching((torch, "broadcast_shapes", "torch.broadcast_shapes"),
                    (torch._refs, "_broadcast_shapes", "torch.broadcast_shapes"),
                    (torch._C, "_infer_size", "torch._C._infer_size"))


def _is_numpy(value: Any) -> bool:
    """Whether ``value`` is NumPy's: the module or a submodule, or a function, class, ufunc,
    method or array from it."""
    try:
        if isinstance(value, types.ModuleType):
            name = value.__name__
        else:
            name = getattr(value, "__module__", None)
            if not isinstance(name, str) or not name:
                name = type(value).__module__
            owner = getattr(value, "__self__", None)  # a bound method: np.random.random
            if owner is not None and not isinstance(owner, types.ModuleType) and \
                    type(owner).__module__.partition(".")[0] == "numpy":
                return True
        return isinstance(name, str) and name.partition(".")[0] == "numpy"
    except Exception:  # an object whose attributes misbehave is not NumPy's
        return False


def _numpy_label(name: str, value: Any, attr: str | None) -> str:
    """What to call the NumPy thing a reader's code reached: 'numpy.arange', 'numpy.ndarray',
    or the global's name and its type ('arr: numpy.ndarray')."""
    if isinstance(value, types.ModuleType):
        return f"{value.__name__}.{attr}" if attr and hasattr(value, attr) else value.__name__
    if isinstance(getattr(value, "__name__", None), str):
        return f"numpy.{value.__name__}"
    return f"{name}: numpy.{type(value).__name__}"


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """A code object and those nested in it (lambdas, comprehensions, inner functions)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _codes(const)
    return found


def _numpy_use(fn: Any, _seen: set[int] | None = None) -> str | None:
    """The first NumPy thing ``fn`` reaches, e.g. 'numpy.arange', or None. It is read from the
    code (the globals it loads, its closure and defaults, and the same in helper functions
    defined beside it), so every NumPy function, class and array is found, and none is
    replaced while the reader's code runs."""
    seen = set() if _seen is None else _seen
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType) or id(fn) in seen:
        return None
    seen.add(id(fn))
    space = getattr(fn, "__globals__", {})
    values: list[tuple[str, Any, str | None]] = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(("", cell.cell_contents, None))
        except ValueError:  # a cell not filled yet
            pass
    values += [("", value, None) for value in getattr(fn, "__defaults__", None) or ()]
    values += [(key, value, None) for key, value in
               (getattr(fn, "__kwdefaults__", None) or {}).items()]
    for inner in _codes(code):
        ops = list(dis.get_instructions(inner))
        for k, op in enumerate(ops):
            if op.opname in ("LOAD_GLOBAL", "LOAD_NAME") and op.argval in space:
                after = ops[k + 1] if k + 1 < len(ops) else None
                attr = after.argval if after is not None and after.opname in (
                    "LOAD_ATTR", "LOAD_METHOD") else None
                values.append((op.argval, space[op.argval], attr))
    for name, value, attr in values:
        if _is_numpy(value):
            return _numpy_label(name, value, attr)
        # a helper of the reader's, defined beside the answer (not a library's function)
        if isinstance(value, types.FunctionType) and value.__globals__ is space:
            found = _numpy_use(value, seen)
            if found:
                return found
    return None


@exercise(1, "the broadcasting rule",
          hint="compare the two shapes one dimension at a time. From which end do you start, "
               "and what does a size of 1 (or a missing size) do?",
          more="line the shapes up from the right; each pair of sizes must be equal or "
               "contain a 1, and the result takes the size that is not 1 (so 1 and 0 give 0, "
               "not the larger). Missing sizes count as 1. Any other pair: raise ValueError.")
def check_1(broadcast_shape: Callable[[tuple, tuple], tuple]) -> str:
    numpy = _numpy_use(broadcast_shape)
    if numpy:
        raise Wrong(tr("broadcast_shape uses NumPy ({used}): the exercise is to apply the rule "
                       "yourself, in plain Python on the sizes, without NumPy's broadcasting, "
                       "its arrays or its helpers, and without making tensors.", used=numpy))

    def ask(a: tuple, b: tuple) -> Any:
        """The reader's answer for (a, b); Wrong if torch worked it out."""
        failed: Exception | None = None
        with _shape_calls() as seen, TorchCalls() as ops:
            try:
                got = broadcast_shape(a, b)
            except Exception as err:  # re-raised below, once the calls have been looked at
                failed = err
        if seen.used or ops.calls:
            named = sorted(n for n in ops.names if n and not n.startswith("_"))
            used = (seen.used[0] if seen.used else
                    tr("torch tensors ({names})", names=", ".join(named or ["torch"])))
            raise Wrong(tr("broadcast_shape({a}, {b}) lets {used} work the shape out: the "
                           "exercise is to apply the rule yourself, from the sizes alone, without "
                           "NumPy's broadcasting and without making tensors or arrays.",
                           a=a, b=b, used=used))
        if failed is not None:
            raise failed
        return got

    for a, b in [((3, 1, 5), (4, 5)), ((1,), (7, 2)), ((2, 3), (2, 3)), ((), (4,)),
                 ((8, 1, 6, 1), (7, 1, 5)), ((0,), (1,)), ((1, 3), (0, 1)), ((2, 0), (0,))]:
        want = tuple(torch.broadcast_shapes(a, b))
        try:
            got = ask(a, b)
        except (Wrong, NotImplementedError):
            raise
        except Exception as err:
            said = dict(a=a, b=b, want=want, kind=type(err).__name__, err=err)
            if isinstance(err, ValueError) and _maybe(_broadcast_shape_from_left, a, b) is None:
                # the rule applied, but to the wrong pairs of sizes
                raise Wrong(tr("{a} and {b} do broadcast (to {want}), but broadcast_shape "
                               "raised {kind}: {err} (lined up from the left? Broadcasting "
                               "lines shapes up from the right).", **said)) from None
            if isinstance(err, IndexError) and len(a) != len(b):
                raise Wrong(tr("{a} and {b} do broadcast (to {want}), but broadcast_shape "
                               "raised {kind}: {err} (the shorter shape has run out of sizes: "
                               "its missing sizes count as 1).", **said)) from None
            raise Wrong(tr("{a} and {b} do broadcast (to {want}), but broadcast_shape raised "
                           "{kind}: {err}.", **said)) from None
        try:
            got = tuple(got)
        except TypeError:
            raise Wrong(tr("broadcast_shape({a}, {b}) returned {got}: return a tuple of sizes.",
                           a=a, b=b, got=repr(got))) from None
        equal(got, want, _call("broadcast_shape", a, b), why(
            got, want,
            (_maybe(_broadcast_shape_max, a, b), "a size of 1 against 0 gives 0: the result "
                                                 "takes the size that is not 1, not the larger"),
            (_maybe(_broadcast_shape_from_left, a, b), "lined up from the left? Broadcasting "
                                                       "lines shapes up from the right"),
            (tuple(max(x, y) for x, y in zip(a, b)), "zip stops at the shorter shape: the "
                                                     "missing sizes count as 1")))
    for a, b in [((3,), (4,)), ((2, 3), (3, 2)), ((0,), (3,))]:
        try:
            got = ask(a, b)
        except ValueError:
            continue
        except Wrong:
            raise
        except Exception as err:
            raise Wrong(tr("{a} and {b} cannot broadcast and you raised {kind}: "
                           "raise ValueError, as the task asks.",
                           a=a, b=b, kind=type(err).__name__)) from None
        raise Wrong(tr("{a} and {b} cannot broadcast, but you returned {got}: raise ValueError.",
                       a=a, b=b, got=got))
    return "That is exactly what torch.broadcast_shapes does."


@exercise(2, "pairwise squared distances without a loop",
          hint="broadcasting can pair every row of X with every row of Y at once. Which axis "
               "of size 1 does each need, and where, for their difference to hold all the "
               "pairs (i, j)?",
          more="X[:, None, :] has shape (n, 1, d) and Y[None, :, :] has shape (1, m, d); "
               "their difference broadcasts to (n, m, d). Square and sum the last axis: "
               "((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1).")
def check_2(sq_dists: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    numpy = _numpy_use(sq_dists)
    if numpy:
        raise _numpy_in_2(numpy)
    g = torch.Generator().manual_seed(1)
    calls = {}
    # the base case, then more pairs, then more features: a loop over either shows in the count
    for n, m, d in [(4, 5, 3), (32, 32, 3), (4, 5, 48), (1, 4, 16)]:
        X, Y = torch.randn(n, d, generator=g), torch.randn(m, d, generator=g)
        want = torch.cdist(X, Y) ** 2
        with TorchCalls() as ops, _Kernels() as kernels:
            try:
                got = sq_dists(X, Y)
            except RuntimeError as err:
                if n != m and "must match" in str(err):
                    raise Wrong(tr("sq_dists for n={n}, m={m} raised RuntimeError: an (n, d) "
                                   "and an (m, d) tensor do not broadcast against each other. "
                                   "Each needs an axis of size 1 where the other has its rows.",
                                   n=n, m=m)) from None
                raise
        cdist = sorted(name for name in ops.names | kernels.names if _is_cdist(name))
        if cdist:
            raise Wrong(tr("your answer calls torch.cdist or one of its kernels ({names}), which "
                           "the checker compares with: the exercise is to write the distances "
                           "with broadcasting.", names=", ".join(cdist)))
        numpy = ops.names & _TO_NUMPY
        if numpy:
            raise _numpy_in_2(", ".join(sorted(numpy)))
        left = ops.names & _LEAVES_TENSORS
        if left:
            raise Wrong(tr("your answer calls {names}: it takes the numbers out into Python, "
                           "which is the loop this exercise replaces. Stay with tensor "
                           "operations.", names=", ".join(sorted(left))))
        if isinstance(got, torch.Tensor) and got.shape == want.shape and \
                torch.allclose(got, want.sqrt(), atol=1e-4, rtol=1e-4) and not \
                torch.allclose(got, want, atol=1e-4, rtol=1e-4):
            raise Wrong(tr("sq_dists for n={n}, m={m}, d={d} gives the distances, not the "
                           "squared distances: leave out the square root.", n=n, m=m, d=d))
        same_tensor(got, want, tr("sq_dists for n={n}, m={m}, d={d}", n=n, m=m, d=d), atol=1e-4)
        calls[n, m, d] = ops.calls
    base = calls[4, 5, 3]
    if calls[32, 32, 3] > base + 8:
        raise Wrong(tr("the values are right, but the number of torch operations grew with the "
                       "number of pairs ({base} for 4 x 5 pairs, {more} for 32 x 32): that is a "
                       "Python loop over pairs, not broadcasting.",
                       base=base, more=calls[32, 32, 3]))
    if calls[4, 5, 48] > base + 8:
        raise Wrong(tr("the values are right, but the number of torch operations grew with the "
                       "number of features ({base} for d=3, {more} for d=48): that is a Python "
                       "loop over the feature dimension. Let the sum over the last axis do it.",
                       base=base, more=calls[4, 5, 48]))
    return "Broadcasting turned a double loop into one expression."


def _contiguous_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _column_major_strides(shape: tuple) -> tuple:
    """The hint's warning: the first dimension given stride 1 (Fortran's order, not torch's)."""
    strides, step = [], 1
    for size in shape:
        strides.append(step)
        step *= size
    return tuple(strides)


@exercise(3, "strides of a contiguous tensor",
          hint="a stride counts the elements to skip to move one step along a dimension. "
               "Which dimension moves one element at a time?",
          more="the last dimension moves one element at a time (stride 1); each dimension to "
               "its left jumps over everything to its right: its stride is the product of the "
               "sizes after it. So (2, 3, 4) has strides (12, 4, 1).")
def check_3(contiguous_strides: Callable[[tuple], tuple]) -> str:
    numpy = _numpy_use(contiguous_strides)
    if numpy:
        raise Wrong(tr("contiguous_strides uses NumPy ({used}): the task is to work the strides "
                       "out in plain Python from the shape, without creating a tensor (nor a "
                       "NumPy array, whose strides are the same thing in bytes); math.prod "
                       "multiplies sizes.", used=numpy))
    for shape in [(2, 3, 4), (5,), (3, 1, 2), (6, 7)]:
        with TorchCalls() as ops:
            try:
                got = contiguous_strides(shape)
            except Exception as err:  # looked at once the calls are known
                got = err
        if isinstance(got, Exception):
            raise got
        if ops.calls:
            raise Wrong(tr("contiguous_strides({shape}) calls torch ({names}): the task is to "
                           "work the strides out from the shape, without creating a tensor.",
                           shape=shape, names=", ".join(sorted(ops.names))))
        try:
            got = tuple(got)
        except TypeError:
            raise Wrong(tr("contiguous_strides({shape}) returned {got}: return a tuple.",
                           shape=shape, got=repr(got))) from None
        want = torch.empty(shape).stride()
        shifted = tuple(want[i] * shape[i] for i in range(len(shape)))
        equal(got, want, _call("contiguous_strides", shape), why(
            got, want,
            (want[::-1], "reversed: the last dimension is the one with stride 1"),
            (_column_major_strides(shape), "that gives the first dimension stride 1, the "
                                           "column-major order Fortran uses; in a contiguous "
                                           "tensor the last dimension has stride 1"),
            (tuple(4 * s for s in want), "those are bytes of float32; strides count elements"),
            (shifted, "each stride is the product of the sizes after its dimension, not "
                      "including its own")))
    return "Transposing swaps strides without moving data: that is why .T is free."


# Methods that take a tensor's numbers out into Python objects: a loop in all but name
_LEAVES_TENSORS = {"tolist", "item", "__iter__"}
# Methods that hand a tensor to NumPy (np.asarray(X) calls X.__array__)
_TO_NUMPY = {"numpy", "__array__"}


def _numpy_in_2(names: str) -> Wrong:
    return Wrong(tr("your answer hands the tensors to NumPy ({names}): the task asks for torch "
                    "operations, which the checker counts to see that there is no loop (it "
                    "cannot see inside NumPy). Write the same broadcasting with torch.",
                    names=names))


def _is_cdist(name: str) -> bool:
    """torch.cdist, or a kernel it runs under another name (aten._cdist_forward,
    torch._euclidean_dist), however it was reached."""
    return "cdist" in name or "euclidean_dist" in name


class _Kernels(TorchDispatchMode):
    """The names of the aten kernels that run inside it: where torch.cdist's kernels show,
    whatever Python name reached them."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, kinds: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.names.add(str(func))
        return func(*args, **(kwargs or {}))


def _sq_dists_double_loop(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    out = torch.empty(X.shape[0], Y.shape[0])
    for i in range(X.shape[0]):
        for j in range(Y.shape[0]):
            out[i, j] = ((X[i] - Y[j]) ** 2).sum()
    return out


def _sq_dists_python_lists(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    xs, ys = X.tolist(), Y.tolist()
    return torch.tensor([[sum((a - b) ** 2 for a, b in zip(x, y)) for y in ys] for x in xs])


def _sq_dists_loop_over_features(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Broadcasts over the pairs but loops over the d features in Python."""
    out = torch.zeros(X.shape[0], Y.shape[0])
    for k in range(X.shape[1]):
        out = out + (X[:, None, k] - Y[None, :, k]) ** 2
    return out


def _broadcast_shape_by_torch(a: tuple, b: tuple) -> tuple:
    """Right results, and the forbidden call: torch does the work."""
    try:
        return tuple(torch.broadcast_shapes(a, b))
    except RuntimeError as err:
        raise ValueError(str(err)) from None


def _broadcast_shape_by_tensors(a: tuple, b: tuple) -> tuple:
    try:
        return tuple((torch.empty(a) + torch.empty(b)).shape)
    except RuntimeError as err:
        raise ValueError(str(err)) from None


def _broadcast_shape_index_past_start(a: tuple, b: tuple) -> tuple:
    """From the right, but a[-i] past the start of the shorter shape: missing sizes forgotten."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x, y = a[-i], b[-i]
        if x != y and 1 not in (x, y):
            raise ValueError(f"sizes {x} and {y} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _broadcast_shape_runtime_error(a: tuple, b: tuple) -> tuple:
    try:
        return _broadcast_shape(a, b)
    except ValueError as err:
        raise RuntimeError(str(err)) from None


CHECKS = {1: check_1, 2: check_2, 3: check_3}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: _broadcast_shape,
    2: lambda X, Y: ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1),
    3: _contiguous_strides,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda a, b: tuple(max(x, y) for x, y in zip(a, b)),
        lambda a, b: a if len(a) >= len(b) else b,
        _broadcast_shape_max,                     # the hint's warning: 1 against 0 gives 0
        _broadcast_shape_from_left,
        _broadcast_shape_by_torch,                # the task's rule: not torch.broadcast_shapes
        lambda a, b: tuple(np.broadcast_shapes(a, b)),
        _broadcast_shape_by_tensors,
        _broadcast_shape_runtime_error,
        # the review's: NumPy arrays broadcast for you, and torch's inner helper
        lambda a, b: (np.empty(a) + np.empty(b)).shape,
        # the second review's: NumPy arrays made any other way, and the shorter shape run out
        lambda a, b: (np.ndarray(a) + np.ndarray(b)).shape,
        lambda a, b: (np.arange(math.prod(a)).reshape(a) + np.arange(math.prod(b)).reshape(b)).shape,
        lambda a, b: (np.random.random(a) + np.random.random(b)).shape,
        _broadcast_shape_index_past_start,
        lambda a, b: tuple(torch._C._infer_size(a, b))],
    2: [lambda X, Y: ((X - Y) ** 2).sum(-1),      # the hint's point: no new axes
        lambda X, Y: torch.cdist(X, Y),
        lambda X, Y: torch.cdist(X, Y) ** 2,      # the checker's own reference
        _sq_dists_double_loop, _sq_dists_python_lists,
        _sq_dists_loop_over_features,             # the task's rule: no loop, over d either
        # the second review's: cdist's own kernels, and NumPy (the task's rule: torch only)
        lambda X, Y: torch.ops.aten._cdist_forward(X, Y, 2.0, None) ** 2,
        lambda X, Y: torch._euclidean_dist(X, Y) ** 2,
        lambda X, Y: torch.from_numpy(((X.detach().numpy()[:, None] - Y.detach().numpy()[None])
                                       ** 2).sum(-1)),
        lambda X, Y: torch.from_numpy(((np.asarray(X)[:, None] - np.asarray(Y)[None]) ** 2)
                                      .sum(-1))],
    3: [lambda s: tuple(reversed(_contiguous_strides(s))), lambda s: (1,) * len(s),
        lambda s: tuple(torch.empty(s).stride()),  # the task's rule: without a tensor
        lambda s: tuple(4 * x for x in _contiguous_strides(s)),
        _column_major_strides,                    # the hint's warning: the first has stride 1
        # the second review's: NumPy arrays made with the class itself, or arange and reshape
        lambda s: np.ndarray(s, dtype=np.int8).strides,
        lambda s: tuple(x // 8 for x in np.arange(math.prod(s)).reshape(s).strides),
        lambda s: tuple(x // 8 for x in np.empty(s).strides)],  # the review's: a NumPy array
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda a, b: _broadcast_shape(list(a), list(b))],
    2: [lambda X, Y: (X**2).sum(1, keepdim=True) - 2 * X @ Y.T + (Y**2).sum(1),
        lambda X, Y: torch.einsum("nmd,nmd->nm", X[:, None] - Y[None], X[:, None] - Y[None]),
        lambda X, Y: (X.unsqueeze(1) - Y.unsqueeze(0)).pow(2).sum(dim=2)],
    3: [lambda s: tuple(math.prod(s[i + 1:]) for i in range(len(s)))],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
