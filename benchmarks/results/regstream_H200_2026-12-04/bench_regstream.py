"""Experiment (issue #12): an FP8 decode GEMM that streams W through registers, not a
shared-memory pipeline, so that it can load its first W tiles BEFORE it waits for the
previous kernel, and stays small enough for the next GEMM's programs to sit beside it.

Why: the plain-read floor (results/tile_major_H200_2026-12-01/, session 8) hides a kernel
boundary only when the bytes stream before the wait (PDL, wait at the end: 1.547 ms against
1.851 without PDL); the Triton GEMM's software pipeline issues its first W loads only after
``gdc_wait`` (its prologue), so it prefetches one W tile into L2 instead. Here, with
``num_stages=1`` (no pipeliner), each program holds its next ``PRE`` W tiles in registers,
loaded one iteration ahead; the first ``PRE`` before ``gdc_wait``.

Scope: per_tensor with the static activation scale, bf16 x quantized by the one-launch
pre-pass (launched with PDL, as ``auto``'s ``prequant`` configs), K a multiple of BLOCK_K,
N of BLOCK_N; whole tiles, no split-K. ``DOT``: the tile's MMA through ``tl.dot`` (M up
to 16), else CUDA-core FMAs (M = 1). Timed in the tuner's chain (tuning.search.Chain)
against ``auto`` (the tuned cache in FP8TOWER_CACHE_DIR) in the same run; every config's
output checked against the reference first.

    python benchmarks/results/regstream_H200_2026-12-04/bench_regstream.py \
        --shapes 5120x6144,16384x5120 --m 1,8
"""

from __future__ import annotations

import argparse
import itertools
import json
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl

from fp8tower import dispatch, provenance
from fp8tower.backends.act_quant import quantize as quantize_act
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import FP8_DTYPE, Fp8Weight, Scheme
from fp8tower.problem import GemmProblem
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.search import Chain
from fp8tower.tuning.timer import l2_cache_bytes, rotation_copies, time_cuda_graph

STATIC_ACT_SCALE = 0.05


@triton.jit
def _step(acc, w, x_ptr, stride_xm, offs_m, offs_k, M, DOT: tl.constexpr):
    q = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                mask=offs_m[:, None] < M, other=0.0)
    if DOT:
        return tl.dot(w, tl.trans(q), acc)
    qf = tl.sum(q.to(tl.float32), axis=0)  # M = 1: row 0
    return acc + tl.sum(w.to(tl.float32) * qf[None, :], axis=1)[:, None]


@triton.jit
def _regstream_kernel(w_ptr, x_ptr, y_ptr, ws_ptr, xs_ptr, M, N, K,
                      stride_wn, stride_xm, stride_ym,
                      BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                      PRE: tl.constexpr, PDL: tl.constexpr, DOT: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    wp = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
    last = K - BLOCK_K  # loads past the end re-read the last tile (from L2): no masks
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    w0 = tl.load(wp)
    if PRE == 2:
        w1 = tl.load(wp + tl.minimum(BLOCK_K, last))
    if PDL:
        tl.extra.cuda.gdc_wait()  # x, the scales and y only from here on
    s = tl.load(xs_ptr)
    w_sc = tl.load(ws_ptr + offs_n)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        w_next = tl.load(wp + tl.minimum(k0 + PRE * BLOCK_K, last))
        acc = _step(acc, w0, x_ptr, stride_xm, offs_m, k0 + offs_k, M, DOT)
        if PRE == 2:
            w0 = w1
            w1 = w_next
        else:
            w0 = w_next
    out = acc * (w_sc[:, None] * s)
    y = y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None]
    tl.store(y, out.to(y_ptr.dtype.element_ty), mask=offs_m[None, :] < M)


