"""Exercises of notebook 00 (hardware tour): rates, arithmetic intensity, the roofline."""

from __future__ import annotations

from typing import Any, Callable

from ..checks import Wrong, close, exercise


@exercise(1, "GFLOP/s from a timing",
          hint="an (m x k) @ (k x n) product does m*n dot products of length k, and each "
               "step of a dot product is one multiply and one add: 2*m*k*n FLOP.")
def check_1(gflops: Callable[[int, int, int, float], float]) -> str:
    for m, k, n, seconds in [(1024, 1024, 1024, 0.0125), (64, 4096, 256, 0.001), (1, 1, 1, 1e-9)]:
        close(gflops(m, k, n, seconds), 2 * m * k * n / seconds / 1e9,
              f"gflops({m}, {k}, {n}, {seconds})")
    return "Keep this formula: every GFLOP/s in this course comes from it."


@exercise(2, "arithmetic intensity of a matmul",
          hint="count the FLOP (2n^3) and the bytes that must cross from memory at least "
               "once: A and B read, C written, each n*n elements of bytes_per_element.")
def check_2(intensity: Callable[[int, int], float]) -> str:
    for n, size in [(1024, 4), (256, 2), (4096, 8)]:
        want = 2 * n**3 / (3 * n * n * size)
        got = intensity(n, size)
        if abs(float(got) - want / 2) <= 1e-3 * want:
            raise Wrong(f"intensity({n}, {size}) = {got:g} is half the answer: is a "
                        "multiply-add one FLOP or two?")
        close(got, want, f"intensity({n}, {size})")
    return "It grows with n: large matmuls are compute-bound, small ones are not."


@exercise(3, "the roofline bound",
          hint="a kernel can go no faster than the compute peak, nor faster than memory can "
               "feed it: intensity (FLOP/byte) x bandwidth (GB/s). Take the smaller.")
def check_3(attainable: Callable[[float, float, float], float]) -> str:
    for intensity, peak, bw in [(0.083, 190, 20), (170, 190, 20), (9.5, 190, 20), (2, 1e6, 3e3)]:
        close(attainable(intensity, peak, bw), min(peak, intensity * bw),
              f"attainable({intensity}, {peak}, {bw})")
    return "Left of the ridge an op waits for memory; right of it, for arithmetic."


CHECKS = {1: check_1, 2: check_2, 3: check_3}

SOLUTIONS: dict[int, Any] = {
    1: lambda m, k, n, seconds: 2 * m * k * n / seconds / 1e9,
    2: lambda n, bytes_per_element: 2 * n**3 / (3 * n * n * bytes_per_element),
    3: lambda intensity, peak, bandwidth: min(peak, intensity * bandwidth),
}

WRONG: dict[int, list[Any]] = {
    1: [lambda m, k, n, s: m * k * n / s / 1e9, lambda m, k, n, s: 2 * m * k * n * s / 1e9],
    2: [lambda n, b: n**3 / (3 * n * n * b), lambda n, b: 2 * n**3 / (3 * n * n)],
    3: [lambda i, p, b: max(p, i * b), lambda i, p, b: i * b],
}
