"""Run a command and stop it when the process that started it dies (``python -m torchhw.distributed.guard``).

torchrun agents run in sessions of their own (so that a Ctrl-C reaches the launcher, which
stops them in order), and nothing else would stop them if the launcher were killed outright:
a kernel restarted in the middle of a torchrun cell, for example. The guard sits between the
launcher and the agent::

    python -m torchhw.distributed.guard LAUNCHER_PID -- python -m torch.distributed.run ...

It passes SIGTERM and SIGINT on to the command, exits with the command's status, and when the
launcher is gone it sends the command SIGTERM (the agent then stops its workers), then
SIGKILL if it is still running after a grace period. Single-threaded; it imports no torch.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from types import FrameType

from .processes import alive


def main(argv: list[str] | None = None, grace: float = 10.0) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m torchhw.distributed.guard LAUNCHER_PID -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    launcher, command = int(argv[0]), argv[2:]
    child = subprocess.Popen(command)

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        try:
            code = child.wait(timeout=0.5)
            return code if code >= 0 else 128 - code  # a signal N reads as 128 + N, as in a shell
        except subprocess.TimeoutExpired:
            pass
        if not alive(launcher):
            child.terminate()
            try:
                child.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            return 1


if __name__ == "__main__":
    sys.exit(main())