class RegStream:
    """Duck-typed backend for tuning.search.Chain (``packed_for`` / ``run``)."""

    name = "regstream"

    def packed_for(self, w: Fp8Weight):
        if "regstream" not in w.packed:
            w.packed["regstream"] = w.scale.float().reshape(-1).expand(w.n).contiguous()
        return w.packed["regstream"]

    def run(self, x, w, ws, *, act_scale=None, bias=None, out_dtype=torch.bfloat16, config):
        m, k = x.shape
        bn, bk = config["block_n"], config["block_k"]
        if w.n % bn or k % bk or (m > 1 and not config["dot"]):
            raise ValueError(f"regstream {config} cannot run {m}x{w.n}x{k}")
        xs = (act_scale if act_scale is not None else w.act_scale).float().reshape(1)
        x, _ = quantize_act(x, Scheme.PER_TENSOR, xs, pdl=config["pdl"])  # the pre-pass
        y = torch.empty(m, w.n, dtype=out_dtype, device=x.device)
        kw = {"launch_pdl": True} if config["pdl"] else {}
        _regstream_kernel[(w.n // bn,)](
            w.data, x, y, ws, xs, m, w.n, k, w.data.stride(0), x.stride(0), y.stride(0),
            BLOCK_N=bn, BLOCK_M=16 if config["dot"] else 1, BLOCK_K=bk, PRE=config["pre"],
            PDL=config["pdl"], DOT=config["dot"],
            num_warps=config["num_warps"], num_stages=1, **kw)
        return y


def configs(m: int) -> list[dict]:
    """Tiles of at most 128 W bytes a thread (32 registers a buffer)."""
    out = []
    for dot in ([True, False] if m == 1 else [True]):
        for (bn, bk, nw), pre in itertools.product(
                [(16, 1024, 4), (32, 512, 4), (64, 256, 4), (32, 1024, 8), (64, 512, 8),
                 (16, 2048, 8)], [1, 2]):
            if not dot and bn > 32:
                continue
            out.append({"block_n": bn, "block_k": bk, "num_warps": nw, "pre": pre,
                        "pdl": True, "dot": dot})
    out.append({**out[0], "pdl": False})  # the control: no early start
    return out


def random_weights(n, k, copies, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(copies):
        data = (torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 64)
        scale = torch.rand((), device="cuda", generator=g) * 1e-3 + 1e-4
        out.append(Fp8Weight(data.clamp(-448, 448).to(FP8_DTYPE), scale, Scheme.PER_TENSOR,
                             torch.tensor(STATIC_ACT_SCALE, device="cuda")))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="5120x6144,6144x5120,10240x5120,16384x5120")
    ap.add_argument("--m", default="1,8")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default="regstream.json")
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    ceiling = max(read_ceiling().values())
    print(f"read ceiling {ceiling:.0f} GB/s", flush=True)
    cap, l2, be = torch.cuda.get_device_capability(), l2_cache_bytes(), RegStream()
    rows = []
    for n, k in shapes:
        ws = random_weights(n, k, rotation_copies(n * k, l2))
        for m in ms:
            x = torch.randn(m, k, device="cuda").bfloat16()
            chain = Chain.build(x, None, ws, torch.bfloat16,
                                timer=partial(time_cuda_graph, replays=args.replays))
            p = GemmProblem(m, n, k, Scheme.PER_TENSOR, capability=cap, static_act_scale=True)
            ref = fp8_linear_ref(x, ws[0]).float()
            arms = [("auto", *dispatch.resolve(p, "auto"))]
            arms += [("regstream", be, c) for c in configs(m)]
            for name, b, cfg in arms:
                row = {"n": n, "k": k, "m": m, "arm": name, "config": cfg}
                try:
                    got = b.run(x, ws[0], b.packed_for(ws[0]), act_scale=None,
                                out_dtype=torch.bfloat16, config=cfg).float()
                    err = ((got - ref).abs().max() / ref.abs().max()).item()
                    t = chain.time(b, cfg)
                except Exception as e:  # noqa: BLE001 - a config past a limit: record, go on
                    rows.append({**row, "error": f"{type(e).__name__}: {e}"[:300]})
                    print(f"{n}x{k} M={m} {name} {cfg}: {rows[-1]['error']}", flush=True)
                    continue
                pct = 100 * p.bytes_moved() / t.median_us / 1e3 / ceiling
                rows.append({**row, "us": round(t.median_us, 3), "pct_ceiling": round(pct, 1),
                             "max_rel_err": err})
                print(f"{n}x{k} M={m} {name:9} {t.median_us:8.2f} us {pct:5.1f}% "
                      f"err {err:.2e} {cfg}", flush=True)
        del ws
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "read_ceiling_gbps": ceiling, **provenance.record(), "rows": rows,
    }, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
