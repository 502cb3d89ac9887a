"""Where a job's ranks run: the backend and each rank's device, decided once for every launcher.

:func:`rank_device` decides for one rank (torchrun scripts call it with their LOCAL_RANK);
:func:`plan` for all ranks of a job on this machine (:func:`torchhw.distributed.launch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Placement:
    """Where a job's ranks run: the backend, each rank's device, and what the machine cannot do
    for it (``note``: one line, or "")."""

    backend: str
    devices: list[str]
    note: str = ""

    def __str__(self) -> str:
        ranks = len(self.devices)
        where = ", ".join(self.devices) if len(set(self.devices)) > 1 else f"all on {self.devices[0]}"
        return (f"{ranks} rank{'s' if ranks > 1 else ''} with {self.backend}: {where}"
                + (f"\nnote: {self.note}" if self.note else ""))


def rank_device(kind: str, index: int, sharing: int, *, share: bool = True) -> tuple[str, str, str]:
    """The backend, device and note for the ``index``-th of ``sharing`` ranks that share one
    machine's devices of type ``kind`` ('cpu', 'cuda', 'xpu', 'mps').

    A GPU each where there are as many GPUs as ranks: the device's own backend (NCCL on CUDA
    and ROCm, XCCL on Intel GPUs), rank i on GPU i. Fewer GPUs than ranks: the ranks share
    them round-robin and use gloo, because NCCL refuses two ranks on one GPU ("Duplicate GPU
    detected"); gloo moves the tensors through host memory, so its timings say nothing about
    NVLink. MPS: gloo cannot move MPS tensors, so the ranks run on the CPU. ``sharing`` counts
    every rank on this machine: on a cluster a node's ranks (LOCAL_WORLD_SIZE); for nodes
    simulated on one machine, all of them (each simulated node numbers its ranks from 0).

    ``share=False`` (what a production job wants): fewer GPUs than ranks raises instead, since
    a job that silently trains over gloo on a shared GPU is many times slower than asked for.
    """
    from ..device import backend_for, count

    if kind == "mps":
        return "gloo", "cpu", "gloo cannot use MPS tensors; the ranks run on the CPU"
    if kind not in ("cuda", "xpu"):
        return "gloo", "cpu", ""
    gpus = count(kind)
    if gpus == 0:
        raise ValueError(f"device is {kind} but this machine has no {kind.upper()} GPU: "
                         f"pass device='cpu', or run where there is one")
    if gpus >= sharing:
        return backend_for(kind), f"{kind}:{index}", ""
    if not share:
        raise RuntimeError(
            f"{sharing} processes on this node but only {gpus} {kind.upper()} GPU"
            f"{'s' if gpus > 1 else ''} visible: {backend_for(kind).upper()} needs one GPU per "
            f"process. Start {gpus} process{'es' if gpus > 1 else ''} per node (torchrun "
            f"--nproc-per-node={gpus}), ask the scheduler for {sharing} GPUs per node, or allow "
            f"sharing over gloo (slow) explicitly")
    return "gloo", f"{kind}:{index % gpus}", (
        f"{sharing} ranks share {gpus} {kind.upper()} GPU{'s' if gpus > 1 else ''}: gloo, not "
        f"{backend_for(kind).upper()} (which refuses two ranks on one GPU), copying through host "
        f"memory, so the communication measured here is not what {backend_for(kind).upper()} "
        f"between GPUs would do")


def plan(nprocs: int, device: Any) -> Placement:
    """The backend and each rank's device for ``nprocs`` ranks on ``device``'s kind of hardware,
    all on this machine (see :func:`rank_device`). One rank asked for on a numbered GPU
    (``cuda:1``) runs on that GPU; several ranks take GPUs 0, 1, ... whatever the number."""
    kind, _, index = str(device).partition(":")
    if index and nprocs == 1 and kind in ("cuda", "xpu"):
        # one rank on the GPU the caller named (a trial on cuda:1 must not land on cuda:0)
        from ..device import count
        if int(index) >= count(kind):
            raise ValueError(f"device is {device} but this machine has {count(kind)} "
                             f"{kind.upper()} GPU(s), numbered from 0: pass one of those")
        backend, _, note = rank_device(kind, 0, 1)
        return Placement(backend, [f"{kind}:{int(index)}"], note)
    decided = [rank_device(kind, r, nprocs) for r in range(nprocs)]
    return Placement(decided[0][0], [d for _, d, _ in decided], decided[0][2])
