import os
import time
import pytest
import torch

from torchhw import bench


def test_measure_reports_median_iqr_and_rates():
    a = torch.randn(64, 64)
    r = bench.measure(torch.mm, a, a, label="mm", device="cpu", flops=2 * 64**3,
                      nbytes=3 * 64 * 64 * 4,
                      threads=1, min_run_time=0.02)
    assert r.median > 0 and r.iqr >= 0 and r.runs >= 1
    assert r.threads == 1 and r.device == "cpu"
    assert r.gflops == pytest.approx(2 * 64**3 / r.median / 1e9)
    assert r.gbps == pytest.approx(3 * 64 * 64 * 4 / r.median / 1e9)
    assert r.intensity == pytest.approx(2 * 64 / 12)
    assert "GFLOP/s" in str(r) and "GB/s" in str(r)


def test_threads_default_to_torchs_count_not_one():
    r = bench.measure(torch.add, torch.ones(8), torch.ones(8), label="add", device="cpu",
                      min_run_time=0.01)
    assert r.threads == torch.get_num_threads()


def test_noise_flag():
    r = bench.Result("x", "", "", median=1.0, iqr=0.2, runs=5, threads=1, device="cpu")
    assert r.noisy and "noisy" in str(r)
    assert not bench.Result("x", "", "", 1.0, 0.01, 5, 1, "cpu").noisy
    assert r.gflops is None and r.intensity is None


def test_compare_checks_results_before_timing():
    v = torch.arange(10.0)
    with pytest.raises(AssertionError, match="does not compute the same result"):
        bench.compare({"sum": torch.sum, "mean": torch.mean}, v, label="reduce", device="cpu")
    slow, fast = bench.compare({"sum": torch.sum, "sum again": lambda x: x.sum()}, v,
                               label="reduce", device="cpu", min_run_time=0.01)
    assert bench.speedup(slow, fast) == pytest.approx(slow.median / fast.median)


def test_table_shows_ratios_and_marks_noise():
    base = bench.Result("op", "", "a", 2.0, 0.1, 3, 1, "cpu", flops=2e9)
    other = bench.Result("op", "", "b", 1.0, 0.5, 3, 1, "cpu", flops=2e9)
    table = bench.table([base, other], baseline=base)
    text = str(table)
    assert "2.00x" in text and "1.00x" in text and "GFLOP/s" in text
    assert "noisy" in text and "*" in text and "above 1: faster" in text
    assert table._repr_markdown_().startswith("| operation |")
    assert repr(table) == text


def test_fmt_time_units():
    assert bench.fmt_time(1.5) == "1.5 s"
    assert bench.fmt_time(0.0126) == "12.6 ms"
    assert bench.fmt_time(850e-6) == "850 us"
    assert bench.fmt_time(3e-9) == "3 ns"


def test_matmul_and_fast_kernel_probe():
    r = bench.matmul(32, torch.float32, "cpu", threads=1, min_run_time=0.01)
    assert r.flops == 2 * 32**3 and r.description == "float32"
    assert bench.has_fast_kernel(torch.float32, "cpu") == (True, 1.0)  # the reference, never skipped
    fast, ratio = bench.has_fast_kernel(torch.float64, "cpu", n=32, threads=1)
    assert fast and 0.05 < ratio < 5


def test_bandwidth_ops():
    results = bench.bandwidth(2**20, "cpu", threads=1, min_run_time=0.01)
    assert [r.description for r in results] == ["copy", "add", "sum"]
    assert all(r.gbps > 0 for r in results)
    assert results[0].nbytes == 2 * 2**20


def test_the_device_is_passed_never_guessed():
    a = torch.ones(4)
    with pytest.raises(TypeError, match="device"):
        bench.measure(torch.neg, a, label="neg")  # no device: refused, not guessed
    # tensors on another device than the one named (meta stands in for a GPU here)
    with pytest.raises(ValueError, match="tensors are on"):
        bench.measure(torch.neg, torch.ones(4, device="meta"), label="neg", device="cpu")


def test_cost_counts_flops_and_the_bytes_each_operation_moves():
    a, b = torch.randn(64, 32), torch.randn(64, 48)
    c = bench.cost(lambda: a.t() @ b)  # the transpose is a view: it moves nothing
    assert c.flops == 2 * 32 * 64 * 48
    assert c.bytes == 4 * (64 * 32 + 64 * 48 + 32 * 48)
    assert c.intensity == c.flops / c.bytes
    assert c.bound(peak_gflops=100.0, bandwidth_gbps=1.0) == pytest.approx(c.intensity)
    assert c.bound(peak_gflops=1.0, bandwidth_gbps=1000.0) == 1.0
    chain = bench.cost(lambda: (a * 2).relu())  # element-wise: bytes but no counted FLOPs
    assert chain.flops == 0 and chain.bytes == 4 * 4 * a.numel()


def test_beyond_cache_sizes_a_buffer_past_the_last_level_cache():
    assert bench.beyond_cache({"L1d": 48 * 2**10, "L2": 2**21, "L3": 32 * 2**20}) == 128 * 2**20
    assert bench.beyond_cache({}) == 64 * 2**20  # nothing reported: the floor
    assert bench.beyond_cache(None) == bench.GPU_STREAM_BYTES >= 4 * 126 * 10**6  # a GPU: past any L2
    assert bench.beyond_cache({"L3": 2**30}) == 2**30  # a huge cache: capped, memory is finite


def test_cost_counts_an_in_place_operation_s_write():
    a, b = torch.randn(100), torch.randn(100)
    c = bench.cost(lambda: a.add_(b))  # reads a and b, writes a
    assert c.bytes == 3 * 4 * 100


def test_cpu_busy_sees_another_program_and_between_runs_after_every_round():
    """cpu_busy, read while this process idles, is the share of its CPUs that others use."""
    import subprocess
    import sys

    quiet = bench.cpu_busy(0.2)
    if quiet is None:
        pytest.skip("this system does not report CPU time (/proc/stat)")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        loaded = bench.cpu_busy(0.3)
    finally:
        spinner.kill()
        spinner.wait()
    cpus = len(os.sched_getaffinity(0))
    assert loaded >= 0.8 / cpus                   # one spinning program fills one of our CPUs
    assert 0.0 <= quiet <= 1.0 and 0.0 <= loaded <= 1.0
    seen = []
    bench.compare_rounds(lambda: None, {"same": lambda: None}, device="cpu", rounds=3, calls=1,
                         between=seen.append, pressure=None)
    assert seen == [0, 1, 2]


def test_measure_refuses_tensors_on_a_device_it_was_not_told(monkeypatch):
    a = torch.ones(4)
    with pytest.raises(ValueError, match="told device=meta but its tensors are on cpu"):
        bench.measure(torch.add, a, a, label="add", device="meta", min_run_time=0.01)
    with pytest.raises(ValueError, match="its tensors are on cpu, meta"):
        bench.measure(torch.add, a, torch.ones(4, device="meta"), label="add", device="cpu",
                      min_run_time=0.01)


def test_a_bare_gpu_name_is_the_current_gpu_and_another_index_is_not(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert bench._indexed(torch.device("cuda")) == torch.device("cuda", 1)
    assert bench._indexed(torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert bench._indexed(torch.device("mps")) == torch.device("mps", 0)
    assert bench._indexed(torch.device("cpu", 0)) == torch.device("cpu")
    assert bench._indexed(torch.device("cuda")) != bench._indexed(torch.device("cuda:0"))
