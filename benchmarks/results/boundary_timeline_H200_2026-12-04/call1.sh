#!/usr/bin/env bash
# NOT RUN YET (prepared in session 30, when no device machine was lent). The boundary timeline:
# stamps.patch applied to this copy of the tree (the GPU machine's only), session 26's cache
# restamped for the patched kernel, then bench_boundary.py on the merged 27B tower at M = 1 and
# 8, per_tensor and channel_token, and per_tensor at M = 1 without early launch. About 4
# minutes. From the repository root on the GPU machine:
#   OUT=$OUT bash benchmarks/results/boundary_timeline_H200_2026-12-04/call1.sh
set -uo pipefail
R=benchmarks/results/boundary_timeline_H200_2026-12-04
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O" /tmp/cb1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
if git apply "$R/stamps.patch" 2> "$O/patch.log"; then echo "patched with git" | tee -a "$O/patch.log"
elif patch -p1 < "$R/stamps.patch" >> "$O/patch.log" 2>&1; then echo "patched with patch" | tee -a "$O/patch.log"
else cat "$O/patch.log"; echo "stamps.patch did not apply"; exit 1; fi
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/cb1 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/cb1 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 400 python3 "$R/bench_boundary.py" --probe --schemes per_tensor,channel_token --m 1,8 \
  --rounds 2 --timeline-replays 30 --json "$O/boundary.json" > "$O/boundary.log" 2>&1
echo "boundary rc=$?"
tail -30 "$O/boundary.log"
# the same at M = 1 per_tensor without early launch: what PDL's early start changes
timeout 150 python3 "$R/bench_boundary.py" --no-early --schemes per_tensor --m 1 --rounds 2 \
  --timeline-replays 30 --json "$O/boundary_no_early.json" > "$O/boundary_no_early.log" 2>&1
echo "no-early rc=$?"
tail -12 "$O/boundary_no_early.log"
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
