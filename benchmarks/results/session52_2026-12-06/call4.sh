#!/usr/bin/env bash
# Prepared in session 52 for a fourth call, not run (its device time ran out): the
# fp8_gemm.x_rows A/B on one machine (carry .gpu/run; either card). bench_gemm.py on the
# 27B tower's shapes and four more at M = 2, 4, 8, the shared default ("rule", as an H200
# serves these shapes untuned: x quantized in the GEMM on 8 of the 9 at M = 2 / 4, 6 at
# M = 8), "nodeep", the eager twin of the deep pair ("deep_own") and cuBLASLt: twice with
# x_rows forced to 0 (the 16-row conversion, as before session 52) and twice as committed,
# alternated (PAIRS=1: once each). The forced arms run with XOFF first on PYTHONPATH: its
# sitecustomize.py sets fp8_gemm.x_rows to 0 in every Python process of the arm, the
# precompile workers too (a patch in the parent alone would leave them building the
# committed variants); the JSON files do not record it, their names (off_*) do.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-400}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c4
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
S=10240x5120,6144x5120,16384x5120,5120x6144,12288x5120,1024x5120,14336x5120,34816x5120
S=$S,5120x17408,4096x14336,28672x4096,9216x7168,8704x7168
XOFF=/tmp/x_rows_off
mkdir -p "$XOFF"
printf 'import fp8tower.kernels.fp8_gemm as f\nf.x_rows = lambda *a: 0\n' > "$XOFF/sitecustomize.py"
ab() {  # NAME X_ROWS (0: forced off, 1: as committed)
  local pp=$PYTHONPATH
  [ "$2" = 0 ] && pp=$XOFF:$PYTHONPATH
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 PYTHONPATH=$pp timeout -k 10 "$(lim 90)" \
    python3 benchmarks/bench_gemm.py --shapes "$S" --m 2,4,8 --schemes per_tensor \
    --backends cublaslt,rule,nodeep,deep_own --precompile --replays 10 --rounds 3 \
    --json "$O/$1.json" > "$O/$1.log" 2>&1
  echo "$1 rc=$? left=$(left)" | tee -a "$O/status.txt"
}
for i in $(seq 1 "${PAIRS:-2}"); do
  ab "off_$i" 0
  ab "on_$i" 1
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
