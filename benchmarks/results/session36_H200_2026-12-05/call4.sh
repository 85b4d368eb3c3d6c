#!/usr/bin/env bash
# Session 36, the first call that ran (nine starts failed, so the calls prepared were merged
# and trimmed to fit): (1) session 31's out_proj-tile A/B at M = 1 (arms of
# boundary_timeline_H200_2026-12-04/call3.sh: tiles small enough that the next GEMM's
# programs sit beside the current one's), per_tensor and channel_token, 2 rounds, outputs
# compared bit for bit; (2) #12's tower numbers in one run: merged 27B, cuBLASLt and auto,
# M = 1, 8, 16, 32, all three W8A8 schemes, 3 rounds (every cell tuned first, then cells
# alternated), session 26's cache restamped, FP8TOWER_TUNE=0. Carry [".gpu/run"]. The tar
# is rewritten after each step.
#   OUT=$OUT bash benchmarks/results/session36_H200_2026-12-05/call4.sh
set -uo pipefail
CACHE=benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json
FINAL=${OUT:-out}
O=$FINAL/call4
mkdir -p "$O" /tmp/s4c
pack() { tar czf "$FINAL/call4.tgz" -C "$FINAL" call4; }
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/s4c
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_TUNE=0 FP8TOWER_CACHE_DIR=/tmp/s4c
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 benchmarks/restamp_cache.py $CACHE /tmp/s4c > "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; pack; exit 1; }
ARMS="cached,num_stages=3@5120x6144,block_k=256;num_stages=6@5120x6144"
ARMS="$ARMS,block_k=256;num_stages=3@5120x6144,num_stages=3@16384x5120+14336x5120"
IN128="block_n=128;num_warps=8;num_stages=3@16384x5120+14336x5120"
ARMS="$ARMS,$IN128|block_k=256;num_stages=5@5120x6144,$IN128|block_k=512;num_stages=2@5120x6144"
timeout 210 python3 benchmarks/bench_override.py --arms "$ARMS" --schemes per_tensor,channel_token \
  --m 1 --rounds 2 --json "$O/override.json" > "$O/override.log" 2>&1
echo "override rc=$?"; tail -20 "$O/override.log"; pack
timeout 330 python3 -m fp8tower bench tower --model qwen3.5-27b --m 1,8,16,32 --arms merged \
  --backends cublaslt,auto --scheme per_tensor,channel_token,block128 --rounds 3 \
  --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -32 "$O/tower.log"; pack
