"""weight_only's kernel variants (issue #12): WO_MODE 1 (fp16 MMA, x scaled per token and K
step by a power of two), 2 (x split into two FP8 parts in the GEMM, FP8 MMAs) and the
pre-pass split ("prequant": two FP8 rows a token, block128's grouped path; "token": WO_MODE
3, one scale a row, the plain path), on the CPU interpreter against the float64 reference."""

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


def _cfg(mode, **tile):
    """The config of a mode of these tests: WO_MODE 1 / 2, the pre-pass split per 1x128
    group ("prequant") or per token ("token"), or that split in the GEMM at M = 1 ("row1")."""
    cfg = {"block_n": 64, "block_k": 128, "split_k": 1, "num_warps": 4, "num_stages": 2,
           "prequant": False, **tile}
    if mode in ("prequant", "token"):
        return {**cfg, "prequant": True, "block_k": 256, **({"wo_mode": 3} if mode == "token"
                                                            else {})}
    if mode == "row1":  # the per-token split in the GEMM, M = 1
        return {**cfg, "block_k": 256, "wo_mode": 4}
    return {**cfg, "wo_mode": mode}


# wo_mode 4 ("row1") is for one token only (test_weight_only_modes_refuse_...)
@pytest.mark.parametrize(("mode", "m"), [(mode, m) for mode in (1, 2, "prequant", "token", "row1")
                                         for m in (1, 3, 16, 33) if mode != "row1" or m == 1])
@pytest.mark.parametrize("split_k", [1, 3])
def test_weight_only_modes(interpret, mode, m, split_k):
    n, k = 200, 328  # masked tiles, partial K blocks
    w = quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(m)) * 0.02,
                        Scheme.WEIGHT_ONLY)
    x = _x(m, k, spread=60, seed=m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    cfg = _cfg(mode, split_k=split_k)
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
@pytest.mark.parametrize("mode", [1, 2, "prequant", "token"])
def test_weight_only_infinite_activation_is_not_made_finite(interpret, mode):
    """A token whose x holds an inf gives a non-finite output row in every way of taking x
    (the split's FP8 casts would saturate it: its scale is NaN instead); the others stay
    finite."""
    m, n, k = 3, 64, 256
    w = quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.02,
                        Scheme.WEIGHT_ONLY)
    x = _x(m, k, spread=4, seed=1)
    x[1, 5] = float("inf")
    cfg = _cfg(mode)
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


def test_weight_only_modes_refuse_what_they_cannot_run(interpret):
    """wo_mode 3 names the pre-pass's per-token split, 4 the same split in the GEMM at M = 1
    (configs.split_per_token): 3 without the pre-pass, 4 with it or at M > 1, either for
    another scheme, is an error naming it, not a silent upcast."""
    w = quantize_weight(torch.randn(64, 256, generator=torch.Generator().manual_seed(0)) * 0.02,
                        Scheme.WEIGHT_ONLY)
    packed = triton_gemm.BACKEND.packed_for(w)
    x = _x(2, 256, spread=4, seed=0)
    bad = [(x, {**_cfg("token"), "prequant": False}, "wo_mode 3 .* at M = 2 with prequant=False"),
           (x[:1], {**_cfg("row1"), "prequant": True}, "wo_mode 4 .* prequant=True"),
           (x, _cfg("row1"), "wo_mode 4 .* at M = 2")]
    for xx, cfg, match in bad:
        with pytest.raises(ValueError, match=match):
            triton_gemm._run(xx, w, packed, config=cfg)
    b = quantize_weight(torch.randn(128, 256) * 0.02, Scheme.BLOCK128)
    with pytest.raises(ValueError, match="cannot run block128"):
        triton_gemm._run(x, b, triton_gemm.BACKEND.packed_for(b), config=_cfg("token"))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("split_k", [1, 3])
@pytest.mark.parametrize("k", [328, 9000])
def test_weight_only_split_per_token_in_the_gemm_is_the_pre_pass_bit_for_bit(interpret, split_k,
                                                                            k):
    """wo_mode 4 (one token: its row's amax in the GEMM, the two parts as the MMA's first two
    rows) gives the pre-pass split's bits (wo_mode 3) on the same tile; an inf in x gives a
    non-finite row both ways. K = 9000: the amax in two 8192-element loads."""
    n = 200
    w = quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(k)) * 0.02,
                        Scheme.WEIGHT_ONLY)
    packed = triton_gemm.BACKEND.packed_for(w)
    x = torch.randn(1, k, generator=torch.Generator().manual_seed(1)).bfloat16()
    x[0, 7] = -300.0  # the max far from the first 8192 elements' too: x[0, -3] below
    x[0, -3] = 1000.0
    for xx in (x, torch.where(torch.arange(k) == 5, float("inf"), x)):
        outs = [triton_gemm._run(xx, w, packed, out_dtype=torch.float32,
                                 config=_cfg(mode, split_k=split_k)) for mode in ("token", "row1")]
        assert torch.equal(outs[0], outs[1]) or (not torch.isfinite(outs[0]).any()
                                                 and not torch.isfinite(outs[1]).any())
    assert torch.isfinite(outs[0]).sum() == 0


def test_weight_only_split_per_token_within_2e22_of_the_row_max(interpret):
    """The per-token split (wo_mode 3) against the per-group one where they differ: a 1x128
    group 2^-18 below the rest of its row is exact per group and within 2^-22 of the row's
    max per token (act_quant._split8_groups), so both stay far inside the contract's 40 dB."""
    n, k = 200, 328
    w = quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(3)) * 0.02,
                        Scheme.WEIGHT_ONLY)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(4))
    x[1, :128] *= 2.0**-18
    x = x.bfloat16()
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    db = {}
    for mode in ("prequant", "token"):
        out = triton_gemm._run(x, w, triton_gemm.BACKEND.packed_for(w), out_dtype=torch.float32,
                               config=_cfg(mode, split_k=2))
        db[mode] = [sqnr_db(ref[r], out[r]) for r in range(3)]
    assert min(db["prequant"]) >= 140.0 and min(db["token"]) >= 120.0, db
    assert db["token"][1] < db["prequant"][1] - 6.0, db  # the per-token split did run
