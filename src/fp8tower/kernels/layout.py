"""Tile-major weights: the layout the GEMM kernels read fastest (pure torch, no triton).

A decode GEMM reads a (BLOCK_N x BLOCK_K) tile of W per step. Row-major, that is BLOCK_N
pieces of BLOCK_K bytes, K bytes apart; tile-major, one contiguous run. H200 2026-12-01
(benchmarks/bench_layout.py, results/tile_major_H200_2026-12-01/call3/layout.json): a plain
read of 128 x 256 tiles, one program per tile, 8 warps, reached 92.6% of the read ceiling
tile-major against 76.3% row-major at 34816x5120, 98.3 / 92.5% at 65536x5120.
"""

from __future__ import annotations

import torch

from .. import env


def tile_major_enabled() -> bool:
    """``FP8TOWER_TILE_MAJOR=0``: no second, tile-major copy of any weight. The tuner does
    not time tile-major configs, and a cached one runs over the row-major weights (the same
    bits, the same kernel otherwise)."""
    return env.flag("FP8TOWER_TILE_MAJOR", True)


def tile_major(w: torch.Tensor, block_n: int, block_k: int, k_multiple: int | None = None) -> torch.Tensor:
    """W (N, K) -> (cdiv(N, BLOCK_N) * KP / BLOCK_K * BLOCK_N, BLOCK_K), same dtype: the
    (BLOCK_N x BLOCK_K) tiles of each row of tiles in K order, each contiguous; zero-padded
    to whole tiles and to KP = K rounded up to ``k_multiple`` (default BLOCK_K) columns.
    Tile (i, j) is rows (i * KP / BLOCK_K + j) * BLOCK_N .. + BLOCK_N - 1."""
    if w.dim() != 2 or w.element_size() != 1:
        raise ValueError(f"expected an (N, K) tensor of 1-byte elements, got {tuple(w.shape)} {w.dtype}")
    k_multiple = k_multiple or block_k
    if k_multiple % block_k:
        raise ValueError(f"k_multiple={k_multiple} must be a multiple of block_k={block_k}")
    n, k = w.shape
    tn, kp = -(-n // block_n), -(-k // k_multiple) * k_multiple
    buf = torch.zeros(tn * block_n, kp, dtype=torch.uint8, device=w.device)
    buf[:n, :k] = w.view(torch.uint8)
    return (buf.view(tn, block_n, kp // block_k, block_k).permute(0, 2, 1, 3).contiguous()
            .view(-1, block_k).view(w.dtype))
