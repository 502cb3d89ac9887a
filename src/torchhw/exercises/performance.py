"""Exercises of notebook 09 (performance): honest verdicts, memory layouts, fusion, and a
prediction of activation memory checked against a live measurement."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..checks import Wrong, equal, exercise, hints_for, why
from ..i18n import tr


def _verdict(median: float, low: float, high: float, threshold: float = 0.05,
             slower_below: float | None = None) -> str:
    """The course's rule; other ``threshold``s and ``slower_below=1 - threshold`` are the
    typical wrong versions."""
    if low > 1 + threshold:
        return "faster"
    if high < (1 / (1 + threshold) if slower_below is None else slower_below):
        return "slower"
    return "no clear difference"


@exercise(1, "a verdict from a ratio and its interval",
          hint="the median alone can mislead: the whole interval has to clear the course's "
               "threshold (section 1) on one side. Which end of it matters for 'faster', and "
               "which for 'slower'?",
          more="'faster' only when even the low end of the interval is above 1 + threshold, "
               "'slower' only when even the high end is below 1 / (1 + threshold) (about "
               "0.952, not 0.95); otherwise 'no clear difference'. The course's threshold is "
               "bench.THRESHOLD (0.05).")
def check_1(verdict: Callable[[float, float, float], str]) -> str:
    from ..bench import THRESHOLD

    assert THRESHOLD == 0.05, "the cases below are written for a 5% threshold"
    cases = [((1.8, 1.6, 2.0), "faster"), ((0.7, 0.6, 0.8), "slower"),
             ((1.05, 0.95, 1.2), "no clear difference"), ((0.97, 0.9, 1.01), "no clear difference"),
             ((1.3, 1.06, 1.5), "faster"),
             ((1.3, 1.02, 1.5), "no clear difference"),  # above 1, but within the threshold
             ((0.9, 0.85, 0.96), "no clear difference"), ((0.8, 0.7, 0.94), "slower"),
             # at the threshold: a 3% or a 6% rule fails here
             ((1.2, 1.04, 1.3), "no clear difference"), ((1.2, 1.055, 1.3), "faster"),
             ((0.9, 0.8, 0.953), "no clear difference"), ((0.9, 0.8, 0.951), "slower"),
             # cases that tell the typical mistakes apart, so that feedback names the right one:
             # the interval clears 1 but not 1.05 (a missing threshold says faster, the median
             # alone no clear difference); the median clears 1.05 but the interval reaches below 1
             # (the median alone says faster); the median is above 1 but neither end clears the
             # threshold (the sign of the median says faster, swapped ends no clear difference)
             ((1.04, 1.01, 1.08), "no clear difference"), ((1.1, 0.98, 1.2), "no clear difference"),
             ((1.02, 1.0, 1.04), "no clear difference")]
    allowed = {"faster", "slower", "no clear difference"}
    answers = []
    for (median, low, high), _ in cases:
        got = verdict(median, low, high)
        if got not in allowed:
            raise Wrong(tr("verdict({median}, {low}, {high}) = {got}: return one of "
                           "'faster', 'slower' or 'no clear difference'.",
                           median=median, low=low, high=high, got=repr(got)))
        answers.append(got)
    # the rule of a typical mistake that gives every one of the reader's answers names it
    mistakes: list[tuple[Callable[[float, float, float], str], str]] = [
        (lambda m, lo, hi: _verdict(m, lo, hi, threshold=0.0),
         tr("above 1 (or below it) is not enough: the interval must clear 1 by the course's "
            "threshold, 5%")),
        (lambda m, lo, hi: "faster" if m > 1 else "slower",
         tr("the median alone is not enough: the whole interval must clear the threshold, or "
            "there is no clear difference")),
        (lambda m, lo, hi: _verdict(m, m, m),
         tr("the median alone is not enough: the whole interval must clear the threshold")),
        (lambda m, lo, hi: _verdict(m, lo, hi, slower_below=1 - THRESHOLD),
         tr("'slower' starts below 1 / 1.05 (about 0.952), not 0.95: 5% longer is a ratio of "
            "1 / 1.05")),
        (lambda m, lo, hi: _verdict(m, hi, lo, threshold=0.0),
         tr("the ends are swapped, and the threshold is missing: 'faster' needs even the low "
            "end above 1.05, 'slower' even the high end below 1 / 1.05")),
        (lambda m, lo, hi: _verdict(m, hi, lo),
         tr("the ends are swapped: 'faster' needs even the low end above 1.05, 'slower' even "
            "the high end below 1 / 1.05")),
        (lambda m, lo, hi: _verdict(m, lo, hi, threshold=0.03), tr("the course's threshold is 5%")),
        (lambda m, lo, hi: _verdict(m, lo, hi, threshold=0.06), tr("the course's threshold is 5%"))]
    named = next((tr(" ({reason})", reason=reason) for rule, reason in mistakes
                  if all(rule(*case) == got for (case, _), got in zip(cases, answers))), "")
    for ((median, low, high), want), got in zip(cases, answers):
        equal(got, want, tr("verdict({median}, {low}, {high})", median=median, low=low, high=high),
              named)
    return ("A ratio whose interval reaches within 5% of 1 is not a result yet: time longer rounds "
            "(more calls average out more noise) or use a quieter machine. This is the rule "
            "bench.compare_rounds applies to every ratio.")


@exercise(2, "channels_last strides",
          hint="write out the order channels_last keeps the four dimensions in memory; the "
               "last of them has stride 1, and each one before it jumps over all those after "
               "it. Then list the strides in the order N, C, H, W.",
          more="channels_last stores (N, C, H, W) as N, H, W, C in memory: C is the fastest "
               "dimension (stride 1), then W (stride C), then H (stride W*C), then N (H*W*C). "
               "In the order of the dimensions: (H*W*C, 1, W*C, C).")
def check_2(strides: Callable[[int, int, int, int], tuple[int, ...]]) -> str:
    for shape in [(2, 3, 4, 5), (8, 16, 7, 7), (4, 2, 3, 3)]:
        n, c, h, w = shape
        want = torch.empty(shape).contiguous(memory_format=torch.channels_last).stride()
        got = tuple(int(s) for s in strides(*shape))
        equal(got, want, tr("strides{shape}", shape=shape), why(
            got, want,
            ((c * h * w, h * w, w, 1), "those are the contiguous (NCHW) strides; channels_last "
                                       "puts C last in memory"),
            ((h * w * c, w * c, c, 1), "those are in memory order (N, H, W, C); list them in "
                                       "the order of the dimensions, N, C, H, W"),
            (tuple(4 * x for x in want), "strides count elements, not bytes")))
    return "Same shape, same values, another order in memory: that is all channels_last changes."


@exercise(3, "bytes moved by an element-wise chain",
          hint="an fp32 element is 4 bytes. Count what one unfused op reads and writes, then "
               "what the whole chain reads and writes once it is fused into one kernel.",
          more="each unfused op reads its input and writes its output: 2 x n x 4 bytes per op, "
               "so 8 * n * k for k ops. Fused, the chain reads the input once and writes the "
               "result once: 8 * n, whatever k.")
def check_3(chain_bytes: Callable[[int, int, bool], int]) -> str:
    for n, k in [(1000, 1), (4096, 3), (10**6, 5)]:
        for fused, want in ((False, 8 * n * k), (True, 8 * n)):
            got = chain_bytes(n, k, fused)
            equal(got, want, tr("chain_bytes({n}, {k}, fused={fused})", n=n, k=k, fused=fused), why(
                got, want,
                (want // 2, "each op both reads its input and writes its output"),
                (want // 4, "those are elements: an fp32 element is 4 bytes"),
                (8 * n * k, "fused, the chain reads once and writes once, however many ops"),
                (8 * n, "unfused, every op reads and writes the whole tensor again"),
                (4 * n * (k + 1), "an unfused chain writes each result to memory and reads it "
                                  "back: 2 x n x 4 per op")))
    return ("Memory-bound ops run at bytes / bandwidth, so fusing k ops can approach k times "
            "faster: what torch.compile's fusion buys on the left of the roofline.")


def saved_activation_bytes(model: torch.nn.Module, x: torch.Tensor,
                           y: torch.Tensor | None = None) -> int:
    """Bytes of tensors autograd keeps for backward (parameters excluded, storages counted once).
    Without ``y`` the forward ends in a sum (the model's activations alone); with labels ``y``
    it ends in cross_entropy, as section 10's saved_bytes runs it, which keeps a few more."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
        (out.sum() if y is None else torch.nn.functional.cross_entropy(out, y)).backward()
    return sum(seen.values())


# the last model is a small batch, where the hidden layers' biases (d * hidden numbers) are a
# large share next to the activations (batch * d * hidden): adding them is then far beyond 5%
_MODELS = [(32, 64, 128, 2), (64, 100, 256, 3), (4, 8, 64, 2)]


def _param_bytes(features: int, hidden: int, depth: int) -> int:
    return 4 * (features * hidden + hidden + (depth - 1) * (hidden * hidden + hidden)
                + hidden * 10 + 10)


@exercise(4, "predict, then measure: activation memory",
          hint="go through the model's layers and ask what each one must keep for its "
               "backward, and whether two layers keep the same tensor. Then count bytes: how "
               "many per fp32 element?",
          more="each Linear keeps its input for the weight gradient, each ReLU keeps its "
               "output, and a ReLU's output is the next Linear's input (one tensor, counted "
               "once): the input batch plus one batch x hidden tensor per hidden layer, 4 "
               "bytes per fp32 element: 4 * (batch * features + depth * batch * hidden). "
               "Section 10's count, with its cross_entropy loss, adds the loss's tensors too "
               "(the (batch, 10) log-softmax output and the int64 labels): either is accepted.")
def check_4(predict: Callable[[int, int, int, int], float]) -> str:
    from ..models import MLP

    guesses = [float(predict(*shape)) for shape in _MODELS]
    if len(set(guesses)) == 1:
        raise Wrong(tr("your prediction is the same for all three models ({value} bytes): it "
                       "must grow with the batch, the width and the depth.",
                       value=f"{guesses[0]:,.0f}"))
    worst = 0.0
    for (batch, features, hidden, depth), got in zip(_MODELS, guesses):
        torch.manual_seed(0)
        model = MLP(features, 10, hidden=hidden, depth=depth)
        x = torch.randn(batch, features)
        y = torch.randint(0, 10, (batch,))
        alone, with_loss = saved_activation_bytes(model, x), saved_activation_bytes(model, x, y)
        off = min(abs(got - alone) / alone, abs(got - with_loss) / with_loss)
        if not off <= 0.05:
            act = batch * features + depth * batch * hidden
            loss = 4 * (10 * batch + 1) + 8 * batch
            candidates = [
                (act, tr("that counts elements; an fp32 element is 4 bytes")),
                (2 * act, tr("an fp32 element is 4 bytes, not 2")),
                (4 * (batch * features + 2 * depth * batch * hidden),
                 tr("a ReLU's output is the next Linear's input: one tensor, counted once")),
                (4 * depth * batch * hidden, tr("the first Linear keeps the input batch too")),
                (4 * act + _param_bytes(features, hidden, depth),
                 tr("the task leaves the parameters out: count only the activations")),
                (4 * act + 4 * depth * hidden,
                 tr("that adds the hidden layers' biases, which are parameters: the task leaves "
                    "them out"))]
            reason = ""
            for value, why_ in candidates:
                if any(abs(got - v) <= 0.02 * v for v in (value, value + loss)):
                    reason = tr(" ({reason})", reason=why_)
                    break
            raise Wrong(tr("predict({batch}, {features}, {hidden}, {depth}) = {got} bytes, "
                           "but autograd kept {alone} bytes for the model's activations "
                           "({with_loss} with section 10's cross_entropy loss){reason}; within "
                           "5% passes.", batch=batch, features=features, hidden=hidden,
                           depth=depth, got=f"{got:,.0f}", alone=f"{alone:,}",
                           with_loss=f"{with_loss:,}", reason=reason))
        worst = max(worst, off)
    return tr("Within {worst} of the live measurement. Activation memory grows with batch x "
              "width x depth, which is what gradient checkpointing trades for time.",
              worst=f"{worst:.1%}")


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: lambda m, low, high: "faster" if low > 1.05 else "slower" if high < 1 / 1.05
    else "no clear difference",
    2: lambda n, c, h, w: (h * w * c, 1, w * c, c),
    3: lambda n, k, fused: 8 * n if fused else 8 * n * k,
    4: lambda batch, features, hidden, depth: 4 * (batch * features + depth * batch * hidden),
}

