"""Exercises of notebook 10 (capstone): time to accuracy, where a resumed run restarts, and
a checkpoint's size predicted, then measured."""

from __future__ import annotations

import io
import numbers
import operator
from typing import Any, Callable, Sequence

import torch

from ..checks import Wrong, close, equal, exercise, hints_for, why
from ..i18n import tr


def _time_to(seconds: Sequence[float], acc: Sequence[float], target: float,
             strict: bool = False, own: bool = True) -> float | None:
    """Time to accuracy; ``strict=True`` (only above the target counts) and ``own=False`` (the
    epoch that reaches it left out) are typical wrong versions."""
    for i, a in enumerate(acc):
        if a > target if strict else a >= target:
            return sum(seconds[:i + 1 if own else i])
    return None


@exercise(1, "time to accuracy",
          hint="walk through the epochs in order, keeping a running total of the time. When do "
               "you stop, what do you return then, and what if you never stop?",
          more="add up the epochs' seconds until the first epoch whose accuracy reaches the "
               "target (>=), that epoch's own seconds included, and return that sum; return "
               "None when no epoch reaches it. A later fall in accuracy changes nothing.")
def check_1(time_to: Callable[[Sequence[float], Sequence[float], float], float | None]) -> str:
    seconds, acc = [2.0, 1.0, 1.0, 1.5], [0.5, 0.8, 0.92, 0.95]
    cases = [(acc, 0.9, 4.0), (acc, 0.5, 2.0), (acc, 0.95, 5.5), (acc, 0.99, None),
             ([0.5, 0.92, 0.85, 0.95], 0.9, 3.0)]  # accuracy can fall again: the first time counts
    for acc, target, want in cases:
        got = time_to(list(seconds), list(acc), target)
        call = f"time_to(seconds={seconds}, accuracies={acc}, target={target})"
        if want is None:
            equal(got, None, call, tr(" (never reached: return None, not a number)"))
            continue
        first = next(i for i, a in enumerate(acc) if a >= target)
        below = [i for i, a in enumerate(acc) if a < target]
        close(got, want, call, extra=why(
            got, want,
            (seconds[first], "that is the one epoch's time: add up every epoch's seconds up "
                             "to and including it"),
            (_time_to(seconds, acc, target, own=False), "the epoch that reaches the target "
                                                        "took time too: include its seconds"),
            (_time_to(seconds, acc, target, strict=True), "reaching the target counts: >=, "
                                                          "not >"),
            (sum(seconds[:max(below) + 2]) if below and max(below) + 2 <= len(seconds) else None,
             "the first epoch that reaches the target counts, even when the accuracy falls "
             "again later"),
            (sum(seconds), "stop adding at the first epoch that reaches the target"),
            (float(first), "that is the epoch's index; return the seconds"),
            (float(first + 1), "that is the epoch's number; return the seconds")))
    return "Time to accuracy rewards what matters: a faster step that learns worse does not win."


@exercise(2, "where a resumed run restarts",
          hint="how many whole epochs fit into `step` steps, and how many steps are left over "
               "after them? Epochs count from 0.",
          more="after `step` optimizer steps with `per_epoch` batches per epoch, the run is in "
               "epoch step // per_epoch (counting from 0) and has done step % per_epoch of "
               "its batches, which it must skip: divmod(step, per_epoch).")
def check_2(position: Callable[[int, int], tuple[int, int]]) -> str:
    for step, per_epoch, want in [(0, 23, (0, 0)), (25, 23, (1, 2)), (46, 23, (2, 0)), (7, 5, (1, 2)),
                                  (3, 5, (0, 3))]:
        got = position(step, per_epoch)
        try:
            got = tuple(got)
        except TypeError:
            raise Wrong(tr("position({step}, {per_epoch}) returned {got}: return a pair, "
                           "(epoch, batches_to_skip).", step=step, per_epoch=per_epoch,
                           got=repr(got))) from None
        e, k = divmod(step, per_epoch)
        equal(got, want, tr("position({step}, {per_epoch})", step=step, per_epoch=per_epoch), why(
            got, want,
            ((e + 1, k), "epochs count from 0"),
            ((e, 0), "the batches of the epoch already done must be skipped: step % per_epoch"),
            ((k, e), "the pair is swapped: (epoch, batches_to_skip)"),
            ((e, k + 1), "step % per_epoch batches are done; skip exactly those"),
            ((step / per_epoch, k), "whole epochs: divide with //")))
        if not all(_whole(v) for v in got):
            raise Wrong(tr("position({step}, {per_epoch}) returned {got}: the right values, but "
                           "an epoch and a count of batches are whole numbers (ints), which "
                           "range() and slicing need: // and % of two ints give ints",
                           step=step, per_epoch=per_epoch, got=repr(got)))
    return tr("That skip count is what fit() replays when it resumes in the middle of an epoch "
              "(section 6): it keeps the shuffle state from the start of the epoch, draws that "
              "epoch's batches again and skips the ones already done.")


