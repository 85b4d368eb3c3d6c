"""GEMM sweep on a GPU: shapes (the Qwen3.5-27B tower's, or other families') x M x backend x scheme.

Timed as DESIGN.md says (tuning.time_cuda_graph: one CUDA graph over rotated weight
copies > 3x L2, median of replays), with the read ceiling measured in the same run, in the
tuner's own chain (``--chain model``, tuning.search.Chain: a small elementwise kernel writes
x before every other GEMM, like a norm or an activation in a model, and its share is
subtracted), so that ``auto`` is scored where it was chosen; ``--chain gemm``: GEMMs back to
back (before 2026-12-04 the only chain: there the PDL configs the tuner chose at M = 1 ran up
to 3.9 us a GEMM slower than in the tuner's chain, results/scorecard_H200_2026-12-04/call4/).
bf16 activations in; activation quantization is included in every backend's time (cuBLASLt
pays its separate quant launch, Triton fuses it or runs its pre-pass). Prints a table and
writes JSON under benchmarks/results/.

Arms: backend names, ``auto`` (the tuned dispatch: cache hit, else it tunes now),
``untuned`` (what ``auto`` serves with no cache entry and FP8TOWER_TUNE=0: the dispatcher's
safe default, issue #12's "never slower than cuBLASLt by more than 2%, tuned or not"),
``rule`` (the safe default as on an H200, the GPU its rule was first measured on, whatever
this GPU: on a GPU outside dispatch.UNTUNED_RULE_GPUS ``untuned`` is cuBLASLt, and this arm
measures whether the H200's rule would hold there), and
Triton variants of the default config (``variant_config``: pair, deep, deep_own, nodeep), and
any Triton arm with some of its config's keys overridden: ``triton[split_k=8]``,
``deep[num_stages=3,block_k=256]`` (``parse_override``), and CUTLASS's default config with
some keys overridden: ``cutlass[cluster=2]``, ``cutlass[sched=pp,pdl=false]``. With
``cublaslt`` among the arms, every row gets its ratio to it in the same run and the summary
lists the rows more than 2% slower. The JSON is written after each scheme too (``"complete":
false``, no ratios yet): ``auto`` tunes every key the cache lacks inside the run (per_tensor
on the tower's shapes at four M: 256 s, results/standin_H200_2026-12-04/call2/), and a run
stopped by a timeout keeps the schemes it finished.

Per (scheme, shape, M) every arm's choice is resolved first (``auto`` tunes there, never
between two arms' timings), then ``--rounds`` rounds time each arm once, the arm order
reversed every other round (ABBA: a drift favours no arm); a row's time is the median of its
rounds, its ratio to cuBLASLt the median of the per-round ratios (time_cell).

    python benchmarks/bench_gemm.py                       # everything, the 27B tower's shapes
    python benchmarks/bench_gemm.py --m 1,32 --schemes per_tensor --shapes 1024x5120
    python benchmarks/bench_gemm.py --shapes families --backends cublaslt,untuned,triton \
        --schemes per_tensor,channel_token,block128 --m 1,8,16,32 --precompile
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from triton.errors import TritonError

from fp8tower import backends, dispatch, provenance
from fp8tower.backends import cudnn as cudnn_backend
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import FP8_DTYPE, Fp8Weight, Scheme, quantize_weight, sqnr_db
from fp8tower.kernels import act_quant, configs
from fp8tower.problem import GemmProblem
from fp8tower.tuning.ceiling import read_ceiling
from fp8tower.tuning.search import Chain
from fp8tower.tuning.timer import Timing, l2_cache_bytes, time_cuda_graph

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import l2_rotation, pct_cell, timing_fields

TOWER_SHAPES = {
    "10240x5120": "GDN in_proj_qkv", "6144x5120": "GDN in_proj_z",
    "16384x5120": "GDN in_proj_qkvz (merged)", "5120x6144": "GDN out_proj / attn o_proj",
    "12288x5120": "attn q_proj (+gate)", "1024x5120": "attn k_proj / v_proj",
    "14336x5120": "attn qkv (merged)", "34816x5120": "MLP gate_up (merged)",
    "5120x17408": "MLP down_proj",
}
# Other families' decode GEMMs (N x K, HF configs; "merged": the sibling projections as one GEMM).
FAMILY_SHAPES = {
    "6144x4096": "Llama-3.1-8B / Qwen3-8B qkv (merged)",
    "4096x4096": "Llama-3.1-8B / Qwen3-8B o_proj, q_proj",
    "1024x4096": "Llama-3.1-8B / Qwen3-8B k_proj / v_proj",
    "28672x4096": "Llama-3.1-8B gate_up (merged)",
    "4096x14336": "Llama-3.1-8B down_proj",
    "24576x4096": "Qwen3-8B gate_up (merged)",
    "4096x12288": "Qwen3-8B down_proj",
    "10240x5120": "Qwen3-32B qkv (merged)",
    "5120x8192": "Qwen3-32B o_proj",
    "51200x5120": "Qwen3-32B gate_up (merged)",
    "5120x25600": "Qwen3-32B down_proj",
    "10240x8192": "Llama-3.1-70B qkv (merged)",
    "8192x8192": "Llama-3.1-70B o_proj",
    "57344x8192": "Llama-3.1-70B gate_up (merged)",
    "8192x28672": "Llama-3.1-70B down_proj",
    "1280x8192": "Llama-3.1-70B TP8 qkv shard",
    "8192x1024": "Llama-3.1-70B TP8 o_proj shard",
    "7168x8192": "Llama-3.1-70B TP8 gate_up shard",
    "8192x3584": "Llama-3.1-70B TP8 down_proj shard",
    "5120x2048": "Qwen3-30B-A3B attention qkv (merged)",
    "2048x4096": "Qwen3-30B-A3B attention o_proj",
}
SHAPE_SETS = {"tower": TOWER_SHAPES, "families": FAMILY_SHAPES}
STATIC_ACT_SCALE = 0.02
# Triton arms of another config than the default (variant_config)
VARIANTS = ("pair", "deep", "deep_own", "nodeep")
# The Triton config keys an arm may override (parse_override).
OVERRIDE_KEYS = ("block_n", "block_k", "split_k", "num_warps", "num_stages", "prequant", "pdl",
                 "prefetch", "packed", "fused_amax", "wo_mode")
# The CUTLASS config keys a ``cutlass[...]`` arm may override (its default config's); the
# strings and floats among them are taken as written.
CUTLASS_OVERRIDE_KEYS = ("sched", "tile", "cluster", "pdl", "mode", "splits", "overlap",
                         "prefetch")
_CUTLASS_TEXT, _CUTLASS_FLOAT = ("sched", "tile", "mode"), ("overlap", "prefetch")
# The bar of issue #12: no arm more than this much slower than cuBLASLt, tuned or not.
CUBLASLT_TOLERANCE = 0.02
# --chain: what each GEMM of the timed graph follows (recorded in the JSON's "chain").
CHAIN_HELP = {
    "model": "the tuner's chain (tuning.search.Chain): an x writer before every other GEMM, "
             "its share subtracted",
    "gemm": "GEMMs back to back",
}
CHAINS = tuple(CHAIN_HELP)


def split_arms(text: str) -> list[str]:
    """--backends' comma list, commas inside an override's brackets kept: "a,b[x=1,y=2]"."""
    arms, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            arms.append(cur)
            cur = ""
        else:
            cur += ch
    return [*arms, cur]


def parse_override(name: str) -> tuple[str, dict]:
    """``ARM[key=value,...]`` -> (ARM, {key: value}); a plain name -> (name, {}).
    Values as ``dispatch --explain`` prints them (True / False) are taken too. Triton arms
    (triton and the variants) take overrides of keys of their configs, ``auto`` where it
    chose Triton (its other choices run as they are), and ``cutlass`` of its default
    config's keys (CUTLASS_OVERRIDE_KEYS: ``cutlass[cluster=2]``, ``cutlass[sched=pp]``)."""
    if "[" not in name:
        return name, {}
    base, _, rest = name.partition("[")
    if not rest.endswith("]") or base not in ("triton", "auto", "cutlass", *VARIANTS):
        raise SystemExit(f"--backends: {name!r}: an override is ARM[key=value,...] with ARM "
                         f"triton, auto, cutlass or one of {', '.join(VARIANTS)}")
    keys = CUTLASS_OVERRIDE_KEYS if base == "cutlass" else OVERRIDE_KEYS
    over = {}
    for item in rest[:-1].split(","):
        key, eq, value = item.partition("=")
        if not eq or key not in keys:
            raise SystemExit(f"--backends: {name!r}: {item!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(keys)}")
        if base == "cutlass" and key in _CUTLASS_TEXT:
            over[key] = value
        elif base == "cutlass" and key in _CUTLASS_FLOAT:
            try:
                over[key] = float(value)
            except ValueError:
                raise SystemExit(f"--backends: {name!r}: {key}={value!r} is not a number") from None
        elif value.lower() in ("true", "false"):  # True / False as tuning.cache.config_label
            over[key] = value.lower() == "true"  # writes them (dispatch --explain)
        elif value.isdigit():
            over[key] = int(value)
        else:
            raise SystemExit(f"--backends: {name!r}: {key}={value!r} is neither an integer nor "
                             "true / false")
    return base, over


