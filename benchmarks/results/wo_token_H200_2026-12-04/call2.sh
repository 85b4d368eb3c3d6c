#!/usr/bin/env bash
# Session 26, device call 2: weight_only with the per-token split in the GEMM at M = 1
# (wo_mode 4) and the deep unsplit tile in the per-token modes added to the tuner's first
# configs. (1) GPU numerics; (2) retuned from cold on the tower's shapes (tune time), then the
# scorecard on three caches in a row: session 25's (before), call 1's (the per-token split
# by the pre-pass only), this one's; (3) the untuned default per group against per token at
# M = 16 / 32 / 64, the tower's and the other families' shapes.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=benchmarks/results/wo_token_H200_2026-12-04
SHAPES=34816x5120,5120x17408,16384x5120,14336x5120,12288x5120,10240x5120,6144x5120,5120x6144,1024x5120
mkdir -p /tmp/c2old /tmp/c2one /tmp/c2new
python3 benchmarks/restamp_cache.py benchmarks/results/trigger_refine_H200_2026-12-04/call5/tuning_cache.json \
  /tmp/c2old /tmp/c2new > "$O/restamp.log" 2>&1 \
  && python3 benchmarks/restamp_cache.py $R/call1/tuning_cache.json /tmp/c2one >> "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; exit 1; }
if python3 -m pytest --version > /dev/null 2>&1; then
  FP8TOWER_CACHE_DIR=/tmp/c2tests timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py \
    -k "weight_only_split" -p no:cacheprovider > "$O/tests.log" 2>&1
  echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$O/tests.log"
fi
t0=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/c2new timeout 150 python3 -m fp8tower tune --shapes $SHAPES --m 1,8,16,32 \
  --scheme weight_only --retune > "$O/tune.log" 2>&1
echo "tune rc=$? took $(( $(date +%s) - t0 )) s"
cp /tmp/c2new/*.json "$O/tuning_cache.json"
for arm in old one new; do
  FP8TOWER_CACHE_DIR=/tmp/c2$arm timeout 100 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 \
    --schemes weight_only --replays 10 --backends auto --json "$O/wo_$arm.json" > "$O/wo_$arm.log" 2>&1
  echo "$arm rc=$? s=$(( $(date +%s) - start ))"
done
FP8TOWER_CACHE_DIR=/tmp/c2none timeout 150 python3 benchmarks/bench_gemm.py --shapes tower --m 16,32,64 \
  --schemes weight_only --precompile --replays 10 --backends "triton,triton[wo_mode=3]" \
  --json "$O/default_tower.json" > "$O/default_tower.log" 2>&1
echo "default tower rc=$? s=$(( $(date +%s) - start ))"
FP8TOWER_CACHE_DIR=/tmp/c2none timeout 150 python3 benchmarks/bench_gemm.py --shapes families --m 16,32,64 \
  --schemes weight_only --precompile --replays 10 --backends "triton,triton[wo_mode=3]" \
  --json "$O/default_families.json" > "$O/default_families.log" 2>&1
echo "default families rc=$? s=$(( $(date +%s) - start ))"
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2
