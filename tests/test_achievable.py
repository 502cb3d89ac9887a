"""The search for the best matmul rate: squares first, then neighbouring shapes, within the
budget; the top shapes timed again; a dtype without a fast kernel skipped with the reason."""

import pytest
import torch

from torchhw import achievable

SMALL = (32, 48, 64, 96)


def test_search_times_squares_then_neighbours_and_confirms_the_best():
    found = achievable.search("cpu", [torch.float32], budget_s=0.6, threads=1, sizes=SMALL,
                              min_run_time=0.005)
    tried = found.tried["float32"]
    assert tried[0].shape == (32, 32, 32)
    assert any(len(set(p.shape)) > 1 for p in tried), "it leaves the squares"
    assert len(found.confirmed["float32"]) == 3
    best = found.best["float32"]
    assert best in found.confirmed["float32"] and best.gflops > 0
    assert set(best.shape) <= set(SMALL)
    card = found.to_dict()["float32"]
    assert card["shape"] == list(best.shape) and card["shapes_tried"] == len(tried)
    assert "float32" in str(found) and "| dtype |" in found._repr_markdown_()


def test_neighbours_change_one_size_at_a_time():
    assert sorted(achievable._neighbours((48, 48, 48), SMALL)) == sorted(
        [(32, 48, 48), (64, 48, 48), (48, 32, 48), (48, 64, 48), (48, 48, 32), (48, 48, 64)])
    assert (32, 32, 48) in achievable._neighbours((32, 32, 32), SMALL)
    assert len(achievable._neighbours((32, 32, 32), SMALL)) == 3


def test_a_dtype_without_a_fast_kernel_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(achievable, "has_fast_kernel", lambda d, *a, **k: (d == torch.float32, 0.02))
    found = achievable.search("cpu", [torch.float32, torch.float16], budget_s=0.3, threads=1,
                              sizes=SMALL, min_run_time=0.005)
    assert "float16" in found.skipped and "2.0%" in found.skipped["float16"]
    assert "float16" not in found.best and "float32" in found.best


def test_a_budget_of_nothing_is_refused():
    with pytest.raises(ValueError, match="budget_s"):
        achievable.search("cpu", budget_s=0)


def test_on_a_gpu_the_search_takes_gpu_sizes_and_skips_what_it_emulates(monkeypatch):
    """torch presented as a Turing GPU (bf16 emulated): no GPU needed to test the decisions."""
    from torchhw import bench

    emulated = lambda device, dtype: ("emulated on sm 7.5" if dtype == torch.bfloat16 else None)
    monkeypatch.setattr(achievable, "dtype_support", emulated)
    monkeypatch.setattr(bench, "dtype_support", emulated)
    timed = []

    def fake_time(shape, dtype, device, threads, min_run_time, seed):
        timed.append((shape, dtype, device.type))
        m, n, k = shape
        rate = 2.0 * m * n * k / (1e-4 + m * n * k / 5e12)   # larger is faster, then levels off
        return achievable.Point(shape, rate / 1e9, 2.0 * m * n * k / rate)

    monkeypatch.setattr(achievable, "_time", fake_time)
    found = achievable.search("cuda", [torch.float32, torch.bfloat16, torch.float16], budget_s=0.2)
    assert achievable.sizes_for("cuda") == achievable.GPU_SIZES
    assert found.skipped == {"bfloat16": "emulated on sm 7.5"}
    assert set(found.best) == {"float32", "float16"}
    assert {s for shape, _, _ in timed for s in shape} <= set(achievable.GPU_SIZES)
    assert all(kind == "cuda" for _, _, kind in timed)


def test_gpu_sizes_fit_a_quarter_of_the_memory():
    assert achievable.sizes_for("cuda", 80 * 2**30) == achievable.GPU_SIZES          # an H100
    small = achievable.sizes_for("cuda", 8 * 2**30)                                  # a laptop GPU
    assert max(small) == 12288 and all(3 * 4 * s * s <= 2 * 2**30 for s in small)
    assert achievable.sizes_for("mps", 2 * 2**30) == (1024, 2048, 3072, 4096, 6144)


def test_a_shape_that_does_not_fit_is_skipped_not_fatal(monkeypatch):
    def fake_time(shape, dtype, device, threads, min_run_time, seed):
        if max(shape) > 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate ...")
        return achievable.Point(shape, float(sum(shape)), 1e-3)

    monkeypatch.setattr(achievable, "_time", fake_time)
    points, confirmed = achievable.search_dtype(torch.float32, "cpu", 0.2, 1, SMALL)
    assert {max(p.shape) for p in points} <= {32, 48, 64} and confirmed


def test_a_square_that_would_outlast_the_budget_is_not_started(monkeypatch):
    """A GPU's largest products take seconds each: the search must not start one it cannot finish."""
    def fake_time(shape, dtype, device, threads, min_run_time, seed):
        m, n, k = shape
        seconds = m * n * k / 32**3 * 0.01     # 32^3: 10 ms, 96^3: 0.27 s
        return achievable.Point(shape, 2.0 * m * n * k / seconds / 1e9, seconds)

    monkeypatch.setattr(achievable, "_time", fake_time)
    points, _ = achievable.search_dtype(torch.float32, "cpu", 0.3, 1, SMALL)
    assert (96, 96, 96) not in {p.shape for p in points}
