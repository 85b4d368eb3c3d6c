#!/usr/bin/env bash
# Session 23, device call 3 (.gpu carried: the CUTLASS libraries rebuilt for the free_kb source,
# with pf / bp 64x32x128 at free_kb 100 and 136; call 2's tuned cache):
# (a) bench_cutlass_free.py: the merged tower at M = 32 with its CUTLASS out_proj / o_proj
#     leaving 0 / 100 / 136 KB of shared memory free, arms alternated;
# (b) the per-GEMM scorecard in the tuner's chain (bench_gemm --chain model, the new default)
#     and back to back (--chain gemm), per_tensor; weight_only in the tuner's chain;
# (c) the untuned rule against cuBLASLt on other families' shapes, per_tensor, the tuner's chain.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c23
mkdir -p /tmp/c23 && cp -r .gpu/run/cache/. /tmp/c23/
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c23 > "$O/restamp.log" 2>&1
timeout 170 python3 benchmarks/bench_cutlass_free.py --m 32 --rounds 2 --json "$O/free.json" \
  > "$O/free.log" 2>&1
echo "free rc=$? s=$(( $(date +%s) - start ))"; tail -4 "$O/free.log"
for chain in model gemm; do
  timeout 100 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes per_tensor \
    --precompile --replays 10 --backends cublaslt,auto,untuned --chain $chain \
    --json "$O/scorecard_pt_$chain.json" > "$O/scorecard_pt_$chain.log" 2>&1
  echo "scorecard per_tensor $chain rc=$? s=$(( $(date +%s) - start ))"
  grep -A8 "slower than" "$O/scorecard_pt_$chain.log" | head -8
done
timeout 100 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes weight_only \
  --precompile --replays 10 --backends auto,untuned --chain model \
  --json "$O/scorecard_wo_model.json" > "$O/scorecard_wo_model.log" 2>&1
echo "scorecard weight_only rc=$? s=$(( $(date +%s) - start ))"
timeout 150 python3 benchmarks/bench_gemm.py --shapes families --m 1,8,16,32 --schemes per_tensor \
  --precompile --replays 10 --backends cublaslt,untuned --chain model \
  --json "$O/families_untuned.json" > "$O/families_untuned.log" 2>&1
echo "families rc=$? s=$(( $(date +%s) - start ))"
grep -A12 "slower than" "$O/families_untuned.log" | head -12
cp /tmp/c23/nvidia-h200.json "$O/tuning_cache.json"
tar czf "$FINAL/call3.tgz" -C "$FINAL" call3 && rm -rf "$O"
