"""Shared fixtures. Notebook paths, and the course's own folder for tests that run it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# notebook kernels inherit this: a FutureWarning, or a DeprecationWarning from a notebook's own
# code, is an error in the tests (torchhw.notebook.strict_warnings)
os.environ["TORCHHW_STRICT_WARNINGS"] = "1"
# another folder of notebooks can be checked against the same rules (tests/test_verification.py)
NOTEBOOKS = Path(os.environ.get("TORCHHW_NOTEBOOKS", ROOT / "notebooks"))


@pytest.fixture(scope="session")
def notebooks_dir() -> Path:
    return NOTEBOOKS


def notebook_paths() -> list[Path]:
    from torchhw.course.paths import discover

    return discover(NOTEBOOKS)


LEFTOVER_MARKS = ("torch.distributed.run", "fixtures_distributed", "multiprocessing.spawn",
                  "ipykernel_launcher", "jupyter-lab", "chrom")


def leftovers() -> list:
    """Processes this test run started that are still alive (multiprocessing's resource
    tracker excepted: it belongs to the test process and exits with it)."""
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in cmd \
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
