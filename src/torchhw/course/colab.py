"""Colab, reproduced here: the setup cell's pip line in a venv holding Colab's versions.

    torchhw colab      # build/colab-venv: nothing preinstalled is upgraded, and 04 runs

Colab imports ipywidgets when its kernel starts. If the setup cell's ``pip install`` upgraded
it (or ipykernel, IPython, torch, numpy), pip would ask for a runtime restart in the very first
cell. The package's floors must therefore be met by what Colab already has. This builds a
virtual environment with the versions in :data:`COLAB` (the learner's dependencies, the kernel
and the widgets as Colab ships them), runs the setup cell's own pip line with the package from
this checkout instead of from GitHub, compares every installed version before and after, and
then runs notebook 04, whose learning-rate explorer is the course's widget, on that
environment's kernel (ipywidgets 7 there, where the course is tested with 8).

Two differences from Colab are unavoidable here: Colab runs Python 3.12 and a CUDA build of
torch; this runs a Python 3.11 or 3.12 found here (.venv's own where it is one of them) and the
build of torch that .venv has (:func:`colab_versions` says which). Colab's versions have no
wheels for Python 3.13 and later. The environment is kept in build/colab-venv and
rebuilt when :data:`COLAB` or the torch changes; the package is uninstalled before each check.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .paths import CourseError, find_root, run_step_command, step

# What a Colab runtime has preinstalled, of what the course's package and its kernel depend on,
# as users reported it (pip's resolver warnings about google-colab's own pins, `pip list`
# printouts), not read off a live runtime here: ipywidgets 7.7.1, IPython 7.34.0 and notebook
# 6.5.5 were pinned by google-colab in 2024; ipykernel 6.17.1 replaced 5.5.6 in 2025 runtimes.
# Update them from `pip list` on a current runtime. Whatever else these need, pip picks here.
COLAB = {
    "ipywidgets": "7.7.1", "ipykernel": "6.17.1", "ipython": "7.34.0",
    "notebook": "6.5.5",  # the classic server, which Colab's widgets 7 require
    "numpy": "2.0.2", "matplotlib": "3.10.0", "psutil": "5.9.5", "scikit-learn": "1.6.1",
    "PyYAML": "6.0.2",
}
NOTEBOOK = "04_optim.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def colab_versions(root: Path) -> dict[str, str]:
    """:data:`COLAB` plus the torch to stand in for Colab's: the one constraints.txt pins.

    Colab's own torch is a CUDA build for Python 3.12, which this machine cannot install; the
    pinned CPU build meets the same floor, and the check is that pip keeps it.
    """
    pinned = re.search(r"^torch==([\w.]+)", (root / "constraints.txt").read_text(), re.M)
    if not pinned:
        raise CourseError("constraints.txt pins no torch")
    return {**COLAB, "torch": pinned.group(1)}


def setup_pip_line(notebook: Path) -> str:
    """The ``%pip install ...`` line of a notebook's setup cell (its second cell)."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    for line in nb.cells[1].source.splitlines():
        if line.strip().startswith("%pip install"):
            return line.strip()
    raise CourseError(f"{notebook.name}: its setup cell has no %pip install line")


def pip_argv(line: str, root: Path) -> list[str]:
    """The setup cell's pip arguments, with the package taken from ``root`` instead of GitHub."""
    import shlex

    args = shlex.split(line.removeprefix("%pip").strip())
    out = []
    for arg in args:
        if arg.startswith("torchhw @ git+"):
            arg = f"torchhw @ {root.as_uri()}"
        out.append(arg)
    if not any(a.startswith("torchhw @ ") for a in out):
        raise CourseError(f"the setup cell's pip line installs no 'torchhw @ git+...': {line}")
    return out


def package_copy(root: Path, into: Path) -> Path:
    """The package's sources, copied: pip builds a local folder in place, and the checkout
    must not get build/ files from it (nor race with another install building there)."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, into / name)
    shutil.copytree(root / "src", into / "src",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    return into


def frozen(python: Path) -> dict[str, str]:
    """Installed distribution -> version, in the environment of ``python``."""
    from .bootstrap import installed_versions

    return installed_versions(python)


def changes(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str]]:
    """What a pip run changed in what was installed, and what it added (the package aside).

    A change to anything preinstalled is what makes Colab ask for a restart; an addition is
    only something this stand-in for Colab lacked.
    """
    changed, added = [], []
    for name in sorted(set(before) | set(after)):
        if name == "torchhw":
            continue
        old, new = before.get(name), after.get(name)
        if old is None and new is not None:
            added.append(f"{name} {new}")
        elif old != new:
            changed.append(f"{name}: {old} -> {new or 'removed'}")
    return changed, added


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "TORCHHW_STRICT_WARNINGS")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", TQDM_DISABLE="1")
    return env


class NoColabPython(CourseError):
    """No Python of the versions Colab's packages have wheels for is installed here."""


def colab_python() -> str:
    """A Python 3.11 or 3.12 to build the Colab-like environment with: this one if it is."""
    if sys.version_info[:2] in ((3, 11), (3, 12)):
        return sys.executable
    for name in ("python3.12", "python3.11"):
        found = shutil.which(name)
        if found and subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0:
            return found
    raise NoColabPython(f"the Colab check needs Python 3.11 or 3.12 (Colab runs 3.12, and its "
                        f"numpy 2.0.2 has no wheels for {sys.version_info[0]}."
                        f"{sys.version_info[1]}): install python3.12 to run it")


