#!/usr/bin/env bash
# Session 21, device call 6 (.gpu carried; the final tree): paired traces of the merged 27B
# tower, per_tensor, M = 1 / 8 / 32, with call 4's cache (the wide tile with x quantized in
# the GEMM at M = 8 / 16 / 32 on the in_proj / qkv keys): per op, M = 8 and 32 against M = 1.
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call6
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c21
mkdir -p /tmp/c21 && cp -r .gpu/run/cache/. /tmp/c21/
python3 benchmarks/restamp_cache.py benchmarks/results/m32_gap_H200_2026-12-02/call4/retune_ab/nvidia-h200.json \
  /tmp/c21 > "$OUT/restamp.log" 2>&1
for m in 1 8 32; do
  d=/tmp/tr_per_tensor_$m
  timeout 90 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto \
    --m $m --scheme per_tensor --out $d > "$OUT/trace_per_tensor_$m.log" 2>&1
  echo "trace $m rc=$? s=$(( $(date +%s) - start ))"
  python3 -m fp8tower trace attribute $d --json "$OUT/attr_per_tensor_$m.json" > "$OUT/attr_per_tensor_$m.log" 2>&1
  cp $d/manifest.json "$OUT/manifest_per_tensor_$m.json"
done
for m in 8 32; do
  python3 -m fp8tower trace compare /tmp/tr_per_tensor_1 /tmp/tr_per_tensor_$m \
    --json "$OUT/compare_per_tensor_1_$m.json" > "$OUT/compare_per_tensor_1_$m.log" 2>&1
done
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call6.tgz" -C /tmp call6
