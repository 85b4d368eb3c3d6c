#!/usr/bin/env bash
# The next session's second device call (any card; carry .gpu/run): the whole GPU suite with
# the call's time (session 47's got 260 s and reached about 98%, none failed), 12 workers.
set -uo pipefail
O=$OUT/call2
mkdir -p "$O" ~/.cache/fp8tower tests/.cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
# the tests' cache is tests/.cache (tests/conftest.py): unpacked there too, the tuning tests
# do not build the CUTLASS libraries with nvcc (session 47: one cut at 150 s doing so)
for c in ~/.cache/fp8tower tests/.cache; do
  [ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C "$c"
done
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout "${LIMIT:-560}" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 12 240) \
  -rfE --tb=short > "$O/suite.log" 2>&1
echo "gpu suite rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -15
