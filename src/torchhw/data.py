"""Offline data sets for the course: seeded synthetic data, and scikit-learn's digits.

Nothing here downloads anything. The synthetic sets are made from a seed; ``digits``
(1,797 handwritten 8 x 8 images) ships inside scikit-learn. Every function returns
``TensorDataset`` objects, so the same training code takes any of them.

    train, val = digits(seed=0)                      # images (N, 1, 8, 8), labels 0..9
    train_loader, val_loader = loaders(train, val, batch_size=64, seed=0)
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def split(dataset: Dataset, val_fraction: float = 0.2, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """Shuffle once with ``seed`` and cut into (train, validation) TensorDatasets."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    tensors = dataset.tensors if isinstance(dataset, TensorDataset) else None
    if tensors is None:
        raise TypeError("split() takes a TensorDataset")
    n = len(dataset)
    order = torch.randperm(n, generator=_generator(seed))
    n_val = max(1, int(round(n * val_fraction)))
    val, train = order[:n_val], order[n_val:]
    return (TensorDataset(*(t[train] for t in tensors)),
            TensorDataset(*(t[val] for t in tensors)))


def regression(n: int = 256, features: int = 3, noise: float = 0.1,
               seed: int = 0) -> tuple[TensorDataset, torch.Tensor, torch.Tensor]:
    """y = X w + b + noise. Returns (dataset, true w, true b) so a fit can be checked."""
    g = _generator(seed)
    w = torch.randn(features, 1, generator=g)
    b = torch.randn(1, generator=g)
    X = torch.randn(n, features, generator=g)
    y = X @ w + b + noise * torch.randn(n, 1, generator=g)
    return TensorDataset(X, y), w, b


def classification(n: int = 512, features: int = 2, classes: int = 3, spread: float = 1.0,
                   seed: int = 0) -> TensorDataset:
    """Gaussian blobs, one per class, centres drawn from the seed. Labels are int64."""
    g = _generator(seed)
    centres = 3 * torch.randn(classes, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    X = centres[y] + spread * torch.randn(n, features, generator=g)
    return TensorDataset(X, y)


def bars(n: int = 512, size: int = 8, noise: float = 0.3, seed: int = 0) -> TensorDataset:
    """Synthetic images (N, 1, size, size): class 0 a horizontal bar, 1 a vertical bar,
    2 a diagonal, each at a random place, plus Gaussian noise. Needs a CNN-sized model."""
    g = _generator(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    pos = torch.randint(0, size, (n,), generator=g)
    images = noise * torch.randn(n, 1, size, size, generator=g)
    idx = torch.arange(size)
    for i in range(n):
        if y[i] == 0:
            images[i, 0, pos[i], :] += 1
        elif y[i] == 1:
            images[i, 0, :, pos[i]] += 1
        else:
            images[i, 0, idx, (idx + pos[i]) % size] += 1
    return TensorDataset(images, y)


def digits(val_fraction: float = 0.2, seed: int = 0, flatten: bool = False, size: int = 8,
           copies: int = 1) -> tuple[TensorDataset, TensorDataset]:
    """scikit-learn's handwritten digits, scaled to [0, 1], split into (train, validation).

    Images are (N, 1, size, size) float32, or (N, size * size) with ``flatten=True``; labels
    int64 0..9. The data ships inside scikit-learn: no network needed.

    ``size`` above 8 enlarges every image (bilinear), and ``copies`` above 1 makes the training
    set that many times larger: each training image once as it is and ``copies - 1`` times
    shifted by up to ``size // 8`` pixels in each direction, with a little noise, all drawn from
    ``seed``. The split comes first, so no shifted copy of a validation image is trained on.
    The capstone (notebook 10) trains on ``digits(size=16, copies=4)``.
    """
    if size < 8 or size % 4:
        raise ValueError(f"size must be 8 or more and divisible by 4 (the CNN pools twice), got {size}")
    if copies < 1:
        raise ValueError(f"copies must be 1 or more, got {copies}")
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("digits() needs scikit-learn: pip install scikit-learn") from None
    raw = load_digits()
    X = torch.tensor(raw.images, dtype=torch.float32).unsqueeze(1) / 16.0
    if size != 8:
        X = torch.nn.functional.interpolate(X, size=size, mode="bilinear", align_corners=False)
    y = torch.tensor(raw.target, dtype=torch.int64)
    train, val = split(TensorDataset(X, y), val_fraction, seed)
    if copies > 1:
        train = TensorDataset(*_shifted_copies(*train.tensors, copies, size // 8, seed))
    if flatten:
        train, val = (TensorDataset(d.tensors[0].flatten(1), d.tensors[1]) for d in (train, val))
    return train, val


def _shifted_copies(X: torch.Tensor, y: torch.Tensor, copies: int, shift: int,
                    seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``X`` once as it is, then ``copies - 1`` times moved by whole pixels (zeros come in at
    the edges) with Gaussian noise of 0.05, clamped to [0, 1]."""
    g = _generator(seed + 1)
    size = X.shape[-1]
    padded = torch.nn.functional.pad(X, (shift,) * 4)
    out = [X]
    for _ in range(copies - 1):
        dy, dx = (torch.randint(0, 2 * shift + 1, (len(X),), generator=g) for _ in range(2))
        moved = torch.empty_like(X)
        for oy in range(2 * shift + 1):  # one slice per offset, not one per image
            for ox in range(2 * shift + 1):
                pick = (dy == oy) & (dx == ox)
                moved[pick] = padded[pick, :, oy:oy + size, ox:ox + size]
        out.append((moved + 0.05 * torch.randn(moved.shape, generator=g)).clamp_(0, 1))
    return torch.cat(out), y.repeat(copies)


def loaders(train: Dataset, val: Dataset, batch_size: int = 64, seed: int = 0,
            num_workers: int = 0) -> tuple[DataLoader, DataLoader]:
    """DataLoaders: the training one reshuffles each epoch from its own seeded generator, so
    the order repeats run after run without touching the global random state."""
    train_loader = DataLoader(train, batch_size=batch_size, shuffle=True,
                              generator=_generator(seed), num_workers=num_workers)
    val_loader = DataLoader(val, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    return train_loader, val_loader
