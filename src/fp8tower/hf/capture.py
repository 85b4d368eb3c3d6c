"""Paired trace of a Hugging Face transformers model's decode step, op groups named after its
modules (`fp8tower trace capture-model`).

The model is built from a config (a shipped name or a local config.json) with random bf16
weights, optionally converted (``fp8:<scheme>[:merged]``, fp8tower.convert), prefilled into
a StaticCache, and then:

1. one eager decode step runs under the profiler with a record_function range around every
   module's forward (forward pre/post hooks; ``fp8tower.mod:<fqn>``) and around the step
   (``fp8tower.mod:(step)``): each kernel belongs to the innermost range its launch call ran
   in, so its label is the module's name with layer indices as ``*``
   (``layers.*.linear_attn.in_proj_qkvz``); kernels of a module outside its children carry
   the module's own label (``layers.*.linear_attn``: the GDN core; ``layers.*``: residual
   adds);
2. the hooks are removed; on a GPU the decode step (argmax and position bump included) is
   captured in one CUDA graph, one replay is profiled, and its kernel sequence is aligned with
   the eager one (difflib; kernels the eager step did not launch take their neighbour's
   label, counted in the manifest's meta);
3. capture_pair records the two lengths (graph replays, or eager steps with ``graph=False``)
   with a manifest of the per-step op sequence (consecutive kernels of one module call = one
   op), and the expected launches: one GEMM per converted linear or merged group per step,
   counted from the model's modules (trace/expect.py checks them in `trace attribute`).

On a CPU the same runs eagerly and the "kernels" are top-level aten ops (a CPU run).
transformers is imported lazily (optional dependency).
"""

from __future__ import annotations

import collections
import contextlib
import difflib
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import graph_edges

MOD_PREFIX = "fp8tower.mod:"
STEP_LABEL = "(step)"
MODEL_LABEL = "(model)"
#: GEMM kernels of the FP8 backends (Triton, cuBLASLt nvjet/xmma, CUTLASS, cuDNN); not the
#: activation-quant pre-pass, aten's reductions/elementwise or cuBLAS' split-K reduction.
#: (cuBLASLt's split-K GEMMs are named ..._splitK_...; its separate reduction splitKreduce_kernel)
GEMM_KERNELS = (r"^(?!.*(act_quant|elementwise|reduce_kernel|splitKreduce))"
                r"(.*(gemm|nvjet|xmma|cutlass|cudnn))")
#: kernels a converted module may launch besides its GEMM: dynamic activation scale (amax,
#: divide: aten reductions/elementwise ops) and the activation-quant pre-pass.
ACT_KERNELS = r"elementwise|reduce|_fp8_act_quant|fill|copy|Memset|memset"
#: CPU runs: the top-level aten op of a GEMM
CPU_GEMM_OPS = r"^aten::(mm|matmul|linear|addmm|bmm|_scaled_mm)$"
_LAYER = re.compile(r"(?<=\.)\d+(?=\.|$)")


def label_of(fqn: str) -> str:
    """``model.layers.12.mlp.down_proj`` -> ``layers.*.mlp.down_proj``; the root: (model)."""
    if fqn in ("", STEP_LABEL):
        return MODEL_LABEL if fqn == "" else STEP_LABEL
    name = fqn.removeprefix("model.") if fqn != "model" else MODEL_LABEL
    return _LAYER.sub("*", "." + name)[1:] if name != MODEL_LABEL else name


def parse_arm(arm: str) -> tuple[str | None, bool]:
    """``bf16`` -> (None, False); ``fp8:<scheme>[:merged]`` -> (scheme, merged)."""
    from ..formats import Scheme

    parts = arm.split(":")
    if parts == ["bf16"]:
        return None, False
    if parts[0] != "fp8" or len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "merged"):
        raise ValueError(f"arm {arm!r}: expected bf16, fp8:<scheme> or fp8:<scheme>:merged")
    return Scheme.parse(parts[1]).value, len(parts) == 3


def apply_arm(model: nn.Module, arm: str, backend: str = "auto") -> None:
    """``bf16`` (nothing), ``fp8:<scheme>`` (unmerged) or ``fp8:<scheme>:merged``."""
    scheme, merged = parse_arm(arm)
    if scheme is None:
        return
    from .conversion import convert

    convert(model, scheme, merge=merged, backend=backend)


# ----------------------------------------------------------------------------- module ranges


