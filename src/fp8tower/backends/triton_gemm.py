"""Triton backend: our FP8 decode GEMMs (kernels/fp8_gemm.py) for every scheme.

Activation quantization: per_tensor (static scale) is fused into the GEMM, or done by one
light pre-pass launch (config "prequant": the tuner keeps the faster); block128 can fuse it
too (1x128 groups are local to a K step) but the pre-pass measured faster (H200,
2026-11-29: 10240x5120 M=1 fused 148 us); channel_token needs each token's amax over all
of K first, so it always takes the per-token pre-pass (kernels/act_quant.py).
"""

from __future__ import annotations

import importlib.util
import math
import os

import torch

from ..formats import FP8_DTYPE, FP8_MAX, MIN_SCALE, Fp8Weight, Scheme
from ..problem import GemmProblem
from . import Backend
from .act_quant import quantize as quantize_act

_SCHEME_ID = {
    Scheme.PER_TENSOR: 0, Scheme.CHANNEL_TOKEN: 1, Scheme.BLOCK128: 2, Scheme.WEIGHT_ONLY: 3,
}
H200_SMS = 132
# sm_90 shared memory per SM, and what each resident program reserves on top of its own.
SMEM_PER_SM, SMEM_RESERVED_PER_PROGRAM = 233_472, 1024


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _unavailable() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install 'fp8tower[triton]')"
    if not torch.cuda.is_available() and not _interpret():
        return "needs a CUDA GPU (or TRITON_INTERPRET=1 to run the kernels on the CPU)"
    return None


def _check(p: GemmProblem) -> str | None:
    if p.capability is None and not _interpret():
        return "needs a CUDA tensor (or TRITON_INTERPRET=1 for CPU tensors)"
    if p.capability is not None and p.capability < (8, 9):
        return f"FP8 tensor-core dots need compute capability >= 8.9, got {p.capability}"
    if p.scheme is Scheme.WEIGHT_ONLY and p.act_dtype == FP8_DTYPE:
        return "weight_only takes bf16/fp16/fp32 activations, not FP8"
    return None


def block_m_for(m: int) -> int:
    """All M tokens in one tile (W streamed once), >= 16 for the MMA's narrow side."""
    return min(max(16, 1 << (m - 1).bit_length()), 64)


# Shared memory per SM on sm_90 is 228 KB (232,448 B usable per block, seen in
# OutOfResources messages on the H200); leave room for the epilogue/reduction scratch.
_SMEM_BUDGET = 200_000
_TARGET_PROGRAMS = 2 * H200_SMS  # two resident programs per SM for the default tiles


def smem_bytes(cfg: dict, block_m: int, x_itemsize: int = 2) -> int:
    """Pipelined shared memory of one program: W tile (FP8) + x tile, per stage."""
    per_stage = cfg["block_n"] * cfg["block_k"] + block_m * cfg["block_k"] * x_itemsize
    return cfg["num_stages"] * per_stage


