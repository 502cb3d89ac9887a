"""Shared fixtures. Notebook paths, and the course's own folder for tests that run it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# notebook kernels inherit this: a FutureWarning, or a DeprecationWarning from a notebook's own
# code, is an error in the tests (torchhw.notebook.strict_warnings)
os.environ["TORCHHW_STRICT_WARNINGS"] = "1"
# pytest-xdist runs two notebooks side by side (-n 2): each kernel, and each worker, gets its
# share of the cores, so two kernels never run more threads than there are cores (OpenMP
# threads that outnumber the cores spin and slow everyone). The thread profiles of
# `torchhw portability` set their own count; `make run` uses torch's default.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(max(1, (_CORES or 1) // _WORKERS))
# another folder of notebooks can be checked against the same rules (tests/test_verification.py)
NOTEBOOKS = Path(os.environ.get("TORCHHW_NOTEBOOKS", ROOT / "notebooks"))


@pytest.fixture(scope="session")
def notebooks_dir() -> Path:
    return NOTEBOOKS


def notebook_paths() -> list[Path]:
    from torchhw.course.paths import discover

    return discover(NOTEBOOKS)


LEFTOVER_MARKS = ("torch.distributed.run", "bin/torchrun", "fixtures_distributed",
                  "distributed/train.py", "torchhw.distributed.guard", "multiprocessing.spawn",
                  "multiprocessing.forkserver",
                  "ipykernel_launcher", "jupyter-lab", "chrom")


def leftovers() -> list:
    """Processes this test run started that are still alive (multiprocessing's resource
    tracker and forkserver excepted: they belong to the test process and exit with it)."""
    import psutil

    from torchhw.distributed import is_helper

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and not is_helper(p) \
                    and any(mark in cmd for mark in LEFTOVER_MARKS):
                found.append(p)
        except psutil.Error:
            pass
    return found


def pytest_sessionfinish(session, exitstatus):
    """The default run ends by checking that nothing it started is still running."""
    import psutil

    left = leftovers()
    if left:
        _, still = psutil.wait_procs(left, timeout=5)  # kernels may be shutting down
        if still:
            lines = "\n".join(f"  pid {p.pid}: {' '.join(p.cmdline())[:160]}" for p in still)
            print(f"\nERROR: processes started by the tests are still running:\n{lines}")
            for p in still:
                p.kill()
            session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say how many browser tests ran: a run that left them out, or skipped them, says so."""
    outcomes: dict[str, int] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            if "browser" in getattr(report, "keywords", {}) and report.when != "teardown":
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    if outcomes:
        ran = sum(n for o, n in outcomes.items() if o != "skipped")
        detail = ", ".join(f"{n} {o}" for o, n in outcomes.items())
        terminalreporter.write_line(f"browser tests: {ran} ran ({detail})")
    elif "not browser" in (config.option.markexpr or ""):
        terminalreporter.write_line("browser tests: none in this run (`make test` runs them "
                                    "next; alone: `make browser`)")
