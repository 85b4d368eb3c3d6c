"""weight_only's kernel variants (issue #12): WO_MODE 1 (fp16 MMA, x scaled per token and K
step by a power of two), 2 (x split into two FP8 parts in the GEMM, FP8 MMAs) and the
pre-pass split ("prequant": two FP8 rows a token, block128's grouped path), on the CPU
interpreter against the float64 reference."""

import pytest
import torch

from fp8tower.backends import triton_gemm
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import Scheme, quantize_weight, sqnr_db

pytest.importorskip("triton")
from fp8tower.kernels.fp8_gemm import _round_e4m3_emulated


def _x(m, k, spread, seed):
    """bf16 activations whose per-row magnitudes spread over ``spread`` binades (fp16's
    range is 2^-24..65504: spread 60 with rows up to 2^30 does not fit without scaling)."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.linspace(-spread / 2, spread / 2, m).exp2()[:, None]
    x = torch.randn(m, k, generator=g) * rows
    x[:, 1::7] *= 1e-6  # small elements next to large ones in every K tile
    if m > 1:
        x[0] = 0.0  # an all-zero row (clamped scales)
    return x.bfloat16()


@pytest.mark.parametrize("mode", [1, 2, "prequant"])
@pytest.mark.parametrize("m", [1, 3, 16, 33])
@pytest.mark.parametrize("split_k", [1, 3])
def test_weight_only_modes(interpret, mode, m, split_k):
    n, k = 200, 328  # masked tiles, partial K blocks
    w = quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(m)) * 0.02,
                        Scheme.WEIGHT_ONLY)
    x = _x(m, k, spread=60, seed=m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    cfg = {"block_n": 64, "block_k": 128, "split_k": split_k, "num_warps": 4,
           "num_stages": 2, "prequant": False, "wo_mode": mode}
    if mode == "prequant":  # x split into two FP8 rows a token by the pre-pass
        cfg = {**cfg, "prequant": True, "block_k": 256}
        del cfg["wo_mode"]
    out = torch.full((m, n), float("nan"), dtype=torch.float32)
    triton_gemm._run(x, w, triton_gemm.BACKEND.packed_for(w), out_dtype=torch.float32,
                     config=cfg, out=out)
    assert bool(torch.isfinite(out[1:] if m > 1 else out).all()), "unwritten outputs"
    if m > 1:
        assert bool((out[0] == 0).all()), "an all-zero row must give zeros"
    # Per row (rows differ by up to 2^60 in magnitude): each token's own SQNR.
    for r in range(1 if m > 1 else 0, m):
        db = sqnr_db(ref[r], out[r])
        # Both are exact but for elements far below their row's max (1e-6 x here): what
        # remains is accumulation order (measured 138-145 dB, as WO_MODE 0).
        assert db >= 100.0, f"mode {mode} row {r}: {db:.1f} dB"


# the interpreter's numpy warns on inf - inf (NaN, as on the GPU)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("mode", [1, 2, "prequant"])
def test_weight_only_infinite_activation_is_not_made_finite(interpret, mode):
    """A token whose x holds an inf gives a non-finite output row in every way of taking x
    (the split's FP8 casts would saturate it: its scale is NaN instead); the others stay
    finite."""
    m, n, k = 3, 64, 256
    w = quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.02,
                        Scheme.WEIGHT_ONLY)
    x = _x(m, k, spread=4, seed=1)
    x[1, 5] = float("inf")
    cfg = {"block_n": 64, "block_k": 128, "split_k": 1, "num_warps": 4, "num_stages": 2,
           "prequant": mode == "prequant"}
    if mode != "prequant":
        cfg["wo_mode"] = mode
    out = triton_gemm._run(x, w, triton_gemm.BACKEND.packed_for(w), out_dtype=torch.float32,
                           config=cfg)
    assert not bool(torch.isfinite(out[1]).any()), mode
    assert bool(torch.isfinite(out[2]).all()), mode


def test_round_e4m3_emulated_matches_torch(interpret):
    """The interpreter-only rounding (mode 2) agrees with torch's fp32 -> e4m3 cast,
    carries into the exponent included."""
    import triton
    import triton.language as tl

    @triton.jit
    def k(x_ptr, y_ptr, n: tl.constexpr):
        o = tl.arange(0, n)
        tl.store(y_ptr + o, _round_e4m3_emulated(tl.load(x_ptr + o)))

    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4000, generator=g) * 40, torch.tensor([7.935, 0.0, -1e-4,
                   2 ** -10, 3 * 2 ** -11, 255.9, -447.0])])
    x = torch.cat([x, torch.zeros(4096 - x.numel())])
    y = torch.empty_like(x)
    k[(1,)](x, y, 4096)
    assert torch.equal(y, x.to(torch.float8_e4m3fn).float())
