"""Chains of decode GEMMs in ONE CUDA graph: what each kernel boundary costs (issue #12).

Arms: cuBLASLt, the Triton default ("base") and its variants with programmatic dependent
launch (early trigger, ``gdc_wait`` before x: "pdl"), plus an L2 prefetch of each program's
first W tiles before the wait ("pdl_pfN": N tiles), and the same on the wave-fitting grid
(triton_gemm.wave_fits' one-wave config, "..._wave"). Measured in one run, cold L2:

- numerics: every arm vs the float64 reference on the same quantized operands (output
  poisoned with NaN first), SQNR dB;
- per GEMM: a chain of one shape over rotated weight copies (> 3x L2), tuning's timer;
  us per GEMM, % of the read ceiling, and the cost beyond bytes (us - bytes / ceiling);
- tower chain: the 9 tower shapes x 2 weight sets (1.2 GB: every weight is cold; fewer or
  smaller shapes get more sets, until the chain exceeds 3x L2: chain_weight_sets) in one
  graph, and the same with a small elementwise kernel on x between GEMMs (the tower's
  GDN/attention stand-ins are such kernels).

    python benchmarks/bench_chain.py --json benchmarks/results/chain_H200.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from fp8tower import backends, provenance
from fp8tower.backends import triton_gemm as tg
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import Scheme, quantize_weight, sqnr_db
from fp8tower.kernels import configs as kconfigs
from fp8tower.problem import GemmProblem
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.timer import (
    L2_FACTOR,
    l2_cache_bytes,
    rotation_copies,
    time_cuda_graph,
)

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_gemm import TOWER_SHAPES, random_weights


def _wave(p):
    fits = [c for c in kconfigs.wave_fits(p) if kconfigs.waves(c, p) <= 1.0]
    return fits[0] if fits else None


ARMS = {
    "base": lambda p: kconfigs.default_config(p),
    "pdl": lambda p: {**kconfigs.default_config(p), "pdl": True},
    "pdl_pf2": lambda p: {**kconfigs.default_config(p), "pdl": True, "prefetch": 2},
    "pdl_pf4": lambda p: {**kconfigs.default_config(p), "pdl": True, "prefetch": 4},
    "pdl_pf8": lambda p: {**kconfigs.default_config(p), "pdl": True, "prefetch": 8},
    "wave": lambda p: _wave(p),
    "pdl_pf4_wave": lambda p: _wave(p) and {**_wave(p), "pdl": True, "prefetch": 4},
}


def problem(m, n, k, scheme, cap):
    return GemmProblem(m, n, k, scheme, capability=cap,
                       static_act_scale=scheme is Scheme.PER_TENSOR)


def parse_plan(text: str) -> list[tuple[Scheme, list[int]]]:
    """``"per_tensor:1,8;block128:1"`` -> [(Scheme.PER_TENSOR, [1, 8]), (Scheme.BLOCK128, [1])]."""
    try:
        return [(Scheme.parse(part.split(":")[0]), [int(v) for v in part.split(":")[1].split(",")])
                for part in text.split(";")]
    except (IndexError, ValueError) as e:
        raise SystemExit(f"--plan {text!r}: expected scheme:M,M;... ({e})") from None


def chain_weight_sets(shapes, l2: int) -> int:
    """Weight sets of a tower chain (each shape once a set): at least 2, and enough that the
    chain's weights exceed L2_FACTOR x the L2 (``l2``), so that every weight is read cold."""
    per_set = sum(n * k for n, k in shapes)
    return max(2, L2_FACTOR * l2 // per_set + 1)


def gemm_cases(scheme, ms, shapes, cap, l2, sets):
    """Per-GEMM operands, shape by shape: the rotated weight copies (their first
    :func:`chain_weight_sets` kept in ``sets[(n, k)]`` for :func:`tower_chains`, more made
    where the rotation has fewer; the rest freed after the shape), then per M
    ``(p, ws, x, out, copies)``."""
    n_sets = chain_weight_sets(shapes, l2)
    for n, k in shapes:
        copies = rotation_copies(n * k, l2)
        ws = random_weights(n, k, scheme, max(copies, n_sets), seed=n + k)
        sets[(n, k)] = ws[:n_sets]
        ws = ws[:copies]
        for m in ms:
            x = torch.randn(m, k, device="cuda").bfloat16()
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            yield problem(m, n, k, scheme, cap), ws, x, out, copies
        del ws
        torch.cuda.empty_cache()


def saver(path: str, res: dict, t0: float):
    """``save()``: write ``res`` to ``path`` with the seconds since ``t0``; called after each
    row, so a run cut short keeps what it measured."""
    def save():
        res["seconds"] = round(time.time() - t0, 1)
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
    return save


def beyond_bytes(us: float, nbytes: int, ceiling_gbps: float, cold: bool, per: int = 1) -> dict:
    """% of the read ceiling and the time beyond the bytes at the ceiling (per ``per`` GEMMs);
    both None when not timed ``cold`` (a warm-L2 time is no fraction of the DRAM ceiling)."""
    at_ceiling = nbytes / ceiling_gbps / 1e3
    return {"cold": cold,
            "pct_ceiling": round(100 * at_ceiling / us, 1) if cold else None,
            "beyond_bytes_us" + ("_per_gemm" if per > 1 else ""):
                round((us - at_ceiling) / per, 3) if cold else None}


def timed_gemm(make, copies: int, nbytes: int, ceiling_gbps: float, *, cold: bool) -> dict:
    """One GEMM arm over rotated weight copies (tuning's timer, 10 replays): us, and where
    ``cold`` (the copies exceed L2_FACTOR x the L2) % of the read ceiling and the time beyond
    its bytes at the ceiling (its fixed cost)."""
    t = time_cuda_graph(make, copies, replays=10)
    return {"us": round(t.median_us, 3), "copies": copies,
            **beyond_bytes(t.median_us, nbytes, ceiling_gbps, cold)}


def time_arm(call, arm, p, ws, x, out, copies: int, ceiling_gbps: float) -> dict:
    """:func:`timed_gemm` of ``call(arm, p, ws[j], x, out)`` over the rotated copies ``ws``,
    or the error, recorded."""
    cold = copies * p.n * p.k > L2_FACTOR * l2_cache_bytes()
    try:
        def make(j):
            return call(arm, p, ws[j], x, out)

        return timed_gemm(make, copies, p.bytes_moved(), ceiling_gbps, cold=cold)
    except Exception as e:  # noqa: BLE001 (a failing arm is a row, not the end of the run)
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def call_for(arm, p, w, x, out):
    """A closure running one GEMM of ``arm`` (None: the arm has no config for p)."""
    return call_with("cublaslt" if arm == "cublaslt" else ARMS[arm](p), p, w, x, out)


def call_with(cfg, p, w, x, out):
    """A closure running one GEMM: cuBLASLt for ``cfg == "cublaslt"``, else the Triton
    backend with config ``cfg`` (None: no call for p)."""
    if cfg == "cublaslt":
        be = backends.get("cublaslt")
        if be.check(p) is not None:
            return None
        packed = be.packed_for(w)
        return lambda: be.run(x, w, packed, out_dtype=torch.bfloat16)
    if cfg is None:
        return None
    packed = tg.BACKEND.packed_for(w)
    return lambda: tg._run(x, w, packed, out_dtype=torch.bfloat16, config=cfg, out=out)


def timed_chain(calls, nbytes: int, ceiling_gbps: float, *, gemms: int, cold: bool,
                runs: int = 1) -> dict:
    """One chain row: us per replay (median of ``runs`` timings) and, where ``cold``, % of the
    read ceiling and the time per GEMM beyond its bytes at the ceiling; or the error, recorded."""
    try:
        us = statistics.median(time_chain(calls) for _ in range(runs))
    except Exception as e:  # noqa: BLE001 (a failing arm is a row, not the end of the run)
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    return {"us": round(us, 2), **beyond_bytes(us, nbytes, ceiling_gbps, cold, per=gemms)}


def time_chain(calls, replays=20):
    """Median us of one replay of a graph running ``calls`` in order, captured and timed as
    the tuner times (tuning.timer.time_cuda_graph): PDL edges moved to early launch as in
    every graph fp8tower captures (graph_edges.py), replays queued, so the host's graph
    launch is not inside the events. Before session 35 this timer captured a plain graph and
    synchronized after each replay (results up to then were measured that way)."""
    def run_all():
        for c in calls:
            c()

    return time_cuda_graph(lambda _: run_all, 1, replays=replays, min_calls=1).median_us


def chain_calls(call, arm, scheme, m, shapes, sets, xs, outs, cap, between: bool) -> list:
    """The closures of one tower-like chain: every shape x its weight sets, each GEMM
    ``call(arm, ...)`` (the Triton default where the arm has no config), with a small
    elementwise kernel on x after each GEMM when ``between``."""
    calls = []
    for s in range(min(len(sets[shape]) for shape in shapes)):
        for n, k in shapes:
            p = problem(m, n, k, scheme, cap)
            c = call(arm, p, sets[(n, k)][s], xs[k], outs[(n, k)])
            if c is None:  # no config of this arm: its base
                c = call_for("base", p, sets[(n, k)][s], xs[k], outs[(n, k)])
            calls.append(c)
            if between:
                calls.append(lambda x=xs[k]: x.mul_(1.0))
    return calls


def tower_chains(scheme, ms, shapes, sets, arms, cap, ceiling, *, call=None, runs=1):
    """Rows of tower-like chains: every shape x its weight sets (``sets[(n, k)]``) in one
    graph, without and with a small elementwise kernel on x between GEMMs (launched without
    PDL, as the tower's GDN/attention stand-ins are); an arm with no config for a shape runs
    the Triton default there. ``call``: as for :func:`numerics`."""
    call = call or call_for
    n_sets = min(len(sets[shape]) for shape in shapes)
    gemms = n_sets * len(shapes)
    # cold: the chain's weights exceed L2_FACTOR x the L2 (else partly warm: so labelled)
    cold = n_sets * sum(n * k for n, k in shapes) > L2_FACTOR * l2_cache_bytes()
    for m in ms:
        xs = {k: torch.randn(m, k, device="cuda").bfloat16() for k in {k for _, k in shapes}}
        outs = {(n, k): torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for n, k in shapes}
        total_bytes = n_sets * sum(problem(m, n, k, scheme, cap).bytes_moved() for n, k in shapes)
        for between in (False, True):
            for arm in arms:
                calls = chain_calls(call, arm, scheme, m, shapes, sets, xs, outs, cap, between)
                row = {"scheme": scheme.value, "m": m, "arm": arm, "elementwise_between": between,
                       "gemms": gemms, "weight_sets": n_sets, "bytes": total_bytes}
                row.update(timed_chain(calls, total_bytes, ceiling, gemms=gemms, cold=cold,
                                       runs=runs))
                yield row


NUMERICS_SHAPES = ((1024, 5120), (5120, 6144), (10240, 5120), (34816, 5120))


def numerics(schemes, arms, cap, ms=(1, 8), *, shapes=NUMERICS_SHAPES, call=None):
    """SQNR dB of every arm against float64 on the same quantized operands, output NaN-poisoned
    first; ``call(arm, problem, weight, x, out)`` makes one arm's closure (None: the arm has no
    config for the problem; default: this module's ``call_for``)."""
    call = call or call_for
    rows = []
    for scheme in schemes:
        for n, k in shapes:
            g = torch.Generator(device="cuda").manual_seed(n + k)
            w = torch.randn(n, k, device="cuda", generator=g) * 0.02
            for m in ms:
                x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
                act = float(x.float().abs().amax()) / 448 if scheme is Scheme.PER_TENSOR else None
                wq = quantize_weight(w, scheme, act_scale=act)
                ref = fp8_linear_ref(x, wq, out_dtype=torch.float64, compute_dtype=torch.float64)
                p = problem(m, n, k, scheme, cap)
                for arm in arms:
                    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                    try:
                        c = call(arm, p, wq, x, out)
                        if c is None:
                            continue
                        y = c()
                        torch.cuda.synchronize()
                        rows.append({"scheme": scheme.value, "n": n, "k": k, "m": m, "arm": arm,
                                     "sqnr_db": round(sqnr_db(ref, y), 2)})
                    except Exception as e:  # noqa: BLE001 (record and go on)
                        rows.append({"scheme": scheme.value, "n": n, "k": k, "m": m, "arm": arm,
                                     "error": f"{type(e).__name__}: {e}"[:300]})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--plan", default="per_tensor:1,8;channel_token:1;block128:1",
                    help="scheme:Ms;... (per GEMM and tower chains)")
    ap.add_argument("--arms", default="cublaslt," + ",".join(ARMS))
    ap.add_argument("--other-arms", default="cublaslt,base,pdl_pf4,pdl_pf4_wave",
                    help="arms for schemes after the first")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_chain needs a CUDA GPU")
    t0 = time.time()
    cap = torch.cuda.get_device_capability()
    l2 = l2_cache_bytes()
    plan = parse_plan(args.plan)
    arms0, arms1 = args.arms.split(","), args.other_arms.split(",")
    res = {**provenance.record(), "per_gemm": [], "chains": [], "numerics": []}

    save = saver(args.json, res, t0)

    # Build every Triton variant in parallel first (kernels/offline.py).
    jobs = []
    for i, (scheme, ms) in enumerate(plan):
        for n, k in (tuple(map(int, s.split("x"))) for s in TOWER_SHAPES):
            for m in ms:
                p = problem(m, n, k, scheme, cap)
                for arm in (arms0 if i == 0 else arms1):
                    cfg = ARMS[arm](p) if arm in ARMS else None
                    if cfg:
                        jobs.append((p, cfg))
    rep = tg._precompile(jobs)
    print(rep.summary(), flush=True)
    res["precompile"] = rep.summary()
    ceilings = read_ceiling()
    ceiling = max(ceilings.values())
    res["read_ceiling_gbs"] = ceilings
    print(f"ceiling {ceiling:.0f} GB/s", flush=True)
    res["numerics"] = numerics([s for s, _ in plan], arms0, cap)
    bad = [r for r in res["numerics"] if "error" in r or r["sqnr_db"] < 40]
    print(f"numerics: {len(res['numerics'])} rows, {len(bad)} bad {bad[:3]}", flush=True)
    save()

    shapes = [tuple(map(int, s.split("x"))) for s in TOWER_SHAPES]
    for i, (scheme, ms) in enumerate(plan):
        arms = arms0 if i == 0 else arms1
        sets = {}
        for p, ws, x, out, copies in gemm_cases(scheme, ms, shapes, cap, l2, sets):
            for arm in arms:
                row = {"scheme": scheme.value, "n": p.n, "k": p.k, "m": p.m, "arm": arm,
                       "bytes": p.bytes_moved()}
                try:
                    if call_for(arm, p, ws[0], x, out) is None:
                        continue
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {e}"[:300]
                else:
                    row["config"] = ARMS[arm](p) if arm in ARMS else None
                    row.update(time_arm(call_for, arm, p, ws, x, out, copies, ceiling))
                res["per_gemm"].append(row)
                print(row, flush=True)
        save()
        # Tower chain: 9 shapes x 2 weight sets, each weight read once per replay.
        for row in tower_chains(scheme, ms, shapes, sets, arms, cap, ceiling):
            res["chains"].append(row)
            print(row, flush=True)
        save()
        del sets
        torch.cuda.empty_cache()
    save()
    print(f"done in {time.time() - t0:.0f} s -> {args.json}")


if __name__ == "__main__":
    main()