class ModuleRanges:
    """Forward hooks that put every module's forward in a record_function range."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.handles, self.stack = model, [], []

    def __enter__(self):
        for fqn, mod in self.model.named_modules():
            name = MOD_PREFIX + fqn

            def pre(mod, args, name=name):
                rf = torch.profiler.record_function(name)
                rf.__enter__()
                self.stack.append(rf)

            def post(mod, args, out):
                if self.stack:
                    self.stack.pop().__exit__(None, None, None)

            self.handles.append(mod.register_forward_pre_hook(pre))
            self.handles.append(mod.register_forward_hook(post))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []
        while self.stack:
            self.stack.pop().__exit__(None, None, None)


def kernel_modules(trace) -> tuple[list[str], list[str]]:
    """(kernel names, innermost module fqn) per kernel of a profiled step, in launch order.

    GPU: the launch call sharing the kernel's correlation id gives the host time point; CPU
    runs: the top-level op's own start. Innermost = the latest-starting range holding it."""
    ranges = [r for r in trace.ranges if not r.on_gpu and r.name.startswith(MOD_PREFIX)]
    if not ranges:
        raise ValueError("the eager profile has no module ranges")
    starts = np.array([r.start_us for r in ranges])
    ends = np.array([r.end_us for r in ranges])
    k = trace.kernels
    if trace.is_cpu:
        when = k.start_us
    else:
        lc = trace.launches
        order = np.argsort(lc.correlation)
        pos = np.searchsorted(lc.correlation[order], k.correlation)
        pos = np.clip(pos, 0, max(len(order) - 1, 0))
        found = lc.correlation[order][pos] == k.correlation if len(order) else np.zeros(len(k), bool)
        when = np.where(found, lc.start_us[order][pos], k.start_us)
    names, fqns = [], []
    for row in range(len(k)):
        t = when[row]
        inside = (starts <= t) & (ends >= t)
        if not inside.any():
            fqn = ""
        else:
            cand = np.flatnonzero(inside)
            fqn = ranges[int(cand[np.argmax(starts[cand])])].name[len(MOD_PREFIX):]
        names.append(k.name(row))
        fqns.append(fqn)
    return names, fqns


def align(eager_names: list[str], eager_fqns: list[str], graph_names: list[str]):
    """Module fqn per graph kernel: the eager kernel it aligns with, else its neighbour's.
    Returns (fqns, number of kernels labelled by a neighbour)."""
    if eager_names == graph_names:
        return list(eager_fqns), 0
    sm = difflib.SequenceMatcher(None, eager_names, graph_names, autojunk=False)
    out: list[str | None] = [None] * len(graph_names)
    for a, b, size in sm.get_matching_blocks():
        out[b:b + size] = eager_fqns[a:a + size]
    guessed = 0
    last = eager_fqns[0] if eager_fqns else ""
    for i, f in enumerate(out):
        if f is None:
            out[i] = last
            guessed += 1
        else:
            last = f
    return out, guessed


# ----------------------------------------------------------------------------- manifest


def _merged_name(model_type: str | None) -> dict[str, str]:
    """(parent class, member attribute) -> merged attribute (in_proj_qkv -> in_proj_qkvz), for
    the group key: by class, as the merge is (Kimi-Linear's q_proj merges in its MLA layers,
    not in its delta-rule ones)."""
    from .families import GROUPS

    return {(cls, m): g.merged_name for g in GROUPS.get(model_type or "", ())
            for cls in g.parent_classes for m in g.members}


def _fp8_modules(model: nn.Module) -> dict[str, nn.Module]:
    """fqn -> each module that runs one FP8 GEMM per call (Fp8Linear, MergedFp8Linear)."""
    from ..nn.linear import Fp8Linear
    from ..nn.merged import MergedFp8Linear

    out = {}
    for fqn, mod in model.named_modules():
        if isinstance(mod, MergedFp8Linear) or type(mod) is Fp8Linear and not any(fqn.startswith(f + ".") for f in out):
            out[fqn] = mod
    return out


def _gemm_info(mod: nn.Module, m: int) -> tuple[int, int, int, str]:
    """(n, k, bytes one call moves, backend) of an FP8 module at M=m, bf16 in and out: the
    weight and its scales, x, y and the bias where there is one (as GemmProblem.bytes_moved
    counts them for the tower)."""
    inner = getattr(mod, "linear", mod)
    w = inner.fp8_weight()
    n, k = w.n, w.k
    bias = getattr(inner, "bias", None)
    bias_bytes = bias.numel() * bias.element_size() if isinstance(bias, torch.Tensor) else 0
    return (n, k, w.nbytes() + 2 * m * k + 2 * m * n + bias_bytes,
            str(getattr(inner, "backend", "auto")))


def _family(name: str) -> str:
    from ..trace.attribute import kernel_family

    return kernel_family(name)


@dataclass
class ModelOps:
    ops: list  # OpRecord
    expected: list[dict]


