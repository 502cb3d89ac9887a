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
