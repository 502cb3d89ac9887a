"""Choosing the device a notebook runs on, and saying clearly when it is not there.

``pick_device("auto")`` takes CUDA, then Apple's MPS, then the CPU. A device asked for by
name is never swapped for another one behind the reader's back: if it is missing,
:class:`DeviceUnavailable` says what was asked, what exists, and what to pass instead.
"""

from __future__ import annotations

import torch


class DeviceUnavailable(RuntimeError):
    """The device that was asked for does not exist on this machine."""


def cuda_count() -> int:
    """Number of CUDA (or ROCm) GPUs torch can use; 0 on CPU-only builds."""
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    """True on an Apple-silicon Mac with a torch built for MPS."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def available_devices() -> list[str]:
    """Every device string this machine accepts, best first: cuda:0.., mps, cpu."""
    found = [f"cuda:{i}" for i in range(cuda_count())]
    if mps_available():
        found.append("mps")
    return found + ["cpu"]


def _missing(asked: str, why: str) -> DeviceUnavailable:
    found = ", ".join(available_devices())
    return DeviceUnavailable(
        f"device {asked!r} was asked for, but {why} (found: {found}). "
        f"Use device='auto' to take the best one here, or one of: {found}."
    )


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """Resolve ``device`` ('auto', 'cpu', 'cuda', 'cuda:1', 'mps') to a torch.device.

    Raises DeviceUnavailable when a named device is absent, and ValueError for a string
    that names no device type at all.
    """
    name = str(device).strip().lower()
    if name == "auto":
        if cuda_count():
            return torch.device("cuda:0")
        if mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"device {str(device)!r} is not a device name. "
            f"Use 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'."
        ) from None
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        n = cuda_count()
        if n == 0:
            why = ("this torch is a CPU-only build" if torch.version.cuda is None
                   else "no CUDA GPU is visible")
            raise _missing(name, why)
        index = 0 if dev.index is None else dev.index
        if index >= n:
            raise _missing(name, f"this machine has only {n} CUDA GPU(s)")
        return torch.device("cuda", index)
    if dev.type == "mps":
        if not mps_available():
            raise _missing(name, "MPS needs an Apple-silicon Mac with a torch built for it")
        return dev
    raise _missing(name, f"the course does not support {dev.type!r} devices")


def describe(device: torch.device) -> str:
    """A one-line name for a device, e.g. 'cuda:0 (NVIDIA H100, 80 GB)' or 'cpu'."""
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return f"{device} ({p.name}, {p.total_memory / 2**30:.0f} GiB)"
    return str(device)


def synchronize(device: torch.device | str) -> None:
    """Wait for queued work on ``device``; GPU kernels run asynchronously, CPU ones do not."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
