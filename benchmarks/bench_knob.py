"""One kernel knob changed on every Triton GEMM of the merged 27B tower, the tuned configs
otherwise as cached: the step per arm, arms alternated in one process (issue #12).

An arm is ``cached`` (the tuned configs as they are) or knob settings joined by ``+``:
  prefetch=N    every PDL GEMM asks L2 for its first N W tiles before ``gdc_wait`` (0: none;
                N a power of two, as the kernel's prefetch shape needs), ``prefetch=all``
                its program's whole K range (kernels/fp8_gemm.py, configs.PDL_PAIR)
  k_rot         each program's K loop starts at step pid_n % steps and wraps
                (kernels/fp8_gemm.py K_ROT), so that the programs resident at once read
                different columns of x from L2
Outputs are compared with the first arm's bit for bit (a prefetch is a hint, the bits
cannot move; k_rot sums the K steps in another order, so its bits move: its numerics are
checked by tests/test_gpu.py::test_triton_k_rot_vs_in_order, not here). These configs are not in the tuner's space, so this
process accepts them (a benchmark arm, not a dispatch rule).

    python benchmarks/bench_knob.py --arms cached,k_rot --m 1,8,32 --json $OUT/knob.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

_ARM: dict[str, object] = {"value": None}  # the arm being timed: its settings (None: cached)


def parse_arm(arm: str) -> dict | None:
    """``cached`` -> None; ``k_rot+prefetch=4`` -> {"k_rot": True, "prefetch": "4"}."""
    if arm == "cached":
        return None
    out: dict[str, object] = {}
    for part in arm.split("+"):
        name, _, value = part.partition("=")
        if name == "k_rot" and not value:
            out["k_rot"] = True
        elif name == "prefetch" and (value == "all" or (
                value.isdigit() and int(value) & (int(value) - 1) == 0)):
            out["prefetch"] = value
        else:
            raise SystemExit(f"--arms: {part!r} in {arm!r} is not 'k_rot', 'prefetch=all' or "
                             "'prefetch=N' with N 0 or a power of two (or the arm 'cached')")
    return out


def depth_of(value: str, problem, cfg: dict) -> int:
    """PREFETCH tiles for a prefetch setting ("all": the program's K range in BLOCK_K tiles,
    rounded up to a power of two as the kernel's prefetch shape needs; its addresses are
    clamped)."""
    if value != "all":
        return int(value)
    k_iters = -(-problem.k // cfg["block_k"])
    return 1 << (-(-k_iters // cfg["split_k"]) - 1).bit_length()


def knobbed(settings: dict | None, problem, cfg: dict) -> dict:
    """A cached Triton config with the arm's settings (prefetch only where it has PDL)."""
    if not settings:
        return cfg
    out = dict(cfg)
    if settings.get("k_rot"):
        out["k_rot"] = True
    if "prefetch" in settings and cfg.get("pdl"):
        out["prefetch"] = depth_of(settings["prefetch"], problem, cfg)
    return out


def patch_dispatch() -> None:
    """Make dispatch run every cached Triton config with the arm's settings (module doc)."""
    from fp8tower.tuning import search

    native = search.native_config

    def patched(backend, problem, config):
        found, cfg = native(backend, problem, config)
        if not found or backend.name != "triton":
            return found, cfg
        return True, knobbed(_ARM["value"], problem, cfg)

    search.native_config = patched


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3.5-27b")
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--m", default="1,8", help="comma list of M")
    ap.add_argument("--arms", default="cached,k_rot",
                    help="comma list: cached, or knob settings joined by + (module doc)")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the arms per (scheme, M)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    settings = {a: parse_arm(a) for a in arms}
    if not torch.cuda.is_available():
        raise SystemExit("bench_knob.py needs a CUDA GPU")
    from fp8tower import dispatch, provenance
    from fp8tower.tower.build import build_tower
    from fp8tower.tower.timing import time_tower

    patch_dispatch()
    ms = [int(v) for v in args.m.split(",")]
    rows = []
    t0 = time.time()
    for scheme in args.schemes.split(","):
        tower = build_tower(args.model, scheme=scheme, arm="merged", backend="auto", m=ms[0])
        for m in ms:
            times: dict[str, list[float]] = {a: [] for a in arms}
            outs: dict[str, torch.Tensor] = {}
            for _ in range(args.rounds):
                for a in arms:
                    _ARM["value"] = settings[a]
                    dispatch.reset()  # the memo and the modules' launch plans re-resolve
                    tower.reconfigure(m=m)
                    t = time_tower(tower, replays=args.replays, steps=args.steps)
                    times[a].append(t.ms_per_step)
                    outs[a] = tower.static_y.clone()
            base = statistics.median(times[arms[0]])
            row = {"scheme": scheme, "m": m, "arms": {}}
            for a in arms:
                med = statistics.median(times[a])
                row["arms"][a] = {"ms": round(med, 4), "over_first": round(med / base, 4),
                                  "runs": [round(v, 4) for v in times[a]],
                                  "bits_equal_first": bool(torch.equal(outs[a], outs[arms[0]]))}
            row["finite"] = bool(torch.isfinite(outs[arms[0]]).all())
            rows.append(row)
            print(json.dumps(row), flush=True)
        del tower
        torch.cuda.empty_cache()
    _ARM["value"] = None
    doc = {**provenance.record(), "seconds": round(time.time() - t0, 1), "rows": rows}
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    for r in rows:
        cells = []
        for a, v in r["arms"].items():
            bits = "" if v["bits_equal_first"] else ", bits differ"
            cells.append(f"{a}: {v['ms']:.4f} ({v['over_first']:.3f}{bits})")
        print(r["scheme"], f"M={r['m']}", "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
