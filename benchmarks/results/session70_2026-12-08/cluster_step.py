"""Session 70 (GPU, prepared): the merged tower with its two wide GEMMs (the GDN in_proj
16384x5120 and the attention q/k/v 14336x5120) served by CUTLASS's example-63 kernel (pf,
PDL) with a 1-, 2- or 4-CTA cluster (x multicast by TMA), against the tuned choices, arms
alternated (benchmarks/tower_ab.py). Every other GEMM keeps its tuned choice (the cache in
FP8TOWER_CACHE_DIR). The cluster arms are not in the tuner's space: this process serves them
by patching the dispatcher (a benchmark arm, not a dispatch rule). Bits are compared with the
first arm's; another kernel on those GEMMs gives other bits, so only "finite" is a check here.

    python benchmarks/results/session70_2026-12-08/cluster_step.py --schemes per_tensor \
        --m 1,8,32 --arms cached,c1,c2,c4 --rounds 3 --json OUT.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tower_ab import add_arguments, parse_ms, parse_schemes, run_arms, write_rows

from fp8tower import dispatch
from fp8tower.backends import cutlass

WIDE = {(16384, 5120), (14336, 5120)}
ARMS = {"cached": None, "c1": 1, "c2": 2, "c4": 4}
_ARM = {"cluster": None}


def config(problem, cluster: int) -> dict:
    """CUTLASS's default config (pf, PDL) of ``problem``'s bucket with ``cluster`` CTAs."""
    return {**cutlass.BACKEND.default_config(problem), "cluster": cluster}


def patch_dispatcher() -> None:
    """Serve the wide GEMMs with the arm's CUTLASS config (eager and graph alike; main
    refuses block128, which runs CUTLASS's blockwise schedules only)."""
    native = dispatch.Dispatcher.resolve

    def resolve(self, problem, backend="auto", *, graph=False):
        c = _ARM["cluster"]
        if backend == "auto" and c is not None and (problem.n, problem.k) in WIDE:
            return cutlass.BACKEND, config(problem, c)
        return native(self, problem, backend, graph=graph)

    dispatch.Dispatcher.resolve = resolve


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token")
    ap.add_argument("--arms", default="cached,c1,c2,c4",
                    help=f"comma list of {', '.join(ARMS)}")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    bad = [a for a in arms if a not in ARMS]
    if bad or len(set(arms)) != len(arms):
        raise SystemExit(f"--arms: {args.arms!r}: each of {', '.join(ARMS)}, once")
    schemes, ms = parse_schemes(args.schemes), parse_ms(args.m)
    if "block128" in schemes:
        raise SystemExit("--schemes: block128 runs CUTLASS's blockwise schedules only (bp, bk)")
    if not torch.cuda.is_available():
        raise SystemExit("cluster_step.py needs a CUDA GPU")
    patch_dispatcher()
    t0 = time.time()

    def set_arm(a: str) -> None:
        _ARM["cluster"] = ARMS[a]

    rows = run_arms(args.model, schemes, ms, arms, set_arm, args.rounds, args.steps,
                    args.replays, json_path=args.json, t0=t0)
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
