#!/usr/bin/env bash
# Session 20, device call 5 (no carry needed): weight_only at M = 64 where
# configs.min_split_steps changed its split: 8192x1024 (2 -> 1), 1024x5120 (8 -> 5),
# 5120x2048 (3 -> 2, call 4's one loss), the new default against the old split, two runs.
set -uo pipefail
OUT=${OUT:-out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
for run in 1 2; do
  timeout 70 python3 benchmarks/bench_gemm.py --shapes 8192x1024,1024x5120,5120x2048 --m 64 \
    --schemes weight_only --replays 10 \
    --backends "triton,triton[split_k=2],triton[split_k=3],triton[split_k=8]" \
    --json "$OUT/wo_m64_$run.json" > "$OUT/wo_m64_$run.log" 2>&1
  echo "run $run rc=$?"
  python3 - "$OUT/wo_m64_$run.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(f"{r['n']}x{r['k']}", r["backend"], (r.get("config") or {}).get("split_k"), r.get("us", r.get("error")))
PY
done
