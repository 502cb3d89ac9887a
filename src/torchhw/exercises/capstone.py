"""Exercises of notebook 10 (capstone): time to accuracy, where a resumed run restarts, and
a checkpoint's size predicted, then measured."""

from __future__ import annotations

import io
import numbers
from typing import Any, Callable, Sequence

import torch

from ..checks import Wrong, close, equal, exercise


@exercise(1, "time to accuracy",
          hint="add up the epochs' seconds until the first epoch whose accuracy reaches the "
               "target, and return that sum; return None when no epoch reaches it.")
def check_1(time_to: Callable[[Sequence[float], Sequence[float], float], float | None]) -> str:
    seconds, acc = [2.0, 1.0, 1.0, 1.5], [0.5, 0.8, 0.92, 0.95]
    cases = [(acc, 0.9, 4.0), (acc, 0.5, 2.0), (acc, 0.95, 5.5), (acc, 0.99, None),
             ([0.5, 0.92, 0.85, 0.95], 0.9, 3.0)]  # accuracy can fall again: the first time counts
    for acc, target, want in cases:
        got = time_to(seconds, acc, target)
        if want is None:
            equal(got, None, f"time_to(seconds, accuracies, {target})", " (never reached)")
        else:
            close(got, want, f"time_to(seconds, accuracies, {target})")
    return "Time to accuracy rewards what matters: a faster step that learns worse does not win."


@exercise(2, "where a resumed run restarts",
          hint="after `step` optimizer steps with `per_epoch` batches per epoch, the run is in "
               "epoch step // per_epoch (counting from 0) and has done step % per_epoch of "
               "its batches, which it must skip.")
def check_2(position: Callable[[int, int], tuple[int, int]]) -> str:
    for step, per_epoch, want in [(0, 23, (0, 0)), (25, 23, (1, 2)), (46, 23, (2, 0)), (7, 5, (1, 2))]:
        got = tuple(position(step, per_epoch))
        equal(got, want, f"position({step}, {per_epoch})")
    return "That skip count is why fit() stores the shuffle state from the start of the epoch."


def state_bytes(model: torch.nn.Module) -> int:
    """Size of ``torch.save(model.state_dict())``, measured by saving to memory."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def _cnn() -> torch.nn.Module:
    from ..models import SmallCNN

    torch.manual_seed(0)
    return SmallCNN(1, 10, 8, preset="base")


@exercise(3, "predict, then measure: a checkpoint's size",
          hint="count every tensor in state_dict(): parameters and buffers (batch norm's "
               "running mean and variance, and its int64 step counter), times the bytes per "
               "element. The file adds a little for names and layout.")
def check_3(predicted_bytes: float | Callable[[], float]) -> str:
    if callable(predicted_bytes):  # a function that computes the prediction is fine too
        predicted_bytes = predicted_bytes()
    model = _cnn()
    tensors = {name: t.numel() * t.element_size() for name, t in model.state_dict().items()}
    counted = sum(tensors.values())
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    counters = sum(n for name, n in tensors.items() if name.endswith("num_batches_tracked"))
    if isinstance(predicted_bytes, torch.Tensor) and predicted_bytes.numel() == 1:
        predicted_bytes = predicted_bytes.item()
    if isinstance(predicted_bytes, bool) or not isinstance(predicted_bytes, numbers.Real):
        raise Wrong(f"predicted_bytes should be a number of bytes, got {type(predicted_bytes).__name__}")
    predicted_bytes = float(predicted_bytes)  # an int, a float or a NumPy number alike
    missing = counted - predicted_bytes
    if missing == counted - params:
        raise Wrong(f"{predicted_bytes:,.0f} bytes is the parameters alone: state_dict() also holds "
                    f"the batch-norm buffers ({counted - params:,} bytes)")
    if missing == counters:
        raise Wrong(f"{predicted_bytes:,.0f} bytes leaves out the int64 counters "
                    f"(num_batches_tracked, 8 bytes each, {counters} bytes in all)")
    if predicted_bytes != counted:
        raise Wrong(f"{predicted_bytes:,.0f} bytes is {abs(missing):,.0f} bytes "
                    f"{'short of' if missing > 0 else 'more than'} what the tensors hold: count "
                    f"each tensor's elements times its bytes per element")
    measured = state_bytes(model)
    return (f"Exactly the {counted:,} bytes the tensors hold. The file torch.save writes is "
            f"{measured:,} bytes: {measured - counted:,} more for names and layout "
            f"({(measured - counted) / measured:.1%}). Add the optimizer's state (momentum: one "
            f"more copy of the parameters) for a full checkpoint.")


def _predicted() -> int:
    return sum(t.numel() * t.element_size() for t in _cnn().state_dict().values())


CHECKS = {1: check_1, 2: check_2, 3: check_3}

SOLUTIONS: dict[int, Any] = {
    1: lambda seconds, acc, target: next(
        (sum(seconds[:i + 1]) for i, a in enumerate(acc) if a >= target), None),
    2: lambda step, per_epoch: (step // per_epoch, step % per_epoch),
    3: _predicted(),
}

WRONG: dict[int, list[Any]] = {
    1: [lambda s, acc, t: next((s[i] for i, a in enumerate(acc) if a >= t), None),
        lambda s, acc, t: sum(s),
        # assumes the accuracy never falls: the last epoch below the target, plus one
        lambda s, acc, t: (sum(s[:max(i for i, a in enumerate(acc) if a < t) + 2])
                           if any(a >= t for a in acc) else None)],
    2: [lambda step, per: (step // per + 1, step % per), lambda step, per: (step // per, 0)],
    3: [_predicted() // 4, 2 * _predicted(),
        # the parameters alone, and the buffers without the int64 counters: the hint's mistakes
        sum(p.numel() * p.element_size() for p in _cnn().parameters()),
        _predicted() - 16],
}
