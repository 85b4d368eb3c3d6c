"""weight_only's x split into two FP8 parts is exact for bf16 x only, so fp16 / fp32 x take W
upcast (default and tuner space); the Triton backend refuses FP8 x for schemes whose scales it
makes itself (it quantized that x again and dropped the given scales: -30 dB)."""

import pytest
import torch

from fp8tower.backends import triton_gemm
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import FP8_DTYPE, Scheme, quantize_weight, sqnr_db
from fp8tower.kernels import configs
from fp8tower.problem import GemmProblem
from fp8tower.tuning import search


def _problem(act, m=4):
    return GemmProblem(m, 72, 256, Scheme.WEIGHT_ONLY, act_dtype=act, out_dtype=torch.float32,
                       capability=(9, 0))


@pytest.mark.parametrize("act", [torch.float16, torch.float32])
@pytest.mark.parametrize("m", [1, 4, 16, 32])
def test_fp16_and_fp32_x_are_never_split(act, m):
    p = _problem(act, m)
    offered = search._offered(triton_gemm.BACKEND, p).values()
    assert not configs.default_config(p)["prequant"]
    assert offered and all(not c.get("prequant") and not c.get("wo_mode") for c in offered)


def test_bf16_x_keeps_its_split_modes():
    offered = search._offered(triton_gemm.BACKEND, _problem(torch.bfloat16, 1)).values()
    assert {c.get("wo_mode", 0) for c in offered} >= {0, 2, 3, 4}


@pytest.mark.parametrize("act", [torch.float16, torch.float32])
def test_the_default_keeps_fp16_x_precision(interpret, act):
    torch.manual_seed(0)
    w = quantize_weight(torch.randn(72, 256) * 0.02, Scheme.WEIGHT_ONLY)
    x = torch.randn(4, 256).to(act)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    y = triton_gemm.BACKEND.run(x, w, triton_gemm.BACKEND.packed_for(w),
                                out_dtype=torch.float32,
                                config=configs.default_config(_problem(act)))
    assert sqnr_db(ref, y) > 120  # the bf16-exact split gave 62-69 dB


@pytest.mark.parametrize("scheme", [Scheme.CHANNEL_TOKEN, Scheme.BLOCK128])
def test_fp8_x_is_refused_where_triton_makes_the_scales(interpret, scheme):
    p = GemmProblem(1, 128, 256, scheme, act_dtype=FP8_DTYPE, capability=(9, 0))
    why = triton_gemm._check(p)
    assert why is not None and "not FP8" in why
