#!/usr/bin/env bash
# Prepared in session 52 for a fourth call, not run (its device time ran out): the
# fp8_gemm.x_rows A/B on one machine (carry .gpu/run; either card). bench_gemm.py on the
# 27B tower's shapes and four more at M = 2, 4, 8, the shared default ("rule", as an H200
# serves these shapes untuned: x quantized in the GEMM on 8 of the 9 at M = 2 / 4, 6 at
# M = 8), "nodeep", the eager twin of the deep pair ("deep_own") and cuBLASLt: twice with
# x_rows forced to 0 (the 16-row conversion, as before session 52) and twice as committed,
# alternated (PAIRS=1: once each). The forced arm compiles at launch (--precompile's
# workers would build the committed variants): no --precompile there, a longer limit.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-400}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c4
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
S=10240x5120,6144x5120,16384x5120,5120x6144,12288x5120,1024x5120,14336x5120,34816x5120
S=$S,5120x17408,4096x14336,28672x4096,9216x7168,8704x7168
ab() {  # NAME X_ROWS(0: forced off, 1: as committed)
  local pre=--precompile l=80
  [ "$2" = 0 ] && pre= l=150
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 XR=$2 timeout -k 10 "$(lim $l)" python3 -c '
import os, runpy, sys
if os.environ["XR"] == "0":
    import fp8tower.kernels.fp8_gemm as f
    f.x_rows = lambda *a: 0
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' benchmarks/bench_gemm.py --shapes "$S" \
    --m 2,4,8 --schemes per_tensor --backends cublaslt,rule,nodeep,deep_own $pre \
    --replays 10 --rounds 3 --json "$O/$1.json" > "$O/$1.log" 2>&1
  echo "$1 rc=$? left=$(left)" | tee -a "$O/status.txt"
}
for i in $(seq 1 "${PAIRS:-2}"); do
  ab "off_$i" 0
  ab "on_$i" 1
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
