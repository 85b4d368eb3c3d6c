"""One-launch FP8 activation quantization (Triton): per-tensor static, per-token, 1x128 groups,
and weight_only's exact split of x into two FP8 parts, per 1x128 group or per token
(``_split8_groups``).

Division is IEEE round-to-nearest: one div_rn per scale for its reciprocal r, then x * r
with one FMA correction per element (fp8_gemm._div_by_scale: div_rn's bits), so results
equal formats.quantize_* bit for bit on the GPU (tests/test_gpu_plan.py) and on the
interpreter with grid-exact x (tests/test_act_quant.py); a NaN in x
stays NaN and an inf follows the reference too (fp8_gemm._div_by_scale, _saturate;
tests/test_nonfinite.py). The CPU interpreter's fp32->fp8 cast rounds wrongly when rounding
carries into the exponent: test it there only with values that quantize exactly.

Speed (H200, 2026-12-01): a div_rn per element on 4 warps made the per-token pass (one
program per token) the slow half of channel_token's pre-pass + GEMM pair; with the
reciprocal and more warps a row the pair at 16384x5120 M=8 went from 28.2 to 22.9 us
(per_tensor's GEMM: 23.0; results/amax_unrolled_H200_2026-12-01/ and
results/fast_token_prepass_H200_2026-12-01/, tuning_cache.json of each). A 1x128 group
takes one warp, so its amax is a warp shuffle with no block-wide barrier (the block128
pair 24.64 -> 24.34 us at 16384x5120 M=1; results/b128_one_warp_prepass_H200_2026-12-01/);
above M = 1 a program takes 8 groups, one warp each (b128_groups_per_program).

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
from .fp8_gemm import _div_by_scale, _pow2_scales, _saturate, _split8_parts


@triton.jit
def _split8_groups(x, q_ptr, s_ptr, row, stride_qm, stride_sm, stride_sg, gi, offs, mask,
                   GROUP: tl.constexpr, K, INTERPRET: tl.constexpr):
    """weight_only's x as two FP8 parts per group of GROUP elements (SPLIT8): x = up * (q1 +
    q2 / 32) with up a power of two per group (max |x / up| in [128, 256)), q1 = fp8(x / up)
    and q2 = fp8((x / up - q1) * 32): exact for every element >= 2^-14 of its group's max
    (fp8_gemm._wo_split8_step's argument; tests/test_act_quant.py). Token ``row``'s parts
    go to rows 2 row and 2 row + 1 of q, with scales up and up / 32; a group holding an inf
    gets a NaN scale (an FP8 cast would saturate it to a finite value). The groups are 1x128,
    or (``quantize_args(per_token=True)``, the GEMM's WO_MODE 3) the token's whole row: then
    a smaller element is off by at most 2^-22 of the row's max (q1 by <= 2^-10, e4m3's
    subnormal step being 2^-9, the residual times 32 again by <= 2^-10: 2^-15 in x / up,
    whose max is >= 2^7)."""
    # exponent >= 13: both scales normal (up / 32 >= 2^-126)
    down, up = _pow2_scales(tl.max(tl.abs(x), axis=1), 7, 13)
    q1, q2 = _split8_parts(x * down[:, None], INTERPRET)
    in_k = gi * GROUP < K
    tl.store(s_ptr + (2 * row) * stride_sm + gi * stride_sg, up, mask=in_k)
    tl.store(s_ptr + (2 * row + 1) * stride_sm + gi * stride_sg, up * 0.03125, mask=in_k)
    tl.store(q_ptr + (2 * row) * stride_qm + offs, q1.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(q_ptr + (2 * row + 1) * stride_qm + offs, q2.to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fp8_act_quant_kernel(
    x_ptr, q_ptr, s_ptr, static_ptr, K, stride_xm, stride_qm, stride_sm, stride_sg,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, STATIC: tl.constexpr,
    FMAX: tl.constexpr, SMIN: tl.constexpr, PDL: tl.constexpr = False, GPP: tl.constexpr = 1,
    SPLIT8: tl.constexpr = False, INTERPRET: tl.constexpr = False,
    ROW_SCALES: tl.constexpr = False,
):
    if PDL:  # never under the interpreter (quantize_args): it has no griddepcontrol
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0)
    g = tl.program_id(1)
    if GPP > 1 or SPLIT8:  # GPP groups a program, one per row of a (GPP, BLOCK_G) tile
        gi = g * GPP + tl.arange(0, GPP)
        lane2 = tl.arange(0, BLOCK_G)[None, :]
        offs2 = gi[:, None] * GROUP + lane2
        mask2 = (lane2 < GROUP) & (offs2 < K)
        x2 = tl.load(x_ptr + row * stride_xm + offs2, mask=mask2, other=0.0).to(tl.float32)
        if SPLIT8:
            _split8_groups(x2, q_ptr, s_ptr, row, stride_qm, stride_sm, stride_sg, gi, offs2,
                           mask2, GROUP, K, INTERPRET)
            return
        s2 = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x2), axis=1), FMAX), SMIN)
        tl.store(s_ptr + row * stride_sm + gi * stride_sg, s2, mask=gi * GROUP < K)
        r2 = tl.math.div_rn(tl.full((GPP,), 1.0, tl.float32), s2)
        q2 = _saturate(_div_by_scale(x2, s2[:, None], r2[:, None]), FMAX)
        tl.store(q_ptr + row * stride_qm + offs2, q2.to(q_ptr.dtype.element_ty), mask=mask2)
        return
    lane = tl.arange(0, BLOCK_G)
    offs = g * GROUP + lane
    mask = (lane < GROUP) & (offs < K)
    x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    if STATIC:
        s = tl.load(static_ptr)
        if ROW_SCALES:  # noqa: SIM102 (a constexpr test apart: pruned at compile time)
            if g == 0:
                tl.store(s_ptr + row * stride_sm, s)
    else:
        s = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=0), FMAX), SMIN)
        tl.store(s_ptr + row * stride_sm + g * stride_sg, s)
    q = _saturate(_div_by_scale(x, s, tl.math.div_rn(tl.full([], 1.0, tl.float32), s)), FMAX)
    tl.store(q_ptr + row * stride_qm + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


def b128_groups_per_program(m: int) -> int:
    """block128's 1x128 groups per program (GPP): one at M = 1, eight above. H200
    2026-12-01 (results/b128_scales_H200_2026-12-01/call1/prepass.json, the pre-pass
    alone): K = 6144, M = 32 2.06 -> 1.50 us, K = 17408, M = 32 3.77 -> 1.87 (thousands of
    one-warp programs were the cost); at M = 1, K = 5120 one group a program was the
    fastest (1.19 against 1.35 us)."""
    return 1 if m == 1 else 8


# per_tensor's static quant: elements a program. None: ``per_tensor_group``'s rule; an int
# (check_group) serves every call (a benchmark's knob: bench_gemm.py --prepass-group,
# bench_prepass_group.py). Bits do not depend on it (elementwise).
PER_TENSOR_GROUP: int | None = None
# About this many pre-pass programs: the fewest elements a program (from 2048) that get
# there, up to one program a token's row.
PREPASS_PROGRAMS = 32


def per_tensor_group(m: int, k: int) -> int:
    """Elements a program of per_tensor's pre-pass for an (m, k) x: 2048, doubled (up to
    8192, or one program a row) while the grid holds more than PREPASS_PROGRAMS programs.
    The merged 27B tower (per_tensor, K = 5120 / 6144, session 18's tuned cache; H200
    2026-12-02, results/prepass_group_H200_2026-12-02/call1/, call3/, ms/step against 2048):
    M = 32: 8192 (32 programs) 0.978, 4096 0.986, 1024 1.021, 256 1.040; M = 8: 2048 (24
    programs) best, 4096 1.007, 8192 1.023, 512 1.066; M = 1: 128-8192 within +-1.7%. The
    rule against 2048 (call4/): M = 32 0.980, M = 16 (4096) 1.002; M = 1 and 8 take 2048. Per
    GEMM a wider grid ran faster at M = 1 (the deep pair on 4096x14336: 22.6 / 16.8 us at 2048
    / 256 elements, call7/ of results/deep_default_H200_2026-12-02/), in back-to-back pairs
    only: in the tower 256 lost (1.004 at M = 1, 1.060 at M = 8)."""
    if PER_TENSOR_GROUP is not None:
        return PER_TENSOR_GROUP
    group = 2048
    while group < min(8192, k) and m * -(-k // group) > PREPASS_PROGRAMS:
        group *= 2
    return group


def check_group(group: int) -> int:
    """``group`` if it can be PER_TENSOR_GROUP (a power of two from 128 to 8192 elements a
    program), else a ValueError naming it."""
    if not (isinstance(group, int) and 128 <= group <= 8192 and group & (group - 1) == 0):
        raise ValueError(f"per_tensor's pre-pass group must be a power of two from 128 to 8192 "
                         f"(elements a program), got {group!r}")
    return group


def quantize_args(
    x: torch.Tensor, scheme: Scheme, static_scale: torch.Tensor | None = None,
    q: torch.Tensor | None = None, s_out: torch.Tensor | None = None, pdl: bool = False,
    groups_per_program: int | None = None, per_token: bool = False,
):
    """(grid, args, kwargs, q, scale) of one launch of ``_fp8_act_quant_kernel``; ``q`` and
    ``s_out`` (the outputs) are allocated unless given (a cached launch plan reuses its own),
    with any strides: cuBLASLt's block-wise GEMM reads its 1x128 scales M-major, which the
    kernel then writes in place (no copy launch). per_tensor: ``s_out`` given, an (M, 1)
    buffer, gets the static scale once a row (cuBLASLt's row-wise scale_a, where the weight
    has a scale per channel), again with no launch of its own.
    ``pdl``: launched with programmatic dependent launch (module doc; GPU only).
    ``groups_per_program``: 1x128 groups a program (default b128_groups_per_program).
    weight_only: x split into two FP8 parts a token (``_split8_groups``): q (2M, K), scales
    (2M, ceil(K/128)), rows 2m and 2m + 1 for token m; ``per_token``: one group a token's
    row, scales (2M, 1), one program a token (warps as channel_token's)."""
    m, k = x.shape
    if groups_per_program is not None and (groups_per_program < 1
                                           or groups_per_program & (groups_per_program - 1)):
        raise ValueError(f"groups_per_program must be a power of two, got {groups_per_program}")
    if per_token and scheme is not Scheme.WEIGHT_ONLY:
        raise ValueError(f"per_token splits weight_only's x; {scheme.value} has its own scales")
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    gpp = 1
    split8 = scheme is Scheme.WEIGHT_ONLY  # two FP8 rows a token (_split8_groups)
    if q is None:
        q = torch.empty(2 * m if split8 else m, k, dtype=FP8_DTYPE, device=x.device)
    row_scales = False
    if scheme is Scheme.PER_TENSOR:
        if static_scale is None:
            raise ValueError("the one-launch per-tensor quant needs a static scale")
        s = static_scale.float().reshape(()).contiguous()
        group = per_tensor_group(m, k)
        grid = (m, triton.cdiv(k, group))
        if s_out is not None:
            _check_out("s_out", s_out, (m, 1), torch.float32)
            row_scales, stride_s, stride_sg = True, s_out.stride(0), 0
        else:
            s_out, stride_s, stride_sg = s, 0, 0
        static = True
    else:
        group = k if scheme is Scheme.CHANNEL_TOKEN or per_token else BLOCK
        ng = triton.cdiv(k, group)
        rows = 2 * m if split8 else m
        if s_out is None:
            s_out = torch.empty(rows, ng, dtype=torch.float32, device=x.device)
        _check_out("s_out", s_out, (rows, ng), torch.float32)
        if group == BLOCK:
            gpp = groups_per_program or b128_groups_per_program(m)
            gpp = max(1, min(gpp, triton.next_power_of_2(ng)))
        grid, static, s = (m, triton.cdiv(ng, gpp)), False, s_out
        stride_s, stride_sg = s_out.stride(0), s_out.stride(1)
    _check_out("q", q, (2 * m if split8 else m, k), FP8_DTYPE)
    if q.stride(1) != 1:
        raise ValueError(f"q must have unit stride along K, got strides {tuple(q.stride())}")
    args = (x, q, s_out, s, k, x.stride(0), q.stride(0), stride_s, stride_sg)
    pdl = pdl and not interpret
    # PDL always passed: a launch plan binds every parameter by name (nn/plan.py)
    block_g = triton.next_power_of_2(group)
    kwargs = {"GROUP": group, "BLOCK_G": block_g, "STATIC": static,
              "FMAX": FP8_MAX, "SMIN": MIN_SCALE, "PDL": pdl,
              # per_tensor's groups and a token's row: BLOCK_G / 512 warps, 4 to 16 (16
              # from 4097 elements a program): one program per token is latency-bound;
              # 16 warps against 4 (BLOCK_G / 2048) took the 27B tower's channel_token step
              # at session 12's tuned configs 2.365 -> 2.345 ms at M = 8, 2.274 -> 2.270 at
              # M = 1 (H200 2026-12-01, results/nonfinite_H200_2026-12-01/call5/). A 1x128
              # group: one warp, so its amax is a warp shuffle, no block-wide barrier.
              "num_warps": 1 if block_g <= 128 else min(16, max(4, block_g // 512)),
              "GPP": gpp, "SPLIT8": split8, "INTERPRET": interpret, "ROW_SCALES": row_scales}
    if gpp > 1 or (split8 and not per_token):  # one warp per 1x128 group, up to 8 warps
        kwargs["num_warps"] = min(gpp, 8)
    if pdl:
        kwargs["launch_pdl"] = True
    if scheme is Scheme.PER_TENSOR:
        scale = s_out if row_scales else s
    elif scheme is Scheme.CHANNEL_TOKEN:
        scale = s_out.reshape(m)
    else:
        scale = s_out
    return grid, args, kwargs, q, scale


def _check_out(name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise ValueError(f"{name} must be {dtype} of shape {shape}, got {t.dtype} of shape "
                         f"{tuple(t.shape)}")


def quantize(
    x: torch.Tensor, scheme: Scheme, static_scale: torch.Tensor | None = None, pdl: bool = False,
    per_token: bool = False, q: torch.Tensor | None = None, s_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) bf16/fp16/fp32 -> (FP8 (M, K), scale) in one launch (``pdl``: see the module doc;
    ``q`` / ``s_out``: written in place, see quantize_args).

    Scale shapes: per_tensor () (static only: a dynamic per-tensor scale needs a global
    reduction, see act_quant.quantize), channel_token (M,), block128 (M, ceil(K/128));
    weight_only: FP8 (2M, K) and (2M, ceil(K/128)), two parts a token, or (2M, 1) with
    ``per_token`` (quantize_args).
    """
    grid, args, kwargs, q, scale = quantize_args(x.contiguous(), scheme, static_scale, q=q,
                                                 s_out=s_out, pdl=pdl, per_token=per_token)
    _fp8_act_quant_kernel[grid](*args, **kwargs)
    return q, scale
