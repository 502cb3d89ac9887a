"""Exercises of notebook 08 (clusters): ranks across nodes, restarts, torchrun commands."""

from __future__ import annotations

import numbers
import re
from typing import Any, Callable

from ..checks import Wrong, equal, exercise, hints_for, why
from ..i18n import tr


def _is_int(value: Any) -> bool:
    """An integer, Python's or NumPy's (numbers.Integral), but not a bool or a float."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@exercise(1, "global ranks",
          hint="number all the ranks of the job in one sequence, node after node. How many "
               "ranks come before the first rank of node node_rank?",
          more="nodes are numbered 0..nnodes-1 and each runs nproc_per_node ranks numbered "
               "0..nproc_per_node-1 locally; global ranks count node by node: "
               "node_rank * nproc_per_node + local_rank.")
def check_1(global_rank: Callable[[int, int, int], int]) -> str:
    for node, local, per_node in [(0, 0, 4), (0, 3, 4), (1, 0, 4), (2, 1, 8), (3, 0, 1), (1, 2, 3)]:
        want = node * per_node + local
        got = global_rank(node, local, per_node)
        call = f"global_rank(node_rank={node}, local_rank={local}, nproc_per_node={per_node})"
        if not _is_int(got):
            raise Wrong(tr("{call} = {got}, a {kind}: a rank is a whole number, an int (it "
                           "indexes processes and devices); return one, e.g. with // rather "
                           "than /.", call=call, got=repr(got), kind=type(got).__name__))
        equal(got, want, call,
              why(got, want,
                  (node + local, "each node holds nproc_per_node ranks: node_rank ranks of "
                                 "nodes come before"),
                  (local * per_node + node, "node and local rank swapped: the node's ranks "
                                            "come in one block"),
                  ((node + 1) * per_node + local, "nodes count from 0: node 0's ranks start "
                                                  "at 0")))
    return "With c10d the rendezvous assigns node ranks, so do not rely on a host being node 0."


@exercise(2, "work lost to a crash",
          hint="which step was the last checkpoint taken at, counting every multiple of "
               "`every`, the crash step itself included? Everything after it is lost.",
          more="after a restart the job resumes from the last checkpoint, taken at the last "
               "multiple of `every` at or before the crash; everything after it is redone: "
               "crash_step - (crash_step // every) * every, which is crash_step % every.")
def check_2(steps_redone: Callable[[int, int], int]) -> str:
    for crash, every in [(25, 10), (20, 10), (7, 10), (99, 1), (31, 8)]:
        want = crash - (crash // every) * every
        got = steps_redone(crash, every)
        call = f"steps_redone(crash_step={crash}, every={every})"
        equal(got, want, call, why(
            got, want,
            (crash % every or every, "a checkpoint taken at the crash step itself saves all of "
                                     "it: nothing is redone"),
            (every, "not always a whole interval: only the steps since the last checkpoint"),
            (crash // every, "that counts the checkpoints taken; count the steps since the "
                             "last one"),
            (every - crash % every, "that counts the steps to the next checkpoint; count "
                                    "those since the last one"),
            (crash, "the job resumes from its last checkpoint, not from the start")))
    return "Checkpoint often enough that a crash costs little, rarely enough that saving costs little."


class _Rejected(Exception):
    pass


def _torchrun_parse(argv: list[str]) -> tuple[Any, dict[str, Any]]:
    """``argv`` read by torchrun's own argument parser: (its namespace, the defaults), or (the
    parser's error message, the defaults) where torchrun would refuse the command."""
    import contextlib
    import io

    from torch.distributed.run import get_args_parser

    parser = get_args_parser()

    def error(message: str) -> None:
        raise _Rejected(message)

    parser.error = error  # type: ignore[method-assign]
    defaults = vars(parser.parse_args(["x"]))
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(list(argv)), defaults
    except _Rejected as err:
        return str(err), defaults
    except SystemExit:  # --help and the like
        return tr("it stops without running anything"), defaults


