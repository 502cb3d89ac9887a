"""The course's training loop: train, evaluate, fit, with checkpoints and exact resume.

Notebook 04 (optim) writes this loop out line by line first; later notebooks import it.
It is device-agnostic but never moves a model behind your back: the model must already be
on ``device`` (the data is moved batch by batch), otherwise it says so.

    history = fit(model, optimizer, train_loader, val_loader, epochs=5,
                  checkpoint="runs/ckpt.pt", checkpoint_every=50)
    # ...interrupted? The same call with resume=True continues exactly where it stopped.

"Exactly" means: the same parameters and the same loss at every step as a run that was never
interrupted, on the same machine and thread count. It holds because the checkpoint stores
the step, the optimizer and scheduler, every random generator, and the shuffling generator's
state at the start of the interrupted epoch (the batches already done are drawn again and
skipped).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler

from . import checkpoint as ckpt
from .device import CUBLAS_DETERMINISTIC

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]



@contextmanager
def deterministic(device: torch.device | str) -> Iterator[None]:
    """Kernels that give the same bits every run, for a run that must resume exactly.

    A CPU's kernels already do, for a fixed thread count. A GPU's do not all: cuDNN may pick a
    convolution algorithm that sums with atomics, cuBLAS splits work by its workspace, and
    cudnn.benchmark may pick another algorithm in another run. Inside this block
    ``torch.use_deterministic_algorithms(True)`` (an op with no deterministic version raises,
    saying which), ``cudnn.deterministic`` on and ``cudnn.benchmark`` off; everything is
    restored after. cuBLAS also needs ``CUBLAS_WORKSPACE_CONFIG`` set before its first call in
    the process: :func:`torchhw.notebook.setup` sets it on a CUDA machine, and this sets it
    when it is missing.
    """
    device = torch.device(device)
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
    cudnn = torch.backends.cudnn
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(), cudnn.deterministic,
             cudnn.benchmark)
    torch.use_deterministic_algorithms(True)
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        cudnn.deterministic, cudnn.benchmark = saved[2], saved[3]


class DeviceMismatch(RuntimeError):
    """The model is not on the device the loop was asked to use."""


@dataclass
class History:
    """What a run did: the loss of every step, and one record per finished epoch."""

    losses: list[float] = field(default_factory=list)  # the training loss of every step
    grad_norms: list[float] = field(default_factory=list)  # before clipping, one per step
    epochs: list[dict[str, float]] = field(default_factory=list)
    stopped_early: bool = False

    def column(self, key: str) -> list[float]:
        """One value per epoch: 'train_loss', 'val_loss', 'val_acc', 'lr', 'grad_norm'."""
        return [e[key] for e in self.epochs]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "History":
        return cls(list(data["losses"]), list(data["grad_norms"]),
                   [dict(e) for e in data["epochs"]], bool(data.get("stopped_early", False)))


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


def train_step(model: nn.Module, batch: tuple[torch.Tensor, ...], loss_fn: LossFn,
               optimizer: torch.optim.Optimizer, device: torch.device,
               clip_grad_norm: float | None = None, scaler: Any = None) -> tuple[float, float]:
    """One optimisation step on one batch. Returns (loss, gradient norm before clipping).

    ``scaler`` (a ``torch.amp.GradScaler``, for fp16) scales the loss before backward and
    unscales the gradients before their norm is taken, so clipping sees true gradients.
    """
    x, y = (t.to(device, non_blocking=True) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    if clip_grad_norm is not None:
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    else:
        norm = torch.linalg.vector_norm(torch.stack(
            [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]))
    if scaler is not None:
        scaler.step(optimizer)  # skipped when a gradient is inf or nan; the scale then shrinks
        scaler.update()
    else:
        optimizer.step()
    return loss.item(), norm.item()


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, loss_fn: LossFn,
             device: torch.device | None = None) -> tuple[float, float]:
    """Mean loss and accuracy over ``loader`` in eval mode (accuracy: argmax == label)."""
    device = device or model_device(model)
    was_training = model.training
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = model(x)
        total_loss += loss_fn(out, y).item() * len(y)
        if out.ndim == 2 and y.ndim == 1:
            correct += (out.argmax(1) == y).sum().item()
        count += len(y)
    model.train(was_training)
    return total_loss / count, correct / count if count else float("nan")


def _loader_generator(loader: DataLoader) -> torch.Generator | None:
    sampler = loader.sampler
    if isinstance(sampler, RandomSampler):
        return sampler.generator or loader.generator
    return None


class _Clock:
    """``with clock("step"):`` adds the block's seconds to ``timings["step"]`` (if any)."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings, self.part, self.start = timings, "", 0.0

    def __call__(self, part: str) -> "_Clock":
        self.part = part
        return self

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        if self.timings is not None:
            self.timings[self.part] = self.timings.get(self.part, 0.0) + time.perf_counter() - self.start


