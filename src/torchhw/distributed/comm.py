"""What a collective costs: bandwidth as nccl-tests define it, and a latency-bandwidth model.

For an all_reduce of ``S`` bytes that took ``t`` seconds on ``n`` ranks (nccl-tests'
definitions, so numbers compare with theirs):

- algorithm bandwidth ``algbw = S / t``: the size the user asked to reduce, per second;
- bus bandwidth ``busbw = algbw * 2 (n - 1) / n``: what each link carried, since a ring
  all_reduce sends every byte ``2 (n - 1) / n`` times. It compares with the hardware's peak.

The model ``t(S) = alpha + S / B`` (a fixed latency per call plus the bytes over a bandwidth)
is fitted by least squares on measured times; it predicts DDP's communication per step from
the number of gradient buckets and their bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def algbw(n_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s."""
    return n_bytes / seconds


def busbw(n_bytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth of an all_reduce in bytes/s (nccl-tests' factor 2 (n - 1) / n)."""
    return algbw(n_bytes, seconds) * 2 * (world_size - 1) / world_size


@dataclass(frozen=True)
class LinkModel:
    """``t(S) = latency + S / bandwidth`` for one all_reduce call of S bytes."""

    latency: float      # seconds per call
    bandwidth: float    # bytes per second (algorithm bandwidth at large sizes)

    def seconds(self, n_bytes: float, calls: int = 1) -> float:
        """Predicted time of ``calls`` all_reduces moving ``n_bytes`` in all."""
        return calls * self.latency + n_bytes / self.bandwidth


def fit(sizes: Sequence[float], seconds: Sequence[float]) -> LinkModel:
    """Least-squares fit of latency and bandwidth, weighting each size by its relative error
    (so the small sizes fix the latency and the large ones the bandwidth)."""
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(s) < 2 or np.any(t <= 0):
        raise ValueError("need at least two sizes with positive times")
    w = 1.0 / t  # relative errors: minimise sum(((alpha + s/B) - t) / t)^2
    A = np.stack([np.ones_like(s), s], axis=1) * w[:, None]
    (alpha, inv_bw), *_ = np.linalg.lstsq(A, t * w, rcond=None)
    alpha = max(float(alpha), 0.0)
    inv_bw = max(float(inv_bw), 1e-15)
    return LinkModel(latency=alpha, bandwidth=1.0 / inv_bw)
