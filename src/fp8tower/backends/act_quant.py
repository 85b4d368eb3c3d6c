"""Activation quantization for backends that take FP8 activations from a separate launch.

On a CUDA device with Triton: one launch (kernels/act_quant.py). Elsewhere, or for a
dynamic per-tensor scale (it needs a global amax first): the torch reference math.
"""

from __future__ import annotations

import importlib.util

import torch

from ..formats import FP8_DTYPE, Fp8Weight, Scheme, quantize_activation

_HAS_TRITON = importlib.util.find_spec("triton") is not None


def quantize(
    x: torch.Tensor, scheme: Scheme, static_scale: torch.Tensor | None = None, pdl: bool = False,
    per_token: bool = False, q: torch.Tensor | None = None, s_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``pdl``: the one-launch kernel is launched with programmatic dependent launch, to
    overlap the GEMM that follows (kernels/act_quant.py); ignored by the torch math.
    ``per_token``: weight_only's split with one scale a token (kernels/act_quant.py).
    ``q`` / ``s_out``: the outputs, written in place in their own layout (the kernel's
    quantize_args says which; the torch math copies into them), and returned."""
    one_launch = x.is_cuda and _HAS_TRITON and not (
        scheme is Scheme.PER_TENSOR and static_scale is None
    )
    # weight_only's two-part split exists only as the kernel (the interpreter runs it on the
    # CPU, rounding exactly: kernels/act_quant._split8_groups)
    one_launch = one_launch or (scheme is Scheme.WEIGHT_ONLY and _HAS_TRITON)
    if one_launch:
        from ..kernels.act_quant import quantize as triton_quantize

        return triton_quantize(x, scheme, static_scale, pdl=pdl, per_token=per_token, q=q,
                               s_out=s_out)
    xq, s = quantize_activation(x, scheme, static_scale)
    if q is not None:
        xq = q.copy_(xq)
    if s_out is not None and s is not None:  # the kernel's returns: channel_token's (M,)
        s_out.copy_(s.reshape(s_out.shape) if s.numel() == s_out.numel() else s)
        s = s_out.reshape(-1) if scheme is Scheme.CHANNEL_TOKEN else s_out
    return xq, s


def for_gemm(
    x: torch.Tensor, weight: Fp8Weight, act_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP8 x, its scale) for a backend whose GEMM takes FP8 activations: FP8 x as given
    with its ``act_scale`` (as :func:`quantize` returns it for the scheme), else x quantized
    with the call's or the weight's static scale, or dynamically."""
    if x.dtype == FP8_DTYPE:  # Fp8Linear admits per_tensor only; a launch plan all schemes
        if act_scale is None:
            raise ValueError("FP8 activations need their act_scale: per_tensor's scalar, or the "
                             "activation quantizer's per-token / per-group scales")
        return x, act_scale
    static = act_scale if act_scale is not None else weight.act_scale
    return quantize(x, weight.scheme, static)
