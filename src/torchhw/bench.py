"""Timing on top of ``torch.utils.benchmark``: threads explicit, devices synchronised.

Why not just ``time.perf_counter()``? GPU kernels are queued, not run, when a Python line
returns; the first call pays for allocation and kernel selection; and one run says
nothing about noise. ``torch.utils.benchmark.Timer`` handles warm-up, repeats and
statistics; this module adds what a course needs on top:

- the thread count is always explicit (Timer's own default is *one* thread);
- the device is synchronised by the timer itself (CUDA and MPS);
- every result carries median, IQR and a noise flag, and GFLOP/s or GB/s when the work
  is known;
- :func:`compare` checks that the candidates compute the same thing *before* timing
  them, then reports ratios against the first.

    r = measure(torch.mm, a, b, label="matmul", device=a.device, flops=2 * n**3)
    print(r)            # matmul  12.6 ms ± 1.3 ms  170.4 GFLOP/s
"""

from __future__ import annotations

import time
import timeit
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.utils.benchmark as tbench
from torch.utils.benchmark.utils.common import select_unit

from .device import dtype_support, synchronize
from .cpu import using_threads  # noqa: F401  (compare_rounds contexts; notebook 09)

NOISY = 0.10  # IQR above 10% of the median: say so next to the number


def fmt_time(seconds: float) -> str:
    """Seconds in the unit a reader expects: '12.6 ms', '850 us', '1.42 s'.

    The unit is torch.utils.benchmark's own choice (``select_unit``), so our tables and its
    ``Measurement`` printouts agree.
    """
    if not seconds > 0:  # an IQR of zero; select_unit needs a logarithm
        return f"{seconds:.3g} s"
    unit, scale = select_unit(seconds)
    value = seconds / scale
    return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"


