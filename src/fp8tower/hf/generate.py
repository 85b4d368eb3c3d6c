"""End-to-end decode of a transformers model, arm by arm (`fp8tower bench generate`).

The model is built from a config (a shipped name: qwen3-8b, qwen3.5-27b, tiny-hybrid; or a
local directory / config.json) with random bf16 weights created directly on the target
device. Per batch size: prefill ``context`` tokens into a StaticCache, then time decode
steps eagerly (``rounds`` rounds of ``steps`` steps back to back, one synchronize at the end
of each; the median round; interleaved across arms, see :func:`run_arms`) and, on a GPU, as
replays of one decode step captured in a torch.cuda.CUDAGraph (argmax and the position bump
inside; ``rounds`` rounds of ``steps`` replays, each replay timed by its own CUDA events, the
median replay; interleaved across arms as the eager rounds, see :func:`graph_rounds`). With
``compile=True`` each arm's decode step is ``torch.compile``d (Inductor, default mode) after
its eager warm-up: the eager rounds then time the compiled step without a graph, and the
graph captures the compiled step (torchao's float8 is meant to run compiled: its
quantization kernels are fused only there). An eager step is host-bound, and the host
drifts (the same bf16 arm measured 32.3 and 48.7 ms/step in two runs on the H200 machine,
2026-12-01, one arm after another): only arms timed side by side compare.

Each arm's prefill logits (last position) are compared with the bf16 arm's, as an SQNR in
dB: the arms share the seeded random weights and tokens, so a broken arm shows (an arm whose
logits are not finite is not timed). With random weights the FP8 arms' tokens differ from
bf16's from the first step, so tokens are not compared.

Arms: ``bf16``; ``fp8:<scheme>`` (the decoder layers' nn.Linear swapped for Fp8Linear,
unmerged, except those FP8 checkpoints keep in bf16: ``convert``'s default filter; per_tensor
gets a static activation scale calibrated on the prefill);
``fp8:<scheme>:merged`` (fp8tower.convert with merge=True, when this fp8tower has it);
``torchao:per_row`` / ``torchao:per_tensor`` (torchao float8 dynamic activation + weight,
when torchao is installed); ``transformers:block128`` (transformers' own FP8Linear, when its
matmul kernel loads). An arm that cannot run is recorded with its reason.

transformers is imported lazily (optional dependency).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from .. import graph_edges
from . import random_model as _rm  # looked up at call time: tests replace its functions

SCHEMA = "fp8tower.bench.generate/1"
ARM_HELP = ("bf16, fp8:<scheme>[:merged] (scheme: per_tensor, channel_token, block128, "
            "weight_only), torchao:per_row, torchao:per_tensor, transformers:block128")


class ArmSkipped(Exception):
    """An arm that cannot run here; the message says why."""


@dataclass
class GenerateResult:
    arm: str
    batch: int
    context: int
    steps: int
    eager_ms: float | None = None  # median of the eager rounds
    eager_min_ms: float | None = None  # the fastest round (host noise only adds)
    eager_rounds_ms: list[float] = field(default_factory=list)
    graph_ms: float | None = None  # the median replay over every graph round
    graph_rounds_ms: list[float] = field(default_factory=list)  # each round's median replay
    eager_tok_s: float | None = None
    graph_tok_s: float | None = None
    prefill_ms: float | None = None
    compile_s: float | None = None  # compile=True: the first compiled steps (WARM), wall clock
    # the prefill's last-position logits against the bf16 arm's (same seeded weights, same
    # tokens): SQNR in dB, 20*log10(|bf16| / |arm - bf16|); None without a bf16 arm
    logits_sqnr_db_vs_bf16: float | None = None
    logits_finite: bool | None = None
    linears_swapped: int = 0
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)


def decoder_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """The nn.Linear modules of the decoder layers that every FP8 arm converts: not lm_head,
    not embeddings, and not those FP8 checkpoints keep in bf16 (``convert``'s default filter:
    e.g. the GDN's in_proj_a / in_proj_b, MoE routers by name or shape, what transformers
    keeps in fp32), so all arms convert the same set."""
    from .conversion import default_filter_for

    accept = default_filter_for(model)
    return [(name, mod) for name, mod in model.named_modules()
            if isinstance(mod, nn.Linear) and ".layers." in f".{name}" and accept(mod, name)]


def _set(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def calibrate(model: nn.Module, names: list[str], run) -> dict[str, float]:
    """Input amax / 448 of each named linear over ``run()`` (a static per-tensor scale)."""
    scales: dict[str, float] = {}
    hooks = []
    for name in names:
        def hook(mod, args, name=name):
            a = float(args[0].detach().abs().amax().float())
            scales[name] = max(scales.get(name, 0.0), a / 448.0, 1e-12)
        hooks.append(model.get_submodule(name).register_forward_pre_hook(hook))
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return scales


def swap_fp8(model: nn.Module, scheme: str, backend: str, scales: dict[str, float] | None) -> int:
    """Replace the decoder's nn.Linear by Fp8Linear (unmerged); the count."""
    from ..nn.linear import Fp8Linear

    count = 0
    for name, lin in decoder_linears(model):
        act = scales.get(name) if scales is not None else None
        _set(model, name, Fp8Linear.from_linear(lin, scheme, act_scale=act, backend=backend))
        count += 1
    return count


