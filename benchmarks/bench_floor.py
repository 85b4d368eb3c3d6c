"""The floor of a one-kernel-per-GEMM decode step: the tower's weights read, nothing else.

Issue #12's targets (27B merged tower, M=1: per_tensor <= 1.85 ms/step) sit close to its
bytes at the read ceiling (1.62 ms). This times what no GEMM kernel can beat when each GEMM
is its own kernel: the same step with every GEMM replaced by a plain streaming read of its
weights (kernels/read_ceiling.py, the ceiling's own kernel and grid), in the tower's order,
without and with its stand-ins between GEMMs (the same torch ops the tower runs). One CUDA
graph per step, weights far beyond L2 (cold), median of replays. The ``pdl`` rows use the
same read with programmatic dependent launch (trigger at its start, wait only before its one
store, DESIGN.md's calibration): what a step of GEMMs that overlap across kernel boundaries
could approach (the stand-ins, plain torch ops, still wait in full).

    python benchmarks/bench_floor.py --json benchmarks/results/floor_H200.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton
import triton.language as tl

from fp8tower import provenance
from fp8tower.kernels.read_ceiling import streaming_read
from fp8tower.tower.build import build_tower
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.timer import time_cuda_graph


@triton.jit
def _read_pdl(p, out, n, BLOCK: tl.constexpr):
    """kernels/read_ceiling.py's read, letting the next kernel launch at once and waiting for
    the previous one only before its store."""
    tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(p + offs, mask=offs < n, other=0.0)
    tl.extra.cuda.gdc_wait()
    tl.store(out + pid, tl.sum(acc))


def _read(buf, out, programs: int, pdl: bool):
    if pdl:
        _read_pdl[(programs,)](buf, out, buf.numel(), BLOCK=2048, num_warps=8, launch_pdl=True)
    else:
        streaming_read(buf, out, programs)


def step_fn(tower, with_standins: bool, programs: int, pdl: bool = False):
    """One decode step of reads (and stand-ins) over the tower's own weight tensors."""
    partial = torch.empty(programs, dtype=torch.float32, device="cuda")
    x = torch.randn(tower.m, max(s.mix.k for s in tower.stages), device="cuda").bfloat16()
    plan = []
    for stage in tower.stages:
        if with_standins and not stage.mix.passthrough:
            plan.append(("standin", stage.mix.k))
        for g in stage.gemms:
            w = g.module.fp8_weight().data
            plan.append(("read", w.view(torch.uint8).view(-1)[: w.numel() // 4 * 4].view(torch.float32)))

    def step():
        for kind, v in plan:
            if kind == "read":
                _read(v, partial, programs, pdl)
            else:
                torch.add(x[:, :v], x[:, :v])
    return step, sum(v.numel() * 4 for k, v in plan if k == "read"), sum(k == "read" for k, _ in plan)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--model", default="qwen3.5-27b")
    ap.add_argument("--programs", default="528,1056", help="read grids to try (per kernel)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_floor needs a CUDA GPU")
    ceilings = read_ceiling()
    ceiling = max(ceilings.values())
    tower = build_tower(args.model, arm="merged", m=1)
    res = {**provenance.record(), "model": args.model, "read_ceiling_gbs": ceilings, "rows": []}
    for programs, pdl in [(int(p), False) for p in args.programs.split(",")] + [(1056, True)]:
        for standins in (False, True):
            step, nbytes, kernels = step_fn(tower, standins, programs, pdl)
            t = time_cuda_graph(lambda i, step=step: step, 1, replays=10, min_calls=1)
            at = nbytes / ceiling / 1e3
            row = {"programs": programs, "pdl": pdl, "standins": standins, "reads": kernels, "bytes": nbytes,
                   "ms_per_step": round(t.median_us / 1e3, 4), "at_ceiling_ms": round(at / 1e3, 4),
                   "beyond_bytes_us_per_read": round((t.median_us - at) / kernels, 3)}
            res["rows"].append(row)
            print(row, flush=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
