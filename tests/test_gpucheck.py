"""torchhw.course.gpucheck, `make gpu-check`: the one-shot check for a machine with a CUDA GPU.

What it does on a GPU cannot be run here; what is tested is everything up to that point: on a
machine without a GPU it says so and installs nothing; with torch made to report a GPU, its dry
run names every step; the setup installs only what is missing, from the carried wheels, never
torch; and the Makefile's two targets are what the README says. No network, a few seconds.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import types
from datetime import date
from pathlib import Path

import pytest
import torch

from torchhw.course import gpucheck
from torchhw.course.cli import main

from conftest import ROOT, notebook_paths

TORCH_WORD = re.compile(r"\btorch\b", re.I)


@pytest.fixture
def nothing_runs(monkeypatch):
    """Any program started (pip, pytest, ipykernel, nvidia-smi) fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"gpu-check started a program: {args[:1]}")

    for name in ("run", "Popen", "call", "check_call", "check_output"):
        monkeypatch.setattr(subprocess, name, refuse)
    monkeypatch.setattr(gpucheck.os, "system", refuse)
    monkeypatch.setattr(gpucheck, "_run_setup", refuse)
    monkeypatch.chdir(ROOT)


@pytest.fixture
def a_gpu(monkeypatch):
    """torch answering as a machine with one H200 would; nothing runs on it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i=0: types.SimpleNamespace(total_memory=141 * 2**30))


def lines_of(calls):
    return [" ".join(map(str, args)) for args, _ in calls]


def recorder():
    calls = []
    return calls, lambda *args, **kwargs: calls.append((args, kwargs))


def test_without_a_gpu_it_says_so_and_installs_nothing(nothing_runs, monkeypatch, tmp_path):
    if torch.cuda.is_available():  # the suite run on a GPU machine: this test is about none
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    calls, echo = recorder()
    assert gpucheck.gpu_check(out_root=tmp_path, wheels=tmp_path / "wheels", echo=echo) == 2
    last = lines_of(calls)[-1]
    assert last.startswith(f"gpu-check: no CUDA GPU present (torch {torch.__version__}, ")
    assert last.endswith("nothing run. Run `make gpu-check` on a machine with a CUDA GPU.")
    if torch.version.cuda is None:
        assert "CPU-only build" in last
    assert not list(tmp_path.iterdir()), "nothing is written on a machine without a GPU"


def test_a_dry_run_on_a_gpu_names_every_step(nothing_runs, a_gpu, tmp_path):
    calls, echo = recorder()
    assert gpucheck.gpu_check(out_root=tmp_path, dry_run=True, echo=echo) == 0
    text = "\n".join(lines_of(calls))
    assert "GPU: 1 × NVIDIA H200 (capability 9.0, 141 GiB)" in text
    folder = tmp_path / "gpu-check" / f"{date.today().isoformat()}_nvidia-h200"
    assert f"would write into {folder}/ and cards into {tmp_path / 'cards'}/" in text
    command = shlex.join(gpucheck.pytest_command())
    assert "-m pytest -m gpu tests -o addopts= -p no:cacheprovider" in command
    assert "--timeout 300" in command
    assert f"would run: {command} > {folder / 'pytest-gpu.log'}" in text
    planned = [line for line in text.splitlines() if re.search(r"would run \[\d+/\d+\]", line)]
    names = [p.stem for p in notebook_paths()]
    assert len(planned) == len(names) == 11
    for name, line in zip(names, planned):
        assert f" {name} device=cuda" in line and "quick=True" in line
        assert ("card_dir=" in line) == (name == "10_capstone"), line
    assert f"card_dir={(tmp_path / 'cards').resolve()}" in planned[-1]
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"


def test_the_command_line_runs_it(nothing_runs, a_gpu, tmp_path, capsys):
    assert main(["gpu-check", "--dry-run", "--out", str(tmp_path)]) == 0
    assert "would run: " in capsys.readouterr().out


def test_only_what_is_missing_is_installed_from_the_wheels_never_torch(tmp_path):
    missing = gpucheck.missing_modules(find=lambda m: None if m == "papermill" else object(),
                                       installed=lambda: True)
    assert missing == ["papermill"]
    wheels = tmp_path / "gpu-wheels"
    wheels.mkdir()
    (wheels / "papermill-2.7.0-py3-none-any.whl").write_text("")
    (commands,) = gpucheck.install_commands(missing, wheels, index=False, root=ROOT)
    assert commands == [sys.executable, "-m", "pip", "install", "--no-index", "--find-links",
                        str(wheels), "papermill"]
    assert f"pip install --no-index --find-links {wheels} papermill" in shlex.join(commands)
    # torchhw itself: editable, without its dependencies, so pip never fetches torch
    (wheels / "setuptools-80.9.0-py3-none-any.whl").write_text("")
    everything = gpucheck.missing_modules(find=lambda m: None, installed=lambda: False)
    assert set(everything) == set(gpucheck.MODULES) | {"torchhw"}
    all_wheels = tmp_path / "all"
    all_wheels.mkdir()
    for dist in [*gpucheck.MODULES.values(), "setuptools"]:
        (all_wheels / f"{dist.replace('-', '_')}-1.0-py3-none-any.whl").write_text("")
    commands = gpucheck.install_commands(everything, all_wheels, index=False, root=ROOT)
    assert commands[-1][-5:] == ["--no-index", "--find-links", str(all_wheels), "-e", str(ROOT)]
    assert "--no-deps" in commands[-1]
    for command in commands:
        assert not any(TORCH_WORD.search(arg) for arg in command[1:]), command
    # from the index when no wheels were carried and the index may be asked
    assert gpucheck.install_commands(["sklearn"], tmp_path / "none", index=True) == \
        [[sys.executable, "-m", "pip", "install", "scikit-learn"]]
    assert gpucheck.install_commands([], tmp_path / "none", index=False) == []


def test_what_cannot_be_installed_is_named_with_the_command_that_fetches_it(tmp_path):
    with pytest.raises(gpucheck.SetupError) as err:
        gpucheck.install_commands(["papermill", "nbclient"], tmp_path / "none", index=False)
    message = str(err.value)
    assert "papermill, nbclient" in message and "make gpu-wheels" in message
    assert "FULL=1" not in message
    wheels = tmp_path / "gpu-wheels"
    wheels.mkdir()
    (wheels / "papermill-2.7.0-py3-none-any.whl").write_text("")
    with pytest.raises(gpucheck.SetupError) as err:
        gpucheck.install_commands(["papermill", "numpy"], wheels, index=False)
    message = str(err.value)
    assert "numpy" in message and "papermill" not in message.split(":")[1]
    assert "make gpu-wheels FULL=1" in message  # numpy is one of the large ones


def test_on_a_gpu_a_missing_module_stops_it_before_anything_runs(nothing_runs, a_gpu,
                                                                 monkeypatch, tmp_path):
    monkeypatch.setattr(gpucheck, "_find", lambda m: None if m == "papermill" else object())
    calls, echo = recorder()
    assert gpucheck.gpu_check(out_root=tmp_path, wheels=tmp_path / "none", index=False,
                              echo=echo) == 1
    text = "\n".join(lines_of(calls))
    assert "setup: missing papermill" in text
    assert "error: missing here: papermill" in text and "make gpu-wheels" in text
    assert not list(tmp_path.iterdir())


def test_the_pytest_summary_is_read():
    read = gpucheck.parse_pytest_summary
    assert read("..\n2 passed, 574 deselected in 3.73s\n") == {"passed": 2, "deselected": 574}
    assert read("== 1 failed, 1 passed, 2 errors, 3 warnings in 65.33s (0:01:05) ==") == \
        {"failed": 1, "passed": 1, "error": 2, "warning": 3}
    assert read("ERROR: usage") == {}


def make_dry(*args):
    done = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_gpu_check_needs_no_venv_and_takes_a_python_with_torch():
    out = make_dry("gpu-check")
    line = next(x for x in out.splitlines() if "-m torchhw gpu-check" in x)
    assert line.startswith(f"PYTHONPATH={ROOT}/src")
    python = line.split()[1]
    has_torch = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    assert subprocess.run([python, "-c", has_torch], cwd=ROOT).returncode == 0, \
        f"make gpu-check chose {python}, which has no torch"
    assert re.search(r"^gpu-check:\s*$", (ROOT / "Makefile").read_text(), re.M), \
        "gpu-check must not depend on `make venv`: a GPU machine has torch and no time for it"
    assert "/x/python -m torchhw gpu-check --dry-run" in \
        make_dry("gpu-check", "GPU_PYTHON=/x/python", "ARGS=--dry-run")


def test_make_gpu_wheels_downloads_for_312_and_never_torch():
    def download(*args):
        text = make_dry("gpu-wheels", *args).replace("\\\n", " ")
        line = next(x for x in text.splitlines() if "pip download" in x)
        assert "--only-binary=:all:" in line and "--python-version 3.12" in line
        assert "--platform manylinux_2_17_x86_64" in line and "--dest build/gpu-wheels" in line
        names = line.split("--dest build/gpu-wheels", 1)[1].split()
        assert not any(TORCH_WORD.search(n) for n in names), names
        return set(names)

    small = download()
    assert {"papermill", "nbclient", "nbformat", "ipykernel", "jupyter_client", "pytest",
            "pytest-timeout", "setuptools"} <= small
    assert not small & {"numpy", "matplotlib", "scikit-learn"}
    assert {"numpy", "matplotlib", "scikit-learn"} <= download("FULL=1")
