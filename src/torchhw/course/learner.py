"""The learner's install, checked: ``make learner`` (``torchhw learner``).

What a reader gets from ``pip install torchhw`` (Colab's setup cell does exactly that) must be
enough for every notebook, and must not drag in the course's tooling. In a fresh virtual
environment under build/learner-venv this installs the package without extras, checks that
papermill, nbclient, nbconvert, JupyterLab and ipykernel did not come with it, imports every
module outside ``torchhw.course``, then installs papermill and ipykernel apart (a reader's
own Jupyter would bring a kernel) and runs notebook 01 with them.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from .paths import find_root, run_step_command, step

TOOLING = ("papermill", "nbclient", "nbconvert", "jupyterlab", "ipykernel", "nbval")
IMPORT_ALL = """
import importlib, importlib.util, pkgutil, torchhw
names = sorted(m.name for m in pkgutil.walk_packages(torchhw.__path__, "torchhw.")
               if not m.name.startswith("torchhw.course") and m.name != "torchhw.__main__")
for name in names:
    importlib.import_module(name)
present = [t for t in {tooling!r} if importlib.util.find_spec(t)]
assert not present, f"the learner's install brought the course tooling: {{present}}"
print(f"{{len(names)}} modules import with only the learner's dependencies")
"""


def check(root: Path | None = None, echo=print) -> float:
    """Build the environment afresh and run the checks; return the seconds it took."""
    root = find_root(root)
    start = time.perf_counter()
    venv = root / "build" / "learner-venv"
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    constraints = ["-c", str(root / "constraints.txt")]
    step("fresh virtual environment", [sys.executable, "-m", "venv", str(venv)], env, root, echo)
    step("pip install the package, no extras",
          [str(python), "-m", "pip", "install", "--quiet", *constraints, str(root)], env, root, echo)
    echo("  " + step("import every learner module", [str(python), "-c",
                      IMPORT_ALL.format(tooling=TOOLING)], env, root, echo).strip(), flush=True)
    step("pip install papermill ipykernel (apart)",
          [str(python), "-m", "pip", "install", "--quiet", *constraints, "papermill", "ipykernel"],
          env, root, echo)
    out = venv / "01_tensors.ipynb"
    step("papermill 01_tensors", [str(venv / "bin" / "papermill"), "01_tensors.ipynb", str(out),
                                  "-k", "python3", "--cwd", ".", "--no-progress-bar"],
          env, root / "notebooks", echo)
    seconds = time.perf_counter() - start
    echo(f"the learner's install runs the course: {seconds:.0f} s", flush=True)
    return seconds


def main() -> int:
    return run_step_command("learner", check)
