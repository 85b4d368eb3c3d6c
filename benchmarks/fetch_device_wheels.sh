#!/usr/bin/env bash
# Fetch, on the CPU machine, the wheels the device scripts install (benchmarks/device_wheels.sh)
# into ${RUN:-.gpu/run}/whl for the GPU machine (Python 3.12, x86-64; it has no network):
# pytest-xdist + execnet and pytest-timeout (the GPU suite's -n / --timeout), nvidia-cutlass
# (the CUTLASS backend's headers), torchao (a comparison arm). .gpu/ is not tracked: a fresh
# checkout fetches them again. Then pass carry: [".gpu/run/whl"] to the device call.
# torchao (3.2 MiB) only with TORCHAO=1 (the `bench generate` comparison arms need it): by
# session 59 the tracked files were 52.7 MiB, and with it .gpu/run no longer fitted a call's
# 64 MiB (the device tool refused the call).
set -euo pipefail
cd "$(dirname "$0")/.."
W=${RUN:-.gpu/run}/whl
mkdir -p "$W"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$W" pytest-xdist==3.8.0 execnet==2.1.2 pytest-timeout nvidia-cutlass==4.2.0.0 \
  $([ "${TORCHAO:-0}" = 1 ] && echo torchao==0.18.0)
ls -l "$W"
