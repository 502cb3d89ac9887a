"""torchrun from Python: one standalone node, or several nodes simulated on this machine.

Same promise as :func:`torchhw.distributed.launch`: output streamed (each node's lines with its
prefix), failures raised with the workers' own traceback, bounded time, and no process left
behind. Stopping torchrun takes SIGTERM to the agent, which stops its workers; killing the
agent's process group is not enough, since workers run in process groups of their own. Each
agent runs under :mod:`torchhw.distributed.guard`, which stops it if the launching process dies first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import psutil

from .diagnosis import LaunchTimeout, RankFailed
from .processes import free_port, stop_processes

@dataclass
class RunResult:
    """What a torchrun job printed and how it ended."""

    returncode: int
    output: str
    seconds: float


def torchrun_command(target: str, args: Sequence[str] = (), *, nproc_per_node: int | str = 2,
                     nnodes: int | str = 1, rdzv_endpoint: str | None = None,
                     rdzv_id: str = "torchhw", max_restarts: int = 0,
                     monitor_interval: float | None = 0.5,
                     launcher: Sequence[str] | None = None, log_dir: str | None = None,
                     tee: int | None = None, rdzv_conf: str | None = None) -> list[str]:
    """The argv of torchrun for ``target`` (a ``.py`` script, else a module run with ``-m``).

    The notebooks, the tests and the Slurm script (:mod:`torchhw.distributed.jobs`, with
    ``launcher=["torchrun"]``) build their torchrun commands with it; the Kubernetes pods'
    command leaves the counts to the operators' PET_* variables. One node with no
    endpoint is ``--standalone``; otherwise c10d rendezvous at ``rdzv_endpoint``.
    ``log_dir``: torchrun writes each worker's output and error file under it (one folder per
    agent and attempt); ``tee=3``: the workers' stdout and stderr go to those files and the
    console both.
    """
    cmd = list(launcher or [sys.executable, "-m", "torch.distributed.run"])
    cmd += [f"--nproc-per-node={nproc_per_node}", f"--max-restarts={max_restarts}"]
    if monitor_interval is not None:
        cmd.append(f"--monitor-interval={monitor_interval:g}")
    if log_dir is not None:
        cmd.append(f"--log-dir={log_dir}")
    if tee is not None:
        cmd.append(f"--tee={tee}")
    if nnodes == 1 and rdzv_endpoint is None:
        cmd.append("--standalone")
    else:
        if rdzv_endpoint is None:
            raise ValueError("a multi-node job needs rdzv_endpoint='host:port'")
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}",
                f"--rdzv-id={rdzv_id}"]
        if rdzv_conf:  # e.g. "read_timeout=600,join_timeout=600"
            cmd.append(f"--rdzv-conf={rdzv_conf}")
    program = [target] if target.endswith(".py") else ["-m", target]
    return cmd + program + list(args)


def _agent_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, **(extra or {}))
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
               envs: Sequence[dict[str, str]] | None = None,
               echo: Callable[[str], None] | None = print,
               signal_on: tuple[str, int] | None = None) -> list[RunResult]:
    """Run torchrun agents side by side (one per simulated node); stream and return output.

    ``envs``: extra environment variables for each command (what a scheduler would set).
    ``signal_on=(text, signum)``: the first time a line contains ``text``, send ``signum`` to
    every agent (a preemption: SIGTERM, which each agent passes on to its workers).

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
    fired = threading.Event()

    def read(i: int, stream: Any) -> None:
        for line in stream:
            line = line.rstrip("\n")
            outputs[i].append(line)
            with lock:
                echo(prefixes[i] + line)
            if signal_on and signal_on[0] in line and not fired.is_set():
                fired.set()
                for agent in agents:
                    if agent.poll() is None:
                        agent.send_signal(signal_on[1])  # the guard passes it on to the agent

    try:
        for i, cmd in enumerate(commands):
            # under torchhw.distributed.guard, which stops the agent if this process dies without doing so
            guarded = [sys.executable, "-m", "torchhw.distributed.guard", str(os.getpid()), "--", *cmd]
            agent = subprocess.Popen(guarded, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=_agent_env(threads, envs[i] if envs else None), start_new_session=True)
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


def torchrun(target: str, args: Sequence[str] = (), *, nproc_per_node: int = 2, nnodes: int = 1,
             max_restarts: int = 0, timeout: float = 120, threads: int = 1,
             check: bool = True, echo: Callable[[str], None] | None = print,
             signal_on: tuple[str, int] | None = None) -> list[RunResult]:
    """Run ``target`` (script or module) under torchrun: one standalone node, or ``nnodes`` agents on this
    machine meeting through c10d rendezvous on 127.0.0.1 (a multi-node job, simulated).

    Returns one RunResult per node. With ``check``, a non-zero exit raises RankFailed with
    the end of the output. ``signal_on``: see :func:`run_agents`.
    """
    if nnodes == 1:
        commands = [torchrun_command(target, args, nproc_per_node=nproc_per_node,
                                     max_restarts=max_restarts)]
    store = None
    if nnodes > 1:
        from datetime import timedelta

        from torch.distributed import TCPStore

        port = free_port()
        # The rendezvous store lives in this process, so it outlives every agent: the agent
        # that hosts it otherwise exits first when the job ends, and another agent still
        # checking the rendezvous fails with RendezvousConnectionError (a torchrun race). Each
        # agent finds the port taken and connects to this store as a client.
        store = TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True,
                         wait_for_workers=False, timeout=timedelta(seconds=timeout))
        rdzv_id = f"torchhw-{uuid.uuid4().hex[:8]}"
        commands = [torchrun_command(target, args, nproc_per_node=nproc_per_node, nnodes=nnodes,
                                     rdzv_endpoint=f"127.0.0.1:{port}", rdzv_id=rdzv_id,
                                     max_restarts=max_restarts) for _ in range(nnodes)]
    try:
        results = run_agents(commands, timeout=timeout, threads=threads, echo=echo,
                             signal_on=signal_on)
    finally:
        del store  # the store's server stops with its last reference
    bad = [i for i, r in enumerate(results) if r.returncode != 0]
    if check and bad:
        lines = results[bad[0]].output.splitlines()
        # the workers' own tracebacks (torchrun prefixes them '[rankN]:') say more than its summary
        worker = [line for line in lines if line.startswith("[rank")][-30:]
        tail = "\n".join(worker + ["..."] + lines[-12:] if worker else lines[-25:])
        raise RankFailed(f"torchrun on node {bad[0]} exited with code {results[bad[0]].returncode}; "
                         f"every agent and worker was stopped. Output:\n{tail}")
    return results
