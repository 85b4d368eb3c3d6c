#!/usr/bin/env bash
# Session 28, device call 3: each K step's MMAs into 2 or 4 accumulators (acc_split), FP8 x on
# the plain path: per GEMM against the cached choice, then the merged tower, arms alternated.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
R=benchmarks/results/wfirst_H200_2026-12-04
mkdir -p "$O" /tmp/c3
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c3 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c3 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 220 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,32 --schemes per_tensor \
  --backends "auto,auto[acc_split=2],auto[acc_split=4]" --json "$O/gemm_pt.json" > "$O/gemm_pt.log" 2>&1
echo "gemm rc=$?"
python3 $R/summary.py "$O/gemm_pt.json"
timeout 250 python3 benchmarks/bench_override.py --arms "cached,acc_split=2,acc_split=4" --m 1,8 --rounds 2 \
  --schemes per_tensor,channel_token,weight_only --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -6 "$O/tower.log"
tar czf "$FINAL/call3.tgz" -C "$FINAL" call3
