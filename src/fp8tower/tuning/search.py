"""The tuner: :func:`tune_problem` searches backend x config with a pruning rule documented
there, and returns an :class:`~fp8tower.tuning.cache.Entry`: the winner plus the evidence
(every candidate's median time and GB/s, failures with their message, what was pruned, the
date)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..formats import (
    FP8_DTYPE,
    Fp8Weight,
    Scheme,
    quantize_activation,
    sqnr_db,
    weight_scale_shape,
)
from ..kernels.layout import tile_major_enabled
from ..problem import GemmProblem
from ..provenance import now_iso
from .cache import Entry, Measurement, extra_weight_copy, normalize_config
from .timer import MakeCall, Timer, Timing, l2_cache_bytes, rotation_copies, time_cuda_graph

# The oracle is correct, never fast: it is never timed, only taken as the last safe default.
# reference: the oracle. stream: ahead of the Triton kernels by up to 2% on the big 27B
# shapes but behind on the N = 5120 ones and 0.88-0.93x in the merged tower (H200
# 2026-12-01, results/stream_H200_2026-12-01/ws/, results/tile_major_H200_2026-12-01/):
# served when named (backend="stream"), not timed by auto, so tuning does not pay its build
# and timings. Its cluster split (session 13) wins GEMM after GEMM but after an elementwise
# kernel launched without PDL still loses (chains of 8 GEMMs: 104.9-107.4 us against
# 93.2-94.5, results/cluster_split_H200_2026-12-01/; those chains were captured without
# early launch and synchronized after each replay, bench_chain's timer before session 35:
# to re-time; the merged-tower ratio above was captured with it).
TUNING_EXCLUDED = frozenset({"reference", "stream"})
# Explore the configs of backends whose default is within this factor of the best default.
PRUNE_RATIO = 1.3
# At most this many non-default configs per backend, evenly spaced over its list (a config
# grid's order says nothing about likelihood; the triton backend lists ~35-820 per problem).
MAX_CONFIGS = 16
# Seeded tuning: M buckets that share a seed group (Triton's BLOCK_M: 16 for M <= 16) took the
# same winner on the H200 in 18 of 20 (shape, scheme) groups at M = 1..16; in the other two,
# M = 1's choice was at most 3.7% and 0.2% slower (benchmarks/cache_evidence.py ->
# results/tuning_cache_evidence_H200_2026-11-29.json). So once one bucket of a group is
# fully tuned, its siblings time the backends' defaults and its SEED_TOP best instead of a
# sample (and, as every key, the winners of other groups: _neighbour_shortlist).
SEED_TOP = 3
# Step (3) refines the winner and each other backend's best within this factor of the
# fastest: refinements gained up to 1.19x (weight_only 10240x5120 at M = 32 on an H100,
# 0.843x the tuner without its twins, results/session58_2026-12-07/c9/), and a runner-up's
# were lost where a library won by a hair (per_tensor 10240x5120 at M = 32 on an H100:
# CUTLASS 23.05 us, cuBLASLt 23.35 served, Triton's best 23.44 never refined; its x twin ran
# 21.12 in session 58's tune, results/session59_2026-12-07/tw132/). A/B on an H100, the
# tower's 18 per_tensor / weight_only keys at M = 32 tuned from cold (r/): +3 timings (0.6%),
# none of them won there (Triton won 10240x5120 itself that time); sum of GEMM times 0.999x.
REFINE_RATIO = 1.2
# Every timed candidate's output against the reference (the numerics contract, SQNR in dB):
# a config that runs but computes wrong numbers is recorded as failed, never a choice.
CHECK_SQNR_DB = 40.0
# In a model most GEMMs read an input written by some other kernel (a norm, an activation,
# a residual add), launched without PDL; some follow another GEMM directly (the merged
# tower's out_proj -> next in_proj). A chain of GEMMs alone lets launch overlaps look better
# than a model sees them; a writer before every GEMM hides what they buy where GEMMs are
# adjacent (H200 2026-12-01, results/tile_major_H200_2026-12-01/: the merged 27B tower tuned
# GEMM-only ran M = 32 13% over M = 1, tuned with a writer before every GEMM 3-6% (per_tensor,
# channel_token), but M = 1 2-6% slower). So on the GPU the timed chain alternates the two: before every
# WRITE_X_EVERY-th GEMM a small elementwise kernel writes x; that writer alone is timed once
# per problem and its share subtracted (ranking unchanged by it, times comparable with a
# GEMM alone). 0: GEMMs alone. 1 against 2 on an H100 (results/session64_2026-12-07/wx/):
# per_tensor's step 0.994-0.997x, channel_token's at M = 1 1.041x slower (its chain hid what
# an in-GEMM amax costs after a real predecessor; the chain with 2 and the step did not).
WRITE_X_EVERY = 2


def seed_group(bucket: int) -> int:
    """Buckets with equal seed groups share their tuning (see SEED_TOP)."""
    return min(max(bucket, 16), 64)


def gpu_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean 'this candidate cannot run here' (caught while tuning)."""
    from ..backends.cutlass import CutlassError  # a CUTLASS build or launch failure
    from ..backends.stream import StreamError  # the stream kernel's build or launch failure

    errors: list[type[BaseException]] = [torch.cuda.OutOfMemoryError, CutlassError, StreamError]
    if importlib.util.find_spec("triton") is not None:
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import OutOfResources

        errors += [CompilationError, OutOfResources]
        try:
            from triton.runtime.errors import PTXASError
        except ImportError:  # older triton
            pass
        else:
            errors.append(PTXASError)
    return tuple(errors)