def model_ops(model: nn.Module, names: list[str], fqns: list[str], m: int = 1,
              device: str = "cuda") -> ModelOps:
    """The manifest's op sequence from a step's kernels and their modules: consecutive
    kernels of one module call make one op."""
    from ..backends import all_backends
    from ..trace.manifest import OpRecord

    fp8 = _fp8_modules(model)
    modules = dict(model.named_modules())
    # kernels inside an FP8 module's own children (MergedFp8Linear.linear) are the module's
    fqns = [next((f for f in fp8 if q.startswith(f + ".")), q) for q in fqns]
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    merged = _merged_name(model_type)
    # the reference backend's family is ".*": leave it out, it would accept anything
    families = "|".join(sorted({b.kernel_family for b in all_backends()
                                if b.name != "reference"}))
    ops = []
    i = 0
    while i < len(names):
        j = i
        while j + 1 < len(names) and fqns[j + 1] == fqns[i]:
            j += 1
        fqn = fqns[i]
        label = label_of(fqn)
        run = names[i:j + 1]
        # a linear's group is the merged module's, FP8 or not: the arms line up group by group
        head, _, attr = label.rpartition(".")
        owner = type(modules.get(fqn.rpartition(".")[0])).__name__
        name = merged.get((owner, attr), attr)
        group = f"{head}.{name}" if head else name
        if fqn in fp8:
            n, k, nbytes, backend = _gemm_info(fp8[fqn], m)
            # CPU runs: aten ops of the reference path, no kernel family applies
            regex = f"{families}|{ACT_KERNELS}" if device == "cuda" else ".*"
        else:
            n = k = nbytes = 0
            backend = "torch"
            regex = "|".join(re.escape(f) for f in sorted({_family(x) for x in run}))
            if isinstance(modules.get(fqn), nn.Linear):  # a bf16 linear: its weight, x and y
                w = modules[fqn].weight
                n, k = w.shape
                nbytes = w.numel() * w.element_size() + 2 * m * k + 2 * m * n
            else:
                group = label
        ops.append(OpRecord(label, n, k, nbytes, backend, regex, len(run), group))
        i = j + 1
    per_label = collections.Counter(label_of(f) for f in fp8)
    gemm = GEMM_KERNELS if device == "cuda" else CPU_GEMM_OPS
    expected = [{"label": lb, "modules": c, "per_module": 1, "kernel_regex": gemm,
                 "what": "FP8 GEMM launches"} for lb, c in sorted(per_label.items())]
    return ModelOps(ops, expected)


# ----------------------------------------------------------------------------- capture


def _profile_kernels(fn: Callable[[], object], device: str):
    from ..trace.capture import _activities, _sync
    from ..trace.chrome import load_chrome

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one.json"
        with torch.profiler.profile(activities=_activities(device)) as prof:
            fn()
            _sync(device)
        prof.export_chrome_trace(str(path))
        return load_chrome(path, device=device, allow_empty=True)