def check_arm(arm: str) -> tuple[str, ...]:
    """``arm`` split at its colons, or a ValueError naming it (no model is needed)."""
    from ..formats import Scheme

    parts = tuple(arm.split(":"))
    if parts == ("bf16",) or parts in (("torchao", "per_row"), ("torchao", "per_tensor"),
                                       ("transformers", "block128")):
        return parts
    if parts[0] == "fp8" and len(parts) in (2, 3) and parts[2:] in ((), ("merged",)):
        try:
            Scheme.parse(parts[1])
        except ValueError:
            raise ValueError(f"arm {arm!r}: unknown scheme {parts[1]!r}; arms are "
                             f"{ARM_HELP}") from None
        return parts
    raise ValueError(f"unknown arm {arm!r}: arms are {ARM_HELP}")


def apply_arm(model: nn.Module, arm: str, backend: str, calib) -> tuple[int, list[str]]:
    """Turn the bf16 model into ``arm`` in place; (linears swapped, notes)."""
    from ..formats import Scheme

    parts = check_arm(arm)
    if parts[0] == "bf16":
        return 0, []
    if parts[0] == "fp8":
        scheme = Scheme.parse(parts[1])
        merged = len(parts) == 3
        names = [n for n, _ in decoder_linears(model)]
        scales = calibrate(model, names, calib) if scheme is Scheme.PER_TENSOR else None
        count = swap_fp8(model, scheme.value, backend, scales)
        if merged:  # the family's siblings (same input, so the same calibrated scale) merged
            # by the family's patch on the swapped model (convert refuses a converted model,
            # and takes no per-linear calibrated scales)
            from .conversion import merge_family

            records = merge_family(model)
            if not records:  # a family without merge groups (hf/families.py)
                why = f"{type(model).__name__}: no sibling groups to merge (same as unmerged)"
                return count, [why]
            done = [r for r in records if r.get("merged_ok")]
            kept = sum(1 for r in records if r.get("kept"))  # all members kept bf16
            return count, [f"{len(done)} of {len(records) - kept} sibling groups merged"]
        return count, []
    if parts[0] == "torchao":
        _torchao_float8()
        from torchao.quantization import (
            Float8DynamicActivationFloat8WeightConfig,
            PerRow,
            PerTensor,
            quantize_,
        )

        gran = PerRow() if parts[1] == "per_row" else PerTensor()
        decoder = {id(m) for _, m in decoder_linears(model)}
        quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=gran),
                  filter_fn=lambda mod, fqn: id(mod) in decoder)
        return len(decoder), [f"torchao {_version('torchao')}"]
    return swap_transformers_fp8(model), [f"transformers {_version('transformers')} FP8Linear"]


def _torchao_float8() -> None:
    """ArmSkipped where torchao's float8 quantization is not importable."""
    try:
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig  # noqa: F401
    except ImportError as e:
        raise ArmSkipped(f"torchao float8 is not importable here ({e}; pip install torchao, "
                         "a comparison arm only)") from None


