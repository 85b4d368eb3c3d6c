"""The cuBLASLt baseline without its wrapper's extra launches, against the wrapper as it was.

Until 2026-12-06 fp8tower's cuBLASLt path ran, beside its activation quant and the GEMM,
block128: torch.cat padding of x and its scales to 16 rows at M < 16 (zeros, cat, ones,
cat) and a copy of the scales into the M-major layout (every M); per_tensor with a scale per
channel (a merged group's) and a static activation scale: an expand().contiguous() of that
scale at M > 1. The benchmark audit found the block128 cuBLASLt arms faster at M = 16 than
at M <= 8 (e.g. deep_default_H200_2026-12-02/call3/untuned.json, 1024x4096: 22.4 us at
M = 1-8, 17.4 at M = 16). The quant launch now writes both layouts itself
(backends/cublaslt.py). Arms, per shape and M, on the tuner's operands (cold L2, CUDA graph,
time_cuda_graph), alternated ABBA over --rounds:

  glue    the old wrapper, reproduced here (_old_run)
  direct  backends/cublaslt.py as it is

Each row: both medians, direct / glue, and whether the outputs are bit-identical (they must
be: the same quantization and the same GEMM).

    PYTHONPATH=src python3 benchmarks/bench_cublaslt_glue.py --json $OUT/glue.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from fp8tower import backends, provenance
from fp8tower.backends import act_quant
from fp8tower.formats import Scheme
from fp8tower.problem import GemmProblem
from fp8tower.tuning import search
from fp8tower.tuning.timer import l2_cache_bytes, rotation_copies, time_cuda_graph

# the merged 27B tower's GEMM shapes (N x K), all multiples of 128 (cuBLASLt block-wise)
SHAPES = ("16384x5120", "5120x6144", "14336x5120", "12288x5120", "1024x5120", "5120x17408")
MS = (1, 8, 16, 32)


def _old_run(x, weight, packed, out_dtype):
    """backends/cublaslt.py's _run as of 2026-12-05 (bf16 x), for the A/B."""
    scheme = weight.scheme
    xq, sa = act_quant.for_gemm(x, weight, None)
    scale_b = packed["scale_b"]
    if scheme is Scheme.BLOCK128:
        import torch.nn.functional as F

        m = xq.shape[0]
        mp = -(-m // 16) * 16
        if mp != m:
            xq = torch.cat([xq, xq.new_zeros(mp - m, xq.shape[1])])
            sa = torch.cat([sa, sa.new_ones(mp - m, sa.shape[1])])
        sa_mm = torch.empty_strided(sa.shape, (1, mp), dtype=torch.float32, device=sa.device)
        sa_mm.copy_(sa)
        return F.scaled_mm(xq, packed["wt"], sa_mm, F.ScalingType.BlockWise1x128, scale_b,
                           F.ScalingType.BlockWise128x128, output_dtype=out_dtype)[:m]
    sa = sa.reshape(-1, 1).expand(xq.shape[0], 1).contiguous()
    return torch._scaled_mm(xq, packed["wt"], scale_a=sa, scale_b=scale_b, out_dtype=out_dtype)


def _arm_call(arm: str, be, x, weights, out_dtype):
    def make(i):
        w = weights[i]
        packed = be.packed_for(w)
        if arm == "glue":
            return lambda: _old_run(x, w, packed, out_dtype)
        return lambda: be.run(x, w, packed, act_scale=None, bias=None, out_dtype=out_dtype)
    return make


def run_cell(p: GemmProblem, rounds: int) -> dict:
    be = backends.get("cublaslt")
    dev = torch.device("cuda")
    copies = rotation_copies(p.weight_bytes(), l2_cache_bytes(dev))
    x, _, weights = search.tuning_operands(p, dev, copies)
    arms = ("glue", "direct")
    times: dict[str, list[float]] = {a: [] for a in arms}
    for r in range(rounds):
        for arm in arms if r % 2 == 0 else arms[::-1]:  # ABBA: a drift favours neither
            t = time_cuda_graph(_arm_call(arm, be, x, weights, p.out_dtype), copies)
            times[arm].append(t.median_us)
    w = weights[0]
    y_old = _old_run(x, w, be.packed_for(w), p.out_dtype)
    y_new = be.run(x, w, be.packed_for(w), act_scale=None, bias=None, out_dtype=p.out_dtype)
    med = {a: statistics.median(v) for a, v in times.items()}
    return {"key": p.key(), "scheme": p.scheme.value, "n": p.n, "k": p.k, "m": p.m,
            "channel_weight_scale": p.channel_weight_scale, "copies": copies,
            "glue_us": round(med["glue"], 3), "direct_us": round(med["direct"], 3),
            "direct_over_glue": round(med["direct"] / med["glue"], 4),
            "rounds_us": {a: [round(v, 3) for v in vs] for a, vs in times.items()},
            "bit_identical": bool(torch.equal(y_old, y_new))}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--m", default=",".join(map(str, MS)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    cap = torch.cuda.get_device_capability()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    cells = [GemmProblem(m, n, k, Scheme.BLOCK128, capability=cap)
             for n, k in shapes for m in ms]
    # per_tensor with a scale per channel and a static x scale (a merged group's), M > 1
    cells += [GemmProblem(m, n, k, Scheme.PER_TENSOR, capability=cap,
                          channel_weight_scale=True, static_act_scale=True)
              for n, k in shapes[:2] for m in ms if m > 1]
    rows = []
    for p in cells:
        rows.append(run_cell(p, args.rounds))
        r = rows[-1]
        print(f"{r['key']}: glue {r['glue_us']:.2f} us, direct {r['direct_us']:.2f} us, "
              f"{r['direct_over_glue']:.3f}, bit-identical {r['bit_identical']}", flush=True)
    out = {"record": provenance.record(), "rounds": args.rounds, "rows": rows}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
