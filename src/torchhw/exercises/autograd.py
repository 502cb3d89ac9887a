"""Exercises of notebook 02 (autograd): a gradient by hand, finite differences, a Function."""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import torch
import torch.autograd.forward_ad

from ..checks import Wrong, exercise, hints_for, same_tensor
from ..i18n import _, tr


class _UsedAutograd(Exception):
    pass


def _engine_entries() -> list[tuple[Any, str]]:
    """Where autograd's reverse and forward modes start, as (owner, attribute) pairs.

    Every reverse-mode entry (Tensor.backward, torch.autograd.grad, torch.func.grad, vjp,
    jacrev, autograd.functional) reaches ``torch.autograd._engine_run_backward``. Every
    forward-mode one (torch.func.jvp, jacfwd, ``forward_ad.make_dual``) ends in the function
    that make_dual looks up when called: ``torch._functorch.predispatch._make_dual`` in recent
    torch, ``torch._VF._make_dual`` in older ones. Replacing those, not the public names,
    catches ``from torch.autograd.forward_ad import make_dual`` too.
    """
    entries: list[tuple[Any, str]] = [(torch.autograd, "_engine_run_backward"),
                                      (torch.autograd.forward_ad, "make_dual"),
                                      (torch._VF, "_make_dual")]
    try:
        import torch._functorch.predispatch as predispatch
    except ImportError:  # older torch: make_dual calls torch._VF._make_dual itself
        return entries
    if hasattr(predispatch, "_make_dual"):
        entries.append((predispatch, "_make_dual"))
    return entries


_ABSENT = object()


@contextlib.contextmanager
def _autograd_forbidden() -> Iterator[None]:
    """While active, any backward or forward-mode AD raises _UsedAutograd; afterwards every
    replaced attribute is exactly as it was (torch._VF serves its functions through
    __getattr__, so an attribute it did not hold is deleted again rather than set)."""
    def refuser() -> Callable[..., Any]:
        # one function per entry: torch.func's tracing rules reject one object under two names
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise _UsedAutograd
        return refuse
    saved = [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name in _engine_entries()]
    for owner, name, _ in saved:
        setattr(owner, name, refuser())
    try:
        yield
    finally:
        for owner, name, original in saved:
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def _without_autograd(fn: Callable[..., Any], instead: str) -> Any:
    """``fn()``, or Wrong if it asked autograd (reverse or forward mode) for the answer;
    ``instead`` says what the exercise asks for."""
    try:
        with _autograd_forbidden():
            return fn()
    except _UsedAutograd:
        raise Wrong(tr("your answer asks autograd (backward, torch.autograd.grad, torch.func or "
                       "forward_ad's make_dual) for the gradient; {instead}",
                       instead=instead)) from None


@exercise(1, "a derivative by hand",
          hint="differentiate f one term at a time, with the rules for a power, for sin, and "
               "for a constant times x; the derivative of a sum is the sum of the derivatives.",
          more="d/dx x^3 = 3x^2, d/dx sin(x) = cos(x), and the derivative of a constant times "
               "x is that constant: f'(x) = 3 * x**2 + torch.cos(x) - 4, elementwise.")
