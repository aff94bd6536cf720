"""A small convolutional autoencoder for 8×8 images in [0, 1]."""

from __future__ import annotations

import torch
from torch import nn


class Denoiser(nn.Module):
    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.encode = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1),  # 8×8 → 4×4
            nn.ReLU(),
        )
        self.decode = nn.Sequential(
            nn.ConvTranspose2d(channels, channels, 4, stride=2, padding=1),  # 4×4 → 8×8
            nn.ReLU(),
            nn.Conv2d(channels, 1, 3, padding=1),
        )

    def forward(self, noisy: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decode(self.encode(noisy)))
