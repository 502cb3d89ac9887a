"""Exercises of notebook 02 (autograd): a gradient by hand, finite differences, a Function."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..checks import Wrong, exercise, same_tensor


@exercise(1, "a derivative by hand",
          hint="differentiate term by term: d/dx x^3 = 3x^2, d/dx sin(x) = cos(x), and the "
               "derivative of a constant times x is that constant.")
def check_1(grad_f: Callable[[torch.Tensor], torch.Tensor]) -> str:
    x = torch.linspace(-2, 2, 9, dtype=torch.float64, requires_grad=True)
    (x**3 + torch.sin(x) - 4 * x).sum().backward()
    same_tensor(grad_f(x.detach()), x.grad, "grad_f(x)", atol=1e-9)
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
        same_tensor(got, xg.grad, f"numerical_grad for {name}", atol=1e-8, rtol=1e-7)
    return "This is how gradcheck decides whether a backward is right."


@exercise(3, "a custom autograd.Function",
          hint="forward saves x with ctx.save_for_backward(x) and returns x**3; backward gets "
               "grad_output and must return grad_output * 3 * x**2 (the chain rule).")
def check_3(Cube: Any) -> str:
    if not (isinstance(Cube, type) and issubclass(Cube, torch.autograd.Function)):
        raise Wrong("pass the class itself, a subclass of torch.autograd.Function.")
    x = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64, requires_grad=True)
    same_tensor(Cube.apply(x).detach(), x.detach() ** 3, "Cube.apply(x)", atol=1e-12)
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

WRONG: dict[int, list[Any]] = {
    1: [lambda x: 3 * x**2 + torch.cos(x), lambda x: x**2 - torch.cos(x) - 4],
    2: [_forward_difference, lambda f, x, eps=1e-6: _central(f, x, eps) / 2],
    3: [_CubeForgetsChainRule, lambda x: x**3],
}
