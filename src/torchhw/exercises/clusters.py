"""Exercises of notebook 08 (clusters): ranks across nodes, restarts, torchrun commands."""

from __future__ import annotations

import re
from typing import Any, Callable

from ..checks import Wrong, equal, exercise


@exercise(1, "global ranks",
          hint="nodes are numbered 0..nnodes-1 and each runs nproc_per_node ranks numbered "
               "0..nproc_per_node-1 locally; global ranks count node by node.")
def check_1(global_rank: Callable[[int, int, int], int]) -> str:
    for node, local, per_node in [(0, 0, 4), (0, 3, 4), (1, 0, 4), (2, 1, 8), (3, 0, 1)]:
        equal(global_rank(node, local, per_node), node * per_node + local,
              f"global_rank(node_rank={node}, local_rank={local}, nproc_per_node={per_node})")
    return "With c10d the rendezvous assigns node ranks, so do not rely on a host being node 0."


@exercise(2, "work lost to a crash",
          hint="after a restart the job resumes from the last checkpoint, taken at the last "
               "multiple of `every` at or before the crash; everything after it is redone.")
def check_2(steps_redone: Callable[[int, int], int]) -> str:
    for crash, every in [(25, 10), (20, 10), (7, 10), (99, 1), (31, 8)]:
        equal(steps_redone(crash, every), crash - (crash // every) * every,
              f"steps_redone(crash_step={crash}, every={every})")
    return "Checkpoint often enough that a crash costs little, rarely enough that saving costs little."


def _options(argv: list[str]) -> dict[str, str]:
    """torchrun's options as {name: value}, accepting --a=b and --a b, dashes or underscores."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" or not arg.startswith("--"):
            break
        name, eq, value = arg[2:].partition("=")
        name = name.replace("_", "-")
        if not eq:
            flag = name in ("standalone",)
            value = "" if flag or i + 1 >= len(argv) else argv[i + 1]
            i += 0 if flag else 1
        out[name] = value
        i += 1
    return out


@exercise(3, "a torchrun command for two nodes",
          hint="each node runs: torchrun --nnodes=N --nproc-per-node=P --rdzv-backend=c10d "
               "--rdzv-endpoint=HOST:PORT --rdzv-id=ID -m MODULE. Return it as a list of strings.")
def check_3(command: Callable[[int, int, str, str], list[str]]) -> str:
    got = [str(a) for a in command(2, 4, "node1:29500", "torchhw.train")]
    if not got or got[0] != "torchrun":
        raise Wrong("the command should start with 'torchrun'.")
    options = _options(got[1:])
    if "standalone" in options:
        raise Wrong("--standalone makes each node a job of its own: the two nodes would never meet.")
    wanted = {"nnodes": "2", "nproc-per-node": "4", "rdzv-backend": "c10d", "rdzv-endpoint": "node1:29500"}
    for name, value in wanted.items():
        if options.get(name) != value:
            raise Wrong(f"--{name} should be {value}" + (f", got {options[name]!r}." if name in options else "."))
    if not options.get("rdzv-id"):
        raise Wrong("add --rdzv-id=SOMETHING (not empty): both nodes must name the same job.")
    if got[-2:] != ["-m", "torchhw.train"]:
        raise Wrong("end with '-m', 'torchhw.train' so torchrun runs the module.")
    return "torchhw.distributed.agents.torchrun_command builds the same, and the Slurm script uses it."


def _culprits(report: str) -> list[int]:
    match = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", report)
    return sorted(int(r) for r in match.group(1).replace(" ", "").split(",") if r) if match else []


REPORTS = ["Rank 0 timed out in monitoredBarrier after 3000 ms. Ranks 2, 5 failed to pass monitoredBarrier in 3000 ms",
           "Rank 0 timed out in monitoredBarrier after 5000 ms. Rank 1 failed to pass monitoredBarrier in 5000 ms",
           "Ranks 3, 7, 12 failed to pass monitoredBarrier in 3000 ms"]


@exercise(4, "which ranks hang",
          hint="monitored_barrier's error lists the ranks that failed to pass it, after "
               "'Rank' or 'Ranks'; rank 0 itself only reports. A regular expression finds them.")
def check_4(culprits: Callable[[str], list[int]]) -> str:
    for report in REPORTS:
        got = culprits(report)
        try:
            got = sorted(int(r) for r in got)
        except (TypeError, ValueError):
            raise Wrong(f"return a list of rank numbers, got {got!r}.") from None
        equal(got, _culprits(report), f"culprits({report[-60:]!r})")
    return "Next, dump their stacks (py-spy dump --pid PID) to see where they are stuck."


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}

SOLUTIONS: dict[int, Any] = {
    1: lambda node, local, per_node: node * per_node + local,
    2: lambda crash, every: crash % every,
    3: lambda nnodes, nproc, endpoint, module: [
        "torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}", "--rdzv-id=job1", "-m", module],
    4: _culprits,
}

WRONG: dict[int, list[Any]] = {
    1: [lambda node, local, per_node: node + local, lambda node, local, per_node: local * per_node + node],
    2: [lambda crash, every: every, lambda crash, every: crash // every],
    3: [lambda n, p, e, m: ["torchrun", "--standalone", f"--nproc-per-node={p}", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}", "--standalone",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=j", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=", "-m", m]],
    4: [lambda r: [0] + _culprits(r), lambda r: _culprits(r)[:1], lambda r: []],
}