def _whole(value: Any) -> bool:
    """An int (a NumPy or 0-d torch integer too), not a float that happens to be whole."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def state_bytes(model: torch.nn.Module) -> int:
    """Size of ``torch.save(model.state_dict())``, measured by saving to memory."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def _cnn(size: int = 8, preset: str = "base") -> torch.nn.Module:
    from ..models import SmallCNN

    torch.manual_seed(0)
    return SmallCNN(1, 10, size, preset=preset)


# models a reader may count by mistake: the notebook's own 16 x 16 one, 03's `small` preset
OTHER_MODELS = [(16, "base"), (8, "small"), (16, "small")]


def _counts(model: torch.nn.Module) -> set[int]:
    """The counts of ``model`` a prediction may have made: its tensors' bytes, its parameters'
    bytes, its elements as 4 bytes each."""
    state = model.state_dict()
    return {sum(t.numel() * t.element_size() for t in state.values()),
            sum(p.numel() * p.element_size() for p in model.parameters()),
            4 * sum(t.numel() for t in state.values())}


@exercise(3, "predict, then measure: a checkpoint's size",
          hint="state_dict() holds more than the parameters. List everything it holds for this "
               "model (print its keys), and count bytes, not elements: what does each dtype "
               "take per element?",
          more="count every tensor in state_dict(): parameters and buffers (batch norm's "
               "running mean and variance, and its int64 step counter num_batches_tracked), "
               "each as numel() x element_size() bytes: "
               "sum(t.numel() * t.element_size() for t in model.state_dict().values()). The "
               "file adds a little for names and layout.")
def check_3(predicted_bytes: float | Callable[[], float]) -> str:
    if callable(predicted_bytes):  # a function that computes the prediction is fine too
        predicted_bytes = predicted_bytes()
    model = _cnn()
    state = model.state_dict()
    tensors = {name: t.numel() * t.element_size() for name, t in state.items()}
    counted = sum(tensors.values())
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    counters = sum(n for name, n in tensors.items() if name.endswith("num_batches_tracked"))
    stats = counted - params - counters
    if isinstance(predicted_bytes, torch.Tensor) and predicted_bytes.numel() == 1:
        predicted_bytes = predicted_bytes.item()
    if isinstance(predicted_bytes, bool) or not isinstance(predicted_bytes, numbers.Real):
        raise Wrong(tr("predicted_bytes should be a number of bytes, got {kind}",
                       kind=type(predicted_bytes).__name__))
    predicted_bytes = float(predicted_bytes)  # an int, a float or a NumPy number alike
    missing = counted - predicted_bytes
    said = f"{predicted_bytes:,.0f}"
    for size, preset in OTHER_MODELS:
        if predicted_bytes in _counts(_cnn(size, preset)):
            raise Wrong(tr("{predicted} bytes is a count of another model, "
                           "SmallCNN(1, 10, {size}, preset={preset}): the exercise asks for "
                           "SmallCNN(1, 10, 8, preset=\"base\"). The image size sets the linear "
                           "head's inputs and the preset the channels, so count that model's "
                           "state_dict()", predicted=said, size=size, preset=repr(preset)))
    if missing == -params:
        raise Wrong(tr("{predicted} bytes adds the optimizer's momentum (one more copy of the "
                       "parameters) to the model's tensors: the exercise asks for "
                       "model.state_dict() alone. A checkpoint saves the optimizer's state "
                       "beside it, from optimizer.state_dict()", predicted=said))
    # the feedback names what is missing, never by how many bytes: a prediction that is told its
    # gap can be corrected without being understood
    if missing == counted - params:
        raise Wrong(tr("{predicted} bytes is the parameters alone: state_dict() also holds "
                       "batch norm's buffers (running means and variances, and a counter)",
                       predicted=said))
    if missing == counters:
        raise Wrong(tr("{predicted} bytes leaves out the num_batches_tracked counters: "
                       "buffers too, and not float32 (look at their dtype)", predicted=said))
    if missing == stats:
        raise Wrong(tr("{predicted} bytes leaves out batch norm's running means and "
                       "variances: they are buffers, saved with the weights", predicted=said))
    if missing == counters / 2:
        raise Wrong(tr("{predicted} bytes counts every element as 4 bytes, but the "
                       "num_batches_tracked counters are int64: 8 bytes each", predicted=said))
    elements = sum(t.numel() for t in state.values())
    if predicted_bytes in (elements, sum(p.numel() for p in model.parameters())):
        raise Wrong(tr("{predicted} is a count of elements: count bytes, each element "
                       "times its element_size()", predicted=said))
    if predicted_bytes == state_bytes(model):
        raise Wrong(tr("{predicted} bytes is the size of the file torch.save writes, "
                       "names and layout included: the exercise asks for the bytes the tensors "
                       "hold", predicted=said))
    for factor, wrong in [(0.25, tr("{predicted} bytes is a quarter of what the tensors hold: "
                                    "a float32 element is 4 bytes", predicted=said)),
                          (0.5, tr("{predicted} bytes is half of what the tensors hold: a "
                                   "float32 element is 4 bytes", predicted=said)),
                          (2.0, tr("{predicted} bytes is twice what the tensors hold: count "
                                   "each tensor once", predicted=said))]:
        if abs(predicted_bytes - factor * counted) <= 0.01 * factor * counted:
            raise Wrong(wrong)
    if predicted_bytes != counted:
        share = abs(missing) / counted
        size = tr("about {share}", share=f"{share:.0%}") if share >= 0.005 else tr("under 1%")
        if missing > 0:
            raise Wrong(tr("{predicted} bytes is {size} short of what the tensors hold: count "
                           "each tensor of state_dict(), parameters and buffers, as its elements "
                           "times its bytes per element", predicted=said, size=size))
        raise Wrong(tr("{predicted} bytes is {size} more than what the tensors hold: count each "
                       "tensor of state_dict(), parameters and buffers, as its elements times "
                       "its bytes per element", predicted=said, size=size))
    measured = state_bytes(model)
    return tr("Exactly the {counted} bytes the tensors hold. The file torch.save writes is "
              "{measured} bytes: {extra} more for names and layout ({share}). Add the "
              "optimizer's state (momentum: one more copy of the parameters) for a full "
              "checkpoint.", counted=f"{counted:,}", measured=f"{measured:,}",
              extra=f"{measured - counted:,}", share=f"{(measured - counted) / measured:.1%}")


