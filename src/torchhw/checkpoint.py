"""Checkpoints that survive a crash and resume a run exactly.

:func:`save` writes to a temporary file in the same folder and renames it over the target,
so a crash mid-write leaves the previous checkpoint intact: a reader never sees half a file.
A checkpoint holds everything a run's future depends on: model, optimizer and scheduler
state, the step, and every random generator's state (torch on CPU and GPUs, NumPy, Python,
and the data loader's shuffling generator). :func:`load` always uses ``weights_only=True``,
which unpickles tensors and plain containers only, never arbitrary code.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


class CheckpointError(RuntimeError):
    """A checkpoint is missing or unreadable. Nothing was changed on disk."""


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def _xpu_available() -> bool:
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def move(obj: Any, device: str | torch.device) -> Any:
    """``obj`` with every tensor inside (dicts, lists, tuples) moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: move(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(move(v, device) for v in obj)
    return obj


def rng_state(loader_generator: torch.Generator | None = None) -> dict[str, Any]:
    """Every random generator's state, as tensors and plain values (weights_only-safe)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, py_state, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                  "has_gauss": has_gauss, "gauss": gauss},
        "python": {"version": version, "state": list(py_state), "gauss": py_gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]  # one per GPU
    if _xpu_available() and torch.xpu.is_initialized():
        state["xpu"] = [s.cpu() for s in torch.xpu.get_rng_state_all()]  # one per Intel GPU
    if _mps_available():
        state["mps"] = torch.mps.get_rng_state().cpu()
    if loader_generator is not None:
        state["loader"] = loader_generator.get_state()
    return state


def set_rng_state(state: dict[str, Any], loader_generator: torch.Generator | None = None) -> None:
    """Restore what :func:`rng_state` captured.

    Every state is moved to the CPU first: the setters accept only a CPU ByteTensor. A CUDA,
    XPU or MPS state is restored where that device exists (for as many GPUs as are present now)
    and ignored elsewhere, so a checkpoint from a GPU machine still resumes on a CPU.
    """
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        for index, cuda_state in enumerate(state["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.cpu(), index)
    if "xpu" in state and _xpu_available():
        for index, xpu_state in enumerate(state["xpu"][:torch.xpu.device_count()]):
            torch.xpu.set_rng_state(xpu_state.cpu(), index)
    if "mps" in state and _mps_available():
        torch.mps.set_rng_state(state["mps"].cpu())
    if loader_generator is not None and "loader" in state:
        loader_generator.set_state(state["loader"].cpu())


def _check_fits(path: Path, current: dict[str, Any], stored: dict[str, Any]) -> None:
    """Refuse a checkpoint of another architecture before any weight is overwritten."""
    missing, unexpected = sorted(set(current) - set(stored)), sorted(set(stored) - set(current))
    wrong = [k for k in set(current) & set(stored)
             if getattr(current[k], "shape", None) != getattr(stored[k], "shape", None)]
    if missing or unexpected or wrong:
        raise CheckpointError(
            f"checkpoint {path} was saved from a different model: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}, shape differs for {sorted(wrong)[:3]}. Build the model "
            f"with the same sizes as the run that saved it. The model was not changed."
        )


def state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
          scheduler: Any = None, step: int = 0, rng: dict[str, Any] | None = None,
          copy: bool = False, **extra: Any) -> dict[str, Any]:
    """What :func:`save` writes, as a dictionary.

    ``copy=True`` makes it a snapshot on the CPU: every tensor is copied, so training can go on
    changing the weights while another thread writes the snapshot (:func:`write`). Without it
    the dictionary holds the live tensors, as ``state_dict()`` does.
    """
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "step": step,
        "rng": rng if rng is not None else rng_state(),
        "extra": extra,
    }
    return _copied(payload) if copy else payload


def _copied(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _copied(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copied(v) for v in obj)
    return obj


def write(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` (from :func:`state`) atomically: a temporary file, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save(path: str | os.PathLike[str], model: torch.nn.Module,
         optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None, step: int = 0,
         rng: dict[str, Any] | None = None, **extra: Any) -> Path:
    """Write a checkpoint atomically (temporary file, then rename). Returns the path.

    ``rng`` defaults to the generators' state now; pass :func:`rng_state` taken earlier
    when the checkpoint must describe an earlier moment. ``extra`` values must be tensors
    or plain Python values, so that loading with weights_only=True can read them.
    """
    return write(path, state(model, optimizer, scheduler, step, rng, **extra))


def load(path: str | os.PathLike[str], model: torch.nn.Module,
         optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None,
         map_location: str | torch.device | None = "cpu", restore_rng: bool = True,
         loader_generator: torch.Generator | None = None, mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint into ``model`` (and optimizer, scheduler, generators). Returns it.

    ``map_location`` says where the model's tensors go (the model's device, or ``"meta"`` to
    check a checkpoint without memory); ``optimizer.load_state_dict`` puts the optimizer's state
    where its parameters are, as torch's optimizers want it; everything else, the generator states and
    the loader's shuffling state above all, stays on the CPU, where their setters need it.

    ``mmap=True`` maps the file instead of reading it whole (privately: nothing is ever
    written back): its pages are read as the model and the optimizer take their tensors, and
    processes on one machine that load the same file share those pages in the page cache
    instead of each holding a copy of the whole file.

    Raises CheckpointError, naming the file and what to do, when it is missing or cannot
    be read; in that case nothing has been changed, neither the model nor the file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"no checkpoint at {path}: nothing to resume from. Train from scratch (resume=False) "
            f"or point to an existing file."
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        needed = {"model", "optimizer", "scheduler", "step", "rng"}
        if not isinstance(payload, dict) or not needed <= set(payload):
            raise ValueError(f"it lacks {sorted(needed - set(payload or {}))}")
    except Exception as err:
        reason = str(err).split(". ")[0].strip().rstrip(".")
        raise CheckpointError(
            f"checkpoint {path} could not be read ({type(err).__name__}: {reason}). It was left as "
            f"it is; delete it to start over, or resume from an older copy."
        ) from None
    if map_location is not None and torch.device(map_location) != torch.device("cpu"):
        # the weights only: optimizer.load_state_dict puts each state tensor where its parameter
        # is, except Adam's `step`, which stays on the CPU (unless capturable or fused): moved to
        # a GPU, reading it would wait for the GPU at every parameter of every step
        payload["model"] = move(payload["model"], map_location)
    if optimizer is not None and payload["optimizer"] is None:
        raise CheckpointError(f"checkpoint {path} holds no optimizer state, but one was passed")
    _check_fits(path, model.state_dict(), payload["model"])
    model.load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
    if scheduler is not None and payload["scheduler"] is not None:
        scheduler.load_state_dict(payload["scheduler"])
    if restore_rng:
        set_rng_state(payload["rng"], loader_generator)
    return payload
