"""Plot defaults for the course and the roofline chart.

Figures are small and rendered as PNG at a fixed size and resolution, so a committed
notebook stays light and a re-run changes pixels, not layout.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

STYLE = {
    "figure.figsize": (6.0, 3.6),
    "figure.dpi": 80,
    "savefig.dpi": 80,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "font.size": 10,
}


def use_defaults() -> None:
    """Apply the course's matplotlib style and, inside IPython, PNG inline figures."""
    matplotlib.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("png")


def attainable(intensity: np.ndarray | float, peak_gflops: float,
               bandwidth_gbps: float) -> np.ndarray:
    """Roofline: the best GFLOP/s at an arithmetic intensity (FLOP/byte), min(peak, I x BW)."""
    return np.minimum(peak_gflops, np.asarray(intensity, dtype=float) * bandwidth_gbps)


def over_roof(points: Iterable[tuple[str, float, float]], peak_gflops: float,
              bandwidth_gbps: float, tolerance: float = 0.1) -> list[tuple[str, float]]:
    """The points more than ``tolerance`` above their roof, as (name, rate / roof): a point
    there means the roof was the wrong model for it (a working set that stayed in a cache, a
    core boosting above the clock the peak assumed), and the cell that draws it should say so."""
    out = []
    for name, x, y in points:
        ceiling = float(attainable(x, peak_gflops, bandwidth_gbps))
        if y > (1 + tolerance) * ceiling:
            out.append((name, y / ceiling))
    return out


def roofline(peak_gflops: float, bandwidth_gbps: float,
             points: Iterable[tuple[str, float, float]] = (), *, peak_label: str = "peak",
             extra_roofs: Sequence[tuple[str, float]] = (), title: str = "",
             ax: plt.Axes | None = None) -> plt.Axes:
    """Draw a roofline and place measured operations on it.

    ``points`` are (name, intensity in FLOP/byte, measured GFLOP/s). ``extra_roofs`` adds
    horizontal lines such as a bf16 peak. Left of the ridge (peak / bandwidth) an op is
    bound by memory, right of it by compute.
    """
    points = list(points)
    if ax is None:
        _, ax = plt.subplots()
    xs = [p[1] for p in points] or [1.0]
    ridge = peak_gflops / bandwidth_gbps
    lo = min(min(xs), ridge) / 4
    hi = max(max(xs), ridge) * 4
    grid = np.geomspace(lo, hi, 200)
    ax.loglog(grid, attainable(grid, peak_gflops, bandwidth_gbps), color="black", lw=2,
              label=f"roof: {peak_label} {peak_gflops:,.0f} GFLOP/s, memory {bandwidth_gbps:,.0f} GB/s")
    for name, value in extra_roofs:
        ax.axhline(value, color="gray", ls="--", lw=1)
        ax.annotate(name, (lo, value), textcoords="offset points", xytext=(4, 3), fontsize=8)
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.1f} FLOP/B", (ridge, peak_gflops / 30), rotation=90,
                textcoords="offset points", xytext=(3, 0), fontsize=8)
    for i, (name, x, y) in enumerate(points):
        ax.plot(x, y, "o")
        # alternate labels below and above the dots: neighbouring points are often close
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, -11 if i % 2 else 5),
                    fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title or "Roofline")
    ax.legend(loc="lower right", fontsize=8)
    return ax


def autograd_graph(root: Any, names: dict[int, str] | None = None,
                   ax: plt.Axes | None = None) -> plt.Axes:
    """Draw the backward graph that ends in ``root`` (a tensor's ``grad_fn``).

    Nodes are laid out by their distance from the output, the output at the top; leaves
    (``AccumulateGrad``) are labelled with the tensor's name from ``names`` (id -> name).
    """
    names = names or {}
    depth: dict[Any, int] = {root: 0}
    edges: list[tuple[Any, Any]] = []
    frontier = [root]
    while frontier:  # breadth-first: a node's depth is its longest path from the output
        node = frontier.pop(0)
        for child, _ in getattr(node, "next_functions", ()):
            if child is None:
                continue
            edges.append((node, child))
            if depth.get(child, -1) < depth[node] + 1:
                depth[child] = depth[node] + 1
                frontier.append(child)
    levels: dict[int, list[Any]] = {}
    for node, d in depth.items():
        levels.setdefault(d, []).append(node)
    pos = {node: ((i + 1) / (len(row) + 1), -d) for d, row in levels.items()
           for i, node in enumerate(row)}
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 0.9 * (len(levels) + 1)))
    for parent, child in edges:
        (x0, y0), (x1, y1) = pos[parent], pos[child]
        ax.annotate("", (x1, y1 + 0.18), (x0, y0 - 0.18),
                    arrowprops={"arrowstyle": "->", "color": "gray"})
    for node, (x, y) in pos.items():
        label = type(node).__name__
        variable = getattr(node, "variable", None)
        if variable is not None:
            label = f"leaf: {names.get(id(variable), 'tensor')}"
        ax.text(x, y, label, ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round", "fc": "#e8f0fe" if variable is None else "#fde8e8"})
    ax.set_xlim(0, 1)
    ax.set_ylim(-len(levels) + 0.5, 0.5)
    ax.axis("off")
    ax.set_title("backward graph (output at the top, gradients flow down)")
    return ax