def _predicted() -> int:
    return sum(t.numel() * t.element_size() for t in _cnn().state_dict().values())


CHECKS = {1: check_1, 2: check_2, 3: check_3}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: lambda seconds, acc, target: next(
        (sum(seconds[:i + 1]) for i, a in enumerate(acc) if a >= target), None),
    2: lambda step, per_epoch: (step // per_epoch, step % per_epoch),
    3: _predicted(),
}


def _parameters_and_stats() -> int:
    """The parameters and the running statistics, but not the int64 counters."""
    return sum(t.numel() * t.element_size() for name, t in _cnn().state_dict().items()
               if not name.endswith("num_batches_tracked"))


WRONG: dict[int, list[Any]] = {
    1: [lambda s, acc, t: next((s[i] for i, a in enumerate(acc) if a >= t), None),
        lambda s, acc, t: sum(s),
        # assumes the accuracy never falls: the last epoch below the target, plus one
        lambda s, acc, t: (sum(s[:max((i for i, a in enumerate(acc) if a < t), default=-1) + 2])
                           if any(a >= t for a in acc) else None),
        lambda s, acc, t: _time_to(s, acc, t, strict=True),     # reaching it counts
        lambda s, acc, t: _time_to(s, acc, t, own=False),
        lambda s, acc, t: _time_to(s, acc, t) or float("inf")],  # never: None, as the task says
    2: [lambda step, per: (step // per + 1, step % per), lambda step, per: (step // per, 0),
        lambda step, per: (step % per, step // per),
        lambda step, per: [float(step // per), float(step % per)]],   # right values, as floats
    # off by a factor (elements, twice), the hint's warning (the buffers: the parameters alone,
    # the counters left out, the counters as 4 bytes), and the file's size
    3: [_predicted() // 4, 2 * _predicted(),
        # the notebook's own model (new_model(): 16 x 16 images), and the momentum added
        sum(t.numel() * t.element_size() for t in _cnn(16).state_dict().values()),
        _predicted() + sum(p.numel() * p.element_size() for p in _cnn().parameters()),
        sum(p.numel() * p.element_size() for p in _cnn().parameters()),
        _predicted() - 16, _parameters_and_stats(), _predicted() - 8,
        state_bytes(_cnn()), lambda: sum(p.numel() * 4 for p in _cnn().parameters())],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda s, acc, t: _time_to(s, acc, t)],
    2: [lambda step, per_epoch: divmod(step, per_epoch),
        lambda step, per_epoch: [step // per_epoch, step % per_epoch]],   # a list is a pair too
    3: [float(_predicted()), torch.tensor(_predicted()), _predicted,
        lambda: sum(p.numel() * p.element_size() for p in _cnn().parameters())
        + sum(b.numel() * b.element_size() for b in _cnn().buffers())],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