@functools.cache  # arm_unavailable, then the swap: one kernel load (a failure is not cached)
def _transformers_fp8():
    """transformers' finegrained_fp8 module with its matmul kernel loaded, else ArmSkipped."""
    try:
        from transformers.integrations import finegrained_fp8 as tf8
    except ImportError as e:
        raise ArmSkipped(f"transformers has no finegrained_fp8 integration here ({e})") from None
    if not tf8.is_deepgemm_loadable():
        try:
            tf8.load_finegrained_fp8_kernel()
        except Exception as e:  # noqa: BLE001 - a hub download, an import, a build mismatch
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise ArmSkipped("transformers' FP8 matmul kernel does not load here: "
                             + (first if len(first) <= 300 else first[:299] + "…")) from None
    return tf8


def arm_unavailable(arm: str) -> str | None:
    """Why ``arm`` cannot run here, found before its model is built (None: it may). Session
    41 (H100 80 GB, every default arm interleaved): at batch 1 transformers:block128 built
    its 16.4 GB bf16 model only to find its kernel missing; at batch 8 that model was refused
    for memory, the error naming an arm that could not have run anyway."""
    parts = check_arm(arm)
    try:
        if parts[0] == "torchao":
            _torchao_float8()
        elif parts[0] == "transformers":
            _transformers_fp8()
    except ArmSkipped as e:
        return str(e)
    return None


def swap_transformers_fp8(model: nn.Module) -> int:
    """transformers' own FP8 path for block128 (FineGrainedFP8: Qwen/DeepSeek FP8
    checkpoints): its FP8Linear, 128x128 weight blocks, dynamic per-token-group activations,
    with our block128 quantization of the weights (weight_scale_inv is the dequantization
    multiplier, as in those checkpoints). Its matmul comes from the kernels hub
    (``kernels-community/finegrained-fp8``) or DeepGEMM; where neither loads, ArmSkipped."""
    tf8 = _transformers_fp8()
    from ..formats import quantize_weight

    count = 0
    for name, lin in decoder_linears(model):
        w = quantize_weight(lin.weight.detach(), "block128")
        new = tf8.FP8Linear(lin.in_features, lin.out_features, block_size=(128, 128),
                            has_bias=lin.bias is not None).to(lin.weight.device)
        with torch.no_grad():
            new.weight = nn.Parameter(w.data, requires_grad=False)
            new.weight_scale_inv = nn.Parameter(w.scale.float(), requires_grad=False)
            if lin.bias is not None:
                new.bias = nn.Parameter(lin.bias.detach().clone(), requires_grad=False)
        _set(model, name, new)
        count += 1
    return count


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


WARM = 3  # eager steps before timing: they build the launch plans (and tune where allowed)
COMPILE_BACKEND = "inductor"  # torch.compile's backend for compile=True (tests: a cheaper one)


@dataclass
class _Live:
    """One arm's model, ready to decode: ``step(tok, pos)`` -> next tokens."""

    res: GenerateResult
    model: Any = None
    cache: Any = None
    step: Any = None
    tok: Any = None
    pos: Any = None
    rounds_ms: list[float] = field(default_factory=list)
    logits: Any = None  # the prefill's last-position logits, float32 on the CPU
    graph: Any = None  # (graph, its token and position buffers, its first position)
    graph_rounds_ms: list[list[float]] = field(default_factory=list)  # ms of each replay


