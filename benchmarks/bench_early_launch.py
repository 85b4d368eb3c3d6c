"""Early launch (fp8tower.graph_edges) in the 27B tower: the same captured step with its
programmatic edges on the predecessor's PROGRAMMATIC port (as stream capture records them)
and moved to its LAUNCH_ORDER port (issue #12).

Per scheme and M, one merged tower with ``auto`` (the tuning cache in FP8TOWER_CACHE_DIR):
the step captured with early launch off and on, ``--rounds`` times each, in ABBA order (off,
on, then on, off; CUDA graph of ``--steps`` steps, ``--replays`` timed replays, median), and
the outputs of the two graphs compared bit for bit. ``--force-pdl``: every Triton GEMM runs
its cached config with PDL (and an L2 prefetch of 2 W tiles where it had none), to see what
PDL buys per_tensor's single-launch GEMMs once their edges launch early; those configs are
not in the tuner's space, so this process accepts them (a benchmark arm, not a dispatch
rule).

    python benchmarks/bench_early_launch.py --json benchmarks/results/early_H200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from fp8tower import graph_edges, provenance
from fp8tower.tower.build import build_tower
from fp8tower.tower.timing import time_tower


def force_pdl() -> None:
    """Make dispatch run every cached Triton config with PDL (see the module doc)."""
    from fp8tower.tuning import search

    native = search.native_config

    def patched(backend, problem, config):
        if backend.name != "triton" or config is None:
            return native(backend, problem, config)
        return True, {**config, "pdl": True, "prefetch": config.get("prefetch") or 2}

    search.native_config = patched


def programmatic_edges(tower) -> dict:
    """Edge counts of the tower's captured graph by (type, from_port)."""
    counts: dict[str, int] = {}
    for _, _, e in graph_edges.edges(tower._graph.raw_cuda_graph()):
        key = f"type{e.type}_port{e.from_port}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def time_off_on(tower, rounds: int, steps: int, replays: int):
    """``rounds`` timings of the step with early launch off and on: (ms per step of each
    round, last output, edge counts), each by ``early``. Every other round in reverse (ABBA,
    as tower/context.py): off,on,off,on let a linear drift favour off, timed first each
    round."""
    times: dict[bool, list[float]] = {False: [], True: []}
    outs: dict[bool, torch.Tensor] = {}
    counts: dict[bool, dict] = {}
    for r in range(rounds):
        for early in (False, True) if r % 2 == 0 else (True, False):
            t = time_tower(tower, replays=replays, steps=steps, early=early)
            times[early].append(t.ms_per_step)
            outs[early] = tower.static_y.clone()
            counts[early] = programmatic_edges(tower)
    return times, outs, counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3.5-27b")
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--m", default="1,8", help="comma list of M")
    ap.add_argument("--rounds", type=int, default=2, help="off/on pairs per (scheme, M)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--force-pdl", action="store_true")
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_early_launch.py needs a CUDA GPU")
    if args.force_pdl:
        force_pdl()
    ms = [int(v) for v in args.m.split(",")]
    rows = []
    t0 = time.time()
    for scheme in args.schemes.split(","):
        tower = build_tower(args.model, scheme=scheme, arm="merged", backend="auto", m=ms[0])
        for m in ms:
            tower.reconfigure(m=m)
            tower.warmup()
            times, outs, counts = time_off_on(tower, args.rounds, args.steps, args.replays)
            off, on = statistics.median(times[False]), statistics.median(times[True])
            row = {"scheme": scheme, "m": m, "force_pdl": args.force_pdl,
                   "ms_off": round(off, 4), "ms_on": round(on, 4), "on_over_off": round(on / off, 4),
                   "runs_off": [round(v, 4) for v in times[False]],
                   "runs_on": [round(v, 4) for v in times[True]],
                   "edges_off": counts[False], "edges_on": counts[True],
                   "bits_equal": bool(torch.equal(outs[False], outs[True])),
                   "finite": bool(torch.isfinite(outs[True]).all())}
            rows.append(row)
            print(json.dumps(row), flush=True)
        del tower
        torch.cuda.empty_cache()
    doc = {**provenance.record(), "seconds": round(time.time() - t0, 1), "rows": rows}
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
