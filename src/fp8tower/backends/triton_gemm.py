"""Triton backend: our FP8 decode GEMMs (kernels/fp8_gemm.py; configs and sm_90 limits in
kernels/configs.py) for every scheme.

Activation quantization: per_tensor (static scale) is fused into the GEMM, or done by one
light pre-pass launch (config "prequant": the tuner keeps the faster); block128 can fuse it
too (1x128 groups are local to a K step) but the pre-pass measured faster (H200,
2026-11-29: 10240x5120 M=1 fused 148 us); channel_token needs each token's amax over all
of K first: the per-token pre-pass (kernels/act_quant.py), or config "fused_amax" (each
program takes its tokens' amax itself: one launch, the same bits), the default at M = 1,
where it runs within 3% of the pair (kernels/configs.FUSED_AMAX_MAX_M). weight_only up to
M = 64: x split exactly into two FP8 rows a token by the pre-pass, so its GEMM runs FP8 MMAs
(kernels/configs.WO_SPLIT_MAX_M), with scales per 1x128 group (block128's path) or, the
default from M = 16, one a token (channel_token's; configs.WO_TOKEN_MIN_M); at M = 1 that
per-token split can run in the GEMM too (config wo_mode 4); W upcast in the GEMM is a config.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from ..formats import FP8_DTYPE, Fp8Weight, Scheme, amax_scale
from ..kernels.configs import (
    H200_SMS,
    SCHEME_ID,
    block_m_for,
    configs,
    default_config,
    one_wave_fallback,
    priority_configs,
    refinements,
    small_m_deep,
    split_per_token,
    wave_fit_default,
    waves,
    x_is_fp8,
)
from ..kernels.layout import tile_major, tile_major_enabled
from ..problem import GemmProblem
from . import Backend
from .act_quant import quantize as quantize_act


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


# The default kernels launch with programmatic dependent launch (gdc_wait, launch_pdl),
# which triton has from 3.5: older ones fail to compile them (a packaging audit, 2026-12-05:
# 3.3 and 3.4 raise AttributeError / TypeError on gdc_launch_dependents).
MIN_TRITON = (3, 5)


# The distributions that install the `triton` module (PyTorch's nightlies and ROCm builds
# ship their own; a review, 2026-12-05): the first one installed gives the version.
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-windows")


@functools.cache
def _too_old() -> str | None:
    from ..provenance import package_version, release

    for dist in TRITON_DISTRIBUTIONS:
        version = package_version(dist, "")
        if version:
            break
    else:
        return None  # no metadata to read: not refused on a guess
    if release(version) < MIN_TRITON:
        return (f"triton {version} is too old: the kernels need triton >= "
                f"{'.'.join(map(str, MIN_TRITON))} (torch >= 2.9 ships one)")
    return None


def _unavailable() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install 'fp8tower[triton]')"
    too_old = _too_old()
    if too_old:
        return too_old
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
    if p.scheme in (Scheme.CHANNEL_TOKEN, Scheme.BLOCK128) and p.act_dtype == FP8_DTYPE:
        # _run would quantize the FP8 x again and drop its per-token / per-group scales
        return f"{p.scheme} takes bf16/fp16/fp32 activations here (it quantizes x itself), not FP8"
    return None


# The H100 SXM, as torch names it: 132 SMs like the H200; its read ceiling measured 3.15 TB/s
# (sessions 38-39) against the H200's 4.44-4.57.
H100_SXM = "NVIDIA H100 80GB HBM3"


def untuned_defers_to(p: GemmProblem, gpu: str | None = None) -> str | None:
    """The backend to serve ``p`` instead of this one when nothing is tuned (dispatch's
    safe default) on the GPU named ``gpu`` (dispatch.UNTUNED_RULE_GPUS; None: the CPU, which
    takes the H200's rule): the H200's rule with the deferrals measured on both GPUs
    (``_split_defers``), and on the H100 SXM its own too (``_h100_defers``). The H200's:
    cuBLASLt where the Triton default lost to it there (2026-12-01,
    results/split_k_H200_2026-12-01/call{1,2,3,5}/untuned.json: 21 shapes of Llama-3.1 8B / 70B
    (+ TP8 shards), Qwen3 8B / 32B / 30B-A3B x M = 1-64, each default against cuBLASLt):
    - per_tensor with a grid over one wave (51200x5120 0.92x at M = 8, 57344x8192 0.95x at
      M = 1) or at M >= 32 (0.66-0.98x on 14 of 21 shapes at M = 64);
    - except per_tensor at M = 32 and 64 where the default is one program per tile of BLOCK_N
      64 unsplit, 192-264 of them (0.73-1.0 wave at two an SM), K <= 5120: 12288 / 14336 /
      16384x5120 ran 1.07-1.19x cuBLASLt in three runs (H200 2026-12-02, results/
      deep_default_H200_2026-12-02/call3/, call5/); at M = 32 it lost on 15 of the 26 other
      shapes (0.85-0.99x), won by at most 3% on 5 smaller ones, and by 1.00-1.08x on the 4 of
      over 264 tiles with K <= 5120, which lost at M = 64 (0.94-0.98x);
    - per_tensor at M = 1 on the one-wave fallback tile (configs.one_wave_fallback: BLOCK_K
      128, x quantized in the GEMM as one row): 28672x4096 0.937-0.946x and 34816x5120
      0.976-0.998x in three runs (H200 2026-12-02, results/deep_default_H200_2026-12-02/
      call1-3/); at M = 2-16 the same tile ran 1.01-1.03x;
    - block128 at M = 64 with a grid over one wave (0.64-0.90x on all 6 such shapes; the
      one-wave ones 0.96-1.64x).
    - channel_token and block128 at M = 64 with K <= 1024 (8192x1024: 0.93x and 0.96-0.99x
      in three runs).
    channel_token otherwise never: the Triton default ran 1.03-2.6x cuBLASLt on the other 20
    shapes at M = 1-64 (10240x5120 at M = 64: 0.96-1.01x over three runs), over one wave
    too (28672x4096 1.28-1.51x), where the rule used to send every W8A8 scheme. Choosing
    cuBLASLt cannot lose to it."""
    if p.scheme is Scheme.WEIGHT_ONLY:
        return None  # cuBLASLt cannot serve it
    if gpu == H100_SXM and small_m_deep(p) is not None:
        return None  # its own small-M tile (untuned_config): 1.04-1.43x cuBLASLt where served
    if _split_defers(p) or (gpu == H100_SXM and _h100_defers(p)):
        return "cublaslt"
    if p.m >= 64 and p.k <= 1024:
        return "cublaslt"
    if p.scheme is Scheme.CHANNEL_TOKEN:
        return None
    cfg = default_config(p)
    over_one_wave = waves(cfg, p) > 1.0
    one_wave_tiles = (cfg["block_n"] == 64 and cfg["split_k"] == 1 and p.k <= 5120
                      and 192 <= -(-p.n // 64) <= 2 * H200_SMS and p.m <= 64)
    if p.scheme is Scheme.PER_TENSOR and (over_one_wave or (p.m >= 32 and not one_wave_tiles)):
        return "cublaslt"
    if p.scheme is Scheme.PER_TENSOR and p.m == 1 and one_wave_fallback(p):
        return "cublaslt"
    if p.scheme is Scheme.BLOCK128 and over_one_wave and p.m >= 64:
        return "cublaslt"
    return None


def untuned_config(p: GemmProblem, gpu: str | None = None) -> dict:
    """The config this backend serves ``p`` with when nothing is tuned, on the GPU named
    ``gpu`` (as ``untuned_defers_to``): ``default_config``, but on the H100 SXM the deep tile
    from the pre-pass pair at small M where it measured faster (configs.small_m_deep)."""
    deep = small_m_deep(p) if gpu == H100_SXM else None
    return deep if deep is not None else default_config(p)


def _h100_defers(p: GemmProblem) -> bool:
    """Where the Triton default that the H200's rule keeps lost to cuBLASLt by more than 2% on
    the H100 SXM (session 39, results/session39_2026-12-05/call3/rule_{1,2}.json: the 29 shapes
    x M = 1-64 x three schemes, two runs; the rule kept Triton in 536 of 609 cells, 1.32x
    cuBLASLt at the median, 0.945x at worst):
    - per_tensor on the one-wave fallback tile (BLOCK_K 128) at M >= 2, which the H200's rule
      keeps there: 28672x4096 0.968-0.974x at M = 2-16 (34816x5120 ran 1.05-1.07x: deferred
      with it, as at M = 1 on the H200);
    - per_tensor at M >= 16 on a split wave-fit default (the tile moved to 3 stages, split
      K): 10240x5120 0.975x, 10240x8192 0.977-0.979x (0.991-1.016x at M = 2-8); on the H200
      only its split-2 configs (``_split_defers``);
    - channel_token at M >= 64 where the default splits K over more than one wave (the
      split pays its reduction and fills no wave; ``waves``: 1.21): 10240x5120 0.945-0.948x
      (10240x8192 1.020-1.022x, deferred with it; on the H200 0.96-1.01x); its other split
      defaults at M = 64 (0.24-0.97 waves) ran 1.10-1.84x.
    - block128 at M >= 64 on a split-2 default whose K ends on half a BLOCK_K step:
      8192x29568 (Qwen2.5-72B's down_proj, 231 blocks of 128) 0.949x in call5/heldout.json,
      0.954x and 8192x29312 0.950x in call6/kstep.json, where the whole-step neighbours
      8192x29440 / 29696 / 28672 ran 1.02-1.06x and 5120x29568 (split 3) 1.16x; then on two
      shapes it was not fitted on (session 40, results/session40_2026-12-05/call1/
      heldout.json): 8192x13696 0.952x, 6144x13696 0.962x (GLM-4-9B's K).
    - block128 at M >= 64 on a split-2 default of one whole wave (over 0.9) with at most 16
      BLOCK_K steps a split: once cuBLASLt ran without its wrapper's extra launches (session
      45, results/session45_2026-12-06/call1/untuned_b128.json, call3/split2_b128.json, two
      runs), every such shape lost: 8192x3584 0.969 / 0.974x, 8192x8192 0.982 / 0.980x,
      8192x4096 0.955x, 8192x5120 0.973x; the nearest others won (8192x28672, 56 steps a
      split, 1.027-1.028x; 7168x8192, 0.85 waves, 1.009-1.011x). Fitted on those 4 shapes,
      not yet held out.
    - block128 at M = 32 on a split-2 wave-fit default (BLOCK_N 64, 3 stages; N = 8449 -
      11264, 133-176 tiles), against the lean cuBLASLt: 10240x8192 0.955 / 0.993x (session
      45, call1 / call3), 0.957x (session 47, call2), 0.968x (session 48, call1), 0.954x
      (results/session49_2026-12-06/call1/untuned.json), 0.981x (call2): past 2% in 4 of 6
      runs. On 8 shapes of the class (call2/b128_m32.json) the default ran 0.981-1.019x
      (10240x8192 0.981x, 9216x7168 1.015x, 8704x4096 1.019x): even at best, so the class
      defers (9216x4096 had won 1.019x in session 45's call3). On the H200 it ran
      1.05-1.08x (session 48, call4-6). At M = 16 the class won (1.02-1.10x), at M = 64 its
      6144x4096 / 5120 ran 1.00-1.08x: kept.
    Held out (session 40, call1/heldout.json, 26 shapes of Mistral-Large-2, Llama-3.1-405B
    TP8, Command-R+, Yi-1.5-34B, Gemma-3-27B, GLM-4-9B; this rule, with the deferral below
    dropped: its 12 cells timed as the arm "rule", the H200's rule, which runs the same
    default config there): Triton in 474 of 546 cells, 1.24x cuBLASLt at the median, none
    more than 1.3% behind (0.987x); the H200's rule lost there on channel_token 9216x7168 at
    M = 64 (0.925x), caught by the M >= 64 split deferral above, and on the two block128
    cells above.
    Dropped in session 40: per_tensor's plain default tile with K >= 8192 at M >= 8, fitted on
    one held-out shape (14336x8192 0.977-0.978x at M = 8 / 16 in session 39's call4). On the
    6 held-out shapes of that class the tile ran 1.012-1.120x (call1), and on N = 12288 /
    14336 / 16384 x K = 8192-12288 at M = 2-16, three runs, 0.991-1.045x (call2/kgrid_*.json),
    14336x8192 itself 1.019-1.021x at M = 8 / 16 (the same config 43.8 us against 45.1 in
    session 39, cuBLASLt 44.7 against 44.1): its loss was within two H100s' spread.
    Its other measured cells lost at most 1.7% in session 39 (per_tensor 3072x3072 at M = 8,
    0.983-0.985x; 14336x8192 at M = 2 / 4, 0.984-0.987x); in session 40 two lost 2.2-2.4%:
    per_tensor 9216x8192 at M = 8 0.978x (call3; 0.996-1.002x in call4) and 8704x3072 at
    M = 2 0.976-0.978x (call4/wfgrid_*.json), in classes whose other shapes ran up to 1.08x
    (not deferred: within the spread of two H100s). The deferrals give up some measured
    wins: e.g. per_tensor 3072x8192 at M = 16 1.149x, 2560x8192 1.077x, 34816x5120 at
    M = 2-16 1.05-1.07x (call5, call4, rule_*); 3584x12288 at M = 16 1.081x (session 40)."""
    if p.scheme is Scheme.PER_TENSOR and p.m >= 2 and one_wave_fallback(p):
        return True
    cfg = default_config(p)
    steps = -(-p.k // cfg["block_k"])
    if p.scheme is Scheme.BLOCK128 and p.m >= 64 and cfg["split_k"] == 2 and (
            p.k % cfg["block_k"] != 0 or (waves(cfg, p) > 0.9 and steps <= 2 * 16)):
        return True
    if cfg["split_k"] < 2:
        return False
    if p.scheme is Scheme.BLOCK128 and p.m == 32 and cfg["split_k"] == 2:
        return wave_fit_default(p)
    if p.scheme is Scheme.PER_TENSOR:
        return p.m >= 16 and wave_fit_default(p)
    return p.scheme is Scheme.CHANNEL_TOKEN and p.m >= 64 and waves(cfg, p) > 1.0


def _split_defers(p: GemmProblem) -> bool:
    """Split-K defaults that lost to cuBLASLt by more than 2% on the H100 SXM and the H200
    alike, deferred as classes:
    - per_tensor at M >= 16 on a split-2 wave-fit default (BLOCK_N 64 at 3 stages; N = 8449 -
      11264 at M = 16, and e.g. 6144 / 6656 at M = 17-31, which dispatch evaluates at 32):
      on the H100 10240x5120 0.975x, 10240x8192 0.977-0.979x (session 39, before the lean
      cuBLASLt, results/session39_2026-12-05/call3/rule_*.json; ``_h100_defers`` takes every
      split wave-fit default there); on the H200, against the lean cuBLASLt, 10240x5120 0.971
      / 0.975x past 2%, 10240x8192 0.984 / 0.990x within it (results/session48_2026-12-06/
      call5/untuned.json, call6/recheck.json; 10240x5120 0.978 / 0.986x at M = 8, not
      deferred). Fitted on that one N on the H200: the other split wave-fit defaults (e.g.
      3072xK, split 8) were not timed there at M = 16 and keep Triton. At M >= 32 the H200's
      rule defers them anyway.
    - block128 at M >= 64 on a split-2 default with at most 4 BLOCK_K steps a split (K <=
      2048), whatever the waves, against the lean cuBLASLt: on the H100 5120x2048 (0.61
      waves) 0.970 / 0.979x (session 45) and 0.975x, then DeepSeek-V3's 7168x2048 (0.85
      waves), held out, 0.913x (session 47, results/session47_2026-12-06/call2/
      untuned{,_deepseek}.json); on the H200 5120x2048 0.974 / 0.971x, 7168x2048 0.941 /
      0.947x (session 48, call5/untuned{,_deepseek}.json, call6/recheck.json). It gives up
      4096x2048 (0.48 waves: 1.007x on the H100, 1.001 / 0.998x on the H200)."""
    if p.scheme not in (Scheme.PER_TENSOR, Scheme.BLOCK128):
        return False
    cfg = default_config(p)
    if cfg["split_k"] != 2:
        return False
    if p.scheme is Scheme.PER_TENSOR:
        return p.m >= 16 and wave_fit_default(p)
    return p.m >= 64 and -(-p.k // cfg["block_k"]) <= 2 * 4


def _prepare(weight: Fp8Weight) -> dict:
    return {"w": weight.data.contiguous(), "ws": weight.kernel_scale(), "counters": None}


def launch_weight(packed: dict, cfg: dict, n: int) -> tuple[torch.Tensor, int | None]:
    """(w, n) for fp8_gemm.launch_args: the row-major weight and None, or with config
    ``packed`` the tile-major one for its tile (kernels/layout.tile_major) and N."""
    if cfg.get("packed") and tile_major_enabled():
        return _tile_major(packed, cfg["block_n"], cfg["block_k"]), n
    return packed["w"], None


def layout_variants(problem: GemmProblem, cfg: dict) -> list[dict]:
    """The config over tile-major weights (kernels/layout.tile_major), timed by the tuner for its
    winner. H200 2026-12-01 (results/tile_major_H200_2026-12-01/): the 27B merged tower with
    every GEMM tile-major, block128 2.524 -> 2.403 ms/step at M=1 (2.674 -> 2.520 at M=8),
    channel_token 2.313 -> 2.303, per_tensor unchanged (2.255 / 2.256); per GEMM up to 4%
    (per_tensor 34816x5120 M=1 47.08 -> 45.05 us), nothing on the small shapes. It costs a
    second copy of the layer's weights (the row-major one stays with the layer): block128 took
    it on 21 of 28 retuned 27B keys, the other schemes on 2-4 (call8/tuning_cache.json)."""
    return [] if cfg.get("packed") else [{**cfg, "packed": True}]


def _tile_major(packed: dict, block_n: int, block_k: int) -> torch.Tensor:
    tiles = packed.setdefault("tile_major", {})
    if (block_n, block_k) not in tiles:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("tile-major weights must be packed before CUDA graph capture: "
                               "run the layer once eagerly with the same config first")
        tiles[(block_n, block_k)] = tile_major(packed["w"], block_n, block_k)
    return tiles[(block_n, block_k)]


def split_buffers(packed: dict, cfg: dict, grid_m: int, block_m: int, n: int,
                  device: torch.device):
    """(partials, counters) of a launch of ``cfg``: a fresh fp32 partials buffer and the
    weight's per-tile counters (kernels/fp8_gemm.py's split-K); (None, None) unsplit."""
    if cfg["split_k"] == 1:
        return None, None
    part = torch.empty(cfg["split_k"], grid_m * block_m, n, dtype=torch.float32, device=device)
    return part, _counters(packed, -(-n // cfg["block_n"]) * grid_m, device)


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
    if x.stride(-1) != 1:
        # The kernels (and the pre-pass) read x's rows through stride(0) with unit column
        # stride: a transposed x (x.t().contiguous().t()) came out at -2 dB (CPU interpreter,
        # 2026-12-05). fp8_linear and the launch plans hand contiguous x: no copy there.
        x = x.contiguous()
    # The default of the call's own problem (x's dtype, the static scale): a bare
    # GemmProblem said bf16 x, and weight_only's fp16 / fp32 x got the bf16-only split
    # (62.8 dB against 141.6; configs.splits_x_exactly).
    cfg = config or default_config(GemmProblem.for_call(x, weight, out_dtype, act_scale))
    block_n, block_k = cfg["block_n"], cfg["block_k"]
    if scheme is Scheme.BLOCK128 and (128 % block_n or block_k % 128):
        raise ValueError(f"block128 needs BLOCK_N dividing 128 and BLOCK_K a multiple of 128: "
                         f"{cfg}")
    xs, xs_stride = packed["ws"], 0  # xs: any valid pointer when unused
    x_fp8 = x_is_fp8(scheme, x.dtype == FP8_DTYPE, cfg)
    per_token = split_per_token(scheme, cfg, m)  # weight_only's split: a scale a token
    if scheme is Scheme.WEIGHT_ONLY and x_fp8 and block_k % 128:
        raise ValueError(f"weight_only's split pre-pass needs BLOCK_K a multiple of 128: {cfg}")
    if scheme is Scheme.PER_TENSOR:
        if x.dtype == FP8_DTYPE:
            if act_scale is None:  # as act_quant.for_gemm (the other backends) says it
                raise ValueError(f"FP8 activations need their act_scale: per_tensor's "
                                 f"scalar; x is {x.dtype} {tuple(x.shape)}, act_scale None")
            xs = act_scale.float().reshape(1)
        else:
            static = act_scale if act_scale is not None else weight.act_scale
            if static is None:  # dynamic per-tensor: one global amax first
                static = amax_scale(x.abs().amax())
            xs = static.float().reshape(1)
            if x_fp8:  # the pre-pass
                x, _ = quantize_act(x, scheme, xs, pdl=cfg.get("pdl", False))
    elif x_fp8:  # channel_token, block128 or weight_only with the pre-pass
        x, xs = quantize_act(x, scheme, pdl=cfg.get("pdl", False), per_token=per_token)
        xs_stride = xs.stride(0) if xs.dim() == 2 else 1
    # weight_only's pre-pass: two rows a token
    block_m = block_m_for(x.shape[0], split=scheme is Scheme.WEIGHT_ONLY and x_fp8)
    grid_m = -(-x.shape[0] // block_m)
    if out is None:
        y = torch.empty(m, weight.n, dtype=out_dtype, device=x.device)
    else:
        if out.shape != (m, weight.n) or out.dtype != out_dtype or out.stride(1) != 1:
            raise ValueError(
                f"out must be ({m}, {weight.n}) {out_dtype} with unit column stride, got "
                f"{tuple(out.shape)} {out.dtype} strides {out.stride()}"
            )
        y = out
    part, counters = split_buffers(packed, cfg, grid_m, block_m, weight.n, x.device)
    w, n_packed = launch_weight(packed, cfg, weight.n)
    fp8_gemm.launch(
        w, x, y, packed["ws"], xs, bias, part, counters,
        scheme_id=SCHEME_ID[scheme], x_fp8=x_fp8, block_n=block_n, block_m=block_m,
        block_k=block_k, split_k=cfg["split_k"], num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        ws_row_stride=packed["ws"].stride(0) if scheme is Scheme.BLOCK128 else 0,
        xs_row_stride=xs_stride, prefetch=cfg.get("prefetch", 0), pdl=cfg.get("pdl", False),
        wo_mode=cfg.get("wo_mode", 0), n=n_packed,
    )
    return y


def _precompile(jobs: list):
    """Build the GEMM variants of ``jobs`` in parallel processes into triton's on-disk cache,
    so the tuner's first launch of each finds it there (see kernels/offline.py)."""
    from ..kernels import offline

    return offline.precompile(jobs)


BACKEND = Backend(
    name="triton",
    # Our GEMM kernel, plus the activation pre-pass (channel_token unless fused_amax).
    kernel_family=r"_fp8_gemm_decode_kernel|_fp8_act_quant_kernel",
    description="fp8tower's Triton decode GEMMs (swap-AB, split-K, fused activation quant)",
    unavailable_reason=_unavailable,
    check=_check,
    prepare=_prepare,
    run=_run,
    configs=configs,
    default_config=default_config,
    priority_configs=priority_configs,
    refinements=refinements,
    layout_variants=layout_variants,
    precompile=_precompile,
    untuned_defers_to=untuned_defers_to,
    untuned_config=untuned_config,
)