@exercise(3, "a torchrun command for two nodes",
          hint="every node runs the same command. What must it tell torchrun: how many nodes "
               "and processes, and how and where the nodes meet (the rendezvous), under which "
               "job id, and what to run?",
          more="each node runs: torchrun --nnodes=N --nproc-per-node=P --rdzv-backend=c10d "
               "--rdzv-endpoint=HOST:PORT --rdzv-id=ID -m MODULE, built from the arguments. "
               "Return it as a list of strings. Not --standalone: that makes each node a job "
               "of its own.")
def check_3(command: Callable[[int, int, str, str], list[str]]) -> str:
    for nnodes, nproc, endpoint, module in [(2, 4, "node1:29500", "torchhw.train"),
                                            (3, 8, "10.0.0.5:29400", "my_project.main")]:
        call = f"torchrun_for({nnodes}, {nproc}, {endpoint!r}, {module!r})"
        got = [str(a) for a in command(nnodes, nproc, endpoint, module)]
        program = _launcher_length(got)
        if not program:
            raise Wrong(tr("{call}: the command should start with 'torchrun' (or 'python -m "
                           "torch.distributed.run', the same program).", call=call))
        parsed, defaults = _torchrun_parse(got[program:])
        if isinstance(parsed, str):
            raise Wrong(tr("{call}: torchrun rejects this command ({parsed}). Check each "
                           "option's spelling against torchrun --help.", call=call, parsed=parsed))
        if parsed.standalone:
            raise Wrong(tr("--standalone makes each node a job of its own: the two nodes would "
                           "never meet."))
        wanted = {"nnodes": str(nnodes), "nproc-per-node": str(nproc), "rdzv-backend": "c10d",
                  "rdzv-endpoint": endpoint}
        for name, value in wanted.items():
            attr = name.replace("-", "_")
            have = str(getattr(parsed, attr))
            if name == "nnodes" and ":" in have:
                low, _, high = have.partition(":")
                if low == high == value:  # MIN:MAX with MIN == MAX: exactly that many nodes
                    continue
                if low != high and value in (low, high):
                    raise Wrong(tr("{call}: --nnodes={have} lets the job start with any number "
                                   "of nodes from {low} to {high}; the task asks for exactly "
                                   "{value}: --nnodes={value} (or {value}:{value}).", call=call,
                                   have=have, low=low, high=high, value=value))
            if have != value:
                given = getattr(parsed, attr) != defaults[attr]
                shown = tr(", got {have}", have=repr(have)) if given else ""
                fixed = (tr(" (take it from the arguments, not a fixed value)")
                         if given and nnodes == 3 else "")
                raise Wrong(tr("{call}: --{name} should be {value}{shown}{fixed}.", call=call,
                               name=name, value=value, shown=shown, fixed=fixed))
        if not parsed.rdzv_id or parsed.rdzv_id == defaults["rdzv_id"]:
            raise Wrong(tr("add --rdzv-id=SOMETHING (not empty): both nodes must name the same "
                           "job."))
        if parsed.module and parsed.training_script == module and parsed.training_script_args:
            raise Wrong(tr("{call}: after -m {module} comes {extra}, which torchrun hands to the "
                           "module as its arguments; the task asks for the module alone, so end "
                           "with '-m', {module}.", call=call, module=repr(module),
                           extra=repr(parsed.training_script_args)))
        if not parsed.module or parsed.training_script != module or parsed.training_script_args:
            if not parsed.module and parsed.training_script == module:
                raise Wrong(tr("{call}: without -m torchrun runs {module} as the path of a "
                               "script file; put '-m' before it, so torchrun runs the module "
                               "(as python -m does).", call=call, module=repr(module)))
            if nnodes == 3:
                raise Wrong(tr("{call}: end with '-m', {module}, so torchrun runs the module "
                               "(take it from the arguments).", call=call, module=repr(module)))
            raise Wrong(tr("{call}: end with '-m', {module}, so torchrun runs the module.",
                           call=call, module=repr(module)))
    return "torchhw.distributed.agents.torchrun_command builds the same, and the Slurm script uses it."


