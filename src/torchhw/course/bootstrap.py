"""Create or update the course's virtual environment: what every ``make`` target runs first.

    python src/torchhw/course/bootstrap.py --extras course      # make lab: the learner + Lab
    python src/torchhw/course/bootstrap.py --extras dev         # make test and the rest
    python src/torchhw/course/bootstrap.py --torch cpu          # switch to torch's CPU build

It runs with the standard library only, before anything is installed. It installs the package
editable with one extra of ``pyproject.toml`` (the one home of the dependencies), pinned by
``constraints.txt``, and records what it did in ``.venv/torchhw-install.json``. Run again, it
does nothing unless the request or those two files changed: so ``make`` can call it every time.

Which torch: ``default`` lets pip choose (on Linux x86-64 PyPI's torch is the CUDA build,
several GB); ``cpu`` takes the CPU build from PyTorch's CPU index (about 200 MB). The choice is
remembered: a later call without ``--torch`` keeps it, one with another choice reinstalls torch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STATE = "torchhw-install.json"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# The extras, each containing the one before: the learner's dependencies (no extra), the
# course's tooling with JupyterLab, the test suite.
LEVELS = ("learner", "course", "dev")


def python_floor(pyproject: Path) -> tuple[int, int]:
    """The (major, minor) of ``requires-python = ">=X.Y"`` in ``pyproject``."""
    found = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)"', pyproject.read_text(), re.M)
    if not found:
        raise SystemExit(f"{pyproject}: requires-python must read \">=X.Y\"")
    return int(found.group(1)), int(found.group(2))


# Python releases that a pinned package refuses (its Requires-Python): tests/test_deps.py
# checks this against the pins' own metadata.
EXCLUDED_PYTHONS = {(3, 14, 1): "networkx 3.6.1"}


def check_python(version: tuple[int, ...], floor: tuple[int, int]) -> None:
    """Stop with what to do when ``version`` is below the pins' ``floor``, or excluded."""
    excluded = EXCLUDED_PYTHONS.get(tuple(version[:3]))
    if excluded:
        raise SystemExit(f"Python {'.'.join(map(str, version[:3]))} is refused by {excluded}, "
                         f"which the course pins: use another Python 3.{floor[1]} or newer")
    if version < floor:
        need = f"{floor[0]}.{floor[1]}"
        raise SystemExit(
            f"Python {version[0]}.{version[1]} is too old for this course: the versions it pins "
            f"(numpy, matplotlib, scikit-learn, IPython and others) need Python {need} or newer. "
            f"Install Python {need} or newer and name it: make PYTHON=python{need} ... "
            f"(or python{need} src/torchhw/course/{Path(__file__).name} ...)")


def cpu_build_exists(system: str = platform.system(), machine: str = platform.machine()) -> bool:
    """Whether a separate CPU build of torch exists here: on Linux x86-64 PyPI's is CUDA's.

    Elsewhere (macOS, Windows, Linux on Arm) PyPI's torch is already the CPU build.
    """
    return system == "Linux" and machine in ("x86_64", "AMD64")


def inputs_digest(root: Path) -> str:
    """What the install depends on: the dependencies and the pins."""
    text = b"".join((root / name).read_bytes() for name in ("pyproject.toml", "constraints.txt"))
    return hashlib.sha256(text).hexdigest()[:16]


def pinned_torch(constraints: Path) -> str:
    found = re.search(r"^torch==([\w.]+)\s*(#.*)?$", constraints.read_text(), re.M)
    if not found:
        raise SystemExit(f"{constraints}: no 'torch==X.Y.Z' pin")
    return found.group(1)


def plan(state: dict, extras: str, torch: str | None, digest: str) -> dict:
    """The install wanted, from what was installed (``state``) and what is asked for.

    An extra never shrinks (``make lab`` after ``make test`` keeps the test tools), and the
    torch build is the one asked for, else the one installed, else ``default``.
    """
    if extras not in LEVELS:
        raise SystemExit(f"--extras {extras!r}: choose one of {', '.join(LEVELS)}")
    if torch not in (None, "default", "cpu"):
        raise SystemExit(f"TORCH={torch!r}: choose default (pip decides) or cpu (the CPU build)")
    had = state.get("extras", "learner")
    level = max(LEVELS.index(extras), LEVELS.index(had) if had in LEVELS else 0)
    return {"extras": LEVELS[level], "torch": torch or state.get("torch", "default"),
            "inputs": digest}


def cpu_torch(pin: str) -> list[str]:
    """pip arguments for torch ``pin``'s CPU build alone, from PyTorch's CPU index.

    ``--no-deps``: torch's own dependencies come from PyPI in the install that follows, so
    the CPU index is asked for this one package only.
    """
    return ["--no-deps", f"torch=={pin}+cpu", "--extra-index-url", CPU_INDEX]


def torch_flavour(version: str | None) -> str | None:
    """'cpu' for a '+cpu' build, 'default' for any other installed torch, None if none."""
    if version is None:
        return None
    return "cpu" if version.endswith("+cpu") else "default"


def needs_switch(have: str | None, want: str, asked: str | None, had: str | None) -> bool:
    """Whether the installed torch build must be replaced.

    ``default`` means "what pip chooses", and any build that is there satisfies it (pip may
    well have chosen a CPU build from a local wheel); only a request for ``cpu`` over another
    build, or an explicit ``default`` after an earlier ``cpu``, reinstalls torch.
    """
    if have is None:
        return False  # nothing installed yet: the install below takes the wanted build
    if want == "cpu":
        return have != "cpu"
    return asked == "default" and have == "cpu"  # pip's own choice again, asked for by name


