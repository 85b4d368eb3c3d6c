#!/usr/bin/env bash
# Session 36: (1) the boundary timeline's channel_token rows at M = 1 and 8 (session 35's
# run crashed on them: a pre-pass of a GEMM that is not stamped, cuBLASLt / CUTLASS, now
# dropped by bench_boundary.attach_prepasses); (2) #12's tower numbers in one run: the merged
# 27B tower, cuBLASLt and auto, M = 1, 8, 16, 32, all three W8A8 schemes, 3 rounds
# (session 35's bench tower: every cell tuned first, then cells alternated), session 26's
# cache restamped, FP8TOWER_TUNE=0. Carry [".gpu/run"] (wheels; .gpu/run/prebuilt.tar.xz: CUTLASS
# libraries built on the CPU machine with the same nvcc 13.0 and CUTLASS 4.2.0).
#   OUT=$OUT bash benchmarks/results/session36_H200_2026-12-05/call2.sh
set -uo pipefail
B=benchmarks/results/boundary_timeline_H200_2026-12-04
CACHE=benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O" /tmp/s2c /tmp/s2b
pack() { tar czf "$FINAL/call2.tgz" -C "$FINAL" call2; }
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/s2c && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/s2b
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_TUNE=0
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 benchmarks/restamp_cache.py $CACHE /tmp/s2c > "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; pack; exit 1; }
# (2) first: the tower, this tree unpatched
FP8TOWER_CACHE_DIR=/tmp/s2c timeout 380 python3 -m fp8tower bench tower --model qwen3.5-27b \
  --m 1,8,16,32 --arms merged --backends cublaslt,auto --scheme per_tensor,channel_token,block128 \
  --rounds 3 --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -30 "$O/tower.log"; pack
# (1) then the stamps (this copy of the tree only)
if git apply "$B/stamps.patch" 2> "$O/patch.log" || patch -p1 < "$B/stamps.patch" >> "$O/patch.log" 2>&1
then
  python3 benchmarks/restamp_cache.py $CACHE /tmp/s2b > "$O/restamp_stamps.log" 2>&1
  FP8TOWER_CACHE_DIR=/tmp/s2b timeout 150 python3 "$B/bench_boundary.py" --probe \
    --schemes channel_token --m 1,8 --rounds 2 --timeline-replays 30 \
    --json "$O/boundary_ct.json" > "$O/boundary_ct.log" 2>&1
  echo "boundary rc=$?"; tail -24 "$O/boundary_ct.log"
else
  cat "$O/patch.log"; echo "stamps.patch did not apply"
fi
pack