def parse_shapes(spec: str) -> tuple[list[tuple[int, int]], dict[str, str]]:
    """A set name of SHAPE_SETS or a comma list of NxK: (shapes, role by "NxK")."""
    if spec in SHAPE_SETS:
        spec_set = SHAPE_SETS[spec]
        return [tuple(int(v) for v in s.split("x")) for s in spec_set], dict(spec_set)
    shapes = []
    for s in spec.split(","):
        try:
            n, k = (int(v) for v in s.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: {s!r} is neither NxK (e.g. 5120x6144) nor one of "
                             f"{', '.join(SHAPE_SETS)}") from None
        shapes.append((n, k))
    roles = {**FAMILY_SHAPES, **TOWER_SHAPES}
    return shapes, {f"{n}x{k}": roles.get(f"{n}x{k}", "") for n, k in shapes}


def variant_config(name: str, p: GemmProblem) -> dict | None:
    """The Triton config of a variant arm, or None where it does not apply. ``nodeep``: the
    default without configs.deep_default (the default before it), any scheme. For per_tensor
    and channel_token, variants of that default: ``pair`` its tile with x from the PDL
    pre-pass pair; ``deep`` configs.deep_tile (BLOCK_N 64 unsplit at BLOCK_K 512), x from
    the pair; ``deep_own`` the same tile with x taken as that default takes it."""
    if name == "nodeep":
        return configs.default_config(p, deep=False)
    if p.scheme not in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
        return None
    base = configs.default_config(p, deep=False)
    pair = {"prequant": p.scheme is Scheme.PER_TENSOR, **configs.PDL_PAIR}
    if name == "pair":
        return {**{k: v for k, v in base.items() if k not in configs.X_MODE_KEYS}, **pair}
    own = {k: v for k, v in base.items() if k in configs.X_MODE_KEYS}
    return configs.deep_tile(p, own if name == "deep_own" else pair)


