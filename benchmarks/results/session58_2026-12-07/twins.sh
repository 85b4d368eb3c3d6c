#!/usr/bin/env bash
# Session 58's third device call (carry .gpu/run, with configs_old.py: c587cea's
# kernels/configs.py, before x_twin and block_k_twins joined the winner's refinements; make it
# with `git show c587cea:src/fp8tower/kernels/configs.py > .gpu/run/configs_old.py`): the
# tuner's sample of 16 configs, tuned from cold per arm, "new" (the working tree) then "old"
# (configs_old.py swapped in; the new one restored after), then bench_gemm on that arm's
# cache (auto, FP8TOWER_TUNE=0). One Triton compile cache: the old arm's tuning time is
# flattered by the new arm's compiles; compare GEMM times. Either card (H100 wanted for
# comparison with c8, the same question asked of 16 vs 48 configs). Outputs: c9/tune_A.log,
# bench_A.json, cache_A.json, status.txt, logs.tgz.
#   BUDGET=450 OUT=$OUT bash benchmarks/results/session58_2026-12-07/twins.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-450}"
O=$OUT/c9
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
TOWER=10240x5120,6144x5120,16384x5120,5120x6144,12288x5120,1024x5120,14336x5120
S=${SHAPES:-$TOWER,34816x5120,5120x17408}
MS=${MS:-1,32}
SCHEMES=${SCHEMES:-per_tensor,weight_only,block128}
CFG=src/fp8tower/kernels/configs.py
if [ ! -f .gpu/run/configs_old.py ]; then
  echo "no .gpu/run/configs_old.py: stopped" | tee -a "$O/status.txt"
  exit 1
fi
cp "$CFG" /tmp/configs_new.py
for arm in new old; do
  [ "$arm" = old ] && cp .gpu/run/configs_old.py "$CFG"
  cold_cache .gpu/run "/tmp/tw_$arm"
  s=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/tw_$arm timeout -k 10 "$(lim 170)" python3 -m fp8tower tune \
    --shapes "$S" --m "$MS" --scheme "$SCHEMES" > "$O/tune_$arm.log" 2>&1
  echo "arm $arm: tune rc=$? tuned in $(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
  cp /tmp/tw_$arm/*.json "$O/cache_$arm.json" 2>/dev/null
  FP8TOWER_CACHE_DIR=/tmp/tw_$arm FP8TOWER_TUNE=0 timeout -k 10 "$(lim 60)" python3 \
    benchmarks/bench_gemm.py --shapes "$S" --m "$MS" --schemes "$SCHEMES" --backends auto \
    --replays 10 --rounds 2 --json "$O/bench_$arm.json" > "$O/bench_$arm.log" 2>&1
  echo "arm $arm: bench rc=$? left=$(left)" | tee -a "$O/status.txt"
done
cp /tmp/configs_new.py "$CFG"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
