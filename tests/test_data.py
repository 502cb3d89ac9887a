import torch

from torchhw import data


def test_digits_ship_offline_and_split_reproducibly():
    train, val = data.digits(seed=0)
    assert len(train) + len(val) == 1797 and len(val) == 359
    x, y = train[0]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    assert y.dtype == torch.int64 and set(val.tensors[1].tolist()) == set(range(10))
    again, _ = data.digits(seed=0)
    assert torch.equal(train.tensors[0], again.tensors[0])
    other, _ = data.digits(seed=1)
    assert not torch.equal(train.tensors[1], other.tensors[1])
    flat, _ = data.digits(flatten=True)
    assert flat.tensors[0].shape[1:] == (64,)


def test_synthetic_sets_are_seeded():
    ds, w, b = data.regression(100, 3, noise=0.0, seed=3)
    X, y = ds.tensors
    torch.testing.assert_close(y, X @ w + b)
    a = data.classification(50, seed=1).tensors[0]
    assert torch.equal(a, data.classification(50, seed=1).tensors[0])
    images = data.bars(30, size=8, seed=2)
    assert images.tensors[0].shape == (30, 1, 8, 8) and set(images.tensors[1].tolist()) <= {0, 1, 2}


def test_loaders_shuffle_the_same_way_each_run_without_global_rng():
    train, val = data.digits(seed=0)
    first, _ = data.loaders(train, val, batch_size=32, seed=5)
    second, _ = data.loaders(train, val, batch_size=32, seed=5)
    state = torch.get_rng_state()
    assert torch.equal(next(iter(first))[1], next(iter(second))[1])
    assert torch.equal(state, torch.get_rng_state())


def test_split_rejects_bad_fraction():
    import pytest
    ds = data.classification(10)
    with pytest.raises(ValueError, match="between 0 and 1"):
        data.split(ds, 1.5)


def test_larger_digits_keep_validation_images_out_of_training():
    plain_train, plain_val = data.digits(seed=0)
    train, val = data.digits(seed=0, size=16, copies=3)
    assert train.tensors[0].shape == (3 * len(plain_train), 1, 16, 16) and len(val) == len(plain_val)
    assert torch.equal(train.tensors[1], plain_train.tensors[1].repeat(3))
    first, shifted = train.tensors[0][:len(plain_train)], train.tensors[0][len(plain_train):]
    assert 0 <= shifted.min() and shifted.max() <= 1 and not torch.equal(shifted[:len(first)], first)
    # each copy is its own training image moved by whole pixels (up to 2) plus a little noise,
    # so no validation image is the source of one
    padded = torch.nn.functional.pad(first[:40], (2, 2, 2, 2))
    copies = shifted[:40]
    best = torch.stack([(copies - padded[..., dy:dy + 16, dx:dx + 16]).abs().mean((1, 2, 3))
                        for dy in range(5) for dx in range(5)]).min(0).values
    assert best.max() < 0.06, best.max()  # noise of 0.05: a mean absolute difference near 0.04
    again, _ = data.digits(seed=0, size=16, copies=3)
    assert torch.equal(train.tensors[0], again.tensors[0])
    import pytest
    with pytest.raises(ValueError, match="divisible by 4"):
        data.digits(size=10)
    with pytest.raises(ValueError, match="copies"):
        data.digits(copies=0)
