"""The tuning knobs: what each one changes in a training step, and when it cannot apply.

A :class:`Knob` has a name, a check that says why it cannot apply on this machine (or None),
and an ``apply`` that changes one trial's :class:`Setup`: the model's memory format, an
autocast dtype, a GradScaler, a global flag (restored after the trial), the thread count or
``torch.compile``. :func:`default_knobs` is the list :func:`torchhw.tune.tune` tries, in the
order it tries them. Notebook 09 measures each of them by hand first.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn


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
    return any(isinstance(m, (nn.Conv2d, nn.Conv3d)) for m in setup.model.modules())


def _cuda_only(what: str) -> Callable[[Setup], str | None]:
    def check(setup: Setup) -> str | None:
        if setup.device.type != "cuda":
            return f"{what} needs a CUDA GPU; this trial runs on {setup.device.type}"
        return None
    return check


def _channels_last(setup: Setup) -> None:
    setup.model = setup.model.to(memory_format=torch.channels_last)
    x, y = setup.batch
    setup.batch = (x.contiguous(memory_format=torch.channels_last), y)


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
    setup.settings.append(_set_flag(torch.backends.cuda.matmul, "allow_tf32", True))
    setup.settings.append(_set_flag(torch.backends.cudnn, "allow_tf32", True))


def _tf32_check(setup: Setup) -> str | None:
    if setup.device.type != "cuda":
        return f"TF32 is a tensor-core format of NVIDIA GPUs; this trial runs on {setup.device.type}"
    major, _ = torch.cuda.get_device_capability(setup.device)
    if major < 8:
        return f"TF32 needs compute capability 8.0 (Ampere) or later; this GPU has {major}.x"
    return None


def _autocast_check(dtype: torch.dtype) -> Callable[[Setup], str | None]:
    def check(setup: Setup) -> str | None:
        if setup.device.type == "cpu" and dtype == torch.float16:
            return "fp16 with GradScaler is a GPU technique; CPUs compute fp16 through slow paths"
        if setup.device.type == "mps" and dtype == torch.bfloat16:
            return "bf16 autocast on MPS is not supported by every Apple GPU"
        if setup.device.type == "cuda" and dtype == torch.bfloat16 \
                and not torch.cuda.is_bf16_supported():
            return "this GPU has no bf16 support (needs compute capability 8.0 or later)"
        return None
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


def _compile_check(opted_in: bool) -> Callable[[Setup], str | None]:
    def check(setup: Setup) -> str | None:
        if not opted_in:
            return ("opt-in (tune(..., compile=True)): its first compile takes seconds to "
                    "tens of seconds, more than a small budget")
        return None
    return check


def _compile(setup: Setup) -> None:
    setup.compile = True


def default_knobs(compile: bool = False) -> list[Knob]:
    """The course's knobs, in the order the tuner tries them."""
    bf16, fp16 = torch.bfloat16, torch.float16
    return [
        Knob("channels_last", True, "convolutions read NHWC memory (oneDNN, cuDNN prefer it)",
             lambda s: None if _has_conv(s) else "the model has no convolution",
             _channels_last),
        Knob("autocast", "bfloat16", "matmuls and convolutions in bf16 (AMX, AVX-512 BF16, "
             "tensor cores)", _autocast_check(bf16), _autocast(bf16), group="autocast"),
        Knob("autocast", "float16", "matmuls and convolutions in fp16, loss scaled by GradScaler",
             _autocast_check(fp16), _autocast(fp16), group="autocast"),
        Knob("tf32", True, "fp32 matmuls on tensor cores with a 10-bit mantissa", _tf32_check,
             _tf32),
        Knob("cudnn_benchmark", True, "cuDNN times its algorithms once per input shape",
             _cuda_only("cudnn.benchmark"),
             lambda s: s.settings.append(_set_flag(torch.backends.cudnn, "benchmark", True))),
        Knob("threads", "half", "half the CPU threads (small work loses to thread overhead)",
             _fewer_threads, _halve_threads),
        Knob("compile", True, "torch.compile fuses element-wise ops into fewer kernels",
             _compile_check(compile), _compile),
    ]


def label(knob: Knob) -> str:
    return f"{knob.name}={knob.value}"
