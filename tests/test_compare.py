"""bench.compare_rounds, the course's one way to a ratio, on a synthetic clock.

The work advances a fake clock instead of taking time, so every case is exact and no test
depends on how busy this machine is: noise without a real difference, a real 1.3x
difference, and a burst of load during the baseline's rounds.
"""

from __future__ import annotations

import random

import pytest

from torchhw import bench


class Machine:
    """A fake clock and CPU pressure counter: each call of a job advances them by its cost."""

    def __init__(self, seed: int = 0) -> None:
        self.now, self.waited = 0.0, 0.0
        self.rng = random.Random(seed)
        self.calls = 0
        self.burst: tuple[int, int] | None = None  # calls during which others load the CPUs

    def clock(self) -> float:
        return self.now

    def pressure(self) -> float:
        return self.waited

    def job(self, seconds: float, noise: float = 0.0, slowed_by_burst: bool = True):
        def run():
            cost = seconds * (1 + self.rng.uniform(-noise, noise))
            in_burst = self.burst and self.burst[0] <= self.calls < self.burst[1]
            if in_burst and slowed_by_burst:
                cost *= 2  # two threads on one free core
                self.waited += cost  # some thread waited for a CPU all along (PSI "some")
            self.now += cost
            self.calls += 1
        return run


def run(machine: Machine, base, cand, **kw):
    kw.setdefault("threads", lambda: 1)  # the fake work runs on one thread
    return bench.compare_rounds(base, {"candidate": cand}, device="cpu", clock=machine.clock,
                                pressure=machine.pressure, round_time=0.01, **kw)["candidate"]


def test_noise_without_a_difference_gives_no_verdict():
    for seed in range(20):
        m = Machine(seed)
        c = run(m, m.job(1e-3, noise=0.1), m.job(1e-3, noise=0.1))
        assert c.verdict == "no clear difference", (seed, str(c))
        assert not c.busy


def test_a_real_difference_of_1_3x_is_found_both_ways():
    m = Machine(1)
    faster = run(m, m.job(1.3e-3, noise=0.05), m.job(1e-3, noise=0.05))
    assert faster.verdict == "faster" and faster.ratio == pytest.approx(1.3, rel=0.05)
    slower = run(m, m.job(1e-3, noise=0.05), m.job(1.3e-3, noise=0.05))
    assert slower.verdict == "slower" and slower.ratio == pytest.approx(1 / 1.3, rel=0.05)
    assert str(faster).startswith("candidate: 1.") and str(faster).endswith(": faster")


def test_a_load_burst_during_the_baseline_is_flagged_not_a_gain():
    """The load lands on the baseline's blocks in every round, never on the candidate's: the
    ratio reads as a 2x gain, and the comparison must say busy instead of 'faster'."""
    m = Machine(2)
    base = m.job(1e-3, noise=0.02)
    cand = m.job(1e-3, noise=0.02, slowed_by_burst=False)
    m.burst = (0, 10**6)
    c = run(m, base, cand)
    assert c.ratio > 1.8 and c.interval[0] > 1 + bench.THRESHOLD, "the load alone makes a 'gain'"
    assert c.busy and c.verdict == "machine busy", str(c)
    assert "waited for a CPU" in c.busy


def test_a_spread_between_rounds_is_flagged_where_no_pressure_is_reported():
    m = Machine(3)
    base, cand = m.job(1e-3), m.job(1e-3)
    m.burst = (4, 14)
    c = bench.compare_rounds(base, {"candidate": cand}, device="cpu", clock=m.clock, pressure=None,
                             round_time=0.01)["candidate"]
    assert c.verdict == "machine busy" and "rounds of baseline" in c.busy


def test_rounds_alternate_and_stop_at_the_deadline():
    m = Machine(4)
    order = []

    def arm(name):
        def run():
            order.append(name)
            m.now += 1e-3
        return run

    out = bench.compare_rounds(arm("a"), {"b": arm("b")}, device="cpu", clock=m.clock,
                               pressure=None, round_time=2e-3, rounds=4, deadline=0.009)
    blocks = [order[i] for i in range(4, len(order), 2)]  # after the warm-up, one per block
    assert blocks[:4] == ["a", "b", "b", "a"], "the baseline goes first, then last"
    assert len(out["b"].ratios) == 2, "no round starts after the deadline"


