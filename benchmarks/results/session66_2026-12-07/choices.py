"""Session 66: the 27B tower's CUDA graph under three variants, and what each key serves.
`bench tower` (auto, merged, per_tensor) at --m in one process (tuning from cold where the
cache is empty), then for every key the dispatcher resolved: the eager and the graph choice
it serves, and what the cache entry says (its winner, its graph pick, context / forced /
held). JSON to --out. Why: session 65's c8 tower, tuned at M = 1 / 32, ran M = 32 in 2.385
ms with 1535 PDL edges moved early, where `trace capture` of the same cache (its plans built
inside same_kernels_as_graphs) ran 2.301 ms with all 2047: a tie whose graph choice the
capture ran unplanned, CUTLASS's pre-pass without PDL (nn/plan.py's module doc)."""
import argparse
import json
import os
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--m", default="1,32")
ap.add_argument("--model", default="qwen3.5-27b")
ap.add_argument("--scheme", default="per_tensor")
ap.add_argument("--rounds", type=int, default=2)
# new: this code; old: session 65's (a capture runs an eager-only plan's graph choice
# unplanned); host: FP8TOWER_HOST_TIE=1 (graphs take the eager tie too)
ap.add_argument("--variant", default="new", choices=("new", "old", "host"))
ap.add_argument("--out", required=True)
a = ap.parse_args()
if a.variant == "host":
    os.environ["FP8TOWER_HOST_TIE"] = "1"

from fp8tower import dispatch
from fp8tower.nn import plan
from fp8tower.tower.bench import bench_tower

if a.variant == "old":
    _build = plan.build

    def build(*args, **kw):
        p = _build(*args, **kw)
        p.graph = None
        return p

    plan.build = build

rows = bench_tower(a.model, schemes=[a.scheme], arms=["merged"], backend_names=["auto"],
                   ms=[int(m) for m in a.m.split(",")], rounds=a.rounds)
d = dispatch.default_dispatcher()


def lab(c):
    return None if c is None else [c[0].name, c[1] if isinstance(c[1], dict) else repr(c[1])]


keys = []
for p in sorted({*d._memo, *d._graph_memo}, key=lambda p: p.key()):
    e = d.entries_for(p).get(p.key())
    row = {"key": p.key(), "eager": lab(d.resolve(p)), "graph": lab(d.resolve(p, graph=True)),
           "fresh": d.is_fresh(p.key())}
    if e is not None:
        w, g = e.winner, e.pick(graph=True)
        row.update(entry=[e.backend, e.config], winner=[w.backend, w.config],
                   graph_pick=[g.backend, g.config], choice_for_graph=list(e.choice_for(True)),
                   context=e.context is not None, forced=e.forced, held=sorted(map(str, e.held)),
                   top=[[c.backend, c.config, round(c.median_us, 3)] for c in e.ranked()[:5]])
    keys.append(row)
out = {"variant": a.variant, "rows": [{"m": r.m, "ms": r.ms_per_step, "early_edges": r.early_edges,
                 "chosen": r.chosen, "round_ms": r.round_ms} for r in rows], "keys": keys}
Path(a.out).write_text(json.dumps(out, indent=1))
for r in out["rows"]:
    print(r)
for k in keys:
    print(k["key"][:34], "eager", k["eager"], "| graph", k["graph"] if k["graph"] != k["eager"]
          else "=")
