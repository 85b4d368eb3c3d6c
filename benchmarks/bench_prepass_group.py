"""per_tensor's activation pre-pass at other elements a program, on the 27B tower: one A/B
per group size (issue #12).

per_tensor's pre-pass quantizes x in programs of ``act_quant.per_tensor_group(m, k)``
elements (2048 at M <= 8 on the tower's K; one program a row at M = 32), or of
``act_quant.PER_TENSOR_GROUP`` when set (this benchmark's knob). Measured with it (H200
2026-12-02, results/prepass_group_H200_2026-12-02/): per GEMM, back-to-back pairs ran a
wider grid faster at M = 1, but in the tower 256 elements lost (1.004 at M = 1, 1.060 at
M = 8) and at M = 32 the fewest programs won (one a row: 0.978); hence the rule.

The merged tower (tuning cache in FP8TOWER_CACHE_DIR), per_tensor, each ``--groups`` arm
alternated (benchmarks/tower_ab.py); the bits cannot move (the quant is elementwise).

    python benchmarks/bench_prepass_group.py --groups 2048,rule --m 1,8,16,32 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fp8tower.kernels import act_quant

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tower_ab import add_arguments, parse_ms, run_arms, write_rows


def parse_groups(text: str) -> list[str]:
    """The --groups arms: powers of two from 128 to 8192 (elements a program), or ``rule``
    (act_quant.per_tensor_group's choice per M and K)."""
    arms = text.split(",")
    for a in arms:
        if a == "rule":
            continue
        try:
            act_quant.check_group(int(a) if a.isdigit() else a)
        except ValueError as e:
            raise SystemExit(f"--groups: {a!r}: {e}") from None
    return arms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--groups", default="2048,rule",
                    help="comma list of elements a pre-pass program quantizes, or rule "
                         "(act_quant.per_tensor_group); the first is the baseline of the ratios")
    args = ap.parse_args(argv)
    arms = parse_groups(args.groups)
    ms = parse_ms(args.m)
    if not torch.cuda.is_available():
        raise SystemExit("bench_prepass_group.py needs a CUDA GPU")
    native = act_quant.PER_TENSOR_GROUP
    t0 = time.time()

    def set_arm(a: str) -> None:
        act_quant.PER_TENSOR_GROUP = None if a == "rule" else int(a)

    try:
        rows = run_arms(args.model, ["per_tensor"], ms, arms, set_arm, args.rounds,
                        args.steps, args.replays, json_path=args.json, t0=t0)
    finally:
        act_quant.PER_TENSOR_GROUP = native
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
