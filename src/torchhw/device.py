"""The device a notebook runs on, and what the course asks of it, for every kind of machine.

``pick_device("auto")`` takes the machine's accelerator (CUDA, which is also how torch presents
ROCm; Apple's MPS; Intel's XPU), else the CPU. A device asked for by name is never swapped for
another one behind the reader's back: if it is missing, :class:`DeviceUnavailable` says what was
asked, what exists, and what to pass instead.

The rest is device-generic, through ``torch.accelerator`` where this torch has it (2.6 and
later) and per device type where it does not: waiting for queued work (:func:`synchronize`),
timing on the device's own clock (:func:`time_on_device`, with ``torch.Event``), the memory
counters (torch.cuda's, torch.xpu's, torch.mps's), the process-group backend each device type takes
(:func:`backend_for`), which dtypes have fast arithmetic here rather than emulation
(:func:`dtype_support`), and TF32 (:func:`tf32_support`, :func:`fp32_precision`). Every course
decision about a device goes through these, so the tests can present torch as a Colab T4, an
H100 node or a Mac and check what the course decides there (tests/test_accelerators.py).
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch


class DeviceUnavailable(RuntimeError):
    """The device that was asked for does not exist on this machine."""


ACCELERATORS = ("cuda", "mps", "xpu")
CUBLAS_DETERMINISTIC = ":4096:8"  # the CUBLAS_WORKSPACE_CONFIG cuBLAS needs to be deterministic


def cuda_count() -> int:
    """Number of CUDA (or ROCm) GPUs torch can use; 0 on CPU-only builds."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    """True on an Apple-silicon Mac with a torch built for MPS."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def xpu_count() -> int:
    """Number of Intel GPUs (XPU) torch can use; 0 where this torch has no XPU support."""
    xpu = getattr(torch, "xpu", None)
    return xpu.device_count() if xpu is not None and xpu.is_available() else 0


def count(kind: str) -> int:
    """How many devices of type ``kind`` ('cpu', 'cuda', 'mps', 'xpu') this machine has."""
    return {"cpu": 1, "cuda": cuda_count(), "mps": int(mps_available()),
            "xpu": xpu_count()}.get(kind, 0)


def accelerator() -> str | None:
    """The type of this machine's accelerator ('cuda', 'mps', 'xpu'), or None.

    ``torch.accelerator.current_accelerator()`` where it exists (torch 2.6 and later; it raises
    on a machine without one in 2.6, so ask ``is_available`` first), else probed type by type.
    """
    api = getattr(torch, "accelerator", None)
    if api is not None and hasattr(api, "current_accelerator"):
        return api.current_accelerator().type if api.is_available() else None
    for kind in ACCELERATORS:
        if count(kind):
            return kind
    return None


def available_devices() -> list[str]:
    """Every device string this machine accepts, best first: cuda:0.., xpu:0.., mps, cpu."""
    found = [f"cuda:{i}" for i in range(cuda_count())]
    found += [f"xpu:{i}" for i in range(xpu_count())]
    if mps_available():
        found.append("mps")
    return found + ["cpu"]


def _missing(asked: str, why: str) -> DeviceUnavailable:
    found = ", ".join(available_devices())
    return DeviceUnavailable(
        f"device {asked!r} was asked for, but {why} (found: {found}). "
        f"Use device='auto' to take the best one here, or one of: {found}."
    )


_WHY_MISSING = {
    "cuda": lambda: ("this torch is a CPU-only build" if torch.version.cuda is None
                     and getattr(torch.version, "hip", None) is None else "no CUDA GPU is visible"),
    "xpu": lambda: "XPU needs an Intel GPU with a torch built for it",
    "mps": lambda: "MPS needs an Apple-silicon Mac with a torch built for it",
}


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """Resolve ``device`` ('auto', 'cpu', 'cuda', 'cuda:1', 'mps', 'xpu') to a torch.device.

    Raises DeviceUnavailable when a named device is absent, and ValueError for a string
    that names no device type at all.
    """
    name = str(device).strip().lower()
    if name == "auto":
        kind = accelerator()
        if kind is None:
            return torch.device("cpu")
        return torch.device(kind) if kind == "mps" else torch.device(kind, 0)
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"device {str(device)!r} is not a device name. "
            f"Use 'auto', 'cpu', 'cuda', 'cuda:N', 'mps' or 'xpu'."
        ) from None
    if dev.type == "cpu":
        return dev
    if dev.type not in ACCELERATORS:
        raise _missing(name, f"the course does not support {dev.type!r} devices")
    n = count(dev.type)
    if n == 0:
        raise _missing(name, _WHY_MISSING[dev.type]())
    if dev.type == "mps":
        return dev
    index = 0 if dev.index is None else dev.index
    if index >= n:
        raise _missing(name, f"this machine has only {n} {dev.type.upper()} GPU(s)")
    return torch.device(dev.type, index)


