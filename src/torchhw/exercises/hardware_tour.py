"""Exercises of notebook 00 (hardware tour): rates, arithmetic intensity, the roofline."""

from __future__ import annotations

from typing import Any, Callable

from ..checks import close, exercise, hints_for, why
from ..i18n import _, tr


def _call(name: str, *args: Any) -> str:
    """A call as Python writes it, e.g. ``gflops(1024, 1024, 1024, 0.0125)``: code, the same in
    every language, so a name for close() that needs no translation."""
    return f"{name}({', '.join(str(arg) for arg in args)})"


@exercise(1, "GFLOP/s from a timing",
          hint="count the floating-point operations the product does, then turn the count and "
               "the time into a rate. How many operations is one step of a dot product?",
          more="an (m x k) @ (k x n) product does m*n dot products of length k, and each "
               "step of a dot product is one multiply and one add: 2*m*k*n FLOP. Divide by "
               "the seconds for FLOP/s, and by 1e9 for GFLOP/s.")
def check_1(gflops: Callable[[int, int, int, float], float]) -> str:
    for m, k, n, seconds in [(1024, 1024, 1024, 0.0125), (64, 4096, 256, 0.001), (1, 1, 1, 1e-9)]:
        want = 2 * m * k * n / seconds / 1e9
        got = gflops(m, k, n, seconds)
        close(got, want, _call("gflops", m, k, n, seconds), extra=why(
            got, want,
            (m * n * (2 * k - 1) / seconds / 1e9, "that counts the k - 1 additions of a dot product "
             "exactly; rates and peaks are quoted counting each multiply-add as 2 FLOP, 2*m*k*n, "
             "and so does this course"),
            (want / 2, "half the answer: a multiply-add is two FLOP, a multiply and an add"),
            (want * 1e9, "that is FLOP/s: divide by 1e9 for GFLOP/s"),
            (2 * m * k * n * seconds / 1e9, "multiplied by the time: a rate divides by it"),
            (want / 2 * 1e9, "FLOP/s, and half of them: a multiply-add is two FLOP"),
            (want * 1e9 / 2**30, "giga in a rate is 1e9, not 2**30: GFLOP/s is 1e9 FLOP per "
                                 "second"),
            (2 * m * k * n // seconds // 1e9, "rounded down: // is floor division, / keeps the "
                                              "fraction"),
            (2 * n**3 / seconds / 1e9, "that is the count of a square n x n product: an "
                                       "(m x k) @ (k x n) one does m*k*n multiply-adds")))
    return "Keep this formula: every GFLOP/s in this course comes from it."


@exercise(2, "arithmetic intensity of a matmul",
          hint="intensity is work over traffic: count the FLOP of the product and the bytes of "
               "every matrix that must cross from memory once.",
          more="count the FLOP (2n^3) and the bytes that must cross from memory at least "
               "once: A and B read, C written, each n*n elements of bytes_per_element. "
               "Intensity = 2n^3 / (3 * n * n * bytes_per_element).")
def check_2(intensity: Callable[[int, int], float]) -> str:
    for n, size in [(1024, 4), (256, 2), (4096, 8)]:
        want = 2 * n**3 / (3 * n * n * size)
        got = intensity(n, size)
        close(got, want, _call("intensity", n, size), extra=why(
            got, want,
            # n/6, section 7's fp32 intensity, comes first: for 2-byte elements it is also half
            (2 * n / (3 * 4), "that is the fp32 answer, n/6: it takes 4 bytes per element "
                              "whatever the dtype; use bytes_per_element"),
            (want / 2, "half the answer: is a multiply-add one FLOP or two?"),
            (want * size, "FLOP per element, not per byte: multiply the elements by "
                          "bytes_per_element"),
            (want * 3 / 2, "that counts two matrices crossing memory; C is written too"),
            (want * 3, "that counts one matrix crossing memory; A and B are read and C written")))
    return "It grows with n: large matmuls are compute-bound, small ones are not."


@exercise(3, "the roofline bound",
          hint="two things limit a kernel: the arithmetic it can do, and the bytes memory can "
               "feed it. Which one wins?",
          more="a kernel can go no faster than the compute peak, nor faster than memory can "
               "feed it: intensity (FLOP/byte) x bandwidth (GB/s). Take the smaller: "
               "min(peak, intensity * bandwidth).")
