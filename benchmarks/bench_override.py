"""The merged tower with every cached Triton config overridden per arm, arms alternated: an
A/B of one config key over the tuned choices (issue #12).

Each ``--arms`` entry is ``cached`` (the tuned configs as they are) or ``KEY=VALUE[;KEY=VALUE]``
(integers or true / false; KEY one of ``bench_gemm.OVERRIDE_KEYS``, the keys the Triton
backend reads), set on every cached Triton choice of the tower's GEMMs, whether or not it
changes that choice (``prequant`` means nothing to channel_token, for one). Per scheme and M,
one merged tower with ``auto`` (FP8TOWER_CACHE_DIR), arms alternated ``--rounds`` times, each
arm's outputs compared bit for bit with the first arm's (benchmarks/tower_ab.py). The
overridden configs need not be in the tuner's space: this process accepts them (a benchmark
arm, not a dispatch rule). Session 28 (results/wfirst_H200_2026-12-04/, calls 3 and 6).

    python benchmarks/bench_override.py --arms "cached,prequant=false,prequant=true" \\
        --schemes per_tensor --m 1,8 --json benchmarks/results/xmode.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_gemm import OVERRIDE_KEYS
from tower_ab import add_arguments, patch_triton_choices, run_arms, write_rows

_ARM: dict[str, dict] = {"value": {}}


def parse_arm(text: str) -> dict:
    """``cached`` -> {}; ``split_k=2;pdl=true`` -> {"split_k": 2, "pdl": True}; anything else
    exits naming it."""
    if text == "cached":
        return {}
    out = {}
    for item in text.split(";"):
        key, eq, value = item.partition("=")
        if not eq or key not in OVERRIDE_KEYS:
            raise SystemExit(f"--arms: {text!r}: {item!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(OVERRIDE_KEYS)}")
        if value.lower() in ("true", "false"):
            out[key] = value.lower() == "true"
            continue
        try:
            out[key] = int(value)
        except ValueError:
            raise SystemExit(f"--arms: {text!r}: {key}={value!r} is neither an integer nor "
                             "true / false") from None
    return out


def patch_dispatch() -> None:
    """Make dispatch run every cached Triton config with the arm's keys (module doc)."""
    patch_triton_choices(lambda problem, cfg: {**cfg, **_ARM["value"]})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--arms", required=True,
                    help="comma list: cached, or KEY=VALUE[;KEY=VALUE] set on every cached "
                         "Triton config")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    if len(set(arms)) != len(arms):
        raise SystemExit(f"--arms: {args.arms!r} names an arm twice")
    parsed = {a: parse_arm(a) for a in arms}
    if not torch.cuda.is_available():
        raise SystemExit("bench_override.py needs a CUDA GPU")
    patch_dispatch()
    t0 = time.time()

    def set_arm(a: str) -> None:
        _ARM["value"] = parsed[a]

    rows = run_arms(args.model, args.schemes.split(","), [int(v) for v in args.m.split(",")],
                    arms, set_arm, args.rounds, args.steps, args.replays)
    _ARM["value"] = {}
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
