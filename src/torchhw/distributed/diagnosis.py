"""Reading a failed or hung job: which rank caused it, and where each rank was.

A failure in one rank makes its peers fail too, often within the same millisecond, on broken
connections. :func:`first_failure` names the rank whose error was the cause; :func:`stacks`
asks hung ranks for their Python stacks (each rank registered ``faulthandler`` on SIGUSR1).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
import psutil

from .processes import LogTail


class RankFailed(RuntimeError):
    """A rank raised or died. The message holds its traceback; the other ranks were stopped."""


class LaunchTimeout(TimeoutError):
    """Ranks were still running when the time limit passed; all of them were stopped."""


# what a rank prints when a *peer* went away: a consequence of a failure, not its cause
PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
              "remote process exited", "Connection refused")


def stacks(ranks: list[int], handles: dict[int, psutil.Process], tail: LogTail,
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
        report.append(f"[rank {r}]\n" + trim_stack(main_thread(dump)))
    return "\n".join(report)


def main_thread(dump: str) -> str:
    """The main thread's block of a faulthandler dump of all threads."""
    # one block per Python thread, the newest first and the main thread last; threads that
    # never ran Python code (autograd's, for one) have no frames
    blocks = [b for b in dump.split("\n\n")
              if "(most recent call first)" in b and "<no Python frame>" not in b]
    main = [b for b in blocks if " in _child" in b] or blocks[-1:]
    return main[0] if main else ""


def trim_stack(block: str) -> str:
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


def first_failure(workdir: Path, nprocs: int, failure: Exception,
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
        causes = [r for r in order if not any(m in texts[r] for m in PEER_GONE)]
        rank = (causes or order)[0]
        detail = texts[rank]
    return RankFailed(f"rank {rank} of {nprocs} failed; the other ranks were stopped.\n{detail}")
