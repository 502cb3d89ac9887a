"""Running a function on N processes from a notebook or a script, and torchrun from Python.

Two routes, one promise: output shown with each rank's prefix, errors that carry the failing
rank's traceback, bounded time, and no process left behind, whether a rank crashes, a
collective hangs, or the reader presses stop.

1. :func:`launch` starts ``nprocs`` processes with the *spawn* start method (fork deadlocks once
   the parent has run an OpenMP op), joins them in a process group (gloo on CPU, NCCL when
   there is a GPU per rank) through a file-based rendezvous (no ports to collide), and
   returns each rank's return value::

       results = launch(workers.collectives, nprocs=2)

   The function must be importable from a module (``torchhw.workers`` or your own file):
   a function defined in a notebook cannot be pickled into a spawned process.

2. :func:`torchrun` builds and runs ``python -m torch.distributed.run ... -m module`` for one
   node (``--standalone``) or several simulated on this machine (c10d rendezvous on
   127.0.0.1), with the same clean-up guarantees. Stopping torchrun takes SIGTERM to the
   agent, which stops its workers; killing the agent's process group is not enough, since
   workers run in process groups of their own.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence
import multiprocessing as mp
import subprocess

import psutil


class RankFailed(RuntimeError):
    """A rank raised or died. The message holds its traceback; the other ranks were stopped."""


class LaunchTimeout(TimeoutError):
    """Ranks were still running when the time limit passed; all of them were stopped."""


@dataclass(frozen=True)
class RankInfo:
    """What a launched function is told about its place in the job."""

    rank: int
    world_size: int
    backend: str
    device: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def choose_backend(nprocs: int, backend: str = "auto") -> str:
    """'nccl' when there is a CUDA GPU for every rank, else 'gloo' (or what was asked)."""
    if backend != "auto":
        return backend
    from .device import cuda_count

    return "nccl" if cuda_count() >= nprocs else "gloo"


# --------------------------------------------------------------------------- the child side

def _watch_parent(parent: int) -> None:
    """Exit when the launching process is gone, so a killed kernel leaves no orphans."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


def _child(fn: Callable[..., Any], args: tuple[Any, ...], rank: int, world_size: int,
           backend: str, init_method: str, workdir: str, threads: int,
           collective_timeout: float, parent: int) -> None:
    log = os.open(os.path.join(workdir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)  # fd level, so C++ messages (gloo, NCCL) are captured too
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    out = Path(workdir) / f"rank{rank}"
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        device = "cpu"
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = f"cuda:{rank}"
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size,
                                timeout=timedelta(seconds=collective_timeout))
        try:
            result = fn(RankInfo(rank, world_size, backend, device), *args)
        except BaseException:
            # record the cause *before* exiting: exiting breaks the peers' connections, and
            # their errors must not look like the first failure
            out.with_suffix(".error").write_text(traceback.format_exc())
            raise
        dist.barrier()  # everyone done before tearing down: avoids aborts at shutdown
        dist.destroy_process_group()
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(result))
        tmp.replace(out.with_suffix(".result"))
    except BaseException:
        if not out.with_suffix(".error").exists():
            out.with_suffix(".error").write_text(traceback.format_exc())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()


# --------------------------------------------------------------------------- the parent side

class _Tail:
    """Prints new lines of each rank's log with a '[rank N]' prefix."""

    def __init__(self, paths: list[Path], echo: Callable[[str], None]) -> None:
        self.paths, self.echo = paths, echo
        self.offsets = [0] * len(paths)
        self.partial = [""] * len(paths)

    def poll(self, final: bool = False) -> None:
        for i, path in enumerate(self.paths):
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self.offsets[i])
                chunk = f.read()
            self.offsets[i] += len(chunk)
            text = self.partial[i] + chunk.decode(errors="replace")
            lines = text.split("\n")
            self.partial[i] = "" if final else lines.pop()
            for line in lines:
                if line or not final:
                    self.echo(f"[rank {i}] {line}")


