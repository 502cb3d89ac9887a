"""One command for the day a CUDA GPU is at hand: the GPU tests and the whole course on it.

    make gpu-check                  # or: PYTHONPATH=src python -m torchhw gpu-check
    make gpu-check ARGS=--dry-run   # only say what it would do

Most of the course is tested on CPUs only; the CUDA branches of the package and the notebooks
run where a GPU is. This check runs them all in one go, so that a borrowed GPU machine, which
is often a bare one with torch and no network, is used for minutes and not for an afternoon:

1. setup: find which modules the check needs are missing, install them with pip from a folder
   of wheels carried along (``make gpu-wheels`` fills it on a machine with internet), else from
   the package index, install ``torchhw`` itself with ``--no-deps`` (pip never touches the
   machine's torch) and make sure a Jupyter kernel named :data:`runner.KERNEL` runs this Python;
2. the GPU: none, and it stops at once with one line that says so (exit 2), before it has
   installed or run anything;
3. ``pytest -m gpu tests``, with the project's own pytest options left out (they ask for nbval
   and xdist, which a GPU machine may lack), its output kept in a log;
4. every notebook with ``device = "cuda"`` through papermill (:func:`runner.run_course`, quick
   mode), notebook 10 writing its report card into ``reference/cards/``.

Everything lands in ``reference/gpu-check/<date>_<gpu>/``: the executed notebooks, the run's
report.md and report.json, the pytest log and ``gpu-check.md``, the summary (machine, versions,
test and notebook outcomes, the card). Exit status 0 when everything passed, 1 when something
failed (the summary is written all the same), 2 when there is no GPU.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable, Sequence

from .paths import CourseError, discover, find_root, notebooks_dir

# Module the check imports -> the distribution pip installs for it. The Jupyter stack runs the
# notebooks, pytest and pytest-timeout the GPU tests; the rest are the learner's package's own
# dependencies, which the notebooks import. torch is never in this list: the machine's own
# build is the one under test, and a pip-installed one would replace it.
MODULES: dict[str, str] = {
    "papermill": "papermill", "nbclient": "nbclient", "nbformat": "nbformat",
    "ipykernel": "ipykernel", "jupyter_client": "jupyter-client",
    "pytest": "pytest", "pytest_timeout": "pytest-timeout",
    "numpy": "numpy", "matplotlib": "matplotlib", "ipywidgets": "ipywidgets",
    "psutil": "psutil", "sklearn": "scikit-learn", "yaml": "PyYAML",
}
# Distributions `make gpu-wheels` fetches only with FULL=1 (tens of MB each, and a machine with
# torch usually has them already).
LARGE = {"numpy", "matplotlib", "scikit-learn"}
WHEELS = Path("build/gpu-wheels")
# Time limits, so that the whole check fits in 10 minutes on one GPU when nothing hangs, and a
# hang costs minutes, not the lease: each GPU test, the pytest step as a whole, each cell.
TEST_TIMEOUT = 300
TESTS_STEP_TIMEOUT = 360
CELL_TIMEOUT = 240
INSTALL_TIMEOUT = 300
BUDGET_S = 600


class SetupError(CourseError):
    """Something the check needs is missing and cannot be installed: what, and what to run."""


def _say(echo: Callable[..., Any], line: str) -> None:
    echo(f"gpu-check: {line}", flush=True)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    if not minutes:
        return f"{secs} s"
    return f"{minutes} min {secs} s" if secs else f"{minutes} min"


def _shown(path: Path) -> str:
    """A path as short as it is clear: relative to the current folder when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- step 1: setup --------------------------------------------------------------------------

def _find(module: str) -> object | None:
    return importlib.util.find_spec(module)