def build_arm(model_name: str, arm: str, *, batch: int, context: int, steps: int, rounds: int,
              device: torch.device, backend: str, config=None, compile: bool = False) -> _Live:
    """Build the model, convert it to ``arm``, prefill (timed) and take WARM eager steps;
    with ``compile``, then ``torch.compile`` the step and take WARM compiled steps (timed:
    ``compile_s``). A step that fails to compile skips the arm, with the error."""
    from .requires import transformers

    StaticCache = transformers().StaticCache
    live = _Live(GenerateResult(arm, batch, context, steps))
    res = live.res
    res.skipped = arm_unavailable(arm)
    if res.skipped is not None:
        return live
    config = config if config is not None else _rm.text_config(model_name)
    model = _rm.random_model(config, device)
    # every position a step can reach: warm-up, the eager rounds, the graph's warm-up,
    # capture and timed replays
    max_len = context + WARM + rounds * steps + 4 * WARM + steps + 8
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (batch, context), generator=g).to(device)
    cache = StaticCache(config=config, max_cache_len=max_len)
    kv = _rm.cache_kwarg(model)

    def prefill():
        cache.reset()
        out = model(input_ids=ids, **{kv: cache}, use_cache=True,
                    cache_position=torch.arange(context, device=device))
        return out.logits[:, -1:]

    with torch.inference_mode():
        try:
            res.linears_swapped, res.notes = apply_arm(model, arm, backend, prefill)
        except ArmSkipped as e:
            res.skipped = str(e)
            return live
        prefill()
        _sync(device)
        t0 = time.perf_counter()
        logits = prefill()
        _sync(device)
        res.prefill_ms = (time.perf_counter() - t0) * 1e3
        live.logits = logits[:, 0].float().cpu()
        res.logits_finite = bool(torch.isfinite(live.logits).all())
        tok = logits.argmax(-1)
        pos = torch.tensor([context], device=device)

        def step(tok, pos):
            out = model(input_ids=tok, **{kv: cache}, cache_position=pos, use_cache=True)
            return out.logits[:, -1:].argmax(-1)

        for _ in range(WARM):
            tok = step(tok, pos)
            pos += 1
        _sync(device)
        if compile:
            step = torch.compile(step, backend=COMPILE_BACKEND, dynamic=False)
            t0 = time.perf_counter()
            try:
                for _ in range(WARM):
                    tok = step(tok, pos)
                    pos += 1
                _sync(device)
            except Exception as e:  # noqa: BLE001 - any compile failure: say it, time the rest
                why = " ".join(str(e).split())  # Dynamo's errors span lines
                res.skipped = f"torch.compile failed: {type(e).__name__}: {why[:300]}"
                return live
            res.compile_s = round(time.perf_counter() - t0, 2)
    live.model, live.cache, live.step, live.tok, live.pos = model, cache, step, tok, pos
    return live


def _timing(live: _Live):
    """Around a compiled step's timed calls: a recompile raises (its compile time would be
    timed as a step); it skips the arm in an eager round, and the graph time in finish.
    Every arm's step is one code object to Dynamo, so bench_generate makes room for a
    compiled entry per arm and batch: past the default recompile_limit (8), the ninth one's
    step ran uncompiled with only a warning (test_generate's compile tests)."""
    if live.res.compile_s is None:
        return contextlib.nullcontext()
    return torch._dynamo.config.patch(error_on_recompile=True)


def _recompile_error(live: _Live) -> tuple[type[BaseException], ...]:
    """What a compiled arm's timed step raises on a recompile (nothing for an eager arm)."""
    return () if live.res.compile_s is None else (torch._dynamo.exc.RecompileError,)


def _recompiled_why(e: BaseException) -> str:
    why = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return f"recompiled while timed (a recompile is not a decode step): {why[:300]}"


def _skip_recompiled(live: _Live, e: BaseException) -> None:
    """A recompile in an eager round skips the arm with Dynamo's reason; the others go on."""
    live.res.skipped = _recompiled_why(e)
    live.rounds_ms.clear()


def eager_round(live: _Live, device: torch.device) -> None:
    """``steps`` eager decode steps back to back, one synchronize at the end; ms per step."""
    if live.res.skipped is not None:  # interleaved: it recompiled in an earlier round
        return
    try:
        with torch.inference_mode(), _timing(live):
            tok, pos = live.tok, live.pos
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(live.res.steps):
                tok = live.step(tok, pos)
                pos += 1
            _sync(device)
            live.rounds_ms.append((time.perf_counter() - t0) * 1e3 / live.res.steps)
    except _recompile_error(live) as e:
        _skip_recompiled(live, e)
        return
    live.tok, live.pos = tok, pos