def fit(model: nn.Module, optimizer: torch.optim.Optimizer, train_loader: DataLoader,
        val_loader: DataLoader | None = None, *, epochs: int, loss_fn: LossFn | None = None,
        device: torch.device | str | None = None, scheduler: Any = None,
        scheduler_every: str = "epoch", clip_grad_norm: float | None = None,
        checkpoint: str | os.PathLike[str] | None = None, checkpoint_every: int = 0,
        resume: bool = False, stop_at_step: int | None = None, verbose: bool = False,
        scaler: Any = None, timings: dict[str, float] | None = None) -> History:
    """Train for ``epochs``; return the :class:`History`.

    - ``scheduler_every``: 'epoch' or 'step', when ``scheduler.step()`` is called.
    - ``checkpoint``: a path; written every ``checkpoint_every`` steps (0: at epoch ends
      only) and when stopping. ``resume=True`` continues from it, and raises CheckpointError
      if it is missing or unreadable, rather than silently starting over.
    - ``stop_at_step``: stop after that global step (to simulate an interruption).
    - ``scaler``: a ``torch.amp.GradScaler`` for fp16 training; its state is checkpointed
      with the rest, so a resumed run scales exactly as the uninterrupted one.
    - ``timings``: a dict to which the seconds spent in each part of the run are added, under
      ``data`` (the loader making batches), ``step`` (:func:`train_step`: forward, backward,
      optimizer), ``validation`` and ``checkpoint`` (writing the file). A step ends with the
      loss's ``.item()``, which waits for the device, so each part holds its own work.
    """
    clock = _Clock(timings)
    loss_fn = loss_fn or nn.functional.cross_entropy
    device = torch.device(device) if device is not None else model_device(model)
    here = model_device(model)
    if here.type != device.type or (device.index is not None and here != device):
        raise DeviceMismatch(
            f"the model is on {here} but training was asked to run on {device}: call "
            f"model.to({str(device)!r}) before creating the optimizer, then fit again."
        )
    if scheduler_every not in ("epoch", "step"):
        raise ValueError(f"scheduler_every must be 'epoch' or 'step', got {scheduler_every!r}")
    gen = _loader_generator(train_loader)
    if checkpoint is not None and isinstance(train_loader.sampler, RandomSampler) and gen is None:
        raise ValueError("exact resume needs a shuffling DataLoader with its own generator: "
                         "DataLoader(..., shuffle=True, generator=torch.Generator().manual_seed(seed))")
    per_epoch = len(train_loader)
    history, step, epoch_start_state = History(), 0, None
    if resume:
        if checkpoint is None:
            raise ValueError("resume=True needs the checkpoint path to resume from")
        payload = ckpt.load(checkpoint, model, optimizer, scheduler, map_location=device)
        step = int(payload["step"])
        history = History.from_dict(payload["extra"]["history"])
        history.stopped_early = False
        epoch_start_state = payload["extra"].get("loader_epoch_start")
        if scaler is not None and "scaler" in payload["extra"]:
            scaler.load_state_dict(payload["extra"]["scaler"])

    def save() -> None:
        if checkpoint is not None:
            extra = {"history": history.to_dict()}
            if epoch_start_state is not None:
                extra["loader_epoch_start"] = epoch_start_state
            if scaler is not None:
                extra["scaler"] = scaler.state_dict()
            with clock("checkpoint"):
                ckpt.save(checkpoint, model, optimizer, scheduler, step, **extra)

    model.train()
    for epoch in range(step // per_epoch, epochs):
        skip = step - epoch * per_epoch  # batches of this epoch done before an interruption
        if gen is not None:
            if epoch_start_state is not None:  # resuming: replay this epoch's shuffle
                gen.set_state(epoch_start_state)
            epoch_start_state = gen.get_state()
        stop = False
        batches = iter(train_loader)
        for i in range(per_epoch):
            with clock("data"):
                batch = next(batches)
            if i < skip:
                continue
            with clock("step"):
                loss, norm = train_step(model, batch, loss_fn, optimizer, device, clip_grad_norm,
                                        scaler)
            step += 1
            history.losses.append(loss)
            history.grad_norms.append(norm)
            if scheduler is not None and scheduler_every == "step":
                scheduler.step()
            if checkpoint_every and step % checkpoint_every == 0:
                save()
            stop = stop_at_step is not None and step >= stop_at_step
            if stop and i < per_epoch - 1:  # at an epoch's last batch, finish the epoch first
                history.stopped_early = True
                save()
                return history
        if scheduler is not None and scheduler_every == "epoch":
            scheduler.step()
        done = slice(epoch * per_epoch, (epoch + 1) * per_epoch)
        losses, norms = history.losses[done], history.grad_norms[done]
        record = {"epoch": epoch + 1, "step": step, "train_loss": sum(losses) / len(losses),
                  "lr": optimizer.param_groups[0]["lr"], "grad_norm": sum(norms) / len(norms)}
        if val_loader is not None:
            with clock("validation"):
                record["val_loss"], record["val_acc"] = evaluate(model, val_loader, loss_fn, device)
        history.epochs.append(record)
        epoch_start_state = gen.get_state() if gen is not None else None  # the next epoch's
        history.stopped_early = stop and epoch + 1 < epochs
        save()
        if verbose:
            line = f"epoch {epoch + 1:>3}/{epochs}  train loss {record['train_loss']:.4f}"
            if val_loader is not None:
                line += f"  val loss {record['val_loss']:.4f}  val acc {record['val_acc']:.1%}"
            print(line)
        if history.stopped_early:
            return history
    return history