def arm_choice(name: str, p: GemmProblem, untuned, rule=None):
    """(backend, config, the backend's name if the arm chose it) of one arm, or (None, the
    reason it cannot serve, None). ``untuned``: this GPU's dispatcher (no tuning); ``rule``:
    one as on an H200 (``rule_dispatcher``). A named backend's default and the variants are
    taken at the bucket's M, as dispatch serves and tunes them (Dispatcher.resolve,
    safe_default): at the call's M, triton per_tensor 10240x5120 M = 17 timed BLOCK_K 128
    split 3 without the pre-pass where dispatch serves BLOCK_K 256 split 2 with it."""
    at = p if p.m == p.bucket else dataclasses.replace(p, m=p.bucket)
    base, over = parse_override(name)
    if over:
        be, cfg, chosen = arm_choice(base, p, untuned, rule)
        if be is None or be.name != ("cutlass" if base == "cutlass" else "triton"):
            return be, cfg, chosen  # auto's other choices run as they are
        return be, {**cfg, **over}, chosen
    if name in VARIANTS:
        cfg = variant_config(name, at)
        if cfg is None:
            return None, f"no {name} variant for {p.scheme.value}", None
        return backends.get("triton"), cfg, None
    if name == "auto":  # the tuned dispatch (cache hit, else tunes now)
        be, cfg = dispatch.resolve(p, "auto", graph=True)  # timed in a CUDA graph
        return be, cfg, be.name
    if name in ("untuned", "rule"):  # no cache entry, no tuning: the safe default
        be, cfg = (untuned if name == "untuned" else rule).safe_default(p)
        return be, cfg, be.name
    be = backends.get(name)
    reason = be.unavailable_reason() or be.check(p)
    if reason is not None:
        return None, reason, None
    return be, be.default_config(at), None


