#!/usr/bin/env bash
# Session 18, device call 1 (run from the repository root on the GPU machine, .gpu carried):
# K_ROT (each Triton program's K loop rotated by pid_n) against the cached configs in the
# merged 27B tower, session 17's final cache, every W8A8 scheme at M = 1, 8, 16, 32; Nsight
# Compute of block128 16384x5120 M = 32 with and without it; then the whole GPU suite.
set -uo pipefail
OUT=${OUT:-out}
RUN=.gpu/run
C=/tmp/c1cache
D=$OUT/c1
mkdir -p "$D" "$C"
. benchmarks/device_wheels.sh
install_wheels "$RUN" "$D/status.txt"
cp -r "$RUN"/cache/. "$C/"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=$C
python3 benchmarks/restamp_cache.py benchmarks/results/prefetch_depth_H200_2026-12-02/call5/tuning_cache.json "$C"
t=$(date +%s)
timeout 200 python3 benchmarks/bench_knob.py --m 1,8,16,32 --arms cached,k_rot \
  --json "$D/knob.json" > "$D/knob.log" 2>&1
echo "knob rc=$? s=$(( $(date +%s) - t ))" | tee -a "$D/status.txt"
tail -12 "$D/knob.log"
tar -czf "$OUT/c1.tgz" -C "$OUT" c1
B='"block_n": 64, "block_k": 256, "split_k": 1, "num_warps": 4, "num_stages": 4, "prequant": true, "packed": true'
for v in "plain {$B}" "k_rot {$B, \"k_rot\": true}"; do
  set -- $v; name=$1; shift
  t=$(date +%s)
  timeout 60 ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section SchedulerStats -k regex:_fp8_gemm_decode_kernel --launch-skip 2 --launch-count 1 \
    python3 benchmarks/ncu_gemm.py --scheme block128 --shape 16384x5120 --m 32 --config "$*" \
    > "$D/ncu_b128_m32_$name.log" 2>&1
  echo "ncu $name rc=$? s=$(( $(date +%s) - t ))" | tee -a "$D/status.txt"
done
tar -czf "$OUT/c1.tgz" -C "$OUT" c1
t=$(date +%s)
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 120 -rf tests \
  --ignore=tests/test_nonfinite.py > "$D/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - t ))" | tee -a "$D/status.txt"
tail -3 "$D/tests.log"
tar -czf "$OUT/c1.tgz" -C "$OUT" c1
t=$(date +%s)
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 110 -rf \
  tests/test_nonfinite.py > "$D/nonfinite.log" 2>&1
echo "nonfinite rc=$? s=$(( $(date +%s) - t ))" | tee -a "$D/status.txt"
tail -3 "$D/nonfinite.log"
tar -czf "$OUT/c1.tgz" -C "$OUT" c1
