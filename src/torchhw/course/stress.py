"""The stress harness: run the distributed jobs many times and count failures (``torchhw stress``).

Three cases, each run ``runs`` times, in turn:

- ``launch``: 2 ranks started by :func:`torchhw.distributed.launch`, then 2 ranks of which
  one raises: the error must name that rank;
- ``clean``: the course's training script (:mod:`torchhw.distributed.train`) as a 2-node x
  2-rank torchrun job on 127.0.0.1, without a fault; every run must end with the same weights;
- ``crash``: the same job with a worker on the second node crashing once after step 15; it must
  resume from the checkpoint of step 10 and end with the weights of the runs without a fault.

Every run counts, the first fault-free run (the reference) as well. A run fails when it raises,
exits non-zero, aborts (SIGABRT, "terminate called"), ends with other weights, or leaves a
process running; the cause of each failure is printed, and its whole output kept in
``build/stress/``.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import psutil

from ..distributed import RankFailed, is_helper, launch
from ..distributed.agents import torchrun
from ..distributed.jobs import DRILL_RESTARTS
from .paths import find_root

CASES = ("launch", "clean", "crash")
STEPS, EVERY, CRASH_AT = 30, 10, 15
ABORTS = ("terminate called", "SIGABRT", "Signal 6 ")


# ------------------------------------------------------------------ what the launch case runs
# (module-level, so that the ranks can import them)

def hello(info):
    print(f"hello from rank {info.rank} of {info.world_size}")
    return info.rank


def fail_on(info, bad_rank=1):
    """Raise on ``bad_rank`` while the others wait in a barrier."""
    import torch.distributed as dist

    if info.rank == bad_rank:
        raise ValueError(f"rank {info.rank} was told to fail")
    dist.barrier()


def _launch_case() -> str:
    out: list[str] = []
    ranks = launch(hello, 2, device="cpu", echo=out.append, timeout=90)
    if ranks != [0, 1]:
        raise RuntimeError(f"the ranks returned {ranks}")
    try:
        launch(fail_on, 2, device="cpu", echo=out.append, timeout=90)
    except RankFailed as err:
        if "rank 1 of 2 failed" not in str(err) or "told to fail" not in str(err):
            raise RuntimeError("the failure was blamed on the wrong rank: " + str(err)[:300]) from None
    else:
        raise RuntimeError("a failing rank did not raise RankFailed")
    return "\n".join(out)


# ------------------------------------------------------------------ the 2-node jobs

def _train(folder: Path, crash: bool) -> tuple[str, str]:
    """One 2-node x 2-rank job in ``folder``; its parameter digest and its whole output."""
    from ..distributed import train as script

    args = ["--steps", str(STEPS), "--every", str(EVERY), "--checkpoint", str(folder / "job.pt"),
            "--out", str(folder / "job.json")]
    if crash:
        args += ["--crash-at", str(CRASH_AT), "--drill-marker", str(folder / "drill")]
    results = torchrun(script.__file__, args, nproc_per_node=2, nnodes=2, echo=None, timeout=240,
                       max_restarts=DRILL_RESTARTS if crash else 0, check=False)
    text = "\n".join(f"===== node {i}, exit code {r.returncode}\n{r.output}" for i, r in enumerate(results))
    bad = [i for i, r in enumerate(results) if r.returncode != 0]
    if bad:
        raise JobFailed(f"node {bad[0]} exited with code {results[bad[0]].returncode}", text)
    if crash:
        if not (folder / "drill").exists():
            raise JobFailed("the fault was not injected", text)
        if len(re.findall(rf"resumed from step {EVERY}\b", text)) < 4:
            raise JobFailed(f"not every rank resumed from step {EVERY}", text)
    return json.loads((folder / "job.json").read_text())["digest"], text


class JobFailed(RuntimeError):
    """A job ended wrongly; ``output`` holds everything it printed."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


def cause(message: str, output: str) -> str:
    """One line on why a run failed: an abort and the rank it hit, else the message and the
    workers' last error."""
    if any(a in output for a in ABORTS):
        ranks = sorted(set(re.findall(r"rank\s*:\s*(\d+) \(local_rank.*\n.*\n.*exitcode\s*:\s*-6", output)))
        where = f" in rank {', '.join(ranks)}" if ranks else ""
        return f"a worker aborted{where} (SIGABRT, 'terminate called'): {message}"
    errors = [line.strip() for line in output.splitlines()
              if re.search(r"(Error|Exception|Timeout)\b.*:", line) and "Traceback" not in line]
    return message + (f"; last error: {errors[-1][:200]}" if errors else "")


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if not is_helper(p)}


def stress(runs: int = 50, echo: Callable[[str], None] = print,
           cases: Sequence[str] | None = None, keep: Path | None = None) -> dict[str, list[str]]:
    """Run each case (all three by default) ``runs`` times; return each case's failures, one
    line each with its cause. The output of every failed run is written to ``keep``
    (default ``build/stress/``)."""
    chosen = [c for c in CASES if c in (cases or CASES)]
    if "crash" in chosen and "clean" not in chosen:
        raise ValueError("the crash case compares its weights with the fault-free runs': "
                         "choose the clean case as well (--case clean --case crash)")
    failures: dict[str, list[str]] = {k: [] for k in chosen}
    keep = keep or find_root() / "build" / "stress"
    keep.mkdir(parents=True, exist_ok=True)
    reference = ""
    with tempfile.TemporaryDirectory(prefix="torchhw-stress-") as tmp:
        for i in range(1, runs + 1):
            for kind in chosen:
                start = time.monotonic()
                folder = Path(tmp) / f"{kind}{i}"
                folder.mkdir()
                output = ""
                try:
                    if kind == "launch":
                        output = _launch_case()
                    else:
                        digest, output = _train(folder, crash=kind == "crash")
                        if kind == "clean" and not reference:
                            reference = digest
                            echo(f"reference (the first fault-free run): parameter digest {reference}")
                        elif reference and digest != reference:
                            raise JobFailed(f"digest {digest}, the fault-free runs' is {reference}", output)
                    if any(a in output for a in ABORTS):
                        raise JobFailed("a worker aborted although the job succeeded", output)
                    left = _descendants()
                    if left:
                        raise RuntimeError(f"processes left running: {sorted(left)}")
                    status = "ok"
                except Exception as err:
                    output = getattr(err, "output", output)
                    log = keep / f"{kind}-run{i}.log"
                    log.write_text(f"{type(err).__name__}: {err}\n\n{output}")
                    line = f"run {i}: {cause(f'{type(err).__name__}: {err}', output)} (output: {log})"
                    failures[kind].append(line)
                    status = "FAILED: " + line
                echo(f"{kind:<7} run {i:>3}/{runs}: {status} ({time.monotonic() - start:.1f} s)")
    return failures
