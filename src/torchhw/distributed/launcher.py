"""Running a function on N processes from a notebook or a script (:func:`launch`).

One promise: output shown with each rank's prefix, errors that carry the failing
rank's traceback, bounded time, and no process left behind, whether a rank crashes, a
collective hangs, or the reader presses stop.

:func:`launch` starts ``nprocs`` processes through ``torch.multiprocessing.start_processes``
(forked from a forkserver that has imported torch on Linux, spawned elsewhere: never a fork of
a parent that has run an OpenMP op, which can deadlock), joins them in a process group (gloo on
CPU, NCCL or XCCL when there is a GPU per rank: :func:`~torchhw.distributed.placement.plan`)
through a file-based rendezvous (no ports to collide), and returns each rank's return value::

    results = launch(lesson.collectives, nprocs=2, device=device)

The function must be importable from a module (a file the notebook writes, for example): a
function defined in a notebook cell cannot be pickled into another process. The ``device``
decides where every rank runs, so two runs never compare different hardware.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import psutil

from .diagnosis import LaunchTimeout, first_failure, stacks
from .placement import plan
from .processes import LogTail, alive, environ, stop_processes


@dataclass(frozen=True)
class RankInfo:
    """What a launched function is told about its place in the job."""

    rank: int
    world_size: int
    backend: str
    device: str
    init_method: str = ""   # where the ranks meet (a file), for a function that joins itself


# --------------------------------------------------------------------------- the child side

def _watch_parent(parent: int) -> None:
    """Exit when the launching process is gone, so a killed kernel leaves no orphans.

    (Under the forkserver the OS parent is the server, not the launching process: watch the
    launching process itself.)
    """
    while True:
        time.sleep(0.5)
        if not alive(parent):
            os._exit(3)


def _child(rank: int, payload: bytes, world_size: int,
           backend: str, devices: list[str], init_method: str, workdir: str, threads: int,
           collective_timeout: float, parent: int, init_group: bool,
           environment: dict[str, str]) -> None:
    """One rank, started by torch.multiprocessing (which passes the rank first)."""
    # a forkserver child inherits the server's environment, not the launcher's: take the
    # launcher's as it is now (TORCH_DISTRIBUTED_DEBUG set for one launch, for example).
    # Variables read when torch is imported (TORCH_CPP_LOG_LEVEL, TORCH_LOGS, the OpenMP
    # runtime's) keep the values the server started with.
    os.environ.clear()
    os.environ.update(environment)
    device = devices[rank]
    log = os.open(os.path.join(workdir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)  # fd level, so C++ messages (gloo, NCCL) are captured too
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    out = Path(workdir) / f"rank{rank}"
    if hasattr(signal, "SIGUSR1"):  # not on Windows
        # on SIGUSR1 Python writes this rank's stacks to the log at once, even inside a C++
        # call: the launcher asks for them at a time-out, once the rank says it can answer
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
        out.with_suffix(".ready").touch()
    try:
        # the function and its arguments are unpickled only now, so importing their module
        # sees the launcher's environment too
        fn, args = pickle.loads(payload)
        import torch
        import torch.distributed as dist

        dist.set_debug_level_from_env()  # read once at import, in the server under forkserver
        torch.set_num_threads(threads)
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        elif device.startswith("xpu"):
            torch.xpu.set_device(torch.device(device))
        if init_group:
            dist.init_process_group(backend, init_method=init_method, rank=rank,
                                    world_size=world_size,
                                    timeout=timedelta(seconds=collective_timeout))
        try:
            result = fn(RankInfo(rank, world_size, backend, device, init_method), *args)
        except BaseException:
            # record the cause *before* exiting: exiting breaks the peers' connections, and
            # their errors must not look like the first failure
            out.with_suffix(".error").write_text(traceback.format_exc())
            raise
        if dist.is_initialized():
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

@contextmanager
def _quiet_spawn_log() -> Iterator[None]:
    logger = logging.getLogger("torch.multiprocessing.spawn")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _start_method() -> str:
    """``forkserver`` on Linux, ``spawn`` elsewhere.

    Both start clean processes (never a fork of a parent that has run OpenMP, which can
    deadlock). The forkserver imports torch once, when the first launch starts it, and each
    rank is then a fork of that idle server: a launch costs a fraction of a second instead of
    a torch import per rank (1-2 s each on a small machine). The server lives as long as the
    launching process (a kernel) and exits with it. On macOS a fork of a process that has
    loaded Apple's frameworks (as importing torch does) is not safe, so there, as on Windows,
    each rank is spawned.
    """
    import multiprocessing

    if not sys.platform.startswith("linux"):
        return "spawn"
    # what the server imports when it starts (no effect once it runs)
    multiprocessing.set_forkserver_preload(["torch", "torch.distributed", __name__])
    return "forkserver"


def launch(fn: Callable[..., Any], nprocs: int = 2, args: Sequence[Any] = (), *,
           device: Any = "cpu", threads: int = 1, timeout: float = 120,
           collective_timeout: float = 30, init_group: bool = True,
           echo: Callable[[str], None] | None = print) -> list[Any]:
    """Run ``fn(RankInfo, *args)`` on ``nprocs`` new processes; return each rank's result.

    - ``device``: the kind of hardware every rank runs on (see :func:`plan`).
    - ``threads``: intra-op threads per rank (1 by default: N ranks on N cores).
    - ``timeout``: seconds for the whole job; ``collective_timeout``: for one collective
      (and the rendezvous), so a rank waiting for a dead peer fails instead of hanging.
      Whichever comes first ends a hang: the collective's as a RankFailed from the rank that
      gave up waiting first, the job's as a LaunchTimeout that holds every rank's Python
      stack. To find the rank a hang waits for, make ``collective_timeout`` the longer one.
    - ``init_group``: join the ranks in a process group before calling ``fn`` (False: ``fn``
      calls ``init_process_group`` itself with ``info.backend`` and ``info.init_method``).
    - ``echo``: where rank output goes, line by line with a ``[rank N]`` prefix (None: nowhere).

    Raises RankFailed (with the traceback) when a rank raises or dies, LaunchTimeout past
    ``timeout``; in every case, and on KeyboardInterrupt, all ranks are stopped first and the
    temporary folder (logs, rendezvous file, results) is removed.
    """
    if getattr(fn, "__module__", "__main__") == "__main__":
        raise ValueError(
            f"{getattr(fn, '__name__', fn)!r} is defined in the notebook (module __main__), so "
            f"spawned processes cannot import it. Put it in a .py file (a cell can write one "
            f"with %%writefile) and import it from there."
        )
    if nprocs < 1:
        raise ValueError(f"nprocs must be at least 1, got {nprocs}")
    where = plan(nprocs, device)
    backend, devices = where.backend, where.devices
    if where.note and echo:
        echo(f"note: {where.note}")
    with tempfile.TemporaryDirectory(prefix="torchhw-launch-") as folder:
        return _run(fn, tuple(args), nprocs, backend, devices, Path(folder), threads, timeout,
                    collective_timeout, init_group, echo)


def _run(fn: Callable[..., Any], args: tuple[Any, ...], nprocs: int, backend: str,
         devices: list[str], workdir: Path, threads: int, timeout: float,
         collective_timeout: float, init_group: bool,
         echo: Callable[[str], None] | None) -> list[Any]:
    import torch.multiprocessing as torch_mp

    init_method = f"file://{workdir / 'rendezvous'}"
    tail = LogTail([workdir / f"rank{r}.log" for r in range(nprocs)], echo or (lambda line: None))
    handles: dict[int, psutil.Process] = {}
    # pickled here, unpickled in the rank once it has taken the launcher's environment
    payload = bytes(ForkingPickler.dumps((fn, args)))
    try:
        # torch's own process machinery: one process per rank, each told to die with the
        # process that started it (pdeathsig: the forkserver, which exits with us), joined
        # with a time-out; a failure stops the others
        with environ(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads)):
            context = torch_mp.start_processes(
                _child, nprocs=nprocs, join=False, start_method=_start_method(),
                args=(payload, nprocs, backend, devices, init_method, str(workdir), threads,
                      collective_timeout, os.getpid(), init_group, dict(os.environ)))
        for rank, process in enumerate(context.processes):
            try:
                handles[rank] = psutil.Process(process.pid)
            except psutil.NoSuchProcess:  # already gone: the join below reports it
                pass
        deadline = time.monotonic() + timeout
        while True:
            tail.poll()
            try:
                with _quiet_spawn_log():  # its "Terminating process" warnings: we report it
                    if context.join(timeout=0.05, grace_period=1.0):
                        break
            except (torch_mp.ProcessExitedException, torch_mp.ProcessRaisedException) as failure:
                stop_processes(list(handles.values()))
                tail.poll(final=True)
                codes = [p.exitcode for p in context.processes]
                raise first_failure(workdir, nprocs, failure, codes) from None
            if time.monotonic() > deadline:
                running = [r for r, p in enumerate(context.processes) if p.exitcode is None]
                report = stacks(running, handles, tail, workdir)
                stop_processes(list(handles.values()))
                tail.poll(final=True)
                raise LaunchTimeout(
                    f"ranks {running} were still running after {timeout:g} s and were stopped. "
                    f"A rank waiting in a collective for a peer that never arrives looks like "
                    f"this; raise timeout= if the work is just slow. Where each was (Python "
                    f"stack, most recent call first):\n{report}"
                )
        tail.poll(final=True)
        return [pickle.loads((workdir / f"rank{r}.result").read_bytes()) for r in range(nprocs)]
    finally:  # KeyboardInterrupt included: nothing outlives the call
        stop_processes(list(handles.values()))


