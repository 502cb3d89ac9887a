"""The tuning knobs: what each one changes in a training step, and when it cannot apply.

A :class:`Knob` has a name, a check that says why it cannot apply on this machine (or None),
and an ``apply`` that changes one trial's :class:`Setup`: the model's memory format, an
autocast dtype, a GradScaler, TF32 or cudnn.benchmark (global settings, restored after the
trial), the thread count, the batch size, ``torch.compile`` or the optimizer's implementation. :func:`default_knobs` is the list
:func:`torchhw.tune.tune` tries, in the order it tries them. Notebook 09 measures each of them
by hand first.

:func:`configure` turns a configuration (``{"channels_last": True, "threads": "half"}``, what
the tuner recommends) into a Setup, and :func:`prepare` turns a Setup into what a training
loop needs: the module to call, its optimizer, a GradScaler or None, and a context manager for
the thread count, the fp32 precision and global flags. The tuner's trials and notebook 10's training both go
through these two, so what was tuned is what is trained.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn

from . import device as devices
from .cpu import using_threads  # noqa: F401  (also part of this module's interface)


@dataclass
class Setup:
    """What one trial trains: a private model, batch and optimizer, and the knobs' settings."""

    model: nn.Module
    batch: tuple[torch.Tensor, torch.Tensor]
    device: torch.device
    threads: int
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    make_optimizer: Callable[[Any], torch.optim.Optimizer]
    autocast: torch.dtype | None = None
    scaler: bool = False
    compile: bool = False
    settings: list[Callable[[], Any]] = field(default_factory=list)  # context managers
    optimizer_options: dict[str, Any] = field(default_factory=dict)  # set on every param group
    channels_last: bool = False  # the model's weights, and so its inputs, in NHWC
    batch_factor: int = 1  # examples per step, as a multiple of the batch asked for
    tf32: bool = False  # CUDA: fp32 matmuls and convolutions in TF32; else in true fp32


@dataclass(frozen=True)
class Knob:
    """One setting the tuner can try.

    ``check(setup)`` returns None when the knob applies here, else the reason it does not;
    ``apply(setup)`` changes the setup in place. ``group`` names knobs that exclude each
    other (two autocast dtypes): they are never combined.
    """

    name: str
    value: Any
    what: str
    check: Callable[[Setup], str | None]
    apply: Callable[[Setup], None]
    group: str = ""


def _has_conv(setup: Setup) -> bool:
    """channels_last is the layout of 4-D tensors: 2-D convolutions (3-D ones have their own)."""
    return any(isinstance(m, nn.Conv2d) for m in setup.model.modules())


def _channels_last(setup: Setup) -> None:
    setup.channels_last = True
    setup.model = setup.model.to(memory_format=torch.channels_last)
    # the batch stays as a loader gives it: Configured converts each one, in the tuner's trials
    # as in training, so the conversion's cost is timed too


def _set_flag(obj: Any, name: str, value: Any) -> Callable[[], Any]:
    @contextmanager
    def flag() -> Iterator[None]:
        old = getattr(obj, name)
        setattr(obj, name, value)
        try:
            yield
        finally:
            setattr(obj, name, old)
    return flag


def _tf32(setup: Setup) -> None:
    setup.tf32 = True


def _tf32_check(setup: Setup) -> str | None:
    return devices.tf32_support(setup.device)


def _cudnn_benchmark_check(setup: Setup) -> str | None:
    """Not something a trial in this process can measure. torch keeps the cuDNN plan chosen for
    each convolution shape in a cache per thread, and uses a cached plan whether benchmark is on
    or not; the backward convolutions run on autograd's own thread for the GPU, which every
    trial shares. Once the baseline has run the shapes, benchmark = True would search nothing."""
    if setup.device.type != "cuda":
        return f"cudnn.benchmark needs a CUDA GPU; this trial runs on {setup.device.type}"
    return ("not timed by the tuner: cuDNN's plans are cached per thread, backward's on "
            "autograd's thread, which every trial shares, so after the baseline it would search "
            "nothing; notebook 09 measures it in fresh processes. To use it, set "
            "torch.backends.cudnn.benchmark = True before a run's first convolution")


def _autocast_check(dtype: torch.dtype) -> Callable[[Setup], str | None]:
    """A dtype the device lacks or only emulates is left out (device.dtype_support: bf16 on a
    GPU older than Ampere, for example). On a CPU nothing is excluded: a dtype without a fast
    kernel there is timed like any other and loses, which is the measurement a reader needs."""
    def check(setup: Setup) -> str | None:
        if setup.device.type == "mps" and dtype == torch.float16 and not devices.torch_at_least(2, 8):
            return ("fp16 needs a GradScaler, which on MPS before torch 2.8 computes in float64, "
                    "a dtype MPS lacks")
        return devices.dtype_support(setup.device, dtype)
    return check