def torchhw_installed() -> bool:
    """True when pip knows a torchhw distribution in this Python.

    The check itself runs with ``PYTHONPATH=src``; an installed package is what lets a kernel
    or a Python started elsewhere import torchhw too (the check also passes PYTHONPATH on).
    """
    try:
        importlib.metadata.distribution("torchhw")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def missing_modules(find: Callable[[str], object | None] | None = None,
                    installed: Callable[[], bool] | None = None) -> list[str]:
    """The modules of :data:`MODULES` this Python cannot import, and "torchhw" if it is not
    installed; found by looking, importing nothing, so that it costs milliseconds.
    ``find`` and ``installed`` stand in for this machine's answers (tests)."""
    find, installed = find or _find, installed or torchhw_installed
    missing = [m for m in MODULES if find(m) is None]
    return missing + ([] if installed() else ["torchhw"])


def _wheel_names(wheels: Path) -> set[str]:
    """The normalised distribution names of the wheels in ``wheels``."""
    return {_normal(p.name.split("-", 1)[0]) for p in wheels.glob("*.whl")}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _fetch_hint(dists: Sequence[str]) -> str:
    full = " FULL=1" if set(dists) & LARGE else ""
    return (f"run `make gpu-wheels{full}` on a machine with internet (it fills {WHEELS}/) and "
            f"carry that folder along with the checkout")


def install_commands(missing: Sequence[str], wheels: Path = WHEELS, index: bool = True,
                     root: Path | None = None) -> list[list[str]]:
    """The pip commands that install ``missing`` (module names from :func:`missing_modules`).

    From ``wheels`` alone (``--no-index``) when that folder exists, so that a machine without
    network never waits on the index; else from the index when ``index`` allows it. torchhw is
    installed editable with ``--no-deps``: its dependency on torch must never let pip fetch or
    replace the machine's torch. Raises :class:`SetupError` naming what cannot be had.
    """
    dists = [MODULES[m] for m in missing if m != "torchhw"]
    need_torchhw = "torchhw" in missing
    if not dists and not need_torchhw:
        return []
    pip = [sys.executable, "-m", "pip", "install"]
    if Path(wheels).is_dir():
        source = ["--no-index", "--find-links", str(wheels)]
        have = _wheel_names(Path(wheels))
        # building torchhw's editable install needs setuptools from the same folder
        absent = [d for d in dists + (["setuptools"] if need_torchhw else [])
                  if _normal(d) not in have]
        if absent:
            raise SetupError(f"missing here: {', '.join(absent)}, and {wheels}/ holds no wheel "
                             f"for {'it' if len(absent) == 1 else 'them'}: {_fetch_hint(absent)}")
    elif index:
        source = []
    else:
        what = ", ".join(dists + (["torchhw (needs setuptools)"] if need_torchhw else []))
        raise SetupError(f"missing here: {what}; no wheels folder {wheels}/ and no package "
                         f"index allowed: {_fetch_hint(dists)}")
    commands = [pip + source + dists] if dists else []
    if need_torchhw:
        commands.append(pip + ["--no-deps"] + source + ["-e", str(root or find_root())])
    return commands


def kernel_state() -> str:
    """Whether the Jupyter kernel the runner asks for runs this Python.

    "ready"; "missing" (no such kernel, or one that starts another Python, which may lack
    torch); "unknown" while jupyter_client itself is not installed.
    """
    from .runner import KERNEL

    if _find("jupyter_client") is None:
        return "unknown"
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        return "missing"
    program = spec.argv[0] if spec.argv else ""
    # jupyter_client starts a bare "python" (as pip's ipykernel writes it) with sys.executable
    bare = {"python", f"python{sys.version_info[0]}", "python%d.%d" % sys.version_info[:2]}
    same = program in bare or os.path.abspath(program) == os.path.abspath(sys.executable)
    return "ready" if same else "missing"


def kernel_command() -> list[str]:
    from .runner import KERNEL

    return [sys.executable, "-m", "ipykernel", "install", "--user", "--name", KERNEL]


# --- step 2: the GPU ------------------------------------------------------------------------

