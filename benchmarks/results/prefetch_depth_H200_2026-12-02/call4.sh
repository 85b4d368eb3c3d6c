#!/usr/bin/env bash
# Session 17, device call 4 (run from the repository root on the GPU machine, .gpu carried):
# prefetch 1 tile against the cached 2 in the merged 27B tower at call 3's retuned cache,
# every W8A8 scheme at M = 1, 8, 16, 32.
set -uo pipefail
OUT=${OUT:-out}
RUN=.gpu/run
C=/tmp/c4cache
mkdir -p "$OUT/c4" "$C"
. benchmarks/device_wheels.sh
install_wheels "$RUN" "$OUT/c4/status.txt"
cp -r "$RUN"/cache/. "$C/"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=$C
python3 benchmarks/restamp_cache.py benchmarks/results/prefetch_depth_H200_2026-12-02/call3/tuning_cache.json "$C"
t=$(date +%s)
timeout 400 python3 benchmarks/bench_prefetch_depth.py --m 1,8,16,32 --depths cached,1 \
  --json "$OUT/c4/prefetch1.json" > "$OUT/c4/prefetch1.log" 2>&1
echo "prefetch1 rc=$? s=$(( $(date +%s) - t ))" | tee -a "$OUT/c4/status.txt"
tail -12 "$OUT/c4/prefetch1.log"
