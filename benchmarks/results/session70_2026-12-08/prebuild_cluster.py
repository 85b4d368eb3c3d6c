"""Session 70: build, on the CPU machine, the CUTLASS cluster builds the device call times
(pf and pp with 2 or 4 CTAs a cluster along the weight's rows, x multicast by TMA), packed
like benchmarks/prebuild_cutlass.py's archive (extract into the device's fp8tower cache):

    .venv/bin/python benchmarks/results/session70_2026-12-08/prebuild_cluster.py \
        .gpu/run/cluster.tar.xz
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

# (schedule, token tile, cluster): M = 8 / 16 run token tile 16, M = 32 tile 32
SPECS = [("pf", 16, 2), ("pf", 16, 4), ("pf", 32, 2), ("pf", 32, 4), ("pp", 16, 2),
         ("pp", 32, 2)]


def main(out: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["FP8TOWER_CACHE_DIR"] = tmp
        from prebuild_cutlass import pack

        from fp8tower.backends import cutlass

        jobs = [(None, {"sched": s, "tile": f"64x{tn}x128", "cluster": c}) for s, tn, c in SPECS]
        report = cutlass._precompile(jobs)
        print(report.summary())
        if report.failures:
            return 1
        built = pack(Path(tmp) / "cutlass", out)
        print(f"wrote {out} ({len(built)} libraries)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