def describe(device: torch.device) -> str:
    """A one-line name for a device, e.g. 'cuda:0 (NVIDIA H100, 80 GiB, sm 9.0)' or 'cpu'."""
    device = torch.device(device)
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        arch = (f"sm {p.major}.{p.minor}" if getattr(torch.version, "hip", None) is None
                else getattr(p, "gcnArchName", "ROCm"))
        return f"{device} ({p.name}, {p.total_memory / 2**30:.0f} GiB, {arch})"
    if device.type == "xpu":
        return f"{device} ({torch.xpu.get_device_name(device)})"
    return str(device)


def _module(kind: str) -> Any:
    return {"cuda": torch.cuda, "mps": getattr(torch, "mps", None),
            "xpu": getattr(torch, "xpu", None)}.get(kind)


def synchronize(device: torch.device | str) -> None:
    """Wait for queued work on ``device``; GPU kernels run asynchronously, CPU ones do not."""
    device = torch.device(device)
    if device.type not in ACCELERATORS:
        return
    if device.type == "mps":   # torch.mps's own, which every torch since the floor has
        torch.mps.synchronize()
        return
    api = getattr(torch, "accelerator", None)
    if api is not None and hasattr(api, "synchronize") and accelerator() == device.type:
        api.synchronize(device)
    else:
        _module(device.type).synchronize(device)


def time_on_device(fn: Callable[[], Any], device: torch.device | str) -> float:
    """Seconds ``fn``'s work took, by the device's own clock where it has one.

    On an accelerator, two ``torch.Event``s recorded on the device's current stream around
    ``fn``: the span ends when the device has *finished* the work queued on that stream, not
    when the host had queued it (the host returns from a kernel launch long before). Work on
    other streams (an NCCL collective started with ``async_op=True``) is not in it unless ``fn``
    waits for it. On a CPU the
    work is done when ``fn`` returns, and the host clock measures it.
    """
    device = torch.device(device)
    if device.type in ("cuda", "xpu") and hasattr(torch, "Event"):
        start = torch.Event(device=device, enable_timing=True)
        end = torch.Event(device=device, enable_timing=True)
        stream = _module(device.type).current_stream(device)   # this device's, not the current one's
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # milliseconds
    begin = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - begin


def memory_allocated(device: torch.device | str) -> int | None:
    """Bytes held by tensors on ``device`` now; None where there is no counter (the CPU)."""
    device = torch.device(device)
    if device.type not in ACCELERATORS:
        return None
    synchronize(device)
    if device.type == "mps":
        return torch.mps.current_allocated_memory()
    return _module(device.type).memory_allocated(device)


def max_memory_allocated(device: torch.device | str) -> int | None:
    """The peak of :func:`memory_allocated` since the last :func:`reset_peak_memory`; None where
    the device keeps no peak (the CPU; MPS, whose torch counts only the current figure)."""
    device = torch.device(device)
    if device.type not in ("cuda", "xpu"):
        return None
    synchronize(device)
    return _module(device.type).max_memory_allocated(device)


def reset_peak_memory(device: torch.device | str) -> None:
    """Start a new peak for :func:`max_memory_allocated` (no effect where there is none)."""
    device = torch.device(device)
    if device.type in ("cuda", "xpu"):
        _module(device.type).reset_peak_memory_stats(device)


_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl"}


def backend_for(device: torch.device | str) -> str:
    """The process-group backend for ranks on ``device``'s type: NCCL on CUDA (RCCL on ROCm,
    which torch also calls nccl), XCCL on Intel GPUs, gloo on the CPU.

    torch.distributed.get_default_backend_for_device where this torch has it, else the same
    table. MPS has no collective backend: ranks there run on the CPU with gloo
    (:func:`torchhw.distributed.plan` says so).
    """
    kind = torch.device(device).type
    if kind == "mps":
        return "gloo"
    import torch.distributed as dist

    ask = getattr(dist, "get_default_backend_for_device", None)
    if ask is not None:
        try:
            return ask(kind)
        except (RuntimeError, ValueError):
            pass
    return _BACKENDS.get(kind, "gloo")


def torch_at_least(major: int, minor: int) -> bool:
    """Whether this torch is version ``major.minor`` or later (a feature's floor)."""
    found = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return found is not None and (int(found[1]), int(found[2])) >= (major, minor)


def use(device: torch.device | str) -> None:
    """Make ``device`` the current one of its kind (cuda:1, xpu:1), so that what defaults to
    the current device (streams, events, ``torch.accelerator.synchronize()``) means it."""
    device = torch.device(device)
    if device.type in ("cuda", "xpu") and device.index is not None:
        _module(device.type).set_device(device)


