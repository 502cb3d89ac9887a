"""Process utilities the launchers share: free ports, environment blocks, stopping processes.

Standard library and psutil only, so that :mod:`torchhw.distributed.guard` and the torchrun
agents' helpers stay light.
"""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

import psutil


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (and is ours to signal)."""
    try:
        os.kill(pid, 0)
    except OSError:  # gone, or its number now belongs to another user's process
        return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


class LogTail:
    """Prints new lines of each rank's log with a '[rank N]' prefix (each :meth:`poll`)."""

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
