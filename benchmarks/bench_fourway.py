"""Four-way FP8 GEMM A/B on a GPU: cuBLASLt, cuDNN, CUTLASS, Triton, and `auto`, each at its
best config, on the Qwen3.5-27B tower shapes (issue 13).

Method (as bench_gemm.py): ttimer.time_cuda_graph (one CUDA graph over rotated weight copies
> 3x L2, median of replays), read ceiling measured in the same run, bf16 activations in with
the activation quantization inside every arm's time.
1. Each arm (backend) is tuned alone: tsearch.tune_problem(problem, [backend]) times its
   default and at most --max-configs of its other configs (backends with a precompile hook
   build those first, in parallel).
2. `auto` is a Dispatcher over every registered backend, tuned as the product tunes
   (pretune with the same --max-configs; M = 8, 16 seeded from M = 1), or read from the
   tuning cache (--cache-dir) when it already holds the key.
3. Final pass: every arm's winner and auto's choice are timed again back to back on the same
   operands; those times make the table (the tuning minima are kept as us_tuning).
Arms that are not registered, unavailable, or cannot serve a problem are recorded with the
reason. JSON under benchmarks/results/ is rewritten after each shape (--resume skips done
ones).

    python benchmarks/bench_fourway.py                      # 9 shapes x M 1,8,16,32 x 2 schemes
    python benchmarks/bench_fourway.py --shapes 1024x5120 --m 1 --schemes per_tensor
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from fp8tower import backends, provenance
from fp8tower.backends import BackendError
from fp8tower.dispatch import Dispatcher
from fp8tower.formats import Scheme
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import ceiling as tceiling
from fp8tower.tuning import search as tsearch
from fp8tower.tuning import timer as ttimer
from fp8tower.tuning import tuner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import l2_rotation, pct_cell, timing_fields

TOWER_SHAPES = {
    "10240x5120": "GDN in_proj_qkv", "6144x5120": "GDN in_proj_z",
    "16384x5120": "GDN in_proj_qkvz (merged)", "5120x6144": "GDN out_proj / attn o_proj",
    "12288x5120": "attn q_proj (+gate)", "1024x5120": "attn k_proj / v_proj",
    "14336x5120": "attn qkv (merged)", "34816x5120": "MLP gate_up (merged)",
    "5120x17408": "MLP down_proj",
}
ARMS = ("cublaslt", "cudnn", "cutlass", "triton")
# `auto` may be this much slower than the best single arm (issue 13's bar).
AUTO_TOLERANCE = 0.02


def arm_status(names):
    """name -> Backend, or name -> reason it cannot run here at all."""
    out = {}
    for name in names:
        try:
            be = backends.get(name)
        except BackendError as e:
            out[name] = f"not registered: {e}"
            continue
        out[name] = be.unavailable_reason() or be
    return out


def precompile(arms, problems, max_configs, console):
    for be in arms:
        if be.precompile is None:
            continue
        jobs = [(dataclasses.replace(p, m=p.bucket), c) for p in problems
                if be.check(p) is None for c in tsearch.planned_configs(p, be, max_configs)]
        if jobs:
            t = time.time()
            report = be.precompile(jobs)
            console.print(f"{be.name} precompile: {report.summary()} ({time.time() - t:.0f} s)")


def retime(p, choices, timer):
    """Time each (label, backend, config) on the same rotated operands, in the chain the tuner
    timed them in (tuning.search.Chain: an x writer before every other call, its share taken
    off; before session 35 they were timed back to back, a chain the tuner never timed);
    keys ``_rotation``: (copies, cold) of that rotation (_common.l2_rotation), ``_writer_us``:
    the writer's share."""
    dev = torch.device("cuda", torch.cuda.current_device()) if p.on_cuda else torch.device("cpu")
    copies, cold = l2_rotation(p.weight_bytes(), ttimer.l2_cache_bytes(dev) if p.on_cuda else 0)
    x, act_scale, weights = tsearch.tuning_operands(p, dev, copies)
    chain = tsearch.Chain.build(x, act_scale, weights, p.out_dtype, timer=timer)
    out = {"_rotation": (copies, cold), "_writer_us": chain.base_us}
    for label, be, cfg in choices:
        try:
            out[label] = chain.time(be, cfg)
        except tsearch.gpu_errors() as e:
            out[label] = f"{type(e).__name__}: {e}"[:300]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(TOWER_SHAPES))
    ap.add_argument("--m", default="1,8,16,32")
    ap.add_argument("--schemes", default="per_tensor,channel_token")
    ap.add_argument("--arms", default=",".join(ARMS) + ",auto")
    ap.add_argument("--max-configs", type=int, default=4,
                    help="non-default configs tuned per backend (default 4)")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--cache-dir", default=None, help="auto's tuning cache (default: the usual)")
    ap.add_argument("--json", default=None, help="output path (default benchmarks/results/...)")
    ap.add_argument("--resume", action="store_true", help="keep the rows of --json, skip them")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_fourway needs a CUDA GPU")
    console = Console()
    schemes = [Scheme.parse(s) for s in args.schemes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    names = [a for a in args.arms.split(",") if a != "auto"]
    with_auto = "auto" in args.arms.split(",")
    status = arm_status(names)
    arms = [b for b in status.values() if not isinstance(b, str)]
    unavailable = {n: r for n, r in status.items() if isinstance(r, str)}
    for n, r in unavailable.items():
        console.print(f"[yellow]arm {n} unavailable: {r}[/yellow]")

    cap = torch.cuda.get_device_capability()
    gpu = torch.cuda.get_device_name()
    date = provenance.now_iso()
    if args.resume and not args.json:
        sys.exit("--resume needs --json: the file of the run to resume")
    # a second run of one day gets its own file (provenance.result_path), never the first's
    path = Path(args.json) if args.json else provenance.result_path(
        "benchmarks/results", f"fourway_{gpu.replace(' ', '-')}", date)
    rows = []
    if args.resume and path.exists():
        old = json.loads(path.read_text())
        rows = resumable_rows(old, args, path)
        console.print(f"resuming: {len(rows)} rows from {path}")
    done = {(r["scheme"], r["n"], r["k"], r["m"]) for r in rows}

    t0 = time.time()
    ceilings = tceiling.read_ceiling()
    ceiling = max(ceilings.values())
    console.print(f"read ceiling {ceiling:.0f} GB/s (decimal) {ceilings}")
    timer = functools.partial(ttimer.time_cuda_graph, replays=args.replays)
    problems = [GemmProblem(m, n, k, s, capability=cap, static_act_scale=s is Scheme.PER_TENSOR)
                for s in schemes for n, k in shapes for m in ms]
    todo = [p for p in problems if (p.scheme.value, p.n, p.k, p.m) not in done]
    precompile(arms, todo, args.max_configs, console)
    auto = Dispatcher(cache_dir=args.cache_dir, timer=timer) if with_auto else None

    def result():
        return {
            "benchmark": "bench_fourway",
            **provenance.record(["python", "benchmarks/bench_fourway.py",
                                 *(sys.argv[1:] if argv is None else argv)], gpu_name=gpu),
            "date": date,  # the run's start (also in the file name)
            "capability": list(cap), **_cudnn_versions(),
            "read_ceiling_gbs": round(ceiling, 1), "read_ceiling_methods": ceilings,
            "max_configs": args.max_configs, "replays": args.replays,
            "auto_tolerance": AUTO_TOLERANCE, "unavailable_arms": unavailable,
            "chain": "model",  # the tuner's chain (x writer before every other call)
            "units": {"us": "microseconds, median of replays (final side-by-side pass), the "
                            "x writer's share (writer_us) taken off raw_us",
                      "gbs": "1e9 bytes/s",
                      "bytes": "N*K FP8 + scales + M*K bf16 in + M*N bf16 out"},
            "rows": rows,
        }

    for s in schemes:
        for n, k in shapes:
            group = [p for p in todo if p.scheme is s and (p.n, p.k) == (n, k)]
            if not group:
                continue
            if auto is not None:  # tuned as the product tunes: bucket order, seeded siblings
                tuner.pretune(auto, group, progress=False, max_configs=args.max_configs,
                              read_ceiling_gbps=ceiling, precompile=False)
            for p in group:
                # each row names its run and ceiling: a resumed file holds rows of two runs
                rows.extend({**r, "run": date, "read_ceiling_gbs": round(ceiling, 1)}
                            for r in measure(p, arms, auto, timer, args.max_configs, ceiling))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result(), indent=1))
            torch.cuda.empty_cache()
            console.print(f"{s.value} {n}x{k} done at {time.time() - t0:.0f} s")
    console.print(table(rows, gpu, ceiling))
    path.write_text(json.dumps(result(), indent=1))
    console.print(f"wrote {path} ({time.time() - t0:.0f} s)")


