"""In-context tuning: each GEMM key's few best candidates re-ranked by the decode step it serves.

tuning/search.py times a candidate in a chain of its own shape (an x writer between some
calls). How a config's launches overlap their neighbours' (pre-pass pairs, PDL and early launch,
graph_edges.py) depends on those neighbours, and that chain can rank candidates the step
does not: H200 2026-12-01 (results/early_launch_H200_2026-12-01/), the merged 27B tower
retuned with early launch ran per_tensor at 2.335 ms/step at M = 1 where the previous
configs ran 2.254, and 2.404 at M = 8 where those configs launched with PDL ran 2.270.

:func:`refine` makes one coordinate-descent pass over a tower's GEMM keys, the most weight
bytes per step first. For each key it times the whole step (CUDA graph, cold L2:
timing.time_tower) with each of the key's :func:`shortlist` candidates, in two rounds (the
second in reverse order; a candidate's step time is the mean of its two), and keeps the
fastest unless the current choice is within MIN_GAIN of it; a move must show the same gain
again in four more timings, current, challenger, challenger, current (ABBA: a linear drift
favours neither), tried for up to CONFIRMS challengers, fastest first. Only candidates that
can run here are timed (dispatch would serve another under a timed one's label). The entry
records the step times and the step (its stand-in kernel and parts: ``Entry.context``), with
each candidate's gap to the current choice in the chain and in the step (per GEMM), and is
saved like any tuning. A key shared by several GEMMs of the step (every layer's
out_proj) is judged by all of them at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .. import dispatch
from ..provenance import now_iso
from ..tuning.cache import Entry, Measurement

TOP = 3  # the fastest candidates of a key (per GEMM) timed in the step
KINDS = 6  # at most this many candidates in all
KIND_RATIO = 1.15  # other kinds of launch: within this factor of the fastest per GEMM
MIN_GAIN = 0.003  # a step this much faster (0.3%) to move a key off its current choice
# One step timing of a candidate can be 2-5% off and not reproduce: H200 2026-12-02
# (results/refine_rounds_H200_2026-12-02/call2/retune.json), per_tensor 5120x6144 M=1 in the
# merged 27B step, one round: a tile-major Triton config 2.1616 ms, CUTLASS pf 2.1931, the
# current Triton config 2.2209; the confirmation pair gave 2.2191 / 2.2243 for the first, so
# the key kept its choice, and CUTLASS (2.190 as the tower ran it in session 15, against
# 2.222) was never confirmed. Hence two rounds, and the next challenger confirmed in turn.
ROUNDS = 2
CONFIRMS = 3  # challengers (fastest first) given a confirmation (ABBA)


def launch_kind(c: Measurement) -> tuple:
    """What decides how a candidate overlaps its neighbours: its backend, PDL or not, and
    how x is quantized (in the GEMM, a pre-pass launch, channel_token's fused amax)."""
    cfg = c.config if isinstance(c.config, dict) else {}
    return (c.backend, bool(cfg.get("pdl")), bool(cfg.get("prequant")),
            bool(cfg.get("fused_amax")))


def shortlist(entry: Entry, top: int = TOP, kinds: int = KINDS,
              runnable: Callable[[Measurement], bool] | None = None) -> list[Measurement]:
    """The candidates :func:`refine` times for ``entry``: its current choice, its ``top``
    fastest, then the fastest of each other launch kind (:func:`launch_kind`) within
    KIND_RATIO of the fastest, at most ``kinds`` in all; only those ``runnable`` accepts
    (default: all). The chain ranks launch kinds least
    reliably: H200 2026-12-01 (results/early_launch_H200_2026-12-01/call3), per_tensor
    5120x6144 M=1 timed 11.53 us as a PDL pre-pass pair and 12.03 us quantizing x in the
    GEMM, but the 27B step ran 2.331 and 2.273 ms with them."""
    ranked = [c for c in entry.ranked() if runnable is None or runnable(c)]
    current = next((c for c in ranked
                    if (c.backend, c.config) == (entry.backend, entry.config)), None)
    out = [current] if current is not None else []
    out += [c for c in ranked[:top] if c not in out]
    seen = {launch_kind(c) for c in out}
    for c in ranked:
        if len(out) >= kinds or c.median_us > KIND_RATIO * ranked[0].median_us:
            break
        if launch_kind(c) not in seen:
            seen.add(launch_kind(c))
            out.append(c)
    return out[:max(kinds, 1)]


def refine(tower, *, top: int = TOP, steps: int = 8, replays: int = 10, rounds: int = ROUNDS,
           advance: Callable[[str], None] | None = None) -> list[dict]:
    """One pass over ``tower``'s GEMM keys at its M (module doc); returns one row per key:
    its candidates' step times (the mean of ``rounds``) and the choice kept. Every key must
    be tuned already (the tower's warm-up tunes what is not, where the policy allows)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    from ..tuning.tuner import save
    from . import build, timing

    d = dispatch.default_dispatcher()

    def step_ms() -> float:
        tower.reconfigure()  # the graph goes; the next warm-up resolves the new choice
        tower.warmup()
        return timing.time_tower(tower, replays=replays, steps=steps).ms_per_step

    tower.warmup()
    # the step is the stand-in kernel's too: torch, rows and rows_fp8 steps re-rank the same
    # bf16 keys, and the entry must say which one decided
    step = {"standin": build.STANDIN_KERNEL}
    if getattr(tower, "parts", None) is not None:
        step["parts"] = list(tower.parts)
    weight: dict[str, int] = {}
    gemms: dict[str, int] = {}  # the step's GEMMs a key serves
    problems = {}
    for p in tower.gemm_problems():
        problems.setdefault(p.key(), p)
        weight[p.key()] = weight.get(p.key(), 0) + p.weight_bytes()
        gemms[p.key()] = gemms.get(p.key(), 0) + 1
    rows = []
    for key in sorted(weight, key=weight.get, reverse=True):
        p = problems[key]
        entry = d.entries_for(p).get(key)
        if advance:
            advance(f"{tower.spec.name} M={tower.m} {key}")
        if entry is not None and entry.ranked():
            # a candidate that cannot run here (FP8TOWER_BACKENDS, unavailable, a config no
            # longer offered) would be timed as whatever dispatch falls back on
            why = d.runnable(p, entry.backend, entry.config)[1]
            if why is not None:
                rows.append({"key": key, "kept": f"{entry.backend}[{entry.config}]", **step,
                             "candidates": [], "note": f"its choice cannot run here: {why}"})
                continue

        def runnable(c: Measurement, p=p) -> bool:
            return d.runnable(p, c.backend, c.config)[0] is not None

        cands = shortlist(entry, top, runnable=runnable) if entry is not None else []
        if len(cands) < 2:
            rows.append({"key": key, "kept": None if not cands else cands[0].label, **step,
                         "candidates": [], "note": "nothing to compare"})
            continue
        if (cands[0].backend, cands[0].config) != (entry.backend, entry.config):
            # the choice (e.g. set by hand or by a rule) was never timed among them: a move
            # would be judged against another candidate, not against what runs now
            rows.append({"key": key, "kept": f"{entry.backend}[{entry.config}]", **step,
                         "candidates": [], "note": "its choice is not a timed candidate"})
            continue

        # Each candidate is forced, so the step's graph runs it (not its choice of a tie,
        # Entry.choice_for); the entry kept is chosen in context: it serves both modes.
        # The current choice is the eager one, as before graphs had their own; a graph's
        # choice of a tie is within HOST_TIE of the fastest, so among those timed (TOP).
        def timed(c: Measurement, p=p, entry=entry) -> float:
            d.accept(p, dataclasses.replace(entry, backend=c.backend, config=c.config,
                                            forced=True))
            return step_ms()

        by_round = []
        for r in range(rounds):  # every other round in reverse: a drift favours no candidate
            order = range(len(cands) - 1, -1, -1) if r % 2 else range(len(cands))
            got = {i: timed(cands[i]) for i in order}
            by_round.append([got[i] for i in range(len(cands))])
        times = [sum(ts) / len(ts) for ts in zip(*by_round)]
        # Challengers that beat the current choice by MIN_GAIN, fastest first. A move is
        # confirmed by four more timings, current, challenger, challenger, current, compared
        # by the means of each (ABBA: current-then-challenger alone favoured whichever a
        # drift favours): a single step timing was once 2.7% fast and not reproduced (H200
        # 2026-12-01, results/early_launch_H200_2026-12-01/call6, qwen3-8b per_tensor merged).
        challengers = sorted((i for i in range(1, len(cands))
                              if times[0] > times[i] * (1 + MIN_GAIN)), key=times.__getitem__)
        best, confirms = 0, []
        for i in challengers[:CONFIRMS]:
            abba = [timed(cands[0]), timed(cands[i]), timed(cands[i]), timed(cands[0])]
            confirms.append({"candidate": i, "ms": [round(t, 4) for t in abba]})
            if (abba[0] + abba[3]) / 2 > (abba[1] + abba[2]) / 2 * (1 + MIN_GAIN):
                best = i
                break
        # Each candidate against the current choice, in us: in the tuner's chain (a call) and
        # in the step (per GEMM of this key), so a file shows where the two disagree. H100
        # 2026-12-07 (results/session60_2026-12-07/chain_vs_step.json, 27 keys of the 27B
        # step, 116 candidates): the step widened 80 of the gaps (median +0.23 us), and
        # judged CUTLASS's PDL kernels 1.45 us a GEMM worse than the chain at M <= 8 but
        # 0.52 better at M = 32 (medians), where per_tensor's two keys moved to them.
        ctx = {"step": f"{tower.spec.name} {tower.arm} M={tower.m}", **step, "date": now_iso(),
               "gemms": gemms[key],
               "ms_per_step": [{"backend": c.backend, "config": c.config, "ms": round(t, 4),
                                "rounds": [round(ts[i], 4) for ts in by_round],
                                "chain_delta_us": round(c.median_us - cands[0].median_us, 3),
                                "step_delta_us": round((t - times[0]) * 1e3 / gemms[key], 3)}
                               for i, (c, t) in enumerate(zip(cands, times))]}
        if confirms:
            # current, challenger, challenger, current: the timings that decided (the last)
            ctx["confirm_ms"] = confirms[-1]["ms"]
            ctx["confirms"] = confirms
        final = dataclasses.replace(entry, backend=cands[best].backend,
                                    config=cands[best].config, context=ctx)
        cache = d.accept(p, final)
        if cache is not None:
            save(cache, final)
        rows.append({"key": key, "kept": cands[best].label, "was": cands[0].label, **step,
                     "gemms": gemms[key],
                     "ms_before": round(times[0], 4), "ms_after": round(times[best], 4),
                     "confirm_ms": ctx.get("confirm_ms"), "confirms": confirms,
                     "candidates": ctx["ms_per_step"]})
    tower.reconfigure()
    return rows
