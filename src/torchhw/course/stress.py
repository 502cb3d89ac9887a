"""The stress harness: run the distributed jobs many times and count failures (``torchhw stress``).

Three cases, each run ``runs`` times:

- ``launch``: 2 ranks started by :func:`torchhw.distributed.launch`, then 2 ranks of which
  one raises: the error must name that rank;
- ``torchrun``: a 2-node x 2-rank torchrun job on 127.0.0.1 (c10d rendezvous);
- ``crash``: the same 2-node job training with checkpoints, a worker on the second node
  crashing once; it must resume and end with the same parameter hash as a run without a fault.

A run fails when it raises, exits non-zero, prints the shutdown abort seen on this kind of
machine ("terminate called without an active exception"), or leaves a process running.
The jobs are the test fixtures in ``tests/fixtures_distributed.py``.
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import psutil

from ..agents import torchrun
from ..distributed import RankFailed, is_helper, launch
from .paths import find_root



def _fixtures() -> Path:
    """The jobs live in the course's tests/ folder (found from the current directory)."""
    return find_root() / "tests" / "fixtures_distributed.py"


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if not is_helper(p)}


def _train(folder: Path, name: str, crash: bool) -> str:
    args = ["train", "--steps", "30", "--checkpoint", str(folder / f"{name}.pt"),
            "--out", str(folder / f"{name}.json")]
    if crash:
        args += ["--crash-at", "15", "--crash-node", "1", "--crash-marker", str(folder / f"{name}.m")]
    results = torchrun(str(_fixtures()), args, nproc_per_node=2, nnodes=2, echo=None, timeout=240,
                       max_restarts=1 if crash else 0)
    if crash and not (folder / f"{name}.m").exists():
        raise RuntimeError("the fault was not injected")
    text = "\n".join(r.output for r in results)
    if crash and "resumed from step 10" not in text:
        raise RuntimeError("the restarted workers did not resume from step 10: " + text[-500:])
    return json.loads((folder / f"{name}.json").read_text())["digest"]


def _failing_launch(fixtures) -> None:
    """Rank 1 raises while rank 0 waits in a barrier: the report must name rank 1's error."""
    try:
        launch(fixtures.fail_on, 2, echo=None, timeout=90)
    except RankFailed as err:
        if "rank 1 of 2 failed" not in str(err) or "told to fail" not in str(err):
            raise RuntimeError("the failure was blamed on the wrong rank: " + str(err)[:300])
    else:
        raise RuntimeError("a failing rank did not raise RankFailed")


def stress(runs: int = 50, echo: Callable[[str], None] = print,
           cases: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Run each case (all three by default) ``runs`` times; return each case's failures."""
    sys.path.insert(0, str(_fixtures().parent))
    fixtures = importlib.import_module("fixtures_distributed")
    failures: dict[str, list[str]] = {k: [] for k in cases or ("launch", "torchrun", "crash")}
    with tempfile.TemporaryDirectory(prefix="torchhw-stress-") as tmp:
        folder = Path(tmp)
        reference = ""
        if "crash" in failures:
            reference = _train(folder, "reference", crash=False)
            echo(f"reference run without a fault: parameter hash {reference}")
        for i in range(1, runs + 1):
            for kind in failures:
                start = time.monotonic()
                before = len(failures[kind])
                try:
                    if kind == "launch":
                        out: list[str] = []
                        launch(fixtures.hello, 2, echo=out.append, timeout=90)
                        text = "\n".join(out)
                        _failing_launch(fixtures)
                    elif kind == "torchrun":
                        text = "\n".join(r.output for r in torchrun(
                            str(_fixtures()), ["hello"], nproc_per_node=2, nnodes=2, echo=None,
                            timeout=120))
                    else:
                        got = _train(folder, f"crash{i}", crash=True)
                        if got != reference:
                            raise RuntimeError(f"hash {got} after the crash, {reference} without")
                        text = ""
                    if "terminate called" in text:
                        raise RuntimeError("shutdown abort: " + text[-300:])
                    left = _descendants()
                    if left:
                        raise RuntimeError(f"processes left running: {sorted(left)}")
                except Exception as err:
                    failures[kind].append(f"run {i}: {type(err).__name__}: {str(err)[:500]}")
                status = "ok" if len(failures[kind]) == before else "FAILED"
                echo(f"{kind:<8} run {i:>3}/{runs}: {status} ({time.monotonic() - start:.1f} s)")
    return failures
