"""Build, on the CPU machine, the CUTLASS libraries that the tuner of 2026-11-30 (commit
842f1f3, the code issue #12's "before" numbers came from) times, and pack them with
benchmarks/prebuild_cutlass.pack, so the device's "before" arm tunes without nvcc builds
(six libraries, about 6 min here). Run with that commit's src first on sys.path, writing the
archive beside it, where before_after.sh unpacks it (device_wheels.sh's cold_cache):

    git archive 842f1f3 src | tar -x -C .gpu/run/old
    PYTHONPATH=.gpu/run/old/src .venv/bin/python \
        benchmarks/results/session69_2026-12-07/prebuild_old.py .gpu/run/old/prebuilt.tar.xz
"""

import os
import sys
import tempfile
from pathlib import Path

out = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    os.environ["FP8TOWER_CACHE_DIR"] = tmp
    from fp8tower.backends import cutlass  # the old one: first on sys.path
    from fp8tower.formats import Scheme
    from fp8tower.problem import GemmProblem

    # imported after fp8tower, so its sys.path entry for this checkout's src changes nothing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from prebuild_cutlass import pack

    print("cutlass module:", cutlass.__file__)
    jobs = []
    for m in (1, 8, 16, 32):  # the M buckets verify_h200.sh tuned (token tiles 16 and 32)
        p = GemmProblem(m, 8192, 8192, Scheme.PER_TENSOR, capability=(9, 0))
        jobs += [(p, c) for c in cutlass._configs(p)]
    specs = sorted({cutlass.spec_of(c) for _, c in jobs}, key=lambda s: s.name)
    print("building", [s.name for s in specs], flush=True)
    for s in specs:
        print(cutlass.build(s), flush=True)
    built = pack(Path(tmp) / "cutlass", out)
print(f"wrote {out} ({len(built)} libraries)")