def test_contexts_wrap_only_their_own_arm():
    m = Machine(5)
    seen = []

    from contextlib import contextmanager

    @contextmanager
    def flag():
        seen.append("on")
        yield
        seen.append("off")

    out = bench.compare_rounds(m.job(1e-3), {"b": m.job(1e-3)}, device="cpu", clock=m.clock,
                               pressure=None, round_time=1e-3, rounds=3, contexts={"b": flag})
    assert seen.count("on") == seen.count("off") == 2 + 3  # two warm-up blocks, three rounds
    assert len(out["b"].ratios) == 3


def test_fewer_than_three_rounds_give_no_verdict():
    c = bench.Comparison("baseline", "x", [2.0, 2.0], [1.0, 1.0])
    assert c.ratio == 2.0 and c.verdict == "too few rounds"


def test_cpu_pressure_reads_linux_psi(tmp_path, monkeypatch):
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=0.05 avg60=0.34 avg300=0.70 total=112231498\n"
                   "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    monkeypatch.setattr(bench, "PRESSURE", str(psi))
    assert bench.cpu_pressure() == pytest.approx(112.231498)
    monkeypatch.setattr(bench, "PRESSURE", str(tmp_path / "absent"))
    assert bench.cpu_pressure() is None  # macOS, Windows, a kernel without PSI


def test_no_round_starts_after_the_deadline():
    m = Machine(6)
    out = bench.compare_rounds(m.job(1e-3), {"b": m.job(1e-3)}, device="cpu", clock=m.clock,
                               pressure=None, round_time=1e-3, deadline=-1.0)["b"]
    assert out.ratios == [] and out.verdict == "too few rounds"


def test_work_per_call_turns_times_into_rates():
    m = Machine(3)
    # twice the batch in 1.6x the time: 1.25x the examples per second
    c = run(m, m.job(1e-3, noise=0.02), m.job(1.6e-3, noise=0.02), work={"candidate": 2})
    assert c.verdict == "faster" and c.ratio == pytest.approx(1.25, rel=0.03)


def test_fixed_calls_skip_the_warm_up_so_each_call_is_one_piece_of_a_job():
    m = Machine(4)
    done = {"baseline": 0, "candidate": 0}

    def epoch(name, seconds):
        def run_epoch():
            done[name] += 1
            m.now += seconds
        return run_epoch

    c = bench.compare_rounds(epoch("baseline", 2.0), {"candidate": epoch("candidate", 1.0)},
                             device="cpu", rounds=3, calls=1, clock=m.clock, pressure=m.pressure,
                             threads=lambda: 1)
    assert done == {"baseline": 3, "candidate": 3}  # three epochs each, none spent warming up
    assert c["candidate"].ratios == [2.0, 2.0, 2.0]


def test_an_arm_that_oversubscribes_on_purpose_is_not_the_machine_being_busy():
    m = Machine(5)

    def crowded():  # more threads than cores: its own threads wait for a CPU
        m.now += 1e-3
        m.waited += 1e-3

    flagged = run(m, m.job(1.2e-3), crowded)
    assert flagged.verdict == "machine busy"
    own = run(m, m.job(1.2e-3), crowded, own_load=["candidate"], settle=0)
    assert own.verdict == "faster" and not own.busy
    m.burst = (m.calls, m.calls + 10**6)  # and a real load from outside still shows
    loaded = run(m, m.job(1.2e-3), crowded, own_load=["candidate"], settle=0)
    assert loaded.verdict == "machine busy" and "waited" in loaded.busy


def test_cpu_wait_reads_this_process_s_threads():
    import sys

    waited = bench.cpu_wait()
    if not sys.platform.startswith("linux"):
        assert waited is None
        return
    assert waited is not None and waited >= 0
    import threading
    import time

    def spin():  # more spinning threads than CPUs: they wait for one, then end
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass
    crowd = [threading.Thread(target=spin) for _ in range(8)]
    for t in crowd:
        t.start()
    during = bench.cpu_wait()
    for t in crowd:
        t.join()
    # a running total: threads that ended keep what they had waited
    assert during >= waited and bench.cpu_wait() >= during


def test_the_busy_share_is_per_thread_of_the_work():
    m = Machine(6)

    def eight_threads_waiting_a_little():  # 8 threads, each waiting 8% of the block
        m.now += 1e-3
        m.waited += 8 * 0.08e-3

    c = run(m, m.job(1.3e-3), eight_threads_waiting_a_little, threads=lambda: 8)
    assert c.verdict == "faster" and not c.busy
    again = run(m, m.job(1.3e-3), eight_threads_waiting_a_little)  # read as one thread: 64%
    assert again.verdict == "machine busy"
