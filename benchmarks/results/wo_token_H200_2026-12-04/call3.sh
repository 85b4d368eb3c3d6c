#!/usr/bin/env bash
# Session 26, device call 3, the final tree (the per-token split the default from M = 16,
# configs.WO_TOKEN_MIN_M): (1) GPU tests: weight_only's numerics, tuning and dispatch, the
# plans; (2) the weight_only scorecard on call 2's cache, tuned and untuned, one run;
# (3) weight_only tuned from cold for the 27B model's keys (the 60 s bar, 7 M buckets).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=benchmarks/results/wo_token_H200_2026-12-04
mkdir -p /tmp/c3
python3 benchmarks/restamp_cache.py $R/call2/tuning_cache.json /tmp/c3 > "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; exit 1; }
if python3 -m pytest --version > /dev/null 2>&1; then
  FP8TOWER_CACHE_DIR=/tmp/c3tests timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py \
    tests/test_tuning.py tests/test_dispatch.py tests/test_gpu_plan.py -k "weight_only or tuning or dispatch or plan" \
    -p no:cacheprovider > "$O/tests.log" 2>&1
  echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$O/tests.log"
fi
FP8TOWER_CACHE_DIR=/tmp/c3 timeout 150 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 \
  --schemes weight_only --precompile --replays 10 --backends auto,untuned \
  --json "$O/scorecard_wo.json" > "$O/scorecard_wo.log" 2>&1
echo "scorecard rc=$? s=$(( $(date +%s) - start ))"
mkdir -p /tmp/c3cold
t0=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/c3cold timeout 200 python3 -m fp8tower tune --model qwen3.5-27b \
  --scheme weight_only > "$O/tune_cold.log" 2>&1
echo "tune cold rc=$? took $(( $(date +%s) - t0 )) s"; grep -m1 "tuned keys" "$O/tune_cold.log"
cp /tmp/c3cold/*.json "$O/tuning_cache_cold.json"
tar czf "$FINAL/call3.tgz" -C "$FINAL" call3