def time_cell(names, p: GemmProblem, chain, untuned, rule=None, *, rounds: int = 1,
              row: dict | None = None, fields=None, report=print) -> list[dict]:
    """The rows of one (scheme, shape, M): each arm's choice resolved first (``auto`` tunes
    a key the cache lacks here: it tuned between the arms it is compared with when each arm
    was resolved as it was timed), then ``rounds`` rounds, each timing every arm once in
    ``chain`` (Chain.time), the arm order reversed on odd rounds. A timed row gets
    ``fields(t)`` (``t``: a Timing of the median of the rounds' medians, their min and max)
    and ``us_rounds``, each round's median; a cuDNN row ``plan_run``, the plan its calls ran
    (cudnn.plan_run: the config's, or the next that builds at this M). ``row``: the fields
    every row starts with."""
    rows, timed = [], []
    for name in names:
        r = {**(row or {}), "backend": name}
        be, cfg, chosen = arm_choice(name, p, untuned, rule)
        rows.append(r)
        if be is None:
            r["skipped"] = cfg
            continue
        if chosen is not None:
            r["chosen"] = chosen
        r["config"] = cfg
        if be.name == "cudnn":
            try:
                r["plan_run"] = cudnn_backend.plan_run(p, cfg)
            except ValueError:  # the timing says why (BackendError)
                pass
        timed.append((r, be, cfg, []))
    for k in range(rounds):
        for r, be, cfg, ts in timed if k % 2 == 0 else timed[::-1]:
            if "error" in r:
                continue
            try:
                ts.append(chain.time(be, cfg))
            except (ValueError, RuntimeError, TritonError) as e:  # e.g. an override past
                # shared memory: the row records it, the sweep goes on
                report(f"[red]{escape(r['backend'])} {p.scheme.value} {p.n}x{p.k} M={p.m}: "
                       f"{escape(str(e))}[/red]")
                r["error"] = f"{type(e).__name__}: {e}"
    for r, _, _, ts in timed:
        if "error" in r or not ts:
            continue
        t = Timing(median_us=statistics.median(x.median_us for x in ts),
                   min_us=min(x.min_us for x in ts), max_us=max(x.max_us for x in ts),
                   replays=sum(x.replays for x in ts), calls=ts[0].calls, copies=ts[0].copies)
        r.update(fields(t) if fields is not None else {"us": round(t.median_us, 3)})
        r["us_rounds"] = [round(x.median_us, 3) for x in ts]
    return rows


def cublaslt_speedup(base: dict, row: dict) -> float:
    """cuBLASLt's time over ``row``'s in one cell: the median of the per-round ratios (each
    round times both side by side), else (rows without rounds) the ratio of the medians."""
    pairs = list(zip(base.get("us_rounds", ()), row.get("us_rounds", ())))
    if pairs:
        return statistics.median(b / a for b, a in pairs)
    return base["us"] / row["us"]


RULE_GPU = "NVIDIA H200"  # the ``rule`` arm's GPU (one of dispatch.UNTUNED_RULE_GPUS)


