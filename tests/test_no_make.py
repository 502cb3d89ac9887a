"""The way in without make (Windows, or anyone who prefers pip), run as the README writes it.

The README's block of commands is taken as it stands: a fresh virtual environment, the one
pip line that installs the package with the ``course`` extra under constraints.txt, then
``torchhw lab``, which here is started with a private port and token, asked for its page and
stopped. The environment must hold JupyterLab and no test tool.

Installing takes about 90 s on 2 cores (torch alone a third of it), so the environment is kept
in build/no-make-venv and made again only when the README's block, pyproject.toml or
constraints.txt change: a fresh clone (CI) always runs the block.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from torchhw.distributed import free_port, stop_processes

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def readme_block() -> list[str]:
    """The commands of the README's block that installs with pip alone."""
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        if "pip install" in block and "[course]" in block and "torchhw lab" in block:
            return [line.split(" #")[0].strip() for line in block.splitlines()
                    if line.strip() and not line.startswith("#")]
    raise AssertionError("the README has no ```bash block with the pip-only install "
                         "(python -m venv, pip install -e \".[course]\", torchhw lab)")


def inputs(commands: list[str]) -> str:
    """What the environment depends on; this suite's own torch build too (the CPU line)."""
    text = "\n".join(commands + [metadata.version("torch")]).encode() + \
        (ROOT / "pyproject.toml").read_bytes() + (ROOT / "constraints.txt").read_bytes()
    return hashlib.sha256(text).hexdigest()[:16]


@pytest.mark.install
def test_the_readme_pip_path_installs_lab_and_no_test_tools(tmp_path):
    commands = readme_block()
    assert commands[0].split()[1:] == ["-m", "venv", ".venv"], commands[0]
    assert commands[-1] == ".venv/bin/torchhw lab", commands[-1]
    assert "download.pytorch.org/whl/cpu" in commands[1], "the CPU build's line comes second"
    venv = ROOT / "build" / "no-make-venv"
    stamp = venv / "readme-block.sha"
    fresh = not (stamp.exists() and stamp.read_text() == inputs(commands))
    if fresh:
        shutil.rmtree(venv, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # the commands as written; compiling every .py of torch and Lab to bytecode is left to
    # first use (it is most of an install's time, and the test imports little)
    # PIP_RETRIES: where PyTorch's index cannot be reached (as on our CI), fail over to PyPI's
    # copies at once instead of retrying each package five times
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_COMPILE="1", PIP_RETRIES="1")
    from torchhw.course import bootstrap

    # the CPU line only where this machine's own torch is the CPU build, as the README says
    cpu = bootstrap.torch_flavour(metadata.version("torch")) == "cpu" and \
        bootstrap.cpu_build_exists()
    for command in commands[:-1] if fresh else []:
        if "download.pytorch.org/whl/cpu" in command and not cpu:
            continue
        argv = [a.replace(".venv", str(venv)) for a in shlex.split(command)]
        if argv[0].startswith("python"):
            argv[0] = sys.executable  # the Python this suite runs on, whatever its name here
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, f"{command}\n{(done.stdout + done.stderr)[-2000:]}"
    stamp.write_text(inputs(commands))
    python = venv / "bin" / "python"
    present = subprocess.run(
        [str(python), "-c", "import importlib.util as u, json; print(json.dumps({n: bool("
         "u.find_spec(n)) for n in ['torchhw', 'jupyterlab', 'papermill', 'ipykernel', "
         "'pytest', 'nbval', 'playwright', 'xdist']}))"],
        capture_output=True, text=True, check=True)
    found = json.loads(present.stdout)
    torch_there = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                                  "print(m.version('torch'))"], capture_output=True, text=True,
                                 check=True).stdout.strip()
    assert torch_there.endswith("+cpu") == cpu, \
        f"the block installed torch {torch_there}; the CPU line {'ran' if cpu else 'did not run'}"
    assert all(found[n] for n in ("torchhw", "jupyterlab", "papermill", "ipykernel")), found
    assert not any(found[n] for n in ("pytest", "nbval", "playwright", "xdist")), \
        f"the course extra brought test tools: {found}"

    port, token = free_port(), secrets.token_hex(8)
    lab_env = {**env, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
               "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_PLATFORM_DIRS": "1"}
    argv = [str(venv / "bin" / "torchhw"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}"]
    log = tmp_path / "lab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=lab_env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline, page = time.monotonic() + 90, ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                page = urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/lab?token={token}", timeout=5).read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert "jupyter-config-data" in page, f"torchhw lab did not serve Lab:\n{log.read_text()[-2000:]}"
        config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page,
                                      re.S).group(1))
        assert config.get("preferredPath", "").strip("/") == "notebooks"
    finally:
        import psutil

        parent = psutil.Process(proc.pid)
        stop_processes([parent, *parent.children(recursive=True)])  # torchhw lab, and its Lab
