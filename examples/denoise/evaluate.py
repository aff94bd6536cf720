"""Scoring the denoiser: PSNR of denoised test digits under fixed, seeded noise per condition."""

from __future__ import annotations

import torch
from torch import nn


def noisy_inputs(clean: torch.Tensor, sigma: float, *, seed: int) -> torch.Tensor:
    """The evaluation input path: the same noise on every call for a given seed, clipped to [0, 1]."""
    noise = torch.randn(clean.shape, generator=torch.Generator().manual_seed(seed)) * sigma
    return (clean + noise).clamp(0.0, 1.0)


def denoise(model: nn.Module, noisy: torch.Tensor) -> torch.Tensor:
    """The scoring forward: eval mode, no autograd."""
    model.eval()
    with torch.inference_mode():
        return model(noisy)


def psnr(estimate: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR in dB for images in [0, 1] (peak 1)."""
    mse = ((estimate - clean) ** 2).flatten(1).mean(dim=1).clamp_min(1e-10)
    return -10.0 * torch.log10(mse)


def mean_psnr(model: nn.Module, clean: torch.Tensor, sigma: float, *, seed: int) -> float:
    return float(psnr(denoise(model, noisy_inputs(clean, sigma, seed=seed)), clean).mean().item())
