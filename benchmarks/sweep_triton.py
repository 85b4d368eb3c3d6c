"""Dev sweep: Triton configs vs cuBLASLt on the tower shapes (H200), cold L2, CUDA graphs.

Writes JSON lines to $OUT/sweep.jsonl (or --out). Used to pick default configs per M bucket;
the committed comparison is benchmarks/bench_gemm.py.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from fp8tower import backends, provenance
from fp8tower.formats import FP8_DTYPE, Fp8Weight, Scheme
from fp8tower.problem import GemmProblem
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.timer import l2_cache_bytes, rotation_copies, time_cuda_graph

SHAPES = [(10240, 5120), (6144, 5120), (16384, 5120), (5120, 6144), (12288, 5120),
          (1024, 5120), (14336, 5120), (34816, 5120), (5120, 17408)]


def rotated_weights(n, k, scheme, copies, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(copies):
        data = (torch.randn(n, k, device="cuda", generator=g) * 100).clamp(-448, 448).to(FP8_DTYPE)
        if scheme is Scheme.PER_TENSOR:
            scale = torch.tensor(0.01, device="cuda")
        elif scheme is Scheme.BLOCK128:
            scale = torch.rand(-(-n // 128), -(-k // 128), device="cuda") * 0.01 + 1e-3
        else:
            scale = torch.rand(n, device="cuda") * 0.01 + 1e-3
        act = torch.tensor(0.02, device="cuda") if scheme is Scheme.PER_TENSOR else None
        out.append(Fp8Weight(data, scale, scheme, act))
    return out


def time_calls(calls, replays=20):
    """Per-call us (median, min) of every call run in turn (each on its own weight copy) under
    one CUDA graph, as the tuner times (tuning.timer.time_cuda_graph: early launch, queued
    replays, at least 32 calls). Before session 35: a plain graph, each copy once, a
    synchronize after each replay."""
    t = time_cuda_graph(lambda j: calls[j], len(calls), replays=replays)
    return t.median_us, t.min_us


def bench(be, ws, x, cfg, out_dtype=torch.bfloat16):
    packed = [be.packed_for(w) for w in ws]
    calls = [
        (lambda w=w, p=p: be.run(x, w, p, out_dtype=out_dtype, config=cfg))
        for w, p in zip(ws, packed)
    ]
    return time_calls(calls)


def triton_configs(p, quick):
    from fp8tower.kernels.configs import block_m_for, default_config

    d = default_config(p)
    out = [d]
    tiles_m = -(-p.m // block_m_for(p.m))
    pres = (False, True) if p.scheme in (Scheme.PER_TENSOR, Scheme.BLOCK128) else (False,)
    for bn in (32, 64, 128):
        for bk in ((256, 512) if bn <= 64 else (256,)):
            tiles = -(-p.n // bn) * tiles_m
            kit = -(-p.k // bk)
            base = max(1, round(264 / tiles))
            splits = sorted({max(1, min(kit, s)) for s in (base, base * 2)})
            for sp in splits:
                for st in (3, 4):
                    for nw in ((4,) if bn < 128 else (4, 8)):
                        for pre in pres:
                            c = {"block_n": bn, "block_k": bk, "split_k": sp, "num_warps": nw,
                                 "num_stages": st, "prequant": pre}
                            if c not in out:
                                out.append(c)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sweep.jsonl"))
    ap.add_argument("--ms", default="1,8,16,32")
    ap.add_argument("--schemes", default="per_tensor")
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--full", action="store_true", help="sweep Triton configs (else default only)")
    args = ap.parse_args()
    t0 = time.time()
    methods = read_ceiling()  # GB/s per read method, timed like the GEMMs
    ceil = max(methods.values())
    f = open(args.out, "a")  # noqa: SIM115 - appended to row by row, closed at the end
    f.write(json.dumps({"read_ceiling_gbs": ceil, "read_ceiling_methods": methods,
                        **provenance.record()}) + "\n")
    print(f"read ceiling {ceil:.0f} GB/s ({methods})", flush=True)
    shapes = SHAPES if args.shapes == "all" else [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    tri_be, cub = backends.get("triton"), backends.get("cublaslt")
    for scheme in [Scheme.parse(s) for s in args.schemes.split(",")]:
        for (n, k) in shapes:
            copies = rotation_copies(n * k, l2_cache_bytes())  # > 3x this GPU's L2
            ws = rotated_weights(n, k, scheme, copies)
            for m in [int(v) for v in args.ms.split(",")]:
                if time.time() - t0 > args.budget_s:
                    print("budget exhausted", flush=True)
                    return
                x = torch.randn(m, k, device="cuda").bfloat16()
                p = GemmProblem(m, n, k, scheme, capability=(9, 0))
                rows = []
                if cub.check(p) is None:
                    try:
                        med, mn = bench(cub, ws, x, None)
                        rows.append(("cublaslt", None, med, mn, None))
                    except Exception as e:  # noqa: BLE001 - a dev sweep: record and go on
                        rows.append(("cublaslt", None, None, None, repr(e)[:200]))
                cfgs = triton_configs(p, quick=True) if args.full else triton_configs(p, True)[:1]
                for cfg in cfgs:
                    try:
                        med, mn = bench(tri_be, ws, x, cfg)
                        rows.append(("triton", cfg, med, mn, None))
                    except Exception as e:  # noqa: BLE001 - the same
                        rows.append(("triton", cfg, None, None, repr(e)[:300]))
                byt = p.bytes_moved()
                for name, cfg, med, mn, err in rows:
                    f.write(json.dumps({"scheme": scheme.value, "n": n, "k": k, "m": m,
                                        "backend": name, "config": cfg, "us": med, "us_min": mn,
                                        "gbs": byt / med / 1e3 if med else None,
                                        "error": err}) + "\n")
                f.flush()
                ok = [r for r in rows if r[2] is not None]
                best_t = min((r for r in ok if r[0] == "triton"), key=lambda r: r[2], default=None)
                best_f = min((r for r in ok if r[0] == "triton" and not r[1].get("prequant")),
                             key=lambda r: r[2], default=None)
                best_p = min((r for r in ok if r[0] == "triton" and r[1].get("prequant")),
                             key=lambda r: r[2], default=None)
                cb = next((r for r in ok if r[0] == "cublaslt"), None)
                errs = [r[4] for r in rows if r[4]]
                print(f"{scheme.value:13s} {n:5d}x{k:5d} M={m:2d} "
                      f"cublaslt={cb[2] if cb else float('nan'):7.2f}us "
                      f"triton_best={best_t[2] if best_t else float('nan'):7.2f}us "
                      f"({100 * byt / best_t[2] / 1e3 / ceil if best_t else 0:4.1f}% ceil) "
                      f"fused={best_f[2] if best_f else 0:.2f} pre={best_p[2] if best_p else 0:.2f} "
                      f"{best_t[1] if best_t else ''} errs={len(errs)} {errs[:1]}", flush=True)
            del ws
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