@dataclass
class GPUInfo:
    """What torch sees: the GPUs, and the versions of what drives them."""

    count: int
    names: list[str] = field(default_factory=list)
    capabilities: list[str] = field(default_factory=list)
    memory_gib: list[float] = field(default_factory=list)
    torch: str = ""
    cuda: str | None = None
    hip: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    other: str = ""  # another accelerator torch sees (mps, xpu): said in the no-GPU line

    def build(self) -> str:
        if self.cuda:
            return f"CUDA {self.cuda} build"
        if self.hip:
            return f"ROCm {self.hip} build"
        return "CPU-only build"

    def slug(self) -> str:
        """A folder-name part: ``nvidia-h200``, ``2x-nvidia-a100-sxm4-80gb``."""
        if not self.names:
            return "no-gpu"
        name = re.sub(r"[^a-z0-9]+", "-", self.names[0].lower()).strip("-")
        return f"{self.count}x-{name}" if self.count > 1 else name

    def no_gpu_line(self) -> str:
        seen = f"; torch sees only {self.other}" if self.other else ""
        return (f"gpu-check: no CUDA GPU present (torch {self.torch}, {self.build()}{seen}): "
                f"nothing run. Run `make gpu-check` on a machine with a CUDA GPU.")


def _cudnn_version(torch: Any) -> str | None:
    try:
        v = torch.backends.cudnn.version()
    except Exception:
        return None
    if not v:
        return None
    # 9.x is written 91002 (9.10.2), 8.x as 8902 (8.9.2)
    major, rest = (v // 10000, v % 10000) if v >= 10000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _nccl_version(torch: Any) -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def detect_gpu() -> GPUInfo:
    """The CUDA GPUs torch can use, without running anything on them."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info = GPUInfo(count, torch=torch.__version__, cuda=torch.version.cuda,
                   hip=getattr(torch.version, "hip", None))
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if not count and accelerator is not None and accelerator.is_available():
        info.other = str(accelerator.current_accelerator().type)
    for i in range(count):
        info.names.append(torch.cuda.get_device_name(i))
        info.capabilities.append("%d.%d" % tuple(torch.cuda.get_device_capability(i)))
        info.memory_gib.append(torch.cuda.get_device_properties(i).total_memory / 2**30)
    if count:
        info.cudnn, info.nccl = _cudnn_version(torch), _nccl_version(torch)
    return info


def _driver() -> str:
    """The NVIDIA driver's version, from nvidia-smi where there is one."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = done.stdout.strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else ""


# --- steps 3 and 4 --------------------------------------------------------------------------

def pytest_command() -> list[str]:
    """The GPU tests alone. ``-o addopts=`` drops the project's options (nbval, xdist), which
    a GPU machine may not have; the time limit is pytest-timeout's, per test."""
    return [sys.executable, "-m", "pytest", "-m", "gpu", "tests", "-o", "addopts=",
            "-p", "no:cacheprovider", "-q", "-rfEs", "--timeout", str(TEST_TIMEOUT)]


SUMMARY_WORD = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed|"
                          r"warnings?)\b")


def parse_pytest_summary(text: str) -> dict[str, int]:
    """Counts from pytest's closing line ("2 passed, 574 deselected in 3.7s"); {} if none."""
    for line in reversed(text.splitlines()):
        if re.search(r"\bin [\d.]+s\b", line) and SUMMARY_WORD.search(line):
            return {word.rstrip("s") if word in ("errors", "warnings") else word: int(n)
                    for n, word in SUMMARY_WORD.findall(line)}
    return {}


@dataclass
class GPUTestsOutcome:
    ok: bool
    counts: dict[str, int]
    seconds: float
    log: Path
    note: str = ""

    def describe(self) -> str:
        counts = ", ".join(f"{n} {word}" for word, n in self.counts.items()) or "no summary line"
        note = f" ({self.note})" if self.note else ""
        return f"{'passed' if self.ok else 'FAILED'}: {counts}{note}"


