#!/usr/bin/env bash
# Session 55's cut of session 54's call12.sh (the tuner's neighbours' A/B) for a short
# budget (nine starts failed first): no warm-up arm; each arm tunes from an empty tuning
# cache AND an empty Triton compile cache of its own (TRITON_CACHE_DIR), so both pay the
# same cold compiles and their tuning times compare. Carry .gpu/run and .gpu/old, where
# .gpu/old/src is the tuner without neighbours: `mkdir -p .gpu/old && git archive ed9bd44 src
# | tar x -C .gpu/old`. Either card. Arms: new (this tree), old (ed9bd44), each within half
# of what is left; bench_gemm per_tensor + weight_only, M = 1 / 16 / 32, on the shapes whose
# M = 32 key had not timed M = 16's winner on the H100 (session 54, call11).
#   BUDGET=500 OUT=$OUT bash benchmarks/results/session55_2026-12-07/call1.sh
# (SHAPES widens or narrows it.)
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-500}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c1
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
half=$(( ($(left) - 15) / 2 ))
for arm in new old; do
  src=$PWD/src; [ $arm = old ] && src=$PWD/.gpu/old/src
  unpack_prebuilt .gpu/run "/tmp/ab_$arm"
  mkdir -p "/tmp/tc_$arm"
  s=$(date +%s)
  PYTHONPATH=$src:/tmp/site FP8TOWER_CACHE_DIR=/tmp/ab_$arm TRITON_CACHE_DIR=/tmp/tc_$arm \
    timeout -k 10 "$(lim $half)" python3 benchmarks/bench_gemm.py --m 1,16,32 \
    --shapes "${SHAPES:-10240x5120,14336x5120,1024x5120}" \
    --schemes per_tensor,weight_only --backends auto --precompile --replays 10 --rounds 2 \
    --json "$O/$arm.json" > "$O/$arm.log" 2>&1
  echo "$arm rc=$? wall=$(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
  grep "done at" "$O/$arm.log" | tee -a "$O/status.txt"
  cp /tmp/ab_$arm/*.json "$O/cache_$arm.json" 2>/dev/null
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
