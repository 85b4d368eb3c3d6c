#!/usr/bin/env bash
# Session 59's eighth device call (carry .gpu/run, with search_old.py: tuning/search.py
# before step (3) refined other backends' bests, made with `git show
# 8278697:src/fp8tower/tuning/search.py > .gpu/run/search_old.py`): the 27B tower's shapes at
# MS (default 32) x SCHEMES (default per_tensor,weight_only), tuned from cold per arm (at most
# TUNE_S, default 120 s, each), "new" (this tree) then "old" (search_old.py swapped in), then
# bench_gemm on that arm's cache (auto, FP8TOWER_TUNE=0), as session 58's twins.sh. Outputs:
# r/tune_A.log, bench_A.json, cache_A.json, status.txt, logs.tgz.
#   BUDGET=330 OUT=$OUT bash benchmarks/results/session59_2026-12-07/refine_ab.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-330}"
O=$OUT/r
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
S=10240x5120,6144x5120,16384x5120,5120x6144,12288x5120,1024x5120,14336x5120,34816x5120,5120x17408
F=src/fp8tower/tuning/search.py
[ -f .gpu/run/search_old.py ] || { echo "no search_old.py: stopped" | tee -a "$O/status.txt"; exit 1; }
cp "$F" /tmp/search_new.py
for arm in new old; do
  [ "$arm" = old ] && cp .gpu/run/search_old.py "$F"
  cold_cache .gpu/run "/tmp/r_$arm"
  s=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/r_$arm timeout -k 10 "$(lim "${TUNE_S:-120}")" python3 -m fp8tower tune \
    --shapes "$S" --m "${MS:-32}" --scheme "${SCHEMES:-per_tensor,weight_only}" \
    > "$O/tune_$arm.log" 2>&1
  echo "arm $arm: tune rc=$? tuned in $(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
  cp /tmp/r_$arm/*.json "$O/cache_$arm.json" 2>/dev/null
  FP8TOWER_CACHE_DIR=/tmp/r_$arm FP8TOWER_TUNE=0 timeout -k 10 "$(lim 90)" python3 \
    benchmarks/bench_gemm.py --shapes "$S" --m "${MS:-32}" \
    --schemes "${SCHEMES:-per_tensor,weight_only}" --backends auto --replays 10 --rounds 2 \
    --json "$O/bench_$arm.json" > "$O/bench_$arm.log" 2>&1
  echo "arm $arm: bench rc=$? left=$(left)" | tee -a "$O/status.txt"
done
cp /tmp/search_new.py "$F"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
