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
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BLOCK = 1024  # elements a program: a K = 6144 row is 6 programs


@triton.jit
def _round_bf16_emulated(v):
    """fp32 v rounded to the nearest-even bf16 value, still in fp32 (the CPU interpreter's
    own fp32 -> bf16 cast does not round ties to even); NaN kept."""
    raw = v.to(tl.int32, bitcast=True)
    bits = (raw + 0x7FFF + ((raw >> 16) & 1)) & -65536  # -65536: 0xFFFF0000
    return tl.where((raw & 0x7FFFFFFF) > 0x7F800000, v, bits.to(tl.float32, bitcast=True))


@triton.jit
def _standin_rows_elementwise_add(a_ptr, b_ptr, y_ptr, K, stride_a, stride_b,
                                  BLOCK: tl.constexpr, INTERPRET_BF16: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < K
    a = tl.load(a_ptr + row * stride_a + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + row * stride_b + offs, mask=mask).to(tl.float32)
    y = a + b
    if INTERPRET_BF16:
        y = _round_bf16_emulated(y)
    tl.store(y_ptr + row * K + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def rows_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` for two (M, K) tensors of one dtype whose rows are contiguous (any row
    stride), as a new contiguous tensor."""
    if a.dim() != 2 or a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"rows_add takes two (M, K) tensors of one dtype, got {tuple(a.shape)} "
                         f"{a.dtype} and {tuple(b.shape)} {b.dtype}")
    if a.stride(1) != 1 or b.stride(1) != 1:
        raise ValueError(f"rows_add needs contiguous rows, got strides {a.stride()} and "
                         f"{b.stride()}")
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if a.device.type != "cuda" and not interpreting:
        raise ValueError(f"rows_add runs on CUDA tensors (on the CPU only under "
                         f"TRITON_INTERPRET=1), got {a.device.type} ones")
    m, k = a.shape
    y = torch.empty(m, k, dtype=a.dtype, device=a.device)
    grid = (m, triton.cdiv(k, BLOCK))
    interpret = interpreting and a.dtype == torch.bfloat16
    _standin_rows_elementwise_add[grid](a, b, y, k, a.stride(0), b.stride(0), BLOCK=BLOCK,
                                        INTERPRET_BF16=interpret, num_warps=4)
    return y
