#!/usr/bin/env bash
# Session 27, device call 7: Nsight Compute on one launch each of the Triton GEMM (the tuned
# 5120x6144 / 16384x5120 configs) and the Gluon W-first kernel (same tiles), M = 1, alone.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call7
mkdir -p "$O"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=benchmarks/results/gluon_H200_2026-12-04
T512='{"block_n": 64, "block_k": 512, "split_k": 1, "num_warps": 4, "num_stages": 4, "prequant": true, "pdl": true, "prefetch": 1}'
T256='{"block_n": 64, "block_k": 256, "split_k": 1, "num_warps": 4, "num_stages": 4, "prequant": true, "pdl": true, "prefetch": 1}'
run() {  # name shape arm
  timeout 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats -k regex:'_w_first_gemm|_fp8_gemm_decode' --launch-skip 2 --launch-count 1 \
    python3 $R/ncu_gluon.py --arm "$3" --shape $2 --m 1 > "$O/ncu_$1.log" 2>&1
  echo "$1 rc=$?"
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Stall|Warp Cycles Per Issued" "$O/ncu_$1.log" | head -14
}
run triton_5120x6144 5120x6144 "triton:$T512"
run gluon_5120x6144 5120x6144 gluon:64x512x4
run triton_16384x5120 16384x5120 "triton:$T256"
run gluon_16384x5120 16384x5120 gluon:64x256x4p
tar czf "$FINAL/call7.tgz" -C "$FINAL" call7
