"""The activation pre-pass, alone and in its pair with the GEMM (issue #12), in one run:
where block128's pair loses to per_tensor's as M grows, and why channel_token's pair at
K = 17408 costs twice per_tensor's GEMM.

Sections (cold L2 for the GEMMs, CUDA graph, tuning's timer and operands):
  prepass  the pre-pass alone: block128 at groups-per-program (GPP) 1 / 4 / 8 / 16,
           channel_token; M x K
  pair     block128 pre-pass + GEMM on the 27B tower's shapes at M = 1, 8, 16, 32: arms
           GPP 1 / 4 / 8 / 16 (the default first) against per_tensor's pair and fused x
           quantization with the same tile; each arm's max |y - y_default| / max |y|

Its first run (results/b128_scales_H200_2026-12-01/call1/) also had arms with the GEMM's
block128 scales loaded in their own step, as before (B128_PIPE 0), and two dots issued
before scaling (B128_PIPE 2); the one-step-ahead loads (1) won and are now the only path.
  wo       weight_only on the same shapes and M: the split of x into two FP8 rows a token by
           the pre-pass ("prequant", with PDL: the default up to M = 64, and without)
           against the GEMM-only ways (WO_MODE 2 on per_tensor's tile, the default before,
           at M <= 16; the upcast), block128's pair as the yardstick; each arm's
           max |y - y_split_pdl| / max |y|; above M = 32 (one 128-row split tile) also
           the split on 2 stages and on BLOCK_N 128
  ct_long  channel_token 5120x17408: the pair (with and without PDL), fused amax, the
           pre-pass alone, and per_tensor's GEMM with the same tile

    PYTHONPATH=src python3 benchmarks/bench_prepass.py --json $OUT/prepass.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch

from fp8tower import backends, provenance
from fp8tower.formats import Scheme
from fp8tower.kernels import act_quant as aq
from fp8tower.kernels import configs as kc
from fp8tower.problem import GemmProblem
from fp8tower.tuning import search
from fp8tower.tuning.timer import l2_cache_bytes, rotation_copies, time_cuda_graph

PAIR_SHAPES = ("16384x5120", "5120x6144", "14336x5120", "12288x5120", "1024x5120")
PAIR_GPP = (None, 1, 4, 8, 16)  # None: act_quant.b128_groups_per_program (the default)


def _shape(s):
    n, k = (int(v) for v in s.split("x"))
    return n, k


@contextlib.contextmanager
def groups_per_program(gpp: int | None):
    """block128's pre-pass with ``gpp`` groups a program inside (None: the default rule)."""
    rule = aq.b128_groups_per_program
    if gpp is not None:
        aq.b128_groups_per_program = lambda m: gpp
    try:
        yield
    finally:
        aq.b128_groups_per_program = rule


def time_gemm(p: GemmProblem, cfg: dict, backend: str = "triton") -> float:
    """us per call, as the tuner times a candidate (cold L2 by weight rotation)."""
    be = backends.get(backend)
    dev = torch.device("cuda")
    n_copies = rotation_copies(p.weight_bytes(), l2_cache_bytes(dev))
    x, act_scale, weights = search.tuning_operands(p, dev, n_copies)
    make = search._make_call(be, cfg, x, act_scale, weights, p.out_dtype)
    return time_cuda_graph(make, n_copies).median_us


def output(p: GemmProblem, cfg: dict) -> torch.Tensor:
    """One call's y on the tuner's operands (seed 0): arms are compared on the same data."""
    be = backends.get("triton")
    x, act_scale, weights = search.tuning_operands(p, torch.device("cuda"), 1)
    w = weights[0]
    return be.run(x, w, be.packed_for(w), act_scale=act_scale, bias=None,
                  out_dtype=p.out_dtype, config=cfg).float()


def time_arms(p: GemmProblem, arms: dict, row: dict) -> None:
    """row[name]: us of each arm (name -> (config, block128 groups a pre-pass program or
    None)); row[name_diff]: max |y - y_first| / max |y_first| on the same operands."""
    ref = None
    for name, (cfg, gpp) in arms.items():
        with groups_per_program(gpp):
            row[name] = round(time_gemm(p, cfg), 2)
            y = output(p, cfg)
        ref = y if ref is None else ref
        row[f"{name}_diff"] = float((y - ref).abs().max() / ref.abs().max())


