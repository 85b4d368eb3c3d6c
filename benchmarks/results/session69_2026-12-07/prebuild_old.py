"""Build, on the CPU machine, the CUTLASS libraries that the tuner of 2026-11-30 (commit
842f1f3, the code issue #12's "before" numbers came from) times, and pack them like
benchmarks/prebuild_cutlass.py does, so the device's "before" arm tunes without nvcc builds.
Run with that commit's src first on sys.path:

    git archive 842f1f3 src | tar -x -C .gpu/run/old
    PYTHONPATH=.gpu/run/old/src .venv/bin/python \
        benchmarks/results/session69_2026-12-07/prebuild_old.py .gpu/run/prebuilt_old.tar.xz
"""

import os
import sys
import tarfile
import tempfile
from pathlib import Path

out = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    os.environ["FP8TOWER_CACHE_DIR"] = tmp
    from fp8tower.backends import cutlass
    from fp8tower.formats import Scheme
    from fp8tower.problem import GemmProblem

    print("cutlass module:", cutlass.__file__)
    jobs = []
    for m in (1, 8, 16, 32):  # the M buckets verify_h200.sh tuned (token tiles 16 and 32)
        p = GemmProblem(m, 8192, 8192, Scheme.PER_TENSOR, capability=(9, 0))
        jobs += [(p, c) for c in cutlass._configs(p)]
    specs = sorted({cutlass.spec_of(c) for _, c in jobs}, key=lambda s: s.name)
    print("building", [s.name for s in specs], flush=True)
    for s in specs:
        print(cutlass.build(s), flush=True)
    with tarfile.open(out, "w:xz") as tar:
        for so in sorted((Path(tmp) / "cutlass").glob("*.so")):
            for f in (so, so.with_suffix(".json")):
                if f.exists():
                    tar.add(f, arcname=f"cutlass/{f.name}")
print("wrote", out)
