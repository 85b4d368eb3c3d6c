"""The tower's stand-in add (``a + b`` of two row-major slices) as one Triton kernel that reads
each row at its own stride: ``bench tower --standin rows`` / ``trace capture --standin rows``
(:func:`build.standin_kernel`), not the tower's default.

Why: the stand-in's operands are column slices of the GEMM outputs. At M = 1 they are
contiguous and torch runs its vectorized elementwise kernel (1.2 us a call on the H200); from
M = 2 they are strided and torch runs its strided kernel (2.6-2.8 us at M = 8 and 32): 4-5
points of the merged 27B tower's M = 8 / 32 ratios to M = 1 that no GEMM pays (paired traces,
results/m32_gap_H200_2026-12-02/). This kernel reads each row with 16-byte loads wherever
the row stride is a multiple of 8 elements, as the 27B tower's are (sm_90 PTX in
tests/test_offline_sm90.py): what a stride-aware kernel of a real model does. Measured on the
H200 (results/standin_H200_2026-12-04/): 1.19 us a call at M = 1 and 1.35 at M = 32 in the
paired traces (call3/); the tower's step the same as with torch's at M = 1 and 1.0-4.1%
shorter at M = 8, 16 and 32 (call4/, call5/); its output the same bits (call1/). It is
launched without PDL, as a foreign kernel is, and its name matches build.STANDIN_REGEX. The
sum is taken in fp32 and rounded once, as torch's bf16 / fp16 add does: the same bits (a
NaN's payload aside).

``rows_add_fp8`` (``--standin rows_fp8``, per_tensor only) is the producer-fused variant: the
same sum, rounded to bf16 as above, then quantized with the consuming GEMM's static activation
scale in the same kernel, so that GEMM reads FP8 x and no pre-pass runs: what an engine does
when it fuses the FP8 quantization into the kernel that makes a linear's input (vLLM fuses it
into norms, SiLU-and-mul and attention outputs; a static per-tensor scale is what makes that
possible without a reduction over the row). Its bits equal ``act_quant.quantize`` of
``rows_add``'s output (tests/test_tower.py). Launched without PDL, as a foreign producer is.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..formats import FP8_DTYPE, FP8_MAX
from ..kernels.fp8_gemm import _div_by_scale, _saturate

BLOCK = 1024  # elements a program: a K = 6144 row is 6 programs


@triton.jit
def _round_bf16_emulated(v):
    """fp32 v rounded to the nearest-even bf16 value, still in fp32 (the CPU interpreter's
    own fp32 -> bf16 cast does not round ties to even); NaN kept."""
    raw = v.to(tl.int32, bitcast=True)
    bits = (raw + 0x7FFF + ((raw >> 16) & 1)) & -65536  # -65536: 0xFFFF0000
    return tl.where((raw & 0x7FFFFFFF) > 0x7F800000, v, bits.to(tl.float32, bitcast=True))


@triton.jit
def _row_sum(a_ptr, b_ptr, K, stride_a, stride_b, BLOCK: tl.constexpr):
    """This program's (row, offsets, mask, a + b in fp32) of its BLOCK columns."""
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < K
    a = tl.load(a_ptr + row * stride_a + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + row * stride_b + offs, mask=mask).to(tl.float32)
    return row, offs, mask, a + b


@triton.jit
def _standin_rows_elementwise_add(a_ptr, b_ptr, y_ptr, K, stride_a, stride_b,
                                  BLOCK: tl.constexpr, INTERPRET_BF16: tl.constexpr):
    row, offs, mask, y = _row_sum(a_ptr, b_ptr, K, stride_a, stride_b, BLOCK)
    if INTERPRET_BF16:
        y = _round_bf16_emulated(y)
    tl.store(y_ptr + row * K + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _check_rows(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    if a.dim() != 2 or a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"{name} takes two (M, K) tensors of one dtype, got {tuple(a.shape)} "
                         f"{a.dtype} and {tuple(b.shape)} {b.dtype}")
    if a.stride(1) != 1 or b.stride(1) != 1:
        raise ValueError(f"{name} needs contiguous rows, got strides {a.stride()} and "
                         f"{b.stride()}")
    if a.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"{name} runs on CUDA tensors (on the CPU only under "
                         f"TRITON_INTERPRET=1), got {a.device.type} ones")


def rows_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` for two (M, K) tensors of one dtype whose rows are contiguous (any row
    stride), as a new contiguous tensor."""
    _check_rows(a, b, "rows_add")
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    m, k = a.shape
    y = torch.empty(m, k, dtype=a.dtype, device=a.device)
    grid = (m, triton.cdiv(k, BLOCK))
    interpret = interpreting and a.dtype == torch.bfloat16
    _standin_rows_elementwise_add[grid](a, b, y, k, a.stride(0), b.stride(0), BLOCK=BLOCK,
                                        INTERPRET_BF16=interpret, num_warps=4)
    return y


@triton.jit
def _standin_rows_elementwise_add_fp8(a_ptr, b_ptr, q_ptr, s_ptr, K, stride_a, stride_b,
                                      BLOCK: tl.constexpr, FMAX: tl.constexpr,
                                      INTERPRET_BF16: tl.constexpr):
    row, offs, mask, y = _row_sum(a_ptr, b_ptr, K, stride_a, stride_b, BLOCK)
    if INTERPRET_BF16:
        y = _round_bf16_emulated(y)
    else:  # the bf16 value the unfused stand-in stores, which its pre-pass then reads
        y = y.to(tl.bfloat16).to(tl.float32)
    s = tl.load(s_ptr)
    q = _saturate(_div_by_scale(y, s, tl.math.div_rn(tl.full([], 1.0, tl.float32), s)), FMAX)
    tl.store(q_ptr + row * K + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


def rows_add_fp8(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``a + b`` of two (M, K) bf16 tensors with contiguous rows (any row stride), rounded to
    bf16 and quantized to FP8 with the static per-tensor ``scale`` (a one-element float32
    tensor), in one launch: a new contiguous (M, K) float8_e4m3fn tensor, the same bits as
    ``act_quant.quantize(rows_add(a, b), Scheme.PER_TENSOR, scale)``."""
    if a.dtype != torch.bfloat16:
        raise ValueError(f"rows_add_fp8 takes bf16 operands (the bf16 sum is what it "
                         f"quantizes), got {a.dtype}")
    if not (isinstance(scale, torch.Tensor) and scale.numel() == 1
            and scale.dtype == torch.float32 and scale.device == a.device):
        raise ValueError(f"rows_add_fp8's scale must be a one-element float32 tensor on "
                         f"{a.device}, got {scale!r}")
    _check_rows(a, b, "rows_add_fp8")
    m, k = a.shape
    q = torch.empty(m, k, dtype=FP8_DTYPE, device=a.device)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    _standin_rows_elementwise_add_fp8[(m, triton.cdiv(k, BLOCK))](
        a, b, q, scale, k, a.stride(0), b.stride(0), BLOCK=BLOCK, FMAX=FP8_MAX,
        INTERPRET_BF16=interpret, num_warps=4)
    return q
