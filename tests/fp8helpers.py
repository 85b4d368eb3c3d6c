"""Test helpers shared by the numerics tests."""

import torch

from fp8tower.formats import BLOCK, FP8_DTYPE, FP8_MAX, Scheme


def exact_activations(m: int, k: int, scheme: Scheme, scale: float = 0.05, seed: int = 0):
    """Random activations whose quantization under ``scheme`` is exact: FP8 grid values times
    a scale, with one element of each scale group at +-448*scale so the dynamic scale is
    exactly ``scale``. The CPU interpreter's fp32->fp8 cast is wrong when rounding carries
    into the exponent (DESIGN.md), so in-kernel quantization is tested on the CPU with these;
    the GPU tests use general random activations."""
    g = torch.Generator().manual_seed(seed)
    grid = (torch.randn(m, k, generator=g) * 64).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).float()
    if scheme is Scheme.CHANNEL_TOKEN:
        grid[:, 0] = FP8_MAX
    elif scheme is Scheme.BLOCK128:
        grid[:, ::BLOCK] = -FP8_MAX
    return grid * scale


def random_weight(n: int, k: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * 0.02