def check_3(attainable: Callable[[float, float, float], float]) -> str:
    # the ridge of the first cases is at 9.5 FLOP/byte: cases far from it, at it, and at 0.5x,
    # 0.95x, 1.05x and 2x of it, so that a switch between the roofs in the wrong place shows
    cases = [(0.083, 190, 20), (170, 190, 20), (9.5, 190, 20), (4.75, 190, 20), (9.0, 190, 20),
             (10.0, 190, 20), (19.0, 190, 20), (2, 1e6, 3e3), (2, 1e15, 3e3)]
    answers = [attainable(*case) for case in cases]
    mistakes = {  # judged over every case at once: one case alone cannot tell some of them apart
        _("the compute peak alone: at low intensity memory cannot feed it"):
            lambda i, p, b: p,
        _("the memory roof alone: no kernel beats the compute peak"):
            lambda i, p, b: i * b,
        _("the larger of the two roofs: a kernel is held back by the smaller"):
            lambda i, p, b: max(p, i * b),
        _("GB/s and GFLOP/s already carry the 1e9: intensity x bandwidth needs no factor"):
            lambda i, p, b: min(p, i * b * 1e9),
        _("FLOP/byte times bytes/s gives FLOP/s: multiply by the bandwidth"):
            lambda i, p, b: min(p, i / b),
    }
    wrong_at = [k for k, (case, got) in enumerate(zip(cases, answers))
                if not _close_enough(got, min(case[1], case[0] * case[2]))]
    if wrong_at:
        named = next((reason for reason, f in mistakes.items()
                      if all(_close_enough(got, f(*case)) for case, got in zip(cases, answers))), "")
        if not named and all(_close_enough(answers[k], max(cases[k][1], cases[k][0] * cases[k][2]))
                             for k in wrong_at):
            # right far from the ridge, the other roof near it: the switch is misplaced
            named = _("the switch between the roofs is in the wrong place: they cross at the "
                      "ridge, intensity = peak / bandwidth, and left of it the memory roof is "
                      "the lower one")
        case = cases[wrong_at[0]]
        close(answers[wrong_at[0]], min(case[1], case[0] * case[2]), _call("attainable", *case),
              extra=tr(" ({reason})", reason=named) if named else "")
    return "Left of the ridge an op waits for memory; right of it, for arithmetic."


def _close_enough(got: Any, want: float) -> bool:
    try:
        return abs(float(got) - want) <= 1e-3 * abs(want)
    except (TypeError, ValueError):
        return False


CHECKS = {1: check_1, 2: check_2, 3: check_3}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: lambda m, k, n, seconds: 2 * m * k * n / seconds / 1e9,
    2: lambda n, bytes_per_element: 2 * n**3 / (3 * n * n * bytes_per_element),
    3: lambda intensity, peak, bandwidth: min(peak, intensity * bandwidth),
}

WRONG: dict[int, list[Any]] = {
    # the hint's warning: a multiply-add is two FLOP; then units and the rate upside down
    1: [lambda m, k, n, s: m * k * n / s / 1e9, lambda m, k, n, s: 2 * m * k * n * s / 1e9,
        lambda m, k, n, s: 2 * m * k * n / s,
        lambda m, k, n, s: m * n * (2 * k - 1) / s / 1e9,     # exact, not the convention
        lambda m, k, n, s: 2 * m * k * n / s / 2**30,         # binary giga
        lambda m, k, n, s: 2 * m * k * n // s // 1e9,         # floor division
        lambda m, k, n, s: 2 * n**3 / s / 1e9],               # a square product assumed
    # the task's rule (A, B and C each cross once) broken by counting only the inputs
    2: [lambda n, b: n**3 / (3 * n * n * b), lambda n, b: 2 * n**3 / (3 * n * n),
        lambda n, b: 2 * n**3 / (2 * n * n * b),
        lambda n, b: n / 6],                                    # section 7's fp32 value copied
    # the hint's warning: the smaller roof, not the larger
    3: [lambda i, p, b: max(p, i * b), lambda i, p, b: i * b, lambda i, p, b: p,
        lambda i, p, b: min(p, i * b * 1e9),                    # a unit slip: GB/s as B/s
        # the switch between the roofs misplaced: at half, twice, 0.9x the ridge
        lambda i, p, b: p if i >= 0.5 * p / b else i * b,
        lambda i, p, b: p if i >= 2 * p / b else i * b,
        lambda i, p, b: p if i >= 0.9 * p / b else i * b],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda m, k, n, seconds: (m * n * (2 * k)) / (seconds * 1e9)],
    2: [lambda n, b: (2 * n**3) / (3 * b * n**2)],
    3: [lambda i, p, b: p if i * b > p else i * b,
        lambda i, p, b: p if i >= p / b else i * b],             # the switch at the ridge itself
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
