"""Portability: strict nbval over every notebook as other machines would run it.

    torchhw portability                 # every profile, every notebook
    torchhw portability --profile 1-thread 00 04

The committed outputs come from one machine. Tests elsewhere must still pass, so each profile
re-runs nbval with the environment that makes this machine behave like another: torch's plain
C++ kernels or its AVX2 ones instead of AVX-512 (``ATEN_CPU_CAPABILITY``), MKL capped at AVX2,
one thread or more threads than cores. A cell whose output depends on any of these must be
tagged ``nbval-ignore-output`` and check its claim instead; a profile that fails names it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .paths import CourseError, discover, find_root, notebooks_dir, select

PROFILES: dict[str, dict[str, str]] = {
    "default-kernels": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2-kernels": {"ATEN_CPU_CAPABILITY": "avx2"},
    "1-thread": {"OMP_NUM_THREADS": "1"},
    "3-threads": {"OMP_NUM_THREADS": "3"},
    "mkl-avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    # the Chinese edition's notebooks (notebooks/zh/) on this machine as it is: `make test`
    # checks their structure and translations, this their outputs
    "zh-edition": {},
}
EDITIONS = {"zh-edition": "zh"}  # profile -> the edition's folder under notebooks/


def applicable(name: str) -> tuple[bool, str]:
    """Whether a profile emulates anything here, and why not when it does not."""
    if name == "mkl-avx2":
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        if "avx512f" not in flags:
            return False, "this CPU has no AVX-512, so capping MKL at AVX2 changes nothing"
    return True, ""


@dataclass
class ProfileResult:
    name: str
    status: str  # "passed", "failed" or "skipped"
    seconds: float
    detail: str


def _checkout(notebook: Path) -> Path:
    """The checkout a notebook is in (notebooks/NN.ipynb or notebooks/zh/NN.ipynb), where the
    tests' configuration and sanitizer are."""
    try:
        return find_root(notebook.parent)
    except CourseError:
        return notebook.parent.parent


def run_profile(name: str, paths: Sequence[Path], workers: int = 2,
                timeout: int = 1200) -> ProfileResult:
    """nbval over ``paths`` in a child pytest with the profile's environment."""
    ok, why = applicable(name)
    if not ok:
        return ProfileResult(name, "skipped", 0.0, why)
    env = {**os.environ, **PROFILES[name], "TQDM_DISABLE": "1"}
    start = time.perf_counter()
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
            "-n", str(workers), "--dist", "loadfile", *map(str, paths)]
    done = subprocess.run(argv, cwd=_checkout(paths[0]), env=env, capture_output=True,
                          text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    tail = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    status = "passed" if done.returncode == 0 else "failed"
    cause = []
    if status == "failed":
        # the whole output kept, and the first failure's own report shown, so that a failure
        # in CI, where the run cannot be repeated, says what happened
        artifacts = paths[0].parent.parent / "build" / "test-artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / f"portability-{name}.log").write_text(done.stdout + "\n" + done.stderr)
        lines = done.stdout.splitlines()
        first = next((i for i, line in enumerate(lines) if "= FAILURES =" in line or "= ERRORS =" in line), None)
        if first is not None:
            cause = ["--- the first failure's report (whole output in "
                     f"build/test-artifacts/portability-{name}.log):"] + lines[first:first + 80]
    return ProfileResult(name, status, seconds, "\n".join(tail + [summary] + cause))


def main(names: Sequence[str] = (), profiles: Sequence[str] = (), folder: Path | None = None,
         echo=print) -> int:
    """Run the chosen profiles (default: all) over the chosen notebooks; 1 if any failed."""
    paths = select(discover(notebooks_dir(folder)), names)
    unknown = set(profiles) - set(PROFILES)
    if unknown:
        echo(f"torchhw portability: unknown profile {sorted(unknown)}; known: {', '.join(PROFILES)}")
        return 2
    results = []
    for name in profiles or PROFILES:
        env = " ".join(f"{k}={v}" for k, v in PROFILES[name].items())
        chosen = paths
        if name in EDITIONS:
            edition = find_root() / "notebooks" / EDITIONS[name]
            chosen = select(discover(edition), [p.stem for p in paths]) if edition.is_dir() else []
            env = f"notebooks/{EDITIONS[name]}/"
        echo(f"profile {name} ({env}) over {len(chosen)} notebooks ...", flush=True)
        if not chosen:
            echo("  skipped: no such notebooks", flush=True)
            results.append(ProfileResult(name, "skipped", 0.0, "no such notebooks"))
            continue
        result = run_profile(name, chosen)
        echo(f"  {result.status} in {result.seconds:.0f} s: {result.detail}", flush=True)
        results.append(result)
    echo("\nprofile           status   seconds")
    for r in results:
        echo(f"{r.name:<17} {r.status:<8} {r.seconds:7.0f}")
    return 1 if any(r.status == "failed" for r in results) else 0
