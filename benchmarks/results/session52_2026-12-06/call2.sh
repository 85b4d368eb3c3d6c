#!/usr/bin/env bash
# Session 52's second call (carry .gpu/run; either card). call1 found the eager one-launch
# twin of the deep pair (deep_own: the deep tile quantizing x itself) 1.41-1.50x the pair's
# GPU time in the H100's 133-159-tile band at M = 2-8, where the shared default ("rule",
# x quantized in the GEMM too: one launch) ran 1.27-1.46x faster than it. Here: which
# one-launch config an eager call should run, wherever the pair serves at M = 1-8 (deep /
# deep_own / nodeep against cuBLASLt, 18 shapes), and the eager Qwen3-8B-shaped step at
# batch 4 (merged per_tensor untuned, twin on / off). H200: session 51's next.sh H200 half
# (with deep_own and nodeep) in place of the 18 shapes.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c2
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
run() { bench_untuned "$O" "$@"; }  # NAME LIMIT bench_gemm.py args...
case "$GPU" in
  *H200*)
    S=5120x2048,5120x4096,4096x2048,4096x4096,4096x14336,5120x8192,10240x5120,2048x4096
    S=$S,6144x4096,8192x8192,9216x7168,28672x4096,34816x5120,1024x5120,1280x8192
    S=$S,37888x3584,22016x4096,14336x4096,18944x2048,12800x5120
    run h200_deep 220 --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
      --backends cublaslt,untuned,deep,deep_own,nodeep ;;
  *)
    S=1024x4096,1024x5120,2048x4096,4096x2048,4096x4096,4096x14336,5120x2048,5120x4096
    S=$S,5120x8192,6144x4096,8192x8192,12288x4096,24576x4096,28672x4096,34816x5120
    S=$S,9216x2304,9600x4096,9216x7168
    run twin 150 --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
      --backends cublaslt,untuned,deep,deep_own,nodeep ;;
esac
for on in 1 0; do
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 FP8TOWER_EAGER_ONE_LAUNCH=$on \
    timeout -k 10 "$(lim 90)" python3 -m fp8tower bench generate --model qwen3-8b --batch 4 \
    --context 512 --steps 16 --rounds 5 --arms bf16,fp8:per_tensor:merged --no-graph \
    --json "$O/gen4_$on.json" > "$O/gen4_$on.log" 2>&1
  echo "gen4 on=$on rc=$? left=$(left)" | tee -a "$O/status.txt"
  tail -3 "$O/gen4_$on.log"
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
