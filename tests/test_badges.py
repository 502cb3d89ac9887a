"""Badges and setup cells come from the one repository address in pyproject.toml."""

from __future__ import annotations

import shutil
import sys
import types

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from torchhw.course import badges

from conftest import NOTEBOOKS, ROOT, notebook_paths

REPO = badges.repository(ROOT / "pyproject.toml")


def test_every_notebook_agrees_with_the_repository_address():
    differing = badges.sync(notebook_paths(), REPO, write=False)
    assert not differing, (f"{differing}: badges or setup cell differ from {REPO}: "
                           f"run `make badges`, then `make notebooks`")


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_badges_open_that_very_notebook(path):
    intro = nbformat.read(path, as_version=4).cells[0].source
    slug = REPO.removeprefix("https://github.com/")
    assert (f"https://colab.research.google.com/github/{slug}/blob/main/notebooks/{path.name})"
            in intro)
    assert f"https://mybinder.org/v2/gh/{slug}/main?urlpath=lab/tree/notebooks/{path.name})" in intro


def test_a_notebook_that_disagrees_is_found_and_rewritten(tmp_path, capsys):
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "notebooks" / "04_optim.ipynb"
    shutil.copy(NOTEBOOKS / "04_optim.ipynb", path)
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = nb.cells[0].source.replace("torchhw/torchhw", "someone/fork")
    nb.cells[1].source = nb.cells[1].source.replace("git+", "git+https://example.org/x ")
    nbformat.write(nb, path)
    assert badges.sync([path], REPO, write=False) == ["04_optim.ipynb"]
    assert badges.main(folder=tmp_path / "notebooks", check=True) == 1
    assert "04_optim.ipynb: badges or setup cell disagree" in capsys.readouterr().out
    assert badges.main(folder=tmp_path / "notebooks") == 0
    assert badges.main(folder=tmp_path / "notebooks", check=True) == 0
    fixed = nbformat.read(path, as_version=4)
    assert "someone/fork" not in fixed.cells[0].source
    assert fixed.cells[2:] == nb.cells[2:], "only the badges and the setup cell may change"


def test_the_address_must_be_a_github_repository(tmp_path):
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project.urls]\nRepository = "https://example.org/x"\n')
    with pytest.raises(ValueError, match="GitHub address"):
        badges.repository(bad)


def run_setup_cell(source: str, colab: bool, monkeypatch, capsys) -> tuple[dict, list, str]:
    """Execute the setup cell as IPython would, on Colab or not; return names, magics, stdout."""
    code = TransformerManager().transform_cell(source)
    magics = []
    shell = types.SimpleNamespace(run_line_magic=lambda name, line: magics.append((name, line)))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    namespace = {"get_ipython": lambda: shell}
    exec(code, namespace)
    names = {k for k in namespace if not k.startswith("__") and k != "get_ipython"}
    return names, magics, capsys.readouterr().out


def test_setup_cell_does_nothing_outside_colab(monkeypatch, capsys):
    names, magics, out = run_setup_cell(badges.setup_cell(REPO, True), False, monkeypatch, capsys)
    assert names == {"sys"} and magics == [] and out == ""


def test_setup_cell_installs_from_the_repository_on_colab_and_keeps_its_torch(monkeypatch, capsys):
    names, magics, out = run_setup_cell(badges.setup_cell(REPO, True), True, monkeypatch, capsys)
    assert magics == [("pip", f'install --quiet "torchhw @ git+{REPO}"')]
    assert "torch==" not in magics[0][1] and "--upgrade" not in magics[0][1]
    import torch

    if not torch.cuda.is_available():
        assert "Runtime > Change runtime type" in out, "no GPU on Colab: say how to get one"
    # nothing but modules: check_params would take a plain value for a misspelt parameter
    assert names <= {"sys", "torch"}


def test_colab_installs_the_learners_part_only_and_upgrades_nothing():
    import tomllib

    cell = badges.setup_cell(REPO, gpu_sections=True)
    install = next(line for line in cell.splitlines() if "%pip install" in line)
    assert "[" not in install, "no extras on Colab: the course tooling is not the learner's"
    assert " -U " not in install and "--upgrade" not in install  # pip then upgrades nothing
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.split(">")[0] in ("papermill", "nbclient", "ipykernel",
                                                      "nbformat", "nbconvert", "jupyterlab")]
    assert all(">=" in d and "==" not in d for d in deps), "floors only, so Colab's versions stay"
