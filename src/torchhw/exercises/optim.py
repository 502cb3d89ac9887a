"""Exercises of notebook 04 (optim): a momentum step, a schedule, gradient clipping, early stopping."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..checks import Wrong, exercise, same_tensor


@exercise(1, "one step of SGD with momentum",
          hint="PyTorch's rule: velocity = momentum * velocity + grad, then "
               "param = param - lr * velocity. Return both new tensors.")
def check_1(step: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> str:
    g = torch.Generator().manual_seed(4)
    start = torch.randn(5, generator=g)
    grads = [torch.randn(5, generator=g) for _ in range(4)]
    param = start.clone().requires_grad_(True)
    opt = torch.optim.SGD([param], lr=0.1, momentum=0.9)
    mine, velocity = start.clone(), torch.zeros(5)
    for i, grad in enumerate(grads):
        param.grad = grad.clone()
        opt.step()
        mine, velocity = step(mine, grad, velocity, 0.1, 0.9)
        same_tensor(mine, param.detach(), f"the parameter after step {i + 1}", atol=1e-6)
    return "That one line of state is why momentum doubles SGD's memory per parameter."


@exercise(2, "warm-up then cosine decay",
          hint="for step < warmup: base_lr * (step + 1) / warmup. After it, with "
               "t = (step - warmup) / (total - warmup): base_lr * 0.5 * (1 + cos(pi * t)).")
def check_2(schedule: Callable[[int, int, int, float], float]) -> str:
    total, warmup, base = 100, 10, 0.5
    for step in [0, 4, 9, 10, 35, 55, 99, 100]:
        if step < warmup:
            want = base * (step + 1) / warmup
        else:
            want = base * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
        got = float(schedule(step, total, warmup, base))
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            raise Wrong(f"schedule({step}, total={total}, warmup={warmup}, base_lr={base}) = "
                        f"{got:.6g}, expected {want:.6g}.")
    return "Warm-up keeps the first, noisiest steps small; the cosine lands softly at zero."


@exercise(3, "clipping by the total norm",
          hint="compute one norm over all gradients together: sqrt(sum of every element "
               "squared). If it exceeds max_norm, scale every gradient by "
               "max_norm / (norm + 1e-6); otherwise return them unchanged.")
def check_3(clip: Callable[[list[torch.Tensor], float], list[torch.Tensor]]) -> str:
    g = torch.Generator().manual_seed(5)
    for max_norm in (1.0, 100.0):
        grads = [3 * torch.randn(4, 3, generator=g), torch.randn(7, generator=g)]
        params = [torch.zeros_like(t, requires_grad=True) for t in grads]
        for p, t in zip(params, grads):
            p.grad = t.clone()
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        got = clip([t.clone() for t in grads], max_norm)
        if len(got) != len(grads):
            raise Wrong(f"return one tensor per gradient ({len(grads)}), got {len(got)}.")
        for i, (mine, p) in enumerate(zip(got, params)):
            same_tensor(mine, p.grad, f"gradient {i} with max_norm={max_norm}", atol=1e-5)
    return "Matches torch.nn.utils.clip_grad_norm_: the direction is kept, only the length shrinks."


def _clip(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    norm = torch.sqrt(sum((t**2).sum() for t in grads))
    scale = min(1.0, max_norm / (norm.item() + 1e-6))
    return [t * scale for t in grads]


def _stop_epoch(val_losses: list[float], patience: int) -> int:
    best, waited = float("inf"), 0
    for epoch, loss in enumerate(val_losses, start=1):
        if loss < best:
            best, waited = loss, 0
        else:
            waited += 1
            if waited == patience:
                return epoch
    return len(val_losses)


_CURVES = [([1.0, 0.8, 0.7, 0.75, 0.9, 1.0, 1.2], 2),   # turns at epoch 3: stops at 5
           ([1.0, 0.8, 0.7, 0.75, 0.9, 1.0, 1.2], 3),
           ([1.0, 0.9, 0.9, 0.9, 0.8, 0.85, 0.9], 2),    # equal is no improvement
           ([1.0, 0.9, 0.8, 0.7], 2),                    # never stops
           ([0.5, 0.6, 0.4, 0.45, 0.5, 0.3, 0.35], 3)]   # the count restarts at each new best


@exercise(4, "early stopping",
          hint="keep the lowest loss so far and a counter: a new lowest loss (strictly lower) "
               "resets the counter to 0, any other epoch adds 1; stop at the epoch where the "
               "counter reaches patience. Epochs count from 1.")
def check_4(stop_epoch: Callable[[list[float], int], int]) -> str:
    for losses, patience in _CURVES:
        got, want = stop_epoch(list(losses), patience), _stop_epoch(losses, patience)
        if got != want:
            raise Wrong(f"stop_epoch({losses}, patience={patience}) = {got}, expected {want}.")
    return "Keep the best epoch's weights too, as section 6 does: stopping alone does not restore them."


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}

SOLUTIONS: dict[int, Any] = {
    1: lambda p, g, v, lr, m: (p - lr * (m * v + g), m * v + g),
    2: lambda step, total, warmup, base: (base * (step + 1) / warmup if step < warmup else
                                          base * 0.5 * (1 + math.cos(math.pi * (step - warmup)
                                                                     / (total - warmup)))),
    3: _clip,
    4: _stop_epoch,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda p, g, v, lr, m: (p - lr * g, v), lambda p, g, v, lr, m: (p - lr * (m * v + (1 - m) * g), m * v + (1 - m) * g)],
    2: [lambda s, total, w, b: b * 0.5 * (1 + math.cos(math.pi * s / total)),
        lambda s, total, w, b: b * s / w if s < w else b],
    3: [lambda grads, m: [t * min(1.0, m / (t.norm().item() + 1e-6)) for t in grads],
        lambda grads, m: [t.clamp(-m, m) for t in grads]],
    4: [lambda losses, patience: min(len(losses), patience + 1),          # counts from the start
        lambda losses, patience: _stop_epoch([x - 1e-9 * i for i, x in enumerate(losses)], patience)],
}
