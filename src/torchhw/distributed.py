"""Running a function on N processes from a notebook or a script.

One promise: output shown with each rank's prefix, errors that carry the failing
rank's traceback, bounded time, and no process left behind, whether a rank crashes, a
collective hangs, or the reader presses stop.

- :func:`launch` starts ``nprocs`` processes through ``torch.multiprocessing.start_processes``
   (forked from a forkserver that has imported torch on Linux, spawned elsewhere: never a fork
   of a parent that has run an OpenMP op, which can deadlock), joins them in a process group
   (gloo on CPU, NCCL or XCCL when there is a GPU per rank: :func:`plan`) through a file-based rendezvous (no ports
   to collide), and returns each rank's return value::

       results = launch(lesson.collectives, nprocs=2, device=device)

   The function must be importable from a module (a file the notebook writes, for example):
   a function defined in a notebook cell cannot be pickled into another process. The
   ``device`` decides where every rank runs, so two runs never compare different hardware.

torchrun, which starts processes on one or several nodes, lives in :mod:`torchhw.agents`.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import pickle
import signal
import socket
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

from .guard import alive


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
    init_method: str = ""   # where the ranks meet (a file), for a function that joins itself


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Placement:
    """Where a job's ranks run: the backend, each rank's device, and what the machine cannot do
    for it (``note``: one line, or "")."""

    backend: str
    devices: list[str]
    note: str = ""

    def __str__(self) -> str:
        ranks = len(self.devices)
        where = ", ".join(self.devices) if len(set(self.devices)) > 1 else f"all on {self.devices[0]}"
        return (f"{ranks} rank{'s' if ranks > 1 else ''} with {self.backend}: {where}"
                + (f"\nnote: {self.note}" if self.note else ""))


def rank_device(kind: str, index: int, sharing: int) -> tuple[str, str, str]:
    """The backend, device and note for the ``index``-th of ``sharing`` ranks that share one
    machine's devices of type ``kind`` ('cpu', 'cuda', 'xpu', 'mps').

    A GPU each where there are as many GPUs as ranks: the device's own backend (NCCL on CUDA
    and ROCm, XCCL on Intel GPUs), rank i on GPU i. Fewer GPUs than ranks: the ranks share
    them round-robin and use gloo, because NCCL refuses two ranks on one GPU ("Duplicate GPU
    detected"); gloo moves the tensors through host memory, so its timings say nothing about
    NVLink. MPS: gloo cannot move MPS tensors, so the ranks run on the CPU. ``sharing`` counts
    every rank on this machine: on a cluster a node's ranks (LOCAL_WORLD_SIZE); for nodes
    simulated on one machine, all of them (each simulated node numbers its ranks from 0).
    """
    from .device import backend_for, count

    if kind == "mps":
        return "gloo", "cpu", "gloo cannot use MPS tensors; the ranks run on the CPU"
    if kind not in ("cuda", "xpu"):
        return "gloo", "cpu", ""
    gpus = count(kind)
    if gpus == 0:
        raise ValueError(f"device is {kind} but this machine has no {kind.upper()} GPU: "
                         f"pass device='cpu', or run where there is one")
    if gpus >= sharing:
        return backend_for(kind), f"{kind}:{index}", ""
    return "gloo", f"{kind}:{index % gpus}", (
        f"{sharing} ranks share {gpus} {kind.upper()} GPU{'s' if gpus > 1 else ''}: gloo, not "
        f"{backend_for(kind).upper()} (which refuses two ranks on one GPU), copying through host "
        f"memory, so the communication measured here is not what {backend_for(kind).upper()} "
        f"between GPUs would do")


def plan(nprocs: int, device: Any) -> Placement:
    """The backend and each rank's device for ``nprocs`` ranks on ``device``'s kind of hardware,
    all on this machine (see :func:`rank_device`)."""
    kind = str(device).split(":")[0]
    decided = [rank_device(kind, r, nprocs) for r in range(nprocs)]
    return Placement(decided[0][0], [d for _, d, _ in decided], decided[0][2])


@contextmanager
def environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of a ``with`` block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


def is_helper(process: psutil.Process) -> bool:
    """True for multiprocessing's own long-lived helpers: the resource tracker and the
    forkserver (not the ranks forked from it). Both belong to the process that started them
    and exit with it, so checks for "nothing left running" leave them out."""
    try:
        cmd = " ".join(process.cmdline())
        if "resource_tracker" in cmd:
            return True
        # a rank forked from the server has the server's command line but the server as parent
        parent = process.parent()
        return "multiprocessing.forkserver" in cmd and parent is not None and \
            "multiprocessing.forkserver" not in " ".join(parent.cmdline())
    except psutil.Error:
        return False


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
    tail = _Tail([workdir / f"rank{r}.log" for r in range(nprocs)], echo or (lambda line: None))
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
                raise _first_failure(workdir, nprocs, failure, codes) from None
            if time.monotonic() > deadline:
                running = [r for r, p in enumerate(context.processes) if p.exitcode is None]
                stacks = _stacks(running, handles, tail, workdir)
                stop_processes(list(handles.values()))
                tail.poll(final=True)
                raise LaunchTimeout(
                    f"ranks {running} were still running after {timeout:g} s and were stopped. "
                    f"A rank waiting in a collective for a peer that never arrives looks like "
                    f"this; raise timeout= if the work is just slow. Where each was (Python "
                    f"stack, most recent call first):\n{stacks}"
                )
        tail.poll(final=True)
        return [pickle.loads((workdir / f"rank{r}.result").read_bytes()) for r in range(nprocs)]
    finally:  # KeyboardInterrupt included: nothing outlives the call
        stop_processes(list(handles.values()))


# what a rank prints when a *peer* went away: a consequence of a failure, not its cause
_PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
              "remote process exited", "Connection refused")


def _stacks(ranks: list[int], handles: dict[int, psutil.Process], tail: _Tail,
            workdir: Path) -> str:
    """Ask each of ``ranks`` for its Python stack (SIGUSR1, see _child) and return the
    main thread's, rank by rank. The dumps also appear in the live output."""
    tail.poll()
    start = list(tail.offsets)
    # only a rank that has registered the handler may be signalled: SIGUSR1 kills the others
    ready = [r for r in ranks if (workdir / f"rank{r}.ready").exists() and r in handles]
    for r in ready:
        try:
            handles[r].send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    time.sleep(0.5)  # faulthandler writes at once, from its signal handler
    report = []
    for r in ranks:
        if r not in ready:
            report.append(f"[rank {r}]\n  (no stack: the rank was still starting)")
            continue
        with open(tail.paths[r], "rb") as f:
            f.seek(start[r])
            dump = f.read().decode(errors="replace")
        report.append(f"[rank {r}]\n" + _trim_stack(_main_thread(dump)))
    return "\n".join(report)


def _main_thread(dump: str) -> str:
    """The main thread's block of a faulthandler dump of all threads."""
    # one block per Python thread, the newest first and the main thread last; threads that
    # never ran Python code (autograd's, for one) have no frames
    blocks = [b for b in dump.split("\n\n")
              if "(most recent call first)" in b and "<no Python frame>" not in b]
    main = [b for b in blocks if " in _child" in b] or blocks[-1:]
    return main[0] if main else ""


def _trim_stack(block: str) -> str:
    """A faulthandler stack down to the launcher's frame (the frames below it are
    multiprocessing's), saying so when the rank was in the launcher's own code."""
    frames = block.strip().splitlines()[1:]
    if not frames:
        return "  (no stack: the rank did not answer)"
    ours = next((i for i, f in enumerate(frames) if f.endswith(" in _child")), len(frames) - 1)
    frames = frames[:ours + 1]
    inside = frames[:-1]
    if inside and all("/torch/" in f for f in inside):  # only torch above the launcher
        if any(f.endswith(" in barrier") for f in inside):
            frames.append("  (the function had returned: the rank waits in the launcher's "
                          "final barrier for the others)")
        elif any(f.endswith(" in init_process_group") for f in inside):
            frames.append("  (the function has not started: the rank waits for the others "
                          "to join the process group)")
    return "\n".join(frames)


def _first_failure(workdir: Path, nprocs: int, failure: Exception,
                   exitcodes: list[int | None]) -> RankFailed:
    """The rank whose failure caused the others, with its traceback.

    torch reports the first exit it *noticed*; once one rank fails its peers fail on broken
    connections, often within the same millisecond. So the cause is, in this order: a rank
    that died without recording an error (killed by a signal that was not ours, such as the
    OOM killer's, or a segfault), then the earliest recorded error that is not a peer's
    disappearance, then the earliest recorded error.
    """
    records = {int(path.stem[4:]): path for path in workdir.glob("rank*.error")}
    noticed = getattr(failure, "error_index", -1)

    def died_unrecorded(rank: int, code: int | None) -> bool:
        # SIGTERM is how torch (and stop_processes) stops the survivors: not a cause
        return rank not in records and code not in (None, 0) and \
            (rank == noticed or code != -signal.SIGTERM)

    unrecorded = [r for r, code in enumerate(exitcodes) if died_unrecorded(r, code)]
    if unrecorded:
        rank = noticed if noticed in unrecorded else unrecorded[0]
        code = exitcodes[rank] or 0  # not None: died_unrecorded asks for an exit
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        detail = f"it died with {how} before it could record an error"
        if rank == noticed and "terminated with the following error" in str(failure):
            detail += str(failure)  # raised before the launcher's own handler was in place
    else:
        texts = {r: path.read_text() for r, path in records.items()}
        order = sorted(records, key=lambda r: records[r].stat().st_mtime_ns)
        causes = [r for r in order if not any(m in texts[r] for m in _PEER_GONE)]
        rank = (causes or order)[0]
        detail = texts[rank]
    return RankFailed(f"rank {rank} of {nprocs} failed; the other ranks were stopped.\n{detail}")
