"""The Triton GEMM's configs and the sm_90 facts they rest on: the default config, the
search space the tuner walks, the configs it times first (wave_fits), shared-memory and
occupancy estimates. Pure Python: importing this module imports no triton. Used by
backends/triton_gemm.py (which never gets imported from here) and kernels/offline.py.
"""

from __future__ import annotations

import math

import torch

from ..formats import FP8_DTYPE, Scheme
from ..problem import GemmProblem

SCHEME_ID = {  # the kernel's SCHEME constexpr
    Scheme.PER_TENSOR: 0, Scheme.CHANNEL_TOKEN: 1, Scheme.BLOCK128: 2, Scheme.WEIGHT_ONLY: 3,
}
H200_SMS = 132
# sm_90 shared memory per SM, and what each resident program reserves on top of its own.
SMEM_PER_SM, SMEM_RESERVED_PER_PROGRAM = 233_472, 1024


# weight_only's split x (two FP8 rows a token) in one tile up to M = 64: with two 64-row
# tiles the grid streams W twice from HBM (pid_m is the slowest grid axis): 16384x5120 at
# M = 64 ran 64.3 us, block128's pair (64 rows, one tile) 26.7 (H200 2026-12-01,
# results/cutlass_blockwise_H200_2026-12-01/call1/prepass.json). One 128-row tile builds for
# sm_90 without spills: 255 registers, 149 KB shared at 3 stages (kernels/offline.py).
SPLIT_BLOCK_M_MAX = 128


def block_m_for(m: int, split: bool = False) -> int:
    """All M rows in one tile (W streamed once), >= 16 for the MMA's narrow side; at most 64,
    or SPLIT_BLOCK_M_MAX for weight_only's split x (``split``: m counts its 2M rows)."""
    return min(max(16, 1 << (m - 1).bit_length()), SPLIT_BLOCK_M_MAX if split else 64)


# Shared memory per SM on sm_90 is 228 KB (232,448 B usable per block, seen in
# OutOfResources messages on the H200); leave room for the epilogue/reduction scratch.
SMEM_BUDGET = 200_000
_TARGET_PROGRAMS = 2 * H200_SMS  # two resident programs per SM for the default tiles


def smem_bytes(cfg: dict, block_m: int, x_itemsize: int = 2) -> int:
    """Pipelined shared memory of one program: W tile (FP8) + x tile, per stage."""
    per_stage = cfg["block_n"] * cfg["block_k"] + block_m * cfg["block_k"] * x_itemsize
    return cfg["num_stages"] * per_stage


def fit_stages(cfg: dict, block_m: int, x_itemsize: int = 2, min_stages: int = 2) -> dict:
    """A copy of ``cfg`` on fewer stages, not below ``min_stages``, until ``smem_bytes`` fits
    SMEM_BUDGET (it may still not fit at ``min_stages``: callers that care check)."""
    out = dict(cfg)
    while out["num_stages"] > min_stages and smem_bytes(out, block_m, x_itemsize) > SMEM_BUDGET:
        out["num_stages"] -= 1
    return out


# What a split-K costs and what an unsplit program streams, fitted to two runs (H200
# 2026-12-01, per_tensor M = 1, results/split_k_H200_2026-12-01/call2-3/split.json, the
# default tile BLOCK_N 64 x BLOCK_K 256): a split GEMM took bytes / ceiling + 4.6 us (4.5-4.8
# on six shapes; 1024x5120 5.5), the same tile unsplit max(bytes / (programs x 40.8 GB/s),
# bytes / (0.92 x ceiling)) + 2.9 us (9.08-12.57 us where programs stream slower than HBM;
# 128 programs reached 0.92 of the ceiling on 8192x28672, 58.59 us). The 1.7 us between them
# was the reduction: the same grid with every split storing straight into y ran 1.6-2.2 us
# faster than the reduced one. Since the partials hold y's rows only (fp8_gemm.py, session
# 16) it costs 1.26-1.64 us at M = 1 (5120x6144, 4096x4096, 1024x5120) and a split GEMM
# bytes / ceiling + 4.3-4.9 us (H200 2026-12-02, results/prefetch_depth_H200_2026-12-02/
# call1/split.json); at 1.4 us the rule's choice is the same on all 29 tower and family
# shapes of benchmarks/bench_gemm.py (it split the same K at 1.7).
UNSPLIT_PROGRAM_GBPS = 40.8
UNSPLIT_HBM_SHARE = 0.92
SPLIT_REDUCTION_US = 1.4
_READ_GBPS = 4500.0  # the H200's measured read ceiling (4.45-4.56 TB/s in these runs)


def unsplit_pays(p: GemmProblem, tiles: int) -> bool:
    """Whether ``tiles`` unsplit 64 x 256 programs stream ``p``'s weights no more than
    SPLIT_REDUCTION_US slower than a split grid does (the model above). Measured, unsplit /
    split: 8192x8192 19.58 / 19.94 us, 8192x3584 9.98 / 10.79, 6144x5120 11.57 / 11.98,
    5120x2048 6.14 / 7.16, 8192x1024 4.98 / 6.27; split: 5120x6144 (80 programs: 12.57 /
    11.62), 4096x4096 (9.16 / 8.28), 8192x28672 (58.66 / 57.61)."""
    bytes_, hbm_us = p.weight_bytes(), p.weight_bytes() / (_READ_GBPS * 1e3)
    unsplit_us = max(bytes_ / (tiles * UNSPLIT_PROGRAM_GBPS * 1e3), hbm_us / UNSPLIT_HBM_SHARE)
    return unsplit_us - hbm_us <= SPLIT_REDUCTION_US


def min_split_steps(p: GemmProblem) -> int:
    """K steps a split takes at least: 2, and 4 at M >= 64, where the partials of 64 rows
    made a split of 2-3 steps lose to one of 4 (H200 2026-12-02, results/
    prepass_group_H200_2026-12-02/call3-5/, BLOCK_N 64 x BLOCK_K 256, M = 64, us, new / old
    split): block128 1280x8192 15.43 / 17.91 (split 8 / 13; cuBLASLt 17.32), 2048x4096 11.94 /
    13.24, 1024x5120 11.52 / 12.76, 1024x4096 11.42 / 11.47, 5120x2048 11.36 / 11.55;
    channel_token 13.43 / 16.43, 9.61 / 12.62, 10.09 / 12.59, 9.05 / 10.52, 9.05 / 10.03;
    weight_only 13.78 / 19.42, 10.64 / 15.10, 10.36 / 10.81, 9.76 / 9.77, 8192x1024 7.20 /
    12.57, but 5120x2048 15.91 / 14.62 (its one loss, call5/); per_tensor's default
    1.14-1.32x faster on all five (cuBLASLt serves them untuned). At M = 32 not so: block128
    1024x4096 split 8 / 4 7.80 / 8.20."""
    return 4 if p.m >= 64 else 2


