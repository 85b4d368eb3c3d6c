#!/usr/bin/env bash
# Session 25, device call 5: call 4 again, the refinements now with the PDL twin (configs.refinements).
# Before: scorecard call 2's cache, restamped. After: the same without its split keys of few
# K steps (drop_split_keys.py; the tower's block128 keys kept), which auto tunes again with
# this tree's tuner in the run. per_tensor 1024x5120 and weight_only's split shapes, M = 1..32,
# tuner's chain; then the GPU tuning tests.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call5
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=benchmarks/results/trigger_refine_H200_2026-12-04
SRC=benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json
python3 $R/drop_split_keys.py $SRC /tmp/after5_src.json --keep block128 > "$O/dropped.log" 2>&1 \
  || { cat "$O/dropped.log"; exit 1; }
mkdir -p /tmp/c255before /tmp/c255after
python3 benchmarks/restamp_cache.py $SRC /tmp/c255before > "$O/restamp.log" 2>&1 \
  && python3 benchmarks/restamp_cache.py /tmp/after5_src.json /tmp/c255after >> "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; exit 1; }
for arm in before after; do
  export FP8TOWER_CACHE_DIR=/tmp/c255$arm
  timeout 150 python3 benchmarks/bench_gemm.py --shapes 1024x5120 --m 1,8,16,32 --schemes per_tensor \
    --precompile --replays 10 --backends cublaslt,auto,untuned --json "$O/pt_$arm.json" > "$O/pt_$arm.log" 2>&1
  echo "pt $arm rc=$? s=$(( $(date +%s) - start ))"
  timeout 150 python3 benchmarks/bench_gemm.py --shapes 1024x5120,5120x6144,6144x5120 --m 1,8,16,32 \
    --schemes weight_only --precompile --replays 10 --backends auto --json "$O/wo_$arm.json" > "$O/wo_$arm.log" 2>&1
  echo "wo $arm rc=$? s=$(( $(date +%s) - start ))"
done
cp /tmp/c255after/*.json "$O/tuning_cache.json"
if python3 -m pytest --version > /dev/null 2>&1; then
  FP8TOWER_CACHE_DIR=/tmp/c255tests timeout 200 python3 -m pytest -q -m gpu tests/test_tuning.py \
    tests/test_dispatch.py -p no:cacheprovider > "$O/tests.log" 2>&1
  echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$O/tests.log"
else
  echo "no pytest on the device"
fi
# Tuning time from a cold cache with the refinements (the 60 s bar; no CUTLASS here)
mkdir -p /tmp/c255cold
t0=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/c255cold timeout 150 python3 -m fp8tower tune --model qwen3.5-27b --m 1,8,16,32 \
  --scheme per_tensor --max-configs 4 > "$O/tune_cold.log" 2>&1
echo "tune cold rc=$? took $(( $(date +%s) - t0 )) s"; tail -3 "$O/tune_cold.log"
cp /tmp/c255cold/*.json "$O/tuning_cache_cold.json"
tar czf "$FINAL/call5.tgz" -C "$FINAL" call5
