"""Where should a PDL launch let the next kernel launch? The 27B tower, one A/B per place
(issue #12). Session 25's experiment, kept with its kernel change (``trigger.patch`` in
this directory, applied to the tree of commit 7c52a64: ``git apply trigger.patch``).

Every PDL launch of ours lets its dependent launch at its start (``gdc_launch_dependents``
first, then the L2 prefetch and ``gdc_wait``). After a GEMM that is the next GEMM's pre-pass,
which triggers at its start too, so the next GEMM launches while this one streams, and so
on down a chain of adjacent GEMMs: launched early, programs hold their SM slots until their
wait returns. GEMMs back to back ran up to 3.9 us slower a GEMM with PDL than with an x
writer (no PDL) between them (H200 2026-12-04, results/scorecard_H200_2026-12-04/call4/).
The config key ``trigger`` (kernels/configs.py: bits GEMM and PREPASS) moves the GEMM's
trigger after its K loop and the pre-pass's after its wait.

Per scheme and M, one merged tower with ``auto`` (the tuning cache in FP8TOWER_CACHE_DIR):
the step timed with every Triton PDL GEMM's cached config at each ``--arms`` value of
``trigger`` (``cached``: as tuned), arms alternated ``--rounds`` times (CUDA graph of
``--steps`` steps, ``--replays`` replays, median), outputs compared bit for bit with the
first arm's (where a kernel lets the next launch cannot move the bits). Those configs are
not in the tuner's space, so this process accepts them (a benchmark arm, not a dispatch
rule).

    python benchmarks/results/trigger_refine_H200_2026-12-04/bench_trigger.py --json OUT.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from tower_ab import add_arguments, run_arms, write_rows

_TRIGGER: dict[str, int | None] = {"value": None}  # the arm being timed (None: as cached)


def patch_dispatch() -> None:
    """Make dispatch run every cached Triton PDL config with the arm's trigger (module doc)."""
    from fp8tower.tuning import search

    native = search.native_config

    def patched(backend, problem, config):
        found, cfg = native(backend, problem, config)
        arm = _TRIGGER["value"]
        if not found or arm is None or backend.name != "triton" or not cfg.get("pdl"):
            return found, cfg
        return True, {**cfg, "trigger": arm}

    search.native_config = patched


def main(argv=None) -> int:
    from fp8tower.kernels.configs import GEMM, PREPASS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--arms", default=f"cached,{GEMM},{PREPASS},{GEMM | PREPASS}",
                    help=f"comma list: cached (the tuned config as is) or a trigger value (bits: "
                         f"{GEMM} the GEMM after its K loop, {PREPASS} the pre-pass after its wait)")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    for a in arms:
        if a != "cached" and not (a.isdigit() and int(a) <= GEMM | PREPASS):
            raise SystemExit(f"--arms: {a!r} is not 'cached' or a trigger value from 0 to "
                             f"{GEMM | PREPASS}")
    if not torch.cuda.is_available():
        raise SystemExit("bench_trigger.py needs a CUDA GPU")
    patch_dispatch()
    t0 = time.time()

    def set_arm(a: str) -> None:
        _TRIGGER["value"] = None if a == "cached" else int(a)

    rows = run_arms(args.model, args.schemes.split(","), [int(v) for v in args.m.split(",")],
                    arms, set_arm, args.rounds, args.steps, args.replays)
    _TRIGGER["value"] = None
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
