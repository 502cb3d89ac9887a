"""Where the course is: its checkout, its notebooks/ folder, and the notebooks in reading order.

Every tool finds the course the same way: the folder given, else the current directory or
the nearest parent that holds ``notebooks/`` and a ``pyproject.toml`` naming the ``torchhw``
project. The package never assumes it was imported from a source checkout, so an installed
copy works as well as an editable one when it is run from inside the course.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

NOTEBOOK_NAME = re.compile(r"\d\d_[a-z0-9_]+\.ipynb")


class CourseError(ValueError):
    """A request the course tools cannot act on: no course here, an unknown notebook."""


def find_root(start: Path | None = None) -> Path:
    """The course checkout: ``start`` or the current directory, or the nearest parent of it."""
    here = Path(start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        project = folder / "pyproject.toml"
        if (folder / "notebooks").is_dir() and project.is_file() \
                and re.search(r'^name\s*=\s*"torchhw"', project.read_text(), re.M):
            return folder
    raise CourseError(f"no torchhw course found at or above {here}: run this from the course's "
                      f"checkout (the folder with notebooks/ and pyproject.toml)")


def notebooks_dir(folder: Path | None = None) -> Path:
    """``folder`` if given (it must exist), else the checkout's notebooks/ folder."""
    if folder is not None:
        if not Path(folder).is_dir():
            raise CourseError(f"{folder} is not a folder of notebooks")
        return Path(folder)
    return find_root() / "notebooks"


def discover(folder: Path) -> list[Path]:
    """The course notebooks in reading order: files named NN_topic.ipynb."""
    return sorted(p for p in Path(folder).glob("*.ipynb") if NOTEBOOK_NAME.fullmatch(p.name))


def select(paths: Sequence[Path], names: Sequence[str]) -> list[Path]:
    """Pick notebooks by number ('00'), topic ('tensors') or full name; keep course order."""
    if not names:
        return list(paths)
    chosen: set[Path] = set()
    for name in names:
        key = name.removesuffix(".ipynb")
        hits = [p for p in paths if key in (p.stem, p.stem[:2], p.stem[3:])]
        if not hits:
            known = ", ".join(p.stem for p in paths)
            close = difflib.get_close_matches(key, [p.stem for p in paths] +
                                              [p.stem[3:] for p in paths], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise CourseError(f"no notebook matches {name!r}.{hint} The course has: {known}.")
        chosen.update(hits)
    return [p for p in paths if p in chosen]


def step(name: str, argv: list[str], env: dict[str, str], cwd: Path, echo=print,
         timeout: float = 1800) -> str:
    """Run one step of a build (binder, learner) and say how long it took; its stdout.

    A failing step raises :class:`CourseError` with the command and the end of its output.
    """
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise CourseError(f"{name} failed (exit {done.returncode}): {' '.join(argv)}\n"
                          f"{(done.stdout + done.stderr)[-3000:]}")
    echo(f"  {name}: {time.perf_counter() - start:.1f} s", flush=True)
    return done.stdout


def run_step_command(name: str, check: Any, errors: tuple[type[BaseException], ...] = ()) -> int:
    """A `torchhw NAME` command that runs ``check()``: 0, or 1 with the error on one line."""
    try:
        check()
    except (CourseError, subprocess.TimeoutExpired, *errors) as err:
        print(f"torchhw {name}: error: {err}", file=sys.stderr)
        return 1
    return 0