def _own_torch() -> str:
    import importlib.metadata

    return importlib.metadata.version("torch")


def build(root: Path, venv: Path, echo=print) -> Path:
    """The Colab-like environment at ``venv``, built anew when its versions changed."""
    versions = colab_versions(root)
    build_of_torch = _own_torch()  # '2.13.0+cpu' or '2.13.0': rebuilt when .venv switches
    digest = hashlib.sha256(json.dumps([versions, build_of_torch], sort_keys=True).encode()
                            ).hexdigest()[:16]
    python = venv / "bin" / "python"
    stamp = venv / "colab-versions.json"
    if python.exists() and stamp.exists() and json.loads(stamp.read_text()).get("digest") == digest:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    env = _env()
    step("fresh virtual environment", [colab_python(), "-m", "venv", str(venv)], env, root, echo)
    # torch in the build this checkout's own environment has: on Linux x86-64 PyPI's default
    # is the CUDA build, several GB, which a CPU-only reader chose not to download
    from . import bootstrap

    torch_version = versions.pop("torch")
    if bootstrap.torch_flavour(_own_torch()) == "cpu" and bootstrap.cpu_build_exists():
        step("torch, CPU build", [str(python), "-m", "pip", "install", "--quiet",
                                  *bootstrap.cpu_torch(torch_version)], env, root, echo)
    versions["torch"] = torch_version
    step("Colab's preinstalled versions",
         [str(python), "-m", "pip", "install", "--quiet",
          *(f"{name}=={version}" for name, version in versions.items())], env, root, echo)
    stamp.write_text(json.dumps({"digest": digest, "versions": versions}, indent=1) + "\n")
    return python


def run_notebook(python: Path, notebook: Path, workdir: Path, timeout: int = 600):
    """Execute ``notebook`` on the kernel of ``python``'s environment; the executed notebook."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    kernels = workdir / "kernels"
    spec = kernels / "colab"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python",
        "env": {"TORCHHW_STRICT_WARNINGS": "0", "TQDM_DISABLE": "1",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1"}}))
    km = KernelManager(kernel_name="colab",
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    nb = nbformat.read(notebook, as_version=4)
    try:
        NotebookClient(nb, km=km, timeout=timeout,
                       resources={"metadata": {"path": str(notebook.parent)}}).execute()
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    return nb


def widget_outputs(nb) -> list[int]:
    """Indices of the code cells that displayed an ipywidgets view and a figure below it."""
    found = []
    for i, cell in enumerate(nb.cells):
        kinds = [set(o.get("data", {})) for o in cell.get("outputs", [])]
        if any(WIDGET_VIEW in k for k in kinds) and any("image/png" in k for k in kinds):
            found.append(i)
    return found


def check(root: Path | None = None, echo=print) -> dict:
    """The whole check; raise :class:`CourseError` on an upgrade or a failing notebook."""
    start = time.perf_counter()
    root = find_root(root)
    workdir = root / "build" / "colab"
    venv = root / "build" / "colab-venv"
    workdir.mkdir(parents=True, exist_ok=True)
    echo(f"Colab-like environment in {venv}", flush=True)
    python = build(root, venv, echo)
    env = _env()
    subprocess.run([str(python), "-m", "pip", "uninstall", "--quiet", "-y", "torchhw"],
                   env=env, capture_output=True)
    before = frozen(python)
    line = setup_pip_line(root / "notebooks" / NOTEBOOK)
    args = pip_argv(line, package_copy(root, workdir / "package"))
    step(f"the setup cell: {line}", [str(python), "-m", "pip", *args], env, workdir, echo)
    after = frozen(python)
    changed, added = changes(before, after)
    if "torchhw" not in after:
        raise CourseError("the setup cell's pip line did not install torchhw")
    if changed:
        shutil.rmtree(venv, ignore_errors=True)  # rebuilt next time: it no longer is Colab's
        raise CourseError("the setup cell's pip line changed what Colab has preinstalled, so "
                          "Colab would ask for a restart:\n  " + "\n  ".join(changed) +
                          "\nlower the floors in pyproject.toml until the versions on the left "
                          "meet them")
    t0 = time.perf_counter()
    nb = run_notebook(python, root / "notebooks" / NOTEBOOK, workdir)
    cells = widget_outputs(nb)
    if not cells:
        raise CourseError(f"{NOTEBOOK} ran, but no cell showed a widget above a figure")
    echo(f"  {NOTEBOOK} on the Colab-like kernel: {time.perf_counter() - t0:.1f} s, widget "
         f"in cell {cells[0]}", flush=True)
    seconds = time.perf_counter() - start
    versions = {name: after.get(name.lower().replace("_", "-")) for name in
                ("ipywidgets", "ipykernel", "torch", "numpy")}
    echo(f"Colab check passed in {seconds:.0f} s: nothing upgraded ({', '.join(f'{k} {v}' for k, v in versions.items())})",
         flush=True)
    if added:
        echo(f"  added, which this stand-in for Colab lacked: {', '.join(added)}", flush=True)
    return {"seconds": seconds, "versions": versions, "widget_cells": cells, "changed": changed,
            "added": added}


def main() -> int:
    return run_step_command("colab", check)