def _launcher_length(argv: list[str]) -> int:
    """How many words start torchrun in ``argv``: 1 for torchrun, 3 for python -m
    torch.distributed.run (the program the torchrun command runs), 0 for anything else."""
    if argv and argv[0].rsplit("/", 1)[-1] == "torchrun":
        return 1
    if len(argv) >= 3 and re.fullmatch(r"python[\d.]*", argv[0].rsplit("/", 1)[-1]) \
            and argv[1:3] == ["-m", "torch.distributed.run"]:
        return 3
    return 0


def _culprits(report: str) -> list[int]:
    match = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", report)
    return sorted(int(r) for r in match.group(1).replace(" ", "").split(",") if r) if match else []


REPORTS = ["Rank 0 timed out in monitoredBarrier after 3000 ms. Ranks 2, 5 failed to pass monitoredBarrier in 3000 ms",
           "Rank 0 timed out in monitoredBarrier after 5000 ms. Rank 1 failed to pass monitoredBarrier in 5000 ms",
           "Ranks 3, 7, 12 failed to pass monitoredBarrier in 3000 ms",
           "Rank 0 timed out in monitoredBarrier after 30000 ms. Ranks 14, 9, 10 failed to pass monitoredBarrier in 30000 ms"]


@exercise(4, "which ranks hang",
          hint="the report names the ranks that never arrived in one particular phrase. Find "
               "that phrase, take the numbers in it and nothing else, and return them as the "
               "task asks (ints, sorted).",
          more="monitored_barrier's error lists the ranks that failed to pass it, after "
               "'Rank' or 'Ranks' and before 'failed to pass'; rank 0 itself only reports. A "
               "regular expression finds them: re.search(r'Ranks? ([\\d, ]+) failed', report), "
               "then split on commas, int() each, and sort.")
def check_4(culprits: Callable[[str], list[int]]) -> str:
    for report in REPORTS:
        want = _culprits(report)
        got = culprits(report)
        call = f"culprits({report[-70:]!r})"
        if not isinstance(got, (list, tuple)):
            raise Wrong(tr("{call} returned {kind}: return a list of rank numbers.", call=call,
                           kind=type(got).__name__))
        odd = [r for r in got if not _is_int(r)]
        if odd:
            raise Wrong(tr("{call} = {got}: return the ranks as ints (int() each match); {first} "
                           "is a {kind}, not an int.", call=call, got=repr(list(got)),
                           first=repr(odd[0]), kind=type(odd[0]).__name__))
        got = [int(r) for r in got]  # NumPy's integers too
        if sorted(got) == want and got != want:
            raise Wrong(tr("{call} = {got}: the right ranks, but sort them.", call=call, got=got))
        equal(got, want, call, why(
            got, want,
            (sorted(set([0] + want)), "rank 0 reports the hang; it passed the barrier itself"),
            (want[:1], "every rank listed after 'Ranks' hangs, not only the first"),
            (sorted(int(r) for r in re.findall(r"\d+", report)), "that takes every number in the "
                                                                  "report, ranks and times alike")))
    return "Next, dump their stacks (py-spy dump --pid PID) to see where they are stuck."


CHECKS = {1: check_1, 2: check_2, 3: check_3, 4: check_4}
hint = hints_for(CHECKS)

SOLUTIONS: dict[int, Any] = {
    1: lambda node, local, per_node: node * per_node + local,
    2: lambda crash, every: crash % every,
    3: lambda nnodes, nproc, endpoint, module: [
        "torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}", "--rdzv-id=job1", "-m", module],
    4: _culprits,
}