def finish(live: _Live, device: torch.device, graph: bool = False) -> GenerateResult:
    """The eager median over rounds and the graph's median replay (:func:`graph_rounds`);
    frees the model. ``graph``: time the CUDA graph here, alone (GPU), where no
    graph_rounds did (a caller holding one arm)."""
    res = live.res
    if (graph and device.type == "cuda" and res.skipped is None and live.rounds_ms
            and not live.graph_rounds_ms):
        graph_rounds([live], len(live.rounds_ms))
    if res.skipped is None and live.rounds_ms:  # a broken arm (logits not finite): no rounds
        res.eager_rounds_ms = [round(v, 3) for v in live.rounds_ms]
        res.eager_ms = statistics.median(live.rounds_ms)
        res.eager_min_ms = min(live.rounds_ms)
        res.eager_tok_s = res.batch * 1e3 / res.eager_ms
        if live.graph_rounds_ms:
            res.graph_ms = statistics.median(v for r in live.graph_rounds_ms for v in r)
            res.graph_rounds_ms = [round(statistics.median(r), 4) for r in live.graph_rounds_ms]
            res.graph_tok_s = res.batch * 1e3 / res.graph_ms
    if res.skipped is None and not res.logits_finite:
        res.notes.append("prefill logits not finite: the arm is broken, so it was not timed")
    live.model = live.cache = live.step = live.graph = None  # free the weights
    _release(device)
    return res


