# Sourced by the device-side scripts (verify_h200.sh, ab_tower.sh, each session's calls):
# install_wheels, pytest_par, unpack_prebuilt, cold_cache, device_setup, a script's time budget
# (budget_start, left, lim), bench_untuned and gpu_suite_with_left, each described above it.
# install_wheels RUN STATUS installs the optional packages that travel as wheels in RUN/whl
# into /tmp/site (on PYTHONPATH in those scripts); a failure is appended to the STATUS file.
install_wheels() {
  local run=$1 status=$2
  if [ -d "$run/whl" ] && ls "$run"/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$run"/whl/*.whl || echo "wheel install failed" | tee -a "$status"
  else  # not carried (benchmarks/fetch_device_wheels.sh makes them): say so, go on without
    echo "no wheels in $run/whl: optional packages missing" | tee -a "$status"
  fi
}
# "-n N --timeout T" where pytest-xdist and pytest-timeout are importable, else nothing (the
# GPU tests then run in one process, with no per-test limit): pytest_par N T
pytest_par() {
  PYTHONPATH=/tmp/site:${PYTHONPATH:-} python3 -c "import xdist, pytest_timeout" 2>/dev/null \
    && echo "-n $1 --timeout $2"
}
# unpack_prebuilt RUN DIR...: benchmarks/prebuild_cutlass.py's RUN/prebuilt.tar.xz (the
# tuner's CUTLASS libraries, built on the CPU machine) into each FP8TOWER_CACHE_DIR given, so
# nothing is built with nvcc on the device; nothing where it was not carried. A warm machine
# keeps DIR from an earlier call, tuning cache included: for a tune from cold, cold_cache.
unpack_prebuilt() {
  local run=$1 dir
  shift
  [ -f "$run/prebuilt.tar.xz" ] || return 0
  for dir in "$@"; do
    mkdir -p "$dir" && tar xJf "$run/prebuilt.tar.xz" -C "$dir"
  done
}
# cold_cache RUN DIR...: each DIR emptied, then unpack_prebuilt RUN into it: a tuning cache
# from cold even on a machine kept warm (session 56's call 6 tuned nothing: call 3's caches
# were still there).
cold_cache() {
  local run=$1
  shift
  rm -rf "$@"
  unpack_prebuilt "$run" "$@"
}
# device_setup RUN DIR: what a session's device call does first: DIR made, install_wheels RUN
# (failures in DIR/status.txt), unpack_prebuilt RUN into /tmp/un (bench_untuned's cache) and
# the default caches, PYTHONPATH on src and /tmp/site, Python unbuffered.
device_setup() {
  local run=$1 dir=$2
  mkdir -p "$dir"
  install_wheels "$run" "$dir/status.txt"
  unpack_prebuilt "$run" /tmp/un ~/.cache/fp8tower tests/.cache
  export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
}
# A device script's time budget (the device tool stops a command at its limit, losing what
# was not written): budget_start SECONDS starts the clock; left prints the seconds left; lim N
# the smaller of N and what is left less 5 s, at least 1 (a timeout for the next step).
budget_start() {
  T0=$(date +%s)
  BUDGET=$1
}
left() { echo $(( ${BUDGET:?call budget_start first} - ($(date +%s) - ${T0:?}) )); }
lim() {
  local l=$(( $(left) - 5 ))
  [ "$l" -lt 1 ] && l=1
  [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
# bench_untuned DIR NAME LIMIT ARGS...: bench_gemm.py ARGS untuned (FP8TOWER_TUNE=0, cache
# /tmp/un: unpack_prebuilt it first), within lim LIMIT, into DIR/NAME.json and .log; prints
# its status line (also appended to DIR/status.txt) and its cells slower than cuBLASLt.
bench_untuned() {
  local dir=$1 name=$2 l=$3
  shift 3
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout -k 10 "$(lim "$l")" python3 \
    benchmarks/bench_gemm.py "$@" --precompile --replays 10 --rounds 3 \
    --json "$dir/$name.json" > "$dir/$name.log" 2>&1
  echo "$name rc=$? left=$(left)" | tee -a "$dir/status.txt"
  grep -A12 "slower than" "$dir/$name.log" | head -12
}
# gpu_suite_with_left DIR: the GPU tests (12 workers where xdist is there) within what is
# left less 10 s, if that is over a minute, into DIR/suite.log; its summary on stdout.
gpu_suite_with_left() {
  local dir=$1 l=$(( $(left) - 10 ))
  [ "$l" -gt 60 ] || { echo "gpu suite skipped: ${l}s left" | tee -a "$dir/status.txt"; return 0; }
  timeout -k 10 "$l" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 12 240) \
    -rfE --tb=short > "$dir/suite.log" 2>&1
  echo "gpu suite rc=$? left=$(left)" | tee -a "$dir/status.txt"
  grep -E "^(FAILED|ERROR)|passed|failed" "$dir/suite.log" | tail -15
}
