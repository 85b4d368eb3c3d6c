#!/usr/bin/env bash
# Session 18, device call 4 (run from the repository root on the GPU machine, .gpu carried):
# with configs.deep_unsplit in the tuner's first candidates, channel_token's merged keys
# retuned at M = 1, 8 (in context, the default --max-configs) from call 3's cache, the tower
# before / after alternated (benchmarks/retune_ab.sh); then the paired trace of the final
# cache's per_tensor tower at M = 1, attributed (us per call beyond the bytes).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/c4"
CACHE_JSON=benchmarks/results/k_rot_H200_2026-12-02/call3/tuning_cache.json \
  TOWER_M=1,8 TOWER_SCHEMES=channel_token RETUNE_S=200 \
  bash benchmarks/retune_ab.sh 2>&1 | tail -14
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/rab_after
timeout 100 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto --m 1 \
  --scheme per_tensor --out /tmp/c4trace > "$OUT/c4/per_tensor_capture.log" 2>&1
echo "capture rc=$?"
timeout 40 python3 -m fp8tower trace attribute /tmp/c4trace --json "$OUT/c4/per_tensor_attr.json" \
  > "$OUT/c4/per_tensor_attr.log" 2>&1
echo "attribute rc=$?"
head -16 "$OUT/c4/per_tensor_attr.log"
