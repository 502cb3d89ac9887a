"""The tests still catch what they exist to catch: a cell edited without regenerating its
outputs, and a claim that stops holding in a cell whose printed output nbval ignores.

Each runs pytest in a child process on a copy, the way `make test` would see it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from conftest import NOTEBOOKS, ROOT


def pytest_in_child(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0",
                           "-q", *args], cwd=ROOT, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=240)


def test_editing_a_cell_without_regenerating_fails_the_structure_test(tmp_path):
    shutil.copy(NOTEBOOKS / "01_tensors.ipynb", tmp_path)
    # the committed copy passes this very check in the suite itself (test_structure.py)
    nb = nbformat.read(tmp_path / "01_tensors.ipynb", as_version=4)
    cell = next(c for c in nb.cells[4:] if c.cell_type == "code")
    cell.source += "\n# an edit, outputs not regenerated"
    nbformat.write(nb, tmp_path / "01_tensors.ipynb")
    run = pytest_in_child("tests/test_structure.py", "-k", "fresh_run",
                          env={"TORCHHW_NOTEBOOKS": str(tmp_path)})
    assert run.returncode == 1 and "code changed since the outputs were made" in run.stdout


def test_a_broken_claim_fails_even_where_nbval_ignores_the_printed_figure(tmp_path):
    # a cell as the course writes them: machine-dependent output (ignored), the claim asserted
    cell = new_code_cell('import os\nspeedup = float(os.environ["DEMO_SPEEDUP"])\n'
                         'print(f"measured speed-up {speedup:.2f}x")\n'
                         'assert speedup > 1, "the prose says this is faster: it was not"')
    cell.metadata["tags"] = ["nbval-ignore-output"]
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text="measured speed-up 3.10x\n")]
    cell.execution_count = 1
    nb = new_notebook(cells=[cell], metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
    path = tmp_path / "claim.ipynb"
    nbformat.write(nb, path)

    def nbval(speedup: str) -> subprocess.CompletedProcess:
        # strict nbval as `make test` runs it, from the copy's own folder
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               "--nbval", "--nbval-current-env", path.name], cwd=tmp_path,
                              env={**os.environ, "DEMO_SPEEDUP": speedup},
                              capture_output=True, text=True, timeout=240)

    holds = nbval("1.7")
    assert holds.returncode == 0, holds.stdout[-2000:]  # another figure: not compared
    broken = nbval("0.8")
    assert broken.returncode == 1 and "the prose says this is faster" in broken.stdout
