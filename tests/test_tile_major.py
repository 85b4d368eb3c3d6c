"""Tile-major weights for the Triton GEMM (config ``packed``, kernels/layout.tile_major): the same
bits as the row-major layout, on the CPU interpreter and on the GPU, through the backend's
run and through a launch plan; the tuner times it as the winner's layout variant."""

import pytest
import torch

from fp8tower.backends import triton_gemm
from fp8tower.formats import Scheme, quantize_weight
from fp8tower.kernels.layout import tile_major
from fp8tower.problem import GemmProblem

gpu = pytest.mark.gpu
SCHEMES = [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128, Scheme.WEIGHT_ONLY]


@pytest.mark.parametrize("n,k,bn,bk,kmul", [(256, 512, 64, 256, None), (200, 400, 32, 128, None),
                                           (130, 16, 128, 512, None), (200, 5136, 128, 128, 256)])
def test_tile_major_layout(n, k, bn, bk, kmul):
    """Tile (i, j) is BLOCK_N x BLOCK_K contiguous bytes at rows (i * tk + j) * BLOCK_N,
    W[i BN + r, j BK + c] at row r, column c; zeros past N and past K rounded up to
    ``k_multiple`` (default BLOCK_K)."""
    w = torch.randint(0, 255, (n, k), dtype=torch.uint8).view(torch.float8_e4m3fn)
    p = tile_major(w, bn, bk, k_multiple=kmul)
    kp = -(-k // (kmul or bk)) * (kmul or bk)
    tn, tk = -(-n // bn), kp // bk
    assert p.shape == (tn * tk * bn, bk) and p.dtype == w.dtype
    full = torch.zeros(tn * bn, kp, dtype=torch.uint8)
    full[:n, :k] = w.view(torch.uint8)
    for i in range(tn):
        for j in range(tk):
            tile = p.view(torch.uint8)[(i * tk + j) * bn:(i * tk + j + 1) * bn]
            assert torch.equal(tile, full[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk])


def _operands(scheme, m, n, k, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.02
    wq = quantize_weight(w.to(device), scheme, act_scale=0.05 if scheme is Scheme.PER_TENSOR else None)
    return wq, (torch.randn(m, k, generator=g)).bfloat16().to(device)


def _both(scheme, m, n, k, cfg, device="cpu"):
    wq, x = _operands(scheme, m, n, k, device, seed=n + k + m)
    packed = triton_gemm.BACKEND.packed_for(wq)
    rows = triton_gemm._run(x, wq, packed, config=cfg)
    tiles = triton_gemm._run(x, wq, packed, config={**cfg, "packed": True})
    return rows, tiles


CFGS = [
    {"block_n": 64, "block_k": 128, "split_k": 1, "num_warps": 4, "num_stages": 2, "prequant": False},
    {"block_n": 32, "block_k": 256, "split_k": 2, "num_warps": 4, "num_stages": 2, "prequant": False,
     "prefetch": 2},
]


def test_tile_major_rejects_bad_input():
    with pytest.raises(ValueError, match="1-byte elements"):
        tile_major(torch.zeros(4, 4), 2, 2)
    with pytest.raises(ValueError, match="multiple of block_k"):
        tile_major(torch.zeros(4, 4, dtype=torch.uint8), 2, 4, k_multiple=6)


@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
@pytest.mark.parametrize("m,n,k", [(1, 256, 512), (3, 200, 400), (17, 130, 256)])
@pytest.mark.parametrize("cfg", CFGS, ids=["64x128", "32x256split2"])
def test_tile_major_same_bits_interpreter(interpret, scheme, m, n, k, cfg):
    if scheme is Scheme.BLOCK128:
        k = -(-k // 128) * 128  # whole 128-wide scale blocks
    rows, tiles = _both(scheme, m, n, k, cfg)
    assert not rows.isnan().any()
    torch.testing.assert_close(tiles, rows, rtol=0, atol=0)


def test_tile_major_through_a_launch_plan(interpret):
    """A launch plan (nn/plan.py binds the kernel's arguments once) with a tile-major config
    gives the row-major call's bits, and again when reused."""
    from fp8tower.nn import plan

    wq, x = _operands(Scheme.PER_TENSOR, 1, 192, 384, seed=5)
    packed = triton_gemm.BACKEND.packed_for(wq)
    ref = triton_gemm._run(x, wq, packed, config=CFGS[0])
    p = plan._triton_plan(x, wq, packed, triton_gemm.BACKEND, {**CFGS[0], "packed": True},
                          bias=None, out_dtype=torch.bfloat16, out_shape=(1, 192))
    torch.testing.assert_close(p.run(x), ref, rtol=0, atol=0)
    torch.testing.assert_close(p.run(x), ref, rtol=0, atol=0)


def test_layout_variants_and_dispatch_lookup():
    from fp8tower.tuning import search

    p = GemmProblem(1, 4096, 4096, Scheme.PER_TENSOR, capability=(9, 0))
    base = triton_gemm.BACKEND.configs(p)[3]
    (v,) = triton_gemm.BACKEND.layout_variants(p, base)
    assert v == {**base, "packed": True}
    assert triton_gemm.BACKEND.layout_variants(p, v) == []
    assert search.native_config(triton_gemm.BACKEND, p, search.normalize_config(v)) == (True, v)


def test_tile_major_off_means_no_second_copy(interpret, monkeypatch):
    """FP8TOWER_TILE_MAJOR=0: a tile-major config runs over the row-major weights (no copy
    made, the same bits); dispatch still recognizes a cached tile-major config."""
    monkeypatch.setenv("FP8TOWER_TILE_MAJOR", "0")
    rows, tiles = _both(Scheme.PER_TENSOR, 1, 256, 512, CFGS[0])
    torch.testing.assert_close(tiles, rows, rtol=0, atol=0)
    wq, _ = _operands(Scheme.PER_TENSOR, 1, 64, 128)
    packed = triton_gemm.BACKEND.packed_for(wq)
    w, n = triton_gemm.launch_weight(packed, {**CFGS[0], "packed": True}, 64)
    assert w is packed["w"] and n is None and "tile_major" not in packed
    from fp8tower.tuning import search

    p = GemmProblem(1, 4096, 4096, Scheme.PER_TENSOR, capability=(9, 0))
    v = {**triton_gemm.BACKEND.configs(p)[0], "packed": True}
    assert search.native_config(triton_gemm.BACKEND, p, search.normalize_config(v)) == (True, v)


@gpu
@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
@pytest.mark.parametrize("m", [1, 8, 32])
@pytest.mark.parametrize("n,k", [(5120, 6144), (1000, 1040), (16384, 5120)])
def test_tile_major_same_bits_gpu(scheme, m, n, k):
    cfgs = [{"block_n": 64, "block_k": 256, "split_k": 2, "num_warps": 4, "num_stages": 4,
             "prequant": scheme is Scheme.BLOCK128},
            {"block_n": 128, "block_k": 128, "split_k": 1, "num_warps": 8, "num_stages": 3,
             "prequant": False, "prefetch": 2, "pdl": scheme is not Scheme.PER_TENSOR}]
    if scheme is Scheme.BLOCK128:
        k = -(-k // 128) * 128
    for cfg in cfgs:
        rows, tiles = _both(scheme, m, n, k, cfg, device="cuda")
        torch.cuda.synchronize()
        assert not rows.isnan().any()
        torch.testing.assert_close(tiles, rows, rtol=0, atol=0)
