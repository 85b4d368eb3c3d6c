#!/usr/bin/env bash
# Session 21, device call 3 (.gpu carried; same tree as call 2): call 2's retuned cache
# against the same retuned WIDE in context at M = 32 (--max-configs 24), per_tensor,
# channel_token, block128; the towers at M = 1, 8, 32, two rounds (retune_ab.sh).
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call3
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
CACHE=benchmarks/results/m32_gap_H200_2026-12-02/call2/retune_ab/nvidia-h200.json
OUT=$OUT CACHE_JSON=$CACHE TOWER_M=32 BENCH_M=1,8,32 TOWER_SCHEMES=per_tensor,channel_token,block128 \
  MAX_CONFIGS=24 RETUNE_S=330 ROUNDS=2 bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -40
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call3.tgz" -C /tmp call3
