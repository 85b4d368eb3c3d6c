#!/usr/bin/env bash
# NOT RUN YET (prepared in session 30, when no device machine was lent). The boundary timeline:
# stamps.patch applied to this copy of the tree (the GPU machine's only), session 26's cache
# restamped for the patched kernels, then bench_boundary.py on the merged 27B tower at M = 1
# and 8, per_tensor and channel_token; then per_tensor at M = 1 without early launch, and with
# x quantized in each GEMM (no pre-pass). About 5 minutes; the tar is rewritten after each run,
# so a run cut short by the call's 600 s loses only itself. From the repository root:
#   OUT=$OUT bash benchmarks/results/boundary_timeline_H200_2026-12-04/call1.sh
set -uo pipefail
R=benchmarks/results/boundary_timeline_H200_2026-12-04
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O" /tmp/cb1
pack() { tar czf "$FINAL/call1.tgz" -C "$FINAL" call1; }
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
if git apply "$R/stamps.patch" 2> "$O/patch.log"; then
  echo "patched with git" | tee -a "$O/patch.log"
elif patch -p1 < "$R/stamps.patch" >> "$O/patch.log" 2>&1; then
  echo "patched with patch" | tee -a "$O/patch.log"
else
  cat "$O/patch.log"; echo "stamps.patch did not apply"; pack; exit 1
fi
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/cb1 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json \
  /tmp/cb1 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; pack; exit 1; }
run() {  # NAME TIMEOUT ARGS...: one bench_boundary.py run, its log's tail, the tar rewritten
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 "$R/bench_boundary.py" "$@" --json "$O/$name.json" > "$O/$name.log" 2>&1
  echo "$name rc=$?"
  tail -16 "$O/$name.log"
  pack
}
run boundary 280 --probe --schemes per_tensor,channel_token --m 1,8 --rounds 2 --timeline-replays 30
# per_tensor at M = 1 without early launch: what PDL's early start changes
run boundary_no_early 110 --no-early --schemes per_tensor --m 1 --rounds 2 --timeline-replays 30
# and with x quantized in each GEMM (no pre-pass kernel): what the pre-pass's boundary costs
run boundary_in_gemm 110 --override prequant=false --schemes per_tensor --m 1 --rounds 2 \
  --timeline-replays 30