def _release(device: torch.device) -> None:
    """Free what dropped models held now: their reference cycles (left to the collector, the
    next arm's eager steps would pay for scanning them: later arms ran slower, one at a time,
    in results/profile_eager_qwen3-8b_H200_2026-12-01.json) and the allocator's cached blocks."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_arms(model_name: str, arms: list[str], *, batch: int, context: int, steps: int,
             rounds: int, device: torch.device, backend: str, graph: bool, interleave: bool,
             config=None, progress=None, note=None, compile: bool = False
             ) -> list[GenerateResult]:
    """Every arm at one batch size. Interleaved: all arms are built first (bf16 last: it is
    the largest), then ``rounds`` eager rounds go arm after arm, the order reversed every
    other round (ABBA: with A,B,A,B a linear drift favours the arm first in each round), so
    drifts of the host (clock, cache, allocator state) fall on every arm alike; the eager
    time is the median round; then (``graph``, GPU) the graph rounds, alike
    (:func:`graph_rounds`). Not interleaved: one arm at a time (for models too large to hold
    every arm at once).
    ``progress(result)`` is called as each arm finishes, ``note(text)`` as each interleaved
    arm is built (minutes, for a large model, before any arm finishes)."""
    kw = {"batch": batch, "context": context, "steps": steps, "rounds": rounds,
          "device": device, "backend": backend, "config": config, "compile": compile}
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms {','.join(arms)}: an arm is listed twice")
    results: dict[str, GenerateResult] = {}
    logits: dict[str, torch.Tensor] = {}

    def done(live):
        if live.logits is not None:
            logits[live.res.arm] = live.logits
        results[live.res.arm] = finish(live, device)
        if progress is not None:
            progress(results[live.res.arm])

    if not interleave:
        for arm in arms:
            live = build_arm(model_name, arm, **kw)
            for _ in range(rounds if live.res.skipped is None and live.res.logits_finite else 0):
                eager_round(live, device)
            if graph and device.type == "cuda":
                graph_rounds([live], rounds)
            done(live)
    else:
        order = sorted(arms, key=lambda a: a == "bf16")  # stable: bf16 last, others as given
        lives = []
        for i, arm in enumerate(order):
            t0 = time.perf_counter()
            try:
                lives.append(build_arm(model_name, arm, **kw))
            except (_rm.NotEnoughMemory, torch.cuda.OutOfMemoryError) as e:
                # every arm first builds the same bf16 model: where the first fitted alone,
                # this one does too, so only the arms held beside it are in the way
                held = [lv.res.arm for lv in lives if lv.model is not None]
                if not held:
                    raise
                lives.clear()  # free them before the error reaches the user
                _release(device)
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise _rm.NotEnoughMemory(
                    f"arm {arm} does not fit beside the {len(held)} arm(s) built before it and "
                    f"held for the interleaved rounds ({', '.join(held)}): {why}. Pass "
                    "--one-at-a-time (one arm held at a time; its eager rounds then run arm "
                    "after arm) or fewer --arms") from None
            if note is not None:
                skipped = lives[-1].res.skipped
                note(f"built {arm} (batch {batch}, {i + 1} of {len(order)}) in "
                     f"{time.perf_counter() - t0:.0f} s" if skipped is None else
                     f"skipped {arm} (batch {batch}, {i + 1} of {len(order)}): {skipped}")
        ready = [lv for lv in lives if lv.res.skipped is None and lv.res.logits_finite]
        for r in range(rounds):
            for lv in ready if r % 2 == 0 else ready[::-1]:
                eager_round(lv, device)
        if graph and device.type == "cuda":
            graph_rounds(ready, rounds)
        for lv in lives:
            done(lv)
    ref = logits.get("bf16")
    if ref is not None:
        from ..formats import sqnr_db

        for arm, out in logits.items():
            results[arm].logits_sqnr_db_vs_bf16 = round(sqnr_db(ref, out), 2)
    return [results[a] for a in arms]


def graph_rounds(lives: list[_Live], rounds: int) -> None:
    """CUDA-graph times of ``lives`` (GPU): every arm's step captured first (a recompile then
    leaves that arm without a graph time, with a note), then ``rounds`` rounds, each
    replaying every arm's graph ``steps`` times from the same position, arm after arm, the
    order reversed every other round (as the eager rounds); each replay bracketed by its own
    CUDA events (live.graph_rounds_ms). Before (2026-12-06 audit): one event pair over
    ``steps`` replays (their mean), each arm's replays all after the previous arm's."""
    held = []
    for lv in lives:
        if lv.res.skipped is not None or not lv.rounds_ms:  # skipped, or recompiled eagerly
            continue
        try:
            with torch.inference_mode(), _timing(lv):
                lv.graph = _capture_decode(lv.step, lv.tok, lv.pos, WARM)
            held.append(lv)
        except _recompile_error(lv) as e:  # the eager rounds stand; no graph time
            lv.res.notes.append(f"no graph time: {_recompiled_why(e)}")
        except torch.cuda.OutOfMemoryError:  # every arm's graph is held at once: this one's pool
            lv.graph = None  # did not fit beside the others (a review, 2026-12-06)
            _release(lv.tok.device)
            lv.res.notes.append("no graph time: out of memory capturing it beside the other "
                                "arms' graphs (--one-at-a-time times each arm alone)")
    with torch.inference_mode():  # the buffers are inference tensors: rewound in place
        for r in range(rounds):
            for lv in held if r % 2 == 0 else held[::-1]:
                lv.graph_rounds_ms.append(_replays_ms(lv.graph, lv.res.steps))
    for lv in held:
        lv.graph = None  # its memory pool


def _capture_decode(step, tok, pos, warm: int) -> tuple:
    """One decode step captured (argmax, position bump inside) and replayed ``warm`` times:
    (graph, its token and position buffers, the position its timed replays start from)."""
    s_tok, s_pos = tok.clone(), pos.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on the capture stream
        for _ in range(warm):
            s_tok.copy_(step(s_tok, s_pos))
            s_pos += 1
    torch.cuda.current_stream().wait_stream(side)
    graph = graph_edges.new_graph()
    with graph_edges.capture(graph):  # PDL edges launch early (graph_edges.py)
        s_tok.copy_(step(s_tok, s_pos))
        s_pos += 1
    for _ in range(warm):
        graph.replay()
    torch.cuda.synchronize()
    return graph, s_tok, s_pos, s_pos.clone()


def _replays_ms(captured: tuple, steps: int) -> list[float]:
    """ms of each of ``steps`` replays of a :func:`_capture_decode` graph, from its first
    position (every round decodes the same positions: the cache holds ``steps`` of them)."""
    from ..tuning.timer import event_times_ms

    graph, _, s_pos, first = captured
    s_pos.copy_(first)
    return event_times_ms(graph.replay, steps)


def _version(package: str) -> str:
    from ..provenance import package_version

    return package_version(package, "not installed")


def provenance(command: str, device: torch.device) -> dict[str, Any]:
    """The run's record: fp8tower's one provenance record (provenance.record), its versions
    grouped, plus the transformers and torchao versions this benchmark depends on, and the
    code that ran (git commit, dirty tree, package code hash)."""
    from .. import provenance as prov

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    rec = prov.record(gpu_name=gpu)
    keys = ("fp8tower", "python", "torch", "cuda", "triton", "driver", "cudnn",
            "cudnn_frontend", "cutlass")
    versions = {k: rec[k] for k in keys if k in rec}
    versions.update(transformers=_version("transformers"), torchao=_version("torchao"),
                    fla_core=_version("fla-core"), causal_conv1d=_version("causal-conv1d"))
    return {"date": rec["date"], "command": command, "device": str(device), "gpu": gpu,
            "host": rec["host"], "versions": versions, "env": rec["env"],
            "tuning_cache": rec["tuning_cache"], "linear_attention_kernels": gdn_kernels(),
            **{k: rec[k] for k in ("git_commit", "git_dirty", "package_code")}}


def gdn_kernels() -> dict[str, str]:
    """Which implementation transformers picks for the gated-delta-net core and its causal
    conv1d (Qwen3.5/Qwen3-Next): the package's kernels when it imports, else transformers'
    PyTorch fallback. transformers resolves them when its modeling module is imported, by the
    same import tried here."""
    import importlib

    out = {}
    for what, module in (("gated_delta_rule", "fla.ops.gated_delta_rule"),
                         ("causal_conv1d", "causal_conv1d")):
        try:
            importlib.import_module(module)
            out[what] = f"{module} (package kernels)"
        except Exception as e:  # noqa: BLE001 - any import failure means the fallback runs
            out[what] = f"transformers' PyTorch fallback ({module}: {type(e).__name__})"
    return out


def bench_generate(model: str, arms: list[str], batches: list[int], *, context: int, steps: int,
                   device: str, backend: str, graph: bool, command: str, rounds: int = 5,
                   interleave: bool = True, progress=None, note=None,
                   compile: bool = False) -> dict:
    """Every (arm, batch); the JSON record (schema ``SCHEMA``). See :func:`run_arms`."""
    dev = torch.device(device)
    config = _rm.text_config(model)
    results = []
    # every arm's step is one code object to Dynamo: room for a compiled entry per arm and
    # batch (see _timing), and an error, never an uncompiled step, past it
    room = torch._dynamo.config.patch(
        recompile_limit=max(64, 2 * len(arms) * len(batches)),
        fail_on_recompile_limit_hit=True) if compile else contextlib.nullcontext()
    with room:
        for batch in batches:
            results += run_arms(model, arms, batch=batch, context=context, steps=steps,
                                rounds=rounds, device=dev, backend=backend, graph=graph,
                                interleave=interleave, config=config, progress=progress,
                                note=note, compile=compile)
    base = {r.batch: r for r in results if r.arm == "bf16" and r.skipped is None}
    rows = []
    for r in results:
        row = asdict(r)
        b = base.get(r.batch)
        sq = row["logits_sqnr_db_vs_bf16"]
        if r.arm == "bf16" or (sq is not None and not math.isfinite(sq)):  # JSON: no inf/nan
            row["logits_sqnr_db_vs_bf16"] = None
        ok = r.logits_finite is not False  # a broken arm's speed is no speedup
        for kind in ("eager", "graph"):
            ms, bms = getattr(r, f"{kind}_ms"), getattr(b, f"{kind}_ms", None) if b else None
            row[f"{kind}_speedup_vs_bf16"] = round(bms / ms, 3) if ms and bms and ok else None
        # Interleaved rounds i of two arms ran back to back: the median of their per-round
        # time ratios cancels the host's drift across rounds (arm / bf16: > 1 is slower)
        for kind in ("eager", "graph"):
            pairs = list(zip(getattr(r, f"{kind}_rounds_ms"), getattr(b, f"{kind}_rounds_ms"))
                         ) if b and interleave else []
            row[f"{kind}_paired_ratio_vs_bf16"] = (
                round(statistics.median(a / c for a, c in pairs), 3) if pairs else None)
        rows.append(row)
    return {
        "schema": SCHEMA, "model": model, "model_type": config.model_type,
        "context": context, "steps": steps, "rounds": rounds, "interleaved": interleave,
        "backend": backend, "compiled": compile,
        "units": {"ms": "milliseconds per decode step (eager: wall clock over `steps` steps "
                        "with one sync at the end, median of `rounds` rounds (eager_min_ms: "
                        "the fastest round), interleaved "
                        "across arms when `interleaved`; graph: the median replay, each "
                        "timed by CUDA events, over `rounds` rounds of `steps` replays "
                        "(graph_rounds_ms: each round's median), interleaved alike; "
                        "when `compiled`, both time the torch.compile'd step)",
                  "compile_s": "seconds of the first compiled steps (compilation included)",
                  "tok_s": "batch tokens per second"},
        **provenance(command, dev), "rows": rows,
    }
