"""Stand-ins for the Kubernetes controllers that run the job files of torchhw.distributed.jobs.

Each pod is a process on this machine running the container's command with the variables the
controller would set. What happens when a pod's command exits non-zero is the controller's:

- ``restart="pod"``: the Kubeflow training operator with ``restartPolicy: OnFailure`` starts that
  pod's container again (up to ``backoffLimit`` times); the others keep running;
- ``restart="gang"``: a JobSet with ``failurePolicy.maxRestarts`` (Kubeflow Trainer v2), whose
  Job has ``restartPolicy: Never`` and ``backoffLimit: 0``: a failed pod fails the Job, every
  pod is stopped (SIGTERM, then SIGKILL after the grace period) and all are started again.
  ``free_disruptions=True``: the Job's ``podFailurePolicy`` fails it on a pod's
  ``DisruptionTarget`` condition or on exit code 75 (the workers stopped with a checkpoint), and
  the JobSet's rule for that reason restarts without counting: a pod that exits after an
  eviction (:meth:`Pods.terminate`), or that stopped because another pod was evicted, uses no
  restart.

An eviction or preemption is SIGTERM to the pod's first process (torchrun's agent, or the
TrainJob's shell wrapper, through the guard that stops it if the test dies), and deleting a
pod is that SIGTERM and, after the grace period, SIGKILL to everything left (``_stop_all``). ``on_line`` sees every line as it comes and may call
``Pods.terminate(i)``. Only for the tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence

import psutil


class Pods:
    def __init__(self, commands: Sequence[Sequence[str]], envs: Sequence[dict[str, str]], *,
                 restart: str, max_restarts: int, grace_s: float = 30.0,
                 free_disruptions: bool = False,
                 on_line: Callable[[Pods, int, str], None] | None = None) -> None:
        assert restart in ("pod", "gang")
        self.commands, self.envs = [list(c) for c in commands], list(envs)
        self.restart, self.max_restarts, self.grace_s = restart, max_restarts, grace_s
        self.on_line = on_line
        self.free_disruptions = free_disruptions
        self.evicted: set[int] = set()
        self.restarts = 0
        self.lines: list[str] = []
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[str] | None] = [None] * len(self.commands)

    def start(self, i: int) -> None:
        guarded = [sys.executable, "-m", "torchhw.distributed.guard", str(os.getpid()), "--",
                   *self.commands[i]]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.envs[i])
        p = subprocess.Popen(guarded, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, start_new_session=True)
        self.procs[i] = p
        threading.Thread(target=self._read, args=(i, p), daemon=True).start()

    def _read(self, i: int, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            line = line.rstrip("\n")
            with self.lock:
                self.lines.append(f"[pod {i}] {line}")
            if self.on_line:
                self.on_line(self, i, line)

    def terminate(self, i: int) -> None:
        """An eviction: SIGTERM to the pod's first process."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            self.events.append(f"SIGTERM to pod {i}")
            self.evicted.add(i)
            p.send_signal(signal.SIGTERM)

    def run(self, timeout: float) -> None:
        """Run until every pod has exited 0; raise past the restarts or the time limit."""
        deadline = time.monotonic() + timeout
        try:
            for i in range(len(self.commands)):
                self.start(i)
            done = [False] * len(self.commands)
            while not all(done):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"pods still running after {timeout} s:\n" + self.tail())
                for i, p in enumerate(self.procs):
                    if done[i] or p is None or p.poll() is None:
                        continue
                    if p.returncode == 0:
                        done[i] = True
                        continue
                    self.events.append(f"pod {i} exited {p.returncode}")
                    # the pod's DisruptionTarget condition, or the exit code of workers that
                    # stopped with a checkpoint (75): the Job's podFailurePolicy, either way
                    disrupted = self.free_disruptions and (i in self.evicted or p.returncode == 75)
                    self.evicted.discard(i)
                    if disrupted:
                        self.events.append(f"pod {i} was disrupted: no restart counted")
                    elif self.restarts >= self.max_restarts:
                        raise RuntimeError(f"pod {i} failed (exit {p.returncode}) with no restart "
                                           f"left ({self.restarts} used):\n" + self.tail())
                    else:
                        self.restarts += 1
                    if self.restart == "pod":
                        self.events.append(f"pod {i} restarted")
                        self.start(i)
                    else:
                        self._stop_all()
                        self.events.append("every pod recreated")
                        done = [False] * len(self.commands)
                        for j in range(len(self.commands)):
                            self.start(j)
                        break
                time.sleep(0.1)
        finally:
            self._stop_all()

    def _stop_all(self) -> None:
        """What the kubelet does to a pod it deletes: SIGTERM to the container's first process
        only, and after the grace period SIGKILL to every process left in the container. A
        process the first one does not pass the signal on to never sees a SIGTERM."""
        for p in self.procs:
            if p is None:
                continue
            try:
                inside = psutil.Process(p.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                inside = []
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # the guard hands it to the container's command
                try:
                    p.wait(timeout=self.grace_s)
                except subprocess.TimeoutExpired:
                    pass
            if p.poll() is None:
                inside.append(psutil.Process(p.pid))
            for q in inside:
                try:
                    q.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(inside, timeout=5)
            if p.poll() is None:
                p.wait(timeout=5)

    def tail(self, n: int = 300) -> str:
        with self.lock:
            return "\n".join(self.events + self.lines[-n:])

    @property
    def output(self) -> str:
        with self.lock:
            return "\n".join(self.lines)
