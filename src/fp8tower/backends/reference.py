"""Reference backend: dequantize both operands and multiply in float32 (float64 on the CPU).

The correctness oracle: runs on any device, never fast. It quantizes activations exactly as
the scheme says (formats.quantize_activation), so other backends are compared with it on the
same quantized operands.
"""

from __future__ import annotations

import torch

from ..formats import (
    FP8_DTYPE,
    Fp8Weight,
    Scheme,
    dequantize,
    dequantize_activation,
    quantize_activation,
)
from . import Backend


def fp8_linear_ref(
    x: torch.Tensor,
    weight: Fp8Weight,
    *,
    act_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """y = deq(quant(x)) @ deq(W).T (+ bias), computed in ``compute_dtype``: by default float64
    on the CPU, float32 elsewhere.

    Why float64 on the CPU: there float32 BLAS sums K in an order that depends on N (a Xeon
    with AVX-512 / AMX, 2026-12-05: rows 0-199 of a 312-row product differed from the 200-row
    product's by 1.5e-5), so a merged layer's output differed from its shards' in the last
    bit; in float64 each product of two dequantized float32 values is exact and the sum's
    order moves the result by ~1e-14 relative, below any output dtype's rounding."""
    if compute_dtype is None:
        compute_dtype = torch.float64 if x.device.type == "cpu" else torch.float32
    scheme = weight.scheme
    if x.dtype == FP8_DTYPE:  # quantized already: its scales as the scheme shapes them
        if act_scale is None:
            raise ValueError("FP8 activations need their act_scale")
        xd = dequantize_activation(x, act_scale.float(), scheme).to(compute_dtype)
    else:
        static = act_scale if act_scale is not None else weight.act_scale
        q, s = quantize_activation(x, scheme, static if scheme is Scheme.PER_TENSOR else None)
        xd = dequantize_activation(q, s, scheme).to(compute_dtype)
    wd = dequantize(weight, compute_dtype)
    y = xd @ wd.t()
    if bias is not None:
        y = y + bias.to(compute_dtype)
    return y.to(out_dtype)


def _run(
    x, weight, packed, *, act_scale=None, bias=None, out_dtype=torch.bfloat16, config=None, out=None
):
    y = fp8_linear_ref(x, weight, act_scale=act_scale, bias=bias, out_dtype=out_dtype)
    return y if out is None else out.copy_(y)


BACKEND = Backend(
    name="reference",
    # The oracle launches generic aten kernels; it is never the backend a trace verifies.
    kernel_family=r".*",
    description="dequantize + float32 matmul (float64 on the CPU); the correctness oracle "
                "(any device)",
    unavailable_reason=lambda: None,
    check=lambda problem: None,
    prepare=lambda weight: None,
    run=_run,
)
