"""Exercises of notebook 08 (clusters): ranks across nodes, restarts, torchrun commands."""

from __future__ import annotations

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


@exercise(3, "a torchrun command for two nodes",
          hint="each node runs: torchrun --nnodes=N --nproc-per-node=P --rdzv-backend=c10d "
               "--rdzv-endpoint=HOST:PORT --rdzv-id=ID -m MODULE. Return it as a list of strings.")
def check_3(command: Callable[[int, int, str, str], list[str]]) -> str:
    got = list(command(2, 4, "node1:29500", "torchhw.workers"))
    needed = ["--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
              "--rdzv-endpoint=node1:29500"]
    missing = [flag for flag in needed if flag not in got and flag.replace("-per-", "_per_") not in got]
    if not got or got[0] != "torchrun":
        raise Wrong("the command should start with 'torchrun'.")
    if missing:
        raise Wrong(f"missing: {', '.join(missing)}.")
    if got[-2:] != ["-m", "torchhw.workers"]:
        raise Wrong("end with '-m', 'torchhw.workers' so torchrun runs the module.")
    if not any(a.startswith(("--rdzv-id=", "--rdzv_id=")) for a in got):
        raise Wrong("add --rdzv-id=SOMETHING: both nodes must name the same job.")
    return "torchhw.jobs.torchrun_args builds the same for any job description."


CHECKS = {1: check_1, 2: check_2, 3: check_3}

SOLUTIONS: dict[int, Any] = {
    1: lambda node, local, per_node: node * per_node + local,
    2: lambda crash, every: crash % every,
    3: lambda nnodes, nproc, endpoint, module: [
        "torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}", "--rdzv-id=job1", "-m", module],
}

WRONG: dict[int, list[Any]] = {
    1: [lambda node, local, per_node: node + local, lambda node, local, per_node: local * per_node + node],
    2: [lambda crash, every: every, lambda crash, every: crash // every],
    3: [lambda n, p, e, m: ["torchrun", "--standalone", f"--nproc-per-node={p}", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "-m", m]],
}
