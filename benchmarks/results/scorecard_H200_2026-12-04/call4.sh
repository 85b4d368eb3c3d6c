#!/usr/bin/env bash
# Session 23, device call 4 (.gpu/run carried, as call 3): call 3's scorecards again with call 2's
# tuned cache (call 3 had not found it in the tree and retuned until its timeouts): per_tensor
# in the tuner's chain (bench_gemm --chain model) and back to back (--chain gemm); weight_only
# in the tuner's chain.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call4
mkdir -p "$O"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c24
mkdir -p /tmp/c24 && cp -r .gpu/run/cache/. /tmp/c24/
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c24 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 110 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes per_tensor \
    --precompile --replays 10 --backends cublaslt,auto,untuned --chain $chain \
    --json "$O/scorecard_pt_$chain.json" > "$O/scorecard_pt_$chain.log" 2>&1
  echo "scorecard per_tensor $chain rc=$? s=$(( $(date +%s) - start ))"
  grep -A8 "slower than" "$O/scorecard_pt_$chain.log" | head -8
done
timeout 90 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes weight_only \
  --precompile --replays 10 --backends auto,untuned --chain model \
  --json "$O/scorecard_wo_model.json" > "$O/scorecard_wo_model.log" 2>&1
echo "scorecard weight_only rc=$? s=$(( $(date +%s) - start ))"
cp /tmp/c24/nvidia-h200.json "$O/tuning_cache.json"  # call 2's, restamped: not kept in the tree
tar czf "$FINAL/call4.tgz" -C "$FINAL" call4 && rm -rf "$O"
