"""Colab and Binder badges, and the Colab setup cell, derived from the repository's address.

    torchhw badges            # rewrite every notebook's badges and setup cell (make badges)
    torchhw badges --check    # only say which notebooks disagree; exit 1 if any does

The address is written once, in pyproject.toml (``[project.urls] Repository``). Each notebook's
first cell carries one line of badges that open that very notebook on Colab and on Binder; its
second cell installs this package on Colab from the repository, keeping Colab's own torch (the
package asks for floors only), and does nothing anywhere else. In a notebook with GPU sections
it also says, on a Colab runtime without a GPU, how to switch to one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

BRANCH = "main"  # the branch the badges open
BADGE_START = "[![Open In Colab]"
# A notebook has GPU sections when code past its opening mentions CUDA or a GPU.
GPU_CODE = re.compile(r"cuda|GPU")
OPENING_CELLS = 4  # intro, setup, parameters, validation


def repository(pyproject: Path) -> str:
    """The GitHub address in ``[project.urls] Repository``, without a trailing slash or .git."""
    text = pyproject.read_text()
    try:
        import tomllib

        url = tomllib.loads(text).get("project", {}).get("urls", {}).get("Repository", "")
    except ModuleNotFoundError:  # Python 3.10
        found = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.M)
        url = found.group(1) if found else ""
    url = url.rstrip("/").removesuffix(".git")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"{pyproject}: [project.urls] Repository must be a GitHub address like "
                         f"https://github.com/OWNER/NAME, not {url!r}")
    return url


def badge_line(repo: str, notebook: str) -> str:
    """The Colab and Binder badges that open ``notebooks/<notebook>`` of ``repo``."""
    slug = repo.removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{slug}/blob/{BRANCH}/notebooks/{notebook}"
    binder = f"https://mybinder.org/v2/gh/{slug}/{BRANCH}?urlpath=lab/tree/notebooks/{notebook}"
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
            f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder})")


def setup_cell(repo: str, gpu_sections: bool) -> str:
    """The source of the setup cell: installs the package on Colab, nothing elsewhere."""
    lines = [
        "# On Colab, install the course's helper package. Its dependencies are floors that Colab's",
        "# preinstalled torch, numpy, ipywidgets and the rest already meet, so pip adds the package",
        "# alone and no runtime restart is needed (`make colab` checks this against Colab's versions).",
        "# Anywhere else this cell does nothing: install the course first (README, Start here).",
        "import sys",
        "",
        'if "google.colab" in sys.modules:',
        f'    %pip install --quiet "torchhw @ git+{repo}"',
    ]
    if gpu_sections:
        lines += [
            "    import torch",
            "",
            "    if not torch.cuda.is_available():",
            '        print("This Colab runtime has no GPU, so the GPU sections below will say what '
            'they skip. "',
            '              "For a GPU: Runtime > Change runtime type > T4 GPU > Save, then run '
            'the notebook again.")',
        ]
    return "\n".join(lines)


def has_gpu_sections(nb) -> bool:
    return any(c.cell_type == "code" and GPU_CODE.search(c.source)
               for c in nb.cells[OPENING_CELLS:])


def with_badges(intro: str, line: str) -> str:
    """``intro`` with its badge line replaced by ``line`` (inserted after the title if none)."""
    lines = intro.split("\n")
    for i, old in enumerate(lines):
        if old.startswith(BADGE_START) or "mybinder.org/badge" in old:
            lines[i] = line
            return "\n".join(lines)
    return "\n".join(lines[:1] + ["", line] + lines[1:])


def sync(paths: Sequence[Path], repo: str, write: bool = True) -> list[str]:
    """Make each notebook's badges and setup cell match ``repo``; return those that differed.

    With ``write=False`` nothing is changed: the result lists the notebooks that disagree.
    """
    import nbformat

    differing = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if len(nb.cells) < 2 or nb.cells[0].cell_type != "markdown" or \
                nb.cells[1].cell_type != "code":
            raise ValueError(f"{path.name}: expected a markdown intro and a code setup cell "
                             f"first (see 'Writing a notebook' in the README)")
        intro = with_badges(nb.cells[0].source, badge_line(repo, path.name))
        setup = setup_cell(repo, has_gpu_sections(nb))
        if (intro, setup) != (nb.cells[0].source, nb.cells[1].source):
            differing.append(path.name)
            if write:
                nb.cells[0].source, nb.cells[1].source = intro, setup
                nbformat.write(nb, path)
    return differing


def main(names: Sequence[str] = (), folder: Path | None = None, check: bool = False) -> int:
    """``torchhw badges``: rewrite (or with ``check`` only list) notebooks that disagree."""
    from .paths import discover, notebooks_dir, select

    folder = notebooks_dir(folder)
    pyproject = folder.parent / "pyproject.toml"
    repo = repository(pyproject)
    differing = sync(select(discover(folder), names), repo, write=not check)
    if check:
        for name in differing:
            print(f"{name}: badges or setup cell disagree with {repo} "
                  f"(from {pyproject.name}): run `make badges`, then `make notebooks`")
        return 1 if differing else 0
    for name in differing:
        print(f"{name}: badges and setup cell rewritten for {repo}")
    if differing:
        print("code changed: run `make notebooks` to regenerate the outputs")
    else:
        print(f"every notebook already points at {repo}")
    return 0
