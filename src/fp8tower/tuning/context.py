"""In-context tuning: each GEMM key's few best candidates re-ranked by the decode step it serves.

search.py times a candidate in a chain of its own shape (with an x writer between some calls).
How a config's launches overlap their neighbours' (pre-pass pairs, PDL and early launch,
graph_edges.py) depends on those neighbours, and that chain can rank candidates the step
does not: H200 2026-12-01 (results/early_launch_H200_2026-12-01/), the merged 27B tower
retuned with early launch ran per_tensor at 2.335 ms/step at M = 1 where the previous
configs ran 2.254, and 2.404 at M = 8 where those configs launched with PDL ran 2.270.

:func:`refine` makes one coordinate-descent pass over a tower's GEMM keys, the most weight
bytes per step first. For each key it times the whole step (CUDA graph, cold L2:
tower.timing.time_tower) with each of the key's :func:`shortlist` candidates in turn, and
keeps the fastest unless the current choice is within MIN_GAIN of it. The entry records the
step times (``Entry.context``) and is saved like any tuning. A key shared by several GEMMs
of the step (every layer's out_proj) is judged by all of them at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .. import dispatch
from ..provenance import now_iso
from .cache import Entry, Measurement

TOP = 3  # the fastest candidates of a key (per GEMM) timed in the step
MIN_GAIN = 0.003  # a step this much faster (0.3%) to move a key off its current choice


def _pdl(c: Measurement) -> bool:
    return isinstance(c.config, dict) and bool(c.config.get("pdl"))


def shortlist(entry: Entry, top: int = TOP) -> list[Measurement]:
    """The candidates :func:`refine` times for ``entry``: its current choice, its ``top``
    fastest, and the fastest launched the other way with respect to PDL (the choice the
    chain ranks least reliably)."""
    ranked = entry.ranked()
    current = next((c for c in ranked
                    if (c.backend, c.config) == (entry.backend, entry.config)), None)
    out = [current] if current is not None else []
    out += [c for c in ranked[:top] if c not in out]
    if current is not None:
        other = next((c for c in ranked if _pdl(c) != _pdl(current)), None)
        if other is not None and other not in out:
            out.append(other)
    return out


def refine(tower, *, top: int = TOP, steps: int = 8, replays: int = 10,
           advance: Callable[[str], None] | None = None) -> list[dict]:
    """One pass over ``tower``'s GEMM keys at its M (module doc); returns one row per key:
    its candidates' step times and the choice kept. Every key must be tuned already (the
    tower's warm-up tunes what is not, where the policy allows)."""
    from ..tower.timing import time_tower
    from .tuner import save

    d = dispatch.default_dispatcher()

    def step_ms() -> float:
        tower.reconfigure()  # the graph goes; the next warm-up resolves the new choice
        tower.warmup()
        return time_tower(tower, replays=replays, steps=steps).ms_per_step

    tower.warmup()
    weight: dict[str, int] = {}
    problems = {}
    for p in tower.gemm_problems():
        problems.setdefault(p.key(), p)
        weight[p.key()] = weight.get(p.key(), 0) + p.weight_bytes()
    rows = []
    for key in sorted(weight, key=weight.get, reverse=True):
        p = problems[key]
        entry = d.entries_for(p).get(key)
        cands = shortlist(entry, top) if entry is not None else []
        if advance:
            advance(f"{tower.spec.name} M={tower.m} {key}")
        if len(cands) < 2:
            rows.append({"key": key, "kept": None if not cands else cands[0].label,
                         "candidates": [], "note": "nothing to compare"})
            continue
        times = []
        for c in cands:
            d.accept(p, dataclasses.replace(entry, backend=c.backend, config=c.config))
            times.append(step_ms())
        best = min(range(len(cands)), key=times.__getitem__)
        if times[0] <= times[best] * (1 + MIN_GAIN):
            best = 0  # the current choice, unless clearly beaten
        ctx = {"step": f"{tower.spec.name} {tower.arm} M={tower.m}", "date": now_iso(),
               "ms_per_step": [{"backend": c.backend, "config": c.config, "ms": round(t, 4)}
                               for c, t in zip(cands, times)]}
        final = dataclasses.replace(entry, backend=cands[best].backend,
                                    config=cands[best].config, context=ctx)
        cache = d.accept(p, final)
        if cache is not None:
            save(cache, final)
        rows.append({"key": key, "kept": cands[best].label, "was": cands[0].label,
                     "ms_before": round(times[0], 4), "ms_after": round(times[best], 4),
                     "candidates": ctx["ms_per_step"]})
    tower.reconfigure()
    return rows