def time_prepass(scheme: Scheme, m: int, k: int, gpp: int) -> float:
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    static = torch.tensor(0.02, device="cuda") if scheme is Scheme.PER_TENSOR else None

    def make(i):
        grid, args, kw, _, _ = aq.quantize_args(xs[i], scheme, static, groups_per_program=gpp)
        return lambda: aq._fp8_act_quant_kernel[grid](*args, **kw)

    return time_cuda_graph(make, 4).median_us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--sections", default="prepass,pair,wo,ct_long")
    ap.add_argument("--m", default="1,8,16,32")
    a = ap.parse_args()
    ms = [int(v) for v in a.m.split(",")]
    sections = a.sections.split(",")
    out = {**provenance.record(), "prepass": [], "pair": [], "wo": [], "ct_long": []}
    t0 = time.time()

    def save():
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)

    if "prepass" in sections:
        for k in (5120, 6144, 17408):
            for m in ms:
                row = {"m": m, "k": k}
                for gpp in (1, 4, 8, 16):
                    row[f"block128_gpp{gpp}"] = round(time_prepass(Scheme.BLOCK128, m, k, gpp), 2)
                row["channel_token"] = round(time_prepass(Scheme.CHANNEL_TOKEN, m, k, 1), 2)
                row["per_tensor"] = round(time_prepass(Scheme.PER_TENSOR, m, k, 1), 2)
                out["prepass"].append(row)
                print("prepass", row, flush=True)
        save()
    shapes_m = [(s, *_shape(s), m) for s in PAIR_SHAPES for m in ms]
    if "pair" in sections:
        for shape, n, k, m in shapes_m:
            p = GemmProblem(m, n, k, Scheme.BLOCK128)
            cfg = {**kc.default_config(p), **kc.PDL_PAIR, "prequant": True}
            row = {"shape": shape, "m": m, "config": cfg}
            time_arms(p, {"default" if g is None else f"gpp{g}": (cfg, g) for g in PAIR_GPP}, row)
            q = GemmProblem(m, n, k, Scheme.PER_TENSOR, static_act_scale=True)
            row["per_tensor_pair"] = round(time_gemm(q, cfg), 2)
            row["per_tensor_fused"] = round(time_gemm(q, {**cfg, "prequant": False}), 2)
            out["pair"].append(row)
            print("pair", row, f"{time.time() - t0:.0f}s", flush=True)
            save()
    if "wo" in sections:
        for shape, n, k, m in shapes_m:
            p = GemmProblem(m, n, k, Scheme.WEIGHT_ONLY)
            tile = {f: v for f, v in kc.default_config(p).items()
                    if f in ("block_n", "block_k", "split_k", "num_warps", "num_stages")}
            q = GemmProblem(m, n, k, Scheme.PER_TENSOR, static_act_scale=True)
            arms = {"split_pdl": ({**tile, "prequant": True, **kc.PDL_PAIR}, None),
                    "split": ({**tile, "prequant": True}, None),
                    "upcast": ({**tile, "prequant": False}, None)}
            if m <= 16:
                arms["wo_mode2"] = ({**kc.default_config(q), "prequant": False, "wo_mode": 2}, None)
            if m > 32:  # one 128-row split tile: 2 stages (two programs an SM), BLOCK_N 128
                arms["split_pdl_s2"] = ({**tile, "num_stages": 2, "prequant": True, **kc.PDL_PAIR},
                                        None)
                arms["split_pdl_n128"] = ({**tile, "block_n": 128, "num_warps": 8, "num_stages": 3,
                                           "prequant": True, **kc.PDL_PAIR}, None)
            row = {"shape": shape, "m": m, "default_config": kc.default_config(p)}
            time_arms(p, arms, row)
            b = GemmProblem(m, n, k, Scheme.BLOCK128)
            row["block128_pair"] = round(time_gemm(b, {**kc.default_config(b), **kc.PDL_PAIR,
                                                       "prequant": True}), 2)
            out["wo"].append(row)
            print("wo", row, f"{time.time() - t0:.0f}s", flush=True)
            save()
    if "ct_long" in sections:
        for m in (1, 8):
            p = GemmProblem(m, 5120, 17408, Scheme.CHANNEL_TOKEN)
            base = {"block_k": 256, "block_n": 64, "num_stages": 4, "num_warps": 4, "split_k": 3}
            row = {"m": m, "shape": "5120x17408", "config": base}
            row["pair"] = round(time_gemm(p, {**base, "prequant": False}), 2)
            row["pair_pdl"] = round(time_gemm(p, {**base, "prequant": False, **kc.PDL_PAIR}), 2)
            row["fused_amax"] = round(time_gemm(p, {**base, "prequant": False, "fused_amax": True}), 2)
            q = GemmProblem(m, 5120, 17408, Scheme.PER_TENSOR, static_act_scale=True)
            row["per_tensor"] = round(time_gemm(q, {**base, "prequant": False}), 2)
            row["prepass_alone"] = round(time_prepass(Scheme.CHANNEL_TOKEN, m, 17408, 1), 2)
            out["ct_long"].append(row)
            print("ct_long", row, flush=True)
        save()
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
