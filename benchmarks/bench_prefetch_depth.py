"""How deep should a GEMM's L2 prefetch before its wait go, now that captured graphs launch
PDL kernels early (graph_edges.py)? The 27B tower, one A/B per depth (issue #12).

Every PDL Triton GEMM asks L2 for its first PREFETCH W tiles before ``gdc_wait``
(kernels/fp8_gemm.py); the tuner's space has one depth (configs.PDL_PAIR). It was 2 until
this benchmark's runs of 2026-12-02 (results/prefetch_depth_H200_2026-12-02/) moved it to
1; 4 and 8 had been measured slower in chains without early launch (docs/performance.md,
"Kernel boundaries", 2026-11-30). With early launch the GEMM starts while its predecessor
(a pre-pass, a stand-in, a GEMM) still runs, so its weights might stream during the
boundary: deeper prefetches were slower there too.

Per scheme and M, one merged tower with ``auto`` (the tuning cache in FP8TOWER_CACHE_DIR):
the step timed with every Triton PDL GEMM's cached config at each ``--depths`` (``all``: the
program's whole K range), arms alternated ``--rounds`` times (CUDA graph of ``--steps``
steps, ``--replays`` replays, median), outputs compared bit for bit with the first arm's (a
prefetch is a hint: the bits cannot move). Those configs are not in the tuner's space, so
this process accepts them (a benchmark arm, not a dispatch rule).

    python benchmarks/bench_prefetch_depth.py --json benchmarks/results/prefetch_H200.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tower_ab import (
    add_arguments,
    parse_ms,
    parse_schemes,
    patch_triton_choices,
    run_arms,
    write_rows,
)

_DEPTH: dict[str, object] = {"value": None}  # the arm being timed (None: as cached)
_ONLY: set[tuple[int, int]] = set()  # --only: the (N, K) shapes an arm applies to (empty: all)


def depth_of(arm: str, problem, cfg: dict) -> int:
    """PREFETCH tiles for ``arm`` ("all": the program's K range in BLOCK_K tiles, rounded up
    to a power of two as the kernel's prefetch shape needs; its addresses are clamped)."""
    if arm != "all":
        return int(arm)
    k_iters = -(-problem.k // cfg["block_k"])
    return 1 << (-(-k_iters // cfg["split_k"]) - 1).bit_length()


def _at_arm_depth(problem, cfg: dict) -> dict:
    arm = _DEPTH["value"]
    if arm is None or not cfg.get("pdl") or (_ONLY and (problem.n, problem.k) not in _ONLY):
        return cfg
    return {**cfg, "prefetch": depth_of(arm, problem, cfg)}


def patch_dispatch() -> None:
    """Make dispatch run every cached Triton PDL config at the arm's depth (module doc)."""
    patch_triton_choices(_at_arm_depth)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--depths", default="cached,4,8,all",
                    help="comma list: cached (the tuned config as is), a tile count (0: PDL without a "
                         "prefetch), or all")
    ap.add_argument("--only", default="",
                    help="NxK comma list: apply the arms' depths to GEMMs of these shapes only "
                         "(e.g. the GEMM after a stand-in); default: every Triton PDL GEMM")
    args = ap.parse_args(argv)
    arms = args.depths.split(",")
    for s in filter(None, args.only.split(",")):
        try:
            n, k = (int(v) for v in s.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--only: {s!r} is not NxK (e.g. 5120x6144)") from None
        _ONLY.add((n, k))
    for a in arms:
        if a not in ("cached", "all") and not (a.isdigit() and int(a) & (int(a) - 1) == 0):
            raise SystemExit(f"--depths: {a!r} is not 'cached', 'all' or a tile count (0 or a "
                             "power of two)")
    schemes = parse_schemes(args.schemes)
    ms = parse_ms(args.m)
    if not torch.cuda.is_available():
        raise SystemExit("bench_prefetch_depth.py needs a CUDA GPU")
    patch_dispatch()
    t0 = time.time()

    def set_arm(a: str) -> None:
        _DEPTH["value"] = None if a == "cached" else a

    rows = run_arms(args.model, schemes, ms, arms, set_arm, args.rounds, args.steps,
                    args.replays, json_path=args.json, t0=t0)
    _DEPTH["value"] = None
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