def capability(device: torch.device | str) -> tuple[int, int] | None:
    """A CUDA GPU's compute capability (8, 0); None for other devices and for ROCm."""
    device = torch.device(device)
    if device.type != "cuda" or getattr(torch.version, "hip", None) is not None:
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def dtype_support(device: torch.device | str, dtype: torch.dtype) -> str | None:
    """None when ``device`` computes in ``dtype`` natively, else why not (absent or emulated).

    This asks the device what it *is*, never what it merely accepts: torch runs bf16 on a CUDA
    GPU older than Ampere by emulation (torch.cuda's ``is_bf16_supported`` says True there unless
    asked with ``including_emulation=False``), which is slower than fp32. On a CPU whether a dtype is
    fast is measured, not looked up (:func:`torchhw.bench.has_fast_kernel`).
    """
    device = torch.device(device)
    kind = device.type
    if kind == "mps":
        if dtype == torch.float64:
            return "MPS has no float64"
        if dtype == torch.bfloat16 and not torch.backends.mps.is_macos_or_newer(14, 0):
            return "bf16 on MPS needs macOS 14 or later"
        return None
    if kind == "cuda":
        cap = capability(device)   # of this device, not of whichever is current
        native = (cap >= (8, 0) if cap is not None   # ROCm: torch's answer, emulation not counted
                  else torch.cuda.is_bf16_supported(including_emulation=False))
        if dtype == torch.bfloat16 and not native:
            has = f"sm {cap[0]}.{cap[1]}" if cap else "this GPU"
            return f"bf16 needs compute capability 8.0 (Ampere) or later; {has} only emulates it"
        return None   # fp16 and fp64 are real kernels on every CUDA GPU, fast or slow
    if kind == "xpu":
        if dtype == torch.bfloat16:
            # torch.xpu's is_bf16_supported counts emulation too, unless told not to: ask the
            # device's properties, which every torch with XPU support has
            native = bool(getattr(torch.xpu.get_device_properties(device),
                                  "has_bfloat16_conversions", False))
            if not native:
                return "this Intel GPU has no native bf16 arithmetic"
        if dtype == torch.float64 and not torch.xpu.get_device_properties(device).has_fp64:
            return "this Intel GPU has no float64"
        return None
    return None


def tf32_support(device: torch.device | str) -> str | None:
    """None when ``device`` has TF32 tensor cores (NVIDIA, compute capability 8.0 or later),
    else why not."""
    device = torch.device(device)
    if device.type != "cuda" or getattr(torch.version, "hip", None) is not None:
        return f"TF32 is a tensor-core format of NVIDIA GPUs; this is {device.type}" + (
            " (ROCm)" if device.type == "cuda" else "")
    major, minor = capability(device)  # type: ignore[misc]
    if major < 8:
        return f"TF32 needs compute capability 8.0 (Ampere) or later; this GPU is sm {major}.{minor}"
    return None


def _precision_flags() -> list[tuple[Any, str, dict[str, Any]]]:
    """The settings that say whether fp32 matmuls and convolutions on CUDA may use TF32.

    The booleans ``allow_tf32`` on ``torch.backends.cuda.matmul`` and ``torch.backends.cudnn``,
    which every torch since the floor has. torch 2.9 added ``fp32_precision`` strings for the
    same settings and keeps the two in step when the booleans are set; but once the strings
    are set directly, reading the booleans raises ("a mix of the legacy and new APIs"), and
    torch.compile's Inductor still reads them. So the course sets only the booleans.
    """
    values = {"tf32": True, "ieee": False}
    return [(torch.backends.cuda.matmul, "allow_tf32", values),
            (torch.backends.cudnn, "allow_tf32", values)]


def tf32_enabled() -> dict[str, bool]:
    """Whether fp32 matrix products and convolutions may run in TF32 now (CUDA's settings)."""
    (m, mn, mv), (c, cn, cv) = _precision_flags()
    return {"matmul": getattr(m, mn) == mv["tf32"], "conv": getattr(c, cn) == cv["tf32"]}


def set_fp32_precision(mode: str) -> None:
    """fp32 matrix products and convolutions on CUDA in ``mode`` from now on: 'ieee' (true
    fp32) or 'tf32' (see :func:`fp32_precision`, which restores the old setting afterwards)."""
    if mode not in ("ieee", "tf32"):
        raise ValueError(f"fp32 precision {mode!r}: use 'ieee' (true fp32) or 'tf32'")
    for obj, name, values in _precision_flags():
        setattr(obj, name, values[mode])


@contextmanager
def fp32_precision(mode: str) -> Iterator[None]:
    """fp32 matrix products and convolutions on CUDA in ``mode``: 'ieee' (true fp32) or 'tf32'.

    torch's defaults differ between the two: convolutions may use TF32 by default
    (``torch.backends.cudnn.allow_tf32`` is True), matrix products may not. So an "fp32"
    convolution on an Ampere or later GPU is a TF32 one unless this says otherwise. Restored
    afterwards. It changes nothing on other devices.
    """
    flags = _precision_flags()
    saved = [getattr(obj, name) for obj, name, _ in flags]
    try:
        set_fp32_precision(mode)
        yield
    finally:
        for (obj, name, _), old in zip(flags, saved):
            setattr(obj, name, old)
