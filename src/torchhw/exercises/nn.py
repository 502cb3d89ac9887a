"""Exercises of notebook 03 (nn): parameter counts, output shapes, registered sub-modules."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from ..checks import Wrong, _same, equal, exercise, hints_for, why
from ..i18n import tr


@exercise(1, "parameters of a Linear layer",
          hint="a Linear layer computes x @ W.T + b: how big must W be to turn in_features "
               "numbers into out_features, and how many numbers does b hold?",
          more="a Linear layer holds a weight matrix of out_features x in_features and, when "
               "bias=True, one bias per output: in_features * out_features + out_features.")
def check_1(linear_params: Callable[..., int]) -> str:
    for fan_in, fan_out, bias in [(64, 128, True), (3, 1, False), (512, 10, True), (7, 5, False)]:
        want = sum(p.numel() for p in nn.Linear(fan_in, fan_out, bias=bias).parameters())
        got = linear_params(fan_in, fan_out, bias)
        call = f"linear_params({fan_in}, {fan_out}, bias={bias})"  # code, in every language
        equal(got, want, call, why(
            got, want,
            (fan_in * fan_out, "that leaves out the bias, one number per output"),
            (fan_in * fan_out + fan_in, "the bias has one number per output, not per input"),
            (fan_in * fan_out + fan_out, "with bias=False there is no bias to count")))
    return "Almost all of an MLP's parameters sit in these matrices."


_CONV_CASES = [(8, 3, 1, 1), (28, 5, 0, 1), (32, 3, 1, 2), (7, 3, 0, 2), (224, 7, 3, 2)]
"""(size, kernel, padding, stride) of the cases check_2 tries."""

_CONV_MISTAKES: dict[str, Callable[[int, int, int, int], int | None]] = {
    # each known mistake's answer for (size, kernel, stride, padding); None: says nothing here
    "swapped": lambda n, k, s, p: (n + 2 * s - k) // p + 1 if p else None,
    "one side": lambda n, k, s, p: (n + p - k) // s + 1,
    "no + 1": lambda n, k, s, p: (n + 2 * p - k) // s,
    "no stride": lambda n, k, s, p: n + 2 * p - k + 1,
    "no padding": lambda n, k, s, p: (n - k) // s + 1,
    "rounded up": lambda n, k, s, p: -(-(n + 2 * p - k) // s) + 1,
}


def _conv_mistakes_made(conv_out: Callable[..., int]) -> set[str]:
    """The known mistakes whose answers ``conv_out`` gives on every case."""
    answers = []
    for size, k, p, s in _CONV_CASES:
        try:
            answers.append(((size, k, s, p), conv_out(size, k, s, p)))
        except Exception:
            return set()
    return {name for name, mistake in _CONV_MISTAKES.items()
            if all(mistake(*case) is None or _same(got, mistake(*case))
                   for case, got in answers)}


@exercise(2, "the output size of a convolution",
          hint="picture the kernel sliding along a padded input: how long is the padded input, "
               "and how many positions does the kernel take, moving `stride` at a time? Keep "
               "nn.Conv2d's argument order.",
          more="padding adds 2*padding to the size; the kernel fits (size - kernel) / stride "
               "times after its first position, rounded down, plus that first position: "
               "(size + 2 * padding - kernel) // stride + 1. The arguments come in nn.Conv2d's "
               "order: conv_out(size, kernel, stride=1, padding=0).")
def check_2(conv_out: Callable[..., int]) -> str:
    for size, k, p, s in _CONV_CASES:
        # by position first: the task fixes the order (nn.Conv2d's: kernel, stride, padding)
        call = f"conv_out({size}, {k}, {s}, {p})"
        try:
            got = conv_out(size, k, s, p)
        except ZeroDivisionError:
            raise Wrong(tr("{call} divided by zero: with padding={p} that means padding was used "
                           "as the stride. nn.Conv2d's order is kernel_size, stride, padding; "
                           "divide by stride, add 2 * padding.", call=call, p=p)) from None
        want = nn.Conv2d(1, 1, k, stride=s, padding=p)(torch.zeros(1, 1, size, size)).shape[-1]
        if got != want and s != p:
            try:
                swapped = conv_out(size, k, p, s)
            except Exception:
                swapped = None
            if swapped == want:
                raise Wrong(tr("{call} = {got}, expected {want}: your function takes padding "
                               "before stride. nn.Conv2d's order is kernel_size, stride, padding: "
                               "def conv_out(size, kernel, stride=1, padding=0).", call=call,
                               got=got, want=want))
        if isinstance(got, float) and got != int(got) and math.floor(got) == want:
            raise Wrong(tr("{call} = {got}: a kernel position either fits or it does not, so "
                           "round the division down (//).", call=call, got=got))
        if got != want:
            # Two mistakes can give the same number here (padding on one side only, and the
            # first position left out, both give 7 for an 8-wide input): name the one that
            # the answer makes on every case, when there is one.
            made = _conv_mistakes_made(conv_out)

            def value(mistake: str) -> int | None:
                if made and mistake not in made:
                    return None
                return _CONV_MISTAKES[mistake](size, k, s, p)

            equal(got, want, call, why(
                got, want,
                (value("swapped"), "that is the answer with stride and padding swapped"),
                (value("one side"), "padding is added on both sides: 2 * padding"),
                (value("no + 1"), "the first position is left out: add 1"),
                (value("no stride"), "the stride is left out: the kernel moves `stride` at a "
                                     "time"),
                (value("no padding"), "the padding is left out"),
                (value("rounded up"), "rounded up: a position only counts when the whole "
                                      "kernel fits, so round down")))
        # and by name, as nn.Conv2d's keywords are written
        named = f"conv_out({size}, {k}, stride={s}, padding={p})"
        try:
            by_name = conv_out(size, k, stride=s, padding=p)
        except TypeError as err:
            raise Wrong(tr("{named} raised TypeError ({err}): name the arguments as nn.Conv2d "
                           "does, def conv_out(size, kernel, stride=1, padding=0).", named=named,
                           err=err)) from None
        equal(by_name, want, named)
    return "The same formula gives the size after pooling (padding 0, stride = kernel)."


def _example_model() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    for p in model[0].parameters():  # frozen, as in fine-tuning
        p.requires_grad_(False)
    return model


def _frozen_models() -> list[nn.Module]:
    """The example, then models frozen elsewhere: an answer must read requires_grad, not
    skip the places the first model happens to freeze; and a model with a tied weight, which
    an optimizer updates once."""
    torch.manual_seed(3)
    last = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 4), nn.Linear(4, 2))
    for p in last[3].parameters():  # the head frozen, the body trained
        p.requires_grad_(False)
    middle = nn.Sequential(nn.Linear(3, 7), nn.BatchNorm1d(7), nn.Linear(7, 5), nn.ReLU(),
                           nn.Linear(5, 2))
    middle[2].weight.requires_grad_(False)  # only a weight frozen, its bias trained
    middle[1].requires_grad_(False)
    tied = nn.Sequential(nn.Embedding(10, 4), nn.LayerNorm(4), nn.Linear(4, 10, bias=False))
    tied[2].weight = tied[0].weight  # tied, as in section 3: one Parameter in two places
    tied[1].requires_grad_(False)
    return [_example_model(), last, middle,
            nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 3)),  # nothing frozen
            tied]


def _check_count(count_trainable: Callable[[nn.Module], int], model: nn.Module) -> None:
    want = sum(p.numel() for p in model.parameters() if p.requires_grad)
    got = count_trainable(model)
    if got != want:
        trainable = [p for p in model.parameters() if p.requires_grad]
        frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
        where = ", ".join(frozen) if frozen else tr("nothing")
        extra = why(got, want,
                    (sum(p.numel() for p in model.parameters()), "that counts the frozen layer "
                                                                 "too"),
                    (sum(t.numel() for t in model.state_dict().values()),
                     "that counts every tensor of state_dict(): the frozen layer and the "
                     "batch-norm buffers too"),
                    (want + sum(b.numel() for b in model.buffers()), "the batch-norm buffers "
                                                                     "are not parameters"),
                    (len(trainable), "that counts the tensors; count the numbers they hold, "
                                     "numel()"),
                    (sum(len(p) for p in trainable), "len() is a tensor's first dimension; "
                                                     "numel() counts all its numbers"),
                    (sum(p.numel() for m in model.modules() for p in m.parameters(recurse=False)
                         if p.requires_grad),
                     "a tied parameter, one tensor used in two places, was counted twice: an "
                     "optimizer updates it once, and model.parameters() lists it once"),
                    (0, ".grad stays None until a backward pass, so it cannot tell what will be "
                        "trained: p.requires_grad says whether autograd will compute a gradient"))
        if not extra:
            extra = tr(" (in this model the frozen parameters are: {where}; ask each parameter "
                       "whether it requires_grad, wherever it sits in the model)", where=where)
        raise Wrong(tr("count_trainable gave {got} for {model}, expected {want}{extra}.", got=got,
                       model=_describe(model), want=want, extra=extra))


def _describe(model: nn.Module) -> str:
    return "Sequential(" + ", ".join(type(m).__name__ for m in model.children()) + ")"


@exercise(3, "counting what will be trained",
          hint="an optimizer updates parameters whose gradients autograd computes. Which "
               "attribute of a parameter says so, and are buffers parameters?",
          more="iterate over model.parameters() and add p.numel() for those with "
               "p.requires_grad. Buffers (batch-norm statistics) are not parameters, and "
               "numel() counts the numbers a tensor holds (len() only its first dimension).")
def check_3(count_trainable: Callable[[nn.Module], int]) -> str:
    for model in _frozen_models():
        _check_count(count_trainable, model)
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


class _NoLastReLU(_Stack):  # a ReLU between the layers, none after the last
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class _BareParameters(nn.Module):  # the review's: the right size, no Linear, no work done
    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        self.params = nn.ParameterList(nn.Parameter(torch.zeros(n))
                                       for _ in range(depth) for n in (width * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _ReLUFirst(_Stack):  # the review's: the right pieces in the wrong order
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(torch.relu(x))
        return x


class _NoGrad(_Stack):  # the review's: the right outputs, but nothing an optimizer could train
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return super().forward(x)


class _NoReLU(_Stack):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@exercise(4, "layers an optimizer can see",
          hint="nn.Module finds sub-modules only where it looks for them. Where do you keep "
               "the layers so that parameters() lists them, and does each layer's output go "
               "through a ReLU?",
          more="keep the layers in nn.ModuleList (or nn.Sequential), not in a Python list: only "
               "registered sub-modules appear in parameters(), state_dict() and .to(device). A "
               "ModuleList has no forward of its own: write one that applies "
               "torch.relu(layer(x)) for each layer, or build nn.Sequential(Linear, ReLU, "
               "Linear, ReLU, ...) with a new Linear each time.")
def check_4(make_stack: Callable[[int, int], nn.Module]) -> str:
    for depth, width in [(3, 4), (1, 7), (4, 5)]:
        call = f"make_stack({depth}, {width})"
        torch.manual_seed(depth)
        model = make_stack(depth, width)
        if not isinstance(model, nn.Module):
            raise Wrong(tr("{call} should return an nn.Module, got {kind}.", call=call,
                           kind=type(model).__name__))
        got = sum(p.numel() for p in model.parameters())
        want = depth * (width * width + width)
        layers = [m for _, m in model.named_modules(remove_duplicate=False)
                  if isinstance(m, nn.Linear)]
        if got != want:
            if got == 0:
                extra = tr(" Python lists hide their layers from nn.Module: keep them in "
                           "nn.ModuleList or nn.Sequential.")
            elif len(layers) == depth and len({id(m) for m in layers}) < depth:
                extra = tr(" The same Linear appears several times ([layer] * depth repeats one "
                           "object): make a new Linear for each position.")
            else:
                extra = ""
            raise Wrong(tr("{call}.parameters() holds {got} numbers, expected {want}.{extra}",
                           call=call, got=got, want=want, extra=extra))
        if not layers:
            raise Wrong(tr("{call} holds the right number of parameters but no nn.Linear "
                           "layers ({kind}): the task asks for {depth} "
                           "Linear({width}, {width}) layers, each followed by a ReLU.", call=call,
                           kind=type(model).__name__, depth=depth, width=width))
        x = torch.randn(6, width, generator=torch.Generator().manual_seed(width))
        try:
            with torch.enable_grad():  # as in training, whatever the caller's mode
                out = model(x)
        except NotImplementedError:
            raise Wrong(tr("{call} returns a module without a forward ({kind} "
                           "only holds the layers): give it a forward that runs them, or use "
                           "nn.Sequential.", call=call, kind=type(model).__name__)) from None
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (6, width):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise Wrong(tr("{call} should map a (6, {width}) batch to (6, {width}); got "
                           "{shape}.", call=call, width=width, shape=shape))
        if len(layers) == depth:  # the reference: the same layers, each followed by a ReLU
            expected = x
            for layer in layers:
                expected = torch.relu(layer(expected))
            if not torch.allclose(out, expected, atol=1e-6):
                plain, relu_first = x, x
                for i, layer in enumerate(layers):
                    plain = layer(plain) if i == depth - 1 else torch.relu(layer(plain))
                    relu_first = layer(torch.relu(relu_first))
                if torch.allclose(out, relu_first, atol=1e-6):
                    raise Wrong(tr("{call} applies each ReLU before its Linear, ReLU then Linear: "
                                   "the order matters. Each Linear's output goes through a ReLU, "
                                   "ReLU(Linear(x)).", call=call))
                if (out < 0).any():
                    where = (tr("no ReLU after the last layer")
                             if torch.allclose(out, plain, atol=1e-6) else tr("a ReLU is missing"))
                    raise Wrong(tr("{call} gives negative outputs: {where}. Each Linear must "
                                   "be followed by a ReLU.", call=call, where=where))
                raise Wrong(tr("{call} does not compute ReLU(Linear(...)) with its layers in "
                               "order: check that every Linear is followed by a ReLU, and each "
                               "is used once.", call=call))
        # the task's reason: an optimizer trains a layer only if backward() reaches it
        if not out.requires_grad:
            raise Wrong(tr("{call}'s output carries no gradient (was the forward run under "
                           "torch.no_grad(), or detached?): backward() cannot reach the layers, "
                           "so an optimizer would never train them.", call=call))
        with torch.enable_grad():
            out.sum().backward()
        missed = [name for name, p in model.named_parameters() if p.grad is None]
        if missed:
            raise Wrong(tr("after {call}(x).sum().backward() these parameters have no gradient: "
                           "{names}. An optimizer would not train them: every layer must be "
                           "part of the computation autograd records.", call=call,
                           names=", ".join(missed)))
    return "An optimizer built from model.parameters() will train every layer."


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: lambda fan_in, fan_out, bias=True: fan_in * fan_out + (fan_out if bias else 0),
    2: lambda size, kernel, stride=1, padding=0: (size + 2 * padding - kernel) // stride + 1,
    3: lambda model: sum(p.numel() for p in model.parameters() if p.requires_grad),
    4: _Stack,
}

WRONG: dict[int, list[Any]] = {
    # the hint's point: the bias, one per output, only when bias=True
    1: [lambda i, o, bias=True: i * o, lambda i, o, bias=True: i * o + i,
        lambda i, o, bias=True: i * o + o],
    2: [lambda n, k, stride=1, padding=0: (n + 2 * padding - k) // stride,
        lambda n, k, stride=1, padding=0: n + 2 * padding - k + 1,
        # the old argument order, (padding, stride), filled in by position: divides by padding
        lambda n, k, stride=1, padding=0: (n + 2 * stride - k) // padding + 1,
        lambda n, k, s=1, p=0: (n + 2 * p - k) // s + 1,            # names unlike Conv2d's
        lambda n, k, stride=1, padding=0: (n + 2 * padding - k) / stride + 1,
        # the review's: right by keyword, but padding before stride
        lambda size, kernel, padding=0, stride=1: (size + 2 * padding - kernel) // stride + 1,
        lambda size, kernel, padding=0, stride=1: (size + 2 * padding - kernel) // max(stride, 1) + 1,
        # the review's: padding on one side only (7 for an 8-wide input, as without the + 1)
        lambda size, kernel, stride=1, padding=0: (size + padding - kernel) // stride + 1],
    # the hint's warnings: frozen parameters, buffers; and the rule: only what is trained
    3: [lambda m: sum(p.numel() for p in m.parameters()),
        lambda m: sum(t.numel() for t in m.state_dict().values()),
        lambda m: len([p for p in m.parameters() if p.requires_grad]),
        # the review's: right for the first model only, by skipping where it is frozen
        lambda m: sum(p.numel() for p in list(m.parameters())[2:]),
        lambda m: sum(p.numel() for c in list(m.children())[1:] for p in c.parameters()),
        # the review's: a gradient is not there before backward(); a tied weight counted twice
        lambda m: sum(p.numel() for p in m.parameters() if p.grad is not None),
        lambda m: sum(p.numel() for p in m.state_dict(keep_vars=True).values() if p.requires_grad),
        lambda m: sum(p.numel() for c in m.modules() for p in c.parameters(recurse=False)
                      if p.requires_grad)],
    # the hint's warning (a plain list), the task's rule (a ReLU after each layer), a
    # ModuleList with no forward, one layer repeated, the ReLU before the Linear, and a forward
    # that autograd does not record
    4: [_Hidden, lambda depth, width: nn.Sequential(*[nn.Linear(width, width)] * depth),
        lambda depth, width: nn.ModuleList(nn.Linear(width, width) for _ in range(depth)),
        _NoReLU, _NoLastReLU, _BareParameters, _ReLUFirst, _NoGrad],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda in_features, out_features, bias=True: out_features * (in_features + bool(bias))],
    2: [lambda size, kernel, stride=1, padding=0: math.floor((size + 2 * padding - kernel)
                                                             / stride) + 1],
    3: [lambda m: sum(p.numel() for _, p in m.named_parameters() if p.requires_grad)],
    4: [lambda depth, width: nn.Sequential(*(m for _ in range(depth)
                                             for m in (nn.Linear(width, width), nn.ReLU())))],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