def check_1(grad_f: Callable[[torch.Tensor], torch.Tensor]) -> str:
    x = torch.linspace(-2, 2, 9, dtype=torch.float64, requires_grad=True)
    (x**3 + torch.sin(x) - 4 * x).sum().backward()
    want = x.grad
    got = _without_autograd(lambda: grad_f(x.detach().clone()),
                            tr("by hand means writing the derivative as a formula."))
    if isinstance(got, torch.Tensor) and got.shape == want.shape and got.is_floating_point():
        got64 = got.detach().to(torch.float64)
        xs = x.detach()
        # A float32 answer (returned as such, or computed in float32 and cast back) carries
        # float32's round-off, about 1e-7 relative: judge its formula at that precision.
        in_float32 = got.dtype != torch.float64 or torch.equal(got64, got64.float().double())
        tol = 1e-9 if got.dtype == torch.float64 else 100 * torch.finfo(got.dtype).eps
        for value, reason in [(want + 4, tr("that is 4 too large everywhere: the derivative of "
                                            "-4x is -4")),
                              (want - 2 * torch.cos(xs), tr("the derivative of sin(x) is +cos(x)")),
                              (want - 3 * xs**2 + xs**2, tr("the derivative of x^3 is 3x^2"))]:
            if torch.allclose(got64, value, atol=tol, rtol=tol):
                raise Wrong(tr("grad_f(x) has the right shape but wrong values: {reason}.",
                               reason=reason))
        error = (got64 - want).abs().max().item()
        low = 100 * torch.finfo(torch.float32 if got.dtype == torch.float64 else got.dtype).eps
        if 1e-12 < error and in_float32 and torch.allclose(got64, want, atol=low, rtol=low):
            if got.dtype != x.dtype:
                raise Wrong(tr("grad_f(x) returned {got} for a float64 x. Its values match the "
                               "derivative as closely as {got} can show (largest error {error}); "
                               "return it in x's dtype, so that the checker can compare it to "
                               "float64 round-off. Torch operations on x keep its "
                               "dtype; torch.tensor(...) of Python numbers makes float32 unless "
                               "given dtype=x.dtype.", got=str(got.dtype), error=f"{error:.2g}"))
            raise Wrong(tr("grad_f(x) returned float64, but its values were computed in float32 "
                           "(every one is a float32 number, largest error {error}): compute it "
                           "in x's dtype throughout, so that the checker can compare it to "
                           "float64 round-off.", error=f"{error:.2g}"))
        if 1e-12 < error < 1e-3:
            raise Wrong(tr("grad_f(x) is close to the derivative but not exactly it (largest error "
                           "{error}): that is a numerical estimate. By hand means writing the "
                           "derivative as a formula, which autograd matches to round-off.",
                           error=f"{error:.2g}"))
    call = "grad_f(x)"  # code, the same in every language
    same_tensor(got, want, call, atol=1e-12, rtol=1e-12)
    return "Autograd computes exactly this, for every operation it recorded."


@exercise(2, "central finite differences",
          hint="nudge one coordinate of x a little up and a little down, and see how much f "
               "changes per unit of the nudge. Do it for every coordinate.",
          more="for each coordinate i: (f(x + eps e_i) - f(x - eps e_i)) / (2 eps), where e_i "
               "is 1 at position i and 0 elsewhere. Its error shrinks like eps^2, a one-sided "
               "difference's, (f(x + eps e_i) - f(x)) / eps, only like eps.")
def check_2(numerical_grad: Callable[..., torch.Tensor]) -> str:
    g = torch.Generator().manual_seed(2)
    functions = {"sum(exp(x))": lambda x: x.exp().sum(),
                 _("prod of sin"): lambda x: torch.sin(x).prod(),
                 "x0^3 x1": lambda x: x[0] ** 3 * x[1]}
    for name, f in functions.items():
        x = torch.randn(3, generator=g, dtype=torch.float64)
        xg = x.clone().requires_grad_(True)
        f(xg).backward()
        want = xg.grad
        got = _without_autograd(lambda: numerical_grad(f, x.clone(), eps=1e-6),
                                tr("a finite difference estimates it from values of f alone."))
        if isinstance(got, (list, tuple)):  # the task never asked for a tensor: a list is fine
            try:
                got = torch.tensor([float(v) for v in got], dtype=torch.float64)
            except (TypeError, ValueError):
                raise Wrong(tr("numerical_grad for {name} returned {got}: expected one number "
                               "per coordinate of x.", name=name, got=repr(got))) from None
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            got64 = got.detach().to(torch.float64)
            one_sided = _forward_difference(f, x.clone(), 1e-6)
            for value, tol, reason in [
                    (2 * want, 1e-6, tr("twice the gradient: the step from x - eps to x + eps "
                                        "is 2 eps long")),
                    (want / 2, 1e-6, tr("half the gradient: divide by 2 eps, not 4 eps")),
                    (one_sided, 1e-12, tr("that is a one-sided difference, f(x + eps) - f(x): "
                                          "the exercise asks for the central one, from x - eps "
                                          "to x + eps"))]:
                if not torch.allclose(value, want, atol=1e-8, rtol=1e-7) and \
                        torch.allclose(got64, value, atol=tol, rtol=tol):
                    raise Wrong(tr("numerical_grad for {name}: {reason}.", name=name,
                                   reason=reason))
        same_tensor(got, want, tr("numerical_grad for {name}", name=name), atol=1e-8, rtol=1e-7)
    return "This is how gradcheck decides whether a backward is right."


