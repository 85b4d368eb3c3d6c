#!/usr/bin/env bash
# Session 53's third device call (carry .gpu/run; either card, an H200 wanted), after call2:
# fp8_gemm.x_rows for channel_token / block128 limited to X_ROWS <= 4 (M = 2-4; at 8 they
# lost). 1. #12's open untuned H200 cells against cuBLASLt (per_tensor 5120x2048 / 5120x4096
# at M = 2 / 4, 10240x5120 at M = 8; block128 12288x5120 at M = 64), per_tensor's shared
# default now with x_rows. 2. The eager Qwen3-8B-shaped step at batch 4, merged, untuned,
# channel_token and block128 (their eager one-launch twins quantize x in the GEMM), x_rows
# as committed (on) and forced to 0 (off; XOFF's sitecustomize.py). 3. The GPU suite.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-520}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c3
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
bench_untuned "$O" open_pt 60 --shapes 5120x2048,5120x4096,10240x5120 --m 2,4,8 \
  --schemes per_tensor --backends cublaslt,rule
bench_untuned "$O" open_b128 40 --shapes 12288x5120 --m 64 --schemes block128 \
  --backends cublaslt,rule
XOFF=/tmp/x_rows_off
mkdir -p "$XOFF"
printf 'import fp8tower.kernels.fp8_gemm as f\nf.x_rows = lambda *a: 0\n' > "$XOFF/sitecustomize.py"
for scheme in channel_token block128; do
  for arm in on off; do
    pp=$PYTHONPATH
    [ $arm = off ] && pp=$XOFF:$PYTHONPATH
    FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 PYTHONPATH=$pp timeout -k 10 "$(lim 60)" \
      python3 -m fp8tower bench generate --model qwen3-8b --batch 4 --context 512 \
      --steps 16 --rounds 5 --arms "bf16,fp8:$scheme:merged" --no-graph \
      --json "$O/gen4_${scheme}_$arm.json" > "$O/gen4_${scheme}_$arm.log" 2>&1
    echo "gen4 $scheme $arm rc=$? left=$(left)" | tee -a "$O/status.txt"
    tail -1 "$O/gen4_${scheme}_$arm.log"
  done
done
gpu_suite_with_left "$O"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
