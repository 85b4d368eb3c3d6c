#!/usr/bin/env bash
# Session 36, a second call if time is left: (1) tuning time without the one-time CUTLASS
# builds (#4: 60 s a scheme; session 35's cold machine spent 62 of 88 s in nvcc): the
# libraries come prebuilt (.gpu/run/prebuilt.tar.xz, built on the CPU machine with the same
# nvcc 13.0.88 and CUTLASS 4.2.0, so the same cache keys; a missing one is built, and the log
# says so), each scheme tuning the merged 27B keys at 7 M buckets into an empty tuning cache;
# (2) the boundary timeline's channel_token rows at M = 1 and 8 (session 35's run crashed on
# them; bench_boundary.attach_prepasses now drops a pre-pass whose GEMM is not stamped).
# Carry [".gpu/run"].
#   OUT=$OUT bash benchmarks/results/session36_H200_2026-12-05/call5.sh
set -uo pipefail
B=benchmarks/results/boundary_timeline_H200_2026-12-04
CACHE=benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json
FINAL=${OUT:-out}
O=$FINAL/call5
mkdir -p "$O"
pack() { tar czf "$FINAL/call5.tgz" -C "$FINAL" call5; }
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
nvcc --version | tail -2 > "$O/nvcc.txt"
for sc in per_tensor channel_token block128; do
  rm -rf /tmp/s5t && mkdir -p /tmp/s5t && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/s5t
  s0=$(date +%s%N)
  FP8TOWER_CACHE_DIR=/tmp/s5t timeout 120 python3 -m fp8tower tune --model qwen3.5-27b --merged \
    --m 1,2,4,8,16,32,64 --scheme $sc --json > "$O/tune_$sc.json" 2> "$O/tune_$sc.log"
  echo "tune $sc rc=$? s=$(( ($(date +%s%N) - s0) / 1000000 ))ms" | tee -a "$O/tune_times.txt"
  grep -i "compiling\|built\|CUTLASS" "$O/tune_$sc.log" | head -6
  pack
done
mkdir -p /tmp/s5b && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/s5b
if git apply "$B/stamps.patch" 2> "$O/patch.log" || patch -p1 < "$B/stamps.patch" >> "$O/patch.log" 2>&1
then
  FP8TOWER_TUNE=0 python3 benchmarks/restamp_cache.py $CACHE /tmp/s5b > "$O/restamp_stamps.log" 2>&1
  FP8TOWER_TUNE=0 FP8TOWER_CACHE_DIR=/tmp/s5b timeout 150 python3 "$B/bench_boundary.py" --probe \
    --schemes channel_token --m 1,8 --rounds 2 --timeline-replays 30 \
    --json "$O/boundary_ct.json" > "$O/boundary_ct.log" 2>&1
  echo "boundary rc=$?"; tail -24 "$O/boundary_ct.log"
else
  cat "$O/patch.log"; echo "stamps.patch did not apply"
fi
pack