def run_gpu_tests(root: Path, log: Path, env: dict[str, str]) -> GPUTestsOutcome:
    """Step 3: the `gpu` tests in a pytest of their own, output to ``log``.

    A skipped GPU test on a machine with a GPU counts as a failure: the point is to run them.
    """
    start = time.perf_counter()
    note = ""
    try:
        done = subprocess.run(pytest_command(), cwd=root, env=env, capture_output=True,
                              text=True, timeout=TESTS_STEP_TIMEOUT)
        output, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:
        output = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) \
            else (err.stdout or "")
        output += f"\n[gpu-check: stopped after {TESTS_STEP_TIMEOUT} s]\n"
        rc, note = -1, f"stopped after {TESTS_STEP_TIMEOUT} s"
    log.write_text(shlex.join(pytest_command()) + "\n\n" + output)
    counts = parse_pytest_summary(output)
    ok = rc == 0 and counts.get("passed", 0) > 0 and not counts.get("failed") \
        and not counts.get("error") and not counts.get("skipped")
    if rc == 0 and counts.get("skipped"):
        note = "a GPU test skipped on a machine with a GPU"
    elif rc == 0 and not counts.get("passed"):
        note = "no GPU test ran"
    elif rc not in (0, -1) and not note:
        note = f"pytest exit {rc}"
    return GPUTestsOutcome(ok, counts, time.perf_counter() - start, log, note)


def declared_names(path: Path) -> list[str]:
    """The parameters a notebook declares, read from its cell tagged 'parameters' with the
    standard library alone (a dry run must work where papermill is not installed yet)."""
    cells = json.loads(Path(path).read_text())["cells"]
    for cell in cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            return re.findall(r"^([A-Za-z_]\w*)\s*=", source, re.M)
    return []


def notebook_parameters(paths: Sequence[Path], cards: Path) -> dict[str, Any]:
    """``device = "cuda"`` for every notebook, and the card folder when one declares
    ``card_dir`` (run_course refuses a parameter no selected notebook declares)."""
    params: dict[str, Any] = {"device": "cuda"}
    if any("card_dir" in declared_names(p) for p in paths):
        params["card_dir"] = str(Path(cards).resolve())
    return params


def _child_env() -> dict[str, str]:
    """This environment, with the folder this torchhw comes from first on PYTHONPATH, so that
    pytest and every kernel import this checkout's package, installed or not."""
    src = str(Path(__file__).resolve().parents[2])
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != src]
    return dict(os.environ, PYTHONPATH=os.pathsep.join([src] + parts), TQDM_DISABLE="1")


# --- the summary ----------------------------------------------------------------------------

