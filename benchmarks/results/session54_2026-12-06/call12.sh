#!/usr/bin/env bash
# Session 54's A/B of the tuner's neighbours (tuning.search._neighbour_shortlist: a key also
# times the winners of the same shape's keys in other seed groups), prepared, not run (no
# machine could be started for it). Carry .gpu/run and .gpu/old, where .gpu/old/src is the
# tuner without them: `mkdir -p .gpu/old && git archive ed9bd44 src | tar x -C .gpu/old`.
# Either card.
# bench_gemm.py on five of the 27B tower's shapes (those whose weight_only M = 32 key had not
# timed M = 16's winner though it serves it, call11's H100 cache; per_tensor 10240x5120 had
# the gap in session 37's H200 cache), per_tensor and weight_only, M = 1 / 16 / 32, auto
# tuned from an empty cache in each run (M = 1 explored, 16 seeded from it, 32 explored and,
# with the neighbours, timing M = 1's and 16's winners too). Three runs: the old tree to
# warm Triton's compile cache (its times not compared), then this tree, then the old one
# again: new against old2 compares the GEMMs and the tuning times (bench_gemm's log says
# when each scheme is done), the neighbours' own compiles included. Each run's tuning cache
# is kept.
#   BUDGET=580 OUT=$OUT bash benchmarks/results/session54_2026-12-06/call12.sh
# (SHAPES narrows it.)
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-580}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c12
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
for arm in warm new old2; do
  src=$PWD/src; [ $arm != new ] && src=$PWD/.gpu/old/src
  unpack_prebuilt .gpu/run "/tmp/ab_$arm"
  l=170; [ $arm = warm ] && l=220  # the warm-up pays Triton's cold compiles
  PYTHONPATH=$src:/tmp/site FP8TOWER_CACHE_DIR=/tmp/ab_$arm timeout -k 10 "$(lim $l)" \
    python3 benchmarks/bench_gemm.py --m 1,16,32 \
    --shapes "${SHAPES:-10240x5120,12288x5120,14336x5120,16384x5120,1024x5120}" \
    --schemes per_tensor,weight_only --backends auto --precompile --replays 10 --rounds 2 \
    --json "$O/$arm.json" > "$O/$arm.log" 2>&1
  echo "$arm rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep "done at" "$O/$arm.log" | tee -a "$O/status.txt"
  cp /tmp/ab_$arm/*.json "$O/cache_$arm.json" 2>/dev/null
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
