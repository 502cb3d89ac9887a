"""How many CPUs this process may really use: cores, affinity and a container's CPU quota.

``os.cpu_count()`` counts the machine's logical CPUs. A process may be confined to fewer
by its affinity mask (``taskset``, ``docker --cpuset-cpus``), and a container may be given
a CPU *quota* (``docker --cpus=2``, a Kubernetes CPU limit) that lets it run only so many
CPU-seconds per period, on any of the CPUs it sees. Neither Python 3.11 nor torch's
default thread count reads the quota, so a job in a 2-CPU container on a 64-core host may
start 64 threads that the kernel then throttles. The quota sits in the process's own cgroup
(named in /proc/self/cgroup) or in one of its parents. Notebook 05 reads the cgroup files in
its own cells; this module is the tested twin that later notebooks use::

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
PROC_CGROUP = Path("/proc/self/cgroup")  # which cgroup this process is in


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


def own_cgroups(text: str) -> dict[str, str]:
    """This process's cgroup in each hierarchy, from the text of ``/proc/self/cgroup``:
    ``"v2"`` from the unified line (``0::/path``), ``"v1"`` from the line whose controllers
    include ``cpu`` (``4:cpu,cpuacct:/path``). A container with its own cgroup namespace sees
    ``/``: its own cgroup is the root of what it sees."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        number, controllers, path = parts
        if number == "0" and not controllers:
            found.setdefault("v2", path)
        elif "cpu" in controllers.split(","):
            found.setdefault("v1", path)
    return found


def cgroup_levels(base: Path, path: str) -> list[Path]:
    """The folder of cgroup ``path`` under ``base``, then each parent up to ``base`` itself,
    leaving out those that are not there: a container that shares the host's cgroup namespace
    sees the host's path in /proc/self/cgroup but has only its own cgroup mounted, at ``base``."""
    folder = base.joinpath(*[p for p in path.split("/") if p not in ("", ".", "..")])
    chain = [folder, *folder.parents]
    return [d for d in chain[:chain.index(base) + 1] if d.is_dir()]


def folder_quota(folder: Path) -> tuple[float | None, str] | None:
    """The CPU limit one cgroup folder sets, (CPUs or None for no limit, its file), or None
    where the folder has no CPU file (cgroup v2's root has none; nor has a v2 cgroup whose
    parent does not enable the cpu controller)."""
    if (folder / "cpu.max").is_file():
        return parse_cpu_max((folder / "cpu.max").read_text()), str(folder / "cpu.max")
    quota, period = folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us"
    if quota.is_file() and period.is_file():
        return parse_cfs(quota.read_text(), period.read_text()), str(quota)
    return None


def cgroup_quota(root: Path | str = CGROUP_ROOT,
                 proc: Path | str = PROC_CGROUP) -> tuple[float | None, str]:
    """The CPU quota of this process's cgroup, and the file it came from.

    The cgroup is the one ``proc`` names (a systemd slice, a Slurm job, a container): its
    folder under ``root`` and every parent up to ``root``, since a parent's limit holds for
    all its children; the smallest limit applies. cgroup v2 (``cpu.max``) is looked for first,
    then v1's cpu controller (``cpu/cpu.cfs_quota_us``). Returns (None, file) when the files
    set no limit, and (None, reason) when there are none.
    """
    root = Path(root)
    try:
        own = own_cgroups(Path(proc).read_text())
    except OSError:  # no /proc (macOS), or a test's fake tree without one
        own = {}
    for base, path in [(root, own.get("v2", "/")), (root / "cpu", own.get("v1", "/")),
                       (root / "cpu,cpuacct", own.get("v1", "/"))]:
        found = [f for f in map(folder_quota, cgroup_levels(base, path)) if f is not None]
        if found:
            limited = [f for f in found if f[0] is not None]
            return min(limited, key=lambda f: f[0]) if limited else found[0]
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


def cpu_budget(root: Path | str = CGROUP_ROOT, proc: Path | str = PROC_CGROUP) -> CpuBudget:
    """Logical CPUs, affinity and cgroup quota of this process, read now."""
    quota, source = cgroup_quota(root, proc)
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
