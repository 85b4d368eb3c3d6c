"""FP8 decode GEMM (Triton): y (M, N) = x (M, K) @ W (N, K).T, W in FP8.

Swap-AB: each program owns BLOCK_N output channels of W (the MMA's wide side) and all M
tokens padded to BLOCK_M >= 16 (its narrow side), so W is streamed once per call. Split-K
(grid axis 1) fills the 132 SMs when N / BLOCK_N alone cannot.

Schemes (SCHEME constexpr):
  0 per_tensor     bf16/fp16 x quantized in-kernel with the static scale (or FP8 x given)
  1 channel_token  FP8 x from a per-token pre-pass, (M,) scales; (N,) weight scales; or
                   (not X_FP8: config "fused_amax") bf16 x whose per-token amax each program
                   takes over all of K itself first: the pre-pass's scales, bit for bit
  2 block128       bf16 x quantized in-kernel per 1x128 group (amax is local to the tile),
                   or FP8 x from the pre-pass ("prequant"); per-128x128-block weight scales
                   applied per 128-wide K step
  3 weight_only    bf16 x, W upcast to x's dtype in registers (or WO_MODE 1 / 2 below);
                   or ("prequant", X_FP8) x split exactly by the pre-pass into two FP8 rows
                   a token with power-of-two scales per 1x128 group: FP8 MMAs on block128's
                   path, the two rows summed in the epilogue; or (WO_MODE 3) with one scale
                   a row: the plain path, channel_token's epilogue; or (WO_MODE 4, M = 1)
                   that per-token split in the GEMM, the two parts as the tile's first two
                   rows, the pre-pass's bits; (N,) weight scales. Its K loop sums raw e4m3
                   weights (|w| <= 448) times x, the scales applied after it: where x is
                   not quantized, fp32 overflows from |x| ~ 1e35 where the reference stays
                   finite (2026-12-05 audit); not refused (checking would read x)
Every scheme takes an (N,) weight-scale vector (a per-tensor scale is expanded at prepare),
so merged shards keep their own scales exactly.

W layout (PACKED constexpr): row-major (N, K), or tile-major (kernels/layout.tile_major for
this BLOCK_N x BLOCK_K: each tile one contiguous, zero-padded run, loaded without masks).

Split-K is deterministic: each split stores its fp32 partial, bumps a per-tile counter, and
the last one to arrive sums the partials in split order, writes y and resets the counter to
zero (no zeroing launch; the counters start zeroed once, at prepare).

Hiding the kernel boundary (PREFETCH, PDL constexprs; launched with ``launch_pdl``): the
weights never depend on the previous kernel, only x (and its scales) do. So a program first
lets the next kernel launch (``gdc_launch_dependents``), then asks L2 for its first PREFETCH
W tiles (one ``prefetch.global.L2`` per 128-byte line), and only then waits for the previous
kernel (``gdc_wait``) before the pipelined loop reads x. Every read of x / scales and every
write (y, partials, counters) comes after the wait, so the overlap is safe after any kernel;
after a kernel launched without PDL the wait returns at once. Calibration (H200, 2026-11-30):
waiting at the start without the prefetch made GEMV-like chains slower.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

# INTERPRET: the CPU interpreter's bf16 tl.dot is wrong (2026-11-29, triton 3.9: a 16x16x16
# bf16 dot was off by 2.7e10), so under TRITON_INTERPRET=1 weight_only dots run in fp32 (exact
# for these operands); on the GPU they run in bf16/fp16 on the tensor cores.


@triton.jit
def _load_x_tile(x_ptr, stride_xm, offs_m, offs_k, M, K):
    mask = (offs_m[:, None] < M) & (offs_k[None, :] < K)
    return tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=mask, other=0.0)


@triton.jit
def _load_w_tile(w_ptr, stride_wn, offs_n, offs_k, N, K, EVEN_N: tl.constexpr,
                 EVEN_K: tl.constexpr):
    ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
    if EVEN_N and EVEN_K:
        return tl.load(ptrs)
    if EVEN_K:
        return tl.load(ptrs, mask=(offs_n < N)[:, None], other=0.0)
    return tl.load(ptrs, mask=(offs_n[:, None] < N) & (offs_k[None, :] < K), other=0.0)


@triton.jit
def _load_w_packed(w_ptr, stride_wn, pid_n, k0, kk, WIDTH: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    """W[pid_n's rows, k0 + kk : k0 + kk + WIDTH] from the tile-major layout (layout.py):
    tile (pid_n, k0 / BLOCK_K) is BLOCK_N x BLOCK_K contiguous bytes, zero-padded, so no mask.
    stride_wn: the bytes of one row of tiles (cdiv(K, BLOCK_K) tiles)."""
    base = w_ptr + pid_n * stride_wn + (k0 // BLOCK_K) * (BLOCK_N * BLOCK_K) + kk
    return tl.load(base + tl.arange(0, BLOCK_N)[:, None] * BLOCK_K + tl.arange(0, WIDTH)[None, :])


@triton.jit
def _prefetch_w_l2_packed(w_ptr, stride_wn, pid_n, k_start, SPAN: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """_prefetch_w_l2 for the tile-major layout: the SPAN / BLOCK_K tiles from k_start, one
    contiguous run, one prefetch per 128-byte line (kept inside this row of tiles)."""
    lines = tl.arange(0, BLOCK_N)[:, None] * (SPAN // 128) + tl.arange(0, SPAN // 128)[None, :]
    off = tl.minimum((k_start // BLOCK_K) * (BLOCK_N * BLOCK_K) + lines * 128, stride_wn - 1)
    ptrs = w_ptr + pid_n * stride_wn + off
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _prefetch_w_l2(w_ptr, stride_wn, offs_n, k_start, k_end, N, SPAN: tl.constexpr):
    """Ask L2 for W[offs_n, k_start : k_start + SPAN], one prefetch per 128-byte line
    (addresses clamped into the tensor: a prefetch is a hint, but stay in bounds)."""
    rows = tl.minimum(offs_n, N - 1)
    cols = tl.minimum(k_start + tl.arange(0, SPAN // 128) * 128, k_end - 1)
    ptrs = w_ptr + rows[:, None] * stride_wn + cols[None, :]
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _div_by_scale(x, s, r):
    """x / s rounded to nearest fp32, as ``div_rn`` gives it, from r = 1 / s (one division per
    scale, not per element): q = x * r, then one FMA correction step (the same refinement the
    GPU's own div.rn fast path ends with): three instructions instead of a division.
    Non-finite operands (the correction alone would make them NaN): x is first clamped to
    +-1024 s (NaN kept), past which x / s saturates to +-448 either way, so an inf in x gives
    +-448 as the reference does, not inf - inf; an inf scale (r = 0) corrects with s = 0,
    which keeps q = x * 0 (x / inf). Static scales above 3e35 (1024 s overflows) would give
    NaN for an inf x: formats.ACT_SCALE_MAX refuses them; a subnormal one makes r inf and
    q NaN, zeros too: formats.ACT_SCALE_MIN refuses them. One min an element: the per-token
    pre-pass is latency-bound (one program a token), and with two selects an element instead
    the 27B tower's channel_token step ran 1.9% slower; this way 0.7% at M = 1, 1.5% at M = 8
    (H200 2026-12-01,
    results/nonfinite_H200_2026-12-01/ call3, call4; sm_90 SASS of that pass at K = 5120:
    576 instructions before, 632 now, 832 with a select on the result)."""
    big = s * 1024.0
    xc = tl.clamp(x, -big, big, propagate_nan=tl.PropagateNan.ALL)
    q = xc * r
    return tl.fma(tl.fma(-q, tl.where(r == 0.0, 0.0, s), xc), r, q)


@triton.jit
def _saturate(q, FMAX: tl.constexpr):
    """q clamped to [-FMAX, FMAX] for the FP8 cast, a NaN kept NaN (a plain clamp returns a
    bound for it, so a NaN in x would give a finite output row; the reference keeps it)."""
    return tl.clamp(q, -FMAX, FMAX, propagate_nan=tl.PropagateNan.ALL)


# weight_only's GEMM-only variants (WO_MODE constexpr; 0 = W upcast to x's dtype; the default
# up to M = 32 is x split by the pre-pass, configs.WO_SPLIT_MAX_M). sm_90 has
# no e4m3 -> bf16 conversion: mode 0 compiles to cvt.rn.f16x2.e4m3x2 then one cvt.bf16.f16
# per element (kernels/offline.py). Both variants scale each K step's x tile per token by a
# power of two (exact) and undo it on the fp32 partial, so x's bf16 range always fits.
@triton.jit
def _pow2_scales(amax, TOP: tl.constexpr, E_MIN: tl.constexpr):
    """(down, up) for fp32 amax (any shape): powers of two with amax * down in
    [2^TOP, 2^(TOP+1)) and up = 1 / down; the biased exponent is clamped to >= E_MIN (all-zero
    or tiny rows: both normal for E_MIN >= TOP + 1). A non-finite amax gives up = NaN: the
    FP8 casts of the split (``_split8_parts``) would saturate an inf to a finite value."""
    e_raw = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF  # biased exponent of amax
    e = tl.minimum(tl.maximum(e_raw, E_MIN), 254)
    down = ((254 + TOP - e) << 23).to(tl.float32, bitcast=True)  # 2^(127 + TOP - e)
    up = ((e - TOP) << 23).to(tl.float32, bitcast=True)  # 2^(e - 127 - TOP)
    return down, tl.where(e_raw == 255, float("nan"), up)


@triton.jit
def _pow2_row_scales(x, TOP: tl.constexpr):
    """_pow2_scales per row of the fp32 tile x (exponent clamped to >= TOP + 1)."""
    return _pow2_scales(tl.max(tl.abs(x), axis=1), TOP, TOP + 1)


@triton.jit
def _wo_f16_step(w, x, INTERPRET: tl.constexpr):
    """WO_MODE 1: one fp16 MMA. W -> fp16 is exact (every e4m3 value is an fp16 value) and
    is one cvt per two elements; x * 2^-s (max in [2^14, 2^15)) -> fp16 is exact for every
    element >= 2^-28 of its row's max (bf16 has 8 significant bits, fp16 11)."""
    xf = x.to(tl.float32)
    down, up = _pow2_row_scales(xf, 14)
    x16 = (xf * down[:, None]).to(tl.float16)
    if INTERPRET:  # the interpreter's half-precision dots are unreliable: same values, fp32
        part = tl.dot(w.to(tl.float32), tl.trans(x16.to(tl.float32)), input_precision="ieee")
    else:
        part = tl.dot(w.to(tl.float16), tl.trans(x16))
    return part * up[None, :]


@triton.jit
def _round_e4m3_emulated(v):
    """Round fp32 v (|v| <= 448) to the nearest-even e4m3 value, in fp32 arithmetic: the
    interpreter's own fp32 -> float8e4nv cast is wrong when rounding carries into the
    exponent."""
    expo = v.to(tl.int32, bitcast=True) & 0x7F800000
    ulp = tl.maximum((expo - (3 << 23)).to(tl.float32, bitcast=True), 0.001953125)  # 2^-9
    t = v / ulp
    t = (t + 12582912.0) - 12582912.0  # round half to even (|t| < 2^22)
    return t * ulp


@triton.jit
def _split8_parts(xs, INTERPRET: tl.constexpr):
    """(q1, q2) in fp32, both e4m3 values, with xs = q1 + q2 / 32 (module doc of
    ``_wo_split8_step`` for when that is exact); |xs| < 256."""
    if INTERPRET:  # the interpreter's fp32 -> e4m3 cast is wrong on carries
        q1 = _round_e4m3_emulated(xs)
        q2 = _round_e4m3_emulated((xs - q1) * 32.0)  # residual <= half an ulp: <= 8 * 32
    else:
        q1 = xs.to(tl.float8e4nv).to(tl.float32)
        q2 = ((xs - q1) * 32.0).to(tl.float8e4nv).to(tl.float32)
    return q1, q2


@triton.jit
def _wo_split8_step(w, x, INTERPRET: tl.constexpr):
    """WO_MODE 2: x = 2^s (q1 + q2 / 32) with q1, q2 FP8 (per token, per K step), two FP8
    MMAs with W straight from shared memory (no upcast at all). Exact for every element
    >= 2^-14 of its row's max in the step (not 2^-15: 2^-8 (1 + 2^-7) under a max of 128
    comes back inexact; 2026-12-05 audit): x * 2^s has 8 significant bits, q1 keeps the
    top 4 (rounded), and the residual is a multiple of x's ulp within half of q1's ulp,
    i.e. j * ulp with |j| <= 8: one more e4m3 value after * 32 (normal or subnormal)."""
    xf = x.to(tl.float32)
    down, up = _pow2_row_scales(xf, 7)  # max |x * down| in [128, 256): inside e4m3's 448
    q1, q2 = _split8_parts(xf * down[:, None], INTERPRET)
    p1 = tl.dot(w, tl.trans(q1.to(w.dtype)))
    p2 = tl.dot(w, tl.trans(q2.to(w.dtype)))
    return (p1 + p2 * 0.03125) * up[None, :]


@triton.jit
def _wo_split8_row1(w, x_ptr, offs_k, k_end, BLOCK_M: tl.constexpr, INTERPRET: tl.constexpr):
    """_wo_split8_step for one token (M = 1): its row split into q1, q2 as a vector and
    broadcast to the MMA's BLOCK_M columns (1/16 of the tile's conversion work). H200
    2026-12-01 (results/tile_major_H200_2026-12-01/call8/): 16384x5120 31.74 -> 27.13 us,
    the merged 27B tower 3.183 -> 2.719 ms/step (retuned; M = 8 unchanged, 3.25)."""
    x1 = tl.load(x_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
    down, up = _pow2_scales(tl.max(tl.abs(x1)), 7, 8)  # as _wo_split8_step
    q1, q2 = _split8_parts(x1 * down, INTERPRET)
    b1 = tl.broadcast_to(q1.to(w.dtype)[None, :], (BLOCK_M, x1.shape[0]))
    b2 = tl.broadcast_to(q2.to(w.dtype)[None, :], (BLOCK_M, x1.shape[0]))
    p1 = tl.dot(w, tl.trans(b1))
    p2 = tl.dot(w, tl.trans(b2))
    return (p1 + p2 * 0.03125) * up


@triton.jit
def _row1_amax(x_ptr, K, AMAX_CHUNKS: tl.constexpr):
    """max |x| of one token's row (M = 1) as AMAX_CHUNKS loads of 8192 elements, all issued
    before the one reduction (an elementwise max between loads needs no barrier, so nothing
    orders them): one L2 round trip, not one per step. fp32 scalar."""
    offs_a = tl.arange(0, 8192)
    xa = tl.abs(tl.load(x_ptr + offs_a, mask=offs_a < K, other=0.0))
    for c in tl.static_range(1, AMAX_CHUNKS):
        o = c * 8192 + offs_a
        xa = tl.maximum(xa, tl.abs(tl.load(x_ptr + o, mask=o < K, other=0.0)))
    return tl.max(xa).to(tl.float32)


@triton.jit
def _rows_amax(x_ptr, stride_xm, offs_m, M, K, ROWS: tl.constexpr, AMAX_CHUNKS: tl.constexpr):
    """max |x| of each of ROWS rows (offs_m; rows >= M give 0), fp32 (ROWS,). AMAX_CHUNKS > 0:
    that many tiles of ROWS x (8192 / ROWS) elements, all unrolled (as many loads in flight as
    registers allow), one reduction at the end; 0 (long rows): steps of two such tiles, one L2
    round trip a step (latency-bound)."""
    AMAX_K: tl.constexpr = 8192 // ROWS
    if AMAX_CHUNKS > 0:
        xa = tl.abs(_load_x_tile(x_ptr, stride_xm, offs_m, tl.arange(0, AMAX_K), M, K))
        for c in tl.static_range(1, AMAX_CHUNKS):
            xa = tl.maximum(xa, tl.abs(_load_x_tile(x_ptr, stride_xm, offs_m,
                                                    c * AMAX_K + tl.arange(0, AMAX_K), M, K)))
        amax = tl.max(xa, axis=1).to(tl.float32)
    else:
        amax = tl.zeros((ROWS,), dtype=tl.float32)
        for ka in range(0, K, 2 * AMAX_K):
            xa = _load_x_tile(x_ptr, stride_xm, offs_m, ka + tl.arange(0, AMAX_K), M, K)
            xb = _load_x_tile(x_ptr, stride_xm, offs_m, ka + AMAX_K + tl.arange(0, AMAX_K), M, K)
            amax = tl.maximum(amax, tl.max(tl.maximum(tl.abs(xa), tl.abs(xb)),
                                           axis=1).to(tl.float32))
    return amax


@triton.jit
def _tile_rows(v, ROWS: tl.constexpr, BLOCK_M: tl.constexpr):
    """The ROWS-long vector v repeated BLOCK_M / ROWS times (element j: v[j % ROWS])."""
    return tl.reshape(tl.broadcast_to(v[None, :], (BLOCK_M // ROWS, ROWS)), (BLOCK_M,))


@triton.jit
def _tile_x(q, ROWS: tl.constexpr, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr):
    """The ROWS x WIDTH tile q stacked BLOCK_M / ROWS times (row j: q's row j % ROWS)."""
    return tl.reshape(tl.broadcast_to(q[None, :, :], (BLOCK_M // ROWS, ROWS, WIDTH)),
                      (BLOCK_M, WIDTH))


@triton.jit
def _group_scales(ws_ptr, xs_ptr, stride_wsn, stride_xsm, pid_n, offs_m, M, kb_k, k_end,
                  BLOCK_N: tl.constexpr, W_BLOCKS: tl.constexpr):
    """The scales of the 128-wide K step at kb_k on FP8 x from the pre-pass: each x row's
    1x128 group's (BLOCK_M,), and (W_BLOCKS, block128) the weight block's, a scalar (else
    1: weight_only scales W per channel in the epilogue); zeros past k_end."""
    xs = tl.load(xs_ptr + offs_m * stride_xsm + kb_k // 128,
                 mask=(offs_m < M) & (offs_m * 0 + kb_k < k_end), other=0.0)
    if W_BLOCKS:
        wsc = tl.load(ws_ptr + (pid_n * BLOCK_N // 128) * stride_wsn + kb_k // 128,
                      mask=kb_k < k_end, other=0.0)
    else:
        wsc = 1.0
    return wsc, xs


# M is not specialized: Triton would otherwise compile one variant for M == 1, one for M % 16
# == 0 and one for the rest, so tuning M = 1, 2, 4, 8, 16 (all BLOCK_M = 16) would compile
# each config three times instead of once. M only masks the small x tile and the output;
# the cost of dropping the M == 1 variant is not yet measured on the H200.
@triton.jit(do_not_specialize=["M"])
def _fp8_gemm_decode_kernel(
    w_ptr, x_ptr, y_ptr, ws_ptr, xs_ptr, bias_ptr, part_ptr, cnt_ptr,
    M, N, K, k_per_split,
    stride_wn, stride_xm, stride_ym, stride_wsn, stride_xsm,
    SCHEME: tl.constexpr, X_FP8: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, FMAX: tl.constexpr, SMIN: tl.constexpr, INTERPRET: tl.constexpr,
    EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
    PREFETCH: tl.constexpr = 0, PDL: tl.constexpr = False, WO_MODE: tl.constexpr = 0,
    AMAX_CHUNKS: tl.constexpr = 0, X_ROW1: tl.constexpr = False, PACKED: tl.constexpr = False,
    X_ROWS: tl.constexpr = 0,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n_mask = offs_n < N
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    if PDL and not INTERPRET:  # the interpreter has no griddepcontrol
        tl.extra.cuda.gdc_launch_dependents()
    if PREFETCH > 0 and not INTERPRET:
        # W only (independent of the previous kernel): its first PREFETCH tiles, into L2.
        if PACKED:
            _prefetch_w_l2_packed(w_ptr, stride_wn, pid_n, k_start, PREFETCH * BLOCK_K,
                                  BLOCK_N, BLOCK_K)
        else:
            _prefetch_w_l2(w_ptr, stride_wn, offs_n, k_start, k_end, N, PREFETCH * BLOCK_K)
    if PDL and not INTERPRET:
        tl.extra.cuda.gdc_wait()  # x, its scales, y and the partials: only from here on

    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if SCHEME == 0 and not X_FP8:
        # x / s with div_rn's bits, as the reference and the pre-pass divide: one exact
        # reciprocal per program, an FMA correction per element (_div_by_scale). The plain
        # x * (1.0 / s) was not: triton lowers fp32 `/` to div.full.f32 (approximate; sm_90
        # PTX, triton 3.6), and even an exact 1 / s leaves x * r 1 ulp off x / s, which moves
        # ties of the FP8 rounding (tests/test_backends.py, tests/test_gpu_plan.py).
        q_scale = tl.load(xs_ptr)
        q_inv = tl.math.div_rn(tl.full([], 1.0, tl.float32), q_scale)
    if SCHEME == 1 and not X_FP8:  # fused_amax: each token's scale over ALL of K (every
        # split reads the whole row: M * K * 2 bytes from L2), as the pre-pass computes it.
        if AMAX_CHUNKS > 0 and X_ROW1:  # one token (M = 1): its row in one L2 round trip
            amax = tl.zeros((BLOCK_M,), dtype=tl.float32) + _row1_amax(x_ptr, K, AMAX_CHUNKS)
        elif X_ROWS > 0:  # 2-4 tokens: their X_ROWS rows, the scales tiled as x is (below)
            amax = _rows_amax(x_ptr, stride_xm, tl.arange(0, X_ROWS), M, K, X_ROWS,
                              AMAX_CHUNKS)
        else:
            amax = _rows_amax(x_ptr, stride_xm, offs_m, M, K, BLOCK_M, AMAX_CHUNKS)
        tok_scale = tl.maximum(tl.math.div_rn(amax, FMAX), SMIN)
        tok_inv = tl.math.div_rn(tl.zeros_like(tok_scale) + 1.0, tok_scale)
        if X_ROW1:  # every row holds token 0's values
            tok_scale1 = tl.max(tok_scale)
            tok_inv1 = tl.max(tok_inv)
        if X_ROWS > 0:  # the K loop's (X_ROWS,); the epilogue's tiled to the MMA's columns
            tok_scale_r, tok_inv_r = tok_scale, tok_inv
            tok_scale = _tile_rows(tok_scale_r, X_ROWS, BLOCK_M)

    WO_ROW1: tl.constexpr = SCHEME == 3 and WO_MODE == 4 and X_ROW1
    if WO_ROW1:  # weight_only's per-token split in the GEMM, one token: its row's scale first
        wo_down, wo_up = _pow2_scales(_row1_amax(x_ptr, K, AMAX_CHUNKS), 7, 13)

    # The epilogue's scales, loaded before the K loop (after the wait: xs may come from the
    # previous kernel) so that their round trip overlaps the loop; issued after it (as the
    # PTX had them), every program's tail waited for it, the weight scales as cold as the
    # weights. H200 2026-12-01, the merged 27B tower at the same cached configs, ms/step
    # before -> after (results/pf_ratios_H200_2026-12-01/call5/): per_tensor M=1 2.217 ->
    # 2.190, M=8 2.236 -> 2.211; channel_token 2.289 -> 2.251, 2.376 -> 2.341; block128
    # (its scales are per K step) 2.280 both.
    if SCHEME != 2:
        w_sc = tl.load(ws_ptr + offs_n, mask=n_mask, other=0.0)
    if SCHEME == 0:
        x_sc = tl.load(xs_ptr)
    # one scale a row of FP8 x: channel_token's tokens, weight_only's per-token split rows
    ROW_SCALES: tl.constexpr = X_FP8 and (SCHEME == 1 or (SCHEME == 3 and WO_MODE == 3))
    if ROW_SCALES:
        x_sc_m = tl.load(xs_ptr + offs_m * stride_xsm, mask=offs_m < M, other=0.0)
    if HAS_BIAS:  # the same for the bias (its split-K sum only in the last split)
        b_n = tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)

    GROUPED: tl.constexpr = (SCHEME == 2 or (SCHEME == 3 and WO_MODE != 3)) and X_FP8
    if GROUPED:
        # FP8 x with per-(row, 1x128 group) scales from the pre-pass: block128's groups, or
        # weight_only's two parts a token. Each 128-wide step's scales are loaded one step
        # ahead (carried through the loop), so their latency hides behind the step before's
        # MMA. Loaded in the step itself, they sat on its critical path: H200 2026-12-01,
        # block128's pair 8-12% slower at M = 1..32 on the 27B tower's shapes, bits equal
        # (results/b128_scales_H200_2026-12-01/call1/prepass.json).
        wsc_n, xs_n = _group_scales(ws_ptr, xs_ptr, stride_wsn, stride_xsm, pid_n, offs_m, M,
                                    k_start, k_end, BLOCK_N, SCHEME == 2)
    for k0 in range(k_start, k_end, BLOCK_K):
        if GROUPED:
            for kk in tl.static_range(0, BLOCK_K, 128):
                offs_k = k0 + kk + tl.arange(0, 128)
                if PACKED:
                    w = _load_w_packed(w_ptr, stride_wn, pid_n, k0, kk, 128, BLOCK_N, BLOCK_K)
                else:
                    w = _load_w_tile(w_ptr, stride_wn, offs_n, offs_k, N, k_end, EVEN_N, EVEN_K)
                xq = _load_x_tile(x_ptr, stride_xm, offs_m, offs_k, M, k_end)
                wsc, xs = wsc_n, xs_n
                wsc_n, xs_n = _group_scales(ws_ptr, xs_ptr, stride_wsn, stride_xsm, pid_n,
                                            offs_m, M, k0 + kk + 128, k_end, BLOCK_N,
                                            SCHEME == 2)
                part = tl.dot(w, tl.trans(xq))
                acc += part * (wsc * xs[None, :])
        elif SCHEME == 2:
            # One 128-wide step per weight block column: scales are per (n-block, k-block).
            for kk in tl.static_range(0, BLOCK_K, 128):
                offs_k = k0 + kk + tl.arange(0, 128)
                # A step past K (the last BLOCK_K step of a K that is not a multiple of it)
                # has no scale column: its tiles load as zeros, and its scales must not be
                # read out of bounds (0 * NaN garbage is NaN)
                in_k = k0 + kk < k_end
                if PACKED:
                    w = _load_w_packed(w_ptr, stride_wn, pid_n, k0, kk, 128, BLOCK_N, BLOCK_K)
                else:
                    w = _load_w_tile(w_ptr, stride_wn, offs_n, offs_k, N, k_end, EVEN_N, EVEN_K)
                if X_ROW1:  # one token: quantize its row, the MMA takes it 16 times
                    x1 = tl.load(x_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
                    xs1 = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x1)), FMAX), SMIN)
                    q1 = _div_by_scale(x1, xs1, tl.math.div_rn(tl.full([], 1.0, tl.float32), xs1))
                    xq = tl.broadcast_to(_saturate(q1, FMAX).to(w.dtype)[None, :],
                                         (BLOCK_M, 128))
                    xs = tl.zeros((BLOCK_M,), dtype=tl.float32) + xs1
                elif X_ROWS > 0:  # 2-4 tokens: X_ROWS rows quantized, tiled to BLOCK_M
                    xr = _load_x_tile(x_ptr, stride_xm, tl.arange(0, X_ROWS), offs_k, M,
                                      k_end).to(tl.float32)
                    xs_r = tl.maximum(tl.math.div_rn(tl.max(tl.abs(xr), axis=1), FMAX), SMIN)
                    inv_r = tl.math.div_rn(tl.full((X_ROWS,), 1.0, tl.float32), xs_r)
                    q = _saturate(_div_by_scale(xr, xs_r[:, None], inv_r[:, None]), FMAX)
                    xq = _tile_x(q.to(w.dtype), X_ROWS, BLOCK_M, 128)
                    xs = _tile_rows(xs_r, X_ROWS, BLOCK_M)
                else:  # the group amax is local to this 128-wide step: quantize here
                    x = _load_x_tile(x_ptr, stride_xm, offs_m, offs_k, M, k_end).to(tl.float32)
                    xs = tl.maximum(tl.math.div_rn(tl.max(tl.abs(x), axis=1), FMAX), SMIN)
                    xr = tl.math.div_rn(tl.full((BLOCK_M,), 1.0, tl.float32), xs)
                    xq = _saturate(_div_by_scale(x, xs[:, None], xr[:, None]), FMAX)
                    xq = xq.to(w.dtype)
                part = tl.dot(w, tl.trans(xq))
                wsc = tl.load(ws_ptr + (pid_n * BLOCK_N // 128) * stride_wsn + (k0 + kk) // 128,
                              mask=in_k, other=0.0)
                acc += part * (wsc * xs[None, :])
        else:
            offs_k = k0 + tl.arange(0, BLOCK_K)
            if PACKED:
                w = _load_w_packed(w_ptr, stride_wn, pid_n, k0, 0, BLOCK_K, BLOCK_N, BLOCK_K)
            else:
                w = _load_w_tile(w_ptr, stride_wn, offs_n, offs_k, N, k_end, EVEN_N, EVEN_K)
            if X_FP8:  # given or from the pre-pass (not grouped: scales in the epilogue)
                x = _load_x_tile(x_ptr, stride_xm, offs_m, offs_k, M, k_end)
                acc = tl.dot(w, tl.trans(x), acc)
            elif WO_ROW1:  # the per-token split's two parts as the tile's rows 0 and 1
                x1 = tl.load(x_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
                q1, q2 = _split8_parts(x1 * wo_down, INTERPRET)
                xq = tl.where(tl.arange(0, BLOCK_M)[:, None] == 0, q1[None, :], q2[None, :])
                acc = tl.dot(w, tl.trans(xq.to(w.dtype)), acc)
            elif X_ROW1 and SCHEME == 3:  # weight_only WO_MODE 2, one token
                acc += _wo_split8_row1(w, x_ptr, offs_k, k_end, BLOCK_M, INTERPRET)
            elif X_ROW1:  # one token: quantize its row (not a 16-row tile), broadcast it
                x1 = tl.load(x_ptr + offs_k, mask=offs_k < k_end, other=0.0).to(tl.float32)
                if SCHEME == 1:
                    q1 = _div_by_scale(x1, tok_scale1, tok_inv1)
                else:
                    q1 = _div_by_scale(x1, q_scale, q_inv)
                xq = tl.broadcast_to(_saturate(q1, FMAX).to(w.dtype)[None, :],
                                     (BLOCK_M, BLOCK_K))
                acc = tl.dot(w, tl.trans(xq), acc)
            elif X_ROWS > 0:  # 2-8 tokens: X_ROWS rows quantized, tiled to BLOCK_M
                # (M < BLOCK_M: one M tile, pid_m 0, so its rows are 0..X_ROWS-1)
                xr = _load_x_tile(x_ptr, stride_xm, tl.arange(0, X_ROWS), offs_k, M,
                                  k_end).to(tl.float32)
                if SCHEME == 1:
                    q = _div_by_scale(xr, tok_scale_r[:, None], tok_inv_r[:, None])
                else:
                    q = _div_by_scale(xr, q_scale, q_inv)
                xq = _tile_x(_saturate(q, FMAX).to(w.dtype), X_ROWS, BLOCK_M, BLOCK_K)
                acc = tl.dot(w, tl.trans(xq), acc)
            else:
                x = _load_x_tile(x_ptr, stride_xm, offs_m, offs_k, M, k_end)
                if SCHEME == 3 and WO_MODE == 1:
                    acc += _wo_f16_step(w, x, INTERPRET)
                elif SCHEME == 3 and WO_MODE == 2:
                    acc += _wo_split8_step(w, x, INTERPRET)
                elif SCHEME == 3:
                    if (x.dtype == tl.float32) or INTERPRET:
                        acc = tl.dot(w.to(tl.float32), tl.trans(x.to(tl.float32)), acc,
                                     input_precision="ieee")
                    else:
                        acc = tl.dot(w.to(x.dtype), tl.trans(x), acc)
                elif SCHEME == 1:  # fused_amax: quantized as the pre-pass would
                    xq = _saturate(_div_by_scale(x.to(tl.float32), tok_scale[:, None],
                                                 tok_inv[:, None]), FMAX)
                    acc = tl.dot(w, tl.trans(xq.to(w.dtype)), acc)
                else:
                    xq = _saturate(_div_by_scale(x.to(tl.float32), q_scale, q_inv), FMAX)
                    acc = tl.dot(w, tl.trans(xq.to(w.dtype)), acc)

    # Epilogue scales (block128 applied them per K step above).
    if SCHEME != 2:
        acc = acc * w_sc[:, None]
        if SCHEME == 0:
            acc = acc * x_sc
        if ROW_SCALES:
            acc = acc * x_sc_m[None, :]
        if WO_ROW1:  # rows 0 and 1 of the tile: the two parts (the others are dropped)
            cols = tl.arange(0, BLOCK_M)
            acc = acc * tl.where(cols == 0, wo_up, wo_up * 0.03125)[None, :]
        if SCHEME == 1 and not X_FP8:
            acc = acc * tok_scale[None, :]
    if SCHEME == 3 and (X_FP8 or WO_ROW1):
        # weight_only's split x (act_quant._split8_groups, or WO_MODE 4 in the GEMM):
        # rows 2m and 2m + 1 are token m's two parts, already scaled; y's row m is their sum.
        acc = tl.sum(tl.reshape(acc, (BLOCK_N, BLOCK_M // 2, 2)), axis=2)
        offs_m = pid_m * (BLOCK_M // 2) + tl.arange(0, BLOCK_M // 2)
        if X_FP8:
            M = M // 2

    y_ptrs = y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None]
    y_mask = n_mask[:, None] & (offs_m[None, :] < M)
    if SPLIT_K == 1:
        if HAS_BIAS:
            acc += b_n[:, None]
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
    else:
        # Partials laid out [SPLIT_K, M_pad, N]; M_pad = grid_m * BLOCK_M (half of it used
        # after weight_only's pair sums). Only y's rows (y_mask) are stored and summed: at
        # M = 1 the tile has 16 token columns, and the other 15 were 15/16 of the bytes the
        # last split waited for. H200 2026-12-02, the merged 27B tower at the same configs
        # (results/refine_rounds_H200_2026-12-02/call6/ab/): channel_token M = 1 2.252 ->
        # 2.197 ms/step, M = 8 2.337 -> 2.313; block128 M = 1 2.289 -> 2.248.
        m_pad = tl.num_programs(2) * BLOCK_M
        p_ptrs = part_ptr + offs_m[None, :] * N + offs_n[:, None]
        tl.store(p_ptrs + pid_k * m_pad * N, acc, mask=y_mask)
        tl.debug_barrier()
        tile = pid_m * tl.num_programs(0) + pid_n
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros_like(acc)
            for s in range(SPLIT_K):
                total += tl.load(p_ptrs + s * m_pad * N, mask=y_mask, other=0.0,
                                 cache_modifier=".cg")
            if HAS_BIAS:
                total += b_n[:, None]
            tl.store(y_ptrs, total.to(y_ptr.dtype.element_ty), mask=y_mask)
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")


def row1(scheme_id: int, x_fp8: bool, m: int, wo_mode: int = 0) -> bool:
    """The X_ROW1 constexpr: one token (M = 1) whose x the kernel quantizes itself
    (per_tensor, channel_token, block128; weight_only's WO_MODE 2 split). Its row is loaded
    and quantized as a vector and broadcast to the MMA's 16 columns: 1/16 of the conversion
    work of a masked 16-row tile.
    H200 2026-12-01, Nsight Compute, 16384x5120 M=1 (results/ncu_H200_2026-12-01/):
    block128's in-kernel quant issued ~3x the instructions of its pre-pass GEMM and ran
    55.5 us against 27.3; with the row vector 48.2 (latency-bound on its per-group
    reductions: the tuner keeps block128 on the pair). In the retuned 27B tower, M=1:
    per_tensor 2.303 -> 2.290 ms, channel_token 2.403 -> 2.356 (results/row1_H200_*)."""
    return m == 1 and not x_fp8 and (scheme_id in (0, 1, 2)
                                     or (scheme_id == 3 and wo_mode in (2, 4)))


def x_rows(scheme_id: int, x_fp8: bool, m: int, block_m: int) -> int:
    """The X_ROWS constexpr: x quantized in the GEMM at M = 2-8 (per_tensor; channel_token and
    block128 at M = 2-4), its M rows padded to the next power of two (X_ROWS) and tiled
    BLOCK_M / X_ROWS times into the MMA's columns (column j holds token j % X_ROWS; only
    j < M are stored), so the tile converts X_ROWS rows, not BLOCK_M: the row1 idea for a
    few tokens. The per-row scales (channel_token's tokens, block128's groups) are taken
    over the X_ROWS rows and tiled the same way. Each token's column sums the same products
    in the same order: the 16-row tile's bits. 0: the whole tile.
    H100 2026-12-06 (results/session52_2026-12-06/call2/twin.json): per_tensor's 16-row
    conversion made the deep tile quantizing x itself 1.08-2.26x its pre-pass pair's time
    at M = 2-8 on 18 shapes (1.02-1.43x at M = 1, the row vector); with X_ROWS 1.03-2.04x
    (call3).
    H200 2026-12-06, GPU time with X_ROWS / forced to 0, medians over 11-13 shapes
    (results/session53_2026-12-06/ call1/c4, call2; channel_token's and block128's on a
    build that took up to 8 rows, the same X_ROWS at M <= 4): per_tensor's shared default
    0.952 / 0.963 / 0.989 at M = 2 / 4 / 8, the deep tile 0.714 / 0.747 / 0.905;
    channel_token's fused amax on the deep / the shared default tile (BLOCK_K 256, split
    1-10 by shape) 0.627 / 0.716 at M = 2, 0.732 / 0.828 at M = 4, but 0.951 / 1.164 at
    M = 8; block128 (the shared default tile) 0.881 / 0.975 / 1.485. So channel_token and
    block128 take at most 4 rows (SCALED_X_ROWS_MAX): at 8 both lost on the shared default
    tile, worst where it is unsplit. Offline (offline_x_rows.json there: triton 3.9, a
    split-2 build of 9216x4096, a shape not timed), 8 rows hold for block128 120 shuffles
    and 34 divisions against the whole tile's 16 and 8, for channel_token 41 / 23 shared
    stores / loads against 17 / 15."""
    if scheme_id not in (0, 1, 2) or x_fp8 or m < 2:
        return 0
    rows = 1 << (m - 1).bit_length()
    if scheme_id != 0 and rows > SCALED_X_ROWS_MAX:
        return 0
    return rows if rows < block_m else 0


SCALED_X_ROWS_MAX = 4  # X_ROWS of channel_token / block128 (per-row scales; see x_rows)


AMAX_UNROLL_MAX = 16  # tiles of channel_token's unrolled amax (more: the stepped loop)


def amax_chunks(scheme_id: int, x_fp8: bool, m: int, k: int, block_m: int,
                wo_mode: int = 0) -> int:
    """The AMAX_CHUNKS constexpr of channel_token's in-kernel amax: one token (M = 1) in
    cdiv(K, 8192) loads, M tokens in cdiv(K, 8192 / ROWS) tiles (ROWS: X_ROWS, else
    BLOCK_M), all unrolled (up to 16 tiles); 0: the stepped loop (longer rows, other
    schemes, FP8 x given). weight_only's WO_MODE 4 (one token): as channel_token's one
    token."""
    if scheme_id == 3 and wo_mode == 4 and row1(scheme_id, x_fp8, m, wo_mode):
        return -(-k // 8192)
    if scheme_id != 1 or x_fp8:
        return 0
    if row1(scheme_id, x_fp8, m):
        return -(-k // 8192)
    chunks = -(-k // (8192 // (x_rows(scheme_id, x_fp8, m, block_m) or block_m)))
    return chunks if chunks <= AMAX_UNROLL_MAX else 0


def launch_args(
    w, x, y, w_scale, x_scale, bias, part, counters, *, scheme_id: int, x_fp8: bool,
    block_n: int, block_m: int, block_k: int, split_k: int, num_warps: int, num_stages: int,
    ws_row_stride: int = 0, xs_row_stride: int = 0, prefetch: int = 0, pdl: bool = False,
    dummy=None, wo_mode: int = 0, n: int | None = None,
):
    """(grid, args, kwargs) of one launch: ``_fp8_gemm_decode_kernel[grid](*args, **kwargs)``.
    ``dummy``: the tensor passed for unused pointers (default y); a cached launch plan
    passes a fixed one so that only x and y change between its launches. ``n`` given: w is
    tile-major (kernels/layout.tile_major for this BLOCK_N x BLOCK_K), else (N, K) row-major."""
    m, k = x.shape
    packed = n is not None
    n = w.shape[0] if n is None else n
    k_iters = triton.cdiv(k, block_k)
    k_per_split = triton.cdiv(k_iters, split_k) * block_k
    grid = (triton.cdiv(n, block_n), split_k, triton.cdiv(m, block_m))
    dummy = y if dummy is None else dummy  # an unused pointer argument still needs a tensor
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    args = (
        w, x, y, w_scale, x_scale, bias if bias is not None else dummy,
        part if part is not None else dummy, counters if counters is not None else dummy,
        m, n, k, k_per_split,
        triton.cdiv(k, block_k) * block_n * block_k if packed else w.stride(0),
        x.stride(0), y.stride(0), ws_row_stride, xs_row_stride,
    )
    kwargs = {
        "SCHEME": scheme_id, "X_FP8": x_fp8, "HAS_BIAS": bias is not None,
        "BLOCK_N": block_n, "BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT_K": split_k,
        "FMAX": 448.0, "SMIN": 1e-12, "INTERPRET": interpret,
        "EVEN_N": n % block_n == 0, "EVEN_K": k % block_k == 0, "num_warps": num_warps,
        "num_stages": num_stages,
        "PREFETCH": prefetch, "PDL": pdl,
    }
    # Always passed: a launch plan binds every kernel parameter by name for its direct
    # launches (nn/plan.py), and a parameter left to its default would stop that.
    kwargs["WO_MODE"] = wo_mode
    kwargs["AMAX_CHUNKS"] = amax_chunks(scheme_id, x_fp8, m, k, block_m, wo_mode)
    kwargs["X_ROW1"] = row1(scheme_id, x_fp8, m, wo_mode)
    kwargs["PACKED"] = packed
    kwargs["X_ROWS"] = x_rows(scheme_id, x_fp8, m, block_m)
    if pdl and not interpret:
        kwargs["launch_pdl"] = True
    return grid, args, kwargs


def launch(w, x, y, w_scale, x_scale, bias, part, counters, **kw):
    """Launch the kernel. Shapes: w (N, K) FP8, x (M, K), y (M, N); see module docstring."""
    grid, args, kwargs = launch_args(w, x, y, w_scale, x_scale, bias, part, counters, **kw)
    _fp8_gemm_decode_kernel[grid](*args, **kwargs)
    return grid
