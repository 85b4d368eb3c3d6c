#!/usr/bin/env bash
# Prepared in session 56, not run (no device time left): does the tuner's sample of 16
# configs a backend (search.MAX_CONFIGS, evenly spaced over spaces of ~35-820) leave speed
# behind? The neighbours (session 54) found two such keys of 18 (session 56, calls 3 / 7);
# this asks it of every key of a set. Carry .gpu/run; either card (an H200 for #12's shares).
# Arms: "16" (the default) then "$WIDE" (--max-configs), each `fp8tower tune` from an empty
# tuning cache of its own (one Triton compile cache: the wide arm's tuning time is flattered
# by the first arm's compiles, so compare GEMM times, not tuning times), then bench_gemm on
# that cache (auto, FP8TOWER_TUNE=0: a key the tune did not reach runs untuned, so read each
# row's config against cache_A.json). Outputs: c8/tune_A.log, bench_A.json, cache_A.json per
# arm A, status.txt ("tuned in" per arm), logs.tgz. Defaults: the 27B tower's 9 shapes at
# M = 32 (weight_only's 31 MB and 10240x5120 shapes under 70% of the H100's ceiling there),
# per_tensor and weight_only; SHAPES, MS, SCHEMES, WIDE change them.
#   BUDGET=560 OUT=$OUT bash benchmarks/results/session56_2026-12-07/next.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c8
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
TOWER=10240x5120,6144x5120,16384x5120,5120x6144,12288x5120,1024x5120,14336x5120
S=${SHAPES:-$TOWER,34816x5120,5120x17408}
MS=${MS:-32}
SCHEMES=${SCHEMES:-per_tensor,weight_only}
for arm in 16 "${WIDE:-48}"; do
  cold_cache .gpu/run "/tmp/mc_$arm"
  s=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/mc_$arm timeout -k 10 "$(lim 300)" python3 -m fp8tower tune \
    --shapes "$S" --m "$MS" --scheme "$SCHEMES" --max-configs "$arm" \
    > "$O/tune_$arm.log" 2>&1
  echo "arm $arm: tune rc=$? tuned in $(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
  cp /tmp/mc_$arm/*.json "$O/cache_$arm.json" 2>/dev/null
  FP8TOWER_CACHE_DIR=/tmp/mc_$arm FP8TOWER_TUNE=0 timeout -k 10 "$(lim 90)" python3 \
    benchmarks/bench_gemm.py --shapes "$S" --m "$MS" --schemes "$SCHEMES" --backends auto \
    --replays 10 --rounds 2 --json "$O/bench_$arm.json" > "$O/bench_$arm.log" 2>&1
  echo "arm $arm: bench rc=$? left=$(left)" | tee -a "$O/status.txt"
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
