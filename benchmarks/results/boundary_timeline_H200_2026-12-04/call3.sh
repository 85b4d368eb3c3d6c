#!/usr/bin/env bash
# NOT RUN YET (prepared in session 31, no device machine lent). What residency.py found offline:
# at M = 1 no out_proj program (161 KB) fits beside the in_proj's (81 KB, two an SM), so half
# of the tower's boundaries cannot start the next GEMM before the last one drains. Here, the
# merged tower (session 26's cache) with the out_proj's (5120x6144) tile made small enough to
# sit beside them, or the in_proj's, arms alternated (bench_override.py, outputs compared bit
# for bit); then the timeline (stamps.patch) of the first pair, where every program fits early.
# About 6 minutes (arms: about 3.5 s per scheme and M, session 28); the tar is rewritten after
# each step. From the repository root:
#   OUT=$OUT bash benchmarks/results/boundary_timeline_H200_2026-12-04/call3.sh
set -uo pipefail
R=benchmarks/results/boundary_timeline_H200_2026-12-04
CACHE=benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O" /tmp/cb3 /tmp/cb3s
pack() { tar czf "$FINAL/call3.tgz" -C "$FINAL" call3; }
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_TUNE=0
# out_proj KB a program / out_proj programs early / in_proj programs early (residency.py, M = 1):
#   cached 161 / 0 of 80 / 104 of 256; num_stages=3 (BLOCK_K 512) 121 / 8 / 184;
#   BLOCK_K 256 at 6 stages 121 / 8 / 184; at 3 stages 61 / 80 / 256;
#   the in_projs at 3 stages (61 KB, three an SM) 8 / 236;
#   pairs that fit both ways (every program early at every boundary): the in_projs at BLOCK_N
#   128, 3 stages, 8 warps (109 KB, one an SM) with the out_proj at BLOCK_K 256, 5 stages
#   (101 KB) or BLOCK_K 512, 2 stages (81 KB)
FP8TOWER_CACHE_DIR=/tmp/cb3 python3 benchmarks/restamp_cache.py $CACHE /tmp/cb3 > "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; pack; exit 1; }
ARMS="cached,num_stages=3@5120x6144,block_k=256;num_stages=6@5120x6144"
ARMS="$ARMS,block_k=256;num_stages=3@5120x6144,num_stages=3@16384x5120+14336x5120"
IN128="block_n=128;num_warps=8;num_stages=3@16384x5120+14336x5120"
ARMS="$ARMS,$IN128|block_k=256;num_stages=5@5120x6144,$IN128|block_k=512;num_stages=2@5120x6144"
FP8TOWER_CACHE_DIR=/tmp/cb3 timeout 330 python3 benchmarks/bench_override.py --arms "$ARMS" \
  --schemes per_tensor,channel_token --m 1,8 --rounds 2 --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -12 "$O/tower.log"; pack
# the timeline of the first pair, every program early (stamps.patch applied to this copy only)
if git apply "$R/stamps.patch" 2> "$O/patch.log" || patch -p1 < "$R/stamps.patch" >> "$O/patch.log" 2>&1
then
  python3 benchmarks/restamp_cache.py $CACHE /tmp/cb3s > "$O/restamp_stamps.log" 2>&1
  FP8TOWER_CACHE_DIR=/tmp/cb3s timeout 150 python3 "$R/bench_boundary.py" --schemes per_tensor --m 1 \
    --rounds 2 --timeline-replays 30 --override "$IN128|block_k=256;num_stages=5@5120x6144" \
    --json "$O/boundary_pair.json" > "$O/boundary_pair.log" 2>&1
  echo "boundary rc=$?"; tail -16 "$O/boundary_pair.log"
else
  cat "$O/patch.log"; echo "stamps.patch did not apply"
fi
pack
