"""CUTLASS backend on a GPU: numerics, every config vs torch._scaled_mm, and a PDL chain.

1. Builds (or finds in the disk cache) every config the tuner may try at the given M, and
   records the build time.
2. Numerics (DESIGN.md): per tower shape, M and scheme, every config's output (poisoned with
   NaN first) vs float64 on the SAME quantized operands (the act_quant output and the FP8
   weight): SQNR >= 40 dB required.
3. Timing: bf16 in (activation quant included, the same launch for both arms), each CUTLASS
   config vs cuBLASLt (torch._scaled_mm), ttimer.time_cuda_graph with cold L2 (rotated
   weight copies > 3x L2), the read ceiling measured in the same run.
4. A chain of the 9 tower GEMMs (FP8 activations, per_tensor: GEMM boundaries only) in one
   CUDA graph: cuBLASLt vs CUTLASS configs, the example-63 schedule with and without PDL.

    python benchmarks/bench_cutlass.py --m 1,8,16,32 --schemes per_tensor,channel_token
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from fp8tower import provenance
from fp8tower.backends import cublaslt, cutlass
from fp8tower.backends.act_quant import quantize as quantize_act
from fp8tower.formats import FP8_DTYPE, Fp8Weight, Scheme, sqnr_db
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import ceiling as tceiling
from fp8tower.tuning import timer as ttimer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import l2_rotation, timing_fields

TOWER = ["10240x5120", "6144x5120", "16384x5120", "5120x6144", "12288x5120", "1024x5120",
         "14336x5120", "34816x5120", "5120x17408"]
STATIC_ACT_SCALE = 0.02
MIN_SQNR_DB = 40.0


def weights(n, k, scheme, copies, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    data = (torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 64)
    data = data.clamp(-448, 448).to(FP8_DTYPE)
    shape = () if scheme is Scheme.PER_TENSOR else (n,)
    scale = torch.rand(shape, device="cuda", generator=g) * 1e-3 + 1e-4
    act = torch.tensor(STATIC_ACT_SCALE, device="cuda") if scheme is Scheme.PER_TENSOR else None
    first = Fp8Weight(data, scale, scheme, act)
    return [first] + [Fp8Weight(data.clone(), scale.clone(), scheme, act) for _ in range(copies - 1)]


def label(cfg):
    return tcache.config_label(tcache.normalize_config(cfg))


def check_numerics(w, x, scheme, cfgs):
    """SQNR of each config vs float64 on the same quantized operands (output NaN-poisoned)."""
    xq, sa = quantize_act(x, scheme, w.act_scale)
    wd = w.data.double() * w.scale.double().reshape(-1, 1)
    ref = (xq.double() * sa.double().reshape(-1, 1)) @ wd.t()
    out = {}
    for cfg in cfgs:
        y = torch.full((x.shape[0], w.n), float("nan"), dtype=torch.bfloat16, device="cuda")
        try:
            cutlass.BACKEND.run(x, w, cutlass.BACKEND.packed_for(w), out_dtype=torch.bfloat16,
                                config=cfg, out=y)
        except cutlass.CutlassError as e:
            out[label(cfg)] = {"sqnr_db": None, "nan": -1, "error": str(e)[:300]}
            continue
        torch.cuda.synchronize()
        nan = int(torch.isnan(y).sum())
        out[label(cfg)] = {"sqnr_db": round(sqnr_db(ref, y), 2) if nan == 0 else None, "nan": nan}
    y = cublaslt.BACKEND.run(x, w, cublaslt.BACKEND.packed_for(w), out_dtype=torch.bfloat16)
    out["cublaslt"] = {"sqnr_db": round(sqnr_db(ref, y), 2), "nan": int(torch.isnan(y).sum())}
    return out


def time_backend(be, cfg, ws, x, act_scale=None):
    def make(i):
        w = ws[i]
        packed = be.packed_for(w)
        return lambda: be.run(x, w, packed, act_scale=act_scale, out_dtype=torch.bfloat16,
                              config=cfg)

    return ttimer.time_cuda_graph(make, len(ws))


def chain(m, cfg_of, budget):
    """One CUDA graph over the 9 tower GEMMs (FP8 x, per_tensor), per arm: us per chain."""
    shapes = [tuple(int(v) for v in s.split("x")) for s in TOWER]
    ws = [weights(n, k, Scheme.PER_TENSOR, 1, seed=i)[0] for i, (n, k) in enumerate(shapes)]
    xs = {k: torch.randn(m, k, device="cuda").to(FP8_DTYPE) for _, k in shapes}
    sa = torch.tensor(0.01, device="cuda")
    rows = {}
    for arm, (be, cfg) in cfg_of.items():
        if time.time() > budget:
            rows[arm] = {"skipped": "time budget"}
            continue

        def make(i, be=be, cfg=cfg):
            calls = [(w, be.packed_for(w)) for w in ws]
            return lambda: [be.run(xs[w.k], w, p, act_scale=sa, out_dtype=torch.bfloat16,
                                   config=cfg) for w, p in calls]
        try:
            t = ttimer.time_cuda_graph(make, 1)
        except cutlass.CutlassError as e:
            rows[arm] = {"error": str(e)[:300]}
            continue
        rows[arm] = {"us": round(t.median_us, 2), "spread": round(t.spread, 4)}
    return rows


def kernel_names(m, cap):
    """What a torch profiler trace shows for one call of each schedule (bf16 in), and whether
    the backend's kernel_family regex matches every kernel launched."""
    import re

    from torch.profiler import ProfilerActivity, profile

    w = weights(5120, 5120, Scheme.CHANNEL_TOKEN, 1)[0]
    x = torch.randn(m, 5120, device="cuda").bfloat16()
    out = {}
    for cfg in cutlass.BACKEND.configs(GemmProblem(m, 5120, 5120, "channel_token", capability=cap)):
        cutlass.BACKEND.run(x, w, cutlass.BACKEND.packed_for(w), config=cfg)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            cutlass.BACKEND.run(x, w, cutlass.BACKEND.packed_for(w), config=cfg)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        out[label(cfg)] = {"kernels": names, "all_match": all(
            re.search(cutlass.BACKEND.kernel_family, n) for n in names)}
    return out