def write_summary(folder: Path, gpu: GPUInfo, driver: str, tests: GPUTestsOutcome | None,
                  results: Sequence[Any], cards: list[Path], seconds: float,
                  problems: Sequence[str]) -> Path:
    """``gpu-check.md`` in ``folder``: the machine, the versions, each outcome, the card."""
    ok = not problems
    rows = [("date", date.today().isoformat()),
            ("GPUs", f"{gpu.count} × " + ", ".join(sorted(set(gpu.names)))),
            ("compute capability", ", ".join(gpu.capabilities)),
            ("memory", ", ".join(f"{m:.1f} GiB" for m in gpu.memory_gib)),
            ("driver", driver or "unknown (no nvidia-smi)"),
            ("torch", gpu.torch), ("CUDA", gpu.cuda or (f"ROCm {gpu.hip}" if gpu.hip else "none")),
            ("cuDNN", gpu.cudnn or "none"), ("NCCL", gpu.nccl or "none"),
            ("Python", f"{sys.version.split()[0]} ({sys.executable})")]
    md = [f"# GPU check, {date.today().isoformat()}, {gpu.names[0] if gpu.names else 'no GPU'}",
          "", f"**{'Passed' if ok else 'Failed'}** in {_clock(seconds)} "
          f"(budget {_clock(BUDGET_S)})."]
    md += [f"- {p}" for p in problems]
    md += ["", "## Machine", "", "| item | value |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in rows]
    md += ["", "## GPU tests", "", f"`{shlex.join(['python'] + pytest_command()[1:])}`", ""]
    if tests is None:
        md.append("Not run.")
    else:
        md.append(f"{tests.describe()}, {tests.seconds:.1f} s. Output: [{tests.log.name}]"
                  f"({tests.log.name}).")
    md += ["", "## Notebooks", "", "Quick mode, `device = \"cuda\"`, through papermill; the "
           "executed notebooks are beside this file, the run's report in [report.md](report.md).",
           "", "| notebook | status | seconds | error |", "|---|---|--:|---|"]
    for r in results:
        err = r.error.splitlines()[0][:120].replace("|", "\\|") if r.error else ""
        md.append(f"| [{r.name}]({Path(r.output).name}) | {r.status} | {r.seconds:.1f} | {err} |")
    if not results:
        md.append("| (none ran) | | | |")
    md += ["", "## Report card", ""]
    md += [f"- `{_shown(c)}`" for c in cards] or \
        ["None written (notebook 10 writes it when it passes)."]
    path = folder / "gpu-check.md"
    path.write_text("\n".join(md) + "\n")
    return path


def _new_cards(cards: Path, since: float) -> list[Path]:
    if not cards.is_dir():
        return []
    return sorted(p for p in cards.glob("*.json") if p.stat().st_mtime >= since - 1)


# --- the check ------------------------------------------------------------------------------

def gpu_check(out_root: Path = Path("reference"), wheels: Path = WHEELS,
              notebooks: Path | None = None, dry_run: bool = False,
              echo: Callable[..., Any] = print, index: bool = True) -> int:
    """Run the whole GPU check; 0 all passed, 1 something failed, 2 no GPU here.

    The order matters on a machine without a GPU: the setup is only looked at (no install)
    before the GPU is, so that such a machine says "no GPU" in seconds and changes nothing.
    ``dry_run`` prints every step (commands, folders) and runs none, whatever the machine.
    ``index``: False forbids pip the package index (a machine with no network).
    """
    start, wall_start = time.perf_counter(), time.time()
    root = find_root()
    out_root, wheels = Path(out_root), Path(wheels)

    # step 1, looked at only
    missing = missing_modules()
    error = ""
    try:
        commands = install_commands(missing, wheels, index, root)
    except SetupError as err:
        commands, error = [], str(err)
    kernel = kernel_state()
    if missing:
        where = f"from {wheels}/ (no index)" if wheels.is_dir() else \
            ("from the package index" if index else "from nowhere")
        _say(echo, f"setup: missing {', '.join(missing)}; to install {where}")
    else:
        _say(echo, f"setup: all {len(MODULES)} modules present, torchhw installed")
    _say(echo, {"ready": "setup: kernel is ready", "missing": "setup: kernel to register",
                "unknown": "setup: kernel to check once jupyter_client is installed"}[kernel])

    # step 2
    gpu = detect_gpu()
    if not gpu.count and not dry_run:
        echo(gpu.no_gpu_line(), flush=True)
        return 2
    if gpu.count:
        _say(echo, f"GPU: {gpu.count} × {gpu.names[0]} (capability {gpu.capabilities[0]}, "
                   f"{gpu.memory_gib[0]:.0f} GiB); torch {gpu.torch}, {gpu.build()}")
    else:
        _say(echo, f"GPU: none here (torch {gpu.torch}, {gpu.build()}); a dry run goes on")

    folder = out_root / "gpu-check" / f"{date.today().isoformat()}_{gpu.slug()}"
    cards = out_root / "cards"
    paths = discover(notebooks_dir(notebooks))
    if not paths:
        raise CourseError(f"{notebooks_dir(notebooks)} holds no notebooks named NN_topic.ipynb")
    params = notebook_parameters(paths, cards)

    if dry_run:
        for command in commands:
            _say(echo, f"would run: {shlex.join(command)}")
        if error:
            _say(echo, f"would stop: {error}")
        if kernel != "ready":
            _say(echo, f"would run (if the kernel is still missing): "
                       f"{shlex.join(kernel_command())}")
        _say(echo, f"would write into {folder}/ and cards into {cards}/")
        _say(echo, f"would run: {shlex.join(pytest_command())} > {folder / 'pytest-gpu.log'}")
        for i, path in enumerate(paths, 1):
            names = declared_names(path)
            mine = {k: v for k, v in {**params, "quick": True}.items() if k in names}
            _say(echo, f"would run [{i}/{len(paths)}] {path.stem} " +
                 " ".join(f"{k}={v}" for k, v in mine.items()))
        return 1 if error else 0

    # step 1, for real
    if error:
        _say(echo, f"error: {error}")
        return 1
    try:
        for command in commands:
            _say(echo, f"installing: {shlex.join(command)}")
            _run_setup(command, root)
        importlib.invalidate_caches()
        if kernel_state() != "ready":
            _say(echo, f"registering the kernel: {shlex.join(kernel_command())}")
            _run_setup(kernel_command(), root)
        if kernel_state() != "ready":
            raise SetupError(f"the Jupyter kernel {kernel_command()[-1]!r} still does not run "
                             f"{sys.executable}: see `jupyter kernelspec list`")
        still = [m for m in missing_modules() if m != "torchhw"]
        if still:
            raise SetupError(f"still missing after the install: {', '.join(still)}")
    except SetupError as err:
        _say(echo, f"error: {err}")
        return 1
    _say(echo, f"setup done ({_clock(time.perf_counter() - start)} so far)")

    # step 3
    folder.mkdir(parents=True, exist_ok=True)
    cards.mkdir(parents=True, exist_ok=True)
    env = _child_env()
    _say(echo, f"GPU tests: {shlex.join(pytest_command())}")
    tests = run_gpu_tests(root, folder / "pytest-gpu.log", env)
    _say(echo, f"GPU tests {tests.describe()} in {tests.seconds:.1f} s; log {_shown(tests.log)} "
               f"({_clock(time.perf_counter() - start)} so far)")

    # step 4
    from .runner import run_course

    _say(echo, f"notebooks: {len(paths)} with {params}, quick mode, into {folder}/")
    results: list[Any] = []
    problems = [] if tests.ok else [f"GPU tests {tests.describe()}"]
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # the kernels inherit it
    try:
        _, results = run_course(parameters=params, out_dir=folder, notebooks=notebooks,
                                quick=True, timeout=CELL_TIMEOUT, progress=False, echo=echo)
    except Exception as err:  # a bad parameter, papermill missing a piece: report, summarise
        problems.append(f"the notebooks did not run: {type(err).__name__}: {err}")
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    failed = [r.name for r in results if r.status != "ok"]
    if failed:
        problems.append(f"notebooks failed: {', '.join(failed)}")

    seconds = time.perf_counter() - start
    if seconds > BUDGET_S:
        problems.append(f"took {_clock(seconds)}, over the {_clock(BUDGET_S)} budget")
    new_cards = _new_cards(cards, wall_start)
    summary = write_summary(folder, gpu, _driver(), tests, results, new_cards, seconds, problems)
    _say(echo, f"{'passed' if not problems else 'FAILED'} in {_clock(seconds)}; summary "
               f"{_shown(summary)}" +
         (f"; card {', '.join(map(_shown, new_cards))}" if new_cards else ""))
    for p in problems:
        _say(echo, f"  {p}")
    return 1 if problems else 0


def _run_setup(command: list[str], root: Path) -> None:
    """One install step; a failure raises :class:`SetupError` with the end of pip's output."""
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SetupError(f"{shlex.join(command)} took over {INSTALL_TIMEOUT} s (no network? "
                         f"{_fetch_hint([])})") from None
    if done.returncode != 0:
        output = done.stdout + done.stderr
        hint = ""
        if "externally-managed-environment" in output:
            hint = ("\nThis Python's packages belong to the system. Make a venv that sees its "
                    "torch, `python3 -m venv --system-site-packages build/gpu-venv`, and run "
                    "`make gpu-check GPU_PYTHON=build/gpu-venv/bin/python`.")
        raise SetupError(f"{shlex.join(command)} failed (exit {done.returncode}):\n"
                         f"{output[-2000:]}{hint}")
