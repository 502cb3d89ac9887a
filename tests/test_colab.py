"""Colab's setup cell upgrades nothing that Colab has preinstalled, and 04's widget runs there.

The whole check (`make colab`) builds build/colab-venv with Colab's versions once (about a
minute, pip's downloads), then, each time, runs the setup cell's own pip line with the package
from this checkout and notebook 04 on that environment's kernel.
"""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from torchhw.course import colab, deps

from conftest import ROOT


def test_the_setup_cell_installs_this_checkout_the_way_it_installs_github():
    line = colab.setup_pip_line(ROOT / "notebooks" / colab.NOTEBOOK)
    assert line.startswith('%pip install --quiet "torchhw @ git+https://github.com/')
    argv = colab.pip_argv(line, ROOT)
    assert argv == ["install", "--quiet", f"torchhw @ {ROOT.as_uri()}"]


def test_a_change_to_anything_preinstalled_is_reported():
    before = {"ipywidgets": "7.7.1", "numpy": "2.0.2"}
    assert colab.changes(before, {**before, "torchhw": "0.1.0"}) == ([], [])
    upgraded, added = colab.changes(before, {"ipywidgets": "8.1.9", "numpy": "2.0.2",
                                             "comm": "0.2.3"})
    assert upgraded == ["ipywidgets: 7.7.1 -> 8.1.9"], "an upgrade of what Colab has fails"
    assert added == ["comm 0.2.3"], "a package Colab lacked is new, not an upgrade: listed"
    assert colab.changes(before, {"numpy": "2.0.2"})[0] == ["ipywidgets: 7.7.1 -> removed"]


def test_the_package_floors_admit_colabs_versions():
    """Fast and static: every learner dependency's floor is met by Colab's version."""
    versions = {deps._name(n): v for n, v in colab.colab_versions(ROOT).items()}
    for req in deps.requirements(ROOT):
        name = deps._name(req)
        if name in versions:
            assert Version(versions[name]) in Requirement(req).specifier, \
                f"Colab has {name} {versions[name]}: the floor {req!r} would upgrade it"


@pytest.mark.install
def test_colab_setup_cell_upgrades_nothing_and_the_widget_runs():
    try:
        colab.colab_python()
    except colab.NoColabPython as err:  # said in the summary, with what to install
        pytest.skip(str(err))
    result = colab.check(ROOT, echo=lambda *a, **k: None)
    assert result["changed"] == []
    assert result["added"] == [], "everything the package needs is among Colab's versions"
    assert result["versions"]["ipywidgets"] == colab.COLAB["ipywidgets"]
    assert result["versions"]["ipykernel"] == colab.COLAB["ipykernel"]
    assert result["widget_cells"], "04's explorer showed no widget above its figure"
