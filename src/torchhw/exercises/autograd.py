"""Exercises of notebook 02 (autograd): a gradient by hand, finite differences, a Function."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.autograd.forward_ad

from ..checks import Wrong, exercise, same_tensor


class _UsedAutograd(Exception):
    pass


@contextlib.contextmanager
def _autograd_forbidden() -> Iterator[None]:
    """While active, any backward or forward-mode AD raises _UsedAutograd.

    Every reverse-mode entry (Tensor.backward, torch.autograd.grad, torch.func.grad, vjp,
    jacrev, autograd.functional) reaches ``torch.autograd._engine_run_backward``, and every
    forward-mode one (torch.func.jvp, jacfwd) ``forward_ad.make_dual``: replacing those two for
    the length of one call catches them however the reader imported them.
    """
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _UsedAutograd
    saved = (torch.autograd._engine_run_backward, torch.autograd.forward_ad.make_dual)
    torch.autograd._engine_run_backward = refuse
    torch.autograd.forward_ad.make_dual = refuse
    try:
        yield
    finally:
        torch.autograd._engine_run_backward, torch.autograd.forward_ad.make_dual = saved


@exercise(1, "a derivative by hand",
          hint="differentiate term by term: d/dx x^3 = 3x^2, d/dx sin(x) = cos(x), and the "
               "derivative of a constant times x is that constant.")
def check_1(grad_f: Callable[[torch.Tensor], torch.Tensor]) -> str:
    x = torch.linspace(-2, 2, 9, dtype=torch.float64, requires_grad=True)
    (x**3 + torch.sin(x) - 4 * x).sum().backward()
    try:
        with _autograd_forbidden():
            got = grad_f(x.detach())
    except _UsedAutograd:
        raise Wrong("your grad_f asks autograd (backward, torch.autograd.grad or torch.func) "
                    "for the answer; by hand means writing the derivative as a formula.") from None
    same_tensor(got, x.grad, "grad_f(x)", atol=1e-9)
    return "Autograd computes exactly this, for every operation it recorded."


@exercise(2, "central finite differences",
          hint="for each coordinate i: (f(x + eps e_i) - f(x - eps e_i)) / (2 eps), where e_i "
               "is 1 at position i and 0 elsewhere. Its error shrinks like eps^2, a one-sided "
               "difference's only like eps.")
def check_2(numerical_grad: Callable[..., torch.Tensor]) -> str:
    g = torch.Generator().manual_seed(2)
    functions = {"sum(exp(x))": lambda x: x.exp().sum(),
                 "prod of sin": lambda x: torch.sin(x).prod(),
                 "x0^3 x1": lambda x: x[0] ** 3 * x[1]}
    for name, f in functions.items():
        x = torch.randn(3, generator=g, dtype=torch.float64)
        xg = x.clone().requires_grad_(True)
        f(xg).backward()
        got = numerical_grad(f, x.clone(), eps=1e-6)
        if isinstance(got, (list, tuple)):  # the task never asked for a tensor: a list is fine
            try:
                got = torch.tensor([float(v) for v in got], dtype=torch.float64)
            except (TypeError, ValueError):
                raise Wrong(f"numerical_grad for {name} returned {got!r}: expected one number "
                            "per coordinate of x.") from None
        same_tensor(got, xg.grad, f"numerical_grad for {name}", atol=1e-8, rtol=1e-7)
    return "This is how gradcheck decides whether a backward is right."


@exercise(3, "a custom autograd.Function",
          hint="forward saves x with ctx.save_for_backward(x) and returns x**3; backward gets "
               "grad_output and must return grad_output * 3 * x**2 (the chain rule).")
def check_3(Cube: Any) -> str:
    if not (isinstance(Cube, type) and issubclass(Cube, torch.autograd.Function)):
        raise Wrong("pass the class itself, a subclass of torch.autograd.Function.")
    x = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64, requires_grad=True)
    out = Cube.apply(x)
    same_tensor(out.detach(), x.detach() ** 3, "Cube.apply(x)", atol=1e-12)
    if out.grad_fn is not None and not out.grad_fn.saved_tensors:
        raise Wrong("forward saved nothing with ctx.save_for_backward: keeping x as a plain "
                    "attribute (ctx.x = x) hides it from autograd, which then cannot catch an "
                    "in-place change to x (the version counter, section 5) and may keep it "
                    "alive longer than the graph.")
    try:
        torch.autograd.gradcheck(Cube.apply, (x,), raise_exception=True)
    except Exception as err:
        raise Wrong("the forward is right but gradcheck rejects the backward: "
                    + str(err).strip().splitlines()[0]) from None
    return "gradcheck agrees with your backward."


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x**2


class _CubeOnCtx(torch.autograd.Function):
    """Right numbers, wrong lesson: x kept as ctx.x instead of ctx.save_for_backward(x)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.x = x
        return x**3

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        return grad_output * 3 * ctx.x**2


class _CubeForgetsChainRule(_Cube):
    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * x**2


def _central(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    grad = torch.zeros_like(x)
    for i in range(x.numel()):
        step = torch.zeros_like(x)
        step.view(-1)[i] = eps
        grad.view(-1)[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def _forward_difference(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    grad = torch.zeros_like(x)
    for i in range(x.numel()):
        step = torch.zeros_like(x)
        step.view(-1)[i] = eps
        grad.view(-1)[i] = (f(x + step) - f(x)) / eps
    return grad


CHECKS = {1: check_1, 2: check_2, 3: check_3}

SOLUTIONS: dict[int, Any] = {
    1: lambda x: 3 * x**2 + torch.cos(x) - 4,
    2: _central,
    3: _Cube,
}

def _grad_by_autograd(x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    (x**3 + torch.sin(x) - 4 * x).sum().backward()
    return x.grad


def _grad_by_torch_func(x: torch.Tensor) -> torch.Tensor:
    return torch.func.grad(lambda t: (t**3 + torch.sin(t) - 4 * t).sum())(x)


def _central_list(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                  eps: float = 1e-6) -> list[float]:
    """The same central difference, returned as a plain list: also a right answer."""
    return [float(v) for v in _central(f, x, eps)]


WRONG: dict[int, list[Any]] = {
    1: [lambda x: 3 * x**2 + torch.cos(x), lambda x: x**2 - torch.cos(x) - 4,
        _grad_by_autograd, _grad_by_torch_func],
    2: [_forward_difference, lambda f, x, eps=1e-6: _central(f, x, eps) / 2,
        lambda f, x, eps=1e-6: [0.0] * x.numel()],
    3: [_CubeForgetsChainRule, lambda x: x**3, _CubeOnCtx],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    2: [_central_list],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
