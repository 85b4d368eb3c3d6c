"""Build, on the CPU machine, the CUTLASS libraries the tuner times, and pack them for a device
call: the device then tunes without nvcc builds (a cold tune spent 62 of 88 s in them,
session 35; 45-55 s a scheme with them prebuilt, session 36).

The tuner's CUTLASS configs (backends/cutlass.py ``_configs``) are five schedules (sk, pp, pf
and block128's bk, bp) x three token tiles (16 / 32 / 64 by M bucket): 15 libraries, whatever
the shapes. Each is keyed by its source, defines, nvcc flags, nvcc's and CUTLASS's versions
(``cutlass.build_key``), so the libraries built here are the device's when both run nvcc
13.0.88 and nvidia-cutlass 4.2.0.0 (the device's README; a mismatch only means the device
builds them again). The archive holds ``cutlass/<name>-<key>.so`` and its build record
``.json`` (tests/test_cutlass_backend.py's build test reads it on a cache hit, and failed on
a cache the archive had filled without them, session 67): extract it into the
device's fp8tower cache dir (``FP8TOWER_CACHE_DIR``, else ~/.cache/fp8tower):

    python benchmarks/prebuild_cutlass.py              # -> .gpu/run/prebuilt.tar.xz
    # device: mkdir -p ~/.cache/fp8tower && tar xJf .gpu/run/prebuilt.tar.xz -C ~/.cache/fp8tower
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

BUCKETS = (1, 32, 64)  # one M bucket per token tile (16, 32, 64)


def jobs() -> list:
    """(problem, config) for every config the tuner can time: both config families."""
    from fp8tower.backends import cutlass
    from fp8tower.formats import Scheme
    from fp8tower.problem import GemmProblem

    out = []
    for scheme in (Scheme.PER_TENSOR, Scheme.BLOCK128):
        for m in BUCKETS:
            p = GemmProblem(m, 8192, 8192, scheme, capability=(9, 0))
            out += [(p, c) for c in cutlass._configs(p)]
    return out


def pack(cache: Path, out: Path) -> list[Path]:
    """Write ``out`` (xz tar) with every library of ``cache`` (a ``cutlass/`` cache folder)
    and its build record where there is one, as ``cutlass/<file>``; the libraries packed."""
    built = sorted(cache.glob("*.so"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz") as tar:
        for so in built:
            for f in (so, so.with_suffix(".json")):
                if f.exists():
                    tar.add(f, arcname=f"cutlass/{f.name}")
    return built


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu" / "run" / "prebuilt.tar.xz",
                    help="the archive to write (default: .gpu/run/prebuilt.tar.xz)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["FP8TOWER_CACHE_DIR"] = tmp
        from fp8tower.backends import cutlass

        reason = cutlass.build_unavailable()
        if reason is not None:
            print(f"error: cannot build CUTLASS kernels here: {reason}", file=sys.stderr)
            return 2
        work = jobs()
        specs = sorted({cutlass.spec_of(c) for _, c in work}, key=lambda s: s.name)
        nvcc = cutlass.nvcc_version(cutlass.nvcc_path())
        print(f"building {len(specs)} CUTLASS libraries (nvcc {nvcc}, CUTLASS "
              f"{cutlass.cutlass_version()}) ...", flush=True)
        report = cutlass._precompile(work)
        print(report.summary())
        if report.failures:
            return 1
        built = pack(Path(tmp) / "cutlass", args.out)
        print(f"wrote {args.out} ({len(built)} libraries, {args.out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