def _split_for(p: GemmProblem, block_n: int, block_k: int) -> int:
    tiles = -(-p.n // block_n) * -(-p.m // block_m_for(p.m))
    k_iters = -(-p.k // block_k)
    return int(max(1, min(round(_TARGET_PROGRAMS / tiles), k_iters // 2, 16)))


def _prequant_default(p: GemmProblem) -> bool:
    """Quantize x in a pre-pass launch rather than in the GEMM. block128: always (see the
    module doc). per_tensor at M >= 32: in the H200 tuning evidence (2026-11-29, same tile
    both ways; benchmarks/results/tuning_cache_evidence_H200_2026-11-29.json) the
    pre-pass was 1.14-1.33x faster at M = 32 on the four >= 25 MB shapes where both were
    timed (12288x5120: 22.2 vs 29.5 us; 1024x5120 lost, 11.8 vs 10.5 us), while at M <= 16
    fused was as fast or faster on 7-8 of 10 shapes. M = 64 follows M = 32 untimed: the
    fused default lost to cuBLASLt by > 2x there, so the tuner pruned Triton."""
    return p.scheme is Scheme.BLOCK128 or (p.scheme is Scheme.PER_TENSOR and p.m >= 32)


def _tile_default(p: GemmProblem) -> dict:
    """A sensible config without tuning. From the H200 sweep (2026-11-29,
    benchmarks/sweep_triton.py): BLOCK_N 64 x BLOCK_K 256 with split-K sized to ~2 programs
    per SM won at M = 1..32 on every tower shape. Fewer stages where 4 would not fit, or
    (W8A8) would leave room for only one program per SM: at M = 64 four stages need 129 KB
    (sm_90 build, kernels/offline.py), and this default is sized for two."""
    cfg = {"block_n": 64, "block_k": 256, "split_k": _split_for(p, 64, 256),
           "num_warps": 4, "num_stages": 4, "prequant": _prequant_default(p)}
    while cfg["num_stages"] > 2 and (
        smem_bytes(cfg, block_m_for(p.m)) > _SMEM_BUDGET
        or (p.scheme is not Scheme.WEIGHT_ONLY and programs_per_sm(cfg, p) < 2)
    ):
        cfg["num_stages"] -= 1
    return cfg


def default_config(p: GemmProblem) -> dict:
    """The default tile (``_tile_default``), moved onto its one-wave variant from
    ``wave_fits`` (fewer stages / another split-K) where its own grid is over one wave.
    Measured (H200, 2026-11-30, benchmarks/bench_chain.py ->
    results/chain_pdl_prefetch_H200_2026-11-30.json, per GEMM in a cold-L2 chain, M = 1):
    per_tensor 10240x5120 22.65 -> 17.35 us (1.21 -> 0.81 waves; cuBLASLt 19.24),
    6144x5120 16.25 -> 12.08 (cuBLASLt 14.64), the same at M = 8. Where the tile already
    fits one wave, a "fuller" variant was slower (12288x5120: 18.72 -> 19.64), so only
    grids over one wave move."""
    base = _tile_default(p)
    if waves(base, p) > 1.0:
        one_wave = [c for c in wave_fits(p) if waves(c, p) <= 1.0]
        if one_wave:
            return one_wave[0]
    return base


def untuned_defers_to(p: GemmProblem) -> str | None:
    """The backend to serve ``p`` instead of this one when nothing is tuned (dispatch's
    safe default), from where the Triton default lost to cuBLASLt on the H200: grids still
    over one wave after ``default_config`` (34816x5120 per_tensor, 2.06 waves: 54.07 vs
    48.84 us at M = 1, results/chain_pdl_prefetch_H200_2026-11-30.json), per_tensor at
    M >= 32 (8 of 9 tower shapes, 0.69-0.98x) and every W8A8 scheme at M = 64 (0.41-0.95x
    where it lost; results/gemm_per_tensor_H200_2026-11-29.json,
    gemm_other_schemes_H200_2026-11-29.json). Choosing cuBLASLt cannot lose to it."""
    if p.scheme is Scheme.WEIGHT_ONLY:
        return None  # cuBLASLt cannot serve it
    if waves(default_config(p), p) > 1.0 or p.m >= 64:
        return "cublaslt"
    if p.scheme is Scheme.PER_TENSOR and p.m >= 32:
        return "cublaslt"
    return None


def programs_per_sm(cfg: dict, p: GemmProblem) -> int:
    """Programs of ``cfg`` resident per SM, from pipelined shared memory: the binding limit
    for the BLOCK_N 64 x BLOCK_K 256 tiles, whose compiled sizes this matches within 3%
    (sm_90 builds by kernels/offline.py; tests/test_offline_sm90.py), weight_only at M >= 32
    excepted. Other tiles compile up to 32% smaller than this estimate (fewer buffers), so
    it is only used for those."""
    x_item = 1 if x_is_fp8(p.scheme, p.act_dtype == FP8_DTYPE, cfg.get("prequant", False)) else 2
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
    if p.scheme is Scheme.WEIGHT_ONLY:
        return []  # its W staging compiles smaller than programs_per_sm assumes (M = 32)
    base = _tile_default(p)
    floor = wave_fill(base, p) + 0.1
    same_tile = ("block_n", "block_k", "num_warps", "prequant")
    best: dict[bool, tuple] = {}  # one wave or not -> (key, cfg)
    for cfg in _candidates(p, base)[1:]:
        if any(cfg[f] != base[f] for f in same_tile) or wave_fill(cfg, p) < floor:
            continue
        key = (wave_fill(cfg, p), -abs(cfg["split_k"] - base["split_k"]), cfg["num_stages"])
        family = waves(cfg, p) <= 1.0
        if family not in best or key > best[family][0]:
            best[family] = (key, cfg)
    return [best[f][1] for f in (True, False) if f in best]


def configs(p: GemmProblem) -> list[dict]:
    """The search space the tuner walks, likeliest first (the default, then tiles near it).

    Pruned: configs whose pipelined tiles exceed shared memory, and split-K values that
    leave fewer than 2 K steps per split or give under half / over 8x the SM count."""
    return _candidates(p, default_config(p))


def _candidates(p: GemmProblem, base: dict) -> list[dict]:
    """``configs`` around ``base`` (first)."""
    block_m = block_m_for(p.m)
    prequants = (False, True) if p.scheme in (Scheme.PER_TENSOR, Scheme.BLOCK128) else (False,)
    out = [base]
    for block_n, block_k in ((64, 256), (32, 256), (64, 512), (128, 256), (64, 128), (32, 512)):
        tiles = -(-p.n // block_n) * -(-p.m // block_m)
        k_iters = -(-p.k // block_k)
        for split in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16):
            if split > 1 and k_iters // split < 2:
                continue
            if not (H200_SMS // 2 <= tiles * split <= 8 * H200_SMS) and split > 1:
                continue
            for stages in (4, 3):
                for pre in prequants:
                    cfg = {"block_n": block_n, "block_k": block_k, "split_k": split,
                           "num_warps": 8 if block_n == 128 else 4, "num_stages": stages,
                           "prequant": pre}
                    if smem_bytes(cfg, block_m) <= _SMEM_BUDGET and cfg not in out:
                        out.append(cfg)
    # Near the default first: same tile, then split-K closest to the default's.
    out[1:] = sorted(out[1:], key=lambda c: (
        (c["block_n"], c["block_k"]) != (base["block_n"], base["block_k"]),
        abs(c["split_k"] - base["split_k"]), c["num_stages"] != base["num_stages"]))
    return out


def x_is_fp8(scheme: Scheme, act_is_fp8: bool, prequant: bool) -> bool:
    """Whether the GEMM kernel reads FP8 x (given, or from the pre-pass) or quantizes it."""
    if scheme is Scheme.PER_TENSOR:
        return act_is_fp8 or prequant
    return scheme is Scheme.CHANNEL_TOKEN or (scheme is Scheme.BLOCK128 and prequant)


def _prepare(weight: Fp8Weight) -> dict:
    if weight.scheme is Scheme.BLOCK128:
        ws = weight.scale.float().contiguous()
    else:
        ws = weight.channel_scale()
    return {"w": weight.data.contiguous(), "ws": ws, "counters": None}


def _counters(packed: dict, need: int, device: torch.device) -> torch.Tensor:
    c = packed["counters"]
    if c is None or c.numel() < need:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "split-K counters must be allocated before CUDA graph capture: "
                "run the layer once eagerly (warm-up) with the same M first"
            )
        c = torch.zeros(max(need, 1024), dtype=torch.int32, device=device)
        packed["counters"] = c
    return c


def _run(x, weight, packed, *, act_scale=None, bias=None, out_dtype=torch.bfloat16, config=None,
         out=None):
    from ..kernels import fp8_gemm

    scheme = weight.scheme
    m = x.shape[0]
    cfg = config or default_config(GemmProblem(m, weight.n, weight.k, scheme))
    block_n, block_k = cfg["block_n"], cfg["block_k"]
    if scheme is Scheme.BLOCK128 and (128 % block_n or block_k % 128):
        raise ValueError(f"block128 needs BLOCK_N dividing 128 and BLOCK_K a multiple of 128: {cfg}")
    xs, xs_stride = packed["ws"], 0  # xs: any valid pointer when unused
    x_fp8 = x_is_fp8(scheme, x.dtype == FP8_DTYPE, cfg.get("prequant", False))
    if scheme is Scheme.PER_TENSOR:
        if x.dtype == FP8_DTYPE:
            xs = act_scale.float().reshape(1)
        else:
            static = act_scale if act_scale is not None else weight.act_scale
            if static is None:  # dynamic per-tensor: one global amax first
                static = (x.abs().amax().float() / FP8_MAX).clamp_min(MIN_SCALE)
            xs = static.float().reshape(1)
            if x_fp8:  # the pre-pass
                x, _ = quantize_act(x, scheme, xs)
    elif x_fp8:  # channel_token, or block128 with the pre-pass
        x, xs = quantize_act(x, scheme)
        xs_stride = xs.stride(0) if xs.dim() == 2 else 1
    block_m = block_m_for(m)
    grid_m = -(-m // block_m)
    if out is None:
        y = torch.empty(m, weight.n, dtype=out_dtype, device=x.device)
    else:
        if out.shape != (m, weight.n) or out.dtype != out_dtype or out.stride(1) != 1:
            raise ValueError(
                f"out must be ({m}, {weight.n}) {out_dtype} with unit column stride, got "
                f"{tuple(out.shape)} {out.dtype} strides {out.stride()}"
            )
        y = out
    part = counters = None
    if cfg["split_k"] > 1:
        part = torch.empty(cfg["split_k"], grid_m * block_m, weight.n, dtype=torch.float32,
                           device=x.device)
        counters = _counters(packed, -(-weight.n // block_n) * grid_m, x.device)
    fp8_gemm.launch(
        packed["w"], x, y, packed["ws"], xs, bias, part, counters,
        scheme_id=_SCHEME_ID[scheme], x_fp8=x_fp8, block_n=block_n, block_m=block_m,
        block_k=block_k, split_k=cfg["split_k"], num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        ws_row_stride=packed["ws"].stride(0) if scheme is Scheme.BLOCK128 else 0,
        xs_row_stride=xs_stride, prefetch=cfg.get("prefetch", 0), pdl=cfg.get("pdl", False),
    )
    return y


def _precompile(jobs: list):
    """Build the GEMM variants of ``jobs`` in parallel processes into triton's on-disk cache,
    so the tuner's first launch of each finds it there (see kernels/offline.py)."""
    from ..kernels import offline

    return offline.precompile(jobs)


BACKEND = Backend(
    name="triton",
    # Our GEMM kernel, plus the per-token pre-pass (channel_token).
    kernel_family=r"_fp8_gemm_decode_kernel|_fp8_act_quant_kernel",
    description="fp8tower's Triton decode GEMMs (swap-AB, split-K, fused activation quant)",
    unavailable_reason=_unavailable,
    check=_check,
    prepare=_prepare,
    run=_run,
    configs=configs,
    default_config=default_config,
    priority_configs=wave_fits,
    precompile=_precompile,
    untuned_defers_to=untuned_defers_to,
)
