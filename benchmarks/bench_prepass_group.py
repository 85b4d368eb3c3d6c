"""Does a wider grid for per_tensor's activation pre-pass speed the 27B tower up? One A/B
per group size (issue #12).

per_tensor's pre-pass quantizes x in programs of ``act_quant.PER_TENSOR_GROUP`` elements
(2048: 3 programs for a 5120-wide row at M = 1). Per GEMM, a PDL pair on the deep tile
(one program an SM) ran much faster behind a wider pre-pass grid at M = 1: 5120x6144 12.0 /
10.8 / 10.1 us at 2048 / 512 / 256 elements a program, 4096x14336 22.6 / 18.6 / 16.8 (H200
2026-12-02, results/deep_default_H200_2026-12-02/call7/; a temporary knob, this constant
now). Why is not known. The merged tower's out_proj / o_proj run that tile at M = 1, tuned.

The merged tower (tuning cache in FP8TOWER_CACHE_DIR), per_tensor, each ``--groups`` arm
alternated (benchmarks/tower_ab.py); the bits cannot move (the quant is elementwise).

    python benchmarks/bench_prepass_group.py --groups 2048,512,256 --m 1,8 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fp8tower.kernels import act_quant

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tower_ab import add_arguments, run_arms, write_rows


def parse_groups(text: str) -> list[str]:
    """The --groups arms: powers of two from 128 to 8192 (elements a program)."""
    arms = text.split(",")
    for a in arms:
        if not (a.isdigit() and 128 <= int(a) <= 8192 and int(a) & (int(a) - 1) == 0):
            raise SystemExit(f"--groups: {a!r} is not a power of two from 128 to 8192 "
                             "(elements a pre-pass program quantizes)")
    return arms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--groups", default="2048,512,256",
                    help="comma list of elements a pre-pass program quantizes (the first: the "
                         "baseline of the ratios)")
    args = ap.parse_args(argv)
    arms = parse_groups(args.groups)
    if not torch.cuda.is_available():
        raise SystemExit("bench_prepass_group.py needs a CUDA GPU")
    native = act_quant.PER_TENSOR_GROUP
    t0 = time.time()

    def set_arm(a: str) -> None:
        act_quant.PER_TENSOR_GROUP = int(a)

    try:
        rows = run_arms(args.model, ["per_tensor"], [int(v) for v in args.m.split(",")], arms,
                        set_arm, args.rounds, args.steps, args.replays)
    finally:
        act_quant.PER_TENSOR_GROUP = native
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
