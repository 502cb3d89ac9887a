"""The package's models agree with the ones notebook 03 writes out in full."""

import pytest
import torch
from torch import nn

from torchhw import models


class NotebookMLP(nn.Module):  # as written in 03_nn
    def __init__(self, in_features=64, hidden=128, out_features=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, out_features))

    def forward(self, x):
        return self.net(x.flatten(1))


class NotebookCNN(nn.Module):  # as written in 03_nn
    def __init__(self, in_channels=1, num_classes=10, image_size=8, width=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * width * (image_size // 4) ** 2, num_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def test_mlp_matches_the_notebook_version():
    mine, theirs = NotebookMLP(), models.MLP(64, 10, preset="small")
    theirs.load_state_dict(mine.state_dict())
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(mine(x), theirs(x))
    assert models.count_parameters(theirs) == 64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10


def test_cnn_matches_the_notebook_version():
    mine, theirs = NotebookCNN(), models.SmallCNN(1, 10, image_size=8, preset="small")
    theirs.load_state_dict(mine.state_dict())
    mine.eval(), theirs.eval()
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(mine(x), theirs(x))
    assert models.count_parameters(theirs) == 6186


@pytest.mark.parametrize("preset", list(models.MLP_PRESETS))
def test_presets_build_and_run(preset):
    assert models.MLP(10, 3, preset=preset)(torch.randn(2, 10)).shape == (2, 3)
    cnn = models.SmallCNN(3, 5, image_size=16, preset=preset)
    assert cnn(torch.randn(2, 3, 16, 16)).shape == (2, 5)


def test_bad_sizes_are_explained():
    with pytest.raises(ValueError, match="choose one of tiny, small"):
        models.MLP(4, 2, preset="huge")
    with pytest.raises(ValueError, match="divisible by 4"):
        models.SmallCNN(image_size=10)


def test_count_parameters_skips_frozen_and_buffers():
    model = models.SmallCNN(preset="tiny")
    total = models.count_parameters(model)
    for p in model.head.parameters():
        p.requires_grad_(False)
    frozen = sum(p.numel() for p in model.head.parameters())
    assert models.count_parameters(model) == total - frozen
    assert models.count_parameters(model, trainable_only=False) == total
