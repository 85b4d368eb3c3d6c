"""Convert the Qwen3.5-27B-shaped transformers model to FP8, per scheme, merged; time it.

The model (text decoder, Qwen3_5ForCausalLM) is built from the embedded config with its
parameters on the meta device (no CPU-side init), then materialized once per scheme on the
GPU with random bf16 weights (empty + normal_, std 0.02), converted with
``fp8tower.convert(model, scheme, merge=True)`` (timed: target < 60 s per scheme), checked
(module counts, merge records, one forward whose FP8 linears are counted per backend), and
freed before the next scheme: the bf16 model never exists twice.

Usage (on the GPU, from the repository root):
    python benchmarks/convert_27b.py                       # all four schemes, backend auto
    python benchmarks/convert_27b.py --schemes per_tensor --tune   # allow tuning in the forward
CPU smoke test: python benchmarks/convert_27b.py --model tiny-hybrid --device cpu --backend reference
Writes benchmarks/results/convert_<model>_<gpu>_<date>.json.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import sys
import time
from pathlib import Path

SCHEMES = ("per_tensor", "channel_token", "block128", "weight_only")


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3.5-27b", help="shipped config name or config.json")
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--backend", default="auto")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tune", action="store_true",
                   help="let backend=auto tune unseen shapes in the forward (default: "
                        "FP8TOWER_TUNE=0, safe defaults, so the forward is not a tuning run)")
    p.add_argument("--layers", type=int, default=None, help="keep only the first N layers")
    p.add_argument("--out", default=None, help="JSON path (default under benchmarks/results/)")
    return p.parse_args(argv)


def _sync(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def main(argv=None) -> int:
    a = _args(argv)
    if not a.tune:
        os.environ["FP8TOWER_TUNE"] = "0"
    import torch
    import transformers

    from fp8tower import dispatch, provenance
    from fp8tower.hf.conversion import MergedProjection, MergedShard, convert
    from fp8tower.hf.random_model import random_model, text_config
    from fp8tower.nn.linear import Fp8Linear

    on_cuda = a.device.startswith("cuda")
    if on_cuda and not torch.cuda.is_available():
        print("no CUDA GPU: pass --device cpu (with --model tiny-hybrid) for a smoke run")
        return 2
    cfg = text_config(a.model, a.layers)
    result = {
        **provenance.record([sys.executable, *sys.argv],
                            gpu_name=torch.cuda.get_device_name() if on_cuda else "cpu"),
        "transformers": transformers.__version__,
        "model": a.model, "num_hidden_layers": cfg.num_hidden_layers,
        "backend": a.backend, "tune": a.tune, "target_convert_s": 60, "schemes": {},
    }

    for scheme in a.schemes.split(","):
        row = {}
        t0 = time.perf_counter()
        model = random_model(cfg, a.device)
        _sync(torch, a.device)
        row["build_s"] = round(time.perf_counter() - t0, 3)
        row["bf16_linear_bytes"] = sum(m.weight.numel() * 2 for m in model.modules()
                                       if isinstance(m, torch.nn.Linear))
        if on_cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        convert(model, scheme, merge=True, backend=a.backend)
        _sync(torch, a.device)
        row["convert_s"] = round(time.perf_counter() - t0, 3)
        row["under_target"] = row["convert_s"] < 60
        if on_cuda:
            row["peak_gib_during_convert"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)

        kinds = collections.Counter(type(m).__name__ for m in model.modules()
                                    if isinstance(m, (torch.nn.Linear, Fp8Linear,
                                                      MergedProjection, MergedShard)))
        row["modules"] = dict(kinds)
        row["left_as_nn_linear"] = [n for n, m in model.named_modules()
                                    if type(m) is torch.nn.Linear]
        recs = model.fp8tower_merges
        merged = collections.Counter(r["merged"] for r in recs if r["merged_ok"])
        row["merged_groups"] = dict(merged)
        row["not_merged"] = collections.Counter(
            f"{r['merged']}: {r['reason']}" for r in recs if not r["merged_ok"]).most_common()
        row["fp8_bytes"] = sum(m.fp8_weight().nbytes() for m in model.modules()
                               if type(m) is Fp8Linear)

        # One forward (1 token): every FP8 GEMM counted by the backend that served it.
        served = collections.Counter()
        orig = dispatch.resolve

        def counting(problem, backend="auto", _orig=orig, served=served):
            be, config = _orig(problem, backend)
            served[be.name] += 1
            return be, config

        dispatch.resolve = counting
        try:
            ids = torch.tensor([[1]], device=a.device)
            with torch.no_grad():
                _sync(torch, a.device)
                t0 = time.perf_counter()
                logits = model(ids, use_cache=False).logits
                _sync(torch, a.device)
            row["forward_s"] = round(time.perf_counter() - t0, 3)
        finally:
            dispatch.resolve = orig
        row["fp8_gemms_per_forward_by_backend"] = dict(served)
        row["fp8_modules_called"] = sum(served.values())
        row["logits_finite"] = bool(torch.isfinite(logits).all())
        result["schemes"][scheme] = row
        print(json.dumps({scheme: {k: row[k] for k in ("convert_s", "modules", "merged_groups",
                                                       "fp8_gemms_per_forward_by_backend",
                                                       "logits_finite")}}))
        del model, logits
        gc.collect()
        if on_cuda:
            torch.cuda.empty_cache()

    gpu = result["gpu"].replace(" ", "_").replace("/", "_")
    day = result["date"][:10]
    out = Path(a.out) if a.out else (Path(__file__).parent / "results" /
                                     f"convert_{a.model}_{gpu}_{day}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
