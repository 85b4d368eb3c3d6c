#!/usr/bin/env bash
# Session 23, device call 1 (.gpu carried; session 21's final cache restamped): (a) issue #12's
# per-GEMM scorecard, per_tensor: the tower's shapes at M = 1, 8, 16, 32 against cuBLASLt, tuned
# (auto: the keys the cache lacks are tuned in the run) and untuned; the tuned cache comes back;
# (b) block128 paired-trace captures of the merged tower at M = 1 and 32 (--standin rows), whose
# 8-step traces give each kernel's start and end (the in_proj's M = 32 gap).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c23
mkdir -p /tmp/c23 && cp -r .gpu/run/cache/. /tmp/c23/
python3 benchmarks/restamp_cache.py benchmarks/results/m32_gap_H200_2026-12-02/call4/retune_ab/nvidia-h200.json \
  /tmp/c23 > "$O/restamp.log" 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > "$O/gpu.txt" 2>&1
timeout 340 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes per_tensor \
  --precompile --replays 10 --backends cublaslt,auto,untuned --json "$O/scorecard_pt.json" \
  > "$O/scorecard_pt.log" 2>&1
echo "scorecard rc=$? s=$(( $(date +%s) - start ))"
cp /tmp/c23/*.json "$O/" 2>/dev/null
tail -45 "$O/scorecard_pt.log"
for m in 1 32; do
  timeout 100 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto \
    --m $m --scheme block128 --standin rows --out /tmp/tr_$m > "$O/capture_$m.log" 2>&1
  echo "capture $m rc=$? s=$(( $(date +%s) - start ))"
  cp /tmp/tr_$m/trace_8.json.gz "$O/trace8_block128_$m.json.gz" 2>/dev/null
  cp /tmp/tr_$m/manifest.json "$O/manifest_block128_$m.json" 2>/dev/null
done
ls /tmp/tr_1 "$O"
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1 && rm -rf "$O"