def rule_dispatcher() -> dispatch.Dispatcher:
    """A dispatcher that never tunes and serves the untuned default as on an H200 (the
    ``rule`` arm)."""
    return dispatch.Dispatcher(tune=False, persist=False, gpu_name=RULE_GPU)


def precompile(names, problems, untuned, console, rule=None):
    """Build the Triton configs the arms will launch, in parallel processes, first."""
    jobs = []
    for p in problems:
        for name in names:
            if name == "auto":
                continue
            be, cfg, _ = arm_choice(name, p, untuned, rule)
            if be is not None and be.precompile is not None and be.name == "triton":
                jobs.append((dataclasses.replace(p, m=p.bucket), cfg))
    if jobs:
        t = time.time()
        report = backends.get("triton").precompile(jobs)
        console.print(f"triton precompile: {report.summary()} ({time.time() - t:.0f} s)")


def random_weights(n, k, scheme, copies, seed=0):
    """``copies`` distinct FP8 weights (random data and scales of the scheme's shapes)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    nb, kb = -(-n // 128), -(-k // 128)
    shape = {Scheme.PER_TENSOR: (), Scheme.BLOCK128: (nb, kb)}.get(scheme, (n,))
    out = []
    for _ in range(copies):
        data = (torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 64)
        data = data.clamp(-448, 448).to(FP8_DTYPE)
        scale = torch.rand(shape, device="cuda", generator=g) * 1e-3 + 1e-4
        act = torch.tensor(STATIC_ACT_SCALE, device="cuda") if scheme is Scheme.PER_TENSOR else None
        out.append(Fp8Weight(data, scale, scheme, act))
    return out


def accuracy(schemes, shapes=((1024, 5120), (5120, 6144)), m=16):
    """SQNR (dB) of each backend vs float64 on the same quantized operands, and of the
    whole scheme (quantization included) vs the unquantized bf16 product."""
    rows = []
    for scheme in schemes:
        for n, k in shapes:
            g = torch.Generator(device="cuda").manual_seed(n + k)
            w = torch.randn(n, k, device="cuda", generator=g) * 0.02
            x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            act = float(x.float().abs().amax()) / 448 if scheme is Scheme.PER_TENSOR else None
            wq = quantize_weight(w, scheme, act_scale=act)
            exact = (x.double() @ w.bfloat16().double().t())
            ref = fp8_linear_ref(x, wq, out_dtype=torch.float64, compute_dtype=torch.float64)
            p = GemmProblem.for_call(x, wq, torch.bfloat16)
            for be in backends.available():
                if be.check(p) is not None:
                    continue
                y = be.run(x, wq, be.packed_for(wq), out_dtype=torch.bfloat16)
                rows.append({"scheme": scheme.value, "n": n, "k": k, "m": m, "backend": be.name,
                             "sqnr_vs_quantized_ref_db": round(sqnr_db(ref, y), 2),
                             "sqnr_vs_bf16_product_db": round(sqnr_db(exact, y), 2)})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tower",
                    help=f"NxK comma list, or a set: {', '.join(SHAPE_SETS)}")
    ap.add_argument("--m", default="1,2,4,8,16,32,64")
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128,weight_only")
    ap.add_argument("--backends", default="cublaslt,triton",
                    help="backend names, auto (tuned), untuned (the safe default), rule (the "
                    "safe default as on an H200), "
                    "pair / deep / deep_own / nodeep (Triton variants of the default: "
                    "variant_config), a Triton arm with config keys overridden: "
                    "triton[split_k=8,num_stages=3], CUTLASS's default with keys of "
                    "CUTLASS_OVERRIDE_KEYS overridden: cutlass[sched=pp,cluster=2]")
    ap.add_argument("--precompile", action="store_true",
                    help="build the Triton configs of every row first, in parallel")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per (scheme, shape, M): every arm timed once a round, the "
                    "order reversed every other round; rows: the median round")
    ap.add_argument("--prepass-group", type=int, default=None,
                    help="per_tensor's pre-pass: elements a program (act_quant.PER_TENSOR_GROUP; "
                    "default: its own rule)")
    ap.add_argument("--chain", choices=CHAINS, default="model",
                    help="model: the tuner's chain, an x writer before every other GEMM, its "
                    "share subtracted (default); gemm: GEMMs back to back")
    ap.add_argument("--json", default=None, help="output path (default benchmarks/results/...)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds: {args.rounds} is not a positive integer")
    names = split_arms(args.backends)
    for b in names:
        base, _ = parse_override(b)  # a malformed override fails here, before any timing
        if base not in ("auto", "untuned", "rule", *VARIANTS):
            backends.get(base)  # so do unknown names
    if args.prepass_group is not None:
        try:
            act_quant.PER_TENSOR_GROUP = act_quant.check_group(args.prepass_group)
        except ValueError as e:
            raise SystemExit(f"--prepass-group: {e}") from None
    if not torch.cuda.is_available():
        sys.exit("bench_gemm needs a CUDA GPU")
    schemes = [Scheme.parse(s) for s in args.schemes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    shapes, roles = parse_shapes(args.shapes)
    untuned = dispatch.Dispatcher(tune=False, persist=False)
    rule = rule_dispatcher()
    console = Console()
    t0 = time.time()
    ceilings = read_ceiling()
    ceiling = max(ceilings.values())
    console.print(f"read ceiling {ceiling:.0f} GB/s {ceilings}")
    cap = torch.cuda.get_device_capability()
    l2 = l2_cache_bytes()
    if args.precompile:
        precompile(names, [GemmProblem(m, n, k, sc, capability=cap,
                                       static_act_scale=sc is Scheme.PER_TENSOR)
                           for sc in schemes for n, k in shapes for m in ms], untuned, console,
                   rule)
    rows = []
    for scheme in schemes:
        for n, k in shapes:
            copies, cold = l2_rotation(n * k, l2)
            ws = random_weights(n, k, scheme, copies)
            for m in ms:
                x = torch.randn(m, k, device="cuda").bfloat16()
                chain = Chain.build(x, None, ws, torch.bfloat16, writer=args.chain == "model",
                                    timer=partial(time_cuda_graph, replays=args.replays))
                p = GemmProblem(m, n, k, scheme, capability=cap,
                                static_act_scale=scheme is Scheme.PER_TENSOR)
                rows += time_cell(
                    names, p, chain, untuned, rule, rounds=args.rounds,
                    row={"scheme": scheme.value, "n": n, "k": k, "m": m,
                         "role": roles.get(f"{n}x{k}", ""), "bytes": p.bytes_moved()},
                    fields=partial(timing_fields, bytes_moved=p.bytes_moved(),
                                   ceiling=ceiling, copies=copies, cold=cold,
                                   writer_us=chain.base_us),
                    report=console.print)
            del ws
            torch.cuda.empty_cache()
        console.print(f"{scheme.value} done at {time.time() - t0:.0f} s")
        # The rows so far, so that a run stopped later (a device call's timeout: `auto` may
        # tune every key it meets) keeps them; the final write below replaces this one.
        # The first write picks the default name; later writes of this run go to that file.
        args.json = str(write_result(args.json, rows, [], {}, ceiling, ceilings, cap, argv,
                                     complete=False, chain=args.chain, rounds=args.rounds))
    acc = accuracy(schemes)
    # Ratios within this run: every backend vs cuBLASLt on the same (scheme, shape, M), the
    # median of per-round ratios (cublaslt_speedup)
    base = {(r["scheme"], r["n"], r["k"], r["m"]): r for r in rows
            if r["backend"] == "cublaslt" and "us" in r}
    for r in rows:
        b = base.get((r["scheme"], r["n"], r["k"], r["m"]))
        if "us" in r and b:
            r["speedup_vs_cublaslt"] = round(cublaslt_speedup(b, r), 3)
    table = Table(title=f"FP8 GEMMs, {torch.cuda.get_device_name()}, read ceiling "
                  f"{ceiling:.0f} GB/s (decimal), cold L2 (% ceil 'warm': weights too small "
                  "for a cold rotation), CUDA graph, bf16 in")
    for col in ("scheme", "N x K", "M", "backend", "us", "GB/s", "% ceil", "vs cuBLASLt"):
        table.add_column(col, justify="right")
    for r in rows:
        if "us" not in r:
            continue
        table.add_row(r["scheme"], f"{r['n']}x{r['k']}", str(r["m"]), arm_label(r),
                      f"{r['us']:.2f}", f"{r['gbs']:.0f}", pct_cell(r),
                      ratio_cell(r))
    console.print(table)
    slow = [r for r in rows if r.get("speedup_vs_cublaslt", 2.0) < 1 / (1 + CUBLASLT_TOLERANCE)]
    for r in slow:
        console.print(slow_line(r))
    path = write_result(args.json, rows, slow, acc, ceiling, ceilings, cap, argv, complete=True,
                        chain=args.chain, rounds=args.rounds)
    console.print(f"wrote {path} ({time.time() - t0:.0f} s)")


def ratio_cell(row: dict) -> str:
    """A table's "vs cuBLASLt" cell: "-" where no cuBLASLt row of the same cell was timed
    (weight_only, which cuBLASLt does not serve, or cuBLASLt not among the arms)."""
    ratio = row.get("speedup_vs_cublaslt")
    return "-" if ratio is None else f"{ratio:.2f}x"


def arm_label(row: dict) -> str:
    """A row's arm for rich (and what auto / untuned chose), escaped: rich reads an override
    arm's "[split_k=3]" as markup and drops it, so three arms printed as "triton" alike."""
    return escape(row["backend"] + (f" ({row['chosen']})" if "chosen" in row else ""))


