"""One-launch FP8 activation quantization (Triton): per-tensor static, per-token, 1x128 groups.

Division is IEEE round-to-nearest: one div_rn per scale for its reciprocal r, then x * r
with one FMA correction per element (fp8_gemm._div_by_scale: div_rn's bits), so results
equal formats.quantize_* bit for bit on the GPU (tests/test_gpu_plan.py). The CPU
interpreter's fp32->fp8 cast rounds wrongly when rounding carries into the exponent: test
it there only with values that quantize exactly (DESIGN.md).

Speed (H200, 2026-12-01): a div_rn per element on 4 warps made the per-token pass (one
program per token) the slow half of channel_token's pre-pass + GEMM pair; with the
reciprocal and 4-16 warps a row the pair at 16384x5120 M=8 went from 28.2 to 22.9 us
(per_tensor's GEMM: 23.0; results/amax_unrolled_H200_2026-12-01/ and
results/fast_token_prepass_H200_2026-12-01/, tuning_cache.json of each). A 1x128 group
takes one warp, so its amax is a warp shuffle with no block-wide barrier (the block128
pair 24.64 -> 24.34 us at 16384x5120 M=1; results/b128_one_warp_prepass_H200_2026-12-01/).

PDL (constexpr; launched with ``launch_pdl``): the kernel first lets the next one launch
(``gdc_launch_dependents``: the GEMM that reads q, which streams its weights meanwhile; its
own ``gdc_wait`` holds its reads of q until this grid has finished), then waits for the
previous kernel (``gdc_wait``) before it reads x. So a pre-pass + GEMM pair launched with PDL
overlaps the GEMM's start with the pre-pass instead of adding a kernel boundary.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..formats import BLOCK, FP8_DTYPE, FP8_MAX, MIN_SCALE, Scheme
from .fp8_gemm import _div_by_scale


@triton.jit
def _fp8_act_quant_kernel(
    x_ptr, q_ptr, s_ptr, static_ptr, K, stride_xm, stride_qm, stride_sm,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, STATIC: tl.constexpr,
    FMAX: tl.constexpr, SMIN: tl.constexpr, PDL: tl.constexpr = False,
):
    if PDL:  # never under the interpreter (quantize_args): it has no griddepcontrol
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0)
    g = tl.program_id(1)
    lane = tl.arange(0, BLOCK_G)
    offs = g * GROUP + lane
    mask = (lane < GROUP) & (offs < K)
    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    if STATIC:
        s = tl.load(static_ptr)
    else:
        s = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=0), FMAX), SMIN)
        tl.store(s_ptr + row * stride_sm + g, s)
    q = tl.clamp(_div_by_scale(x, s, tl.math.div_rn(s * 0.0 + 1.0, s)), -FMAX, FMAX)
    tl.store(q_ptr + row * stride_qm + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


def quantize_args(
    x: torch.Tensor, scheme: Scheme, static_scale: torch.Tensor | None = None,
    q: torch.Tensor | None = None, s_out: torch.Tensor | None = None, pdl: bool = False,
):
    """(grid, args, kwargs, q, scale) of one launch of ``_fp8_act_quant_kernel``; ``q`` and
    ``s_out`` (the outputs) are allocated unless given (a cached launch plan reuses its own).
    ``pdl``: launched with programmatic dependent launch (module doc; GPU only)."""
    m, k = x.shape
    if q is None:
        q = torch.empty(m, k, dtype=FP8_DTYPE, device=x.device)
    if scheme is Scheme.PER_TENSOR:
        if static_scale is None:
            raise ValueError("the one-launch per-tensor quant needs a static scale")
        s = static_scale.float().reshape(()).contiguous()
        group, grid = 2048, (m, triton.cdiv(k, 2048))
        static, s_out, stride_s = True, s, 0
    else:
        group = BLOCK if scheme is Scheme.BLOCK128 else k
        ng = triton.cdiv(k, group)
        if s_out is None:
            s_out = torch.empty(m, ng, dtype=torch.float32, device=x.device)
        grid, static, s, stride_s = (m, ng), False, s_out, ng
    args = (x, q, s_out, s, k, x.stride(0), q.stride(0), stride_s)
    pdl = pdl and os.environ.get("TRITON_INTERPRET") != "1"
    # PDL always passed: a launch plan binds every parameter by name (nn/plan.py)
    block_g = triton.next_power_of_2(group)
    kwargs = {"GROUP": group, "BLOCK_G": block_g, "STATIC": static,
              "FMAX": FP8_MAX, "SMIN": MIN_SCALE, "PDL": pdl,
              # a token's row: ~64 elements a thread (4 to 16 warps); a 1x128 group: one
              # warp, so its amax is a warp shuffle, no block-wide barrier
              "num_warps": 1 if block_g <= 128 else min(16, max(4, block_g // 2048))}
    if pdl:
        kwargs["launch_pdl"] = True
    if scheme is Scheme.PER_TENSOR:
        scale = s
    elif scheme is Scheme.CHANNEL_TOKEN:
        scale = s_out.reshape(m)
    else:
        scale = s_out
    return grid, args, kwargs, q, scale


def quantize(
    x: torch.Tensor, scheme: Scheme, static_scale: torch.Tensor | None = None, pdl: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) bf16/fp16/fp32 -> (FP8 (M, K), scale) in one launch (``pdl``: see the module doc).

    Scale shapes: per_tensor () (static only: a dynamic per-tensor scale needs a global
    reduction, see act_quant.quantize), channel_token (M,), block128 (M, ceil(K/128)).
    """
    grid, args, kwargs, q, scale = quantize_args(x.contiguous(), scheme, static_scale, pdl=pdl)
    _fp8_act_quant_kernel[grid](*args, **kwargs)
    return q, scale
