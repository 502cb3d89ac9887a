"""The best rate ``torch.mm`` achieves on this machine, found by a search over shapes, within a budget.

A derived peak (:mod:`torchhw.peak`) says what the arithmetic units could do if every one were
busy every cycle; one product of one size says what that size gets. Between the two lies the
best rate any shape reaches through ``torch.mm``: a measured roof for matrix products in the
library ``torch.mm`` calls (a BLAS on a CPU, cuBLAS on an NVIDIA GPU), not a bound on every
workload: another library can run the same product faster, and a convolution runs in its own
(oneDNN, cuDNN). Stas Bekman's Machine Learning Engineering book calls it the maximum
achievable matmul FLOPS (MAMF) and finds it for accelerators by a search over shapes; this
does the same on any device, CPU included, within a time budget:

    from torchhw import achievable
    found = achievable.search("cpu", [torch.float32, torch.bfloat16], budget_s=20)
    found.best["float32"]        # Point(shape=(1536, 2048, 1024), gflops=...)

The search starts with square products of growing size (the rate rises with size until the
operands stop fitting the caches or the launch overhead stops mattering), then walks from the
fastest shape found, changing one of M, N, K at a time to a neighbouring size, until the
budget is spent or every neighbour of every shape tried has been timed. Each shape is timed by :func:`torchhw.bench.measure`
(median of blocked runs, on the given device and thread count) and its operands are made once. The fastest timing of many is biased upwards (it won partly by luck), so
the three fastest shapes are timed again on fresh operands and the best of those second timings is
the result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from .bench import has_fast_kernel, measure
from .device import dtype_support

# the sizes each of M, N and K takes: multiples of 128 and their halfway points; a CPU's
# products stay below about 20 GFLOP each (a tenth of a second), a GPU's go to 16384
CPU_SIZES = (256, 384, 512, 768, 1024, 1536, 2048)
GPU_SIZES = (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)


@dataclass
class Point:
    """One timed shape: C (M x N) = A (M x K) @ B (K x N), 2MNK FLOP."""

    shape: tuple[int, int, int]
    gflops: float
    seconds: float  # median time of one product

    def __str__(self) -> str:
        m, n, k = self.shape
        return f"{m} x {n} x {k}: {self.gflops:,.1f} GFLOP/s"


@dataclass
class Search:
    """What :func:`search` found: per dtype, every shape it timed and the best one."""

    device: str
    threads: int
    budget_s: float
    tried: dict[str, list[Point]] = field(default_factory=dict)
    confirmed: dict[str, list[Point]] = field(default_factory=dict)  # the top shapes timed again
    skipped: dict[str, str] = field(default_factory=dict)  # dtype -> why it was not searched
    seconds: float = 0.0

    @property
    def best(self) -> dict[str, Point]:
        """Per dtype, the fastest of the top shapes' second timings."""
        return {d: max(points, key=lambda p: p.gflops) for d, points in self.confirmed.items() if points}

    def to_dict(self) -> dict[str, Any]:
        """For a report card: per dtype the best rate, its shape and how many shapes were tried."""
        return {d: {"gflops": p.gflops, "shape": list(p.shape), "shapes_tried": len(self.tried[d]),
                    "device": self.device, "threads": self.threads}
                for d, p in self.best.items()}

    def rows(self) -> list[list[str]]:
        rows = [["dtype", "best GFLOP/s", "at M x N x K", "shapes tried", "worst tried"]]
        for d, p in self.best.items():
            worst = min(self.tried[d], key=lambda q: q.gflops)
            rows.append([d, f"{p.gflops:,.1f}", " x ".join(map(str, p.shape)),
                         str(len(self.tried[d])), f"{worst.gflops:,.1f} ({' x '.join(map(str, worst.shape))})"])
        for d, why in self.skipped.items():
            rows.append([d, "-", why, "0", ""])
        return rows

    def __str__(self) -> str:
        rows = self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines + [f"({self.seconds:.1f} s on {self.device}, {self.threads} threads)"])

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        rows = self.rows()
        lines = ["| " + " | ".join(rows[0]) + " |", "|---|--:|---|--:|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(lines) + f"\n\n{self.seconds:.1f} s on {self.device}, {self.threads} threads"


def sizes_for(device: torch.device | str, memory_bytes: int | None = None) -> tuple[int, ...]:
    """The sizes M, N and K take on ``device``: on a GPU, those whose three fp32 operands take
    at most a quarter of its memory (``memory_bytes``; asked of the device when None)."""
    device = torch.device(device)
    if device.type == "cpu":
        return CPU_SIZES
    if memory_bytes is None:
        memory_bytes = _device_memory(device)
    if not memory_bytes:
        return GPU_SIZES
    fits = tuple(s for s in GPU_SIZES if 3 * 4 * s * s <= memory_bytes / 4)
    return fits or GPU_SIZES[:1]


def _device_memory(device: torch.device) -> int | None:
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
        if device.type == "mps":  # unified memory: the machine's, shared with everything else
            import psutil

            return psutil.virtual_memory().total
        if device.type == "xpu":
            return torch.xpu.get_device_properties(device).total_memory
    except (RuntimeError, AttributeError, AssertionError):
        return None
    return None


def _time(shape: tuple[int, int, int], dtype: torch.dtype, device: torch.device, threads: int,
          min_run_time: float, seed: int) -> Point:
    m, n, k = shape
    torch.manual_seed(seed)   # made on the device: a large product's operands never cross a bus
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    flops = 2.0 * m * n * k
    r = measure(torch.mm, a, b, label="matmul", sub_label=f"{m}x{n}x{k}", device=device,
                description=str(dtype).replace("torch.", ""), flops=flops, threads=threads,
                min_run_time=min_run_time)
    return Point(shape, flops / r.median / 1e9, r.median)


def _empty_cache(device: torch.device) -> None:
    module = getattr(torch, device.type, None)
    if module is not None and hasattr(module, "empty_cache"):
        module.empty_cache()


def _neighbours(shape: tuple[int, int, int], sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    out = []
    for axis in range(3):
        i = sizes.index(shape[axis])
        for j in (i - 1, i + 1):
            if 0 <= j < len(sizes):
                new = list(shape)
                new[axis] = sizes[j]
                out.append((new[0], new[1], new[2]))
    return out


def search_dtype(dtype: torch.dtype, device: torch.device | str, budget_s: float,
                 threads: int | None = None, sizes: Sequence[int] | None = None,
                 min_run_time: float = 0.05, seed: int = 0) -> tuple[list[Point], list[Point]]:
    """Every shape timed for ``dtype`` within ``budget_s`` seconds, in the order timed, and
    the three fastest timed again (the second timings, which :attr:`Search.best` reports)."""
    device = torch.device(device)
    threads = threads or torch.get_num_threads()
    sizes = tuple(sizes or sizes_for(device))
    deadline = time.perf_counter() + budget_s
    timed: dict[tuple[int, int, int], Point] = {}

    too_big: set[tuple[int, int, int]] = set()

    def visit(shape: tuple[int, int, int]) -> Point | None:
        if shape in timed:
            return timed[shape]
        if shape in too_big or (time.perf_counter() > deadline and timed):
            return None
        if timed:
            # its time at the best rate so far, at least: a GPU's 16384^3 product takes seconds,
            # and with the timings it needs it must fit what is left of the budget
            m, n, k = shape
            fastest = max(p.gflops for p in timed.values())
            if 3 * 2.0 * m * n * k / (fastest * 1e9) > deadline - time.perf_counter():
                return None
        try:
            timed[shape] = _time(shape, dtype, device, threads, min_run_time, seed)
        except RuntimeError as err:  # torch.OutOfMemoryError is one; MPS says it in the text
            if not isinstance(err, torch.OutOfMemoryError) and "out of memory" not in str(err):
                raise
            too_big.add(shape)
            _empty_cache(device)
            return None
        return timed[shape]

    # squares of growing size, until two in a row are slower than the best (past the caches)
    slower = 0
    for s in sizes:
        point = visit((s, s, s))
        if point is None:
            break
        if point.gflops < max(p.gflops for p in timed.values()):
            slower += 1
            if slower == 2:
                break
        else:
            slower = 0
    if not timed:
        raise RuntimeError(f"no matmul of the sizes {sizes} fits on {device}")
    # then one of M, N, K at a time to a neighbouring size, from the fastest shape that still
    # has untimed neighbours, until the budget is spent or every neighbour is timed
    while time.perf_counter() < deadline:
        todo = [p for p in sorted(timed.values(), key=lambda p: -p.gflops)
                if any(s not in timed and s not in too_big for s in _neighbours(p.shape, sizes))]
        if not todo:
            break
        for shape in _neighbours(todo[0].shape, sizes):
            if shape not in timed and shape not in too_big and visit(shape) is None \
                    and shape not in too_big:
                break
    # the fastest of many noisy timings is biased upwards (it won partly by luck): the three
    # fastest shapes are timed again on fresh operands, and those second timings decide
    top = sorted(timed.values(), key=lambda p: -p.gflops)[:3]
    again = [_time(p.shape, dtype, device, threads, min_run_time, seed + 1) for p in top]
    return list(timed.values()), again


def search(device: torch.device | str, dtypes: Sequence[torch.dtype] = (torch.float32,),
           budget_s: float = 20.0, threads: int | None = None,
           sizes: Sequence[int] | None = None, min_run_time: float = 0.05) -> Search:
    """Search each dtype's best matmul rate on ``device``, splitting ``budget_s`` between them.

    A dtype the device lacks, emulates or runs through a slow fallback kernel is skipped with
    the reason (:func:`torchhw.bench.has_fast_kernel`): a fallback's large products take
    minutes. The budget is a target, not a wall: the shape being timed when it runs out finishes.
    """
    device = torch.device(device)
    threads = threads or torch.get_num_threads()
    if budget_s <= 0:
        raise ValueError(f"budget_s={budget_s}: give the search some seconds (about 10 per dtype "
                         f"finds a CPU's best to within a few percent)")
    start = time.perf_counter()
    found = Search(str(device), threads, budget_s)
    wanted = []
    for dtype in dtypes:
        name = str(dtype).replace("torch.", "")
        why = dtype_support(device, dtype)
        if why is None:
            fast, ratio = has_fast_kernel(dtype, device, threads=threads)
            if not fast:
                why = f"no fast kernel: {ratio:.1%} of the fp32 rate on a small product"
        if why is None:
            wanted.append(dtype)
        else:
            found.skipped[name] = why
    for i, dtype in enumerate(wanted):
        share = (budget_s - (time.perf_counter() - start)) / (len(wanted) - i)
        name = str(dtype).replace("torch.", "")
        found.tried[name], found.confirmed[name] = search_dtype(
            dtype, device, max(share, 0.1), threads, sizes, min_run_time)
    found.seconds = time.perf_counter() - start
    return found
