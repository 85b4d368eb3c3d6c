#!/usr/bin/env bash
# Session 53's second device call (carry .gpu/run; either card): fp8_gemm.x_rows now also
# serves channel_token (fused amax) and block128 (per-group scales) x quantized in the GEMM
# at M = 2-8 (their scales taken over the X_ROWS rows and tiled as x is). 1. The GPU tests of
# those bits (in-kernel quant against the pre-pass at M = 2 / 5 / 8, the eager plans).
# 2. bench_gemm.py at M = 2, 4, 8, untuned (FP8TOWER_TUNE=0): the pre-pass pair on the
# default tile ("nodeep") and that tile quantizing x itself (the eager twin's mode, no PDL:
# "nodeep[...]"), channel_token also on the deep tile; cuBLASLt. Once with x_rows forced to
# 0 (XOFF's sitecustomize.py, in every process of the arm, precompile workers too: off.json)
# and once as committed (on.json), per scheme.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-480}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c2
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
timeout -k 10 "$(lim 150)" python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short \
  tests/test_gpu_plan.py -k "in_kernel_quant or eager_plan_is_one_launch or twin" \
  > "$O/tests.log" 2>&1
echo "tests rc=$? left=$(left)" | tee -a "$O/status.txt"
tail -3 "$O/tests.log"
S=10240x5120,6144x5120,16384x5120,5120x6144,12288x5120,1024x5120,14336x5120,34816x5120
S=$S,5120x17408,4096x14336,28672x4096
XOFF=/tmp/x_rows_off
mkdir -p "$XOFF"
printf 'import fp8tower.kernels.fp8_gemm as f\nf.x_rows = lambda *a: 0\n' > "$XOFF/sitecustomize.py"
OWN_CT="fused_amax=true,pdl=false,prefetch=0"
OWN_B="prequant=false,pdl=false,prefetch=0"
ab() {  # NAME X_ROWS(0: forced off, 1: as committed) SCHEME ARMS
  local pp=$PYTHONPATH
  [ "$2" = 0 ] && pp=$XOFF:$PYTHONPATH
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 PYTHONPATH=$pp timeout -k 10 "$(lim 80)" \
    python3 benchmarks/bench_gemm.py --shapes "$S" --m 2,4,8 --schemes "$3" --backends "$4" \
    --precompile --replays 10 --rounds 3 --json "$O/$1.json" > "$O/$1.log" 2>&1
  echo "$1 rc=$? left=$(left)" | tee -a "$O/status.txt"
}
CT="cublaslt,nodeep,nodeep[$OWN_CT],deep,deep[$OWN_CT]"
B="cublaslt,nodeep,nodeep[$OWN_B]"
ab ct_off 0 channel_token "$CT"
ab ct_on 1 channel_token "$CT"
ab b128_off 0 block128 "$B"
ab b128_on 1 block128 "$B"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
