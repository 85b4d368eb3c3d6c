#!/usr/bin/env bash
# Session 26, device call 9: after the review folded the per-token pre-pass into
# act_quant._split8_groups (the row as the group), weight_only's GPU split tests again.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call9
mkdir -p "$O"
export PYTHONPATH=$PWD/src FP8TOWER_CACHE_DIR=/tmp/c9tests
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -k "weight_only_split" -p no:cacheprovider \
  > "$O/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$O/tests.log"
tar czf "$FINAL/call9.tgz" -C "$FINAL" call9
