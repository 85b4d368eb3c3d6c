"""The merged tower with every cached Triton config overridden per arm, arms alternated: an
A/B of one config key over the tuned choices (issue #12).

Each ``--arms`` entry is ``cached`` (the tuned configs as they are) or
``KEY=VALUE[;KEY=VALUE][@NxK[+NxK]]``, several joined by ``|`` (integers or true / false;
KEY one of ``bench_gemm.OVERRIDE_KEYS``, the keys the Triton backend reads), set on every
cached Triton choice of the tower's GEMMs, or with ``@`` only on those of the named N x K
shapes, whether or not it changes that choice (``prequant`` means nothing to channel_token,
for one). Per
scheme and M, one merged tower with ``auto`` (FP8TOWER_CACHE_DIR), arms alternated
``--rounds`` times, each arm's outputs compared bit for bit with the first arm's
(benchmarks/tower_ab.py). The overridden configs need not be in the tuner's space: this
process accepts them (a benchmark arm, not a dispatch rule). Session 28
(results/wfirst_H200_2026-12-04/, calls 3 and 6); ``@`` session 31 (a tile small enough to
sit beside the next GEMM's, results/boundary_timeline_H200_2026-12-04/call3.sh).

    python benchmarks/bench_override.py --arms "cached,prequant=false,prequant=true" \\
        --schemes per_tensor --m 1,8 --json benchmarks/results/xmode.json
    python benchmarks/bench_override.py --arms "cached,num_stages=3@5120x6144" ...
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_gemm import OVERRIDE_KEYS
from tower_ab import (
    add_arguments,
    parse_ms,
    parse_schemes,
    patch_triton_choices,
    run_arms,
    write_rows,
)


@dataclass(frozen=True)
class Arm:
    """Config keys to set on the cached Triton choices: ``parts``, each (keys, shapes), the
    shapes as (N, K) pairs or None (every GEMM); later parts win where they overlap."""

    parts: tuple = ()

    def apply(self, problem, cfg: dict) -> dict:
        for keys, shapes in self.parts:
            if shapes is None or (problem.n, problem.k) in shapes:
                cfg = {**cfg, **keys}
        return cfg

    @property
    def shapes(self) -> set:
        return {s for _, shapes in self.parts for s in (shapes or ())}


_ARM: dict[str, Arm] = {"value": Arm()}


def _shapes(text: str, where: str) -> frozenset:
    out = set()
    for item in text.split("+"):
        n, x, k = item.partition("x")
        if not (x and n.isdigit() and k.isdigit() and int(n) > 0 and int(k) > 0):
            raise SystemExit(f"--arms: {where!r}: {item!r} is not a shape NxK (e.g. 5120x6144)")
        out.add((int(n), int(k)))
    return frozenset(out)


def _keys(body: str, where: str) -> dict:
    out = {}
    for item in body.split(";"):
        key, eq, value = item.partition("=")
        if not eq or key not in OVERRIDE_KEYS:
            raise SystemExit(f"--arms: {where!r}: {item!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(OVERRIDE_KEYS)}")
        if value.lower() in ("true", "false"):
            out[key] = value.lower() == "true"
            continue
        try:
            out[key] = int(value)
        except ValueError:
            raise SystemExit(f"--arms: {where!r}: {key}={value!r} is neither an integer nor "
                             "true / false") from None
    return out


def parse_arm(text: str) -> Arm:
    """``cached`` -> no keys; ``split_k=2;pdl=true`` -> those keys on every GEMM;
    ``num_stages=3@5120x6144`` -> on that shape's only; parts joined by ``|`` set other keys
    on other shapes (``block_n=128@16384x5120|num_stages=5@5120x6144``); anything else exits
    naming it."""
    if text == "cached":
        return Arm()
    parts = []
    for part in text.split("|"):
        body, at, scope = part.partition("@")
        parts.append((_keys(body, text), _shapes(scope, text) if at else None))
    return Arm(tuple(parts))


def check_shapes(arms, model: str) -> None:
    """Exit naming any shape an arm scopes to that no GEMM of ``model``'s merged tower has
    (such an arm would time the cached configs under another name)."""
    from fp8tower.models.registry import get_spec

    have = {(g.n, g.k) for g in get_spec(model).gemms(merged=True, fp8_only=True)}
    for name, arm in arms.items():
        missing = sorted(arm.shapes - have)
        if missing:
            raise SystemExit(f"--arms: {name!r}: {model}'s merged tower has no GEMM "
                             f"{', '.join(f'{n}x{k}' for n, k in missing)} (it has "
                             f"{', '.join(f'{n}x{k}' for n, k in sorted(have))})")


def patch_dispatch() -> None:
    """Make dispatch run every cached Triton config with the arm's keys (module doc)."""
    patch_triton_choices(lambda problem, cfg: _ARM["value"].apply(problem, cfg))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--arms", required=True,
                    help="comma list: cached, or KEY=VALUE[;KEY=VALUE] set on every cached "
                         "Triton config, or with @NxK[+NxK] on those shapes' only; parts "
                         "joined by | (quote the list)")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    if len(set(arms)) != len(arms):
        raise SystemExit(f"--arms: {args.arms!r} names an arm twice")
    parsed = {a: parse_arm(a) for a in arms}
    check_shapes(parsed, args.model)
    schemes = parse_schemes(args.schemes)
    ms = parse_ms(args.m)
    if not torch.cuda.is_available():
        raise SystemExit("bench_override.py needs a CUDA GPU")
    patch_dispatch()
    t0 = time.time()

    def set_arm(a: str) -> None:
        _ARM["value"] = parsed[a]

    rows = run_arms(args.model, schemes, ms, arms, set_arm, args.rounds, args.steps,
                    args.replays, json_path=args.json, t0=t0)
    _ARM["value"] = Arm()
    write_rows(args.json, rows, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
