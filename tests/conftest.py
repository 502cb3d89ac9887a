"""Shared fixtures. Notebook paths, and the course's own folder for tests that run it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


@pytest.fixture(scope="session")
def notebooks_dir() -> Path:
    return NOTEBOOKS


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


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