def stop_processes(procs: Sequence[psutil.Process], grace: float = 3.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL whatever is left."""
    alive = [p for p in procs if p.is_running()]
    for p in alive:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)


def launch(fn: Callable[..., Any], nprocs: int = 2, args: Sequence[Any] = (), *,
           backend: str = "auto", threads: int = 1, timeout: float = 120,
           collective_timeout: float = 30, echo: Callable[[str], None] | None = print) -> list[Any]:
    """Run ``fn(RankInfo, *args)`` on ``nprocs`` spawned processes; return each rank's result.

    - ``threads``: intra-op threads per rank (1 by default: N ranks on N cores).
    - ``timeout``: seconds for the whole job; ``collective_timeout``: for one collective
      (and the rendezvous), so a rank waiting for a dead peer fails instead of hanging.
    - ``echo``: where rank output goes, line by line with a ``[rank N]`` prefix (None: nowhere).

    Raises RankFailed (with the traceback) when a rank raises or dies, LaunchTimeout past
    ``timeout``; in every case, and on KeyboardInterrupt, all ranks are stopped first.
    """
    if getattr(fn, "__module__", "__main__") == "__main__":
        raise ValueError(
            f"{getattr(fn, '__name__', fn)!r} is defined in the notebook (module __main__), so "
            f"spawned processes cannot import it. Put it in a .py file next to the notebook and "
            f"import it from there, or use one from torchhw.workers."
        )
    if nprocs < 1:
        raise ValueError(f"nprocs must be at least 1, got {nprocs}")
    backend = choose_backend(nprocs, backend)
    workdir = Path(tempfile.mkdtemp(prefix="torchhw-launch-"))
    init_method = f"file://{workdir / 'rendezvous'}"
    ctx = mp.get_context("spawn")
    saved_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    procs: list[Any] = []
    tail = _Tail([workdir / f"rank{r}.log" for r in range(nprocs)], echo or (lambda line: None))
    try:
        for rank in range(nprocs):
            p = ctx.Process(target=_child, name=f"torchhw-rank{rank}",
                            args=(fn, tuple(args), rank, nprocs, backend, init_method,
                                  str(workdir), threads, collective_timeout, os.getpid()))
            p.start()
            procs.append(p)
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    handles = [psutil.Process(p.pid) for p in procs]
    deadline = time.monotonic() + timeout
    try:
        while True:
            tail.poll()
            codes = [p.exitcode for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                # the first to fail is the cause; peers then fail on broken connections
                def failed_at(r: int) -> float:
                    error = workdir / f"rank{r}.error"
                    return error.stat().st_mtime_ns if error.exists() else float("inf")
                rank = min(failed, key=failed_at)
                stop_processes(handles)
                tail.poll(final=True)
                error = workdir / f"rank{rank}.error"
                detail = error.read_text() if error.exists() else \
                    f"it died with exit code {codes[rank]} (killed by a signal if negative)"
                raise RankFailed(f"rank {rank} of {nprocs} failed; the other ranks were "
                                 f"stopped.\n{detail}")
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                running = [r for r, c in enumerate(codes) if c is None]
                stop_processes(handles)
                tail.poll(final=True)
                raise LaunchTimeout(
                    f"ranks {running} were still running after {timeout:g} s and were stopped. "
                    f"A rank waiting in a collective for a peer that never arrives looks like "
                    f"this; raise timeout= if the work is just slow."
                )
            time.sleep(0.05)
        tail.poll(final=True)
        return [pickle.loads((workdir / f"rank{r}.result").read_bytes()) for r in range(nprocs)]
    finally:  # KeyboardInterrupt included: nothing outlives the call
        stop_processes(handles)
        for p in procs:
            p.join(timeout=1)


# --------------------------------------------------------------------------- torchrun

@dataclass
class RunResult:
    """What a torchrun job printed and how it ended."""

    returncode: int
    output: str
    seconds: float


def torchrun_command(module: str, args: Sequence[str] = (), *, nproc_per_node: int = 2,
                     nnodes: int = 1, rdzv_endpoint: str | None = None,
                     rdzv_id: str = "torchhw", max_restarts: int = 0,
                     python: str | None = None) -> list[str]:
    """The argv of ``python -m torch.distributed.run`` for ``module`` (single node: standalone)."""
    cmd = [python or sys.executable, "-m", "torch.distributed.run",
           f"--nproc-per-node={nproc_per_node}", f"--max-restarts={max_restarts}",
           "--monitor-interval=0.5"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd.append("--standalone")
    else:
        if rdzv_endpoint is None:
            raise ValueError("a multi-node job needs rdzv_endpoint='host:port'")
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
                f"--rdzv-id={rdzv_id}"]
    return cmd + ["-m", module, *args]


def _agent_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)  # torchrun would set 1 and print a banner about it
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stop_agent(agent: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Stop a torchrun agent and its workers: SIGTERM to the agent, then kill what remains."""
    try:
        workers = psutil.Process(agent.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        workers = []
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)  # the agent forwards it to its workers
        try:
            agent.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    stop_processes(workers, grace=grace / 2)


def run_agents(commands: Sequence[Sequence[str]], *, timeout: float = 120, threads: int = 1,
               prefixes: Sequence[str] | None = None,
               echo: Callable[[str], None] | None = print) -> list[RunResult]:
    """Run torchrun agents side by side (one per simulated node); stream and return output.

    Raises LaunchTimeout past ``timeout``. Every agent and worker is stopped on return,
    on error and on KeyboardInterrupt.
    """
    echo = echo or (lambda line: None)
    prefixes = list(prefixes or [f"[node {i}] " if len(commands) > 1 else "" for i in range(len(commands))])
    start = time.monotonic()
    agents: list[subprocess.Popen[str]] = []
    outputs: list[list[str]] = [[] for _ in commands]
    readers = []
    lock = threading.Lock()

    def read(i: int, stream: Any) -> None:
        for line in stream:
            line = line.rstrip("\n")
            outputs[i].append(line)
            with lock:
                echo(prefixes[i] + line)

    try:
        for i, cmd in enumerate(commands):
            agent = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=_agent_env(threads), start_new_session=True)
            agents.append(agent)
            t = threading.Thread(target=read, args=(i, agent.stdout), daemon=True)
            t.start()
            readers.append(t)
        for agent in agents:
            left = timeout - (time.monotonic() - start)
            try:
                agent.wait(timeout=max(left, 0.01))
            except subprocess.TimeoutExpired:
                with lock:
                    tail = "\n".join(prefixes[i] + line for i, out in enumerate(outputs)
                                     for line in out[-15:])
                raise LaunchTimeout(f"torchrun was still running after {timeout:g} s and was "
                                    f"stopped with its workers. Last lines:\n{tail}") from None
        for t in readers:
            t.join(timeout=5)
        seconds = time.monotonic() - start
        return [RunResult(a.returncode, "\n".join(o), seconds) for a, o in zip(agents, outputs)]
    finally:
        for agent in agents:
            stop_agent(agent)