def capture_model(
    model_name: str,
    arm: str,
    out_dir: str | Path,
    *,
    steps: tuple[int, int] = (8, 136),
    m: int = 1,
    context: int = 64,
    backend: str = "auto",
    device: str | None = None,
    graph: bool | None = None,
    layers: int | None = None,
    seed: int = 0,
    eager_out: str | Path | None = None,
    eager_steps: tuple[int, int] = (2, 6),
    force: bool = False,
):
    """Build ``model_name``, turn it into ``arm``, capture the paired trace into ``out_dir``.
    With ``eager_out`` (GPU, graph mode), the same model's eager steps are captured there too
    (``eager_steps``), for the host launch statistics, without building it twice.
    An existing capture in ``out_dir`` (or ``eager_out``) is refused unless ``force``.
    Returns capture_pair's CaptureResult (of ``out_dir``)."""
    import warnings

    from ..backends import names as backend_names
    from ..nn import plan as _plan
    from ..trace.capture import capture_pair, check_capture_dir, step_range
    from .requires import transformers

    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"device {device!r}: expected cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: no CUDA GPU is available")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    graph = dev.type == "cuda" if graph is None else graph
    if graph and dev.type != "cuda":
        raise ValueError("graph capture needs a CUDA device (pass graph=False on the CPU)")
    if eager_out is not None and not graph:
        raise ValueError("eager_out: the eager steps are captured beside a CUDA-graph capture "
                         "only (on a GPU, without eager mode); this capture is eager itself")
    if backend != "auto" and backend not in backend_names():
        raise ValueError(f"backend {backend!r}: expected auto or one of "
                         f"{', '.join(backend_names())}")
    _, merge = parse_arm(arm)  # before the (minutes-long) build
    check_capture_dir(out_dir, force)
    if eager_out is not None:
        check_capture_dir(eager_out, force)
    from .random_model import cache_kwarg, random_model, text_config

    config = text_config(model_name, layers)
    model = random_model(config, dev, seed=seed)
    apply_arm(model, arm, backend)
    records = getattr(model, "fp8tower_merges", [])
    records = [r for r in records if not r.get("kept")]  # all members kept bf16 on purpose
    unmerged = [r for r in records if not r["merged_ok"]]
    if merge and unmerged:
        first = unmerged[0]
        warnings.warn(f"arm {arm}: {len(unmerged)} of {len(records)} sibling groups not "
                      f"merged, captured unmerged ({first['parent']}.{first['merged']}: "
                      f"{first['reason']})", stacklevel=2)
    warm = 3
    # every decode step run below (warm-ups, profiled step, graph warm-up, capture_pair's 2
    # warm-up steps, both lengths, the eager pair), with room to spare
    max_len = context + 3 * warm + 16 + sum(steps) + (sum(eager_steps) + 2 if eager_out else 0)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    ids = torch.randint(0, config.vocab_size, (m, context), generator=g).to(dev)
    cache = transformers().StaticCache(config=config, max_cache_len=max_len)
    kv = cache_kwarg(model)
    tok = torch.zeros(m, 1, dtype=torch.long, device=dev)
    pos = torch.tensor([context], device=dev)

    def step():
        with torch.profiler.record_function(MOD_PREFIX + STEP_LABEL):
            out = model(input_ids=tok, **{kv: cache}, cache_position=pos, use_cache=True)
            tok.copy_(out.logits[:, -1:].argmax(-1))
            pos.add_(1)

    with torch.inference_mode():
        out = model(input_ids=ids, **{kv: cache}, use_cache=True,
                    cache_position=torch.arange(context, device=dev))
        tok.copy_(out.logits[:, -1:].argmax(-1))
        # With a graph, the eager step only labels the replay's kernels: its plans must run
        # the graph's kernels (no eager one-launch variant, nn/plan.py; they stay so after)
        same = _plan.same_kernels_as_graphs() if graph else contextlib.nullcontext()
        with same:
            for _ in range(warm):  # plans, autotuning, lazy init
                step()
            with ModuleRanges(model):
                eager = _profile_kernels(step, dev.type)
        e_names, e_fqns = kernel_modules(eager)
        if graph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(warm):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            cuda_graph = graph_edges.new_graph()
            with graph_edges.capture(cuda_graph):  # as generate.py's graphs run
                step()
            cuda_graph.replay()
            one = _profile_kernels(cuda_graph.replay, "cuda")
            g_names = [one.kernels.name(i) for i in range(len(one.kernels))]
            fqns, guessed = align(e_names, e_fqns, g_names)
            names = g_names

            def run_steps(n: int) -> float:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(n):
                    with step_range():
                        cuda_graph.replay()
                end.record()
                end.synchronize()
                return start.elapsed_time(end)
        else:
            names, fqns, guessed = e_names, e_fqns, 0

            def run_steps(n: int) -> None:
                for _ in range(n):
                    with step_range():
                        step()

        mo = model_ops(model, names, fqns, m, dev.type)
        ceiling = None
        if dev.type == "cuda":
            from ..tuning.ceiling import measure_read_ceiling

            ceiling = measure_read_ceiling(dev)
        fp8 = _fp8_modules(model)
        meta = {
            "arm": arm, "model": model_name, "m": m, "read_ceiling_gbps": ceiling,
            "kind": "hf-model", "mode": "cuda-graph" if graph else "eager",
            "model_type": config.model_type, "num_hidden_layers": config.num_hidden_layers,
            "context": context, "backend": backend,
            "fp8_modules": len(fp8),
            "merged_groups": dict(collections.Counter(
                r["merged"] for r in getattr(model, "fp8tower_merges", []) if r["merged_ok"])),
            "eager_kernels_per_step": len(e_names), "kernels_per_step": len(names),
            "labelled_by_neighbour": guessed,
            "expected_launches": mo.expected,
        }
        if merge:  # groups the arm asked to merge that could not (and why the first not)
            meta["unmerged_groups"] = len(unmerged)
            if unmerged:
                meta["unmerged_reason"] = f"{first['parent']}.{first['merged']}: {first['reason']}"
        if dev.type == "cuda":  # CPU op times on a shared CPU: the two-length difference is
            meta["min_attributed_share"] = 0.99  # noise-dominated (seen < 0 on 2 cores)
        result = capture_pair(run_steps, mo.ops, steps, out_dir, meta, device=dev.type,
                              force=force)
        if eager_out is not None and graph:
            def run_eager(n: int) -> None:
                for _ in range(n):
                    with step_range():
                        step()

            eo = model_ops(model, e_names, e_fqns, m, dev.type)
            emeta = {**meta, "arm": f"{arm} (eager)", "mode": "eager",
                     "kernels_per_step": len(e_names), "labelled_by_neighbour": 0,
                     "expected_launches": eo.expected}
            capture_pair(run_eager, eo.ops, eager_steps, eager_out, emeta, device=dev.type,
                         force=force)
    return result
