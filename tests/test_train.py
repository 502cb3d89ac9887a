"""fit(): device checks, history, and resume that is exact to the bit on CPU."""

import pytest
import torch

from torchhw import checkpoint as ckpt
from torchhw import data, models, train
from torchhw.notebook import seed_everything


def run(tmp_path, epochs=3, stop=None, resume=False, name="c.pt", **kw):
    seed_everything(0)
    train_set, val_set = data.digits(seed=0, flatten=True)
    train_set = torch.utils.data.TensorDataset(*(t[:320] for t in train_set.tensors))
    loaders = data.loaders(train_set, val_set, batch_size=64, seed=0)
    model = models.MLP(64, 10, preset="tiny", dropout=0.3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7)
    history = train.fit(model, opt, *loaders, epochs=epochs, scheduler=sched,
                        checkpoint=tmp_path / name, stop_at_step=stop, resume=resume, **kw)
    return model, history


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("stop", [2, 5, 8, 12])  # mid-epoch, epoch end (5 steps/epoch), later
def test_resume_is_exactly_the_uninterrupted_run(tmp_path, stop):
    straight_model, straight = run(tmp_path, name="straight.pt")
    _, part = run(tmp_path, stop=stop)
    assert part.stopped_early and len(part.losses) == stop
    resumed_model, resumed = run(tmp_path, resume=True)
    assert resumed.losses == straight.losses
    assert resumed.grad_norms == straight.grad_norms
    assert resumed.epochs == straight.epochs
    assert same(straight_model, resumed_model)


def test_history_records_each_epoch(tmp_path):
    _, h = run(tmp_path, epochs=2)
    assert len(h.losses) == 10 and [e["epoch"] for e in h.epochs] == [1, 2]
    assert set(h.epochs[0]) >= {"train_loss", "val_loss", "val_acc", "lr", "grad_norm"}
    assert h.column("lr") == pytest.approx([0.035, 0.0245])
    assert not h.stopped_early


def test_resume_without_a_checkpoint_fails_loudly(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint"):
        run(tmp_path, resume=True, name="absent.pt")


def test_model_on_the_wrong_device_is_not_moved_silently():
    model = models.MLP(4, 2, preset="tiny")
    loader = torch.utils.data.DataLoader(data.classification(16, features=4, classes=2), batch_size=8)
    with pytest.raises(train.DeviceMismatch, match="model.to\\('cuda'\\)"):
        train.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, epochs=1, device="cuda")


def test_checkpointing_needs_a_seeded_shuffle(tmp_path):
    model = models.MLP(4, 2, preset="tiny")
    loader = torch.utils.data.DataLoader(data.classification(16, features=4, classes=2),
                                         batch_size=8, shuffle=True)
    with pytest.raises(ValueError, match="generator"):
        train.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, epochs=1,
                  checkpoint=tmp_path / "c.pt")


def test_clipping_bounds_the_update_and_training_learns():
    seed_everything(0)
    ds = data.classification(256, features=2, classes=3, seed=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    model = models.MLP(2, 3, preset="tiny")
    h = train.fit(model, torch.optim.Adam(model.parameters(), lr=0.02), loader, loader,
                  epochs=8, clip_grad_norm=0.5)
    assert h.epochs[-1]["val_acc"] > 0.8
    assert h.epochs[-1]["train_loss"] < h.epochs[0]["train_loss"]


def test_a_model_on_another_device_is_refused_through_meta():
    # meta stands in for an accelerator on a CPU-only machine: the same check, for real
    model = models.MLP(4, 2, preset="tiny").to("meta")
    loader = torch.utils.data.DataLoader(data.classification(16, features=4, classes=2), batch_size=8)
    with pytest.raises(train.DeviceMismatch, match="model is on meta.*model.to\\('cpu'\\)"):
        train.fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, epochs=1, device="cpu")


def test_timings_split_the_run_into_its_parts(tmp_path, monkeypatch):
    ticks = iter(range(10**6))  # a clock that moves one second per reading: no wall-clock assert
    monkeypatch.setattr(train.time, "perf_counter", lambda: float(next(ticks)))
    timings = {}
    _, history = run(tmp_path, epochs=2, timings=timings)
    assert set(timings) == {"data", "step", "validation", "checkpoint"}
    # one reading pair per block: 5 batches an epoch, one validation and one file each epoch
    assert timings == {"data": 10.0, "step": 10.0, "validation": 2.0, "checkpoint": 2.0}
    assert len(history.losses) == 10