# weights() builds per-tensor / per-channel scales and check_numerics dequantizes per row:
# block128 (its 2-D scales) and weight_only (bf16 x) are timed by bench_gemm.py instead.
SCHEMES = (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN)


def parse_values(args) -> tuple[list[int], list[Scheme], list[tuple[int, int]]]:
    """--m, --schemes, --shapes checked up front: one line naming the bad value (a block128
    run built every config and measured the ceiling before its weights raised)."""
    from tower_ab import parse_ms, parse_schemes

    ms = parse_ms(args.m)
    schemes = [Scheme.parse(s) for s in parse_schemes(args.schemes)]
    for scheme in schemes:
        if scheme not in SCHEMES:
            raise SystemExit(f"--schemes {scheme.value}: bench_cutlass times per_tensor and "
                             "channel_token (block128 / weight_only: benchmarks/bench_gemm.py)")
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(sh) != 2 or min(sh) < 1 for sh in shapes):
        raise SystemExit(f"--shapes {args.shapes!r}: expected NxK with N, K >= 1, e.g. 5120x6144")
    return ms, schemes, shapes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(TOWER))
    ap.add_argument("--m", default="1,8,16,32")
    ap.add_argument("--schemes", default="per_tensor,channel_token")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="stop timing (record what is left as skipped) after this many seconds")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    ms, schemes, shapes = parse_values(args)  # before any build or timing
    if not torch.cuda.is_available():
        sys.exit("bench_cutlass needs a CUDA GPU")
    reason = cutlass.BACKEND.unavailable_reason()
    if reason:
        sys.exit(f"cutlass backend unavailable: {reason}")
    t0 = time.time()
    budget = t0 + args.budget_s
    cap = torch.cuda.get_device_capability()
    gpu = torch.cuda.get_device_name()

    # 1. builds
    jobs = [(p, c) for m in ms for n, k in shapes
            for p in [GemmProblem(m, n, k, "per_tensor", capability=cap)]
            for c in cutlass.BACKEND.configs(p)]
    chain_specs = [cutlass.BuildSpec("pf", 64, cutlass.token_tile(m)) for m in ms]
    report = cutlass.BACKEND.precompile(jobs + [(None, {"sched": s.sched, "tile":
                                                 f"{s.tile_m}x{s.tile_n}x{s.tile_k}"})
                                                for s in chain_specs])
    builds = []
    for so in sorted(cutlass.cache_dir().glob("*.so")):
        meta = so.with_suffix(".json")
        builds.append(json.loads(meta.read_text()) if meta.is_file() else {"file": so.name})
    for b in builds:
        b.pop("command", None)
    print(f"builds: {report.summary()}", flush=True)

    ceilings = tceiling.read_ceiling()
    ceiling = max(ceilings.values())
    l2 = ttimer.l2_cache_bytes()
    rows, numerics = [], []
    for scheme in schemes:
        for n, k in shapes:
            copies, cold = l2_rotation(n * k, l2)
            ws = weights(n, k, scheme, copies)
            for m in ms:
                p = GemmProblem(m, n, k, scheme, capability=cap,
                                static_act_scale=scheme is Scheme.PER_TENSOR)
                cfgs = cutlass.BACKEND.configs(p)
                x = torch.randn(m, k, device="cuda").bfloat16()
                num = check_numerics(ws[0], x, scheme, cfgs)
                numerics.append({"scheme": scheme.value, "n": n, "k": k, "m": m, **num})
                base = {"scheme": scheme.value, "n": n, "k": k, "m": m, "bytes": p.bytes_moved()}
                arms = [("cublaslt", cublaslt.BACKEND, None)] + \
                       [("cutlass", cutlass.BACKEND, c) for c in cfgs]
                for name, be, cfg in arms:
                    row = {**base, "backend": name, "config": label(cfg) if cfg else "default"}
                    if time.time() > budget:
                        rows.append({**row, "skipped": "time budget"})
                        continue
                    try:
                        t = time_backend(be, cfg, ws, x)
                    except cutlass.CutlassError as e:
                        rows.append({**row, "error": str(e)[:300]})
                        continue
                    rows.append({**row, **timing_fields(t, p.bytes_moved(), ceiling, copies,
                                                        cold)})
                done = [r for r in rows if r["n"] == n and r["k"] == k and r["m"] == m
                        and r["scheme"] == scheme.value and "us" in r]
                if done:
                    best = min((r for r in done if r["backend"] == "cutlass"),
                               key=lambda r: r["us"], default=None)
                    cb = next((r for r in done if r["backend"] == "cublaslt"), None)
                    if best and cb:
                        print(f"{scheme.value} {n}x{k} M={m}: cublaslt {cb['us']:.2f} us, best "
                              f"cutlass {best['us']:.2f} us [{best['config']}] "
                              f"({cb['us'] / best['us']:.3f}x); sqnr min "
                              f"{min(v['sqnr_db'] or -1 for kk, v in num.items() if kk != 'cublaslt')}",
                              flush=True)
            del ws
            torch.cuda.empty_cache()

    chains = {}
    for m in ms[:2]:
        tn = cutlass.token_tile(m)
        pf = {"sched": "pf", "tile": f"64x{tn}x128", "mode": "heuristic", "splits": 1}
        arms = {
            "cublaslt": (cublaslt.BACKEND, None),
            "cutlass_sk_default": (cutlass.BACKEND, cutlass.BACKEND.default_config(
                GemmProblem(m, 5120, 5120, "per_tensor", capability=cap))),
            "cutlass_pf_no_pdl": (cutlass.BACKEND, {**pf, "pdl": False, "overlap": -1.0, "prefetch": -1.0}),
            "cutlass_pf_pdl_o0.5": (cutlass.BACKEND, {**pf, "pdl": True, "overlap": 0.5, "prefetch": -1.0}),
            "cutlass_pf_pdl_o0.8_p0.7": (cutlass.BACKEND, {**pf, "pdl": True, "overlap": 0.8, "prefetch": 0.7}),
            "cutlass_pf_pdl_o0_p1": (cutlass.BACKEND, {**pf, "pdl": True, "overlap": 0.0, "prefetch": 1.0}),
        }
        chains[m] = chain(m, arms, budget + 60)
        print(f"chain of 9 tower GEMMs, M={m}: {chains[m]}", flush=True)

    try:
        names = kernel_names(ms[0], cap)
    except RuntimeError as e:  # diagnostics only: never lose the timings for it
        names = {"error": f"{type(e).__name__}: {e}"[:300]}
    print(f"kernel names: {json.dumps(names)[:1500]}", flush=True)
    bad = [r for r in numerics for kk, v in r.items() if isinstance(v, dict)
           and (v["nan"] or v["sqnr_db"] is None or v["sqnr_db"] < MIN_SQNR_DB)]

    result = {
        "benchmark": "bench_cutlass",
        **provenance.record(["python", "benchmarks/bench_cutlass.py", *(sys.argv[1:] if argv is None else argv)],
                            gpu_name=gpu),
        "capability": list(cap), "cutlass": cutlass.cutlass_version(), "nvcc": cutlass.nvcc_version(cutlass.nvcc_path()),
        "build_report": report.summary(), "builds": builds,
        "read_ceiling_gbs": round(ceiling, 1),
        "units": {"us": "microseconds, median of CUDA-graph replays, cold L2 where "
                        "cold (copies: rotated weights; pct_ceiling null when warm)", "gbs": "1e9 B/s",
                  "bytes": "N*K FP8 + scales + M*K bf16 in + M*N bf16 out",
                  "chain_us": "one graph of the 9 tower GEMMs, FP8 x, per_tensor"},
        "numerics_min_sqnr_db": MIN_SQNR_DB, "numerics_failures": bad,
        "numerics": numerics, "rows": rows, "chains": chains, "kernel_names": names,
        "seconds": round(time.time() - t0, 1),
    }
    path = Path(args.json) if args.json else provenance.result_path(
        "benchmarks/results", f"cutlass_{gpu.replace(' ', '-')}", result["date"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}; numerics failures: {len(bad)}; {result['seconds']} s")


if __name__ == "__main__":
    main()
