"""A GEMM whose W tiles are in flight before its PDL wait: the 27B tower with every eligible
cached Triton config run that way, against the configs as cached (issue #12).

Triton's pipeliner issues a K loop's prologue (its first num_stages - 1 tiles) right before
the loop, so with ``gdc_wait`` before the loop nothing of W moves before the previous kernel
ends. ``wfirst`` (kernels/fp8_gemm.py's W_FIRST) waits in the loop's first step instead and
reads x outside what the pipeliner moves, so the prologue's W copies come before the wait
(triton 3.6; kernels/configs.wfirst_ok says which configs can). Session 27 measured the
lever with a hand-written Gluon pipeline (results/gluon_H200_2026-12-04/).

Arms: ``cached`` (the tuned configs as they are), ``wfirst`` (each eligible Triton PDL config
with ``wfirst``), ``wfirst0`` (also without the one-tile L2 prefetch, which the prologue's
copies make redundant). Per scheme and M, one merged tower with ``auto`` (FP8TOWER_CACHE_DIR),
arms alternated ``--rounds`` times, outputs compared bit for bit with the first arm's
(benchmarks/tower_ab.py). The arms' configs are not in the tuner's space unless it offers
them, so this process accepts them (a benchmark arm, not a dispatch rule).

    python benchmarks/bench_wfirst.py --m 1,8 --json benchmarks/results/wfirst.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tower_ab import add_arguments, run_arms, write_rows

ARMS = ("cached", "wfirst", "wfirst0")
_ARM: dict[str, str] = {"value": "cached"}


def arm_config(arm: str, problem, cfg: dict) -> dict:
    """``cfg`` as ``arm`` runs it (module doc)."""
    from fp8tower.kernels.configs import wfirst_ok

    if arm == "cached" or not wfirst_ok(problem, cfg):
        return cfg
    out = {k: v for k, v in cfg.items() if k != "wfirst"}
    out["wfirst"] = True
    if arm == "wfirst0":
        out["prefetch"] = 0
    return out


def patch_dispatch() -> None:
    """Make dispatch run every cached Triton config as the arm says (module doc)."""
    from fp8tower.tuning import search

    native = search.native_config

    def patched(backend, problem, config):
        found, cfg = native(backend, problem, config)
        if not found or backend.name != "triton":
            return found, cfg
        return True, arm_config(_ARM["value"], problem, cfg)

    search.native_config = patched


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token,weight_only")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    bad = [a for a in arms if a not in ARMS]
    if bad:
        raise SystemExit(f"--arms: {bad} not among {', '.join(ARMS)}")
    if not torch.cuda.is_available():
        raise SystemExit("bench_wfirst.py needs a CUDA GPU")
    patch_dispatch()
    t0 = time.time()

    def set_arm(a: str) -> None:
        _ARM["value"] = a

    rows = run_arms(args.model, args.schemes.split(","), [int(v) for v in args.m.split(",")],
                    arms, set_arm, args.rounds, args.steps, args.replays)
    _ARM["value"] = "cached"
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
