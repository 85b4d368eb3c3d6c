#!/usr/bin/env bash
# One device call that re-measures what issues #3, #4 and #5 ask for, after the changes of
# 2026-11-30 that no GPU has timed yet (docs/performance.md, "Since those runs"):
#   bash benchmarks/verify_h200.sh        (on the GPU machine; about 8-10 minutes)
# Everything lands in $OUT/verify.tgz (one file: the device tool returns at most 8): the GPU
# test log, tuning logs and wall times per scheme, the cache and its explain table, GEMM
# sweeps with auto, the tower bench. A failing step is recorded in status.txt; the next runs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
V=$OUT/verify
mkdir -p "$V"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=$V/cache
PY=${PYTHON:-python}
M=1,2,4,8,16,32,64
if [ -z "${DRY_RUN:-}" ] && ! $PY -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "verify_h200.sh: no CUDA GPU visible (DRY_RUN=1 PYTHON=echo shows the steps)" >&2
  exit 2
fi

step() {  # step NAME CMD...: run, log to $V/NAME.log, record exit status and seconds
  local name=$1 start=$(date +%s%N)
  shift
  "$@" > "$V/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))" | tee -a "$V/status.txt"
}

# 1. Correctness on the GPU (every tower shape and scheme; torch.compile; CUDA graphs).
step gpu_tests $PY -m pytest -q -m gpu tests/test_gpu.py

# 2. Tuning time per scheme from a cold cache (#4: <= 60 s each), parallel builds on.
for s in per_tensor channel_token block128; do
  step "tune_$s" $PY -m fp8tower tune --model qwen3.5-27b --m $M --scheme $s --max-configs 4
done
step dispatch_explain $PY -m fp8tower dispatch --explain

# 3. GEMMs with tuning off: auto against each single backend in one run (#3, #4).
export FP8TOWER_TUNE=0
step gemm_per_tensor $PY benchmarks/bench_gemm.py --m $M --schemes per_tensor \
  --backends cublaslt,triton,auto --json "$V/gemm_per_tensor_auto.json"
step gemm_channel_block $PY benchmarks/bench_gemm.py --m 1,8,32 \
  --schemes channel_token,block128 --backends cublaslt,triton,auto \
  --json "$V/gemm_channel_block_auto.json"

# 4. The tower (#5: merged + auto <= 1.85 ms/step at M=1; M=8 and 32 within 10%).
step tower $PY -m fp8tower bench tower --model qwen3.5-27b --m 1,8,32 \
  --arms unmerged,merged --backends cublaslt,auto \
  --scheme per_tensor,channel_token,block128 --json "$V/tower.json"

cat "$V/status.txt"
tail -30 "$V/tower.log"
tar -czf "$OUT/verify.tgz" -C "$OUT" verify && rm -rf "$V"
