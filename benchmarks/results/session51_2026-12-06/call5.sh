#!/usr/bin/env bash
# Session 51's fifth call (carry .gpu/run; the warm H100 of call3 / call4): the band's new
# bound on six more shapes of 133-159 tiles whose K is not a multiple of the deep tile's
# BLOCK_K 512 (call3's one loss, 8768x3840, has a half last K step), M = 1, 2, 4, 8.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-150}"
O=$OUT/call5
mkdir -p "$O"
[ -d /tmp/site ] || install_wheels .gpu/run "$O/status.txt"
[ -d /tmp/un ] || unpack_prebuilt .gpu/run /tmp/un ~/.cache/fp8tower tests/.cache
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
bench_untuned "$O" k_tail 100 --shapes 8768x3840,8960x3840,9600x3328,9984x4352,8704x2816,9088x4864 \
  --m 1,2,4,8 --schemes per_tensor --backends cublaslt,untuned,rule
tar czf "$O/logs.tgz" -C "$O" k_tail.log && rm "$O/k_tail.log"
