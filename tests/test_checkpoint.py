import random

import numpy as np
import pytest
import torch

from torchhw import checkpoint as ckpt
from torchhw import models


def make():
    torch.manual_seed(0)
    model = models.MLP(8, 2, preset="tiny")
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    return model, opt


def test_round_trip_restores_model_optimizer_and_every_generator(tmp_path):
    model, opt = make()
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    path = ckpt.save(tmp_path / "c.pt", model, opt, step=12, note="hello")
    expected = (torch.rand(3), np.random.rand(3), random.random())

    fresh = models.MLP(8, 2, preset="tiny")
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.1)
    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    payload = ckpt.load(path, fresh, fresh_opt)
    assert payload["step"] == 12 and payload["extra"]["note"] == "hello"
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    assert fresh_opt.state_dict()["state"][0]["exp_avg"].equal(opt.state_dict()["state"][0]["exp_avg"])
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    model, opt = make()
    path = ckpt.save(tmp_path / "c.pt", model, opt, step=1)
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(path, model, opt, step=2)
    assert path.read_bytes() == before              # the old checkpoint survived
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    model, _ = make()
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint at .*resume=False"):
        ckpt.load(tmp_path / "nope.pt", model)


def test_corrupt_checkpoint_is_reported_and_left_alone(tmp_path):
    model, opt = make()
    path = ckpt.save(tmp_path / "c.pt", model, opt)
    path.write_bytes(path.read_bytes()[:500])
    before = path.read_bytes()
    weights = [p.clone() for p in model.parameters()]
    with pytest.raises(ckpt.CheckpointError, match="could not be read.*left as it is"):
        ckpt.load(path, model, opt)
    assert path.read_bytes() == before
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))


def test_checkpoint_of_another_model_changes_nothing(tmp_path):
    model, opt = make()
    path = ckpt.save(tmp_path / "c.pt", model, opt)
    other = models.MLP(8, 2, preset="small")
    weights = [p.clone() for p in other.parameters()]
    with pytest.raises(ckpt.CheckpointError, match="different model"):
        ckpt.load(path, other)
    assert all(torch.equal(a, b) for a, b in zip(weights, other.parameters()))


def test_loading_never_unpickles_arbitrary_objects(tmp_path):
    model, _ = make()
    path = tmp_path / "evil.pt"
    torch.save({"model": model.state_dict(), "optimizer": None, "scheduler": None, "step": 0,
                "rng": {}, "extra": {"obj": object()}}, path)
    with pytest.raises(ckpt.CheckpointError, match="could not be read"):
        ckpt.load(path, model)


# Device handling. Generator states are CPU ByteTensors and their setters accept nothing else;
# loading a checkpoint "to the GPU" must move the model and optimizer only. Without a GPU the
# `meta` device stands in for it (a real non-CPU device, no memory); the CUDA and MPS generator
# calls are covered by monkeypatching here and for real by the `gpu` test below.

def test_set_rng_state_needs_a_cpu_tensor():
    # why load() keeps the generator states on the CPU
    with pytest.raises((TypeError, RuntimeError)):
        torch.set_rng_state(torch.get_rng_state().to("meta"))


def test_loading_to_another_device_keeps_and_restores_the_generators_on_the_cpu(tmp_path):
    model, opt = make()
    loader_gen = torch.Generator().manual_seed(3)
    torch.manual_seed(7)
    path = ckpt.save(tmp_path / "c.pt", model, opt, step=5,
                     rng=ckpt.rng_state(loader_gen), loader=loader_gen.get_state())
    expected, expected_order = torch.rand(3), torch.randperm(10, generator=loader_gen)

    on_meta = models.MLP(8, 2, preset="tiny").to("meta")     # stands in for a GPU model
    meta_opt = torch.optim.Adam(on_meta.parameters(), lr=0.1)
    fresh_gen = torch.Generator().manual_seed(99)
    torch.manual_seed(99)
    payload = ckpt.load(path, on_meta, meta_opt, map_location="meta", loader_generator=fresh_gen)
    assert all(t.device.type == "meta" for t in payload["model"].values())
    # the optimizer's state goes where its parameters are, placed by optimizer.load_state_dict:
    # Adam's moments on the model's device, its step on the CPU, where Adam reads it without
    # waiting for a GPU
    assert meta_opt.state_dict()["state"][0]["exp_avg"].device.type == "meta"
    assert meta_opt.state_dict()["state"][0]["step"].device.type == "cpu"
    assert payload["rng"]["torch"].device.type == "cpu"
    assert payload["extra"]["loader"].device.type == "cpu"
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(torch.randperm(10, generator=fresh_gen), expected_order)


