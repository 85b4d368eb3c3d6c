"""Two dependent decode GEMMs in one persistent Gluon kernel (issue #12's multi-GEMM question).

y_a = x @ W_a^T, then y_b = y_a @ W_b^T, per_tensor (static activation scales), M <= 16: the
27B tower's out_proj (5120x6144) and the next layer's in_proj (16384x5120). One program per
B tile (BLOCK_N rows of W_b); programs below NA / BLOCK_N also compute one A tile first. Every
program streams its W tiles through one shared-memory ring whose W copies run ahead across
the A -> B change (W depends on nothing); x tiles come by TMA on their own mbarriers: A's from
the Triton pre-pass, B's once every A tile has been stored (a grid-wide counter: each A
program stores y_a and B's FP8 x, its columns quantized with B's static scale, then adds 1
with release semantics; B steps wait for the count with acquire semantics). The last program
past the count resets the counters for the next launch. All programs must be resident at once
(the B-only ones wait for the A ones): 2 an SM at 80 KB, so at most 264 programs. With SPLIT
(config suffix s) the A tiles have programs of their own, and only those must be resident.

The arms, in one CUDA graph per arm over rotated weight copies, an x writer (a torch kernel
launched without PDL: the tower's stand-in) before each pair:
  two    `auto` for A, then `auto` for B (each with its pre-pass, as the tower runs them)
  fused  the Triton pre-pass for x, then the fused kernel
Outputs are checked against the float64 reference (y_a against x's, y_b against y_a's).

    python pair_gluon.py --m 1,8 --configs 64x256x4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gluon import MP, _gdc_launch_dependents, _gdc_wait

FP8_MAX = gl.constexpr(448.0)


@gluon.jit
def _fence_proxy_async_global():
    """Generic-proxy global writes (y_a's FP8 x) ordered with the async proxy (TMA reads)."""
    gl.inline_asm_elementwise("fence.proxy.async.global; // dummy $0", "=r", [],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _nanosleep(ns):
    """Back off between polls of the count (nanosleep: a hint, at most about ``ns``)."""
    gl.inline_asm_elementwise("nanosleep.u32 $1; mov.u32 $0, 0;", "=r,r", [ns], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _issue_w(wa_desc, wb_desc, g, n_a, total, off_n, bar, dst, BLOCK_K: gl.constexpr):
    live = g < total
    mbarrier.expect(bar, wa_desc.block_type.nbytes, pred=live)
    in_a = g < n_a
    tma.async_copy_global_to_shared(wa_desc, [off_n, g * BLOCK_K], bar, dst, pred=live & in_a)
    tma.async_copy_global_to_shared(wb_desc, [off_n, (g - n_a) * BLOCK_K], bar, dst,
                                    pred=live & (g >= n_a))


@gluon.jit
def _issue_x(xa_desc, xb_desc, g, n_a, total, bar, dst, pred, BLOCK_K: gl.constexpr):
    live = (g < total) & pred
    mbarrier.expect(bar, xa_desc.block_type.nbytes, pred=live)
    tma.async_copy_global_to_shared(xa_desc, [0, g * BLOCK_K], bar, dst, pred=live & (g < n_a))
    tma.async_copy_global_to_shared(xb_desc, [0, (g - n_a) * BLOCK_K], bar, dst,
                                    pred=live & (g >= n_a))


@gluon.jit
def _pair_kernel(wa_desc, wb_desc, xa_desc, xb_desc, ya_ptr, yb_ptr, xb_ptr, sa_ptr, xsa_ptr,
                 sb_ptr, xsb_ptr, cnt_ptr, M, NA, KA, NB, KB, TILES_A, GRID,
                 STAGES: gl.constexpr, SLEEP_NS: gl.constexpr, SPLIT: gl.constexpr,
                 num_warps: gl.constexpr):
    BLOCK_N: gl.constexpr = wa_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = wa_desc.block_type.shape[1]
    BM: gl.constexpr = xa_desc.block_type.shape[0]
    _gdc_launch_dependents()
    pid = gl.program_id(0)
    in_a = pid < TILES_A
    n_a = gl.where(in_a, gl.cdiv(KA, BLOCK_K), 0)
    if SPLIT:  # programs [0, TILES_A) an A tile each, the others a B tile each
        off_n = gl.where(in_a, pid, pid - TILES_A) * BLOCK_N
        total = gl.where(in_a, n_a, gl.cdiv(KB, BLOCK_K))
    else:  # every program a B tile, the first TILES_A an A tile before it
        off_n = pid * BLOCK_N
        total = n_a + gl.cdiv(KB, BLOCK_K)

    w_smem = gl.allocate_shared_memory(wa_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], wa_desc.layout)
    x_smem = gl.allocate_shared_memory(xa_desc.dtype, [STAGES, BM, BLOCK_K], xa_desc.layout)
    wbar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    xbar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(wbar.index(s), count=1)
        mbarrier.init(xbar.index(s), count=1)
    for s in gl.static_range(STAGES):  # W first: before any wait
        _issue_w(wa_desc, wb_desc, s, n_a, total, off_n, wbar.index(s), w_smem.index(s),
                 BLOCK_K)
    _gdc_wait()  # the previous grid (its counter reset) and the pre-pass's x
    for s in gl.static_range(STAGES):
        _issue_x(xa_desc, xb_desc, s, n_a, total, xbar.index(s), x_smem.index(s), s < n_a,
                 BLOCK_K)

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BM, 32])
    acc = gl.zeros((BLOCK_N, BM), dtype=gl.float32, layout=acc_layout)
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, acc_layout))
    offs_m = gl.arange(0, BM, layout=gl.SliceLayout(0, acc_layout))
    for g in range(total):
        slot = g % STAGES
        if g == n_a:  # B's first step: every A tile stored, B's x readable
            while gl.atomic_add(cnt_ptr, 0, sem="acquire", scope="gpu") < TILES_A:
                if SLEEP_NS > 0:
                    _nanosleep(gl.to_tensor(SLEEP_NS))
            gl.thread_barrier()
            _fence_proxy_async_global()
            for j in gl.static_range(STAGES):  # x of the B steps whose W is in the ring
                gg = g + j
                _issue_x(xa_desc, xb_desc, gg, n_a, total, xbar.index(gg % STAGES),
                         x_smem.index(gg % STAGES), gg < total, BLOCK_K)
            done = gl.atomic_add(cnt_ptr + 1, 1, sem="relaxed", scope="gpu")
            if done == GRID - 1:  # every program is past the count: reset both
                gl.atomic_xchg(cnt_ptr, 0, sem="relaxed", scope="gpu")
                gl.atomic_xchg(cnt_ptr + 1, 0, sem="relaxed", scope="gpu")
        mbarrier.wait(wbar.index(slot), (g // STAGES) & 1)
        mbarrier.wait(xbar.index(slot), (g // STAGES) & 1)
        acc = warpgroup_mma(w_smem.index(slot), x_smem.index(slot).permute((1, 0)), acc,
                            use_acc=(g != 0) & (g != n_a), is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        nxt = g + STAGES
        _issue_w(wa_desc, wb_desc, nxt, n_a, total, off_n, wbar.index(slot), w_smem.index(slot),
                 BLOCK_K)
        _issue_x(xa_desc, xb_desc, nxt, n_a, total, xbar.index(slot), x_smem.index(slot),
                 (nxt < n_a) | (g >= n_a), BLOCK_K)
        if g == n_a - 1:  # A's epilogue: y_a (bf16) and B's x (FP8), then the count
            ya = (acc * (gl.load(sa_ptr) * gl.load(xsa_ptr))).to(gl.bfloat16)
            mask = (offs_n[:, None] < NA) & (offs_m[None, :] < M)
            gl.store(ya_ptr + offs_m[None, :] * NA + offs_n[:, None], ya, mask=mask)
            q = gl.div_rn(ya.to(gl.float32), gl.load(xsb_ptr))
            q = gl.minimum(gl.maximum(q, -FP8_MAX), FP8_MAX)
            gl.store(xb_ptr + offs_m[None, :] * KB + offs_n[:, None], q.to(gl.float8e4nv),
                     mask=mask)
            _fence_proxy_async_global()
            gl.thread_barrier()
            gl.atomic_add(cnt_ptr, 1, sem="release", scope="gpu")
    if total > n_a:  # a B tile was computed
        yb = (acc * (gl.load(sb_ptr) * gl.load(xsb_ptr))).to(yb_ptr.dtype.element_ty)
        mask = (offs_n[:, None] < NB) & (offs_m[None, :] < M)
        gl.store(yb_ptr + offs_m[None, :] * NB + offs_n[:, None], yb, mask=mask)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(wbar.index(s))
        mbarrier.invalidate(xbar.index(s))


class Pair:
    """The fused kernel's launch for weights (wa, wb): the pre-pass, then the kernel."""

    def __init__(self, wa, wb, block_n: int, block_k: int, stages: int, sleep_ns: int = 0,
                 split: bool = False):
        from fp8tower.kernels import act_quant  # noqa: F401 - fail early without the package

        na, ka = wa.data.shape
        nb, kb = wb.data.shape
        if kb != na or na % block_n or nb % block_n or nb // block_n < na // block_n:
            raise ValueError(f"pair {na}x{ka} -> {nb}x{kb} with BLOCK_N {block_n}: needs "
                             "K_b == N_a, both N multiples of BLOCK_N, B's tiles >= A's")
        if not split and nb // block_n > 264:
            raise ValueError(f"{nb // block_n} programs: more than can be resident at once")
        self.wa, self.wb, self.bn, self.bk, self.stages = wa, wb, block_n, block_k, stages
        self.sleep_ns, self.split = sleep_ns, split
        lay = gl.NVMMASharedLayout.get_default_for([block_n, block_k], gl.float8e4nv)
        self.wa_desc = TensorDescriptor.from_tensor(wa.data, [block_n, block_k], lay)
        self.wb_desc = TensorDescriptor.from_tensor(wb.data, [block_n, block_k], lay)
        self.xlay = gl.NVMMASharedLayout.get_default_for([MP, block_k], gl.float8e4nv)
        dev = wa.data.device
        self.xb = torch.empty(MP, kb, dtype=torch.float8_e4m3fn, device=dev)
        self.xb_desc = TensorDescriptor.from_tensor(self.xb, [MP, block_k], self.xlay)
        self.cnt = torch.zeros(2, dtype=torch.int32, device=dev)

    def __call__(self, x):
        from fp8tower.formats import Scheme
        from fp8tower.kernels import act_quant

        m, ka = x.shape
        na, nb = self.wa.data.shape[0], self.wb.data.shape[0]
        q_buf = torch.empty(MP, ka, dtype=torch.float8_e4m3fn, device=x.device)
        grid, qargs, qkw, _, xs = act_quant.quantize_args(
            x.contiguous(), Scheme.PER_TENSOR, self.wa.act_scale, q=q_buf[:m], pdl=True)
        act_quant._fp8_act_quant_kernel[grid](*qargs, **qkw)
        xa_desc = TensorDescriptor.from_tensor(q_buf, [MP, self.bk], self.xlay)
        ya = torch.empty(m, na, dtype=torch.bfloat16, device=x.device)
        yb = torch.empty(m, nb, dtype=torch.bfloat16, device=x.device)
        programs = nb // self.bn + (na // self.bn if self.split else 0)
        _pair_kernel[(programs,)](
            self.wa_desc, self.wb_desc, xa_desc, self.xb_desc, ya, yb, self.xb, self.wa.scale,
            xs, self.wb.scale, self.wb.act_scale, self.cnt, m, na, ka, nb, self.wb.data.shape[1],
            na // self.bn, nb // self.bn, STAGES=self.stages, SLEEP_NS=self.sleep_ns,
            SPLIT=self.split, num_warps=4, launch_pdl=True)
        return ya, yb


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", default="5120x6144", help="NxK of the first GEMM")
    ap.add_argument("--b", default="16384x5120", help="NxK of the second (K = the first's N)")
    ap.add_argument("--m", default="1,8")
    ap.add_argument("--configs", default="64x256x4",
                    help="BLOCK_NxBLOCK_KxSTAGES list, each with an optional @NS: nanoseconds "
                    "of back-off between polls of the count, and a suffix s: A tiles on their "
                    "own programs (else each A program also takes a B tile)")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("pair_gluon needs a CUDA GPU")
    from fp8tower import dispatch
    from fp8tower.backends.reference import fp8_linear_ref
    from fp8tower.formats import Scheme
    from fp8tower.problem import GemmProblem
    from fp8tower.tuning.ceiling import read_ceiling
    from fp8tower.tuning.timer import l2_cache_bytes, rotation_copies, time_cuda_graph

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
    from bench_gemm import random_weights

    ceiling = max(read_ceiling().values())
    print(f"read ceiling {ceiling:.0f} GB/s", flush=True)
    cap = torch.cuda.get_device_capability()
    (na, ka), (nb, kb) = ((int(v) for v in s.split("x")) for s in (args.a, args.b))
    copies = rotation_copies(na * ka + nb * kb, l2_cache_bytes())
    was = random_weights(na, ka, Scheme.PER_TENSOR, copies, seed=1)
    wbs = random_weights(nb, kb, Scheme.PER_TENSOR, copies, seed=2)
    rows, t0 = [], time.time()
    for m in (int(v) for v in args.m.split(",")):
        x = torch.randn(m, ka, device="cuda").bfloat16()
        src = x.clone()
        pa = GemmProblem(m, na, ka, Scheme.PER_TENSOR, capability=cap, static_act_scale=True)
        pb = GemmProblem(m, nb, kb, Scheme.PER_TENSOR, capability=cap, static_act_scale=True)
        (bea, cfa), (beb, cfb) = dispatch.resolve(pa, "auto"), dispatch.resolve(pb, "auto")

        def two(i, bea=bea, beb=beb, cfa=cfa, cfb=cfb, x=x, src=src):
            wa, wb = was[i], wbs[i]
            pka, pkb = bea.packed_for(wa), beb.packed_for(wb)

            def call():
                torch.mul(src, 1.0, out=x)  # the stand-in before the pair
                ya = bea.run(x, wa, pka, act_scale=None, bias=None, out_dtype=torch.bfloat16,
                             config=cfa)
                return ya, beb.run(ya, wb, pkb, act_scale=None, bias=None,
                                   out_dtype=torch.bfloat16, config=cfb)
            return call

        arms = {"two": two}
        pairs = {}
        for c in args.configs.split(","):
            split = c.endswith("s")
            tile, _, ns = c.rstrip("s").partition("@")
            bn, bk, st = (int(v) for v in tile.split("x"))
            pairs[c] = [Pair(was[i], wbs[i], bn, bk, st, int(ns or 0), split)
                        for i in range(copies)]

            def fused(i, c=c, x=x, src=src, pairs=pairs):
                p = pairs[c][i]

                def call():
                    torch.mul(src, 1.0, out=x)
                    return p(x)
                return call

            arms[f"fused:{c}"] = fused
        ref_a = fp8_linear_ref(x, was[0]).float()
        for name, make in arms.items():  # outputs first
            ya, yb = make(0)()
            torch.cuda.synchronize()
            ref_b = fp8_linear_ref(ya, wbs[0]).float()
            ea = ((ya.float() - ref_a).abs().max() / ref_a.abs().max()).item()
            eb = ((yb.float() - ref_b).abs().max() / ref_b.abs().max()).item()
            print(f"M={m} {name}: max rel err y_a {ea:.3g}, y_b {eb:.3g}", flush=True)
            rows.append({"m": m, "arm": name, "err_a": ea, "err_b": eb})
        for rnd in range(args.rounds):
            for name, make in arms.items():
                t = time_cuda_graph(make, copies, replays=args.replays)
                rows.append({"m": m, "arm": name, "round": rnd, "us": round(t.median_us, 3),
                             "spread": round(t.spread, 4)})
                print(f"M={m} r{rnd} {name:>16} {t.median_us:8.2f} us a pair (+ stand-in)",
                      flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"ceiling_gbps": ceiling, "a": args.a, "b": args.b,
                                           "auto_a": str(cfa), "auto_b": str(cfb),
                                           "rows": rows, "argv": argv or sys.argv[1:],
                                           "seconds": round(time.time() - t0)}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
