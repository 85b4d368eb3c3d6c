#!/usr/bin/env bash
# Session 26, device call 1: weight_only's x split per token (config wo_mode 3) against the
# split per 1x128 group. (1) GPU numerics of both splits; (2) per GEMM, the tower's shapes,
# M = 1..32, the tuner's chain, session 25's cache: each tuned choice against the same
# config split per token, and the untuned default against its per-token twin, one run;
# (3) weight_only retuned from cold with the per-token split in the space (tune time), then
# the same scorecard on that cache.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
SRC=benchmarks/results/trigger_refine_H200_2026-12-04/call5/tuning_cache.json
SHAPES=34816x5120,5120x17408,16384x5120,14336x5120,12288x5120,10240x5120,6144x5120,5120x6144,1024x5120
mkdir -p /tmp/c1old /tmp/c1new
python3 benchmarks/restamp_cache.py $SRC /tmp/c1old /tmp/c1new > "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; exit 1; }
if python3 -m pytest --version > /dev/null 2>&1; then
  FP8TOWER_CACHE_DIR=/tmp/c1tests timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py \
    -k "weight_only_split or priority_configs" -p no:cacheprovider > "$O/tests.log" 2>&1
  echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$O/tests.log"
fi
export FP8TOWER_CACHE_DIR=/tmp/c1old
timeout 200 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes weight_only \
  --precompile --replays 10 --json "$O/wo_twins.json" \
  --backends "auto,auto[prequant=true,wo_mode=3],triton,triton[wo_mode=3]" > "$O/wo_twins.log" 2>&1
echo "twins rc=$? s=$(( $(date +%s) - start ))"
export FP8TOWER_CACHE_DIR=/tmp/c1new
t0=$(date +%s)
timeout 150 python3 -m fp8tower tune --shapes $SHAPES --m 1,8,16,32 --scheme weight_only --retune \
  > "$O/tune.log" 2>&1
echo "tune rc=$? took $(( $(date +%s) - t0 )) s"; tail -2 "$O/tune.log"
cp /tmp/c1new/*.json "$O/tuning_cache.json"
timeout 150 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes weight_only \
  --precompile --replays 10 --backends auto,untuned --json "$O/wo_new.json" > "$O/wo_new.log" 2>&1
echo "new rc=$? s=$(( $(date +%s) - start ))"
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
