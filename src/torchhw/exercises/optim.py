"""Exercises of notebook 04 (optim): a momentum step, a schedule, gradient clipping, early stopping."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..checks import Wrong, exercise, hints_for, same_tensor, why
from ..i18n import tr


def _close_to(got: Any, want: torch.Tensor, atol: float = 1e-6) -> bool:
    return (isinstance(got, torch.Tensor) and got.shape == want.shape
            and torch.allclose(got.detach().to(want.dtype), want, atol=atol))


@exercise(1, "one step of SGD with momentum",
          hint="momentum keeps a running velocity of past gradients and moves the parameter "
               "along it. Look up torch.optim.SGD's update rule: what goes into the velocity, "
               "and where does the learning rate come in?",
          more="PyTorch's rule: velocity = momentum * velocity + grad, then "
               "param = param - lr * velocity. The learning rate stays out of the velocity (so "
               "a schedule that changes lr acts at once), and there is no (1 - momentum) "
               "factor. Return both new tensors: (param, velocity).")
def check_1(step: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> str:
    g = torch.Generator().manual_seed(4)
    start = torch.randn(5, generator=g)
    grads = [torch.randn(5, generator=g) for _ in range(5)]
    # a schedule lowers lr, as in section 5 (never 1 - momentum, where dampening and a velocity
    # with lr folded in would look alike)
    rates = [0.05, 0.05, 0.02, 0.02, 0.01]
    momentum = 0.9
    param = start.clone().requires_grad_(True)
    opt = torch.optim.SGD([param], lr=rates[0], momentum=momentum)
    mine, velocity = start.clone(), torch.zeros(5)
    for i, (grad, lr) in enumerate(zip(grads, rates)):
        opt.param_groups[0]["lr"] = lr
        param.grad = grad.clone()
        opt.step()
        buffer = opt.state[param]["momentum_buffer"]
        before_p, before_v = mine.clone(), velocity.clone()
        answer = step(mine, grad.clone(), velocity, lr, momentum)
        if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
            raise Wrong(tr("momentum_step returned {kind}: return a pair, "
                           "(new_param, new_velocity).", kind=type(answer).__name__))
        mine, velocity = answer
        where = tr("after step {step} (lr={lr}, momentum={momentum})", step=i + 1, lr=lr,
                   momentum=momentum)
        if _close_to(mine, buffer) and _close_to(velocity, param.detach()):
            raise Wrong(tr("{where} the two tensors come back swapped: return (new_param, "
                           "new_velocity).", where=where))
        if _close_to(velocity, lr * buffer) and not _close_to(velocity, buffer):
            raise Wrong(tr("{where} your velocity is lr times torch.optim.SGD's: you fold the "
                           "learning rate into the velocity (v = m v + lr g, p -= v). That moves "
                           "the parameter the same only while lr stays fixed; torch.optim.SGD "
                           "keeps lr out of the velocity.", where=where))
        if _close_to(velocity, momentum * before_v + (1 - momentum) * grad) and \
                not _close_to(velocity, buffer):
            raise Wrong(tr("{where} your velocity scales the gradient by (1 - momentum): that "
                           "is dampening, which torch.optim.SGD leaves at 0 by default.",
                           where=where))
        if _close_to(velocity, before_v) and not _close_to(velocity, buffer):
            raise Wrong(tr("{where} the velocity you return is the one you were given: update "
                           "it with this step's gradient.", where=where))
        if _close_to(mine, before_p - lr * (grad + momentum * buffer)) and \
                not _close_to(mine, param.detach()):
            raise Wrong(tr("{where} the parameter took a Nesterov step (grad + momentum * "
                           "velocity): plain momentum moves along the velocity itself.",
                           where=where))
        same_tensor(mine, param.detach(), tr("the parameter {where}", where=where), atol=1e-6)
        same_tensor(velocity, buffer, tr("the velocity {where}", where=where), atol=1e-6)
    return ("That one buffer of state per parameter is why momentum adds a copy of the "
            "parameters to SGD's memory (section 3 measured it; Adam keeps two).")


def _warmup_cosine(step: int, total: int, warmup: int, base: float) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


@exercise(2, "warm-up then cosine decay",
          hint="two pieces: a straight line up during warm-up, then half a cosine wave from "
               "base_lr down to 0. Check the ends: what is the rate at step 0, at the last "
               "warm-up step, and at step total?",
          more="for step < warmup: base_lr * (step + 1) / warmup. After it, with "
               "t = (step - warmup) / (total - warmup): base_lr * 0.5 * (1 + cos(pi * t)).")
def check_2(schedule: Callable[[int, int, int, float], float]) -> str:
    total, warmup, base = 100, 10, 0.5
    for step in [0, 4, 9, 10, 35, 55, 99, 100]:
        want = _warmup_cosine(step, total, warmup, base)
        got = float(schedule(step, total, warmup, base))
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            extra = why(got, want,
                        (base * step / warmup if step < warmup else want,
                         "warm-up starts at (step + 1) / warmup, so that step 0 does not have "
                         "a learning rate of 0"),
                        (base * 0.5 * (1 + math.cos(math.pi * step / total)),
                         "the cosine starts when warm-up ends: t = (step - warmup) / "
                         "(total - warmup)"),
                        (base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / total)),
                         "the cosine must reach 0 at step total: divide by (total - warmup)"),
                        (base, "after warm-up the rate decays along the cosine"),
                        (base * math.cos(math.pi * (step - warmup) / (total - warmup)),
                         "half a cosine wave, 0.5 * (1 + cos), goes from 1 to 0; cos alone "
                         "goes down to -1"),
                        (base * (step + 1) / warmup if step <= warmup else want,
                         "step warmup already belongs to the cosine (warm-up is step < warmup): "
                         "there the rate is base_lr, not base_lr * (warmup + 1) / warmup"),
                        (base * 0.5 * (1 + math.cos(math.pi * (step - warmup)
                                                    / (total - warmup - 1))),
                         "the cosine reaches 0 at step total, not at total - 1: divide by "
                         "(total - warmup)"),
                        rel=1e-6)
            raise Wrong(tr("schedule({step}, total={total}, warmup={warmup}, base_lr={base}) = "
                           "{got}, expected {want}{extra}.", step=step, total=total,
                           warmup=warmup, base=base, got=f"{got:.6g}", want=f"{want:.6g}",
                           extra=extra))
    return "Warm-up keeps the first, noisiest steps small; the cosine lands softly at zero."


def _clip(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    norm = torch.sqrt(sum((t**2).sum() for t in grads))
    scale = min(1.0, max_norm / (norm.item() + 1e-6))
    return [t * scale for t in grads]


@exercise(3, "clipping by the total norm",
          hint="treat all the gradients as one long vector: how long is it, and by what one "
               "factor would you shrink all of them so that it is no longer than max_norm?",
          more="compute one norm over all gradients together: sqrt(sum of every element "
               "squared). If it exceeds max_norm, scale every gradient by "
               "max_norm / (norm + 1e-6); otherwise return them unchanged. Build new tensors "
               "(t * scale), leaving the given ones as they were.")
def check_3(clip: Callable[[list[torch.Tensor], float], list[torch.Tensor]]) -> str:
    g = torch.Generator().manual_seed(5)
    for max_norm in (1.0, 100.0):
        grads = [3 * torch.randn(4, 3, generator=g), torch.randn(7, generator=g)]
        params = [torch.zeros_like(t, requires_grad=True) for t in grads]
        for p, t in zip(params, grads):
            p.grad = t.clone()
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        given = [t.clone() for t in grads]
        got = clip(given, max_norm)
        if not all(torch.equal(a, b) for a, b in zip(given, grads)):
            raise Wrong(tr("your function changed the gradients it was given: the task asks "
                           "for new tensors (t * scale), leaving these as they were."))
        try:
            got = list(got)
        except TypeError:
            raise Wrong(tr("return a list of tensors, got {kind}.",
                           kind=type(got).__name__)) from None
        if len(got) != len(grads):
            raise Wrong(tr("return one tensor per gradient ({want}), got {got}.",
                           want=len(grads), got=len(got)))
        want = [p.grad for p in params]
        total = torch.sqrt(sum((t**2).sum() for t in grads)).item()
        mistakes = [
            ([t * min(1.0, max_norm / (t.norm().item() + 1e-6)) for t in grads],
             tr("each tensor was clipped by its own norm; the norm is one over all of them "
                "together")),
            ([t.clamp(-max_norm, max_norm) for t in grads],
             tr("clamping each element is clipping by value (clip_grad_value_); scale every "
                "tensor by one factor instead")),
            ([t * max_norm / (total + 1e-6) for t in grads],
             tr("the total norm ({total}) is below max_norm={max_norm}: then the gradients "
                "stay as they are", total=f"{total:.3g}", max_norm=max_norm)),
            ([t * min(1.0, max_norm / (total**2 + 1e-6)) for t in grads],
             tr("the norm is the square root of the sum of squares")),
            ([t * min(1.0, (total + 1e-6) / max_norm) for t in grads],
             tr("the factor is upside down: max_norm / norm"))]
        for mistake, reason in mistakes:
            if all(_close_to(a, b, 1e-5) for a, b in zip(got, mistake)) and \
                    not all(_close_to(a, b, 1e-5) for a, b in zip(mistake, want)):
                raise Wrong(tr("with max_norm={max_norm}: {reason}.", max_norm=max_norm,
                               reason=reason))
        for i, (mine, w) in enumerate(zip(got, want)):
            same_tensor(mine, w, tr("gradient {i} with max_norm={max_norm}", i=i,
                                    max_norm=max_norm), atol=1e-5)
    return "Matches torch.nn.utils.clip_grad_norm_: the direction is kept, only the length shrinks."


def _stop_epoch(val_losses: list[float], patience: int, strict: bool = True,
                reset: bool = True) -> int:
    """Early stopping. ``strict=False`` and ``reset=False`` are typical wrong versions: an
    equal loss taken for an improvement, and a counter that never starts again at 0."""
    best, waited = float("inf"), 0
    for epoch, loss in enumerate(val_losses, start=1):
        if loss < best or (not strict and loss == best):
            best = loss
            waited = 0 if reset else waited
        else:
            waited += 1
            if waited == patience:
                return epoch
    return len(val_losses)


def _best_epoch(val_losses: list[float], patience: int) -> int:
    return min(range(len(val_losses)), key=lambda i: val_losses[i]) + 1


_CURVES = [([1.0, 0.8, 0.7, 0.75, 0.9, 1.0, 1.2], 2),   # turns at epoch 3: stops at 5
           ([1.0, 0.8, 0.9, 0.95, 0.7, 0.75], 2),          # stops at 4, before the later minimum
           ([1.0, 0.8, 0.7, 0.75, 0.9, 1.0, 1.2], 3),
           ([1.0, 0.9, 0.9, 0.9, 0.8, 0.85, 0.9], 2),    # equal is no improvement
           ([1.0, 0.9, 0.8, 0.7], 2),                    # never stops
           ([0.5, 0.6, 0.4, 0.45, 0.5, 0.3, 0.35], 3),   # the count restarts at each new best
           ([1.0, 0.5, 0.9, 0.8, 0.7, 0.6, 0.55], 2),    # falls again, but never below 0.5
           ([1.0, 0.6, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65], 3)]


def _stop_after_global_best(val_losses: list[float], patience: int) -> int:
    """A typical wrong version that looks ahead: `patience` epochs after the lowest loss of the
    whole list, which a run in progress cannot know yet."""
    return min(_best_epoch(val_losses, patience) + patience, len(val_losses))


def _stop_vs_previous(val_losses: list[float], patience: int) -> int:
    """A typical wrong version: an epoch counts as an improvement when it beats the epoch
    before it, not the lowest loss so far."""
    bad = 0
    for i in range(1, len(val_losses)):
        bad = 0 if val_losses[i] < val_losses[i - 1] else bad + 1
        if bad == patience:
            return i + 1
    return len(val_losses)


@exercise(4, "early stopping",
          hint="walk through the epochs keeping two things: the lowest loss so far, and how "
               "many epochs in a row have not beaten it. When does that count start again, "
               "and does an equal loss beat it?",
          more="keep the lowest loss so far and a counter: a new lowest loss (strictly lower) "
               "resets the counter to 0, any other epoch adds 1; stop at the epoch where the "
               "counter reaches patience. Epochs count from 1; if it never reaches patience, "
               "return len(val_losses).")
def check_4(stop_epoch: Callable[[list[float], int], int]) -> str:
    for losses, patience in _CURVES:
        got, want = stop_epoch(list(losses), patience), _stop_epoch(losses, patience)
        if got != want:
            extra = why(got, want,
                        (want - 1, "epochs count from 1, not 0"),
                        (_stop_epoch(losses, patience, strict=False),
                         "an equal loss is no improvement: only a strictly lower one resets "
                         "the count"),
                        (_stop_epoch(losses, patience, reset=False),
                         "the count starts again at 0 at every new lowest loss"),
                        (_stop_vs_previous(losses, patience),
                         "an epoch improves only when it beats the lowest loss so far, not the "
                         "epoch before it"),
                        (_best_epoch(losses, patience), "that is the best epoch; the run stops "
                                                        "patience epochs after it"),
                        (None, "a run that never runs out of patience stops at its last "
                               "epoch: return len(val_losses)"),
                        (min(len(losses), patience + 1), "the count starts at the lowest loss "
                                                         "so far, not at the first epoch"),
                        (_stop_after_global_best(losses, patience),
                         "that looks ahead: it counts from the lowest loss of the whole list, "
                         "which the run cannot know yet. Decide from the losses up to each "
                         "epoch: here the run runs out of patience before the later minimum "
                         "comes"),
                        (_stop_epoch(losses, patience + 1),
                         "the run ends when the count reaches patience (the patience-th epoch "
                         "without a new lowest loss), not when it passes it: more than patience "
                         "is ReduceLROnPlateau's rule, not early stopping's"))
            raise Wrong(tr("stop_epoch({losses}, patience={patience}) = {got}, expected "
                           "{want}{extra}.", losses=losses, patience=patience, got=got,
                           want=want, extra=extra))
    return "Keep the best epoch's weights too, as section 6 does: stopping alone does not restore them."


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: lambda p, g, v, lr, m: (p - lr * (m * v + g), m * v + g),
    2: lambda step, total, warmup, base: (base * (step + 1) / warmup if step < warmup else
                                          base * 0.5 * (1 + math.cos(math.pi * (step - warmup)
                                                                     / (total - warmup)))),
    3: _clip,
    4: _stop_epoch,
}


def _clip_in_place(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """Right numbers, but it scales the given tensors in place: the task asks for new ones."""
    norm = torch.sqrt(sum((t**2).sum() for t in grads))
    scale = min(1.0, max_norm / (norm.item() + 1e-6))
    for t in grads:
        t.mul_(scale)
    return grads


def _stop_epoch_from_best(val_losses: list[float], patience: int) -> int:
    """Another right way: remember the best epoch, stop `patience` epochs after it."""
    best_epoch = 1
    for epoch in range(1, len(val_losses) + 1):
        if val_losses[epoch - 1] < val_losses[best_epoch - 1]:
            best_epoch = epoch
        if epoch - best_epoch == patience:
            return epoch
    return len(val_losses)


WRONG: dict[int, list[Any]] = {
    # the task's rule (as torch.optim.SGD does it) broken by folding lr into the velocity;
    # the hint's warnings: no (1 - momentum) factor; the velocity left alone; Nesterov
    1: [lambda p, g, v, lr, m: (p - lr * g, v),
        lambda p, g, v, lr, m: (p - lr * (m * v + (1 - m) * g), m * v + (1 - m) * g),
        lambda p, g, v, lr, m: (p - (m * v + lr * g), m * v + lr * g),
        lambda p, g, v, lr, m: (p - lr * (g + m * (m * v + g)), m * v + g),
        lambda p, g, v, lr, m: (m * v + g, p - lr * (m * v + g))],
    # the hint's ends: step 0 is not 0, and the cosine runs from the end of warm-up; warm-up
    # one step too long (<= warmup), and a cosine that reaches 0 one step early
    2: [lambda s, total, w, b: b * 0.5 * (1 + math.cos(math.pi * s / total)),
        lambda s, total, w, b: b * s / w if s < w else b,
        lambda s, total, w, b: (b * s / w if s < w else
                                b * 0.5 * (1 + math.cos(math.pi * (s - w) / (total - w)))),
        lambda s, total, w, b: (b * (s + 1) / w if s <= w else
                                b * 0.5 * (1 + math.cos(math.pi * (s - w) / (total - w)))),
        lambda s, total, w, b: (b * (s + 1) / w if s < w else
                                b * 0.5 * (1 + math.cos(math.pi * (s - w) / (total - w - 1))))],
    # the hint's warning (one norm over all of them), by value, and the rule (new tensors)
    3: [lambda grads, m: [t * min(1.0, m / (t.norm().item() + 1e-6)) for t in grads],
        lambda grads, m: [t.clamp(-m, m) for t in grads],
        _clip_in_place,
        lambda grads, m: [t * m / (torch.sqrt(sum((u**2).sum() for u in grads)).item() + 1e-6)
                          for t in grads]],
    # the hint's warnings: an equal loss, and the count's restart; epochs from 1
    4: [lambda losses, patience: min(len(losses), patience + 1),          # counts from the start
        lambda losses, patience: _stop_epoch([x - 1e-9 * i for i, x in enumerate(losses)], patience),
        lambda losses, patience: _stop_epoch(losses, patience, strict=False),
        lambda losses, patience: _stop_epoch(losses, patience, reset=False),
        lambda losses, patience: _stop_epoch(losses, patience) - 1,
        _stop_vs_previous,                                                  # the review's
        _stop_after_global_best,                                            # looks ahead
        lambda losses, patience: _stop_epoch(losses, patience + 1)],        # waited > patience
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda p, g, v, lr, m: (lambda nv: (p - lr * nv, nv))(v * m + g),
        lambda p, g, v, lr, m: (p.clone().add_(m * v + g, alpha=-lr), v.mul(m).add(g))],
    2: [_warmup_cosine],
    3: [lambda grads, m: [t * min(1.0, m / (torch.cat([u.flatten() for u in grads]).norm().item()
                                            + 1e-6)) for t in grads]],
    4: [_stop_epoch_from_best],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