WRONG: dict[int, list[Any]] = {
    # the median alone, the hint's warning (the threshold forgotten), 0.95 for 'slower', the
    # ends swapped, and another threshold than the course's rule
    1: [lambda m, low, high: "faster" if m > 1 else "slower",
        lambda m, low, high: "faster" if high > 1 else "slower" if low < 1 else "no clear difference",
        # the interval above 1 but the threshold forgotten
        lambda m, low, high: "faster" if low > 1 else "slower" if high < 1 else "no clear difference",
        lambda m, low, high: _verdict(m, low, high, slower_below=0.95),
        lambda m, low, high: _verdict(m, low, high, threshold=0.03),
        # the median against the threshold, and the ends swapped with the threshold kept: the
        # cases tell both apart from the mistakes above, so each is named for what it is
        lambda m, low, high: _verdict(m, m, m),
        lambda m, low, high: _verdict(m, high, low)],
    # the contiguous strides, nonsense, and the hint's memory order given as the answer
    2: [lambda n, c, h, w: (c * h * w, h * w, w, 1), lambda n, c, h, w: (1, n, n * c, n * c * h),
        lambda n, c, h, w: (h * w * c, w * c, c, 1)],
    # half (read or write forgotten), fusion ignored, elements instead of bytes
    3: [lambda n, k, fused: 4 * n * k if not fused else 4 * n,
        lambda n, k, fused: 8 * n * k,
        lambda n, k, fused: 2 * n if fused else 2 * n * k],
    # elements instead of bytes (off by 4), the hint's warning (a ReLU's output counted again),
    # the input left out, a constant, the task's rule (parameters excluded) broken, 2 bytes an
    # element, and the rule broken by the biases alone
    4: [lambda b, f, h, d: b * f + d * b * h, lambda b, f, h, d: 4 * (b * f + 2 * d * b * h),
        lambda b, f, h, d: 4 * d * b * h, lambda b, f, h, d: 40960,
        lambda b, f, h, d: 4 * (b * f + d * b * h) + _param_bytes(f, h, d),
        lambda b, f, h, d: 2 * (b * f + d * b * h),
        # the hidden layers' biases counted as activations: within 5% on a large batch, not on
        # the small one
        lambda b, f, h, d: 4 * (b * f + d * b * h) + 4 * d * h],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda m, low, high: _verdict(m, low, high)],
    2: [lambda n, c, h, w: tuple(torch.empty(n, c, h, w).to(memory_format=torch.channels_last)
                                 .stride())],
    3: [lambda n, k, fused: 2 * n * 4 * (1 if fused else k)],
    # section 10's count, saved_bytes around F.cross_entropy: the loss's log-softmax output,
    # its int64 labels and a scalar come on top of the activations
    4: [lambda b, f, h, d: 4 * (b * f + d * b * h + 10 * b + 1) + 8 * b,
        lambda b, f, h, d: 4 * (b * f + d * b * h + 10 * b)],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
