#!/usr/bin/env bash
# Session 18, device call 5: channel_token's merged keys at M = 16, 32 retuned with
# configs.deep_unsplit (in context, default --max-configs) from call 4's cache, before / after
# one round; then the final cache's tower, every W8A8 scheme at M = 1, 8, 16, 32, one run.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/c5"
CACHE_JSON=benchmarks/results/k_rot_H200_2026-12-02/call4/tuning_cache.json \
  TOWER_M=16,32 TOWER_SCHEMES=channel_token RETUNE_S=150 ROUNDS=1 \
  bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -8
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/rab_after
cp /tmp/rab_after/*.json "$OUT/c5/"
timeout 150 python3 -m fp8tower bench tower --model qwen3.5-27b --m 1,8,16,32 --arms merged \
  --backends auto --scheme per_tensor,channel_token,block128 --json "$OUT/c5/tower_final.json" \
  > "$OUT/c5/tower_final.log" 2>&1
echo "tower rc=$?"
python3 benchmarks/tower_rows.py "$OUT/c5"