def resumable_rows(old: dict, args, path) -> list[dict]:
    """The rows of an earlier record to keep, or SystemExit where its run was timed otherwise
    (rows tuned with other --max-configs / --replays are no side-by-side comparison); rows of
    files written before rows named their run get the earlier run's date and ceiling."""
    for field in ("max_configs", "replays"):
        if old.get(field) != getattr(args, field):
            raise SystemExit(f"--resume {path}: its run had {field} {old.get(field)!r}, this one "
                             f"{getattr(args, field)!r}; resume with the same value or write "
                             "another --json")
    return [{"run": old.get("date"), "read_ceiling_gbs": old.get("read_ceiling_gbs"), **r}
            for r in old["rows"]]


def _cudnn_versions():
    from fp8tower.backends import cudnn

    return cudnn.versions() or {"cudnn": "unavailable", "cudnn_frontend": "unavailable"}


def measure(p, arms, auto, timer, max_configs, ceiling):
    base = {"scheme": p.scheme.value, "n": p.n, "k": p.k, "m": p.m,
            "role": TOWER_SHAPES.get(f"{p.n}x{p.k}", ""), "bytes": p.bytes_moved()}
    rows, choices = [], []
    for be in arms:
        reason = be.check(p)
        if reason is not None:
            rows.append({**base, "arm": be.name, "skipped": reason})
            continue
        entry = tsearch.tune_problem(p, [be], timer=timer, max_configs=max_configs,
                                    read_ceiling_gbps=ceiling)
        row = {**base, "arm": be.name, "tried": len(entry.candidates),
               "failures": [f"{c.label}: {c.error}" for c in entry.failures()]}
        if not entry.ranked():
            rows.append({**row, "skipped": "every config failed"})
            continue
        w = entry.winner
        row.update(backend=be.name, config=w.config, us_tuning=round(w.median_us, 3))
        rows.append(row)
        choices.append((be.name, be, tsearch.native_config(be, p, w.config)[1]))
    if auto is not None:
        be, cfg = auto.resolve(p, "auto", graph=True)  # retime's CUDA graphs
        rows.append({**base, "arm": "auto", "backend": be.name,
                     "config": tcache.normalize_config(cfg)})
        choices.append(("auto", be, cfg))
    times = retime(p, choices, timer)
    copies, cold = times.pop("_rotation")
    writer_us = times.pop("_writer_us")
    for r in rows:
        t = times.get(r["arm"])
        if isinstance(t, str):
            r["skipped"] = t
        elif t is not None:
            r.update(timing_fields(t, p.bytes_moved(), ceiling, copies, cold, writer_us))
    best = min((r["us"] for r in rows if "us" in r and r["arm"] != "auto"), default=None)
    for r in rows:
        if "us" in r and best:
            r["vs_best_arm"] = round(r["us"] / best, 3)
            if r["arm"] == "auto":
                r["auto_within_tolerance"] = r["us"] <= best * (1 + AUTO_TOLERANCE)
    return rows


