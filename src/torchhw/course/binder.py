"""Binder, simulated here: what repo2docker would do with binder/, in a fresh virtual env.

    torchhw binder            # build/binder-sim/: install, postBuild, run notebook 00, check Lab

There is no docker here to run repo2docker itself, so this does its steps for a pip project
with a binder/ folder: a new environment with the Python of ``binder/runtime.txt``,
``pip install -r binder/requirements.txt``, then ``binder/postBuild`` from the repository's
root. It then executes a notebook on that environment's own kernel and starts its JupyterLab
to check that it opens at notebooks/ with the news prompt off.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

from .paths import find_root, run_step_command, step


class BinderError(RuntimeError):
    """A step of the simulated Binder build failed: which one, and its output."""


def runtime_python(binder: Path) -> str:
    """The 'X.Y' of binder/runtime.txt ('python-3.11')."""
    found = re.fullmatch(r"python-(\d+\.\d+)\s*", (binder / "runtime.txt").read_text())
    if not found:
        raise BinderError(f"{binder / 'runtime.txt'} must hold one line like 'python-3.11'")
    return found.group(1)


def check_lab(python: str, echo, root: Path) -> None:
    """Start the environment's Lab at the repository's root as Binder does; check its settings."""
    from .lab import LabServer

    with tempfile.TemporaryDirectory() as scratch:
        with LabServer(root, Path(scratch), python=python, preferred_dir=False) as lab:
            page = urllib.request.urlopen(lab.url("lab")).read().decode()
            config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>',
                                          page, re.S).group(1))
            if config.get("preferredPath", "").strip("/") != "notebooks":
                raise BinderError(f"Lab does not open at notebooks/ (preferredPath "
                                  f"{config.get('preferredPath')!r}): postBuild's "
                                  f"`torchhw lab --configure --server` did not take effect")
            plugin = "@jupyterlab/apputils-extension:notification"
            settings = json.loads(urllib.request.urlopen(
                lab.url(f"lab/api/settings/{plugin}")).read())
            news = settings["schema"]["properties"]["fetchNews"]["default"]
            if news != "false":
                raise BinderError(f"the news prompt is not off (fetchNews default {news!r})")
    echo("  JupyterLab: opens at notebooks/, news off", flush=True)


def simulate(workdir: Path | None = None, notebook: str = "00_hardware_tour.ipynb",
             echo=print, root: Path | None = None) -> float:
    """Run the simulation in ``workdir`` (default build/binder-sim); return its seconds."""
    start = time.perf_counter()
    root = find_root(root)
    binder = root / "binder"
    workdir = workdir or root / "build" / "binder-sim"
    version = runtime_python(binder)
    python = shutil.which(f"python{version}")
    if not python:
        raise BinderError(f"binder/runtime.txt asks for Python {version}, and there is no "
                          f"python{version} on PATH here to simulate it with")
    venv = workdir / "venv"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               # the PyTorch index is unreachable here: fail over at once instead of retrying
               PIP_RETRIES="0", PIP_DISABLE_PIP_VERSION_CHECK="1", TQDM_DISABLE="1")
    echo(f"Binder simulation in {workdir} (Python {version})", flush=True)
    step("fresh virtual environment", [python, "-m", "venv", str(venv)], env, root, echo)
    step("pip install -r binder/requirements.txt",
          [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "-r",
           str(binder / "requirements.txt")], env, root, echo)
    step("binder/postBuild", [str(binder / "postBuild")], env, root, echo)
    out = workdir / notebook
    step(f"papermill {notebook}",
          [str(bin_dir / "papermill"), str(root / "notebooks" / notebook), str(out),
           "-k", "python3", "--cwd", str(root / "notebooks"), "--execution-timeout", "600",
           "--no-progress-bar"], env, root, echo)
    check_lab(str(bin_dir / "python"), echo, root)
    seconds = time.perf_counter() - start
    echo(f"Binder simulation passed in {seconds:.1f} s", flush=True)
    return seconds


def main() -> int:
    return run_step_command("binder", simulate, (BinderError,))
