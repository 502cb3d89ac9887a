"""The launcher and the torchrun route: results, prefixed output, and no process left behind
after a crash, a time-out or an interrupt; restarts across nodes. Each test starts real
processes (a few s each). The ranks run functions of tests/fixtures_distributed.py."""

import signal
import subprocess
import sys
import textwrap
import threading
import time

import json
from pathlib import Path

import psutil
import pytest

import fixtures_distributed as workers
from torchhw.distributed import agents
from torchhw.distributed.jobs import DRILL_RESTARTS
from torchhw.distributed import diagnosis, processes
from torchhw import distributed as d

from conftest import leftovers


def alive(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_launch_returns_results_and_prefixes_output():
    lines = []
    results = d.launch(workers.collectives, 2, echo=lines.append)
    assert [r["all_reduce"] for r in results] == [[3.0], [3.0]]
    assert [r["broadcast"] for r in results] == [[100.0], [100.0]]
    assert results[1]["all_gather"] == [1.0, 2.0]
    assert any(l.startswith("[rank 0] mine=1") for l in lines)
    assert any(l.startswith("[rank 1] mine=2") for l in lines)
    assert not leftovers()


def test_ranks_see_the_launchers_environment_at_launch_time():
    # the forkserver was started by an earlier launch, with another environment: the ranks
    # must still see the environment of the call that launched them
    d.launch(workers.hello, 2, echo=None)
    with d.environ(TORCHHW_PROBE="here", TORCH_DISTRIBUTED_DEBUG="DETAIL"):
        results = d.launch(workers.environment, 2, echo=None)
    assert all(r["probe"] == "here" and r["debug"].endswith("DETAIL") for r in results), results
    results = d.launch(workers.environment, 2, echo=None)
    assert all(r["probe"] is None and r["debug"].endswith("OFF") for r in results), results


def test_a_failing_rank_raises_with_its_traceback_and_stops_the_others():
    # rank 0 waits in a barrier whose own time-out is far beyond the test's (pytest-timeout):
    # only the launcher stopping it lets this test finish
    with pytest.raises(d.RankFailed) as err:
        d.launch(workers.fail_on, 2, echo=None, collective_timeout=3600, timeout=3600)
    assert "rank 1 of 2 failed" in str(err.value)
    assert "ValueError: rank 1 was told to fail" in str(err.value)
    assert not leftovers()


def test_a_rank_killed_by_a_signal_is_named_with_the_signal():
    # no traceback can be recorded: the report comes from torch.multiprocessing's exit status
    with pytest.raises(d.RankFailed, match=r"rank 1 of 2 failed(.|\n)*signal SIGKILL"):
        d.launch(workers.killed_on, 2, echo=None, collective_timeout=3600, timeout=3600)
    assert not leftovers()


class Noticed(Exception):
    """Stands in for torch.multiprocessing's report of the first exit it noticed."""

    def __init__(self, index):
        super().__init__(f"process {index} failed")
        self.error_index = index


def test_the_cause_is_chosen_over_its_consequences(tmp_path):
    import os
    import signal as sig

    def record(rank, text, at):
        path = tmp_path / f"rank{rank}.error"
        path.write_text(text)
        os.utime(path, ns=(at, at))

    # torch noticed rank 0's exit first, but rank 0 only lost its peer; rank 1 was killed
    record(0, "RuntimeError: Connection reset by peer", 1)
    err = diagnosis.first_failure(tmp_path, 2, Noticed(0), [1, -sig.SIGKILL])
    assert "rank 1 of 2" in str(err) and "signal SIGKILL" in str(err)
    # a peer's connection error recorded first does not hide the real error recorded after it
    record(1, "ValueError: bad batch", 2)
    err = diagnosis.first_failure(tmp_path, 2, Noticed(0), [1, 1])
    assert "rank 1 of 2" in str(err) and "ValueError: bad batch" in str(err)
    # ranks stopped with SIGTERM by the launcher are not causes
    (tmp_path / "rank0.error").unlink()
    err = diagnosis.first_failure(tmp_path, 2, Noticed(1), [-sig.SIGTERM, 1])
    assert "rank 1 of 2" in str(err)


def test_the_main_threads_stack_is_read_from_a_dump_of_all_threads(tmp_path):
    dump = ('Thread 0x01 (most recent call first):\n  <no Python frame>\n\n'
            'Thread 0x02 (most recent call first):\n'
            '  File "/py/threading.py", line 9 in _bootstrap\n\n'
            'Current thread 0x03 (most recent call first):\n'
            '  File "/x/torch/distributed/distributed_c10d.py", line 9 in init_process_group\n'
            '  File "/x/torchhw/distributed/launcher.py", line 5 in _child\n'
            '  File "/py/multiprocessing/process.py", line 3 in _bootstrap\n')
    stack = diagnosis.trim_stack(diagnosis.main_thread(dump))
    assert "init_process_group" in stack and "has not started" in stack
    assert "threading.py" not in stack and "process.py" not in stack
    # a rank that has not yet said it can answer is not signalled (SIGUSR1 would kill it)
    tail = processes.LogTail([tmp_path / "rank0.log"], lambda line: None)
    assert "still starting" in diagnosis.stacks([0], {}, tail, tmp_path)


def test_a_hanging_job_times_out_and_leaves_nothing():
    with pytest.raises(d.LaunchTimeout, match="still running after 3 s"):
        d.launch(workers.sleep_forever, 2, timeout=3, echo=None)
    assert not leftovers()


def test_a_time_out_shows_where_each_stuck_rank_waits():
    lines = []
    with pytest.raises(d.LaunchTimeout) as err:
        d.launch(workers.skips_collective, 3, echo=lines.append, timeout=4, collective_timeout=3600)
    message = str(err.value)
    assert "ranks [0, 1, 2] were still running" in message
    stacks = {r: message.split(f"[rank {r}]\n")[1].split("\n[rank")[0] for r in range(3)}
    for rank in (0, 2):  # stuck in the collective that rank 1 skipped
        assert "in skips_collective" in stacks[rank] and "in all_reduce" in stacks[rank], message
    assert "function had returned" in stacks[1] and "skips_collective" not in stacks[1], message
    assert "_watch_parent" not in message and "forkserver.py" not in message
    assert any(line.startswith("[rank 0]") and "skips_collective" in line for line in lines)
    assert not leftovers()


def test_functions_from_the_notebook_are_refused_with_advice():
    def local(info):
        return info.rank
    local.__module__ = "__main__"
    with pytest.raises(ValueError, match="cannot import it"):
        d.launch(local, 2)


FIXTURES = str(Path(__file__).with_name("fixtures_distributed.py"))
SCRIPT = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    import fixtures_distributed as workers
    from torchhw import distributed
    from torchhw.distributed import agents
    if __name__ == "__main__":
        if sys.argv[1] == "launch":
            distributed.launch(workers.sleep_forever, 2, timeout=120)
        else:
            agents.torchrun({FIXTURES!r}, ["sleep"], nproc_per_node=2, timeout=120)
""")


@pytest.mark.parametrize("route", ["launch", "torchrun"])
@pytest.mark.parametrize("how", ["interrupt", "kill"])
def test_an_interrupt_or_a_killed_launcher_leaves_nothing_running(tmp_path, route, how):
    """Pressing stop (SIGINT), or the launcher killed outright (SIGKILL: a kernel restarted in
    the middle of a cell), and every rank, agent and helper process goes with it."""
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    job = subprocess.Popen([sys.executable, str(script), route], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    output = []
    try:
        for line in job.stdout:  # wait until both ranks run
            output.append(line)
            if "sleeping" in line:
                break
        # keep reading, so the job never blocks on a full pipe while it shuts down
        reader = threading.Thread(target=lambda: output.extend(job.stdout), daemon=True)
        reader.start()
        time.sleep(1.0)
        # the job's forkserver or torchrun guard is in the list too: it must go as well
        descendants = [p.pid for p in psutil.Process(job.pid).children(recursive=True)]
        assert len(descendants) >= 2
        job.send_signal(signal.SIGINT if how == "interrupt" else signal.SIGKILL)
        # generous: on a loaded 2-core machine a torchrun agent takes seconds to stop
        job.wait(timeout=90)
        deadline = time.monotonic() + 30
        while alive(descendants) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(descendants), \
            f"still running after the {how}: {alive(descendants)}\n{''.join(output)[-2000:]}"
    finally:
        if job.poll() is None:
            job.kill()
        for pid in alive(locals().get("descendants", [])):  # never leave them to later tests
            psutil.Process(pid).kill()


TRAIN = str(Path(d.__file__).with_name("train.py"))  # the course's training script


def test_torchrun_crash_without_restarts_fails_clearly(tmp_path):
    with pytest.raises(d.RankFailed, match="exited with code") as err:
        agents.torchrun(TRAIN, ["--steps", "6", "--crash-at", "3", "--crash-node", "0", "--every", "2",
                                "--checkpoint", str(tmp_path / "c.pt"), "--out", str(tmp_path / "r"),
                                "--drill-marker", str(tmp_path / "m")],
                   nproc_per_node=2, echo=None, timeout=90)
    assert (tmp_path / "m").read_text().startswith("node 0 crashed after step 3")
    assert "Root Cause" in str(err.value)  # torchrun's report of the first failure, passed on
    assert not leftovers()


def test_torchrun_timeout_stops_agent_and_workers():
    with pytest.raises(d.LaunchTimeout):
        agents.torchrun(FIXTURES, ["sleep"], nproc_per_node=2, timeout=6, echo=None)
    assert not leftovers()


def test_torchrun_command_shapes():
    single = agents.torchrun_command("m", ["a"], nproc_per_node=4)
    assert "--standalone" in single and single[-3:] == ["-m", "m", "a"]
    script = agents.torchrun_command("train.py", ["a"], launcher=["torchrun"])
    assert script[0] == "torchrun" and script[-2:] == ["train.py", "a"]
    multi = agents.torchrun_command("m", nproc_per_node=2, nnodes=2, rdzv_endpoint="127.0.0.1:1234")
    assert "--nnodes=2" in multi and "--rdzv-backend=c10d" in multi and "--standalone" not in multi
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        agents.torchrun_command("m", nnodes=2)


def test_launch_honours_the_device_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    results = d.launch(workers.collectives, 2, device="cpu", echo=None)
    assert [r["device"] for r in results] == ["cpu", "cpu"]
    assert (d.plan(2, "cpu").backend, d.plan(2, "cpu").devices) == ("gloo", ["cpu", "cpu"])
    assert (d.plan(1, "mps").backend, d.plan(1, "mps").devices) == ("gloo", ["cpu"])
    assert not list(tmp_path.glob("torchhw-launch-*")), "launch left its folder behind"


def test_environ_restores():
    import os
    os.environ.pop("TORCHHW_T", None)
    with d.environ(TORCHHW_T="1"):
        assert os.environ["TORCHHW_T"] == "1"
    assert "TORCHHW_T" not in os.environ


@pytest.mark.slow  # notebook 08 runs the same case in every test run; `make stress` runs this too
def test_a_crash_on_the_second_node_resumes_to_the_same_weights(tmp_path):
    """2 nodes x 1 rank on 127.0.0.1; the second node's worker dies once after step 5.
    The agents restart, agree on a fresh store prefix, rank 0 decides to resume from step 4,
    and the final parameters hash the same as without the fault."""
    def run(name, crash):
        args = ["--steps", "8", "--every", "4", "--checkpoint", str(tmp_path / f"{name}.pt"),
                "--out", str(tmp_path / f"{name}.json")]
        if crash:
            args += ["--crash-at", "5", "--crash-node", "1", "--drill-marker", str(tmp_path / "m")]
        out = agents.torchrun(TRAIN, args, nproc_per_node=1, nnodes=2, echo=None, timeout=120,
                              max_restarts=DRILL_RESTARTS if crash else 0)
        return json.loads((tmp_path / f"{name}.json").read_text()), "\n".join(r.output for r in out)
    calm, _ = run("calm", False)
    faulty, text = run("faulty", True)
    assert (tmp_path / "m").exists() and "resumed from step 4" in text
    assert faulty["generation"] > calm["generation"] and faulty["digest"] == calm["digest"]
    assert not leftovers()
