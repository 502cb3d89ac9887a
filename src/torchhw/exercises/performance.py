"""Exercises of notebook 09 (performance): honest verdicts, memory layouts, fusion, and a
prediction of activation memory checked against a live measurement."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..checks import Wrong, close, equal, exercise


@exercise(1, "a verdict from a ratio and its interval",
          hint="'faster' only when even the low end of the interval is above 1 + threshold, "
               "'slower' only when even the high end is below 1 / (1 + threshold); otherwise "
               "'no clear difference'. The course's threshold is bench.THRESHOLD (0.05).")
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
             ((0.9, 0.8, 0.953), "no clear difference"), ((0.9, 0.8, 0.951), "slower")]
    for (median, low, high), want in cases:
        equal(verdict(median, low, high), want, f"verdict({median}, {low}, {high})")
    return ("A ratio whose interval reaches within 5% of 1 is not a result yet: time longer rounds "
            "(more calls average out more noise) or use a quieter machine. This is the rule "
            "bench.compare_rounds applies to every ratio.")


@exercise(2, "channels_last strides",
          hint="channels_last stores (N, C, H, W) as N, H, W, C in memory: C is the fastest "
               "dimension (stride 1), then W (stride C), then H (stride W*C), then N (H*W*C).")
def check_2(strides: Callable[[int, int, int, int], tuple[int, ...]]) -> str:
    for shape in [(2, 3, 4, 5), (8, 16, 7, 7), (4, 2, 3, 3)]:
        want = torch.empty(shape).contiguous(memory_format=torch.channels_last).stride()
        got = tuple(int(s) for s in strides(*shape))
        equal(got, want, f"strides{shape}")
    return "Same shape, same values, another order in memory: that is all channels_last changes."


@exercise(3, "bytes moved by an element-wise chain",
          hint="each unfused op reads its input and writes its output: 2 x n x bytes per op. "
               "Fused, the chain reads the input once and writes the result once.")
def check_3(chain_bytes: Callable[[int, int, bool], int]) -> str:
    for n, k in [(1000, 1), (4096, 3), (10**6, 5)]:
        equal(chain_bytes(n, k, False), 8 * n * k, f"chain_bytes({n}, {k}, fused=False)")
        equal(chain_bytes(n, k, True), 8 * n, f"chain_bytes({n}, {k}, fused=True)")
    return ("Memory-bound ops run at bytes / bandwidth, so fusing k ops can approach k times "
            "faster: what torch.compile's fusion buys on the left of the roofline.")


def saved_activation_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Bytes of tensors autograd keeps for backward (parameters excluded, storages counted once)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum().backward()
    return sum(seen.values())


@exercise(4, "predict, then measure: activation memory",
          hint="each Linear keeps its input for the weight gradient, each ReLU keeps its "
               "output, and a ReLU's output is the next Linear's input (one tensor, counted "
               "once): the input batch plus one batch x hidden tensor per hidden layer, 4 "
               "bytes per fp32 element.")
def check_4(predict: Callable[[int, int, int, int], float]) -> str:
    from ..models import MLP

    worst = 0.0
    for batch, features, hidden, depth in [(32, 64, 128, 2), (64, 100, 256, 3), (16, 8, 32, 1)]:
        torch.manual_seed(0)
        model = MLP(features, 10, hidden=hidden, depth=depth)
        measured = saved_activation_bytes(model, torch.randn(batch, features))
        got = predict(batch, features, hidden, depth)
        close(got, measured, f"predict({batch}, {features}, {hidden}, {depth}) against the "
              f"{measured:,} bytes measured", rel=0.05)
        worst = max(worst, abs(float(got) - measured) / measured)
    return (f"Within {worst:.1%} of the live measurement. Activation memory grows with batch x "
            f"width x depth, which is what gradient checkpointing trades for time.")


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}

SOLUTIONS: dict[int, Any] = {
    1: lambda m, low, high: "faster" if low > 1.05 else "slower" if high < 1 / 1.05
    else "no clear difference",
    2: lambda n, c, h, w: (h * w * c, 1, w * c, c),
    3: lambda n, k, fused: 8 * n if fused else 8 * n * k,
    4: lambda batch, features, hidden, depth: 4 * (batch * features + depth * batch * hidden),
}

WRONG: dict[int, list[Any]] = {
    1: [lambda m, low, high: "faster" if m > 1 else "slower",
        lambda m, low, high: "faster" if high > 1 else "slower" if low < 1 else "no clear difference",
        # the interval above 1 but the threshold forgotten
        lambda m, low, high: "faster" if low > 1 else "slower" if high < 1 else "no clear difference"],
    2: [lambda n, c, h, w: (c * h * w, h * w, w, 1), lambda n, c, h, w: (1, n, n * c, n * c * h)],
    3: [lambda n, k, fused: 4 * n * k if not fused else 4 * n,
        lambda n, k, fused: 8 * n * k],
    4: [lambda b, f, h, d: b * f + d * b * h, lambda b, f, h, d: 4 * (b * f + 2 * d * b * h),
        lambda b, f, h, d: 4 * d * b * h],
}
