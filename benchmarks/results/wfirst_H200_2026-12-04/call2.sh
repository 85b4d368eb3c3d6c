#!/usr/bin/env bash
# Session 28, device call 2: wfirst with x read two K steps ahead (call 1 read it one ahead and
# lost 11-41% a GEMM): per_tensor per GEMM against the cached choice, then the tower.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O" /tmp/c2
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c2 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c2 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 200 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8 --schemes per_tensor \
  --backends "auto,auto[wfirst=true],auto[wfirst=true,prefetch=0]" --json "$O/gemm_pt.json" > "$O/gemm_pt.log" 2>&1
echo "gemm rc=$?"
python3 benchmarks/results/wfirst_H200_2026-12-04/summary.py "$O/gemm_pt.json"
timeout 200 python3 benchmarks/bench_wfirst.py --m 1,8 --rounds 2 --schemes per_tensor --arms cached,wfirst \
  --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -3 "$O/tower.log"
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2
