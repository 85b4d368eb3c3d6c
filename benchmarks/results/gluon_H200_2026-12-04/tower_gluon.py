"""The merged 27B tower with some of its GEMMs on the Gluon W-first kernel (bench_gluon.py).

Arms (per_tensor, M <= 16; every other GEMM as `auto` serves it from the cache):
  auto       the cache as tuned
  in_proj    the in_projs (16384x5120, 14336x5120: each after the previous layer's out_proj)
             on Gluon with --in-config
  all        the in_projs and the out_projs (5120x6144, after a stand-in) on Gluon, the
             out_projs with --out-config
tower_ab.run_arms times them alternated and compares each arm's output with auto's (the
same FP8 operands, so bits may differ only by the accumulation order).

    python tower_gluon.py --m 1,8 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # bench_gluon; benchmarks/ (tower_ab)

from bench_gluon import GluonArm, parse_config
from tower_ab import add_arguments, run_arms, write_rows

from fp8tower import dispatch
from fp8tower.formats import Scheme

IN_PROJ = {(16384, 5120), (14336, 5120)}
OUT_PROJ = {(5120, 6144)}
_ARM = {"shapes": {}}  # (N, K) -> Gluon config of the arm being timed


def patch_dispatch() -> None:
    """dispatch.resolve serves the arm's shapes (per_tensor, M <= 16) from Gluon."""
    original = dispatch.resolve
    arm = GluonArm()

    def resolve(problem, backend="auto"):
        cfg = _ARM["shapes"].get((problem.n, problem.k))
        if (backend == "auto" and cfg is not None and problem.scheme is Scheme.PER_TENSOR
                and problem.m <= 16):
            return arm, cfg
        return original(problem, backend)

    dispatch.resolve = resolve


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--in-config", default="64x256x4p")
    ap.add_argument("--out-config", default="64x512x4")
    ap.add_argument("--arms", default="auto,in_proj,all")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("tower_gluon.py needs a CUDA GPU")
    cin, cout = parse_config(args.in_config), parse_config(args.out_config)
    shapes = {"auto": {}, "in_proj": dict.fromkeys(IN_PROJ, cin),
              "all": {**dict.fromkeys(IN_PROJ, cin), **dict.fromkeys(OUT_PROJ, cout)}}
    arms = args.arms.split(",")
    patch_dispatch()
    t0 = time.time()

    def set_arm(a: str) -> None:
        _ARM["shapes"] = shapes[a]

    rows = run_arms(args.model, ["per_tensor"], [int(v) for v in args.m.split(",")], arms,
                    set_arm, args.rounds, args.steps, args.replays)
    for r in rows:
        r["configs"] = {"in": args.in_config, "out": args.out_config}
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
