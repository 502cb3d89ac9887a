"""Exercises of notebook 03 (nn): parameter counts and output shapes."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from ..checks import Wrong, equal, exercise


@exercise(1, "parameters of a Linear layer",
          hint="a Linear layer holds a weight matrix of out_features x in_features and, when "
               "bias=True, one bias per output.")
def check_1(linear_params: Callable[..., int]) -> str:
    for fan_in, fan_out, bias in [(64, 128, True), (3, 1, False), (512, 10, True)]:
        equal(linear_params(fan_in, fan_out, bias),
              sum(p.numel() for p in nn.Linear(fan_in, fan_out, bias=bias).parameters()),
              f"linear_params({fan_in}, {fan_out}, bias={bias})")
    return "Almost all of an MLP's parameters sit in these matrices."


@exercise(2, "the output size of a convolution",
          hint="padding adds 2*padding to the size; the kernel fits (size - kernel) / stride "
               "times after its first position, rounded down, plus that first position.")
def check_2(conv_out: Callable[..., int]) -> str:
    for size, k, p, s in [(8, 3, 1, 1), (28, 5, 0, 1), (32, 3, 1, 2), (7, 3, 0, 2), (224, 7, 3, 2)]:
        equal(conv_out(size, k, p, s),
              nn.Conv2d(1, 1, k, stride=s, padding=p)(torch.zeros(1, 1, size, size)).shape[-1],
              f"conv_out({size}, kernel={k}, padding={p}, stride={s})")
    return "The same formula gives the size after pooling (padding 0, stride = kernel)."


def _example_model() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    for p in model[0].parameters():  # frozen, as in fine-tuning
        p.requires_grad_(False)
    return model


@exercise(3, "counting what will be trained",
          hint="iterate over model.parameters() and add p.numel() for those with "
               "p.requires_grad. Buffers (batch-norm statistics) are not parameters.")
def check_3(count_trainable: Callable[[nn.Module], int]) -> str:
    model = _example_model()
    want = sum(p.numel() for p in model.parameters() if p.requires_grad)
    got = count_trainable(model)
    if got != want:
        total = sum(p.numel() for p in model.parameters())
        extra = " (that counts the frozen layer too)" if got == total else ""
        raise Wrong(f"count_trainable gave {got}, expected {want}{extra}.")
    return "torchhw.models.count_parameters does the same."


CHECKS = {1: check_1, 2: check_2, 3: check_3}

SOLUTIONS: dict[int, Any] = {
    1: lambda fan_in, fan_out, bias=True: fan_in * fan_out + (fan_out if bias else 0),
    2: lambda size, kernel, padding=0, stride=1: (size + 2 * padding - kernel) // stride + 1,
    3: lambda model: sum(p.numel() for p in model.parameters() if p.requires_grad),
}

WRONG: dict[int, list[Any]] = {
    1: [lambda i, o, bias=True: i * o, lambda i, o, bias=True: i * o + i],
    2: [lambda n, k, p=0, s=1: (n + 2 * p - k) // s, lambda n, k, p=0, s=1: n + 2 * p - k + 1],
    3: [lambda m: sum(p.numel() for p in m.parameters()),
        lambda m: sum(t.numel() for t in m.state_dict().values())],
}