@exercise(3, "a custom autograd.Function",
          hint="forward computes x**3 and keeps, through ctx, what backward will need; backward "
               "receives the gradient of the output and returns the gradient of the input.",
          more="forward saves x with ctx.save_for_backward(x) and returns x**3; backward reads "
               "(x,) = ctx.saved_tensors, gets grad_output and must return "
               "grad_output * 3 * x**2 (the chain rule).")
def check_3(Cube: Any) -> str:
    if not (isinstance(Cube, type) and issubclass(Cube, torch.autograd.Function)):
        raise Wrong(tr("pass the class itself, a subclass of torch.autograd.Function."))
    x = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64, requires_grad=True)
    out = Cube.apply(x)
    call = "Cube.apply(x)"  # code, the same in every language
    same_tensor(out.detach(), x.detach() ** 3, call, atol=1e-12)
    if out.grad_fn is not None and not out.grad_fn.saved_tensors:
        raise Wrong(tr("forward saved nothing with ctx.save_for_backward: keeping x as a plain "
                       "attribute (ctx.x = x) hides it from autograd, which then cannot catch an "
                       "in-place change to x (the version counter, section 5) and may keep it "
                       "alive longer than the graph."))
    if out.grad_fn is None:
        raise Wrong(tr("Cube.apply(x) gave a result autograd cannot go back through: compute "
                       "it from x inside forward, not from x.detach() or under no_grad."))
    upstream = torch.full_like(x, 2.0)
    (grad,) = torch.autograd.grad(out, x, upstream)
    slope = 3 * x.detach() ** 2
    if torch.allclose(grad, slope) and not torch.allclose(grad, upstream * slope):
        raise Wrong(tr("backward returns 3 x^2 whatever gradient it receives: multiply by "
                       "grad_output (the chain rule), or a Cube inside a larger formula gets the "
                       "wrong gradient."))
    try:
        torch.autograd.gradcheck(Cube.apply, (x,), raise_exception=True)
    except Exception as err:
        # gradcheck's first line ends in a comma before the two Jacobians it prints: say the
        # gist (how far apart they are) instead of cutting the sentence off.
        first = str(err).strip().splitlines()[0].rstrip(",: ")
        try:
            jacobian = torch.autograd.functional.jacobian(Cube.apply, x.detach())
            gap = (jacobian - torch.diag(slope)).abs().max().item()
        except Exception:
            gap = None
        if gap is None or not math.isfinite(gap):
            raise Wrong(tr("the forward is right but gradcheck rejects the backward: {err}. "
                           "Your backward's Jacobian could not be compared with the right one, "
                           "3 x^2 on the diagonal: it is not finite everywhere or not x's shape "
                           "(x here includes 0).", err=first)) from None
        raise Wrong(tr("the forward is right but gradcheck rejects the backward: {err}. The "
                       "Jacobian your backward gives is up to {gap} away from the finite "
                       "differences' (the right one is diagonal, 3 x^2).",
                       err=first, gap=f"{gap:.3g}")) from None
    _refuses_a_changed_input(Cube)
    return "gradcheck agrees with your backward."


def _refuses_a_changed_input(Cube: Any) -> None:
    """Raise Wrong unless backward notices x changed in place after forward, or is unharmed.

    That is what save_for_backward is for: read back through ctx.saved_tensors, a saved input
    that was overwritten makes backward raise (section 5). A backward that reads a plain
    attribute (ctx.x) instead computes a silently wrong gradient from the new values, even
    when forward also called save_for_backward.
    """
    leaf = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64, requires_grad=True)
    x = leaf * 1                        # not a leaf, so it may be changed in place
    out = Cube.apply(x)
    x.mul_(2)                           # overwrite x between forward and backward
    try:
        (grad,) = torch.autograd.grad(out.sum(), leaf)
    except RuntimeError as err:
        if "inplace operation" in str(err):
            return                      # the version counter caught it: right
        raise
    if not torch.allclose(grad, 3 * leaf.detach() ** 2):
        raise Wrong(tr("when x is changed in place between forward and backward, backward "
                       "returns a wrong gradient without an error: it reads x from somewhere "
                       "autograd does not watch (a plain attribute such as ctx.x), not from "
                       "ctx.saved_tensors. Read it back with (x,) = ctx.saved_tensors, so that "
                       "the version counter (section 5) can refuse a changed x."))


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


