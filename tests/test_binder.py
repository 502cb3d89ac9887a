"""binder/ agrees with the top level: same versions, same Python, a postBuild that works.

The full simulation (fresh venv, postBuild, notebook 00) is `make binder`; this is the fast part.
"""

from __future__ import annotations

import os
import re

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from torchhw.course.binder import runtime_python

from conftest import ROOT

BINDER = ROOT / "binder"


def pins(path) -> dict[str, str]:
    """name -> exact version of every 'name==version' line in a requirements file."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-")):
            req = Requirement(line)
            spec = str(req.specifier)
            assert spec.startswith("=="), f"{path.name}: pin exact versions on Binder: {line!r}"
            found[canonicalize_name(req.name)] = spec[2:]
    return found


def test_binder_requirements_pin_what_ci_tests():
    binder, tested = pins(BINDER / "requirements.txt"), pins(ROOT / "constraints.txt")
    assert binder.get("torch") == tested["torch"] + "+cpu", \
        "Binder needs the CPU build of the torch in constraints.txt: torch==X.Y.Z+cpu"
    assert "download.pytorch.org/whl/cpu" in (BINDER / "requirements.txt").read_text(), \
        "the +cpu build is only on the PyTorch CPU index: add it as --extra-index-url"
    for name, version in binder.items():
        if name != "torch":
            assert tested.get(name) == version, \
                f"binder/requirements.txt has {name}=={version}, constraints.txt {tested.get(name)}"


def test_binder_installs_every_dependency_of_the_package():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the learner's dependencies and the course tooling's extra (Binder runs papermill and Lab)
    wanted = project["dependencies"] + project["optional-dependencies"]["course"]
    needed = {canonicalize_name(Requirement(d).name) for d in wanted}
    missing = needed - set(pins(BINDER / "requirements.txt"))
    assert not missing, f"postBuild installs the package with --no-deps: add {missing} to " \
                        f"binder/requirements.txt"
    assert "jupyterlab" in pins(BINDER / "requirements.txt")


def test_binder_python_is_the_one_ci_uses():
    version = runtime_python(BINDER)
    header = re.search(r"Python (\d+\.\d+)", (ROOT / "constraints.txt").read_text()).group(1)
    makefile = re.search(r"for p in python(\d+\.\d+)", (ROOT / "Makefile").read_text()).group(1)
    assert version == header == makefile, \
        f"binder/runtime.txt says {version}, constraints.txt {header}, the Makefile {makefile}"


def test_postbuild_is_executable_installs_the_package_and_configures_lab():
    post = BINDER / "postBuild"
    assert os.access(post, os.X_OK), "binder/postBuild must be executable: chmod +x (and git " \
                                     "update-index --chmod=+x)"
    text = post.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert re.search(r"pip install --no-deps (-e )?\.$", text, re.M), "postBuild must install ."
    assert "torchhw lab --configure --server" in text


def test_configure_writes_the_lab_settings(tmp_path):
    import json

    from torchhw.course.lab import configure

    files = configure(tmp_path, server=True)
    overrides = json.loads(files[0].read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    server = json.loads(files[1].read_text())
    assert server["FileContentsManager"]["preferred_dir"] == "notebooks"
    configure(tmp_path)  # again: merged, not duplicated or lost
    assert json.loads(files[1].read_text()) == server
