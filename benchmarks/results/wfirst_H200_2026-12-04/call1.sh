#!/usr/bin/env bash
# Session 28, device call 1: W tiles before the PDL wait in the Triton GEMM (wfirst): per GEMM
# against the cached choice in the tuner's chain, and the merged 27B tower with every eligible
# cached config so, arms alternated (session 26's cache, restamped).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O" /tmp/c1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c1 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c1 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 250 python3 benchmarks/bench_wfirst.py --m 1,8 --rounds 2 --schemes per_tensor,channel_token,weight_only \
  --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -8 "$O/tower.log"
timeout 280 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes per_tensor \
  --backends "auto,auto[wfirst=true],auto[wfirst=true,prefetch=0]" --json "$O/gemm_pt.json" > "$O/gemm_pt.log" 2>&1
echo "gemm rc=$?"; tail -50 "$O/gemm_pt.log"
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
