#!/usr/bin/env bash
# Session 51's fourth call (carry .gpu/run), for an H200 only: its open untuned cells
# (per_tensor 5120x2048 / 5120x4096 at M = 2 / 4, 10240x5120 at M = 8) against the deep tile,
# with two neighbours; on another GPU it stops at once.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-200}"
O=$OUT/call4
mkdir -p "$O"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $GPU" | tee -a "$O/status.txt"
case "$GPU" in *H200*) ;; *) exit 0 ;; esac
install_wheels .gpu/run "$O/status.txt"
unpack_prebuilt .gpu/run /tmp/un ~/.cache/fp8tower tests/.cache
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
bench_untuned "$O" h200_open 120 --shapes 5120x2048,5120x4096,4096x4096,10240x5120,6144x4096 \
  --m 1,2,4,8 --schemes per_tensor --backends cublaslt,untuned,deep
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
