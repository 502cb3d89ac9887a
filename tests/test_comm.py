"""The bandwidth definitions (as nccl-tests) and the latency-bandwidth fit."""

import pytest

from torchhw.distributed import comm


def test_bandwidths_follow_nccl_tests():
    assert comm.algbw(1e9, 0.5) == 2e9
    assert comm.busbw(1e9, 0.5, 2) == pytest.approx(2e9)          # 2 (n - 1) / n = 1 for n = 2
    assert comm.busbw(1e9, 0.5, 8) == pytest.approx(2e9 * 1.75)


def test_fit_recovers_latency_and_bandwidth():
    truth = comm.LinkModel(latency=50e-6, bandwidth=2e9)
    sizes = [4 ** k for k in range(1, 13)]
    link = comm.fit(sizes, [truth.seconds(s) for s in sizes])
    assert link.latency == pytest.approx(50e-6, rel=1e-6)
    assert link.bandwidth == pytest.approx(2e9, rel=1e-6)
    assert link.seconds(1000, calls=3) == pytest.approx(3 * link.latency + 1000 / link.bandwidth)


def test_fit_refuses_too_little_data():
    with pytest.raises(ValueError):
        comm.fit([4], [1e-5])
