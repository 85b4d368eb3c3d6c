"""A launch plan launches directly only when it can bind EVERY kernel parameter by name
(nn/plan.py, DirectLaunch._bind): a parameter left to its default silently sends each call
back through Triton's generic launcher (measured on the H200, 2026-11-30: a WO_MODE default
made per_tensor plans cost 43.5 us per call instead of ~19; results/host_*_2026-11-30.json).
These check, for every scheme and option, that the launch arguments cover the kernels'
parameters."""

import pytest
import torch

pytest.importorskip("triton")

from fp8tower.formats import FP8_DTYPE, Scheme
from fp8tower.kernels import act_quant, fp8_gemm
from fp8tower.kernels.configs import SCHEME_ID


def _covered(jitfn, args, kwargs) -> set[str]:
    names = list(jitfn.arg_names)
    return set(names[: len(args)]) | {k for k in kwargs if k in names}


@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize("opts", [{}, {"prefetch": 2, "pdl": False}, {"wo_mode": 2}])
@pytest.mark.parametrize("split", [1, 2])
def test_gemm_launch_binds_every_parameter(scheme, opts, split):
    n, k, m = 128, 256, 3
    w = torch.zeros(n, k, dtype=FP8_DTYPE)
    x = torch.zeros(m, k, dtype=torch.bfloat16)
    y = torch.empty(m, n, dtype=torch.bfloat16)
    ws = torch.ones(n)
    part = torch.empty(split, 16, n) if split > 1 else None
    cnt = torch.zeros(8, dtype=torch.int32) if split > 1 else None
    _, args, kwargs = fp8_gemm.launch_args(
        w, x, y, ws, ws, None, part, cnt, scheme_id=SCHEME_ID[scheme], x_fp8=False,
        block_n=64, block_m=16, block_k=128, split_k=split, num_warps=4, num_stages=3, **opts)
    missing = set(fp8_gemm._fp8_gemm_decode_kernel.arg_names) - _covered(
        fp8_gemm._fp8_gemm_decode_kernel, args, kwargs)
    assert not missing, f"left to their defaults (no direct launch): {sorted(missing)}"


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128])
def test_act_quant_launch_binds_every_parameter(scheme):
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    static = torch.tensor(0.01) if scheme is Scheme.PER_TENSOR else None
    _, args, kwargs, _, _ = act_quant.quantize_args(x, scheme, static)
    missing = set(act_quant._fp8_act_quant_kernel.arg_names) - _covered(
        act_quant._fp8_act_quant_kernel, args, kwargs)
    assert not missing, f"left to their defaults (no direct launch): {sorted(missing)}"


def test_defaults_follow_the_h200_variants_run():
    """kernels.configs.default_config's two measured moves (results/variants_H200_2026-11-30.json):
    a grid over one wave with no one-wave variant of its tile takes the fullest one-wave
    config of the tuner's space. weight_only up to M = 64 splits x in a pre-pass launched with
    PDL, on the W8A8 tile (configs.WO_SPLIT_MAX_M; results/b128_scales_H200_2026-12-01/,
    results/split_k_H200_2026-12-01/ for M = 64), from M = 16 with one scale a token
    (configs.WO_TOKEN_MIN_M, results/wo_token_H200_2026-12-04/call2/)."""
    from fp8tower.kernels.configs import configs, default_config, waves
    from fp8tower.problem import GemmProblem

    for m in (1, 16):
        p = GemmProblem(m, 34816, 5120, Scheme.PER_TENSOR, static_act_scale=True)
        cfg = default_config(p)
        assert waves(cfg, p) <= 1.0 and (cfg["block_k"], cfg["num_stages"]) == (128, 3)
        assert cfg in configs(p)
    for m in (1, 8, 16, 32, 64):  # M = 64 in one 128-row tile (configs.SPLIT_BLOCK_M_MAX)
        wo = default_config(GemmProblem(m, 10240, 5120, Scheme.WEIGHT_ONLY))
        assert wo["prequant"] and wo["pdl"], (m, wo)
        # one scale a token from M = 16 (configs.WO_TOKEN_MIN_M), per 1x128 group below
        assert wo.get("wo_mode") == (3 if m >= 16 else None), (m, wo)
    assert "prequant" not in default_config(GemmProblem(128, 10240, 5120, Scheme.WEIGHT_ONLY)) \
        or not default_config(GemmProblem(128, 10240, 5120, Scheme.WEIGHT_ONLY))["prequant"]
