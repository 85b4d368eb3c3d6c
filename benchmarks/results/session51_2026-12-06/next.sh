#!/usr/bin/env bash
# The next session's first device call, prepared in session 51 (carry .gpu/run; either card).
# H200: session 50's H200 half (the deep tile against the H200's untuned choice at M = 1-8 on
#   20 shapes, its open cells 5120x2048 / 5120x4096 at M = 2 / 4 among them; block128
#   12288x5120 at M = 32 / 64; per_tensor 10240x5120 at M = 8 / 16), none run since session 48.
# H100: the eager twin's GPU time where session 51's bound now serves the deep tile (133-159
#   tiles, M = 2-8, K <= 5120: deep from the pair, deep_own quantizing x as an eager call does,
#   rule the shared default it replaced), and the two band cells still open at M = 8
#   (9216x8192, 8704x7168) against cuBLASLt again.
# Then the GPU suite with what is left.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/next
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
run() { bench_untuned "$O" "$@"; }  # NAME LIMIT bench_gemm.py args...
case "$GPU" in
  *H200*)
    S=5120x2048,5120x4096,4096x2048,4096x4096,4096x14336,5120x8192,10240x5120,2048x4096
    S=$S,6144x4096,8192x8192,9216x7168,28672x4096,34816x5120,1024x5120,1280x8192
    S=$S,37888x3584,22016x4096,14336x4096,18944x2048,12800x5120
    run h200_deep 220 --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
      --backends cublaslt,untuned,deep
    run b128_m64 50 --shapes 12288x5120,14336x5120,10240x5120,12288x4096 --m 32,64 \
      --schemes block128 --backends cublaslt,untuned
    run pt_m8 40 --shapes 10240x5120,10240x4096,9216x5120,11264x5120 --m 8,16 \
      --schemes per_tensor --backends cublaslt,untuned ;;
  *H100*)
    B=9216x2304,9216x3072,9600x4096,10176x4096,9856x5120,8512x4096,9472x2560,10112x5120
    run band_twin 100 --shapes "$B" --m 2,4,8 --schemes per_tensor \
      --backends cublaslt,untuned,rule,deep,deep_own
    run band_open 60 --shapes 9216x8192,8704x7168,9216x7168 --m 2,4,8 --schemes per_tensor \
      --backends cublaslt,untuned,deep ;;
  *) echo "unknown gpu '$GPU': the GPU suite only" | tee -a "$O/status.txt" ;;
esac
gpu_suite_with_left "$O"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
