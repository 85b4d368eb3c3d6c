"""The stream backend against the Triton default and cuBLASLt, in chains (issue #12).

One run, cold L2, one CUDA graph per row (bench_chain's timers):

- numerics: every stream config vs the float64 reference on the same quantized operands
  (output NaN-poisoned), SQNR dB;
- per GEMM: a chain of one shape over rotated weight copies: us per GEMM, % of the read
  ceiling, us beyond its bytes (consecutive GEMMs: with PDL their boundaries overlap);
- tower chain: the tower shapes x 2 or more weight sets (past 3x L2) in one graph, without
  and with a small elementwise kernel between GEMMs (the tower's stand-ins; launched without PDL);
- ``--timeline``: the same chains kernel by kernel (gaps and durations, torch.profiler).

    python benchmarks/bench_stream.py --json benchmarks/results/stream_H200.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

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
    chain_calls,
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
# Cluster splits (a cluster per tile, reduced in distributed shared memory): the largest size
# of stream.cluster_sizes, the most stages that fit; the same on 4 stages; the smaller size;
# the first with FP8 x given (no pre-pass launch).
CLUSTER_ARMS = ("stream_cluster", "stream_cluster_s4", "stream_cluster_small", "stream_cluster_fp8x",
                "stream_cluster_xq", "stream_cluster_xq_s4")  # xq: x quantized in the kernel
# CUTLASS example 63 (prefetch + PDL), what the tuner chose for per_tensor 5120x6144 in the
# tower (results/split_k_H200_2026-12-01/call4/tuning_cache.json)
CUTLASS_PF = {"sched": "pf", "tile": "64x16x128", "mode": "heuristic", "splits": 1, "pdl": True,
              "overlap": 0.5, "prefetch": -1.0}


def cluster_config(arm, p):
    """The cluster arm's config for p; None where it has none or repeats stream_cluster's."""
    m, xk = min(p.bucket, 16), stream._x_kind(p)
    xq = "_xq" in arm
    if xq and p.scheme not in stream.XQ_SCHEMES:
        return None
    fit = [(c, s) for c in stream.cluster_sizes(p.n, p.k) for s in stream.STAGES
           if stream.fits(m, xk, s, c, stream.xq_steps(p.k, c) if xq else 0)]
    if not fit:
        return None
    top = max(fit)
    if arm == "stream_cluster_xq_s4":
        return {"stages": 4, "pdl": True, "cluster": top[0], "xq": True} if top[1] != 4 else None
    if arm in ("stream_cluster_fp8x", "stream_cluster_xq"):
        return {"stages": top[1], "pdl": True, "cluster": top[0], **({"xq": True} if xq else {})}
    pick = {"stream_cluster": top, "stream_cluster_s4": max(f for f in fit if f[0] == top[0] and f[1] == 4),
            "stream_cluster_small": max([f for f in fit if f[0] < top[0]], default=top)}[arm]
    if arm != "stream_cluster" and pick == top:
        return None
    return {"stages": pick[1], "pdl": True, "cluster": pick[0]}


def config_of(arm, p):
    """The arm's config for ``p`` (None: the arm cannot serve it)."""
    if arm == "cublaslt":
        return "cublaslt"
    if arm == "base":
        return kconfigs.default_config(p)
    if arm == "base_packed":  # the same over tile-major weights (kernels/layout.tile_major)
        return {**kconfigs.default_config(p), "packed": True}
    if arm == "cutlass_pf":
        from fp8tower import backends

        return CUTLASS_PF if backends.get("cutlass").check(p) is None and p.bucket <= 16 else None
    if stream.BACKEND.check(p) is not None:
        return None
    if arm in CLUSTER_ARMS:
        return cluster_config(arm, p)
    cfg = stream.BACKEND.default_config(p) if arm == "stream_default" else STREAM_ARMS[arm]
    return cfg if stream.fits(min(p.bucket, 16), stream._x_kind(p), cfg["stages"]) else None


def call_for(arm, p, w, x, out):
    cfg = config_of(arm, p)
    if cfg is None:
        return None
    if arm == "cutlass_pf":
        from fp8tower import backends

        be = backends.get("cutlass")
        packed = be.packed_for(w)
        return lambda: be.run(x, w, packed, config=cfg, out=out)
    if arm in STREAM_ARMS or arm in CLUSTER_ARMS or arm == "stream_default":
        be = stream.BACKEND
        packed = be.packed_for(w)
        if arm.endswith("_fp8x"):
            q, s = quantize_activation(x, w.scheme, w.act_scale)
            return lambda: be.run(q, w, packed, act_scale=s, config=cfg, out=out)
        return lambda: be.run(x, w, packed, config=cfg, out=out)
    return call_with(cfg, p, w, x, out)


