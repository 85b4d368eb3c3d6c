#!/usr/bin/env bash
# Session 44's fifth device call (as run, one command line): the whole GPU suite after the
# op's warm-up fix, on the warm H100 of call4. Carry .gpu/run/whl.
. benchmarks/device_wheels.sh; mkdir -p $OUT/suite; install_wheels .gpu/run $OUT/suite/status.txt
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout 320 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 200 -rfE \
  --tb=short > $OUT/suite/suite.log 2>&1
echo "gpu suite rc=$?" | tee -a $OUT/suite/status.txt
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/suite/suite.log | tail -15