@dataclass
class Result:
    """One timed operation. Times are in seconds; rates are None when work is unknown."""

    label: str
    sub_label: str
    description: str
    median: float
    iqr: float
    runs: int
    threads: int
    device: str
    flops: float | None = None
    nbytes: float | None = None  # bytes moved by one call
    measurement: Any = field(default=None, repr=False, compare=False)

    @property
    def noisy(self) -> bool:
        """IQR above NOISY of the median: torch's ``Measurement.meets_confidence`` when timed."""
        if self.measurement is not None:
            return not self.measurement.meets_confidence(NOISY)
        return self.iqr > NOISY * self.median

    @property
    def gflops(self) -> float | None:
        return None if self.flops is None else self.flops / self.median / 1e9

    @property
    def gbps(self) -> float | None:
        return None if self.nbytes is None else self.nbytes / self.median / 1e9

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP per byte moved: the x axis of a roofline."""
        if self.flops is None or not self.nbytes:
            return None
        return self.flops / self.nbytes

    def name(self) -> str:
        return " ".join(p for p in (self.label, self.sub_label, self.description) if p)

    def __str__(self) -> str:
        text = f"{self.name()}: {fmt_time(self.median)} ± {fmt_time(self.iqr / 2)}"
        if self.gflops is not None:
            text += f", {self.gflops:,.1f} GFLOP/s"
        if self.gbps is not None:
            text += f", {self.gbps:,.1f} GB/s"
        if self.noisy:
            text += f" (noisy: IQR {100 * self.iqr / self.median:.0f}% of median)"
        return text


def _indexed(device: torch.device) -> torch.device:
    """``device`` with its index: a bare ``cuda`` is the current GPU, so ``cuda`` and ``cuda:0``
    compare equal when GPU 0 is current, and ``cuda:1`` does not."""
    if device.type == "cpu":
        return torch.device("cpu")
    if device.index is not None:
        return device
    if device.type == "mps":
        return torch.device("mps", 0)
    module = getattr(torch, device.type, None)
    if module is None or not hasattr(module, "current_device"):
        return device
    return torch.device(device.type, module.current_device())


def _timer_for(device: torch.device) -> Callable[[], float]:
    def timer() -> float:
        synchronize(device)  # the clock stops when the device is done, not when Python is
        return timeit.default_timer()
    return timer


def measure(fn: Callable[..., Any], *args: Any, label: str, sub_label: str = "",
            device: torch.device | str, description: str = "", flops: float | None = None,
            nbytes: float | None = None, threads: int | None = None,
            min_run_time: float = 0.2) -> Result:
    """Time ``fn(*args)`` with blocked_autorange and return a :class:`Result`.

    ``threads`` defaults to torch's current intra-op thread count (Timer's own default is
    1). ``device`` is the one ``fn`` runs on, always passed rather than guessed: the timer
    synchronises it, and a guess from the arguments (or none at all) would leave a GPU
    running while the clock stops, which times kernel launches instead of the work.
    ``flops``/``nbytes`` are the work of one call, for GFLOP/s and GB/s.
    """
    threads = threads or torch.get_num_threads()
    asked = torch.device(device)
    device = _indexed(asked)
    on = {_indexed(a.device) for a in args if isinstance(a, torch.Tensor)}
    if on and on != {device}:
        raise ValueError(f"measure() was told device={device} but its tensors are on "
                         f"{', '.join(sorted(map(str, on)))}: pass the device the work runs on "
                         f"(the timer waits for that one only, so work on another would go "
                         f"uncounted)")
    timer = tbench.Timer(
        stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=threads,
        timer=_timer_for(device), label=label, sub_label=sub_label, description=description,
    )
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return Result(label, sub_label, description, m.median, m.iqr, len(m.times), threads,
                  str(asked), flops, nbytes, m)


def compare(candidates: dict[str, Callable[..., Any]], *args: Any, label: str,
            sub_label: str = "", rtol: float | None = None, atol: float | None = None,
            **kwargs: Any) -> list[Result]:
    """Check that every candidate returns the same as the first, then time them all.

    Timing two functions that compute different things is the commonest benchmarking
    mistake; this refuses to. Returns results in the given order; use :func:`table`
    with the first as baseline to see the ratios.
    """
    names = list(candidates)
    reference = candidates[names[0]](*args)
    for name in names[1:]:
        got = candidates[name](*args)
        try:
            torch.testing.assert_close(got, reference, rtol=rtol, atol=atol, check_dtype=False)
        except AssertionError as err:
            raise AssertionError(
                f"{name!r} does not compute the same result as {names[0]!r}, so timing them "
                f"side by side would compare different work:\n{err}"
            ) from None
    return [measure(candidates[n], *args, label=label, sub_label=sub_label, description=n,
                    **kwargs) for n in names]


def speedup(baseline: Result, other: Result) -> float:
    """How many times faster ``other`` is than ``baseline`` (above 1 means faster)."""
    return baseline.median / other.median


class Table:
    """Results as a table, with ratios against a baseline; shows as markdown in Jupyter."""

    def __init__(self, results: Sequence[Result], baseline: Result | None = None) -> None:
        self.results = list(results)
        self.baseline = baseline

    def rows(self) -> list[list[str]]:
        show_flops = any(r.gflops is not None for r in self.results)
        show_bytes = any(r.gbps is not None for r in self.results)
        head = ["operation", "median", "IQR"]
        head += ["GFLOP/s"] * show_flops + ["GB/s"] * show_bytes
        head += ["speed-up"] * (self.baseline is not None)
        rows = [head]
        for r in self.results:
            row = [r.name(), fmt_time(r.median), f"{100 * r.iqr / r.median:.0f}%" + " *" * r.noisy]
            if show_flops:
                row.append("" if r.gflops is None else f"{r.gflops:,.1f}")
            if show_bytes:
                row.append("" if r.gbps is None else f"{r.gbps:,.1f}")
            if self.baseline is not None:
                row.append(f"{speedup(self.baseline, r):.2f}x")
            rows.append(row)
        return rows

    def _footer(self) -> str:
        notes = []
        if self.baseline is not None:
            notes.append(f"speed-up: the time of {self.baseline.name()!r} divided by the row's "
                         f"time (above 1: faster).")
        if any(r.noisy for r in self.results):
            notes.append(f"* noisy: IQR above {NOISY:.0%} of the median; rerun before trusting it.")
        return "\n".join(notes)

    def __str__(self) -> str:
        rows = self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines + ([self._footer()] if self._footer() else []))

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        rows = self.rows()
        lines = ["| " + " | ".join(rows[0]) + " |",
                 "|" + "|".join(["---"] + ["--:"] * (len(rows[0]) - 1)) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(lines) + ("\n\n" + self._footer() if self._footer() else "")


def table(results: Sequence[Result], baseline: Result | None = None) -> Table:
    """A comparison table; pass ``baseline`` to add a 'vs baseline' speed-up column."""
    return Table(results, baseline)


def matmul(n: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
           threads: int | None = None, min_run_time: float = 0.2, seed: int = 0) -> Result:
    """Time one n x n by n x n matrix product: 2n^3 FLOP, 3n^2 elements moved at least.

    ``device`` must be given (it has a default only so that dtype can keep one).
    """
    if device is None:
        raise TypeError("matmul() needs device=...: the device the product runs on is never guessed")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    size = torch.tensor([], dtype=dtype).element_size()
    return measure(torch.mm, a, b, label="matmul", sub_label=f"n={n}",
                   description=str(dtype).replace("torch.", ""), flops=2 * n**3,
                   nbytes=3 * n * n * size, threads=threads, device=device,
                   min_run_time=min_run_time)


GPU_PROBE_N = 2048  # an Apple GPU's product must be this large before launch overhead stops hiding its rate
GPU_ROOF_N = 4096  # and this large to keep every unit of a data-centre GPU busy: its measured roof


def probe_size(device: torch.device | str) -> int:
    """The product :func:`has_fast_kernel` times on ``device``: 128 on a CPU (milliseconds even
    on a slow path), :data:`GPU_PROBE_N` on a GPU, where a 128 product costs about one kernel
    launch in any dtype and would make every dtype look fast."""
    return 128 if torch.device(device).type == "cpu" else GPU_PROBE_N


def has_fast_kernel(dtype: torch.dtype, device: torch.device | str, n: int | None = None,
                    threads: int | None = None, slower_than: float = 0.1) -> tuple[bool, float]:
    """Whether matmul in ``dtype`` runs at least ``slower_than`` times fp32's rate on ``device``
    (by default a tenth: below that, there is no fast kernel, only a fallback).

    On a CPU and on MPS, times a product in both (:func:`probe_size`; some CPUs have no fp16
    kernel and take tens of seconds for one n = 2048 product) and returns (fast, ratio of dtype
    GFLOP/s to fp32 GFLOP/s). A dtype the device lacks or only emulates
    (:func:`torchhw.device.dtype_support`: bf16 on a GPU older than Ampere) is not timed:
    (False, 0.0). A CUDA or XPU GPU describes its arithmetic itself (compute capability,
    properties), so a dtype it has natively is not timed either: (True, nan). Natively is not
    quickly, though: fp64 on a T4 or a consumer GPU runs at 1/32 to 1/64 of fp32's rate, a real kernel
    that a sweep measures as it is.
    """
    if dtype == torch.float32:  # the reference itself: timing it twice would only add noise
        return True, 1.0
    if dtype_support(device, dtype) is not None:  # absent or emulated (bf16 on a T4): not timed
        return False, 0.0
    if torch.device(device).type in ("cuda", "xpu"):
        return True, float("nan")
    n = n or probe_size(device)
    ref = matmul(n, torch.float32, device, threads, min_run_time=0.05)
    got = matmul(n, dtype, device, threads, min_run_time=0.05)
    ratio = got.gflops / ref.gflops
    return ratio >= slower_than, ratio


def dtype_sweep(sizes: Sequence[int], dtypes: Sequence[torch.dtype], device: torch.device | str,
                threads: int | None = None) -> tuple[list[Result], dict[str, str]]:
    """Matmul GFLOP/s over ``sizes`` for each dtype, skipping a dtype with no fast kernel.

    Returns the results and, per skipped dtype, why: a slow path can take a minute per large
    product, so :func:`has_fast_kernel` is asked first.
    """
    results, skipped = [], {}
    for dtype in dtypes:
        name = str(dtype).replace("torch.", "")
        why = dtype_support(device, dtype)
        if why is not None:
            skipped[name] = why
            continue
        fast, ratio = has_fast_kernel(dtype, device, threads=threads)
        if not fast:
            skipped[name] = (f"{ratio:.1%} of the fp32 rate at n={probe_size(device)}: no fast kernel on "
                             f"{device}, larger sizes skipped")
            continue
        results += [matmul(n, dtype, device, threads) for n in sizes]
    return results, skipped


def bandwidth(nbytes: int, device: torch.device | str, threads: int | None = None,
              min_run_time: float = 0.2) -> list[Result]:
    """Memory bandwidth from three streaming ops on fp32 buffers of ``nbytes`` each.

    copy reads and writes each byte once; add reads two buffers and writes one; sum reads
    one. Buffers should be well above the last-level cache, or this measures the cache.
    """
    n = nbytes // 4
    x = torch.ones(n, device=device)
    y = torch.ones(n, device=device)
    out = torch.empty(n, device=device)
    kw = dict(label="memory", sub_label=f"{nbytes / 2**20:.0f} MiB", threads=threads,
              device=device, min_run_time=min_run_time)
    return [
        measure(out.copy_, x, description="copy", nbytes=2 * 4 * n, **kw),
        measure(lambda a, b: torch.add(a, b, out=out), x, y, description="add", flops=n,
                nbytes=3 * 4 * n, **kw),
        measure(torch.sum, x, description="sum", flops=n, nbytes=4 * n, **kw),
    ]


GPU_STREAM_BYTES = 512 * 2**20  # four times the largest L2 of a current GPU (B200: 126 MB)


def beyond_cache(caches: dict[str, int] | None = None, *, floor: int = 64 * 2**20,
                 cap: int = 2**30) -> int:
    """Bytes for a buffer that main memory, not a cache, must serve: four times the largest
    cache in ``caches`` (a CPU's ``{"L3": bytes, ...}``), at least ``floor`` (which is also what
    a CPU that reports no cache, ``{}``, gets) and at most ``cap``. ``None`` stands for a GPU,
    whose caches the survey does not read: :data:`GPU_STREAM_BYTES`, past the L2 of any GPU in
    use today (an RTX 4090's 72 MB would serve a 64 MiB buffer from cache). A working set smaller
    than the last-level cache is fed at the cache's bandwidth, and a roofline drawn with main
    memory's slope then has points above it."""
    if caches is None:
        return GPU_STREAM_BYTES
    largest = max(caches.values(), default=0)
    return int(min(cap, max(floor, 4 * largest)))


# ---------------------------------------------------------------------------------------------
# Comparing two ways of doing the same work: the course's one method for a ratio.

THRESHOLD = 0.05  # the verdict rule: a ratio whose whole interval lies beyond 5% is a difference
BUSY_SHARE = 0.25  # each thread waited for a CPU over a quarter of a round: the machine was busy
MIN_ROUNDS = 3  # fewer rounds than this give no verdict
BUSY_SPREAD = 1.5  # one arm's slowest round over 1.5x its fastest: something else got in
PRESSURE = "/proc/pressure/cpu"  # Linux's pressure stall information (PSI)


def cpu_pressure() -> float | None:
    """Seconds, so far, during which some runnable task waited for a CPU (Linux PSI), or None
    where the system does not report it (macOS, Windows, kernels without PSI).

    It counts waiting, not use: a process using every core alone shows none, while another
    program competing for the cores, or more threads than there are cores, shows at once. It
    covers the whole system: in a container, the host's other tenants count too. (The CPU
    time that /proc/stat counts moves in 10 ms ticks, too coarse for rounds of tens of ms.)
    """
    try:
        with open(PRESSURE) as f:
            some = f.readline().split()
        return int(some[4].split("=")[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None


def _cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks of ``cpus`` so far, from /proc/stat; None where it is absent."""
    busy = total = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
                    continue
                ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
                total += sum(ticks)
                busy += sum(ticks) - ticks[3] - ticks[4]
    except (OSError, ValueError):
        return None
    return (busy, total) if total else None


def cpu_busy(window: float = 0.3) -> float | None:
    """The share of this process's CPUs that were busy over the next ``window`` seconds, from
    Linux's /proc/stat (user, system, interrupts and steal: time a virtual machine's host gave
    to others); None where the system does not report it.

    Call it while the work itself is idle (every rank of a job waiting in a barrier), and it
    measures everything else: other programs, and in a virtual machine the host's other
    guests. That tells load from outside the job apart from the job's own, which
    :func:`cpu_wait` cannot where a job runs more threads than cores on purpose. The ticks are
    10 ms, so a window of 0.3 s on 2 CPUs reads in steps of about 2%.
    """
    import os

    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    before = _cpu_ticks(cpus)
    if before is None:
        return None
    time.sleep(window)
    after = _cpu_ticks(cpus)
    if after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def cpu_wait() -> float | None:
    """Seconds, so far, that this process's threads spent ready to run but waiting for a CPU
    (Linux's scheduler statistics, ``/proc/self/task/*/schedstat``), or None where the system
    does not report them (macOS, Windows).

    This is the waiting that slows a measurement: a thread of the work, or of torch's thread
    pool, that could run and did not. Another program on the cores, other tenants of a shared
    host, or more threads than CPUs all show here; a program that waits on its own cores
    while this one runs does not (unlike :func:`cpu_pressure`, which counts every task of the
    system, the Jupyter server's included).
    """
    import os

    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                waited = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
        if waited < _WAITED.get(tid, 0):  # the id was reused by a new thread: keep the old one's
            _WAITED_ENDED[0] += _WAITED[tid]
        _WAITED[tid] = waited
    if not _WAITED:
        return None
    # threads that ended keep their last reading, so the total never goes back
    return (sum(_WAITED.values()) + _WAITED_ENDED[0]) / 1e9


_WAITED: dict[str, int] = {}  # thread id -> nanoseconds it had waited when last read
_WAITED_ENDED = [0]  # nanoseconds of threads whose id a later thread took


@dataclass
class Comparison:
    """A candidate against its baseline, timed in alternating rounds in one thread.

    ``ratios`` holds one baseline/candidate time ratio per round (above 1: the candidate is
    faster); ``low``-``high`` is their interquartile range (all of them with fewer than four
    rounds). ``busy`` says why the machine was too busy for a verdict, or is empty.
    ``base_work`` and ``cand_work`` are the work one call of each arm does (examples, for
    instance): an arm that trains twice the batch per call has twice the work, and the ratio
    is then of time per unit of work (examples per second).
    """

    baseline: str
    candidate: str
    base_times: list[float]  # seconds per call, one per round
    cand_times: list[float]
    busy: str = ""
    base_work: float = 1.0
    cand_work: float = 1.0

    @property
    def ratios(self) -> list[float]:
        return [(b / self.base_work) / (c / self.cand_work)
                for b, c in zip(self.base_times, self.cand_times)]

    @property
    def ratio(self) -> float:
        import statistics

        return statistics.median(self.ratios) if self.ratios else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        import statistics

        r = sorted(self.ratios)
        if not r:
            return float("nan"), float("nan")
        if len(r) < 4:
            return r[0], r[-1]
        q1, _, q3 = statistics.quantiles(r, n=4, method="inclusive")
        return q1, q3

    @property
    def verdict(self) -> str:
        """'faster', 'slower', 'no clear difference', or no verdict: 'machine busy' or 'too few
        rounds' (under MIN_ROUNDS, the interval says nothing)."""
        if self.busy:
            return "machine busy"
        if len(self.ratios) < MIN_ROUNDS:
            return "too few rounds"
        low, high = self.interval
        if low > 1 + THRESHOLD:
            return "faster"
        if high < 1 / (1 + THRESHOLD):
            return "slower"
        return "no clear difference"

    def __str__(self) -> str:
        low, high = self.interval
        text = (f"{self.candidate}: {self.ratio:.2f}x {self.baseline} ({low:.2f}-{high:.2f} over "
                f"{len(self.ratios)} rounds): {self.verdict}")
        return text + (f" ({self.busy})" if self.busy else "")


def _block(fn: Callable[[], Any], calls: int, device: torch.device, clock: Callable[[], float],
           context: Callable[[], Any] | None, in_use: list[int] | None = None,
           threads: Callable[[], int] = torch.get_num_threads) -> float:
    """Seconds per call of ``calls`` calls of ``fn``, the device synchronised at both ends;
    ``in_use[0]`` is set to the thread count inside ``context``."""
    from contextlib import nullcontext

    with (context or nullcontext)():
        if in_use is not None:
            in_use[0] = max(1, threads())
        synchronize(device)
        start = clock()
        for _ in range(calls):
            fn()
        synchronize(device)
        return (clock() - start) / calls


def compare_rounds(baseline: Callable[[], Any], candidates: dict[str, Callable[[], Any]], *,
                   device: torch.device | str, rounds: int = 7, round_time: float = 0.05,
                   contexts: dict[str, Callable[[], Any]] | None = None,
                   baseline_name: str = "baseline", deadline: float | None = None,
                   calls: int | None = None, work: dict[str, float] | None = None,
                   own_load: Sequence[str] = (), settle: float = 0.05,
                   between: Callable[[int], Any] | None = None,
                   threads: Callable[[], int] = torch.get_num_threads,
                   clock: Callable[[], float] = timeit.default_timer,
                   pressure: Callable[[], float | None] | None = cpu_wait
                   ) -> dict[str, Comparison]:
    """Time the baseline and each candidate in alternating rounds; one :class:`Comparison` each.

    Every round times each arm for about ``round_time`` (the number of calls fixed in a
    warm-up, so every round does the same work), the baseline first in even rounds and last
    in odd ones, in the calling thread: where the work will run, with its thread pool. A
    slow patch of the machine then slows both arms of a round, and the ratio of each round
    keeps its meaning. ``contexts`` maps an arm to a context manager factory entered around
    each of its blocks (a flag, :func:`using_threads`). No round starts after ``deadline`` (a
    ``clock`` value): with fewer than MIN_ROUNDS done there is no verdict. The machine counts
    as busy, and no verdict is given, when the threads of the work waited for a CPU, on
    average, for more than ``BUSY_SHARE`` of a round (the waiting over the round's time times
    ``threads()``, torch's thread count inside each arm's context) (``pressure``: seconds of waiting so far, :func:`cpu_wait`
    by default; :func:`cpu_pressure` reads the whole system instead). Where the system
    reports no waiting, an arm whose rounds spread beyond ``BUSY_SPREAD`` counts as busy
    instead: a cruder sign, since a short round on a quiet machine can spread that far from
    one slow call.

    ``calls`` fixes the calls per block and skips the warm-up: for arms whose every call is
    a piece of one long job (an epoch of a training run), where an extra call would change
    what is measured. ``work`` maps an arm to the work of one call, relative to the others
    (see :class:`Comparison`); 1 where not given. ``own_load`` names arms that run more
    threads than there are CPUs on purpose (to measure what that costs): the waiting they
    cause is their own, so the busy check reads only the other arms' blocks, and each of
    their blocks is followed by ``settle`` seconds, untimed, in which their surplus threads
    stop spinning before the next arm starts. ``between`` is called, untimed, with the
    round's index after every round: a place to probe the machine (:func:`cpu_busy`).
    """
    device = torch.device(device)
    contexts = contexts or {}
    work = work or {}
    arms = {baseline_name: baseline, **candidates}
    per_block: dict[str, int] = {}
    for name, fn in arms.items():  # warm-up: first calls, then how many calls fill a block
        if calls is not None:
            per_block[name] = calls
            continue
        per_call = _block(fn, 1, device, clock, contexts.get(name))
        per_call = _block(fn, 1, device, clock, contexts.get(name)) or per_call
        per_block[name] = max(1, int(round_time / max(per_call, 1e-9)))
        if name in own_load:
            time.sleep(settle)
    times: dict[str, list[float]] = {name: [] for name in arms}
    busy, worst = "", 0.0
    pressure_missing = pressure is None or pressure() is None
    for r in range(rounds):
        if deadline is not None and clock() > deadline:
            break
        order = list(arms) if r % 2 == 0 else list(arms)[::-1]
        waited, wall = 0.0, 0.0
        for name in order:
            before, start = (pressure() if pressure and not pressure_missing else None), clock()
            in_use = [1]
            times[name].append(_block(arms[name], per_block[name], device, clock,
                                      contexts.get(name), in_use, threads))
            if name in own_load:  # its waiting is its own; let its surplus threads go idle
                time.sleep(settle)  # (OpenMP's threads spin on after their work), untimed
            elif before is not None:
                # per thread of the work: 8 threads each waiting 5% of the time is a 5% wait
                waited += pressure() - before
                wall += (clock() - start) * in_use[0]
        if not pressure_missing and wall > 0:  # each round alone: a short burst is not averaged away
            share = waited / wall
            if share > max(BUSY_SHARE, worst):
                worst = share
                busy = (f"the work's threads waited for a CPU for {share:.0%} of round "
                        f"{r + 1}: the cores are oversubscribed (another program, other tenants "
                        f"of a shared host or container, or more threads than cores)")
        if between is not None:
            between(r)
    for name, ts in times.items():  # where the system reports no pressure: the rounds' spread
        spread = len(ts) > 1 and max(ts) > BUSY_SPREAD * min(ts)
        if pressure_missing and name not in own_load and spread and not busy:
            busy = (f"the rounds of {name} ranged {min(ts) * 1e3:.3g}-{max(ts) * 1e3:.3g} ms, "
                    f"more than {BUSY_SPREAD}x apart")
    return {name: Comparison(baseline_name, name, times[baseline_name][:len(times[name])],
                             times[name], busy, work.get(baseline_name, 1.0), work.get(name, 1.0))
            for name in candidates}


@dataclass
class Cost:
    """What one call of a function asks of the hardware: its FLOPs, and the bytes its
    operations read and write if nothing stays in cache between them."""

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOP per byte: where the call sits on a roofline (a lower bound, since a cache
        that keeps a tensor between two operations saves its bytes)."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def bound(self, peak_gflops: float, bandwidth_gbps: float) -> float:
        """The roofline's bound for this call, in GFLOP/s: min(peak, intensity x bandwidth)."""
        return min(peak_gflops, self.intensity * bandwidth_gbps)


def cost(fn: Callable[[], Any]) -> Cost:
    """Count one call of ``fn`` (a training step, say): FLOPs with torch's FlopCounterMode
    (matmuls and convolutions, forward and backward; element-wise work is not counted), and
    bytes as the sum, over every operation that computes something (views excluded), of its
    tensor inputs and outputs (an in-place operation reads its tensor and writes it back). The call runs once, for real."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    class Bytes(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view:  # what it reads, then what it writes (in place: the same tensor)
                for group in ((args, kwargs), out):
                    seen = set()
                    for t in tree_leaves(group):
                        if isinstance(t, torch.Tensor) and id(t) not in seen:
                            seen.add(id(t))
                            Bytes.total += t.numel() * t.element_size()
            return out

    with FlopCounterMode(display=False) as flops, Bytes():
        fn()
    return Cost(float(flops.get_total_flops()), float(Bytes.total))
