"""How many CPUs this process may really use: cores, affinity and a container's CPU quota.

``os.cpu_count()`` counts the machine's logical CPUs. A process may be confined to fewer
by its affinity mask (``taskset``, ``docker --cpuset-cpus``), and a container may be given
a CPU *quota* (``docker --cpus=2``, a Kubernetes CPU limit) that lets it run only so many
CPU-seconds per period, on any of the CPUs it sees. Neither Python 3.11 nor torch's
default thread count reads the quota, so a job in a 2-CPU container on a 64-core host may
start 64 threads that the kernel then throttles. Notebook 05 reads the cgroup files in its
own cells; this module is the tested twin that later notebooks use::

    budget = cpu_budget()
    budget.usable          # what to give torch.set_num_threads
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

CGROUP_ROOT = Path("/sys/fs/cgroup")


def parse_cpu_max(text: str) -> float | None:
    """CPUs granted by a cgroup v2 ``cpu.max`` line ('150000 100000' -> 1.5); None for 'max'."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    period = int(fields[1]) if len(fields) > 1 else 100_000  # the kernel's default period
    return int(fields[0]) / period


def parse_cfs(quota_us: str, period_us: str) -> float | None:
    """CPUs granted by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; None for -1."""
    quota = int(quota_us)
    return None if quota < 0 else quota / int(period_us)


def cgroup_quota(root: Path | str = CGROUP_ROOT) -> tuple[float | None, str]:
    """The CPU quota of this process's cgroup, and the file it came from.

    Looks for cgroup v2 (``cpu.max``) and then v1 (``cpu/cpu.cfs_quota_us``). Inside a
    container the cgroup filesystem is the container's own, so the files at the root are
    the ones that apply. Returns (None, reason) when there is no quota or no file.
    """
    root = Path(root)
    v2 = root / "cpu.max"
    if v2.is_file():
        return parse_cpu_max(v2.read_text()), str(v2)
    for folder in ("cpu", "cpu,cpuacct"):
        quota, period = root / folder / "cpu.cfs_quota_us", root / folder / "cpu.cfs_period_us"
        if quota.is_file() and period.is_file():
            return parse_cfs(quota.read_text(), period.read_text()), str(quota)
    return None, f"no cgroup CPU files under {root}"


@dataclass(frozen=True)
class CpuBudget:
    """What the OS reports and what this process may use; ``usable`` is the one to act on."""

    logical: int          # os.cpu_count(): every logical CPU of the machine
    affinity: int         # CPUs this process may be scheduled on
    quota: float | None   # CPUs' worth of time per period the cgroup grants; None: no limit
    source: str           # the file the quota came from, or why there is none

    @property
    def usable(self) -> int:
        """Whole CPUs this process can keep busy: affinity, capped by the quota, at least 1."""
        if self.quota is None:
            return self.affinity
        return max(1, min(self.affinity, math.floor(self.quota)))


def affinity_count() -> int:
    """CPUs this process may run on (its affinity mask); os.cpu_count() where unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


def cpu_budget(root: Path | str = CGROUP_ROOT) -> CpuBudget:
    """Logical CPUs, affinity and cgroup quota of this process, read now."""
    quota, source = cgroup_quota(root)
    return CpuBudget(os.cpu_count() or 1, affinity_count(), quota, source)


def using_threads(n: int) -> Callable[[], Any]:
    """A context manager factory: torch's intra-op thread count set to ``n``, restored after
    (for a Setup's settings, and for the arms of ``bench.compare_rounds``)."""
    import torch

    @contextmanager
    def threads() -> Iterator[None]:
        old = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(old)
    return threads
