"""The stream backend against the Triton default and cuBLASLt, in chains (issue #12).

One run, cold L2, one CUDA graph per row (bench_chain's timers):

- numerics: every stream config vs the float64 reference on the same quantized operands
  (output NaN-poisoned), SQNR dB;
- per GEMM: a chain of one shape over rotated weight copies: us per GEMM, % of the read
  ceiling, us beyond its bytes (consecutive GEMMs: with PDL their boundaries overlap);
- tower chain: the tower shapes x 2 weight sets in one graph, without and with a small
  elementwise kernel between GEMMs (the tower's stand-ins; launched without PDL).

    python benchmarks/bench_stream.py --json benchmarks/results/stream_H200.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fp8tower import provenance
from fp8tower.backends import stream
from fp8tower.formats import quantize_activation
from fp8tower.kernels import configs as kconfigs
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.timer import l2_cache_bytes

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_chain import (
    call_with,
    gemm_cases,
    numerics,
    parse_plan,
    saver,
    time_arm,
    tower_chains,
)
from bench_gemm import TOWER_SHAPES

STREAM_ARMS = {
    "stream": {"stages": 6, "pdl": True},  # stream-K
    "stream_whole": {"stages": 6, "pdl": True, "whole_tiles": True},
    "stream_nopdl": {"stages": 6, "pdl": False},
    "stream_s4": {"stages": 4, "pdl": True},
    "stream_mi4": {"stages": 6, "pdl": True, "min_iters": 4},
    # FP8 x given (quantized once, outside the chain): the GEMM without its pre-pass launch
    "stream_fp8x": {"stages": 6, "pdl": True},
}


def config_of(arm, p):
    """The arm's config for ``p`` (None: the arm cannot serve it)."""
    if arm == "cublaslt":
        return "cublaslt"
    if arm == "base":
        return kconfigs.default_config(p)
    if arm == "base_packed":  # the same over tile-major weights (kernels/layout.tile_major)
        return {**kconfigs.default_config(p), "packed": True}
    if stream.BACKEND.check(p) is not None:
        return None
    cfg = stream.BACKEND.default_config(p) if arm == "stream_default" else STREAM_ARMS[arm]
    return cfg if stream.fits(min(p.bucket, 16), stream._x_kind(p), cfg["stages"]) else None


def call_for(arm, p, w, x, out):
    cfg = config_of(arm, p)
    if cfg is None:
        return None
    if arm in STREAM_ARMS or arm == "stream_default":
        be = stream.BACKEND
        packed = be.packed_for(w)
        if arm == "stream_fp8x":
            q, s = quantize_activation(x, w.scheme, w.act_scale)
            return lambda: be.run(q, w, packed, act_scale=s, config=cfg, out=out)
        return lambda: be.run(x, w, packed, config=cfg, out=out)
    return call_with(cfg, p, w, x, out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--plan", default="per_tensor:1,8;channel_token:1;block128:1",
                    help="scheme:Ms;... (per GEMM and tower chains)")
    ap.add_argument("--arms", default="cublaslt,base," + ",".join(STREAM_ARMS))
    ap.add_argument("--shapes", default=",".join(TOWER_SHAPES))
    ap.add_argument("--budget-s", type=float, default=400)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_stream needs a CUDA GPU")
    t0 = time.time()
    cap = torch.cuda.get_device_capability()
    l2 = l2_cache_bytes()
    plan = parse_plan(args.plan)
    arms = args.arms.split(",")
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    res = {**provenance.record(), "arms": {a: STREAM_ARMS.get(a, a) for a in arms},
           "per_gemm": [], "chains": [], "numerics": []}

    save = saver(args.json, res, t0)

    stream.build()
    ceilings = read_ceiling()
    ceiling = max(ceilings.values())
    res["read_ceiling_gbs"] = ceilings
    print(f"ceiling {ceiling:.0f} GB/s", flush=True)
    res["numerics"] = numerics([s for s, _ in plan], arms, cap, ms=(1, 8, 16), call=call_for,
                               shapes=((1024, 5120), (5120, 6144), (16384, 5120), (1000, 1040)))
    bad = [r for r in res["numerics"] if "error" in r or r["sqnr_db"] < 40]
    res["numerics_bad"] = bad
    print(f"numerics: {len(res['numerics'])} rows, {len(bad)} bad {bad[:3]}", flush=True)
    save()

    for scheme, ms in plan:
        sets = {}
        for p, ws, x, out, copies in gemm_cases(scheme, ms, shapes, cap, l2, sets):
            for arm in arms:
                if time.time() - t0 > args.budget_s:
                    res["stopped"] = "budget"
                    save()
                    return
                row = {"scheme": scheme.value, "n": p.n, "k": p.k, "m": p.m, "arm": arm,
                       "bytes": p.bytes_moved(), "config": config_of(arm, p)}
                if row["config"] is None:
                    continue
                row.update(time_arm(call_for, arm, p, ws, x, out, copies, ceiling))
                res["per_gemm"].append(row)
                print(row, flush=True)
        save()
        for row in tower_chains(scheme, ms, shapes, sets, arms, cap, ceiling, call=call_for, runs=2):
            res["chains"].append(row)
            print(row, flush=True)
        save()
        del sets
        torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    main()
