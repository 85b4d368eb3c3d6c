"""Outputs of the Triton GEMM on the grouped path (block128, weight_only's split x) for a few
configs, saved (argv[1]) or compared with a saved set (argv[2]): the deferred group scaling
of session 21 must give the same bits as the kernel before it (the same additions in the
same order)."""
import sys

import torch

from fp8tower import backends
from fp8tower.formats import Scheme, quantize_weight
from fp8tower.kernels import configs as kc
from fp8tower.problem import GemmProblem

out = {}
be = backends.get("triton")
for scheme in (Scheme.BLOCK128, Scheme.WEIGHT_ONLY):
    for n, k in ((16384, 5120), (5120, 6144)):
        g = torch.Generator(device="cuda").manual_seed(n + k)
        w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme)
        for m in (1, 8, 32):
            x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            p = GemmProblem.for_call(x, w, torch.bfloat16)
            cfgs = [kc.default_config(p), *kc.priority_configs(p)]
            for i, cfg in enumerate(cfgs):
                y = be.run(x, w, be.packed_for(w), out_dtype=torch.bfloat16, config=cfg)
                out[f"{scheme.value}/{n}x{k}/{m}/{sorted(cfg.items())}"] = y.cpu()
if sys.argv[1] == "save":
    torch.save(out, sys.argv[2])
else:
    ref = torch.load(sys.argv[2])
    same = [key for key in out if key in ref and torch.equal(out[key], ref[key])]
    diff = [key for key in out if key in ref and not torch.equal(out[key], ref[key])]
    print(f"bits: {len(same)} equal, {len(diff)} differ, {len(set(out) ^ set(ref))} unpaired")
    for key in diff:
        print("  differs:", key)
