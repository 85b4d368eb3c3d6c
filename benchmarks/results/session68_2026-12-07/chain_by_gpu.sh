#!/usr/bin/env bash
# Session 68's second call (carry .gpu/run): session 66's chain_pdl.sh for the schemes this
# GPU has not yet run today: on an H200 per_tensor and channel_token (BUDGET 590; #12's
# numbers with this code in the cur arms), on an H100 block128 (BUDGET 330; the first call
# ran the other two there). A call brings back at most 8 files, so everything goes into
# $OUT/chain.tgz beside status.txt. BUDGET (s) overrides the budget; the first call took 250 s
# for the two schemes on an H100.
#   OUT=$OUT bash benchmarks/results/session68_2026-12-07/chain_by_gpu.sh
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in
  *H200*) SCHEMES="per_tensor channel_token"; BUDGET=${BUDGET:-590} ;;
  *) SCHEMES=block128; BUDGET=${BUDGET:-330} ;;
esac
rm -rf /tmp/o68 && mkdir -p /tmp/o68
BUDGET=$BUDGET SCHEMES="$SCHEMES" OUT=/tmp/o68 \
  bash benchmarks/results/session66_2026-12-07/chain_pdl.sh
cp /tmp/o68/chain/status.txt "$OUT/"
tar czf "$OUT/chain.tgz" -C /tmp/o68 chain
