"""Kernel variants against today's Triton default, in one run (issue #12): which knob
becomes a default where. Nothing here is in the default or the tuner's space until this
has been measured.

Arms (config transforms of ``kernels/configs.default_config``; None: not for that problem):
  weight_only  base (W upcast fp8 -> f16 -> bf16, bf16 MMA), wo_f16 (WO_MODE 1: fp16 MMA,
               x scaled per token and K step by a power of two), wo_split8 (WO_MODE 2: x as
               two FP8 parts, two FP8 MMAs, W straight from shared memory), wo_split8_pt
               (WO_MODE 2 on per_tensor's default tile, one-wave variant included)
  per_tensor   cublaslt, base, wave_any (the fullest one-wave config of the tuner's space,
               by the shared-memory estimate: for grids over one wave, 34816x5120), s3 / s4
               (the other stage count), prequant_flip (pre-pass vs fused x quantization),
               and for N*K < 10 MB (1024x5120): sk_bn32 / sk_bk128 / sk_bn32_bk128 (more
               programs through BLOCK_N 32, BLOCK_K 128, more split-K) and sk_bk128_pdl
Measured, cold L2, CUDA graph (tuning's timer):
  - numerics: every arm vs float64 on the same quantized operands, output NaN-poisoned,
    x with one token scaled by 1e5 (outside fp16's range: the WO_MODE 1 scaling);
  - per GEMM: us, % of the read ceiling, us beyond bytes, ratio to base and to cuBLASLt;
  - tower chain (9 shapes x 2 weight sets in one graph, with and without an elementwise
    kernel between GEMMs): base, each weight_only mode, and per_tensor "best_measured" (per
    shape and M, the fastest Triton arm of this run: what the tower gains if defaults follow).

    PYTHONPATH=src python3 benchmarks/bench_variants.py --json $OUT/variants.json
    PYTHONPATH=src python3 benchmarks/bench_variants.py --dry-run   # CPU: arms + sm_90 builds
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from fp8tower import provenance
from fp8tower.formats import Scheme
from fp8tower.kernels import configs as kc
from fp8tower.problem import GemmProblem

SHAPES = ("10240x5120", "6144x5120", "16384x5120", "5120x6144", "12288x5120", "1024x5120",
          "14336x5120", "34816x5120", "5120x17408")  # bench_gemm.TOWER_SHAPES' order


def _with(cfg, **kw):
    return None if cfg is None else {**cfg, **kw}


def _wave_any(p):
    """The fullest one-wave config of the tuner's space (shared-memory estimate), for grids
    of the default over one wave; None where the default already fits one wave."""
    base = kc.default_config(p)
    if kc.waves(base, p) <= 1.0:
        return None
    fits = [c for c in kc.configs(p)
            if kc.waves(c, p) <= 1.0 and c["prequant"] == base["prequant"]]
    if not fits:
        return None
    return max(fits, key=lambda c: (kc.wave_fill(c, p), c["block_k"], -c["split_k"]))


def _small(p, block_n, block_k, split_k):
    if p.n * p.k >= 10_000_000:
        return None
    return {**kc.default_config(p), "block_n": block_n, "block_k": block_k, "split_k": split_k}


def _flip_prequant(p):
    """The default with x quantized the other way (a pre-pass comes with kc.PDL_PAIR)."""
    base = kc.default_config(p)
    flipped = {k: v for k, v in base.items() if k not in kc.PDL_PAIR}
    flipped["prequant"] = not base["prequant"]
    return kc.with_pdl_pair(p, flipped)


def _wo_split8(p):
    base = kc.default_config(p)
    # WO_MODE 2 keeps fp8 copies of x in shared memory too: at BLOCK_M >= 32, 4 stages
    # compile to 124 KB, one program per SM (kernels/offline.py, 10240x5120 M=32).
    return {**base, "wo_mode": 2, "num_stages": 3 if kc.block_m_for(p.m) >= 32 else base["num_stages"]}


def _wo_split8_pt(p):
    q = GemmProblem(p.m, p.n, p.k, Scheme.PER_TENSOR, capability=p.capability,
                    static_act_scale=True)
    cfg = {**kc.default_config(q), "prequant": False, "wo_mode": 2}
    return None if cfg == _wo_split8(p) else cfg


_PDL_PAIR_ARMS = {
    "pdl": lambda p: _with(kc.default_config(p), pdl=True),
    "pdl_pf2": lambda p: _with(kc.default_config(p), pdl=True, prefetch=2),
    "pdl_pf4": lambda p: _with(kc.default_config(p), pdl=True, prefetch=4),
}

ARMS = {
    Scheme.WEIGHT_ONLY: {
        "base": kc.default_config,
        "wo_f16": lambda p: _with(kc.default_config(p), wo_mode=1),
        "wo_split8": _wo_split8,
        "wo_split8_pt": _wo_split8_pt,
    },
    Scheme.PER_TENSOR: {
        "cublaslt": None,
        "base": kc.default_config,
        "wave_any": _wave_any,
        "s3": lambda p: (None if kc.default_config(p)["num_stages"] == 3
                         else _with(kc.default_config(p), num_stages=3)),
        "s4": lambda p: (None if kc.default_config(p)["num_stages"] == 4
                         or kc.smem_bytes({**kc.default_config(p), "num_stages": 4},
                                          kc.block_m_for(p.m)) > 200_000
                         else _with(kc.default_config(p), num_stages=4)),
        "prequant_flip": lambda p: _flip_prequant(p),
        "sk_bn32": lambda p: _small(p, 32, 256, 10),
        "sk_bk128": lambda p: _small(p, 64, 128, 20),
        "sk_bn32_bk128": lambda p: _small(p, 32, 128, 20),
        "sk_bk128_pdl": lambda p: _with(_small(p, 64, 128, 20), pdl=True, prefetch=2),
    },
    # One launch instead of two (issue #11: the eager host pays per launch; #12: a kernel
    # boundary fewer): the GEMM quantizes x itself, channel_token after its own amax.
    Scheme.CHANNEL_TOKEN: {
        "cublaslt": None,
        "base": kc.default_config,
        "fused": lambda p: _with(kc.default_config(p), prequant=False, fused_amax=True),
        # (2026-12-01: fused + an L2 prefetch of W before the amax loop, 4 or 8 tiles, was
        # slower still: results/variants_q_fused_prefetch_H200_2026-12-01.json)
        # The pre-pass and the GEMM both launched with PDL: the pre-pass triggers at once,
        # the GEMM asks L2 for its first W tiles, then waits for the pre-pass's q
        **_PDL_PAIR_ARMS,
    },
    Scheme.BLOCK128: {
        "cublaslt": None,
        "base": kc.default_config,
        "fused": lambda p: _with(kc.default_config(p), prequant=False),
        **_PDL_PAIR_ARMS,
    },
}
PLAN = {Scheme.WEIGHT_ONLY: (1, 16), Scheme.PER_TENSOR: (1, 16, 32)}


def parse_plan(text: str) -> dict:
    """"channel_token:1,8,32;block128:1" -> {Scheme: (1, 8, 32), ...}"""
    plan = {}
    for part in filter(None, (t.strip() for t in text.split(";"))):
        name, _, ms = part.partition(":")
        scheme = Scheme.parse(name)
        if scheme not in ARMS:
            raise SystemExit(f"--plan: no arms for {name!r}; schemes: "
                             + ", ".join(s.value for s in ARMS))
        try:
            plan[scheme] = tuple(int(m) for m in ms.split(","))
        except ValueError:
            raise SystemExit(f"--plan: {part!r} is not SCHEME:M,M,...") from None
    return plan


def problem(m, n, k, scheme, cap):
    return GemmProblem(m, n, k, scheme, capability=cap,
                       static_act_scale=scheme is Scheme.PER_TENSOR)


def config_of(scheme, arm, p):
    fn = ARMS[scheme][arm]
    return None if fn is None else fn(p)


def jobs_for(cap, plan=PLAN):
    """[(problem, config)] of every Triton arm in the plan, deduplicated."""
    jobs, seen = [], set()
    for scheme, ms in plan.items():
        for s in SHAPES:
            n, k = map(int, s.split("x"))
            for m in ms:
                p = problem(m, n, k, scheme, cap)
                for arm in ARMS[scheme]:
                    cfg = config_of(scheme, arm, p)
                    key = (scheme, n, k, kc.block_m_for(m), json.dumps(cfg, sort_keys=True))
                    if cfg is not None and key not in seen:
                        seen.add(key)
                        jobs.append((p, cfg))
    return jobs


def dry_run():
    """CPU: list every arm's config and compile it for sm_90 (kernels/offline.py): shared
    memory, registers, spills, programs per SM, waves, and the dot each build uses."""
    import dataclasses

    from fp8tower.kernels import offline

    jobs = jobs_for((9, 0))
    print(f"{len(jobs)} Triton variants", flush=True)
    t = time.time()
    out = []
    for p, cfg in jobs:
        f = offline.compile_gemm(p, cfg)
        mma = sorted(op.rsplit(".", 3)[-3] + "." + op.rsplit(".", 1)[-1]
                     for op in f.ptx_ops if op.startswith("wgmma"))
        row = {**dataclasses.asdict(f), "waves": f.waves, "mma": mma}
        out.append(row)
        print(f"{p.scheme.value:12s} M={p.m:<3d} {p.n}x{p.k} {json.dumps(cfg)} smem={f.shared_bytes} "
              f"regs={f.registers} spill={f.spill_bytes} pps={f.programs_per_sm} "
              f"waves={f.waves:.2f} {mma}", flush=True)
    print(f"built in {time.time() - t:.0f} s")
    return out


def _x_for(m, k, g, wide):
    x = torch.randn(m, k, device="cuda", generator=g)
    if wide and m > 1:
        x[-1] *= 1e5  # outside fp16's range: WO_MODE 1 must scale it
    return x.bfloat16()


def numerics(cap, shapes=((1024, 5120), (10240, 5120), (34816, 5120)), ms=(1, 16, 32),
             plan=PLAN):
    from fp8tower import backends
    from fp8tower.backends import triton_gemm as tg
    from fp8tower.backends.reference import fp8_linear_ref
    from fp8tower.formats import quantize_weight, sqnr_db

    rows = []
    for scheme in plan:
        arms = ARMS[scheme]
        for n, k in shapes:
            g = torch.Generator(device="cuda").manual_seed(n + k)
            w = torch.randn(n, k, device="cuda", generator=g) * 0.02
            for m in ms:
                x = _x_for(m, k, g, wide=scheme is Scheme.WEIGHT_ONLY)
                act = float(x.float().abs().amax()) / 448 if scheme is Scheme.PER_TENSOR else None
                wq = quantize_weight(w, scheme, act_scale=act)
                ref = fp8_linear_ref(x, wq, out_dtype=torch.float64, compute_dtype=torch.float64)
                p = problem(m, n, k, scheme, cap)
                for arm in arms:
                    row = {"scheme": scheme.value, "n": n, "k": k, "m": m, "arm": arm}
                    try:
                        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                        if arm == "cublaslt":
                            be = backends.get("cublaslt")
                            if be.check(p) is not None:
                                continue
                            y = be.run(x, wq, be.packed_for(wq), out_dtype=torch.bfloat16)
                        else:
                            cfg = config_of(scheme, arm, p)
                            if cfg is None:
                                continue
                            y = tg._run(x, wq, tg.BACKEND.packed_for(wq), out_dtype=torch.bfloat16,
                                        config=cfg, out=out)
                        torch.cuda.synchronize()
                        per_row = [sqnr_db(ref[r], y[r]) for r in range(m)]
                        row.update(sqnr_db=round(sqnr_db(ref, y), 2),
                                   min_row_sqnr_db=round(min(per_row), 2),
                                   finite=bool(torch.isfinite(y).all()))
                    except Exception as e:  # noqa: BLE001 (record and go on)
                        row["error"] = f"{type(e).__name__}: {e}"[:300]
                    rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="output path (required unless --dry-run)")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: print each arm's config and its sm_90 build facts")
    ap.add_argument("--budget-s", type=float, default=80.0,
                    help="stop timing (and save) once this much wall time has passed")
    ap.add_argument("--plan", default=None,
                    help="schemes and M values, e.g. 'channel_token:1,8,32;block128:1' "
                         "(default: weight_only:1,16;per_tensor:1,16,32)")
    args = ap.parse_args(argv)
    plan = parse_plan(args.plan) if args.plan else PLAN
    if args.dry_run:
        rows = dry_run()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    if not args.json:
        ap.error("--json is required (or --dry-run)")
    if not torch.cuda.is_available():
        sys.exit("bench_variants needs a CUDA GPU (or --dry-run)")
    t0 = time.time()

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_chain import call_with, saver, timed_chain, timed_gemm
    from bench_gemm import random_weights

    from fp8tower.backends import triton_gemm as tg
    from fp8tower.tuning.ceiling import read_ceiling
    from fp8tower.tuning.timer import L2_FACTOR, l2_cache_bytes, rotation_copies

    cap = torch.cuda.get_device_capability()
    l2 = l2_cache_bytes()
    res = {**provenance.record(),
           "plan": {s.value: ms for s, ms in plan.items()}, "per_gemm": [], "chains": [],
           "numerics": [], "skipped": []}

    save = saver(args.json, res, t0)

    def over_budget(what):
        if time.time() - t0 > args.budget_s:
            res["skipped"].append(what)
            return True
        return False

    rep = tg._precompile(jobs_for(cap, plan))
    res["precompile"] = rep.summary()
    print(rep.summary(), flush=True)
    ceilings = read_ceiling()
    ceiling = max(ceilings.values())
    res["read_ceiling_gbs"] = ceilings
    res["numerics"] = numerics(cap, plan=plan)
    bad = [r for r in res["numerics"]
           if "error" in r or not r["finite"] or r["min_row_sqnr_db"] < 40]
    res["numerics_bad"] = bad
    print(f"ceiling {ceiling:.0f} GB/s; numerics {len(res['numerics'])} rows, {len(bad)} bad "
          f"{bad[:3]} ({time.time() - t0:.0f} s)", flush=True)
    save()

    def make(scheme, arm, p, w, x, out):
        cfg = "cublaslt" if arm == "cublaslt" else config_of(scheme, arm, p)
        return call_with(cfg, p, w, x, out)

    sets, best = {}, {}  # best[(scheme, m, n, k)] = fastest Triton arm
    for scheme, ms in plan.items():
        for s in SHAPES:
            n, k = map(int, s.split("x"))
            if over_budget(f"per_gemm {scheme.value} {s}"):
                continue
            copies = rotation_copies(n * k, l2)
            ws = random_weights(n, k, scheme, copies, seed=n + k)
            sets[(scheme, n, k)] = ws[:2]
            for m in ms:
                x = torch.randn(m, k, device="cuda").bfloat16()
                out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
                p = problem(m, n, k, scheme, cap)
                times = {}
                for arm in ARMS[scheme]:
                    row = {"scheme": scheme.value, "n": n, "k": k, "m": m, "arm": arm,
                           "bytes": p.bytes_moved(), "config": config_of(scheme, arm, p)
                           if arm != "cublaslt" else None}
                    try:
                        if make(scheme, arm, p, ws[0], x, out) is None:
                            continue
                        def mk(j, a=arm, sc=scheme, p=p, ws=ws, x=x, out=out):
                            return make(sc, a, p, ws[j], x, out)

                        row.update(timed_gemm(mk, copies, p.bytes_moved(), ceiling,
                                              cold=copies * n * k > L2_FACTOR * l2))
                        times[arm] = row["us"]
                    except Exception as e:  # noqa: BLE001
                        row["error"] = f"{type(e).__name__}: {e}"[:300]
                    res["per_gemm"].append(row)
                for row in res["per_gemm"][-len(ARMS[scheme]):]:
                    if row.get("us") and row["scheme"] == scheme.value and row["m"] == m \
                            and row["n"] == n:
                        if "base" in times:
                            row["base_over_arm"] = round(times["base"] / row["us"], 3)
                        if "cublaslt" in times:
                            row["cublaslt_over_arm"] = round(times["cublaslt"] / row["us"], 3)
                triton_arms = {a: v for a, v in times.items() if a != "cublaslt"}
                if triton_arms:
                    best[(scheme, m, n, k)] = min(triton_arms, key=triton_arms.get)
                print(scheme.value, m, s, {a: round(v, 2) for a, v in times.items()}, flush=True)
            del ws
            torch.cuda.empty_cache()
        save()

    # Tower chains at M = 1: every weight read once per replay (2 sets x the shapes).
    shapes = [tuple(map(int, s.split("x"))) for s in SHAPES]
    gemms = 2 * len(shapes)  # GEMMs a replay runs: each shape of each weight set once
    chain_arms = {Scheme.WEIGHT_ONLY: ("base", "wo_f16", "wo_split8", "wo_split8_pt"),
                  Scheme.PER_TENSOR: ("cublaslt", "base", "best_measured"),
                  Scheme.CHANNEL_TOKEN: ("cublaslt", "base", "pdl", "pdl_pf2", "best_measured"),
                  Scheme.BLOCK128: ("cublaslt", "base", "pdl", "pdl_pf2", "best_measured")}
    chain_arms = {s: a for s, a in chain_arms.items() if s in plan}
    m = 1
    for scheme, arms in chain_arms.items():
        if not all((scheme, n, k) in sets for n, k in shapes):
            res["skipped"].append(f"chains {scheme.value}: per-GEMM weights missing")
            continue
        xs = {k: torch.randn(m, k, device="cuda").bfloat16() for k in {k for _, k in shapes}}
        outs = {(n, k): torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for n, k in shapes}
        total = 2 * sum(problem(m, n, k, scheme, cap).bytes_moved() for n, k in shapes)
        for between in (False, True):
            for arm in arms:
                if over_budget(f"chain {scheme.value} {arm} between={between}"):
                    continue
                calls, chosen = [], {}
                for si in range(2):
                    for n, k in shapes:
                        p = problem(m, n, k, scheme, cap)
                        a = best.get((scheme, m, n, k), "base") if arm == "best_measured" else arm
                        chosen[f"{n}x{k}"] = a
                        w = sets[(scheme, n, k)][si]
                        c = make(scheme, a, p, w, xs[k], outs[(n, k)]) or \
                            make(scheme, "base", p, w, xs[k], outs[(n, k)])
                        calls.append(c)
                        if between:
                            calls.append(lambda x=xs[k]: x.mul_(1.0))
                row = {"scheme": scheme.value, "m": m, "arm": arm, "elementwise_between": between,
                       "gemms": gemms, "bytes": total}
                if arm == "best_measured":
                    row["chosen"] = chosen
                row.update(timed_chain(calls, total, ceiling, gemms=gemms, runs=2,
                                       cold=2 * sum(n * k for n, k in shapes) > L2_FACTOR * l2))
                res["chains"].append(row)
                print({k: v for k, v in row.items() if k != "chosen"}, flush=True)
        save()
    save()
    print(f"done in {time.time() - t0:.0f} s -> {args.json}")


if __name__ == "__main__":
    main()
