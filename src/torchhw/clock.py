"""The clock the cores really run at, measured, not read off /proc/cpuinfo.

A peak FLOP/s is cores x FLOP per cycle x clock, so the clock decides where every roofline's roof
sits. What the operating system reports is often the base clock (a virtual machine reports
nothing else), while the cores boost above it: a measured matmul then beats its "peak".

    from torchhw import clock
    clock.measure(threads=2)     # Clock(ghz=3.57, kind='measured', ...)
    clock.best(cpu)              # measured where it can be, else the boost or reported clock

The measurement times a chain of dependent integer multiplications (``imul rax, rax``), each of
which waits for the one before it, so the chain runs at the instruction's latency: 3 cycles on
Intel's cores since Nehalem (2008) and AMD's since Zen (Core 2, Bulldozer and Atom differ).
Cycles / seconds is the clock. A chain of dependent adds (1 cycle each) is timed too, as a check: where the two
disagree by more than 5% (a core with other latencies), the measurement is not used. The chain is
a few bytes of machine code run through ctypes, which releases the GIL, so ``threads`` copies run
at once, one per core, the way a matmul's threads load every core; the slowest core's clock is the
one an all-core peak may use. (On a hybrid Intel CPU the slowest may be an efficiency core,
whose vector units differ too: its peak is then only an estimate.) More threads than physical
cores are not run: two SMT threads of one core would each run a latency-bound chain at full speed
and count the core twice. Best of several short runs: a run the scheduler interrupts counts
fewer cycles per second, never more, so the best run is the clock.

Only x86-64 is measured; elsewhere (Apple silicon, Arm servers) :func:`best` takes the boost
clock the system reports (psutil's maximum frequency), else the reported clock, and says so.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import platform
import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil

# the chains: (name, instruction bytes, cycles each). x86-64, System V: rdi = loop count.
_CHAIN = 200  # instructions per loop iteration: the loop's own dec/jnz run beside them
_IMUL = ("imul", bytes([0x48, 0x0F, 0xAF, 0xC0]), 3)   # imul rax, rax
_ADD = ("add", bytes([0x48, 0x01, 0xD0]), 1)           # add rax, rdx (a register: no folding)
_SETUP = bytes([0xB8, 1, 0, 0, 0, 0xBA, 1, 0, 0, 0])   # mov eax, 1; mov edx, 1


@dataclass
class Clock:
    """A clock in GHz and where it came from. ``kind``: measured, boost, reported or unknown."""

    ghz: float | None
    kind: str
    source: str
    single_ghz: float | None = None  # one core alone (measured only)
    threads: int | None = None       # how many cores ran the chain at once

    def __str__(self) -> str:
        if self.ghz is None:
            return f"clock unknown ({self.source})"
        return f"{self.ghz:.2f} GHz, {self.kind} ({self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"ghz": self.ghz, "kind": self.kind, "source": self.source,
                "single_ghz": self.single_ghz, "threads": self.threads}


class _Chain:
    """One chain compiled into an executable page; ``run(n)`` executes n iterations."""

    def __init__(self, op: bytes) -> None:
        loop = op * _CHAIN + bytes([0x48, 0xFF, 0xCF])  # dec rdi
        back = -(len(loop) + 6)                        # jnz: back to the loop's start
        code = _SETUP + loop + bytes([0x0F, 0x85]) + back.to_bytes(4, "little", signed=True) \
            + bytes([0xC3])                            # ret
        self._page = mmap.mmap(-1, len(code),
                               prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self._page.write(code)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        self.run = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(address)


def supported() -> bool:
    """Whether this machine's clock can be measured: x86-64 with executable anonymous pages."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        _chains()
    except (OSError, ValueError, AttributeError):  # no PROT_EXEC (a hardened kernel), no mmap
        return False
    return True


@functools.cache
def _chains() -> dict[str, tuple[_Chain, int]]:
    return {name: (_Chain(op), cycles) for name, op, cycles in (_IMUL, _ADD)}


def _rate(chain: _Chain, cycles: int, seconds: float, repeats: int) -> float:
    """Best cycles per second over ``repeats`` runs of about ``seconds`` each."""
    n = 1000
    while True:  # size a run to about `seconds`
        start = time.perf_counter()
        chain.run(n)
        took = time.perf_counter() - start
        if took > seconds / 4 or n > 1 << 30:
            break
        n *= 4
    n = max(1, int(n * seconds / took))
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        chain.run(n)
        best = max(best, n * _CHAIN * cycles / (time.perf_counter() - start))
    return best


def _all_cores(name: str, threads: int, seconds: float, repeats: int) -> list[float]:
    chain, cycles = _chains()[name]
    rates: list[float] = [0.0] * threads
    barrier = threading.Barrier(threads)

    def work(i: int) -> None:
        barrier.wait()
        rates[i] = _rate(chain, cycles, seconds, repeats)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return rates


def measure(threads: int = 1, seconds: float = 0.01, repeats: int = 15) -> Clock:
    """Measure the clock with ``threads`` cores busy at once (about 0.2 s per chain).

    ``ghz`` is the slowest of the busy cores (the clock an all-core peak may use);
    ``single_ghz`` one core alone. Raises :class:`RuntimeError` where it cannot measure.
    """
    if not supported():
        raise RuntimeError(f"the clock can be measured on x86-64 only (this is "
                           f"{platform.machine()}), with executable memory allowed")
    threads = min(max(1, int(threads)), psutil.cpu_count(logical=False) or int(threads))
    single = {name: _rate(*_chains()[name], seconds, repeats) / 1e9 for name in ("imul", "add")}
    if abs(single["imul"] / single["add"] - 1) > 0.05:
        raise RuntimeError(f"the two chains disagree ({single['imul']:.2f} GHz from imul, "
                           f"{single['add']:.2f} from add): this core's latencies are not the "
                           f"ones assumed, so neither is a clock")
    every = min(_all_cores("imul", threads, seconds, repeats)) / 1e9 if threads > 1 else single["imul"]
    return Clock(round(every, 3), "measured",
                 f"measured: a chain of dependent multiplications on {threads} "
                 f"core{'s' if threads > 1 else ''} at once", round(single["imul"], 3), threads)


@functools.cache
def _measured(threads: int) -> Clock | None:
    try:
        return measure(threads)
    except RuntimeError:
        return None


def best(cpu: Any, threads: int | None = None) -> Clock:
    """This machine's clock for a peak: measured (cached per thread count), else the boost
    clock the system reports, else the reported clock (often the base clock), else unknown.

    ``cpu`` is this machine's :class:`torchhw.hardware.CPUInfo`.
    """
    measured = _measured(threads or cpu.physical_cores or cpu.logical_cores or 1)
    if measured is not None:
        return measured
    if cpu.clock_ghz is None:
        return Clock(None, "unknown", "not reported by this OS, and not measurable here")
    kind = "boost" if "maximum" in cpu.clock_source else "reported"
    return Clock(cpu.clock_ghz, kind, cpu.clock_source)
