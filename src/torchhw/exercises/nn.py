"""Exercises of notebook 03 (nn): parameter counts, output shapes, registered sub-modules."""

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
               "times after its first position, rounded down, plus that first position. The "
               "arguments come in nn.Conv2d's order: conv_out(size, kernel, stride=1, padding=0).")
def check_2(conv_out: Callable[..., int]) -> str:
    for size, k, p, s in [(8, 3, 1, 1), (28, 5, 0, 1), (32, 3, 1, 2), (7, 3, 0, 2), (224, 7, 3, 2)]:
        call = f"conv_out({size}, {k}, stride={s}, padding={p})"
        try:
            got = conv_out(size, k, stride=s, padding=p)
        except TypeError as err:
            raise Wrong(f"{call} raised TypeError ({err}): name the arguments as nn.Conv2d does, "
                        f"def conv_out(size, kernel, stride=1, padding=0).") from None
        except ZeroDivisionError:
            raise Wrong(f"{call} divided by zero: with padding={p} that means padding was used "
                        f"as the stride. nn.Conv2d's order is kernel_size, stride, padding; "
                        f"divide by stride, add 2 * padding.") from None
        want = nn.Conv2d(1, 1, k, stride=s, padding=p)(torch.zeros(1, 1, size, size)).shape[-1]
        swapped = (size + 2 * s - k) // p + 1 if p else None
        extra = " (that is the answer with stride and padding swapped)" if got == swapped != want else ""
        equal(got, want, call, extra)
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


class _Stack(nn.Module):
    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class _Hidden(nn.Module):  # the classic mistake: a plain list hides the layers
    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        self.layers = [nn.Linear(width, width) for _ in range(depth)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


@exercise(4, "layers an optimizer can see",
          hint="keep the layers in nn.ModuleList (or nn.Sequential), not in a Python list: only "
               "registered sub-modules appear in parameters(), state_dict() and .to(device).")
def check_4(make_stack: Callable[[int, int], nn.Module]) -> str:
    for depth, width in [(3, 4), (1, 7)]:
        model = make_stack(depth, width)
        if not isinstance(model, nn.Module):
            raise Wrong(f"make_stack({depth}, {width}) should return an nn.Module, got "
                        f"{type(model).__name__}.")
        got = sum(p.numel() for p in model.parameters())
        want = depth * (width * width + width)
        if got != want:
            extra = " Python lists hide their layers from nn.Module." if got == 0 else ""
            raise Wrong(f"make_stack({depth}, {width}).parameters() holds {got} numbers, "
                        f"expected {want}.{extra}")
        out = model(torch.ones(2, width))
        if tuple(out.shape) != (2, width) or (out < 0).any():
            raise Wrong(f"make_stack({depth}, {width}) should map (2, {width}) to (2, {width}) "
                        f"with a ReLU after each layer; got shape {tuple(out.shape)}.")
    return "An optimizer built from model.parameters() will train every layer."


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}

SOLUTIONS: dict[int, Any] = {
    1: lambda fan_in, fan_out, bias=True: fan_in * fan_out + (fan_out if bias else 0),
    2: lambda size, kernel, stride=1, padding=0: (size + 2 * padding - kernel) // stride + 1,
    3: lambda model: sum(p.numel() for p in model.parameters() if p.requires_grad),
    4: _Stack,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda i, o, bias=True: i * o, lambda i, o, bias=True: i * o + i],
    2: [lambda n, k, stride=1, padding=0: (n + 2 * padding - k) // stride,
        lambda n, k, stride=1, padding=0: n + 2 * padding - k + 1,
        # the old argument order, (padding, stride), filled in by position: divides by padding
        lambda n, k, stride=1, padding=0: (n + 2 * stride - k) // padding + 1,
        lambda n, k, s=1, p=0: (n + 2 * p - k) // s + 1],           # names unlike Conv2d's
    3: [lambda m: sum(p.numel() for p in m.parameters()),
        lambda m: sum(t.numel() for t in m.state_dict().values())],
    4: [_Hidden, lambda depth, width: nn.Sequential(*[nn.Linear(width, width)] * depth)],
}
