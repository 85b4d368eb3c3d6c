#!/usr/bin/env bash
# Session 52's third call (carry .gpu/run; either card): per_tensor x quantized in the GEMM
# at M = 2-8 now converts M rows padded to a power of two, tiled into the MMA's 16 columns
# (kernels/fp8_gemm.x_rows), where call2 found the 16-row conversion 1.08-2.26x the
# pre-pass pair's time on the deep tile. The same arms as call2 at M = 2, 4, 8 (untuned,
# deep, deep_own, nodeep against cuBLASLt; the band's K > 5120 cells among them), the eager
# Qwen3-8B-shaped step at batch 4 (twin on / off), then the GPU suite (the bits).
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c3
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
run() { bench_untuned "$O" "$@"; }  # NAME LIMIT bench_gemm.py args...
case "$GPU" in
  *H200*)
    S=5120x2048,5120x4096,4096x2048,4096x4096,4096x14336,5120x8192,10240x5120,2048x4096
    S=$S,6144x4096,8192x8192,9216x7168,28672x4096,34816x5120,1024x5120,1280x8192
    S=$S,37888x3584,22016x4096,14336x4096,18944x2048,12800x5120 ;;
  *)
    S=1024x4096,1024x5120,2048x4096,4096x2048,4096x4096,4096x14336,5120x2048,5120x4096
    S=$S,5120x8192,6144x4096,8192x8192,12288x4096,24576x4096,28672x4096,34816x5120
    S=$S,9216x2304,9600x4096,9216x7168,9216x8192,8704x7168 ;;
esac
run rows 180 --shapes "$S" --m 2,4,8 --schemes per_tensor \
  --backends cublaslt,untuned,deep,deep_own,nodeep
for on in 1 0; do
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 FP8TOWER_EAGER_ONE_LAUNCH=$on \
    timeout -k 10 "$(lim 90)" python3 -m fp8tower bench generate --model qwen3-8b --batch 4 \
    --context 512 --steps 16 --rounds 5 --arms bf16,fp8:per_tensor:merged --no-graph \
    --json "$O/gen4_$on.json" > "$O/gen4_$on.log" 2>&1
  echo "gen4 on=$on rc=$? left=$(left)" | tee -a "$O/status.txt"
  tail -1 "$O/gen4_$on.log"
done
gpu_suite_with_left "$O"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
