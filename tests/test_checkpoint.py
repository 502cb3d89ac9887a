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