# A Triton CompilationError that names one of these is a bug in the kernel's source (a typo,
# a wrong type), which every config hits; caught as "cannot run here" it made auto serve
# another backend without a word.
_SOURCE_ERRORS = re.compile(r"\b(NameError|TypeError|AttributeError|SyntaxError|"
                            r"UnboundLocalError|IndentationError)\b")


def is_source_error(e: BaseException) -> bool:
    """Whether a caught build error is a programming error in a kernel's source (propagated
    by the tuner: only GPU errors are caught while tuning)."""
    if type(e).__name__ != "CompilationError":
        return False
    return bool(_SOURCE_ERRORS.search(str(getattr(e, "error_message", None) or e)))


def tuning_operands(
    problem: GemmProblem, device: torch.device, n_copies: int, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor | None, list[Fp8Weight]]:
    """Random activations (M, K) and ``n_copies`` distinct copies of a random FP8 weight.

    The weight is random FP8 data (randn cast: finite, within +-5) with random positive
    scales of the scheme's shapes; a static per-tensor activation scale when the problem
    says so (``static_act_scale``), else dynamic. FP8 activations come with the scales the
    scheme's activation quantization gives them (formats.quantize_activation, what
    act_quant.for_gemm expects): per_tensor one, channel_token (M,), block128 (M, K/128). A
    scalar for every scheme crashed cuBLASLt's block-wise call (IndexError) and timed
    channel_token with a broadcast scalar. Copies share values but not memory (the L2 is
    physically addressed).
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    m, n, k = problem.m, problem.n, problem.k
    act_scale = None
    if problem.act_dtype == FP8_DTYPE:
        if problem.scheme is Scheme.WEIGHT_ONLY:
            raise ValueError(f"{problem.key()}: weight_only takes bf16/fp16/fp32 activations, "
                             "not float8_e4m3fn")
        src = torch.randn(m, k, device=device, generator=gen, dtype=torch.bfloat16)
        x, act_scale = quantize_activation(src, problem.scheme)
    else:
        x = torch.randn(m, k, device=device, generator=gen, dtype=problem.act_dtype)
    data = torch.randn(n, k, device=device, generator=gen, dtype=torch.bfloat16).to(FP8_DTYPE)
    scale_shape = weight_scale_shape(problem.scheme, n, k, channel=problem.channel_weight_scale)
    scale = torch.rand(scale_shape, device=device, generator=gen) * 1e-2 + 1e-3
    static = None
    if problem.static_act_scale and act_scale is None:
        static = torch.tensor(0.02, device=device)  # a ModelOpt-style static input scale
    weights = [Fp8Weight(data, scale, problem.scheme, static)]
    weights += [
        Fp8Weight(data.clone(), scale.clone(), problem.scheme, static) for _ in range(n_copies - 1)
    ]
    return x, act_scale, weights


def tuning_bias(problem: GemmProblem, device: torch.device, *, seed: int = 1
                ) -> torch.Tensor | None:
    """A random bias of N elements in the output dtype where the problem has one
    (``has_bias``), else None: cuBLASLt, CUTLASS and cuDNN add it with a kernel of their own,
    Triton in its epilogue, so it is timed as served."""
    if not problem.has_bias:
        return None
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(problem.n, device=device, generator=gen, dtype=problem.out_dtype)


def empty_split(problem: GemmProblem, config: Any) -> bool:
    """Whether a split-K config (Triton's: ``block_k`` and ``split_k``) leaves its last split
    without a K step: ceil(k_iters / split) * (split - 1) >= k_iters, with k_iters =
    ceil(K / block_k). Such a program only adds zeros; the same work runs at a smaller split
    (1,660 of the 15,801 Triton configs per_tensor offers on nine 27B / Llama shapes at
    M = 1..64, 10.5%, counted by the 2026-12-05 audit). Left out of what the tuner samples,
    still valid where cached (native_config): tests/test_tuning_audit.py,
    test_configs_with_an_empty_split_are_searched_not_refused."""
    if not isinstance(config, dict) or "block_k" not in config or "split_k" not in config:
        return False
    split = config["split_k"]
    k_iters = -(-problem.k // config["block_k"])
    return split > 1 and -(-k_iters // split) * (split - 1) >= k_iters


def _make_call(backend, config, x, act_scale, weights, out_dtype, write_x=None,
               bias=None) -> MakeCall:
    """Closures over weight copy i; with ``write_x``, every WRITE_X_EVERY-th call (counted
    over all copies, in launch order: what a graph captures) runs it first. ``bias``: the
    problem's bias (tuning_bias), added by every call. ``make.count``: calls and writers since
    ``make.restart()``, which time_cuda_graph calls as its capture begins (the warm-up's count
    carried into the capture: at 37 copies, 37 calls, the graph held 19 writers where 18.5
    were subtracted, 2026-12-06 audit; Chain.time subtracts the writers counted)."""
    count = {"calls": 0, "writers": 0}

    def make(i: int) -> Callable[[], Any]:
        w = weights[i]
        packed = backend.packed_for(w)  # prepared outside the timed graph

        def call():
            if write_x is not None:
                count["calls"] += 1
                if count["calls"] % WRITE_X_EVERY == 0:
                    count["writers"] += 1
                    write_x()
            return backend.run(
                x, w, packed, act_scale=act_scale, bias=bias, out_dtype=out_dtype, config=config
            )

        return call

    make.count = count
    make.restart = lambda: count.update(calls=0, writers=0)
    return make


def x_writer(x: torch.Tensor) -> Callable[[], Any]:
    """A small elementwise kernel (launched like any torch op, without PDL) that writes x
    with its own values; FP8 x: one that writes a bf16 buffer of x's shape instead."""
    if x.dtype == FP8_DTYPE:
        src = torch.ones(x.shape, dtype=torch.bfloat16, device=x.device)
        dst = torch.empty_like(src)
        return lambda: torch.mul(src, 1.0, out=dst)
    src = x.clone()
    return lambda: torch.mul(src, 1.0, out=x)


@dataclasses.dataclass
class Chain:
    """The chain a candidate is timed in: its calls over ``weights`` (rotated copies, cold L2)
    in one CUDA graph (``timer``); on a GPU an x writer (:func:`x_writer`) before every
    WRITE_X_EVERY-th call, whose share is subtracted. The tuner times every candidate here,
    and benchmarks/bench_gemm.py scores the tuned choice in the same chain (``--chain``):
    with GEMMs back to back the PDL configs the tuner chose at M = 1 ran up to 3.9 us
    slower a GEMM than here, configs without PDL the same (H200 2026-12-04,
    results/scorecard_H200_2026-12-04/call4/: per_tensor 10240x5120 14.86 us here, 18.75 back
    to back, where the untuned config ran 16.53 / 16.40), and the scorecard then judged a
    choice against a chain the tuner never timed."""

    x: torch.Tensor
    act_scale: torch.Tensor | None
    weights: list[Fp8Weight]
    out_dtype: torch.dtype
    timer: Timer
    write_x: Callable[[], Any] | None = None
    base_us: float = 0.0  # the writer's share of each call, subtracted
    bias: torch.Tensor | None = None  # added by every call (GemmProblem.has_bias)

    @classmethod
    def build(cls, x: torch.Tensor, act_scale: torch.Tensor | None, weights: list[Fp8Weight],
              out_dtype: torch.dtype, *, timer: Timer | None = None,
              writer: bool | None = None, bias: torch.Tensor | None = None) -> Chain:
        """The chain over these operands; ``writer``: with the x writer (None: on a GPU),
        False: GEMMs alone, back to back; ``bias``: every call adds it."""
        timer = timer or time_cuda_graph
        write_x, base_us = None, 0.0
        if writer is None:
            writer = x.device.type == "cuda"
        if writer and WRITE_X_EVERY:
            write_x = x_writer(x)
            base_us = timer(lambda i: write_x, len(weights)).median_us / WRITE_X_EVERY
        return cls(x, act_scale, weights, out_dtype, timer, write_x, base_us, bias)

    def time(self, backend, config) -> Timing:
        """Per-call time of ``backend`` with ``config``, the writer's share taken off."""
        make = _make_call(backend, config, self.x, self.act_scale, self.weights,
                          self.out_dtype, self.write_x, self.bias)
        t = self.timer(make, len(self.weights))
        base, n = self.base_us, make.count["calls"]
        if n:  # the writers the timed calls ran: odd calls hold (n - 1) / 2, not n / 2
            base *= WRITE_X_EVERY * make.count["writers"] / n
        return dataclasses.replace(t, median_us=max(t.median_us - base, 1e-3),
                                   min_us=max(t.min_us - base, 1e-3),
                                   max_us=max(t.max_us - base, 1e-3))


def spaced(items: list, cap: int) -> list:
    """At most ``cap`` items evenly spaced over ``items``, in order, the first included."""
    if len(items) <= cap:
        return list(items)
    return [items[i * len(items) // cap] for i in range(cap)]


def _explored(backend, problem: GemmProblem, others: list, max_configs: int) -> list:
    """What exploring ``backend`` times beyond its default: its priority configs, then at
    most ``max_configs`` of the ``others`` evenly spaced."""
    keys = [normalize_config(c) for c in backend.priority_configs(problem)]
    head = [c for c in others if normalize_config(c) in keys]
    return head + spaced([c for c in others if c not in head], max_configs)


def planned_configs(problem: GemmProblem, backend, max_configs: int = MAX_CONFIGS) -> list:
    """The configs :func:`tune_problem` times for ``backend`` when it explores (the default,
    the priority configs, the evenly spaced sample): what to build ahead of time. Not in it:
    the refinements, layout variants and neighbours' winners (built when timed)."""
    problem = dataclasses.replace(problem, m=problem.bucket)
    default = backend.default_config(problem)
    return [default, *_explored(backend, problem, _others(backend, problem, default),
                                max_configs)]


def _others(backend, problem: GemmProblem, default) -> list:
    """The backend's search space but its default and configs with an empty split
    (:func:`empty_split`): what exploring may sample."""
    key = normalize_config(default)
    return [c for c in backend.configs(problem)
            if normalize_config(c) != key and not empty_split(problem, c)]


def reference_output(chain: Chain) -> torch.Tensor:
    """The reference's float32 output on the chain's first weight copy."""
    from ..backends.reference import fp8_linear_ref

    return fp8_linear_ref(chain.x, chain.weights[0], act_scale=chain.act_scale, bias=chain.bias,
                          out_dtype=torch.float32)


def output_error(problem: GemmProblem, backend, config: dict | None, chain: Chain,
                 errors: tuple = (), ref: torch.Tensor | None = None) -> str | None:
    """Why ``backend`` with ``config`` (JSON form) computes wrong numbers on the chain's first
    weight copy (SQNR under CHECK_SQNR_DB against the reference, ``ref`` if given, or a GPU
    error), or None."""
    found, cfg = native_config(backend, problem, config)
    if not found:  # not offered for this problem (a test's fake): nothing to run it with
        return None
    w = chain.weights[0]
    try:
        y = backend.run(chain.x, w, backend.packed_for(w), act_scale=chain.act_scale,
                        bias=chain.bias, out_dtype=chain.out_dtype, config=cfg)
    except errors as e:
        return f"output check: {type(e).__name__}: {e}"[:500]
    ref = reference_output(chain) if ref is None else ref
    if tuple(y.shape) != tuple(ref.shape):
        return f"wrong output: shape {tuple(y.shape)}, expected {tuple(ref.shape)}"
    db = sqnr_db(ref, y.float())
    if db < CHECK_SQNR_DB:
        return f"wrong output: SQNR {db:.1f} dB against the reference (< {CHECK_SQNR_DB:g})"
    return None


def _seed_shortlist(seed: Entry) -> list[tuple[str, dict | None]]:
    """(backend, config) of the seed's SEED_TOP fastest candidates, and its winner (which a
    host-time tie may rank lower)."""
    out = [(c.backend, c.config) for c in seed.ranked()[:SEED_TOP]]
    win = seed.winner
    if win is not None and (win.backend, win.config) not in out:
        out.append((win.backend, win.config))
    return out


def _neighbour_shortlist(neighbours: Sequence[Entry]) -> list[tuple[str, dict | None]]:
    """(backend, config) of each neighbour's winner, each once. Neighbours are the same
    shape's tuned keys in other seed groups (M = 1-16, 32, 64 and up): exploring samples
    MAX_CONFIGS of a space of ~35-820 configs and often missed theirs. They are timed for
    every backend, one outside PRUNE_RATIO too, but are not built ahead (planned_configs):
    each compiles when timed, as refinements do. On an H100 (session 54,
    results/session54_2026-12-06/call11/) weight_only 10240x5120 took BLOCK_K 512 on 3 stages
    at M = 32 (25.8 us), never timing M = 16's BLOCK_K 256 on 4 (21.7 us at M = 16); in
    session 37's H200 cache (results/session37_H200_2026-12-05/callAB/cache_retuned.json) six
    weight_only M = 32 keys of the 27B tower, per_tensor's 10240x5120 and block128's
    5120x6144 had not timed their M = 16 winner, which they serve at M = 32."""
    out: list[tuple[str, dict | None]] = []
    for e in neighbours:
        if e.ranked() and (e.winner.backend, e.winner.config) not in out:
            out.append((e.winner.backend, e.winner.config))
    return out


def _seeded_configs(backend, problem: GemmProblem, shortlist, default) -> list:
    """The shortlist's configs of ``backend`` as it serves ``problem``: any it offers
    (:func:`native_config`: its space, their refinements and weight layouts, not only its
    search space), but the default (timed already), configs with an empty split and, with
    tile-major weights off (kernels.layout), configs that need a second weight copy."""
    out, seen = [], {config_key(default)}
    for name, config in shortlist:
        if name != backend.name:
            continue
        found, cfg = native_config(backend, problem, config)
        key = config_key(cfg) if found else None
        if found and key not in seen and not empty_split(problem, cfg) and \
                (tile_major_enabled() or not extra_weight_copy(cfg)):
            seen.add(key)
            out.append(cfg)
    return out


def tune_problem(
    problem: GemmProblem,
    candidates: Sequence,
    *,
    timer: Timer | None = None,
    device: torch.device | None = None,
    prune_ratio: float = PRUNE_RATIO,
    max_configs: int = MAX_CONFIGS,
    read_ceiling_gbps: float | None = None,
    seed: Entry | None = None,
    neighbours: Sequence[Entry] = (),
    verify: bool | None = None,
) -> Entry:
    """Time backend x config for ``problem`` at M = its bucket; return the evidence.

    ``candidates``: Backend descriptors able to serve the problem, in registry order.
    Rule: (1) time every backend's ``default_config``; (2) for each backend whose default is
    within ``prune_ratio`` of the best default (or failed), time its ``priority_configs``, then
    at most ``max_configs`` of its other ``configs(problem)``, evenly spaced over its list (the
    first included); the rest are counted in ``pruned``; (3) time the winner so far's
    ``refinements`` (its backend's configs next to it), and those of each other backend's
    fastest within REFINE_RATIO of the fastest, then (4) the winner so far over its
    backend's ``layout_variants``. Configs with an empty last split (:func:`empty_split`) are
    not sampled in (2) nor counted in ``pruned``. A problem with a bias (``has_bias``) is
    timed with one (:func:`tuning_bias`).
    With ``seed`` (a tuned sibling, see SEED_TOP), step (2) times instead the seed's SEED_TOP
    best candidates that are not a default, and the entry records ``seeded_from``.
    ``neighbours`` (the same shape's tuned keys in other seed groups, see
    :func:`_neighbour_shortlist`): step (2) also times each one's winner that its backend
    offers here and (2) would not time otherwise, pruned backends included.
    On a GPU every candidate runs in a chain with an x writer before every WRITE_X_EVERY-th
    call (its share subtracted).
    The winner is ``Entry.winner``: the fastest measured candidate, or within cache.HOST_TIE
    of it the one with the cheapest eager host path (eager calls; a CUDA graph takes the
    fastest GPU time: Entry.choice_for, cache.host_tie), then the one without a second
    weight copy (cache.extra_weight_copy; a
    tile the same shape's other buckets already run is none: cache.apply_held_layouts,
    applied by tuner.tune; ties: the first measured). A candidate that raises a GPU error
    (:func:`gpu_errors`) is recorded as failed; other errors propagate.
    (5) With ``verify`` (default: on a GPU) every timed candidate's output is compared with
    the reference (:func:`output_error`), one call each; a wrong one is recorded as failed, so
    no winner, seed, fallback or in-context choice is one. The returned entry has no measured
    candidate if all failed (or there were none).
    """
    problem = dataclasses.replace(problem, m=problem.bucket)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if problem.on_cuda \
            else torch.device("cpu")
    if device.type == "cuda" and torch.cuda.get_device_capability(device) != problem.capability:
        raise ValueError(
            f"{problem.key()} is for sm{problem.capability}, but {device} is "
            f"sm{torch.cuda.get_device_capability(device)}: tune it on its own GPU"
        )
    if not candidates:  # nothing can serve it: no operands to build, nothing to time
        return Entry(problem, "", None, now_iso(), [], {}, read_ceiling_gbps,
                     seed.key if seed is not None else None)
    l2 = l2_cache_bytes(device) if device.type == "cuda" else 0
    n_copies = rotation_copies(problem.weight_bytes(), l2)
    x, act_scale, weights = tuning_operands(problem, device, n_copies)
    errors = gpu_errors()
    nbytes = problem.bytes_moved()
    chain = Chain.build(x, act_scale, weights, problem.out_dtype, timer=timer,
                        bias=tuning_bias(problem, device))

    def measure(backend, config) -> Measurement:
        try:
            t = chain.time(backend, config)
        except errors as e:
            if is_source_error(e):  # our kernel's bug, not this GPU's limit: propagated
                raise
            return Measurement(backend.name, normalize_config(config),
                               error=f"{type(e).__name__}: {e}"[:500])
        return Measurement(backend.name, normalize_config(config), t.median_us, t.min_us,
                           t.spread, nbytes / t.median_us / 1e3)

    measured: list[Measurement] = []
    defaults = {}
    for b in candidates:
        cfg = b.default_config(problem)
        defaults[b.name] = normalize_config(cfg)
        measured.append(measure(b, cfg))
    ok = [m.median_us for m in measured if m.ok]
    best = min(ok) if ok else math.inf
    pruned: dict[str, int] = {}
    shortlist = _seed_shortlist(seed) if seed is not None else []
    near = _neighbour_shortlist(neighbours)
    for b, first in zip(candidates, list(measured)):
        others = _others(b, problem, defaults[b.name])
        if seed is not None:
            chosen = _seeded_configs(b, problem, shortlist, defaults[b.name])
        elif not first.ok or first.median_us <= prune_ratio * best:
            chosen = _explored(b, problem, others, max_configs)
        else:
            chosen = []
        chosen_keys = {config_key(c) for c in chosen}
        for cfg in _seeded_configs(b, problem, near, defaults[b.name]):
            if config_key(cfg) not in chosen_keys:
                chosen.append(cfg)
                chosen_keys.add(config_key(cfg))
        left = sum(config_key(c) not in chosen_keys for c in others)
        if left:
            pruned[b.name] = left
        for cfg in chosen:
            measured.append(measure(b, cfg))
    entry = Entry(problem, "", None, now_iso(), measured, pruned, read_ceiling_gbps,
                  seed.key if seed is not None else None)
    if entry.ranked():  # (3) the configs next to the winner and the other backends' bests
        for best in _refined(entry, candidates):
            b = next(c for c in candidates if c.name == best.backend)
            found, cfg = native_config(b, problem, best.config)
            timed = [m.config for m in measured if m.backend == b.name]
            for v in b.refinements(problem, cfg) if found else []:
                if normalize_config(v) not in timed:
                    timed.append(normalize_config(v))
                    measured.append(measure(b, v))
    if entry.ranked():  # (4) the winner over its backend's other weight layouts
        win = entry.winner
        b = next(c for c in candidates if c.name == win.backend)
        found, cfg = native_config(b, problem, win.config)
        timed = [m.config for m in measured if m.backend == b.name]
        for v in b.layout_variants(problem, cfg) if found else []:
            # a seed's or neighbour's shortlist may have timed it in (2)
            if normalize_config(v) not in timed and \
                    (tile_major_enabled() or not extra_weight_copy(v)):
                measured.append(measure(b, v))
    if verify is None:
        verify = device.type == "cuda"
    if verify and entry.ranked():  # (5) every timed candidate's output checked
        ref = reference_output(chain)
        by_name = {b.name: b for b in candidates}
        for i, m in enumerate(measured):
            if m.ok:
                why = output_error(problem, by_name[m.backend], m.config, chain, errors, ref)
                if why is not None:
                    measured[i] = dataclasses.replace(m, error=why)
    if entry.ranked():
        entry.backend, entry.config = entry.winner.backend, entry.winner.config
    return entry


def _refined(entry: Entry, candidates: Sequence) -> list[Measurement]:
    """Whose refinements step (3) times: the winner, then each other backend's fastest
    candidate within REFINE_RATIO of the fastest (one whose backend has no refinements
    then times nothing more)."""
    ranked = entry.ranked()
    win = entry.winner
    out = [win]
    for b in candidates:
        best = next((m for m in ranked if m.backend == b.name), None)
        if best is not None and b.name != win.backend and \
                best.median_us <= REFINE_RATIO * ranked[0].median_us:
            out.append(best)
    return out


def config_key(config: Any) -> str:
    """A config's identity: its JSON form (normalize_config), keys sorted."""
    return json.dumps(normalize_config(config), sort_keys=True)


def native_config(backend, problem: GemmProblem, config: dict | None) -> tuple[bool, Any]:
    """The backend's own config object equal (in JSON form) to ``config``: (found, a copy)."""
    key = config_key(config)
    offered = _offered(backend, problem)
    if key not in offered:
        return False, None
    return True, copy.deepcopy(offered[key])


@functools.lru_cache(maxsize=128)  # ~0.2 MB an entry (Triton, 16384x5120)
def _offered(backend, problem: GemmProblem) -> dict[str, Any]:
    """Every config ``backend`` serves ``problem`` with, by its JSON form: its default, its
    space, their refinements and those over other weight layouts. Built once per (backend,
    problem), as dispatch looks each cached choice up here: hundreds of configs, 20-40 ms
    of Python (backends' config functions depend on the problem only)."""
    out: dict[str, Any] = {}
    for c in [backend.default_config(problem), *backend.configs(problem)]:
        for r in [c, *backend.refinements(problem, c)]:
            for v in [r, *backend.layout_variants(problem, r)]:
                out.setdefault(config_key(v), v)
    return out