def balanced_split(p: GemmProblem, block_n: int, block_k: int) -> int:
    """Split-K to about two programs per SM (at least ``min_split_steps`` K steps a split, at
    most 16 splits)."""
    tiles = -(-p.n // block_n) * -(-p.m // block_m_for(p.m))
    k_iters = -(-p.k // block_k)
    return int(max(1, min(round(_TARGET_PROGRAMS / tiles), k_iters // min_split_steps(p), 16)))


def _split_for(p: GemmProblem, block_n: int, block_k: int) -> int:
    """Split-K to about two programs per SM, or none where the unsplit grid streams about
    as fast as the split one reduces (``unsplit_pays``; per_tensor at M = 1, this tile, up to
    one program per SM: where it was measured. Elsewhere an unsplit program streams slower:
    block128 8192x28672 57.6 -> 67.7 us at M = 1, channel_token 8192x8192 20.7 -> 27.9 at
    M = 16, per_tensor 8192x28672 59.1 -> 60.8 at M = 16; results/split_k_H200_2026-12-01/
    call3/untuned.json against call1's)."""
    tiles = -(-p.n // block_n) * -(-p.m // block_m_for(p.m))
    split = balanced_split(p, block_n, block_k)
    if (split > 1 and p.m == 1 and p.scheme is Scheme.PER_TENSOR and tiles <= H200_SMS
            and (block_n, block_k) == (64, 256) and unsplit_pays(p, tiles)):
        return 1
    return split


# weight_only's x split by the pre-pass into two FP8 rows a token (act_quant._split8_groups,
# the GEMM on block128's grouped path) against WO_MODE 2 (the split in the GEMM) and the
# upcast: faster on every 27B tower shape at M = 1, 8, 16, 32 (H200 2026-12-01,
# results/b128_scales_H200_2026-12-01/call3/prepass.json "wo", default tiles, PDL pair):
# 16384x5120 26.44 -> 22.73 us (M = 1), 31.59 -> 23.37 (M = 8), 43.38 -> 33.95 (M = 32);
# 5120x6144 14.48 -> 11.59 (M = 1). At M = 64, in one 128-row tile (SPLIT_BLOCK_M_MAX), 4
# stages (_tile_default): 16384x5120 67.55 -> 47.90, 12288x5120 69.15 -> 47.12, 5120x6144
# 34.25 -> 26.71, 1024x5120 16.66 -> 15.26 (results/split_k_H200_2026-12-01/call2/prepass.json).
WO_SPLIT_MAX_M = 64
# ... and from M = 16 with one scale a token (wo_mode 3, act_quant._split8_groups over the
# token's row: the GEMM on the plain path, the scales in its epilogue) rather than per 1x128
# group. The default against its per-token twin, the tuner's chain, one run each (H200 2026-12-04,
# results/wo_token_H200_2026-12-04/call2/default_{tower,families}.json, 30 shapes of the
# 27B tower and other families): M = 64 1.11-1.77x (median 1.45-1.52), M = 32 1.04-1.41x
# (1.15-1.17), M = 16 0.973-1.15x (1.03-1.04; slower on 1024x5120 0.973, 5120x17408 0.979,
# 1024x4096 0.981, 2048x4096 0.988). Below M = 16 mixed (call1/wo_twins.json, call8/: medians
# 1.005-1.019x, 0.954-0.986x on long K, 5120x17408 / 5120x25600 / 8192x28672 / 4096x14336).
WO_TOKEN_MIN_M = 16


def _prequant_default(p: GemmProblem) -> bool:
    """Quantize x in a pre-pass launch rather than in the GEMM. block128: always (see the
    module doc); weight_only up to WO_SPLIT_MAX_M (its two-part split, above). per_tensor
    at M >= 32: in the H200 tuning evidence (2026-11-29, same tile both ways;
    benchmarks/results/tuning_cache_evidence_H200_2026-11-29.json) the
    pre-pass was 1.14-1.33x faster at M = 32 on the four >= 25 MB shapes where both were
    timed (12288x5120: 22.2 vs 29.5 us; 1024x5120 lost, 11.8 vs 10.5 us), while at M <= 16
    fused was as fast or faster on 7-8 of 10 shapes. M = 64 follows M = 32 untimed: the
    fused default lost to cuBLASLt by > 2x there, so the tuner pruned Triton."""
    if p.scheme is Scheme.WEIGHT_ONLY:
        return p.m <= WO_SPLIT_MAX_M and splits_x_exactly(p)
    return p.scheme is Scheme.BLOCK128 or (p.scheme is Scheme.PER_TENSOR and p.m >= 32)


def splits_x_exactly(p: GemmProblem) -> bool:
    """weight_only's x split into two FP8 parts (the pre-pass, wo_mode 2 / 3 / 4) holds 8
    significant bits: bf16's. fp16 or fp32 x would come out rounded to bf16 (62-69 dB
    against the float64 reference where W upcast gives 133-141, CPU interpreter, 2026-12-04;
    tests/test_split_x_dtypes.py holds the default above 120 dB), so those take W upcast."""
    return p.act_dtype == torch.bfloat16


# A pre-pass + GEMM pair launched with PDL (kernels/act_quant.py, kernels/fp8_gemm.py): the
# pre-pass lets the GEMM launch at once, the GEMM asks L2 for its first W tile and waits
# for q. H200, 2026-12-01 (results/variants_q_pdl_H200_2026-12-01.json, 27B tower shapes,
# M = 1 and 8, cold L2, CUDA graph): 35 of 36 channel_token / block128 GEMMs faster than the
# plain pair, by up to 1.9 us (block128 1024x5120: 8.6 -> 6.9 us), the other 4% slower
# (channel_token 12288x5120 M=1); the tower-like chain 4.4% (channel_token) and 5.1%
# (block128) faster, 4.7% and 2.7% with an elementwise kernel between GEMMs. The 27B tower,
# retuned: channel_token 3.019 -> 2.820 ms/step at M=1, block128 2.617 -> 2.524
# (results/tower_qwen3.5-27b_pdl_pairs_*). A GEMM alone, launched with PDL after a kernel
# that is not, lost up to 3% (results/chain_pdl_prefetch_H200_2026-11-30.json) while that
# kernel held it back to its own end; with early launch (graph_edges.py) it need not, so a
# single GEMM launch may take it too (the search space, below). The defaults keep it for
# pairs only.
# How many W tiles to ask of L2 before the wait, now that graphs launch PDL kernels early:
# the merged 27B tower at the same tuned configs, prefetch 1 tile against 2, one run (H200
# 2026-12-02, results/prefetch_depth_H200_2026-12-02/call4/, ms/step): 0.991-0.997 for every
# W8A8 scheme at M = 1 and 8 but per_tensor M = 1 (1.002; 0.990 in call 3), per_tensor and
# channel_token 0.994-0.999 at M = 16 and 32, block128 1.001 / 1.004 there; deeper was
# slower at every (scheme, M = 1, 8): 4 tiles 1.007-1.043, 8 1.055-1.103, the whole K range
# 1.156-1.214 (call2/); none at all: 1.007 / 1.011 (per_tensor / channel_token, M = 1, call3/).
PDL_PAIR = {"pdl": True, "prefetch": 1}


def with_pdl_pair(p: GemmProblem, cfg: dict) -> dict:
    """``cfg`` with ``PDL_PAIR`` where it runs a pre-pass launch (not for FP8 x given)."""
    if p.act_dtype == FP8_DTYPE or not x_is_fp8(p.scheme, False, cfg):
        return cfg
    return {**cfg, **PDL_PAIR}


def _tile_default(p: GemmProblem) -> dict:
    """A sensible config without tuning. From the H200 sweep (2026-11-29,
    benchmarks/sweep_triton.py): BLOCK_N 64 x BLOCK_K 256 with split-K sized to ~2 programs
    per SM won at M = 1..32 on every tower shape. Fewer stages where 4 would not fit, or
    (W8A8) would leave room for only one program per SM: at M = 64 four stages need 129 KB
    (sm_90 build, kernels/offline.py), and this default is sized for two."""
    cfg = {"block_n": 64, "block_k": 256, "split_k": _split_for(p, 64, 256),
           "num_warps": 4, "num_stages": 4, "prequant": _prequant_default(p)}
    if p.scheme is Scheme.CHANNEL_TOKEN and p.m <= FUSED_AMAX_MAX_M and p.act_dtype != FP8_DTYPE:
        cfg["fused_amax"] = True  # one launch (see FUSED_AMAX_MAX_M)
    upcast = p.scheme is Scheme.WEIGHT_ONLY and not cfg["prequant"]  # compiles smaller
    # weight_only's 128-row split tile (M > 32) ran faster on 4 stages, one program an SM,
    # than on 2 stages, two: 16384x5120 47.90 / 50.95 us, 14336x5120 47.57 / 50.49,
    # 12288x5120 47.12 / 48.47, 5120x6144 26.71 / 27.14; 1024x5120 15.26 / 14.14
    # (results/split_k_H200_2026-12-01/call2/prepass.json "split_pdl" / "split_pdl_s2").
    if p.scheme is Scheme.WEIGHT_ONLY and cfg["prequant"] and p.m >= WO_TOKEN_MIN_M:
        cfg["wo_mode"] = 3  # x split per token (WO_TOKEN_MIN_M)
    one_program = p.scheme is Scheme.WEIGHT_ONLY and cfg["prequant"] and p.m > 32
    while cfg["num_stages"] > 2 and (
        smem_bytes(cfg, block_m_for(p.m)) > SMEM_BUDGET
        or (not (upcast or one_program) and programs_per_sm(cfg, p) < 2)
    ):
        cfg["num_stages"] -= 1
    return with_pdl_pair(p, cfg)


# The deep tile as the untuned default: BLOCK_N 64 unsplit at BLOCK_K 512, 4 stages (128 KB of
# W in flight, one program an SM), where one wave of such programs streams at HBM speed.
# H200 2026-12-02, bench_gemm.py over 18 shapes of other families and the 27B tower, M = 1, 8,
# 16, two runs within 1% (results/deep_default_H200_2026-12-02/call2/, call1/), deep against
# the default, same run:
# - 96-128 tiles (6144x4096, 6144x5120, 7168x8192, 8192x1024 / 3584 / 8192 / 28672): per_tensor
#   1.04-1.29x at every M (at M = 1 with x quantized in the GEMM, as the default takes it:
#   1.00-1.11x; x quantized in the GEMM at M >= 8 on this tile lost, 0.90-0.98x), channel_token
#   1.02-1.36x in the default's own x mode (the fused amax at M = 1, the pre-pass pair above);
# - 64-80 tiles: per_tensor from the pre-pass pair 1.03-1.36x at M = 8 and 16 (4096x4096, 4096x
#   12288 / 14336, 5120x2048 / 6144 / 8192 / 17408), but 0.78-0.95x at M = 1 on the longer K;
#   channel_token 0.78-0.96x at M = 8 on the longer K: not there;
# - fewer tiles (1024x*, 1280x8192, 2048x4096: 16-32 programs) or more (one wave over): mixed.
# As the default, against the default before it, 29 shapes x M = 1-16 in one run (call3/
# untuned.json): 86 cells moved, 0.988-1.357x (median 1.097; the one loss channel_token
# 6144x5120 at M = 2). K >= 1024 only: shorter rows were not measured.
DEEP_TILES = (96, H200_SMS)
# Not below M = 8 in this default, which does not depend on the GPU: the H100 SXM gains there
# (session 48, results/session48_2026-12-06/call7/ to call10/, four runs) and takes the deep tile
# untuned through ``small_m_deep`` below; on the H200 it was mixed (results/deep_default_H200_
# 2026-12-02/call6/small_m_{1,2}.json, two runs; at M = 2: 4096x14336 0.80x, 5120x6144 /
# 8192 0.96-0.97x, 5120x17408 1.02x, 4096x4096 1.20x; at M = 3 4096x14336 0.86x; at M = 4
# 0.98-1.06x). Untuned, the H200's split default at M = 2 / 4 lost 3-4% to the lean cuBLASLt
# on 5120x2048 / 5120x4096 (session 48, call6/recheck.json; the deep tile untimed there:
# open); tuning times the deep tile first (priority_configs).
DEEP_TILES_PAIR_MIN = 64  # per_tensor from the pre-pass pair, M >= DEEP_PAIR_MIN_M
DEEP_PAIR_MIN_M = 8
DEEP_MAX_M = 16


def deep_default(p: GemmProblem) -> dict | None:
    """The deep tile where it is the untuned default (the evidence above), or None: per_tensor
    and channel_token with bf16 / fp16 x at M <= DEEP_MAX_M and K >= 1024, over DEEP_TILES
    programs of BLOCK_N 64 (per_tensor at M >= DEEP_PAIR_MIN_M: from DEEP_TILES_PAIR_MIN). x
    is taken as the default takes it, but per_tensor at M > 1 from the pre-pass pair."""
    if p.scheme not in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN) or p.m > DEEP_MAX_M \
            or p.act_dtype == FP8_DTYPE or p.k < 1024:
        return None
    tiles = -(-p.n // 64)
    low = DEEP_TILES_PAIR_MIN if (p.scheme is Scheme.PER_TENSOR and p.m >= DEEP_PAIR_MIN_M) \
        else DEEP_TILES[0]
    if not low <= tiles <= DEEP_TILES[1]:
        return None
    base = _tile_default(p)
    mode = {f: base[f] for f in X_MODE_KEYS if f in base}
    if p.scheme is Scheme.PER_TENSOR and p.m > 1:
        mode = {"prequant": True, **PDL_PAIR}
    return deep_tile(p, mode)


# The H100 SXM's untuned default at small M (triton_gemm.untuned_config serves it there, not
# on the H200, whose own small-M evidence above was mixed): the deep tile with x from the
# pre-pass pair. H100, bench_gemm.py (a static activation scale), cuBLASLt us / arm us:
# - session 48 (results/session48_2026-12-06/call7/deep_m2.json, call8/ to call10/, four
#   runs): 12 shapes 4096 / 5120 x K = 2048-25600 at M = 2 / 4, 1.06-1.41x the shared
#   default, 1.11-1.43x cuBLASLt;
# - session 49 (results/session49_2026-12-06/call1/deep_m2.json, 18 shapes, N = 1024-10240,
#   K = 2048-25600, M = 1-8): where its config differs from the shared default, 1.01-1.20x
#   it at M = 1, 1.05-1.39x at M = 2-4, 1.06-1.14x at M = 8 (16-32 / 160 tiles, outside
#   DEEP_TILES), 1.04-1.43x cuBLASLt in every cell; call2/heldout.json and small_m.json (20
#   held-out shapes and the rule's 29, M = 1, 2, 4, 8): 1.04-1.16x cuBLASLt on the 10 shapes
#   of 161-896 tiles, where the shared default or cuBLASLt served (0.97-1.15x), at or above
#   it in every cell. Where it lost, the shared default serves:
#   - under 24 tiles with K > 5120: 1280x8192 (20 tiles) 0.92-0.98x the shared split default
#     in both files (1024x5120, 16 tiles of K = 5120, 1.02-1.09x; 1536x7168, 24 tiles,
#     1.00-1.04x);
#   - 133-159 tiles (one to 1.2 waves of these one-an-SM programs) at M = 1 or with K > 5120
#     (160 tiles, 10240x5120 / 8192, and 161-176, 10304 / 11264 x 4096, won):
#     9216x7168 (144) 0.96x the shared default at M = 1, 0.974-0.980x cuBLASLt at M = 1-8
#     (session 49's call2/heldout.json); session 50 (results/session50_2026-12-06/call1/
#     edges.json, 7 shapes of the band) and 51 (results/session51_2026-12-06/call1/band.json,
#     12 more): with K > 5120 0.88-1.03x the shared default (8576x14336 0.88-0.91x), at M = 1
#     with K <= 5120 0.959-1.067x. At M = 2-8 with K <= 5120 it won on all 10 such shapes
#     (1.001-1.112x the shared default, 1.01-1.15x cuBLASLt; the shared default 0.975-1.08x
#     cuBLASLt there): served since session 51. Held out as served (session 51,
#     call3/heldout.json and call5/k_tail.json: 16 more shapes of the band, K = 2048-5120,
#     Phi-3-mini's qkv_proj 9216x3072 and Gemma-2-2B's gate / up 9216x2304 among them; 51
#     cells at M = 2, 4, 8, 8768x3840 in both files): 0.987-1.124x the shared default (median
#     1.034; its losses on K = 3840 / 4864, a half last K step, at most 1.3%), 0.983-1.155x
#     cuBLASLt, where the shared default ran 0.972-1.077x (six cells more than 2% behind).
# Not measured on the H100: K < 2048, x in fp16 / fp32, a dynamic activation scale,
# channel_token, past 160 tiles with K outside 4096-8192. Eager calls (a static scale,
# backend auto or triton) run the tile with x quantized in the GEMM, one launch
# (nn/plan.eager_one_launch, session 50): 1.02-1.43x the pair's GPU time at M = 1 (18
# shapes), at M = 2-8 1.03-2.04x since fp8_gemm.x_rows (1.08-2.26x before; session 52,
# call2 / call3).
SMALL_M_DEEP_MAX_M = 8
SMALL_M_DEEP_MIN_TILES = 16
SMALL_M_DEEP_MIN_K = 2048


def small_m_deep(p: GemmProblem) -> dict | None:
    """The deep tile (``deep_tile``) with x from the pre-pass pair for per_tensor with x other
    than FP8 at M <= SMALL_M_DEEP_MAX_M, K >= SMALL_M_DEEP_MIN_K over at least
    SMALL_M_DEEP_MIN_TILES programs of BLOCK_N 64, but not under 24 of them with K > 5120 nor
    133-159 at M = 1 or with K > 5120 (the H100 SXM's evidence above), or None."""
    if p.scheme is not Scheme.PER_TENSOR or p.act_dtype == FP8_DTYPE \
            or p.m > SMALL_M_DEEP_MAX_M or p.k < SMALL_M_DEEP_MIN_K:
        return None
    tiles = -(-p.n // 64)
    band = H200_SMS < tiles < 160  # one to 1.2 waves of one-an-SM programs
    if tiles < SMALL_M_DEEP_MIN_TILES or (tiles < 24 and p.k > 5120) \
            or (band and (p.m == 1 or p.k > 5120)):
        return None
    return deep_tile(p, {"prequant": True, **PDL_PAIR})


X_MODE_KEYS = ("prequant", "fused_amax", "pdl", "prefetch")  # how a config takes x


def deep_tile(p: GemmProblem, mode: dict) -> dict:
    """BLOCK_N 64 unsplit at BLOCK_K 512 on the most stages (up to 4) that fit, x taken as
    ``mode`` says (X_MODE_KEYS)."""
    cfg = {"block_n": 64, "block_k": 512, "split_k": 1, "num_warps": 4, "num_stages": 4, **mode}
    return fit_stages(cfg, block_m_for(p.m), min_stages=1)


def default_config(p: GemmProblem, deep: bool = True) -> dict:
    """``deep_default`` where it applies (``deep=False``: the default without it, for A/B
    benchmarks). Else the default tile (``_tile_default``), moved onto a one-wave variant
    where its own grid is over one wave: first from ``wave_fits`` (fewer stages / another
    split-K), else (per_tensor, M <= 32) the fullest one-wave config of the tuner's space
    (e.g. BLOCK_K 128, 3 stages).
    Measured (H200, 2026-11-30, per GEMM in a cold-L2 chain):
    - per_tensor 10240x5120 22.65 -> 17.35 us at M = 1 (1.21 -> 0.81 waves; cuBLASLt 19.24),
      6144x5120 16.25 -> 12.08 (cuBLASLt 14.64), the same at M = 8
      (results/chain_pdl_prefetch_H200_2026-11-30.json). Where the tile already fits one
      wave, a "fuller" variant was slower (12288x5120: 18.72 -> 19.64), so only grids over
      one wave move.
    - per_tensor 34816x5120 (2.06 waves, no one-wave variant of the same tile): BLOCK_K 128
      with 3 stages (0.69 waves) 44.95 us against 53.21 and cuBLASLt 47.46 at M = 1, 46.40
      against 54.55 / 48.86 at M = 16 (results/variants_H200_2026-11-30.json).
    weight_only up to M = 64: x split by the pre-pass (WO_SPLIT_MAX_M), on the tile of the
    schemes that take FP8 x (the GEMM is block128's)."""
    deep_cfg = deep_default(p) if deep else None
    if deep_cfg is not None:
        return deep_cfg
    base = _tile_default(p)
    if waves(base, p) <= 1.0:
        return base
    one_wave = [c for c in wave_fits(p) if waves(c, p) <= 1.0]
    if one_wave:
        return one_wave[0]
    if p.scheme is not Scheme.PER_TENSOR or p.m > 32:
        # Measured for per_tensor at M <= 32 only; programs_per_sm is exact for the 64x256
        # tile alone (other tiles compile up to 32% smaller), so elsewhere keep the tile.
        return base
    any_tile = [c for c in _candidates(p, base)
                if waves(c, p) <= 1.0 and c["prequant"] == base["prequant"]
                and c.get("pdl") == base.get("pdl")]
    if any_tile:
        return max(any_tile, key=lambda c: (wave_fill(c, p), c["block_k"], -c["split_k"]))
    return base


def one_wave_fallback(p: GemmProblem) -> bool:
    """Whether ``default_config`` left the default tile for another of the tuner's space
    because no variant of it fits one wave (per_tensor, M <= 32: 28672x4096, 34816x5120)."""
    cfg, base = default_config(p), _tile_default(p)
    return (cfg["block_n"], cfg["block_k"]) != (base["block_n"], base["block_k"]) \
        and deep_default(p) is None


def wave_fit_default(p: GemmProblem) -> bool:
    """Whether ``default_config`` moved the default tile onto a one-wave variant of itself
    (``wave_fits``: fewer stages or another split; e.g. 10240x5120 at M <= 16, 3 stages)."""
    cfg, base = default_config(p), _tile_default(p)
    return cfg != base and deep_default(p) is None and not one_wave_fallback(p)


def programs_per_sm(cfg: dict, p: GemmProblem) -> int:
    """Programs of ``cfg`` resident per SM, from pipelined shared memory: the binding limit
    for the BLOCK_N 64 x BLOCK_K 256 tiles, whose compiled sizes this matches within 3%
    (sm_90 builds by kernels/offline.py; tests/test_offline_sm90.py), weight_only at M >= 32
    excepted. Other tiles compile up to 32% smaller than this estimate (fewer buffers), so
    it is only used for those. At M = 1 with x quantized in the GEMM (fp8_gemm.row1) the
    x stages hold one row and the build is smaller (3 programs per SM for 64x256x4); the
    estimate keeps the 16-row x the wave rule's defaults were measured with (fewer slots
    assumed: a grid it calls one wave is one)."""
    # weight_only's pre-pass gives 2M FP8 rows: as many bytes as M bf16 rows (M >= 8)
    x_item = 1 if x_is_fp8(p.scheme, p.act_dtype == FP8_DTYPE, cfg) and \
        p.scheme is not Scheme.WEIGHT_ONLY else 2
    smem = smem_bytes(cfg, block_m_for(p.m), x_item) + SMEM_RESERVED_PER_PROGRAM
    return max(1, SMEM_PER_SM // smem)


def waves(cfg: dict, p: GemmProblem) -> float:
    """Grid programs / resident slots on an H200 (132 SMs x programs_per_sm)."""
    programs = -(-p.n // cfg["block_n"]) * cfg["split_k"] * -(-p.m // block_m_for(p.m))
    return programs / (H200_SMS * programs_per_sm(cfg, p))


def wave_fill(cfg: dict, p: GemmProblem) -> float:
    """How full the grid's last wave is: 1.0 when it is whole (one partial wave: its fill)."""
    w = waves(cfg, p)
    return w / math.ceil(w)


def wave_fits(p: GemmProblem) -> list[dict]:
    """Variants of the default tile (other split-K, 3 stages) whose grid fills its waves
    better than the default's by >= 0.1: the fullest one-wave grid, then the fullest
    multi-wave one. The tuner times these first.

    Why (H200, 2026-11-29, benchmarks/results/static_sm90_vs_tuning_H200_2026-11-29.json):
    the default tile reached 75-82% of the ceiling where its grid was 0.73-0.97 waves on the
    >= 50 MB shapes, but 43-61% at 1.03-1.21 waves; at equal bytes, 1.03 against 0.91 waves
    cost 16 points (17408x5120 vs 5120x17408), and on 10240x5120 channel_token 3 stages
    (0.81 waves) beat the default's 4 (1.21 waves), 49% against 44%."""
    base = _tile_default(p)
    if p.scheme is Scheme.WEIGHT_ONLY and not base["prequant"]:
        return []  # the upcast's W staging compiles smaller than programs_per_sm assumes
    floor = wave_fill(base, p) + 0.1
    same_tile = ("block_n", "block_k", "num_warps", "prequant", "fused_amax", "wo_mode", "pdl",
                 "prefetch")
    best: dict[bool, tuple] = {}  # one wave or not -> (key, cfg)
    for cfg in _candidates(p, base)[1:]:
        if any(cfg.get(f) != base.get(f) for f in same_tile) or wave_fill(cfg, p) < floor:
            continue
        key = (wave_fill(cfg, p), -abs(cfg["split_k"] - base["split_k"]), cfg["num_stages"])
        family = waves(cfg, p) <= 1.0
        if family not in best or key > best[family][0]:
            best[family] = (key, cfg)
    return [best[f][1] for f in (True, False) if f in best]


def deep_unsplit(base: dict, space: list[dict], modes: list[dict]) -> list[dict]:
    """Where the default ``base`` splits K: its BLOCK_N unsplit at BLOCK_K 512 on the most stages
    of ``space`` (one program per SM, 96-128 KB of W in flight), per x mode of ``modes``.
    Where a grid is under one wave, more bytes in flight per program beat the split-K
    reduction. H200 2026-12-02, 5120x6144 on the pre-pass pair against the best split-3
    config: per_tensor 9.97 / 10.81 us at M = 1, 10.11 / 11.26 at M = 8, the merged 27B
    tower 2.124 -> 2.048 ms/step at M = 1 with it and one other move
    (results/k_rot_H200_2026-12-02/call2/); channel_token 10.50 / 11.29 at M = 1, 10.87 /
    12.11 at M = 16, its tower 2.170 -> 2.121 at M = 1, 2.364 -> 2.239 at M = 16 (call4/,
    call5/). With x quantized in the GEMM, or on block128's grouped path, it lost (12.05 /
    11.28, 13.13 / 11.69 at M = 1): the tuner decides. A sampled wide search can miss it:
    channel_token's 120 of 360 configs did (call3/)."""
    if base["split_k"] == 1:
        return []
    mode_keys = ("prequant", "fused_amax", "wo_mode", "pdl", "prefetch")
    out = []
    for mode in modes:
        deep = [c for c in space if c["block_n"] == base["block_n"] and c["block_k"] == 512
                and c["split_k"] == 1 and all(c.get(f) == mode.get(f) for f in mode_keys)]
        if deep:
            out.append(max(deep, key=lambda c: c["num_stages"]))
    return out


def priority_configs(p: GemmProblem) -> list[dict]:
    """What the tuner times first after the default: ``wave_fits``, then the default tile
    with x quantized the other way (in the GEMM or by the pre-pass / channel_token's fused
    amax): one launch or two is the choice that moves eager host time most (issue #11);
    then the default launched the other way with respect to PDL (PDL_PAIR on or off); then
    weight_only's ``split_twin``; then ``small_m_deep`` (the H100 SXM's untuned choice);
    then ``deep_unsplit`` in the x modes of the default, its twin and the split twins; then
    ``wide_in_gemm``."""
    base = default_config(p)
    space = _candidates(p, base)[1:]
    tile = ("block_n", "block_k", "split_k", "num_stages")
    twins = [c for c in space if all(c[f] == base[f] for f in tile)
             and x_is_fp8(p.scheme, False, c) != x_is_fp8(p.scheme, False, base)]
    pdl_twins = [c for c in space if all(c.get(f) == base.get(f) for f in (*tile, "prequant",
                                                                          "fused_amax", "wo_mode"))
                 and bool(c.get("pdl")) != bool(base.get("pdl"))]
    splits = split_twin(p, base, space)
    first = wave_fits(p) + twins[:1] + pdl_twins[:1] + splits
    own = small_m_deep(p)  # what the H100 SXM serves untuned: a tuning times it too
    first += [own] if own is not None and own in space and own not in first else []
    deep = [c for c in deep_unsplit(base, space, [base, *twins[:1], *splits]) if c not in first]
    wide = [c for c in wide_in_gemm(p, space) if c not in first + deep]
    return first + deep + wide


def split_twin(p: GemmProblem, base: dict, space: list[dict]) -> list[dict]:
    """weight_only on the split pre-pass: ``base`` with x split the other ways, from
    ``space``: per 1x128 group -> per token, by the pre-pass (wo_mode 3) and at M = 1 in the
    GEMM (wo_mode 4); per token -> per group. [] elsewhere."""
    if p.scheme is not Scheme.WEIGHT_ONLY or not base.get("prequant"):
        return []
    keys = ("block_n", "block_k", "split_k", "num_stages", "pdl", "prefetch")
    modes = (None,) if base.get("wo_mode") == 3 else (3, 4)
    twins = ([c for c in space if c.get("wo_mode") == mode
              and bool(c.get("prequant")) == (mode != 4)  # 4: in the GEMM, no pre-pass
              and all(c.get(f) == base.get(f) for f in keys)] for mode in modes)
    return [t[0] for t in twins if t]


# x quantized in the GEMM is read as bf16 by every program, once per BLOCK_N rows of W: at
# M = 32 on BLOCK_N 64 tiles as many bytes as the weights themselves (16384x5120 per_tensor:
# 31.3 us against 23.3 from the pre-pass pair), on BLOCK_N 128 half as many; and it saves the
# pre-pass launch. The tuner's evenly spaced sample missed that tile for the channel-scale keys
# a merged model runs (H200 2026-12-02, results/m32_gap_H200_2026-12-02/). Timed first, it won
# in context on the merged 27B tower's in_proj and qkv keys (16384x5120, 14336x5120), same
# machine, ms/step before -> after: per_tensor M = 32 2.328 -> 2.294 (call2/), M = 8 2.177 ->
# 2.168, M = 16 2.206 -> 2.204 (call4/); per GEMM at M = 32 23.10 / 20.76 us against the
# pair's 23.39 / 22.69. block128 (x's 1x128 amax in the GEMM) kept its pair everywhere.
WIDE_IN_GEMM_MIN_M = 8


def wide_in_gemm(p: GemmProblem, space: list[dict]) -> list[dict]:
    """From M = WIDE_IN_GEMM_MIN_M, per_tensor and block128 (the schemes that can quantize x
    in the GEMM): the BLOCK_N 128 config of ``space`` with x quantized in the GEMM, launched
    with PDL, on the fewest waves (then the fullest last wave, the fewest splits, the most
    stages): one launch, no pre-pass, the bf16 x re-read halved (above)."""
    if p.m < WIDE_IN_GEMM_MIN_M or p.act_dtype == FP8_DTYPE \
            or p.scheme not in (Scheme.PER_TENSOR, Scheme.BLOCK128):
        return []
    wide = [c for c in space if c["block_n"] == 128 and not c.get("prequant")
            and c.get("pdl") and not c.get("fused_amax")]
    if not wide:
        return []
    return [max(wide, key=lambda c: (-math.ceil(waves(c, p)), wave_fill(c, p), -c["split_k"],
                                     c["num_stages"]))]


# A program that streams only a few K steps (a split) waits on each step's W tile where the
# pipeline asks for num_stages - 1 tiles ahead: with num_stages >= its steps + 1 it asks for
# all of them before its first MMA. The tuner's space stops at 4 stages, so it times these
# for its winner (Backend.refinements). H200 2026-12-04, per_tensor 1024x5120 split 5 x
# BLOCK_K 256 (4 steps a program) with PDL, 3 stages against 4 / 5, the tuner's chain, one
# run (results/trigger_refine_H200_2026-12-04/call3/small.json, us): M = 1 5.01 -> 4.73 /
# 4.80, M = 8 5.44 -> 5.33 / 4.95, M = 16 5.71 -> 5.64 / 5.43, M = 32 7.15 -> 6.44 / 6.75.
# Deeper stages that cost the grid a wave lost: weight_only 6144x5120 split 4 (384
# programs) 11.15 us at 3 stages, 13.28 at 4 (call3/wo1.json).
ALL_IN_FLIGHT_MAX_STEPS = 8  # a program with more K steps than this streams as it is
ALL_IN_FLIGHT_EXTRA = 1  # stages past steps + 1 also timed (a masked last step, noise)


def all_in_flight(p: GemmProblem, cfg: dict) -> list[dict]:
    """``cfg`` at each deeper num_stages up to its program's K steps + 1 + ALL_IN_FLIGHT_EXTRA
    (the steps of its split: above) that fits shared memory and keeps the grid's waves; none
    for a program of more than ALL_IN_FLIGHT_MAX_STEPS steps."""
    steps = math.ceil(math.ceil(p.k / cfg["block_k"]) / cfg["split_k"])
    if steps > ALL_IN_FLIGHT_MAX_STEPS:
        return []
    out = []
    for stages in range(cfg["num_stages"] + 1, steps + 2 + ALL_IN_FLIGHT_EXTRA):
        deeper = {**cfg, "num_stages": stages}
        if smem_bytes(deeper, block_m_for(p.m)) > SMEM_BUDGET \
                or math.ceil(waves(deeper, p)) > math.ceil(waves(cfg, p)):
            break
        out.append(deeper)
    return out


def pdl_twin(p: GemmProblem, cfg: dict) -> dict | None:
    """``cfg`` launched the other way with respect to PDL (PDL_PAIR on or off); None for FP8
    x given (no PDL: its producer is the caller's kernel)."""
    if p.act_dtype == FP8_DTYPE:
        return None
    if cfg.get("pdl"):
        return {k: v for k, v in cfg.items() if k not in PDL_PAIR}
    return {**cfg, **PDL_PAIR}


def unsplit_twin(p: GemmProblem, cfg: dict) -> dict | None:
    """A split winner ``cfg``'s tile unsplit, on the most stages (up to 4) that fit shared
    memory, where that grid is one wave of at least DEEP_TILES[0] programs (enough to stream
    at HBM speed unsplit: UNSPLIT_PROGRAM_GBPS); None elsewhere. The sample can miss it in
    the winner's launch kind: weight_only 10240x5120 split 2 won where an earlier tune of
    nearly the same space had found it unsplit faster; retuned with this, M = 1 / 8 / 16
    16.46 / 17.27 / 18.11 -> 15.70 / 16.10 / 16.61 us, the other 33 tower keys 0.986-1.076x
    (H200 2026-12-04, results/wo_token_H200_2026-12-04/call6/wo_{old,new}.json)."""
    if cfg["split_k"] == 1:
        return None
    block_m = block_m_for(p.m)
    if -(-p.n // cfg["block_n"]) * -(-p.m // block_m) < DEEP_TILES[0]:
        return None
    out = fit_stages({**cfg, "split_k": 1, "num_stages": 4}, block_m)
    if smem_bytes(out, block_m) > SMEM_BUDGET or waves(out, p) > 1.0:
        return None
    return out


# The tuner's evenly spaced sample times few launch kinds of each tile, and the winner's
# other one can be far faster: per_tensor 1024x5120 M = 32, split 5 x BLOCK_K 256, x
# quantized in the GEMM, 7.49 us without PDL (the tuned winner) against 6.44 with it at 4
# stages (H200 2026-12-04, results/trigger_refine_H200_2026-12-04/call3/small.json); tuned
# from cold on nine Llama / Qwen3 shapes, the PDL twin of such a winner was 1.04-1.23x
# faster on 9 of 36 per_tensor keys, on none of channel_token's or block128's (call6/).
def refinements(p: GemmProblem, cfg: dict) -> list[dict]:
    """What the tuner times next to its winner ``cfg`` (Backend.refinements): its K steps all
    in flight (``all_in_flight``), then its PDL twin (``pdl_twin``) and that one's, then its
    tile unsplit (``unsplit_twin``), then, where it quantizes x in the GEMM, x by the pre-pass
    (``x_twin``), then its BLOCK_K halved and doubled (``block_k_twins``)."""
    twin = pdl_twin(p, cfg)
    unsplit = unsplit_twin(p, cfg)
    x_other = x_twin(p, cfg)
    return (all_in_flight(p, cfg) + ([twin, *all_in_flight(p, twin)] if twin else [])
            + ([unsplit] if unsplit else []) + ([x_other] if x_other else [])
            + block_k_twins(p, cfg))


# The sample of MAX_CONFIGS a backend also missed the winner's nearest neighbours on the other
# two axes of the tile (H100 2026-12-07, the 27B tower's 18 per_tensor / weight_only keys at
# M = 32 tuned from cold, 16 configs a backend against 48,
# results/session58_2026-12-07/c8/bench_{16,48}.json): per_tensor 10240x5120 won BLOCK_N 128
# with x quantized in the GEMM (24.15 us) where the same tile after the pre-pass ran 21.49;
# weight_only 10240x5120 won BLOCK_K 512 (26.04 us) where BLOCK_K 256, all else equal, ran
# 22.11. Of the other 16 keys 15 were within 1.5% either way (1.4% on the sum).
SPACE_TILES = ((64, 256), (32, 256), (64, 512), (128, 256), (64, 128), (32, 512))


# x_twin times the pre-pass side only. Its other side, a pre-pass winner quantizing x in the
# GEMM, won in the tuner's chain and lost in the tower (H100 2026-12-07, the merged 27B tower,
# per_tensor, tuned from cold: 5120x6144 at M = 1 in the GEMM + tile-major, 12.39 us against
# 12.75 after the pre-pass in the chain, ran the step at 2.731 ms, 2.716 set back to the
# pre-pass (arms alternated, 4 rounds, results/session59_2026-12-07/x/); each tuned key's x
# mode flipped in the step: x in the GEMM was never faster there, 1.011-1.043x the step at
# M = 1 / 8, the one chain winner with x in the GEMM at M = 32 a tie, 1.000x (xc/)).
def x_twin(p: GemmProblem, cfg: dict) -> dict | None:
    """per_tensor and block128: a winner ``cfg`` quantizing x in the GEMM, with x quantized by
    the pre-pass instead, its launch kind kept (None for a pre-pass winner: above); None where
    that leaves the kernel reading x as it did (``x_is_fp8``: per_tensor with FP8 x given) and
    for the other schemes (channel_token's and weight_only's x modes are not a flip of one
    key: priority_configs and split_twin)."""
    if p.scheme not in (Scheme.PER_TENSOR, Scheme.BLOCK128) or cfg.get("prequant"):
        return None
    twin = fit_stages({**cfg, "prequant": True}, block_m_for(p.m))
    fp8_x = p.act_dtype == FP8_DTYPE
    return twin if x_is_fp8(p.scheme, fp8_x, twin) != x_is_fp8(p.scheme, fp8_x, cfg) else None


def block_k_twins(p: GemmProblem, cfg: dict) -> list[dict]:
    """``cfg`` with BLOCK_K halved, then doubled, where that tile is one of the space's
    (SPACE_TILES) and each split keeps >= 2 K steps, on its stages or as many as fit shared
    memory."""
    out = []
    for block_k in (cfg["block_k"] // 2, cfg["block_k"] * 2):
        if (cfg["block_n"], block_k) not in SPACE_TILES or \
                (cfg["split_k"] > 1 and -(-p.k // block_k) // cfg["split_k"] < 2):
            continue
        twin = fit_stages({**cfg, "block_k": block_k}, block_m_for(p.m))
        if smem_bytes(twin, block_m_for(p.m)) <= SMEM_BUDGET:
            out.append(twin)
    return out


def configs(p: GemmProblem) -> list[dict]:
    """The search space the tuner walks, likeliest first (the default, then tiles near it).

    Pruned: configs whose pipelined tiles exceed shared memory, and split-K values that
    leave fewer than 2 K steps per split or give under half / over 8x the SM count."""
    return _candidates(p, default_config(p))


def _candidates(p: GemmProblem, base: dict) -> list[dict]:
    """``configs`` around ``base`` (first)."""
    block_m = block_m_for(p.m)
    # How x gets quantized: in the GEMM or by a pre-pass launch (per_tensor, block128); for
    # channel_token, by the pre-pass or by the GEMM after its own per-token amax. Each mode
    # with and without PDL_PAIR: since captures move PDL edges to early launch
    # (graph_edges.py), a GEMM launched with PDL after any kernel, a torch op included, may
    # stream its first weights while that kernel runs (H200 2026-12-01,
    # results/early_launch_H200_2026-12-01/call1: per_tensor's cached configs forced to PDL,
    # the merged 27B tower at M = 8 2.403 -> 2.270 ms/step, but M = 1 2.254 -> 2.378: the
    # tuner decides per key).
    x_modes = ({"prequant": False}, {"prequant": False, **PDL_PAIR},
               {"prequant": True, **PDL_PAIR}, {"prequant": True})
    if p.scheme is Scheme.CHANNEL_TOKEN:
        x_modes = ({"prequant": False, **PDL_PAIR}, {"prequant": False},
                   {"prequant": False, "fused_amax": True},
                   {"prequant": False, "fused_amax": True, **PDL_PAIR})
    elif p.scheme is Scheme.WEIGHT_ONLY and not splits_x_exactly(p):  # W upcast only
        x_modes = ({"prequant": False}, {"prequant": False, **PDL_PAIR})
    elif p.scheme is Scheme.WEIGHT_ONLY:  # W upcast; the split pre-pass; at M <= 16 WO_MODE 2
        # prequant: x split by the pre-pass into two FP8 rows a token (act_quant.py), with
        # scales per 1x128 group or (wo_mode 3) per token
        x_modes = ({"prequant": False}, {"prequant": False, **PDL_PAIR},
                   {"prequant": True, **PDL_PAIR}, {"prequant": True},
                   {"prequant": True, "wo_mode": 3, **PDL_PAIR}, {"prequant": True, "wo_mode": 3})
        if p.m <= 16:
            x_modes += ({"prequant": False, "wo_mode": 2},
                        {"prequant": False, "wo_mode": 2, **PDL_PAIR})
        if p.m == 1:  # the per-token split in the GEMM: one launch
            x_modes += ({"prequant": False, "wo_mode": 4},
                        {"prequant": False, "wo_mode": 4, **PDL_PAIR})
    if p.act_dtype == FP8_DTYPE:
        # FP8 x given: its producer is the caller's kernel, timed nowhere here; no PDL.
        x_modes = tuple(m for m in x_modes if "pdl" not in m)
    out = [base]
    for block_n, block_k in SPACE_TILES:
        tiles = -(-p.n // block_n) * -(-p.m // block_m)
        k_iters = -(-p.k // block_k)
        for split in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16):
            if split > 1 and k_iters // split < 2:
                continue
            if not (H200_SMS // 2 <= tiles * split <= 8 * H200_SMS) and split > 1:
                continue
            for stages in (4, 3):
                for mode in x_modes:
                    cfg = {"block_n": block_n, "block_k": block_k, "split_k": split,
                           "num_warps": 8 if block_n == 128 else 4, "num_stages": stages,
                           **mode}
                    if smem_bytes(cfg, block_m) <= SMEM_BUDGET and cfg not in out:
                        out.append(cfg)
    # Near the default first: same tile, then split-K closest to the default's.
    out[1:] = sorted(out[1:], key=lambda c: (
        (c["block_n"], c["block_k"]) != (base["block_n"], base["block_k"]),
        abs(c["split_k"] - base["split_k"]), c["num_stages"] != base["num_stages"]))
    return out


# channel_token "fused_amax" (kernels/fp8_gemm.py): no pre-pass launch; each program takes
# its tokens' amax over all of K itself (the pre-pass's bits). Its first version ran 1.7-4.7x
# SLOWER than pre-pass + GEMM on the H200 (2026-12-01, 4096x4096 M=1: 33.35 vs 10.58 us;
# results/tuning_cache_fused_amax_H200_2026-12-01.json): a serial chain of BLOCK_K-wide
# amax loads, and an exact division per element. Then one division per token
# (fp8_gemm._div_by_scale), and the amax in loads issued together (fp8_gemm.amax_chunks:
# one L2 round trip at M = 1) with one token's row quantized as a vector (fp8_gemm.row1).
# At M = 1 it beat the PDL pair on 8 of the 9 27B tower shapes, 1.2-1.8x (16384x5120 22.8
# vs 27.4 us, 5120x17408 28.2 vs 48.5; 34816x5120 lost, 55.7 vs 53.1), and won every
# tower and Qwen3-8B key when retuned (results/one_shot_amax_H200_2026-12-01/). Then the
# pre-pass itself got fast (kernels/act_quant.py: 16384x5120 pair 28.2 -> 22.9 us at M = 8)
# and at M = 1 the two are within 3% (fused won 3 of the 7 retuned tower keys, 17.99 vs
# 18.50 us at 10240x5120; the pair 22.43 vs 23.16 at 16384x5120;
# results/fast_token_prepass_H200_2026-12-01/). The untuned default at M = 1 takes the one
# launch: as fast under a graph, half the launches for an eager call. At M = 8 / 16 the
# pair won 11 of 14 keys even before (results/amax_unrolled_H200_2026-12-01/).
FUSED_AMAX_MAX_M = 1


# weight_only's WO_MODE (config "wo_mode"): what each needs of the config and of M.
WO_MODES = {0: "W upcast in the GEMM", 1: "fp16 MMAs", 2: "x split per K step in the GEMM",
            3: "x split per token by the pre-pass", 4: "x split per token in the GEMM (M = 1)"}


def split_per_token(scheme: Scheme, cfg: dict, m: int) -> bool:
    """Whether ``cfg`` takes weight_only's x split by the pre-pass with one scale a token
    (``wo_mode`` 3, kernels/act_quant.quantize_args' ``per_token``) rather than per 1x128
    group. A ValueError for a ``wo_mode`` that ``cfg`` and ``m`` cannot run: any for another
    scheme; 3 without the pre-pass (``prequant``); 4 (the same split in the GEMM) with it or
    at M != 1; 1 / 2 with it."""
    mode = cfg.get("wo_mode", 0)
    if not mode:
        return False
    prequant = cfg.get("prequant", False)
    bad = (scheme is not Scheme.WEIGHT_ONLY or mode not in WO_MODES or (mode == 3) != prequant
           or (mode == 4 and m != 1))
    if bad:
        raise ValueError(f"wo_mode {mode} ({WO_MODES.get(mode, 'unknown')}) cannot run "
                         f"{scheme.value} at M = {m} with prequant={prequant}: weight_only "
                         f"only; 3 needs prequant, 1 / 2 / 4 not; 4 M = 1 only")
    return mode == 3


def x_is_fp8(scheme: Scheme, act_is_fp8: bool, cfg: dict) -> bool:
    """Whether the GEMM kernel reads FP8 x (given, or from the pre-pass) or quantizes it:
    config ``prequant`` (per_tensor, block128, weight_only) or, for channel_token, not
    ``fused_amax``."""
    if scheme is Scheme.PER_TENSOR:
        return act_is_fp8 or cfg.get("prequant", False)
    if scheme is Scheme.CHANNEL_TOKEN:
        return not cfg.get("fused_amax", False)
    # block128's 1x128 groups, or weight_only's exact two-part split (act_quant.py)
    return cfg.get("prequant", False)
