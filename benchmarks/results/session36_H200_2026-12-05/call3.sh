#!/usr/bin/env bash
# Session 36, call 3: tuning time without the one-time CUTLASS builds (#4: 60 s a scheme).
# Session 35 timed a cold machine: 62 of 88 s were nvcc building CUTLASS libraries. Here the
# libraries come prebuilt (.gpu/run/prebuilt.tar.xz, built on the CPU machine: same nvcc 13.0.88 and
# CUTLASS 4.2.0, so the same cache keys; any missing one is built and the log says so), and
# each scheme tunes the merged 27B keys at 7 M buckets into an empty tuning cache. Then
# per_tensor's M = 8 keys retuned in context with the exact division (session 35: M = 8
# 0.75% slower with it at the old choices), before/after towers alternated (retune_ab.sh).
# Carry [".gpu/run"].
#   OUT=$OUT bash benchmarks/results/session36_H200_2026-12-05/call3.sh
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O"
pack() { tar czf "$FINAL/call3.tgz" -C "$FINAL" call3; }
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
nvcc --version | tail -2 > "$O/nvcc.txt"
for sc in per_tensor channel_token block128; do
  rm -rf /tmp/s3t && mkdir -p /tmp/s3t && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/s3t
  s0=$(date +%s%N)
  FP8TOWER_CACHE_DIR=/tmp/s3t timeout 130 python3 -m fp8tower tune --model qwen3.5-27b --merged \
    --m 1,2,4,8,16,32,64 --scheme $sc --json > "$O/tune_$sc.json" 2> "$O/tune_$sc.log"
  echo "tune $sc rc=$? s=$(( ($(date +%s%N) - s0) / 1000000 ))ms" | tee -a "$O/tune_times.txt"
  grep -i "cutlass\|built" "$O/tune_$sc.log" | head -5
  pack
done
mkdir -p .gpu/run/cache && tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
CACHE_JSON=benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json TOWER_M=8 \
  BENCH_M=1,8 TOWER_SCHEMES=per_tensor RETUNE_S=200 OUT=$O timeout 420 bash benchmarks/retune_ab.sh \
  > "$O/retune_ab.log" 2>&1
echo "retune_ab rc=$?"; tail -30 "$O/retune_ab.log"; pack
