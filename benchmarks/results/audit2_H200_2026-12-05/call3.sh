#!/usr/bin/env bash
# Session 35: tuning time with session 34's output check (#4's target: 60 s a scheme). The
# merged 27B tower's keys at 7 M buckets from a cold cache, every backend (the wheels
# installed: CUTLASS and cuDNN timed too), per_tensor and block128 (the slowest to tune,
# 41 s on 2026-11-30); then the stream chains re-timed (below). Carry [".gpu"]. The tar is
# rewritten after each step.
#   OUT=$OUT bash benchmarks/results/audit2_H200_2026-12-05/call3.sh
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O"
pack() { tar czf "$FINAL/call3.tgz" -C "$FINAL" call3; }
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
for sc in per_tensor block128; do
  rm -rf /tmp/c3tune && mkdir -p /tmp/c3tune
  s0=$(date +%s%N)
  FP8TOWER_CACHE_DIR=/tmp/c3tune timeout 150 python3 -m fp8tower tune --model qwen3.5-27b --merged \
    --m 1,2,4,8,16,32,64 --scheme $sc --json > "$O/tune_$sc.json" 2> "$O/tune_$sc.log"
  echo "tune $sc rc=$? s=$(( ($(date +%s%N) - s0) / 1000000 ))ms" | tee -a "$O/tune_times.txt"
  cp /tmp/c3tune/*.json "$O/cache_$sc.json" 2>/dev/null
  pack
done
# The stream backend's cluster chains re-timed with session 35's chain timer (early launch,
# queued replays, as the tuner times): its exclusion from auto rests on chains timed without
# (session 13, results/cluster_split_H200_2026-12-01/call3: 104.9 us against 94.5 with the
# elementwise kernels between the GEMMs).
timeout 200 python3 benchmarks/bench_stream.py --json "$O/stream.json" --budget-s 180 \
  --arms base,stream_cluster,stream_cluster_xq --shapes 5120x6144,1024x5120,4096x4096,6144x5120 \
  --plan "per_tensor:1;channel_token:1" > "$O/stream.log" 2>&1
echo "stream rc=$?"; tail -6 "$O/stream.log" | cut -c1-300; pack
