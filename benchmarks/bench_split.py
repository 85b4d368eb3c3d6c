"""Where a split-K decode GEMM's time goes, per shape (issue #12): the Triton default against
the same launch without its split-K reduction, the same tile unsplit, and a plain read of
the same weight bytes, in one run.

Arms (per_tensor, bf16 x quantized in the GEMM, M as given; each a chain of one shape over
rotated weight copies in one CUDA graph, cold L2, tuning's timer):
  default    kernels/configs.default_config (split-K S where N / BLOCK_N leaves SMs idle)
  pdl        the same with PDL_PAIR (launched with PDL, its first W tiles asked of L2 first)
  no_reduce  the default's grid and K ranges, but every split stores its partial straight
             into y (SPLIT_K constexpr 1): the output is wrong (a race), the time is the
             GEMM without the partial stores, counter atomics and the last arriver's sum
  k256_s4    BLOCK_N 64 x BLOCK_K 256 with split-K 1 (N / 64 programs), 4 stages
  k512_s4    BLOCK_K 512, split-K 1, 4 stages
  splitS     where the default takes no split-K (configs.unsplit_pays), the split-K it would
             take otherwise
  read       kernels/read_ceiling.py's streaming read of the N*K weight bytes (best of a few
             grids): what no one-kernel GEMM of these bytes beats without overlap

Its runs of 2026-12-01 (results/split_k_H200_2026-12-01/) also timed two other reductions,
taken out since: the last split by index waiting on the counter (call 2, "last_sums": no
faster), and the last split polling a partials buffer that holds a NaN sentinel where no
partial waits (calls 3-4, "poll": 0.2-0.6 us faster here, but 0.5-1.2 us slower in the
tuner's chain and in the tower step).

    python benchmarks/bench_split.py --json benchmarks/results/split_H200.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from fp8tower import provenance
from fp8tower.formats import FP8_DTYPE
from fp8tower.kernels import configs as kc
from fp8tower.kernels import fp8_gemm
from fp8tower.kernels.read_ceiling import streaming_read
from fp8tower.problem import GemmProblem
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.timer import l2_cache_bytes, rotation_copies, time_cuda_graph

SHAPES = "5120x6144,6144x5120,1024x5120,4096x4096,8192x8192,16384x5120,5120x2048,28672x4096"
# Split-K 1 tiles (BLOCK_K, stages), each as its own arm (6 and 8 stages of 256 were no
# faster than 4 on these shapes: results/split_k_H200_2026-12-01/call2/split.json).
UNSPLIT = ((256, 4), (512, 4))
READ_GRIDS = (132 * 4, 132 * 8, 132 * 16)


def _gemm_call(w, x, y, ws, xs, part, cnt, cfg, reduction: str):
    """One launch closure; ``reduction``: "sum" (the kernel's) or "none" (every split stores
    into y: timing only)."""
    grid, args, kwargs = fp8_gemm.launch_args(
        w, x, y, ws, xs, None, part, cnt, scheme_id=0, x_fp8=False, block_n=cfg["block_n"],
        block_m=kc.block_m_for(x.shape[0]), block_k=cfg["block_k"], split_k=cfg["split_k"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        prefetch=cfg.get("prefetch", 0), pdl=cfg.get("pdl", False))
    if reduction == "none":
        kwargs["SPLIT_K"] = 1  # the split grid, no reduction: each split writes y itself
    return lambda: fp8_gemm._fp8_gemm_decode_kernel[grid](*args, **kwargs)


def time_shape(n: int, k: int, m: int, replays: int) -> dict:
    p = GemmProblem(m, n, k, "per_tensor", static_act_scale=True)
    copies = rotation_copies(n * k, l2_cache_bytes())
    g = torch.Generator(device="cuda").manual_seed(n + k + m)
    ws_ = [(torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 32)
           .clamp(-448, 448).to(FP8_DTYPE) for _ in range(copies)]
    wscale = torch.full((n,), 1e-3, device="cuda")
    xscale = torch.full((1,), 0.02, device="cuda")
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    base = {f: v for f, v in kc.default_config(p).items() if f != "prequant"}
    arms = {"default": (base, "sum"), "pdl": ({**base, **kc.PDL_PAIR}, "sum"),
            "no_reduce": (base, "none")}
    for bk, stages in UNSPLIT:
        arms[f"k{bk}_s{stages}"] = ({**base, "block_n": 64, "block_k": bk, "split_k": 1,
                                     "num_stages": stages}, "sum")
    other = kc.balanced_split(p, 64, 256)  # the split-K before configs.unsplit_pays
    if base["split_k"] == 1 and other > 1 and (base["block_n"], base["block_k"]) == (64, 256):
        arms[f"split{other}"] = ({**base, "split_k": other}, "sum")
    row = {"n": n, "k": k, "m": m, "config": base, "bytes": p.bytes_moved()}
    for name, (cfg, reduction) in arms.items():
        if name == "no_reduce" and cfg["split_k"] == 1:
            continue
        bm = kc.block_m_for(m)
        part = torch.empty(cfg["split_k"], bm, n, device="cuda") if cfg["split_k"] > 1 else None
        cnt = torch.zeros(1024 + n // 16, dtype=torch.int32, device="cuda")
        t = time_cuda_graph(lambda i, cfg=cfg, red=reduction, part=part, cnt=cnt: _gemm_call(
            ws_[i], x, y, wscale, xscale, part, cnt, cfg, red), copies, replays=replays)
        row[name] = round(t.median_us, 2)
    bufs = [w.view(torch.float32).reshape(-1) for w in ws_]  # the same bytes, as float32
    best = None
    for grid in READ_GRIDS:
        out = torch.empty(grid, device="cuda")
        t = time_cuda_graph(lambda i, grid=grid, out=out: (lambda: streaming_read(bufs[i], out, grid)),
                            copies, replays=replays)
        best = t.median_us if best is None else min(best, t.median_us)
    row["read"] = round(best, 2)
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--m", default="1,16")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_split needs a CUDA GPU")
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
        ms = [int(v) for v in a.m.split(",")]
    except ValueError:
        sys.exit(f"--shapes wants NxK,... and --m integers, got {a.shapes!r} / {a.m!r}")
    ceilings = read_ceiling()
    ceiling = max(ceilings.values())
    rows = []
    for n, k in shapes:
        for m in ms:
            row = time_shape(n, k, m, a.replays)
            at_ceiling = row["bytes"] / ceiling / 1e3
            row["us_at_ceiling"] = round(at_ceiling, 2)
            rows.append(row)
            print(f"{n}x{k} M={m} ceiling {at_ceiling:.2f} us | " + " ".join(
                f"{f} {row[f]:.2f}" for f in row if isinstance(row[f], float)
                and f not in ("us_at_ceiling",)) + f" | split {row['config']['split_k']}", flush=True)
            with open(a.json, "w") as f:
                json.dump({**provenance.record(), "read_ceiling_gbs": ceiling, "rows": rows}, f,
                          indent=1)


if __name__ == "__main__":
    main()