def torchrun(module: str, args: Sequence[str] = (), *, nproc_per_node: int = 2, nnodes: int = 1,
             max_restarts: int = 0, timeout: float = 120, threads: int = 1,
             check: bool = True, echo: Callable[[str], None] | None = print) -> list[RunResult]:
    """Run ``module`` under torchrun: one standalone node, or ``nnodes`` agents on this
    machine meeting through c10d rendezvous on 127.0.0.1 (a multi-node job, simulated).

    Returns one RunResult per node. With ``check``, a non-zero exit raises RankFailed with
    the end of the output.
    """
    if nnodes == 1:
        commands = [torchrun_command(module, args, nproc_per_node=nproc_per_node,
                                     max_restarts=max_restarts)]
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        rdzv_id = f"torchhw-{uuid.uuid4().hex[:8]}"
        commands = [torchrun_command(module, args, nproc_per_node=nproc_per_node, nnodes=nnodes,
                                     rdzv_endpoint=endpoint, rdzv_id=rdzv_id,
                                     max_restarts=max_restarts) for _ in range(nnodes)]
    results = run_agents(commands, timeout=timeout, threads=threads, echo=echo)
    bad = [i for i, r in enumerate(results) if r.returncode != 0]
    if check and bad:
        lines = results[bad[0]].output.splitlines()
        # the workers' own tracebacks (torchrun prefixes them '[rankN]:') say more than its summary
        worker = [line for line in lines if line.startswith("[rank")][-30:]
        tail = "\n".join(worker + ["..."] + lines[-12:] if worker else lines[-25:])
        raise RankFailed(f"torchrun on node {bad[0]} exited with code {results[bad[0]].returncode}; "
                         f"every agent and worker was stopped. Output:\n{tail}")
    return results


# --------------------------------------------------------------------------- stress

def stress(runs: int = 50, echo: Callable[[str], None] = print) -> dict[str, list[str]]:
    """Run the 2-rank launch and the 2-node x 2-rank torchrun job ``runs`` times each.

    Returns the failures of each ('launch', 'torchrun'); a run fails when it raises, exits
    non-zero, prints the shutdown abort seen on this kind of machine ("terminate called
    without an active exception"), or leaves a process running.
    """
    from . import workers

    def descendants() -> set[int]:
        return {p.pid for p in psutil.Process().children(recursive=True)
                if "resource_tracker" not in " ".join(p.cmdline())}

    failures: dict[str, list[str]] = {"launch": [], "torchrun": []}
    for i in range(1, runs + 1):
        for kind in failures:
            start = time.monotonic()
            before = len(failures[kind])
            try:
                if kind == "launch":
                    out: list[str] = []
                    launch(workers.hello, 2, echo=out.append, timeout=90)
                    text = "\n".join(out)
                else:
                    text = "\n".join(r.output for r in torchrun(
                        "torchhw.workers", ["hello"], nproc_per_node=2, nnodes=2, echo=None,
                        timeout=120))
                if "terminate called" in text:
                    raise RuntimeError("shutdown abort: " + text[-300:])
                left = descendants()
                if left:
                    raise RuntimeError(f"processes left running: {sorted(left)}")
            except Exception as err:
                failures[kind].append(f"run {i}: {type(err).__name__}: {str(err)[:500]}")
            status = "ok" if len(failures[kind]) == before else "FAILED"
            echo(f"{kind:<8} run {i:>3}/{runs}: {status} ({time.monotonic() - start:.1f} s)")
    return failures
