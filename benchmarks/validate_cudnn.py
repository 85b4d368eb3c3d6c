"""One-call GPU validation (run: PYTHONPATH=src python3 benchmarks/validate_cudnn.py [JSON]) of the cudnn backend (issue 13): numerics on the 27B shapes at
M = 1, 8, 32 (SQNR vs float64 on the same quantized operands, NaN-poisoned out), plan list,
kernel names, CUDA graph capture, a few timings vs cuBLASLt. Prints as it goes and writes the
SQNR and timing rows with their provenance to JSON (default $OUT/validate_cudnn.json, or .)."""
import json
import os
import re
import sys
import time

import torch

T0 = time.time()
from fp8tower import backends, provenance
from fp8tower.backends import cudnn as cb
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import Scheme, quantize_weight, sqnr_db
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import search as tsearch
from fp8tower.tuning import timer as ttimer

SHAPES = [(10240, 5120), (6144, 5120), (16384, 5120), (5120, 6144), (12288, 5120),
          (1024, 5120), (14336, 5120), (34816, 5120), (5120, 17408)]
be = backends.get("cudnn")
print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(),
      "torch cudnn", torch.backends.cudnn.version(), flush=True)
print("unavailable:", be.unavailable_reason(), flush=True)
if be.unavailable_reason():
    sys.exit(1)
print("versions", cb.versions(), "meta", {k: v for k, v in tcache.environment_meta("x").items() if "cudnn" in k}, flush=True)

def setup(n, k, scheme, m, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    act = 0.02 if scheme is Scheme.PER_TENSOR else None
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    return quantize_weight(w, scheme, act_scale=act), x

def check_one(n, k, scheme, m, config=None):
    w, x = setup(n, k, scheme, m, m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    t = time.time()
    be.run(x, w, be.packed_for(w), out_dtype=torch.bfloat16, out=out, config=config)
    torch.cuda.synchronize()
    return sqnr_db(ref, out), time.time() - t

ROWS = {"sqnr": [], "time": []}
cb.MAX_PLANS = 1
worst, n_ok, n_all = None, 0, 0  # worst: None until a case is measured
for n, k in SHAPES:
    for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
        for m in (1, 8, 32):
            if time.time() - T0 > 55:
                break
            n_all += 1
            try:
                p = GemmProblem(m, n, k, scheme, capability=(9, 0))
                reason = be.check(p)
                if reason:
                    print(f"SKIP {scheme.value} {n}x{k} M={m}: {reason}", flush=True); continue
                db, dt = check_one(n, k, scheme, m)
            except (RuntimeError, ValueError) as e:  # cuDNN errors; BackendError is a ValueError
                print(f"ERROR {scheme.value} {n}x{k} M={m}: {type(e).__name__}: {str(e)[:400]}", flush=True); continue
            worst = db if worst is None else min(worst, db); n_ok += db >= 40
            ROWS["sqnr"].append({"scheme": scheme.value, "n": n, "k": k, "m": m, "sqnr_db": db})
            print(f"SQNR {scheme.value:13s} {n:5d}x{k:5d} M={m:2d}: {db:6.2f} dB  first call {dt*1e3:7.1f} ms", flush=True)
worst_text = "none measured" if worst is None else f"{worst:.2f} dB"
print(f"numerics: {n_ok}/{n_all} >= 40 dB, worst {worst_text}, at {time.time()-T0:.0f} s", flush=True)

# Plan list and every candidate plan's numerics on one shape.
cb.MAX_PLANS = 4
for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
    p = GemmProblem(8, 5120, 17408, scheme, capability=(9, 0))
    try:
        t = time.time(); names = cb.plan_names(p)
        entry = cb._graph(p, 0)
        print(f"plans {scheme.value} 5120x17408 M=8: {entry.n_plans} in list, built {entry.built} in {time.time()-t:.1f} s", flush=True)
        for i, name in names.items():
            print(f"  plan {i}: {name}  sqnr {check_one(5120, 17408, scheme, 8, {'plan': i})[0]:.2f} dB", flush=True)
    except (RuntimeError, ValueError) as e:
        print(f"ERROR plans {scheme.value}: {type(e).__name__}: {str(e)[:400]}", flush=True)

# Kernel names (one call, profiler) and the regex check.
from torch.profiler import ProfilerActivity, profile

for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
    w, x = setup(5120, 6144, scheme, 8, 0)
    pk = be.packed_for(w)
    be.run(x, w, pk, out_dtype=torch.bfloat16); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        be.run(x, w, pk, out_dtype=torch.bfloat16); torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    for nm in names:
        print(f"KERNEL {scheme.value}: match={bool(re.search(be.kernel_family, nm))} {nm[:200]}", flush=True)

# CUDA graph capture == eager.
w, x = setup(1024, 5120, Scheme.CHANNEL_TOKEN, 4, 0)
pk = be.packed_for(w)
eager = be.run(x, w, pk, out_dtype=torch.bfloat16)
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    be.run(x, w, pk, out_dtype=torch.bfloat16)
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    y = be.run(x, w, pk, out_dtype=torch.bfloat16)
g.replay(); torch.cuda.synchronize()
print("cuda graph replay == eager:", torch.equal(eager, y), flush=True)

# A few timings: each cudnn plan vs cublaslt (cold L2, CUDA graph), per_tensor static scale.
cl = backends.get("cublaslt")
timer = lambda mk, n: ttimer.time_cuda_graph(mk, n, replays=10)
for (n, k) in [(1024, 5120), (5120, 17408), (34816, 5120)]:
    for m in (1, 8, 32):
        if time.time() - T0 > 80:
            break
        for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
            p = GemmProblem(m, n, k, scheme, capability=(9, 0), static_act_scale=scheme is Scheme.PER_TENSOR)
            e1 = tsearch.tune_problem(p, [cl], timer=timer)
            e2 = tsearch.tune_problem(p, [be], timer=timer, max_configs=4)
            cands = " ".join(f"{c.config['plan']}:{c.median_us:.2f}" for c in e2.candidates if c.ok)
            ROWS["time"].append({"scheme": scheme.value, "n": n, "k": k, "m": m,
                                 "cublaslt_us": e1.winner.median_us, "cudnn_us": e2.winner.median_us,
                                 "cudnn_over_cublaslt": e2.winner.median_us / e1.winner.median_us})
            print(f"TIME {scheme.value:13s} {n}x{k} M={m:2d}: cublaslt {e1.winner.median_us:.2f} us, cudnn plans {cands} -> best/cublaslt {e2.winner.median_us/e1.winner.median_us:.3f}", flush=True)
print(f"done at {time.time()-T0:.0f} s", flush=True)
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("OUT", "."), "validate_cudnn.json")
with open(out, "w") as f:
    json.dump({"benchmark": "validate_cudnn", **provenance.record(["python", *sys.argv]),
               "cudnn": cb.versions(), "units": {"sqnr_db": "dB vs float64, same quantized operands",
                                                 "*_us": "us, CUDA graph, cold L2, median"},
               **ROWS}, f)
print(f"wrote {out}", flush=True)