def _culprits_as_found(report: str) -> list[int]:
    """The ranks in the report's order, not sorted."""
    match = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", report)
    return [int(r) for r in match.group(1).split(",")] if match else []


def _culprits_numpy(report: str) -> list[Any]:
    """The ranks as NumPy's integers (numpy.int64), as np.sort or np.array give them."""
    import numpy as np

    return list(np.sort(np.array(_culprits(report), dtype=np.int64)))


WRONG: dict[int, list[Any]] = {
    # the hint's point: count node by node; the two ranks swapped
    1: [lambda node, local, per_node: node + local, lambda node, local, per_node: local * per_node + node,
        # the review's: the right number as a float
        lambda node, local, per_node: float(node * per_node + local)],
    # the hint's warning: a checkpoint at the crash step itself; counts instead of steps
    2: [lambda crash, every: every, lambda crash, every: crash // every,
        lambda crash, every: crash % every or every],
    # the hint's warning (--standalone) and the task's rule (a c10d rendezvous with an id, built
    # from the arguments)
    3: [lambda n, p, e, m: ["torchrun", "--standalone", f"--nproc-per-node={p}", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}", "--standalone",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=j", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=", "-m", m],
        lambda n, p, e, m: ["torchrun", "--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                            "--rdzv-endpoint=node1:29500", "--rdzv-id=job1", "-m", "torchhw.train"],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            f"--master-addr={e.split(':')[0]}", f"--master-port={e.split(':')[1]}",
                            "-m", m],
        # the review's: an option torchrun does not have
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=j",
                            "--rdzv-timout=10", "-m", m],
        # the review's: a range of nodes that is not the task's, arguments after the module,
        # and the module run as a script path (no -m)
        lambda n, p, e, m: ["torchrun", f"--nnodes=1:{n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=j", "-m", m],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=j", "-m", m,
                            "--steps", "10"],
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=j", m]],
    # the hint's warning (rank 0 only reports), and the task's rule (sorted ints)
    4: [lambda r: [0] + _culprits(r), lambda r: _culprits(r)[:1], lambda r: [],
        lambda r: [str(x) for x in _culprits(r)], _culprits_as_found,
        lambda r: sorted(int(x) for x in re.findall(r"\d+", r))],
}

ALSO_RIGHT: dict[int, list[Any]] = {
    1: [lambda node_rank, local_rank, nproc_per_node: local_rank + nproc_per_node * node_rank],
    2: [lambda crash, every: crash - every * (crash // every)],
    3: [lambda n, p, e, m: ["torchrun", "--nnodes", str(n), "--nproc_per_node", str(p),
                            "--rdzv_backend", "c10d", "--rdzv_endpoint", e, "--rdzv_id", "exp7",
                            "-m", m],
        # the review's: --module is torchrun's long spelling of -m
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=job",
                            "--module", m],
        # the review's: torchrun's MIN:MAX form with MIN == MAX, and the program the torchrun
        # command runs, as the notebook prints it
        lambda n, p, e, m: ["torchrun", f"--nnodes={n}:{n}", f"--nproc-per-node={p}",
                            "--rdzv-backend=c10d", f"--rdzv-endpoint={e}", "--rdzv-id=j", "-m", m],
        lambda n, p, e, m: ["python", "-m", "torch.distributed.run", f"--nnodes={n}",
                            f"--nproc-per-node={p}", "--rdzv-backend=c10d",
                            f"--rdzv-endpoint={e}", "--rdzv-id=j", "-m", m]],
    4: [lambda r: sorted(int(x) for x in re.search(r"Ranks? ([\d, ]+) failed", r).group(1).split(",")),
        lambda r: tuple(sorted(map(int, re.findall(r"\d+", r.split(" failed to pass")[0]
                                                   .rsplit("Rank", 1)[1])))),
        # the review's: NumPy's integers are ints too
        _culprits_numpy],
}
"""Other correct answers each checker must accept (tested alongside SOLUTIONS)."""
