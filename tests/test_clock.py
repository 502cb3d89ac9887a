"""The measured clock: a chain of dependent multiplications timed on x86-64, checked against a
chain of adds; elsewhere (or where it cannot run) the boost or reported clock, said as such."""

import platform

import pytest

from torchhw import clock, peak
from torchhw.hardware import CPUInfo

X86 = platform.machine().lower() in ("x86_64", "amd64")


def cpu(clock_ghz=2.0, source="as reported by /proc/cpuinfo; boost clocks may be higher", local=True):
    return CPUInfo("test cpu", "GenuineIntel", "x86_64", 2, 2, clock_ghz, source, 6, 85,
                   {"avx2": True, "fma": True}, local=local)


@pytest.mark.skipif(not X86, reason="the chains are x86-64 machine code")
def test_the_clock_is_measured_and_the_two_chains_agree():
    one = clock.measure(1, seconds=0.002, repeats=5)
    assert one.kind == "measured" and 0.5 < one.ghz < 8.0, one
    both = clock.measure(2, seconds=0.002, repeats=5)
    assert both.threads == 2 and both.ghz <= both.single_ghz * 1.1
    assert "2 cores at once" in both.source


def test_a_machine_that_cannot_measure_takes_the_boost_or_reported_clock(monkeypatch):
    monkeypatch.setattr(clock, "supported", lambda: False)
    clock._measured.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="x86-64 only"):
            clock.measure()
        assert clock.best(cpu()).kind == "reported"
        assert clock.best(cpu(3.5, "maximum, from psutil.cpu_freq")).kind == "boost"
        assert clock.best(cpu(None)).ghz is None
        unknown = peak.flops(cpu(None))
        assert unknown.gflops is None and "clock" in unknown.basis
    finally:
        clock._measured.cache_clear()


def test_disagreeing_chains_give_no_clock(monkeypatch):
    rates = iter([3.0e9, 1.5e9])   # imul, then add: a core with other latencies
    monkeypatch.setattr(clock, "supported", lambda: True)
    monkeypatch.setattr(clock, "_chains", lambda: {"imul": (None, 3), "add": (None, 1)})
    monkeypatch.setattr(clock, "_rate", lambda *a: next(rates))
    with pytest.raises(RuntimeError, match="disagree"):
        clock.measure()


def test_the_peak_uses_the_measured_clock_for_this_machine_only(monkeypatch):
    monkeypatch.setattr(clock, "best", lambda c, threads=None: clock.Clock(4.0, "measured", "test"))
    here = peak.flops(cpu(2.0, local=True))
    assert here.gflops == 2 * 32 * 4.0 and "4.00 GHz measured" in here.basis
    described = peak.flops(cpu(2.0, local=False))   # a CPU described by hand: its own clock
    assert described.gflops == 2 * 32 * 2.0 and "reported" in described.basis
    given = peak.flops(cpu(2.0), clock=3.0)
    assert given.gflops == 2 * 32 * 3.0 and given.clock.kind == "given"


def test_intel_client_cores_have_one_fma_unit_and_smt_adds_no_peak():
    def intel(model, **flags):
        return CPUInfo("Intel", "GenuineIntel", "x86_64", 8, 4, 3.0, "test", 6, model,
                       {"avx2": True, "fma": True, "avx512f": True, **flags}, local=False)

    tiger = peak.flops(intel(0x8C))                      # Tiger Lake laptop: one 512-bit unit
    assert tiger.flops_per_cycle == 32 and "client" in tiger.basis
    masked = peak.flops(intel(0xA7, amx_tile=True))       # a VM's model number, but AMX: a server
    assert masked.flops_per_cycle == 64 and "upper bound" in masked.basis
    assert peak.flops(intel(0x8F), cores=8).cores == 4    # 8 threads on 4 cores: 4 cores' peak
