#!/usr/bin/env bash
# Session 19, device call 4 (.gpu carried, with the pytest-xdist / execnet / pytest-timeout
# wheels): the GPU tests whose GEMMs take the untuned default (configs.deep_default in),
# then the untuned rule's two per_tensor M = 1 fallbacks to cuBLASLt (bench_gemm.py).
set -uo pipefail
OUT=${OUT:-out}
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
start=$(date +%s)
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 200 -rf \
  tests/test_gpu.py tests/test_gpu_plan.py > "$OUT/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - start ))"
tail -4 "$OUT/tests.log"
timeout 120 python3 benchmarks/bench_gemm.py --shapes 28672x4096,34816x5120 --m 1,2 \
  --schemes per_tensor --backends cublaslt,untuned,nodeep --replays 10 --json "$OUT/fallback.json" \
  > "$OUT/fallback.log" 2>&1
echo "fallback rc=$? s=$(( $(date +%s) - start ))"
grep -E "per_tensor .*(untuned|nodeep|cublaslt)" "$OUT/fallback.log" | head -12
