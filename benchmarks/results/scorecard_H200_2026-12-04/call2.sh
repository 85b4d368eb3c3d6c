#!/usr/bin/env bash
# Session 23, device call 2 (.gpu carried: call 1's CUTLASS configs prebuilt; call 1's tuned cache):
# (a) the per_tensor scorecard again (call 1 timed out tuning; 5120x17408's keys are left to tune),
# then weight_only's; (b) Nsight Compute on the in_proj GEMM (16384x5120) at M = 1, 8, 32: is the
# M = 32 body L2-bound (x read once per BLOCK_N rows of W)?
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c23
mkdir -p /tmp/c23 && cp -r .gpu/run/cache/. /tmp/c23/
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call1/tuning_cache.json \
  /tmp/c23 > "$O/restamp.log" 2>&1
B128='"block_k": 256, "num_stages": 4, "packed": true, "pdl": true, "prefetch": 1, "split_k": 1'
ncu_one() {  # name scheme m config
  timeout 60 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -k regex:_fp8_gemm_decode_kernel --launch-skip 2 --launch-count 1 \
    python3 benchmarks/ncu_gemm.py --scheme $2 --shape 16384x5120 --m $3 --config "$4" > "$O/ncu_$1.log" 2>&1
  echo "ncu $1 rc=$? s=$(( $(date +%s) - start ))"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Memory Throughput" "$O/ncu_$1.log" | head -6
}
for m in 1 8 32; do
  ncu_one b128_bn64_m$m block128 $m "{$B128, \"block_n\": 64, \"num_warps\": 4, \"prequant\": true}"
done
ncu_one b128_bn128_m32 block128 32 "{$B128, \"block_n\": 128, \"num_warps\": 8, \"prequant\": true}"
ncu_one pt_bn128_fused_m32 per_tensor 32 "{$B128, \"block_n\": 128, \"num_warps\": 8, \"prequant\": false}"
ncu_one pt_bn64_pair_m32 per_tensor 32 "{$B128, \"block_n\": 64, \"num_warps\": 4, \"prequant\": true}"
timeout 200 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes per_tensor \
  --precompile --replays 10 --backends cublaslt,auto,untuned --json "$O/scorecard_pt.json" \
  > "$O/scorecard_pt.log" 2>&1
echo "scorecard per_tensor rc=$? s=$(( $(date +%s) - start ))"
tail -42 "$O/scorecard_pt.log"
cp /tmp/c23/nvidia-h200.json "$O/tuning_cache.json"
timeout 230 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 --schemes weight_only \
  --precompile --replays 10 --backends cublaslt,auto,untuned --json "$O/scorecard_wo.json" \
  > "$O/scorecard_wo.log" 2>&1
echo "scorecard weight_only rc=$? s=$(( $(date +%s) - start ))"
tail -42 "$O/scorecard_wo.log"
cp /tmp/c23/nvidia-h200.json "$O/tuning_cache.json"
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2 && rm -rf "$O"