def timeline(calls, replays: int = 5) -> dict:
    """Where a chain's time goes, kernel by kernel (torch.profiler over graph replays): for
    each kernel of the chain in order, (family, gap, duration) in us, medians over the
    replays but the first; the gap runs from the end of the kernel before it to its start
    (< 0: it started early, under PDL, and waits inside its duration). Families: the stream
    GEMM, the Triton GEMM, the activation pre-pass, torch's elementwise kernel, other."""
    import json as _json
    import statistics as st
    import tempfile

    from fp8tower import graph_edges

    g = graph_edges.new_graph()
    for c in calls:  # warm-up (counters, builds) outside capture
        c()
    torch.cuda.synchronize()
    with graph_edges.capture(g):  # early launch, as every fp8tower graph (plain before s35)
        for c in calls:
            c()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = [e for e in _json.loads(Path(f.name).read_text())["traceEvents"] if e.get("cat") == "kernel"]
    events.sort(key=lambda e: e["ts"])
    fams = {"stream_gemm": "fp8t_stream_gemm", "triton_gemm": "_fp8_gemm", "prepass": "_fp8_act_quant",
            "elementwise": "elementwise"}
    per = len(events) // replays  # kernels a replay
    out = []
    for i in range(per):  # position i of the chain, median over the replays but the first
        gaps, durs = [], []
        for r in range(1, replays):
            e, prev = events[r * per + i], events[r * per + i - 1]
            gaps.append(e["ts"] - (prev["ts"] + prev["dur"]))
            durs.append(e["dur"])
        fam = next((f for f, pat in fams.items() if pat in events[i]["name"]), "other")
        out.append((fam, round(st.median(gaps), 3), round(st.median(durs), 3)))
    return {"kernels": out}


def timelines(scheme, m, shapes, sets, arms, cap):
    """:func:`timeline` of the tower chain without and with an elementwise kernel between
    GEMMs, per arm: (family, gap us, duration us) of each kernel in chain order."""
    xs = {k: torch.randn(m, k, device="cuda").bfloat16() for k in {k for _, k in shapes}}
    outs = {(n, k): torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for n, k in shapes}
    for between in (False, True):
        for arm in arms:
            calls = chain_calls(call_for, arm, scheme, m, shapes, sets, xs, outs, cap, between)
            row = {"scheme": scheme.value, "m": m, "arm": arm, "elementwise_between": between,
                   "shapes": [f"{n}x{k}" for n, k in shapes]}
            try:
                yield {**row, **timeline(calls)}
            except Exception as e:  # noqa: BLE001 (a failing arm is a row)
                yield {**row, "error": f"{type(e).__name__}: {e}"[:300]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--plan", default="per_tensor:1,8;channel_token:1;block128:1",
                    help="scheme:Ms;... (per GEMM and tower chains)")
    ap.add_argument("--arms", default="cublaslt,base," + ",".join(STREAM_ARMS))
    # also: stream_default, cutlass_pf and the cluster arms (CLUSTER_ARMS)
    ap.add_argument("--shapes", default=",".join(TOWER_SHAPES))
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--timeline", action="store_true",
                    help="also each chain's kernel gaps and durations (torch.profiler), per arm")
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
                if arm in CLUSTER_ARMS:  # one wave? (clusters packed into GPCs)
                    c = row["config"]
                    row["clusters_needed"] = stream.tiles(p.n)
                    row["clusters_resident"] = stream.max_clusters(
                        min(p.m, 16), stream._x_kind(p), c["stages"], c["cluster"])
                row.update(time_arm(call_for, arm, p, ws, x, out, copies, ceiling))
                res["per_gemm"].append(row)
                print(row, flush=True)
        save()
        for row in tower_chains(scheme, ms, shapes, sets, arms, cap, ceiling, call=call_for, runs=2):
            res["chains"].append(row)
            print(row, flush=True)
        save()
        if args.timeline:
            for row in timelines(scheme, ms[0], shapes, sets, arms, cap):
                res.setdefault("timelines", []).append(row)
                print(row, flush=True)
            save()
        del sets
        torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    main()
