#!/usr/bin/env bash
# Session 26, device call 7: host time of an eager weight_only call at M = 1 whose cached
# choice splits x per token by the pre-pass (wo_mode 3), with its one-launch twin (the split
# in the GEMM, wo_mode 4: nn/plan.eager_one_launch) and without (FP8TOWER_EAGER_ONE_LAUNCH=0),
# alternated twice; call 6's cache, FP8TOWER_TUNE=0 (keys it lacks take the untuned default).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call7
mkdir -p "$O"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_TUNE=0 FP8TOWER_CACHE_DIR=/tmp/c7
R=benchmarks/results/wo_token_H200_2026-12-04
mkdir -p /tmp/c7
python3 benchmarks/restamp_cache.py $R/call6/tuning_cache.json /tmp/c7 > "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; exit 1; }
i=0
for v in 0 1 0 1; do
  i=$((i + 1))
  FP8TOWER_EAGER_ONE_LAUNCH=$v timeout 100 python3 benchmarks/bench_host.py --shapes 16384x5120,5120x6144 \
    --m 1 --backend auto --calls 1000 --rounds 5 --json "$O/host_${i}_twin$v.json" > "$O/host_${i}_twin$v.log" 2>&1
  echo "run $i twin=$v rc=$?"; grep -i "weight_only planned" "$O/host_${i}_twin$v.log" | head -2
done
tar czf "$FINAL/call7.tgz" -C "$FINAL" call7