def slow_line(row: dict) -> str:
    """The summary's line for a row more than CUBLASLT_TOLERANCE slower than cuBLASLt."""
    return (f"[red]slower than cuBLASLt by > {CUBLASLT_TOLERANCE:.0%}[/red]: {arm_label(row)} "
            f"{row['scheme']} {row['n']}x{row['k']} M={row['m']} {row['us']:.2f} us "
            f"({row['speedup_vs_cublaslt']:.3f}x)")


def write_result(json_path, rows, slow, acc, ceiling, ceilings, cap, argv, *, complete,
                 chain="model", rounds=1):
    """Write the run's JSON (``complete``: False while schemes remain; then the rows carry no
    ratios to cuBLASLt yet and there is no accuracy check; ``chain``: --chain; ``rounds``:
    --rounds); return its path."""
    result = {
        "benchmark": "bench_gemm",
        **provenance.record(["python", "benchmarks/bench_gemm.py", *(sys.argv[1:] if argv is None else argv)]),
        "complete": complete,
        "capability": list(cap),
        "read_ceiling_gbs": round(ceiling, 1), "read_ceiling_methods": ceilings,
        "units": {"us": "microseconds a GEMM, median of replays (--chain model: the x "
                        "writer's share subtracted), the median of `rounds` rounds (us_rounds: "
                        "each round's)", "gbs": "1e9 bytes/s",
                  "bytes": "N*K FP8 + scales + M*K bf16 in + M*N bf16 out",
                  "speedup_vs_cublaslt": "cuBLASLt us / this us, the median of per-round "
                                         "ratios (arm order reversed every other round)",
                  "plan_run": "cudnn rows: the plan index its calls ran (config: the one "
                              "asked for; another where that does not build at this M)"},
        "chain": CHAIN_HELP[chain], "rounds": rounds,
        "static_act_scale": STATIC_ACT_SCALE, "rows": rows, "accuracy": acc,
        "slower_than_cublaslt": [{f: r[f] for f in ("backend", "scheme", "n", "k", "m", "us",
                                                    "speedup_vs_cublaslt")} for r in slow],
    }
    if json_path is None:
        gpu = torch.cuda.get_device_name().replace(" ", "-")
        json_path = provenance.result_path("benchmarks/results", f"gemm_{gpu}", result["date"])
    path = Path(json_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return path


if __name__ == "__main__":
    main()
