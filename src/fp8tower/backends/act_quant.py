"""Activation quantization for backends that take FP8 activations from a separate launch.

On a CUDA device with Triton: one launch (kernels/act_quant.py). Elsewhere, or for a
dynamic per-tensor scale (it needs a global amax first): the torch reference math.
"""

from __future__ import annotations

import importlib.util

import torch

from ..formats import Scheme, quantize_activation

_HAS_TRITON = importlib.util.find_spec("triton") is not None


def quantize(
    x: torch.Tensor, scheme: Scheme, static_scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    one_launch = x.is_cuda and _HAS_TRITON and not (
        scheme is Scheme.PER_TENSOR and static_scale is None
    )
    if one_launch:
        from ..kernels.act_quant import quantize as triton_quantize

        return triton_quantize(x, scheme, static_scale)
    q, s = quantize_activation(x, scheme, static_scale)
    return q, s
