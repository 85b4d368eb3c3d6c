"""Does the weight layout cap a decode GEMM's read bandwidth? (issue #12)

The decode GEMMs (Triton, cuBLASLt, stream) all read their weights at ~82% of the read
ceiling on the big 27B shapes, the 178 MB 34816x5120 as much as the 84 MB 16384x5120 (H200
2026-12-01, stream_H200_2026-12-01/): a steady-state loss, not a per-kernel one. They read
a (BLOCK_N x BLOCK_K) tile per step: BLOCK_N pieces of BLOCK_K bytes, K bytes apart. The
read ceiling reads contiguous 8 KB blocks. This reads the same bytes both ways, with nothing
else in the kernel (Triton; cold L2, one CUDA graph of rotated copies, tuning's timer):

- ``rows``: program t streams tile t's (128 x 256 B) pieces, K-step by K-step, of an (N, K)
  row-major matrix (what the GEMMs do);
- ``packed``: the same tiles stored tile-major (kernels/layout.tile_major: each step's 32 KB
  contiguous);
- grids: one program per tile, or one per SM looping over tiles.

    python benchmarks/bench_layout.py --json benchmarks/results/layout_H200.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton
import triton.language as tl

from fp8tower import provenance
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.timer import L2_FACTOR, l2_cache_bytes, rotation_copies, time_cuda_graph


@triton.jit
def _tile_read(p, out, n_tiles, K4, KB, PACKED: tl.constexpr, BN: tl.constexpr, BK4: tl.constexpr):
    """XOR of int32 words: tiles pid, pid + G, ... of BN rows x (BK4 words) per step (offsets in
    32 bits: the buffers stay below 8 GB)."""
    r = tl.arange(0, BN)[:, None]
    c = tl.arange(0, BK4)[None, :]
    acc = tl.zeros((BN, BK4), tl.int32)
    for t in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        for s in range(KB):
            if PACKED:
                off = (t * KB + s) * (BN * BK4) + r * BK4 + c
            else:
                off = (t * BN + r) * K4 + s * BK4 + c
            acc ^= tl.load(p + off)
    tl.store(out + tl.program_id(0), tl.xor_sum(tl.xor_sum(acc, 1), 0))


def time_read(bufs, out, n, k, layout, grid, warps, bn=128, bk=256):
    """Median us of one tile read over the rotated copies ``bufs``."""
    def make(j):
        return lambda: _tile_read[(grid,)](bufs[j], out, n // bn, k // 4, k // bk,
                                           PACKED=layout == "packed", BN=bn, BK4=bk // 4,
                                           num_warps=warps)
    return time_cuda_graph(make, len(bufs), replays=10).median_us


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--shapes", default="16384x5120,5120x6144,34816x5120,65536x5120")
    ap.add_argument("--warps", default="4,8")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_layout needs a CUDA GPU")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ceilings = read_ceiling()
    ceiling = max(ceilings.values())
    res = {**provenance.record(), "read_ceiling_gbs": ceilings, "rows": []}
    l2 = l2_cache_bytes()
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        bn, bk = 128, 256
        assert n % bn == 0 and k % bk == 0, shape
        copies = rotation_copies(n * k, l2)
        cold = copies * n * k > L2_FACTOR * l2  # else partly warm: no fraction of the ceiling
        bufs = [torch.randint(-2**31, 2**31 - 1, (n * k // 4,), dtype=torch.int32, device="cuda")
                for _ in range(copies)]
        out = torch.empty(n // bn, dtype=torch.int32, device="cuda")
        for layout in ("rows", "packed"):
            for grid_kind in ("tiles", "sms"):
                grid = n // bn if grid_kind == "tiles" else min(sms, n // bn)
                for warps in map(int, args.warps.split(",")):
                    us = time_read(bufs, out, n, k, layout, grid, warps)
                    at = n * k / ceiling / 1e3
                    row = {"n": n, "k": k, "layout": layout, "grid": grid_kind, "warps": warps,
                           "us": round(us, 3), "copies": copies, "cold": cold,
                           "pct_ceiling": round(100 * at / us, 1) if cold else None,
                           "beyond_bytes_us": round(us - at, 3) if cold else None}
                    res["rows"].append(row)
                    print(row, flush=True)
        del bufs
        torch.cuda.empty_cache()
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
