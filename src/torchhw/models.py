"""Small models for the course: an MLP and a CNN, with size presets.

Both are written out in full in notebook 03 (nn), where they are taught; later notebooks
import these, and the tests check that the two agree layer for layer.

    model = MLP(64, 10, preset="small")          # for flattened 8 x 8 digits
    model = SmallCNN(in_channels=1, num_classes=10, image_size=8, preset="tiny")
"""

from __future__ import annotations

import torch
from torch import nn

# hidden width and depth (MLP), channel width (CNN): sizes that train in seconds on a CPU up to
# sizes where a GPU starts to pay off
MLP_PRESETS = {"tiny": (32, 1), "small": (128, 2), "base": (512, 3), "large": (2048, 4)}
CNN_PRESETS = {"tiny": 8, "small": 16, "base": 32, "large": 64}


class MLP(nn.Module):
    """Linear -> ReLU (-> Dropout) blocks, then a linear head."""

    def __init__(self, in_features: int, out_features: int, preset: str = "small",
                 hidden: int | None = None, depth: int | None = None,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if preset not in MLP_PRESETS:
            raise ValueError(f"unknown MLP preset {preset!r}: choose one of {', '.join(MLP_PRESETS)}")
        default_hidden, default_depth = MLP_PRESETS[preset]
        hidden = hidden or default_hidden
        depth = depth or default_depth
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = hidden
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


class SmallCNN(nn.Module):
    """Two conv blocks (conv 3x3 -> batch norm -> ReLU -> 2x2 max-pool), then a linear head."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 8,
                 preset: str = "small", width: int | None = None) -> None:
        super().__init__()
        if preset not in CNN_PRESETS:
            raise ValueError(f"unknown CNN preset {preset!r}: choose one of {', '.join(CNN_PRESETS)}")
        if image_size % 4:
            raise ValueError(f"image_size must be divisible by 4 (two 2x2 pools), got {image_size}")
        w = width or CNN_PRESETS[preset]
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(2 * w * (image_size // 4) ** 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of parameter elements (buffers such as batch-norm statistics not included)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
