#!/usr/bin/env bash
# NOT RUN YET (prepared in session 33; no machine could be started after call1). Carry
# [".gpu"], with .gpu/old/src = 7aebef7's src as for call1:
#  1. the GPU tests call1 failed, after their fixes (cuBLASLt block-wise scales padded to
#     L4 = round_up(K/128, 4); the column-stride test's x built strided at M=1 too), plus the
#     new 1152x1280 shape through every backend; a real tuning (session 34: the winner's
#     output is checked against the reference on a GPU); the fused amax with an all-zero
#     token (session 35);
#  2. the per_tensor 27B tower, merged + auto, M = 1 and 8, this tree (exact division) against
#     session 31's (x * (1/s)), alternated old/new twice, each on session 26's cache restamped
#     by its own tree: call1 found the division 1.7-2.4% slower on the M=8 in-GEMM tiles;
#  3. bench_host.py at M = 1 (session 32's per-call checks, 0.95 -> 1.05 us on the CPU);
#  4. the paired trace of the merged tower, per_tensor and channel_token at M = 1, attributed
#     (#12's us/call beyond bytes; l2_keep_H200_2026-12-04/next_paired_trace.sh).
# The tar is rewritten after each step.
#   OUT=$OUT bash benchmarks/results/audit2_H200_2026-12-05/call2.sh
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O"
pack() { tar czf "$FINAL/call2.tgz" -C "$FINAL" call2; }
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONUNBUFFERED=1 FP8TOWER_TUNE=0
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
PYTHONPATH=$PWD/src:/tmp/site FP8TOWER_CACHE_DIR=/tmp/c2_tests timeout 150 python3 -m pytest -q -m gpu \
  -p no:cacheprovider -n 8 --timeout 120 -rfEs \
  tests/test_gpu.py tests/test_gpu_plan.py tests/test_dispatch.py \
  -k "column_stride or 1152x1280 or captured_buffers or real_tuning_on_gpu or fused_amax_is_bit_exact" \
  > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -8 "$O/tests.log"; pack
CACHE=benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json
for arm in old new; do
  src=$PWD/src; [ $arm = old ] && src=$PWD/.gpu/old/src
  mkdir -p /tmp/c2$arm
  PYTHONPATH=$src python3 benchmarks/restamp_cache.py $CACHE /tmp/c2$arm >> "$O/restamp.log" 2>&1 \
    || { cat "$O/restamp.log"; pack; exit 1; }
done
for round in 1 2; do
  for arm in old new; do
    src=$PWD/src; one=--rounds=1; [ $arm = old ] && { src=$PWD/.gpu/old/src; one=; }
    # one round each, as the old tree times (it has no --rounds; session 35 made 3 the default)
    PYTHONPATH=$src FP8TOWER_CACHE_DIR=/tmp/c2$arm timeout 90 python3 -m fp8tower \
      bench tower --model qwen3.5-27b --m 1,8 --arms merged --backends auto $one \
      --scheme per_tensor --json "$O/tower_${arm}_$round.json" > "$O/tower_${arm}_$round.log" 2>&1
    echo "tower $arm $round rc=$?"; grep -i "per_tensor" "$O/tower_${arm}_$round.log" | tail -3
    pack
  done
done
PYTHONPATH=$PWD/src FP8TOWER_CACHE_DIR=/tmp/c2new timeout 120 python3 benchmarks/bench_host.py \
  --m 1 --json "$O/host.json" > "$O/host.log" 2>&1
echo "host rc=$?"; tail -14 "$O/host.log"; pack
for sc in per_tensor channel_token; do
  PYTHONPATH=$PWD/src FP8TOWER_CACHE_DIR=/tmp/c2new timeout 120 python3 -m fp8tower trace capture \
    --model qwen3.5-27b --arm merged --backend auto --m 1 --scheme $sc --out /tmp/trace_$sc \
    > "$O/${sc}_capture.log" 2>&1
  echo "$sc capture rc=$?"
  PYTHONPATH=$PWD/src timeout 40 python3 -m fp8tower trace attribute /tmp/trace_$sc \
    --json "$O/${sc}_attr.json" > "$O/${sc}_attr.log" 2>&1
  echo "$sc attribute rc=$?"; head -16 "$O/${sc}_attr.log"; pack
done