def _autocast(dtype: torch.dtype) -> Callable[[Setup], None]:
    def apply(setup: Setup) -> None:
        setup.autocast = dtype
        setup.scaler = dtype == torch.float16  # fp16 gradients underflow without scaling
    return apply


def _fewer_threads(setup: Setup) -> str | None:
    if setup.device.type != "cpu":
        return "the thread count matters for CPU work; this trial runs on a GPU"
    if setup.threads < 2:
        return "torch already uses one thread here"
    return None


def _halve_threads(setup: Setup) -> None:
    setup.threads = max(1, setup.threads // 2)


def _foreach_check(setup: Setup) -> str | None:
    if setup.device.type in ("cuda", "xpu"):
        return (f"torch's optimizers already take the foreach implementation on "
                f"{setup.device.type} by default")
    return None


def _double_batch(setup: Setup) -> None:
    setup.batch_factor *= 2
    # the tuner's batch twice over: the same arithmetic as twice as many distinct examples
    setup.batch = tuple(torch.cat([t, t]) for t in setup.batch)  # type: ignore[assignment]


COMPILE_BUDGET_S = 30.0  # a first torch.compile of a training step can take this long on a CPU


def _compile_check(opted_in: bool, why: str = "") -> Callable[[Setup], str | None]:
    def check(setup: Setup) -> str | None:
        if not opted_in:
            return why or ("opt-in (tune(..., compile=True)): its first compile takes seconds to "
                           "tens of seconds, more than a small budget")
        return None
    return check


def _compile(setup: Setup) -> None:
    setup.compile = True


def default_knobs(compile: bool = False, compile_why: str = "") -> list[Knob]:
    """The course's knobs, in the order the tuner tries them. ``compile`` includes
    torch.compile; ``compile_why`` is the reason given where it is left out."""
    bf16, fp16 = torch.bfloat16, torch.float16
    return [
        Knob("channels_last", True, "convolutions read NHWC memory (oneDNN, cuDNN prefer it)",
             lambda s: None if _has_conv(s) else "the model has no 2-D convolution",
             _channels_last),
        Knob("autocast", "bfloat16", "matmuls and convolutions in bf16 (AMX, AVX-512 BF16, "
             "tensor cores)", _autocast_check(bf16), _autocast(bf16), group="autocast"),
        Knob("autocast", "float16", "matmuls and convolutions in fp16, loss scaled by GradScaler",
             _autocast_check(fp16), _autocast(fp16), group="autocast"),
        Knob("tf32", True, "fp32 matmuls and convolutions on tensor cores with a 10-bit mantissa "
             "(the baseline runs both in true fp32, although torch's default lets convolutions "
             "use TF32)", _tf32_check, _tf32),
        Knob("cudnn_benchmark", True, "cuDNN times its algorithms once per input shape",
             _cudnn_benchmark_check,
             lambda s: s.settings.append(_set_flag(torch.backends.cudnn, "benchmark", True))),
        Knob("threads", "half", "half the CPU threads (small work loses to thread overhead)",
             _fewer_threads, _halve_threads),
        Knob("batch_size", "double", "twice the examples per step: the per-step costs (Python, "
             "kernel launches, the optimizer) shared by more examples; fewer steps per epoch, so "
             "the learning rate may need retuning", lambda s: None, _double_batch),
        Knob("compile", True, "torch.compile fuses element-wise ops into fewer kernels",
             _compile_check(compile, compile_why), _compile),
        Knob("optimizer", "foreach", "the optimizer's multi-tensor (foreach) implementation: on a "
             "GPU a few large kernels instead of a loop over the parameters; on a CPU it only "
             "regroups the same loop", _foreach_check,
             lambda s: s.optimizer_options.update(foreach=True)),
    ]


def label(knob: Knob) -> str:
    return f"{knob.name}={knob.value}"


def lookup(config: dict[str, Any]) -> list[Knob]:
    """The knobs of a configuration ``{name: value}``; an unknown one is an error that lists
    what exists."""
    known = {(k.name, k.value): k for k in default_knobs(compile=True)}
    found = []
    for name, value in config.items():
        if (name, value) not in known:
            choices = ", ".join(sorted(label(k) for k in known.values()))
            raise ValueError(f"no knob {name}={value!r}: the knobs are {choices}")
        found.append(known[(name, value)])
    return found


def configure(model: nn.Module, config: dict[str, Any], *, threads: int,
              batch: tuple[torch.Tensor, torch.Tensor] | None = None,
              loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
              make_optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
              device: torch.device | str | None = None) -> Setup:
    """``model`` (changed in place: memory format) under ``config``, as a :class:`Setup`.

    ``device``: where it trains; by default where its parameters are. A knob that cannot apply
    there is an error that says why (a configuration tuned on one machine, used on another)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    setup = Setup(model, batch if batch is not None else (torch.empty(0), torch.empty(0)),
                  device, threads, loss_fn or nn.functional.cross_entropy,
                  make_optimizer or (lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)))
    for knob in lookup(config):
        why = knob.check(setup)
        if why is not None:
            raise ValueError(f"{label(knob)} cannot apply here: {why}. Leave it out of the "
                             f"configuration (it was tuned on another machine?)")
        knob.apply(setup)
    return setup


class Configured(nn.Module):
    """A model run as a Setup says: its input in the model's memory format, autocast around
    the forward pass, the output in fp32 for the loss."""

    def __init__(self, model: nn.Module, channels_last: bool, autocast: torch.dtype | None) -> None:
        super().__init__()
        self.model, self.channels_last, self.autocast = model, channels_last, autocast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        # no autocast at all without a dtype: a disabled one still checks its dtype on MPS
        # (torch 2.6-2.9), and warns at every step that fp32 is not an MPS autocast dtype
        region = (torch.autocast(x.device.type, dtype=self.autocast) if self.autocast is not None
                  else nullcontext())
        with region:
            return self.model(x).float()


@dataclass
class Prepared:
    """What a training loop needs to train as a Setup says."""

    model: Configured  # the parameters live here: save and load this one
    step_model: nn.Module  # call this one: the same module, compiled when asked
    optimizer: torch.optim.Optimizer
    scaler: Any  # a torch.amp.GradScaler for fp16, else None
    settings: Callable[[], Any]  # a context manager factory: threads, precision, global flags
    threads: int  # torch's intra-op threads while training
    batch_factor: int = 1  # train on batch_size(asked) examples per step
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    tf32: bool = False

    def batch_size(self, asked: int) -> int:
        """The examples per step to train with, for a run that asked for ``asked``."""
        return asked * self.batch_factor

    def describe(self) -> str:
        """One line: what this configuration changes in training."""
        parts = [f"{self.threads} threads"] if self.device.type == "cpu" else []
        if self.model.channels_last:
            parts.append("channels_last weights and inputs")
        if self.model.autocast is not None:
            parts.append(f"autocast {str(self.model.autocast).replace('torch.', '')}")
        if self.scaler is not None:
            parts.append("GradScaler")
        if self.device.type == "cuda":
            parts.append("TF32 matmuls and convolutions" if self.tf32
                         else "fp32 matmuls and convolutions in full precision (TF32 off)")
        if self.batch_factor != 1:
            parts.append(f"{self.batch_factor}x the batch")
        if self.step_model is not self.model:
            parts.append("torch.compile")
        options = {k: v for g in self.optimizer.param_groups for k, v in g.items()
                   if k in ("foreach", "fused") and v}
        if options:
            parts.append("optimizer " + ", ".join(f"{k}=True" for k in options))
        return ", ".join(parts) or "as torch does by default"


def prepare(setup: Setup) -> Prepared:
    """The module, optimizer, GradScaler and settings that train as ``setup`` says."""
    model = Configured(setup.model, setup.channels_last, setup.autocast)
    step_model = torch.compile(model) if setup.compile else model
    optimizer = setup.make_optimizer(model.parameters())
    for group in optimizer.param_groups:  # the optimizer knob: its implementation
        group.update(setup.optimizer_options)
    scaler = torch.amp.GradScaler(setup.device.type) if setup.scaler else None
    return Prepared(model, step_model, optimizer, scaler, settings(setup), setup.threads,
                    setup.batch_factor, setup.device, setup.tf32)


def settings(setup: Setup) -> Callable[[], Any]:
    """A context manager factory: the setup's thread count, precision and global flags,
    restored after.

    On CUDA every setting a knob could change is set either way, so that a configuration
    without the knob is what its name says: fp32 in true fp32 unless the tf32 knob is on
    (torch's default would run convolutions in TF32), cudnn.benchmark off unless a setting turns it on.
    """
    @contextmanager
    def active() -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(using_threads(setup.threads)())
            if setup.device.type == "cuda":
                stack.enter_context(devices.fp32_precision("tf32" if setup.tf32 else "ieee"))
                stack.enter_context(_set_flag(torch.backends.cudnn, "benchmark", False)())
            for setting in setup.settings:
                stack.enter_context(setting())
            yield
    return active
