#!/usr/bin/env bash
# Session 17, device call 6: the paired trace of the merged 27B tower with call 5's retuned
# cache (SCHEME, default per_tensor; M = 1), attributed: the per-call cost beyond the bytes.
set -uo pipefail
OUT=${OUT:-out}
C=/tmp/c6cache
mkdir -p "$OUT/c6" "$C"
cp -r .gpu/run/cache/. "$C/"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=$C
python3 benchmarks/restamp_cache.py benchmarks/results/prefetch_depth_H200_2026-12-02/call5/tuning_cache.json "$C"
timeout 100 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto --m 1 \
  --scheme ${SCHEME:-per_tensor} --out /tmp/c6trace_${SCHEME:-per_tensor} > "$OUT/c6/${SCHEME:-per_tensor}_capture.log" 2>&1
echo "capture rc=$?"
timeout 40 python3 -m fp8tower trace attribute /tmp/c6trace_${SCHEME:-per_tensor} --json "$OUT/c6/${SCHEME:-per_tensor}_attr.json" \
  > "$OUT/c6/${SCHEME:-per_tensor}_attr.log" 2>&1
echo "attribute rc=$?"
head -16 "$OUT/c6/${SCHEME:-per_tensor}_attr.log"