def table(rows, gpu, ceiling):
    t = Table(title=f"Four-way FP8 GEMMs, {gpu}, read ceiling {ceiling:.0f} GB/s (decimal), "
              "cold L2, CUDA graph, bf16 in (quantization included), each arm at its best config")
    for col in ("scheme", "N x K", "M", "arm", "config", "us", "% ceil", "vs best arm", "auto ok"):
        t.add_column(col, justify="right")
    for r in rows:
        if "us" not in r:
            t.add_row(r["scheme"], f"{r['n']}x{r['k']}", str(r["m"]), r["arm"],
                      f"skipped: {r.get('skipped', '')[:50]}", "", "", "", "")
            continue
        arm = r["arm"] + (f" ({r['backend']})" if r["arm"] == "auto" else "")
        ok = {True: "yes", False: "NO"}.get(r.get("auto_within_tolerance"), "")
        best = "best" if r.get("vs_best_arm") == 1.0 and r["arm"] != "auto" else \
            f"{r.get('vs_best_arm', float('nan')):.3f}"
        t.add_row(r["scheme"], f"{r['n']}x{r['k']}", str(r["m"]), arm,
                  tcache.config_label(r.get("config"))[:40], f"{r['us']:.2f}",
                  pct_cell(r), best, ok)
    return t


if __name__ == "__main__":
    main()
