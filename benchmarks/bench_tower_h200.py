"""Tower benchmark + trace captures on a GPU, one run (the H200 session script).

Times the Qwen3.5-27B FP8 tower (GDN + attention linears, activation quantization included,
one CUDA graph per step, cold L2 by construction: 7.2 GB of weights per step) for every
(scheme, arm, backend, M), with the read ceiling measured in the same run, and writes JSON.
Ratios are to the unmerged cuBLASLt arm of the same scheme and M.

    python benchmarks/bench_tower_h200.py --out benchmarks/results/tower_H200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

import torch

from fp8tower import __version__
from fp8tower.models import get_spec
from fp8tower.tower import build_tower, time_tower
from fp8tower.tuning import measure_read_ceiling


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3.5-27b")
    ap.add_argument("--m", default="1,8,32")
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--arms", default="unmerged,merged")
    ap.add_argument("--backends", default="cublaslt,triton")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    spec = get_spec(args.model)
    ceiling = measure_read_ceiling()
    print(f"read ceiling {ceiling:.0f} GB/s", flush=True)
    rows = []
    for scheme in args.schemes.split(","):
        for m in [int(v) for v in args.m.split(",")]:
            for arm in args.arms.split(","):
                for backend in args.backends.split(","):
                    row = {"scheme": scheme, "m": m, "arm": arm, "backend": backend}
                    try:
                        tower = build_tower(spec, scheme=scheme, arm=arm, backend=backend,
                                            m=m, device="cuda")
                        t = time_tower(tower, replays=10, steps=8)
                    except (RuntimeError, ValueError) as e:  # e.g. a backend that cannot serve
                        rows.append({**row, "error": f"{type(e).__name__}: {e}"[:300]})
                        print(row, "error", str(e)[:200], flush=True)
                        continue
                    nbytes = sum(op.bytes for op in tower.ops())
                    gbs = nbytes / (t.ms_per_step * 1e-3) / 1e9
                    rows.append({**row, "ms_per_step": round(t.ms_per_step, 4),
                                 "min_ms": round(t.min_ms, 4),
                                 "gemms": sum(op.kind == "gemm" for op in tower.ops()),
                                 "bytes_per_step": nbytes, "gbs": round(gbs, 1),
                                 "pct_ceiling": round(100 * gbs / ceiling, 1)})
                    print(rows[-1], flush=True)
                    del tower
                    torch.cuda.empty_cache()
    base = {(r["scheme"], r["m"]): r["ms_per_step"] for r in rows
            if r["arm"] == "unmerged" and r["backend"] == "cublaslt" and "ms_per_step" in r}
    for r in rows:
        b = base.get((r["scheme"], r["m"]))
        if b and "ms_per_step" in r:
            r["speedup_vs_unmerged_cublaslt"] = round(b / r["ms_per_step"], 3)
    import triton

    out = {"benchmark": "bench_tower_h200", "model": args.model,
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join(["python", "benchmarks/bench_tower_h200.py", *sys.argv[1:]]),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "triton": triton.__version__, "fp8tower": __version__,
           "read_ceiling_gbs": round(ceiling, 1),
           "units": {"ms_per_step": "median of CUDA-graph replays of 8 steps / 8",
                     "gbs": "1e9 B/s: FP8 weights + scales per step over ms_per_step"},
           "rows": rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
