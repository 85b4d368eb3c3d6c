"""per_tensor with x quantized in the GEMM: the configs that take it, timed with the kernel of
the fp8tower on PYTHONPATH (session 32's exact x / s, div_rn, against session 31's x * (1/s),
div.full: one process each, call1.sh runs new, old, new again). CUDA graph, cold-L2 rotation
(fp8tower.tuning.timer). Usage: python3 bench_div.py TAG (writes $OUT/bench_TAG.json)."""
import json
import os
import sys

import torch

import fp8tower
from fp8tower.backends import triton_gemm
from fp8tower.formats import Scheme, quantize_weight
from fp8tower.kernels import configs as kc
from fp8tower.problem import GemmProblem
from fp8tower.tuning.timer import l2_cache_bytes, rotation_copies, time_cuda_graph

CASES = [(1, 5120, 5120), (8, 16384, 5120), (1, 16384, 5120)]


def main(tag: str) -> None:
    rows = []
    for m, n, k in CASES:
        p = GemmProblem(m, n, k, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
        cfgs = {"default": kc.default_config(p)}
        if cfgs["default"].get("prequant"):
            cfgs["default_in_gemm"] = {**cfgs["default"], "prequant": False}
        wide = kc.wide_in_gemm(p, kc.configs(p))
        if wide:
            cfgs["wide_in_gemm"] = wide[0]
        g = torch.Generator(device="cuda").manual_seed(0)
        w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02,
                            Scheme.PER_TENSOR, act_scale=0.02)
        copies = rotation_copies(n * k, l2_cache_bytes(0))
        ws = [w] + [type(w)(w.data.clone(), w.scale, w.scheme, w.act_scale, check_values=False)
                    for _ in range(copies - 1)]
        packs = [triton_gemm.BACKEND.prepare(wi) for wi in ws]
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        for role, cfg in cfgs.items():
            outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in range(2)]

            def make(i, cfg=cfg, outs=outs, x=x, ws=ws, packs=packs):
                return lambda: triton_gemm._run(x, ws[i], packs[i], config=cfg, out=outs[i % 2])

            t = time_cuda_graph(make, copies, replays=30)
            rows.append({"tag": tag, "m": m, "n": n, "k": k, "role": role, "cfg": cfg,
                         "median_us": round(t.median_us, 3), "min_us": round(t.min_us, 3),
                         "spread": round(t.spread, 4)})
            print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"bench_{tag}.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "triton": __import__("triton").__version__, "fp8tower": fp8tower.__file__,
                   "rows": rows}, f)


if __name__ == "__main__":
    main(sys.argv[1])