class _CubeSavesButReadsCtx(torch.autograd.Function):
    """Calls save_for_backward, yet backward reads the plain attribute: the rule broken all the
    same, since an in-place change to x then goes unnoticed."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.x = x
        return x**3

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        return grad_output * 3 * ctx.x**2


class _CubeWrongSlope(_Cube):
    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x         # d/dx x^3 is 3x^2, not 3x


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
hint = hints_for(CHECKS)

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


def _grad_by_differences(x: torch.Tensor) -> torch.Tensor:
    """Not autograd, but not by hand either: a numerical estimate, near and not exact."""
    f = lambda t: t**3 + torch.sin(t) - 4 * t  # noqa: E731
    return (f(x + 1e-6) - f(x - 1e-6)) / 2e-6


def _grad_by_forward_mode(x: torch.Tensor) -> torch.Tensor:
    """Forward-mode AD with make_dual imported by name: autograd all the same."""
    from torch.autograd.forward_ad import dual_level, make_dual, unpack_dual
    with dual_level():
        t = make_dual(x, torch.ones_like(x))
        return unpack_dual(t**3 + torch.sin(t) - 4 * t).tangent


def _grad_in_float32(x: torch.Tensor) -> torch.Tensor:
    """The right formula, one element at a time, in a tensor that torch.tensor makes float32:
    right to float32's precision, and told to return x's dtype."""
    return torch.tensor([3 * v**2 + math.cos(v) - 4 for v in x.tolist()])


def _grad_by_python_floats(x: torch.Tensor) -> torch.Tensor:
    """The same, kept in x's dtype: right."""
    return torch.tensor([3 * v**2 + math.cos(v) - 4 for v in x.tolist()], dtype=x.dtype)


def _numerical_by_autograd(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                           eps: float = 1e-6) -> torch.Tensor:
    """The exact gradient, asked of autograd: not the estimate the exercise asks for."""
    return torch.func.grad(f)(x)


def _central_list(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                  eps: float = 1e-6) -> list[float]:
    """The same central difference, returned as a plain list: also a right answer."""
    return [float(v) for v in _central(f, x, eps)]


def _central_in_place(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                      eps: float = 1e-6) -> torch.Tensor:
    """Nudges x itself and puts it back: another right way to write it."""
    grad = torch.empty_like(x)
    for i in range(x.numel()):
        old = x[i].item()
        x[i] = old + eps
        up = f(x)
        x[i] = old - eps
        down = f(x)
        x[i] = old
        grad[i] = (up - down) / (2 * eps)
    return grad


class _CubeSavingOutput(torch.autograd.Function):
    """Saves what backward needs in another form: also right."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * grad_output * x * x


WRONG: dict[int, list[Any]] = {
    # the hint's warning (the constant's derivative), a sign, the task's rule (no autograd,
    # reverse or forward mode; a formula, not an estimate), and float32 for a float64 x
    1: [lambda x: 3 * x**2 + torch.cos(x), lambda x: x**2 - torch.cos(x) - 4,
        _grad_by_autograd, _grad_by_torch_func, lambda x: 3 * x**2 - torch.cos(x) - 4,
        _grad_by_differences, _grad_by_forward_mode, _grad_in_float32],
    # the hint's warning (one-sided), a factor of 2, a constant, and the rule (no autograd)
    2: [_forward_difference, lambda f, x, eps=1e-6: _central(f, x, eps) / 2,
        lambda f, x, eps=1e-6: [0.0] * x.numel(), lambda f, x, eps=1e-6: 2 * _central(f, x, eps),
        _numerical_by_autograd],
    # the hint's warning (grad_output dropped), the task's rule (save_for_backward, and read
    # back from ctx.saved_tensors), and a wrong derivative that only gradcheck catches
    3: [_CubeForgetsChainRule, lambda x: x**3, _CubeOnCtx, _CubeSavesButReadsCtx,
        _CubeWrongSlope],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda x: 3 * x * x + x.cos() - 4, _grad_by_python_floats],
    2: [_central_list, _central_in_place],
    3: [_CubeSavingOutput],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
