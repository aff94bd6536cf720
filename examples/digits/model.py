"""A small convolutional classifier for 8×8 digits."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class DigitsNet(nn.Module):
    def __init__(self, channels: tuple[int, int] = (16, 32), hidden: int = 64, dropout: float = 0.1) -> None:
        super().__init__()
        first, second = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, first, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(first, second, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(second * 16, hidden),
            nn.ReLU(),
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.features(images)))


def build(config: dict[str, Any]) -> DigitsNet:
    model_config = config["model"]
    return DigitsNet(tuple(model_config["channels"]), model_config["hidden"], model_config["dropout"])