def test_cuda_and_mps_generator_states_are_saved_and_restored(tmp_path, monkeypatch):
    cuda_states = [torch.arange(16, dtype=torch.uint8), torch.arange(16, 32, dtype=torch.uint8)]
    mps_state = torch.arange(32, 48, dtype=torch.uint8)
    restored = {}

    def set_cuda(state, device):
        assert state.device.type == "cpu" and state.dtype == torch.uint8
        restored[f"cuda:{device}"] = state

    def set_mps(state):
        assert state.device.type == "cpu" and state.dtype == torch.uint8
        restored["mps"] = state

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in cuda_states])
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: mps_state.clone())
    monkeypatch.setattr(torch.mps, "set_rng_state", set_mps)

    model, opt = make()
    path = ckpt.save(tmp_path / "c.pt", model, opt)
    on_meta = models.MLP(8, 2, preset="tiny").to("meta")
    ckpt.load(path, on_meta, map_location="meta")
    assert torch.equal(restored["cuda:0"], cuda_states[0])
    assert torch.equal(restored["cuda:1"], cuda_states[1])
    assert torch.equal(restored["mps"], mps_state)

    restored.clear()                                   # fewer GPUs now than at saving time
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ckpt.load(path, on_meta, map_location="meta")
    assert sorted(restored) == ["cuda:0", "mps"]


def test_a_gpu_checkpoint_resumes_on_a_cpu_only_machine(tmp_path):
    model, opt = make()
    state = ckpt.rng_state()
    state["cuda"] = [torch.zeros(16, dtype=torch.uint8)]   # as saved on a GPU machine
    state["mps"] = torch.zeros(16, dtype=torch.uint8)
    path = ckpt.save(tmp_path / "c.pt", model, opt, rng=state)
    if not torch.cuda.is_available() and not ckpt._mps_available():
        ckpt.load(path, models.MLP(8, 2, preset="tiny"))   # the GPU states are ignored


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_exact_resume_on_cuda(tmp_path):
    from torchhw import data, train

    torch.cuda.manual_seed_all(7)
    model = models.MLP(8, 2, preset="tiny").cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    path = ckpt.save(tmp_path / "c.pt", model, opt)
    expected = torch.rand(3, device="cuda")
    torch.cuda.manual_seed_all(99)
    ckpt.load(path, model, opt, map_location="cuda")      # raised TypeError before the fix
    assert torch.equal(torch.rand(3, device="cuda"), expected)

    train_set = data.classification(n=96, features=8, classes=2, seed=0)

    def run(stop_at_step=None, resume=False, name="run.pt"):
        torch.manual_seed(0)
        m = models.MLP(8, 2, preset="tiny", dropout=0.2).cuda()
        o = torch.optim.Adam(m.parameters(), lr=1e-2)
        loader, _ = data.loaders(train_set, train_set, batch_size=16, seed=0)
        h = train.fit(m, o, loader, epochs=3, checkpoint=tmp_path / name, checkpoint_every=4,
                      stop_at_step=stop_at_step, resume=resume)
        return m, h

    straight_model, straight = run(name="straight.pt")
    run(stop_at_step=8)
    resumed_model, resumed = run(resume=True)
    assert resumed.losses == straight.losses
    assert all(torch.equal(a, b) for a, b in zip(straight_model.state_dict().values(),
                                                 resumed_model.state_dict().values()))


def test_a_copied_state_is_a_snapshot_and_a_mapped_load_restores_it(tmp_path):
    """state(copy=True) is what a background writer may write while training goes on: later
    steps do not change it. load(mmap=True) gives the same model and optimizer back."""
    model, opt = make()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    snapshot = ckpt.state(model, opt, step=1, copy=True)
    kept = {k: v.clone() for k, v in model.state_dict().items()}
    model(torch.randn(4, 8)).sum().backward()
    opt.step()                                           # the weights move on after the copy
    assert all(torch.equal(snapshot["model"][k], v) for k, v in kept.items())
    assert not all(torch.equal(snapshot["model"][k], v) for k, v in model.state_dict().items())
    path = ckpt.write(tmp_path / "c.pt", snapshot)
    fresh, fresh_opt = make()
    payload = ckpt.load(path, fresh, fresh_opt, mmap=True, restore_rng=False)
    assert payload["step"] == 1
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in kept.items())
    assert fresh_opt.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