def _python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _pip(venv: Path, *args: str) -> None:
    argv = [str(_python(venv)), "-m", "pip", *args]
    print("  " + " ".join(argv[2:]), flush=True)
    done = subprocess.run(argv, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    if done.returncode != 0:
        raise SystemExit(f"pip failed (exit {done.returncode}): {' '.join(argv)}. Its message is "
                         f"above; most often the network (a proxy: set HTTPS_PROXY), or a Python or "
                         f"platform for which a pinned package has no wheel (CI tests Python "
                         f"3.11 on Linux; an Intel Mac has no torch after 2.2)")


def installed_versions(python: Path) -> dict[str, str]:
    """Distribution name (lower case, '-' for '_') -> version, in the environment of ``python``."""
    code = ("import importlib.metadata as m, json\n"
            "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version "
            "for d in m.distributions()}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _installed(venv: Path, name: str) -> str | None:
    return installed_versions(_python(venv)).get(name.lower().replace("_", "-"))


def _venv_python_version(venv: Path) -> tuple[int, int] | None:
    """The (major, minor) of the venv's Python, or None when it cannot run pip."""
    code = "import sys, pip; print(*sys.version_info[:2])"
    try:
        out = subprocess.run([str(_python(venv)), "-c", code], capture_output=True, text=True)
    except OSError:  # a link to a Python that was removed or upgraded
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def _create(venv: Path) -> None:
    print(f"creating {venv} with Python {platform.python_version()} ({sys.executable})",
          flush=True)
    done = subprocess.run([sys.executable, "-m", "venv", str(venv)])
    if done.returncode != 0 or _venv_python_version(venv) is None:
        hint = ""
        if platform.system() == "Linux" and Path("/usr/bin/apt-get").exists():
            hint = (f" On Debian and Ubuntu the venv module is a package of its own: sudo "
                    f"apt-get install python{sys.version_info[0]}.{sys.version_info[1]}-venv.")
        raise SystemExit(f"could not create a virtual environment with {sys.executable} (its "
                         f"output is above).{hint} Then remove {venv} and run the command again")


def _cuda_packages(venv: Path) -> list[str]:
    return sorted(n for n in installed_versions(_python(venv)) if n.startswith(("nvidia-", "triton")))


def bootstrap(venv: Path, extras: str = "dev", torch: str | None = None,
              root: Path = ROOT) -> bool:
    """Bring ``venv`` to the wanted install; return whether anything was done."""
    state_file = venv / STATE
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    want = plan(state, extras, torch, inputs_digest(root))
    if state == want and _python(venv).exists():
        return False
    floor = python_floor(root / "pyproject.toml")
    if os.path.lexists(_python(venv)):
        version = _venv_python_version(venv)
        if version is None:  # made without pip (uv, no ensurepip), or its Python is gone
            raise SystemExit(
                f"{venv} exists but cannot run pip (its Python was removed or upgraded, or "
                f"another tool made it without pip): remove it (make clean) and run the "
                f"command again")
        if version < floor:
            raise SystemExit(
                f"{venv} holds Python {version[0]}.{version[1]}, older than the {floor[0]}."
                f"{floor[1]} the pinned packages need: remove it (make clean) and run the "
                f"command again with a newer Python (make PYTHON=python{floor[0]}.{floor[1]} ...)")
    if not _python(venv).exists():
        check_python(tuple(sys.version_info[:3]), floor)
        _create(venv)
        _pip(venv, "install", "--quiet", "--upgrade", "pip")
        print("installing the course's packages: 1-2 minutes with torch's CPU build, several "
              "more for its CUDA build (a download of some GB)", flush=True)
    pin = pinned_torch(root / "constraints.txt")
    cpu = want["torch"] == "cpu" and cpu_build_exists()
    torch_req = cpu_torch(pin) if cpu else []
    have = torch_flavour(_installed(venv, "torch"))
    if cpu and have is None:  # torch alone from the CPU index; everything else from PyPI
        _pip(venv, "install", "--quiet", *torch_req)
        have = "cpu"
    elif cpu and have == "cpu" and _installed(venv, "torch") != f"{pin}+cpu":
        # a new pin: its CPU build first, or the install below would take PyPI's CUDA build
        _pip(venv, "install", "--quiet", *torch_req)
    if cpu_build_exists() and needs_switch(have, want["torch"], torch, state.get("torch")):
        print(f"torch: switching from the {have} build to the {want['torch']} build", flush=True)
        if cpu:
            cuda = _cuda_packages(venv)
            if cuda:  # the CUDA build's libraries: gigabytes that the CPU build never loads
                _pip(venv, "uninstall", "--quiet", "-y", *cuda)
            _pip(venv, "install", "--quiet", "--force-reinstall", *torch_req)
        else:
            _pip(venv, "install", "--quiet", "--force-reinstall", "--no-deps", f"torch=={pin}")
            # the CUDA build's own libraries (nvidia-*), at the versions its metadata asks for
            _pip(venv, "install", "--quiet", "-c", str(root / "constraints.txt"), f"torch=={pin}")
    extra = "" if want["extras"] == "learner" else f"[{want['extras']}]"
    print(f"installing the course{extra} editable, pinned by constraints.txt"
          f"{', torch as its CPU build' if cpu else ''}", flush=True)
    _pip(venv, "install", "--quiet", "-c", str(root / "constraints.txt"), "-e", f"{root}{extra}")
    state_file.write_text(json.dumps(want, indent=1) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv")
    parser.add_argument("--extras", default="dev", help=f"one of {', '.join(LEVELS)}")
    parser.add_argument("--torch", default=os.environ.get("TORCH") or None,
                        help="default (pip chooses) or cpu; default: what is installed")
    args = parser.parse_args(argv)
    bootstrap(args.venv, args.extras, args.torch or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
