"""Timing harness (CUDA graph, cold-L2 rotation) and the persistent, versioned tuning cache.

Timing (DESIGN.md, "Measurement method"), :func:`time_cuda_graph`:

1. ``make_call(i)`` builds a closure over the i-th rotated weight copy, for i < n_copies;
   :func:`rotation_copies` picks n_copies so the copies exceed 3x the L2 (60 MB on the H200):
   consecutive calls never find their weights in L2.
2. Eager warm-up on a side stream (Triton compiles, cuBLASLt picks and allocates workspaces).
3. ONE CUDA graph captures the calls on copies 0, 1, ..., n_copies-1 in sequence (repeated
   round-robin to at least ``min_calls`` calls, so event resolution is negligible).
4. ``warmup`` replays, then ``replays`` replays each bracketed by CUDA events on the stream.
   Per replay: elapsed / calls = microseconds per call. Reported: the median over replays,
   the min, and the spread (max - min) / median.

The tuner (:func:`tune_problem`) searches backend x config with a pruning rule documented
there, and returns an :class:`Entry`: the winner plus the evidence (every candidate's median
time and GB/s, failures with their message, what was pruned, the date).

The cache (:class:`DecisionCache`): one JSON file per GPU model in ``FP8TOWER_CACHE_DIR``
(default ``$XDG_CACHE_HOME/fp8tower`` or ``~/.cache/fp8tower``). Its metadata (GPU, driver,
CUDA, torch, triton, CUTLASS, fp8tower versions) must match this process or the file is ignored with a
warning (and replaced on the next save). Saves lock the file (``filelock``), re-read it, merge
and replace it atomically, so concurrent tuners lose nothing. A corrupt file or a malformed
entry is reported and ignored, never trusted.

Nothing here touches CUDA at import; CUDA paths run only when called on a GPU.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import statistics
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import torch

from . import __version__
from .formats import FP8_DTYPE, Fp8Weight, Scheme, expected_weight_scale_shapes
from .problem import GemmProblem, dtype_name

# ============================================================================ timing

# Cold L2: the rotated copies together exceed this many L2s (DESIGN.md).
L2_FACTOR = 3
# Cap on copies: weights under ~0.7 MB (3 x 60 MB / 256) are then timed partly warm; no
# decode shape of the models we target is that small.
MAX_COPIES = 256


@dataclass(frozen=True)
class Timing:
    """Per-call time over ``replays`` graph replays of ``calls`` calls on ``copies`` copies."""

    median_us: float
    min_us: float
    max_us: float
    replays: int = 1
    calls: int = 1
    copies: int = 1

    @property
    def spread(self) -> float:
        """(max - min) / median over the replays."""
        return (self.max_us - self.min_us) / self.median_us if self.median_us > 0 else 0.0


MakeCall = Callable[[int], Callable[[], Any]]


class Timer(Protocol):
    """Times ``make_call(i)()`` for i in range(n_copies); tests inject a fake one."""

    def __call__(self, make_call: MakeCall, n_copies: int) -> Timing: ...


def l2_cache_bytes(device: torch.device | int | None = None) -> int:
    """The L2 size of a CUDA device (0 for the CPU)."""
    if isinstance(device, torch.device) and device.type != "cuda":
        return 0
    return int(torch.cuda.get_device_properties(device).L2_cache_size)


def rotation_copies(
    bytes_per_copy: int, l2_bytes: int, *, factor: int = L2_FACTOR, max_copies: int = MAX_COPIES
) -> int:
    """Copies whose total exceeds ``factor`` x the L2 (at least 1, at most ``max_copies``)."""
    if bytes_per_copy <= 0:
        raise ValueError(f"bytes_per_copy must be positive, got {bytes_per_copy}")
    if l2_bytes <= 0:
        return 1
    return max(1, min(max_copies, factor * l2_bytes // bytes_per_copy + 1))


def time_cuda_graph(
    make_call: MakeCall,
    n_copies: int,
    *,
    replays: int = 20,
    warmup: int = 3,
    min_calls: int = 32,
) -> Timing:
    """Median per-call time of ``make_call(i)()`` under one CUDA graph (see module doc).

    The closures must work on tensors of the current CUDA device and must not synchronize
    (they are captured). Raises RuntimeError without CUDA or under an ongoing capture.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("time_cuda_graph needs a CUDA GPU")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("time_cuda_graph cannot run while a CUDA graph is being captured")
    if n_copies < 1 or replays < 1 or warmup < 0 or min_calls < 1:
        raise ValueError(f"bad arguments: {n_copies=}, {replays=}, {warmup=}, {min_calls=}")
    calls = [make_call(i) for i in range(n_copies)]
    n_calls = n_copies * -(-min_calls // n_copies)  # every copy used equally often

    # Eager warm-up on a side stream, as torch recommends before a capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for j in range(max(n_copies, 3)):
            calls[j % n_copies]()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    # thread_local: other threads of a serving process may keep using CUDA meanwhile.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for j in range(n_calls):
            calls[j % n_copies]()
    for _ in range(warmup):
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    stream = torch.cuda.current_stream()
    for start, end in zip(starts, ends):
        start.record(stream)
        graph.replay()
        end.record(stream)
    torch.cuda.synchronize()
    per_call = [s.elapsed_time(e) * 1e3 / n_calls for s, e in zip(starts, ends)]  # ms -> us
    del graph
    return Timing(
        median_us=statistics.median(per_call),
        min_us=min(per_call),
        max_us=max(per_call),
        replays=replays,
        calls=n_calls,
        copies=n_copies,
    )


# Default read size for the ceiling: 4 GB (decimal), far above any L2.
READ_CEILING_BYTES = 4_000_000_000


def read_ceiling(
    device: torch.device | int | None = None,
    nbytes: int = READ_CEILING_BYTES,
    *,
    timer: Timer | None = None,
) -> dict[str, float]:
    """GB/s (decimal, 1e9 B/s) of a large read per method, timed like the GEMMs.

    Methods (all read ``nbytes`` once per call and write a negligible output):
    ``sum_fp32`` (x.sum() to a scalar), ``amax_bf16`` (the same bytes as bf16, x.amax()),
    ``rowsum_fp32`` (rows of 16384 fp32 summed: writes nbytes / 16384 bytes, not counted),
    ``triton_read`` (kernels/read_ceiling.py, when triton is installed: the fastest on the
    H200, 4.39 TB/s on 2026-11-29).
    Reductions are what the GEMMs' weight reads look like: read-only, no write stream.
    """
    timer = timer or (lambda make_call, n: time_cuda_graph(make_call, n, replays=10, min_calls=3))
    row = 16384
    numel = max(row, nbytes // 4 // row * row)
    device = torch.cuda.current_device() if device is None else device
    out = {}
    with torch.cuda.device(device):  # the harness times on the current device
        buf = torch.zeros(numel, dtype=torch.float32, device=device)
        methods: dict[str, Callable[[], Any]] = {
            "sum_fp32": lambda: buf.sum(),
            "amax_bf16": lambda: buf.view(torch.bfloat16).amax(),
            "rowsum_fp32": lambda: buf.view(-1, row).sum(dim=1),
        }
        if importlib.util.find_spec("triton") is not None:
            from .kernels.read_ceiling import streaming_read

            sms = torch.cuda.get_device_properties(device).multi_processor_count
            partial = torch.empty(sms * 4, dtype=torch.float32, device=device)
            methods["triton_read"] = lambda: streaming_read(buf, partial, sms * 4)
        for name, fn in methods.items():
            t = timer(lambda i, fn=fn: fn, 1)  # far above 3x L2 by itself: one copy is cold
            out[name] = numel * 4 / t.median_us / 1e3
    return out


def measure_read_ceiling(
    device: torch.device | int | None = None,
    nbytes: int = READ_CEILING_BYTES,
    *,
    timer: Timer | None = None,
) -> float:
    """The best GB/s (decimal) of :func:`read_ceiling`'s methods: this GPU's read ceiling."""
    return max(read_ceiling(device, nbytes, timer=timer).values())


# ============================================================================ evidence

# The oracle is correct, never fast: it is never timed, only taken as the last safe default.
TUNING_EXCLUDED = frozenset({"reference"})
# Explore the configs of backends whose default is within this factor of the best default.
PRUNE_RATIO = 1.3
# At most this many non-default configs per backend, evenly spaced over its list (a config
# grid's order says nothing about likelihood; the triton backend lists ~80-350 per problem).
MAX_CONFIGS = 16
# Seeded tuning: M buckets that share a seed group (Triton's BLOCK_M: 16 for M <= 16) took the
# same winner on the H200 in 18 of 20 (shape, scheme) groups at M = 1..16; in the other two,
# M = 1's choice was at most 3.7% and 0.2% slower (benchmarks/cache_evidence.py ->
# results/tuning_cache_evidence_H200_2026-11-29.json). So once one bucket of a group is
# fully tuned, its siblings time only the backends' defaults and its SEED_TOP best.
SEED_TOP = 3


def seed_group(bucket: int) -> int:
    """Buckets with equal seed groups share their tuning (see SEED_TOP)."""
    return min(max(bucket, 16), 64)


class TuningCacheWarning(UserWarning):
    """A tuning cache file or entry was ignored (corrupt, stale, unknown backend...)."""


def gpu_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean 'this candidate cannot run here' (caught while tuning)."""
    from .backends.cutlass import CutlassError  # a CUTLASS build or launch failure

    errors: list[type[BaseException]] = [torch.cuda.OutOfMemoryError, CutlassError]
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


def normalize_config(config: Any) -> dict | None:
    """The JSON form of a kernel config (a dict or None); TypeError for anything else."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise TypeError(f"a kernel config must be a dict or None, got {type(config).__name__}")
    return json.loads(json.dumps(config, sort_keys=True))


def config_label(config: dict | None) -> str:
    if not config:
        return "default"
    return ",".join(f"{k}={v}" for k, v in config.items())


@dataclass
class Measurement:
    """One candidate (backend, config): its timing, or the GPU error that stopped it."""

    backend: str
    config: dict | None
    median_us: float | None = None
    min_us: float | None = None
    spread: float | None = None
    gbps: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def label(self) -> str:
        return f"{self.backend}[{config_label(self.config)}]"


@dataclass
class Entry:
    """A tuned decision for one cache key, with its evidence."""

    problem: GemmProblem  # at M = the bucket (what was timed)
    backend: str
    config: dict | None
    date: str
    candidates: list[Measurement]
    pruned: dict[str, int] = field(default_factory=dict)  # backend -> configs not timed
    read_ceiling_gbps: float | None = None
    seeded_from: str | None = None  # the sibling key whose best configs were the shortlist

    @property
    def key(self) -> str:
        return self.problem.key()

    def ranked(self) -> list[Measurement]:
        """Measured candidates, fastest first (stable: ties keep measuring order)."""
        return sorted((c for c in self.candidates if c.ok), key=lambda c: c.median_us)

    @property
    def winner(self) -> Measurement:
        return self.ranked()[0]

    def runners_up(self, n: int = 2) -> list[Measurement]:
        return self.ranked()[1 : 1 + n]

    def margin(self) -> float | None:
        """How much slower the runner-up is: runner_up / winner - 1 (None: no runner-up)."""
        ranked = self.ranked()
        return ranked[1].median_us / ranked[0].median_us - 1 if len(ranked) > 1 else None

    def margin_other_backend(self) -> float | None:
        """The same against the fastest candidate of another backend."""
        ranked = self.ranked()
        other = next((c for c in ranked[1:] if c.backend != ranked[0].backend), None)
        return None if other is None else other.median_us / ranked[0].median_us - 1

    def failures(self) -> list[Measurement]:
        return [c for c in self.candidates if not c.ok]

    def to_json(self) -> dict:
        return {
            "problem": problem_to_json(self.problem),
            "backend": self.backend,
            "config": self.config,
            "date": self.date,
            "bytes_moved": self.problem.bytes_moved(),
            "read_ceiling_gbps": self.read_ceiling_gbps,
            "candidates": [dataclasses.asdict(c) for c in self.candidates],
            "pruned": dict(self.pruned),
            "seeded_from": self.seeded_from,
        }

    @classmethod
    def from_json(cls, key: str, raw: Any) -> Entry:
        """Parse and validate one entry; EntryError says what is wrong."""
        if not isinstance(raw, dict):
            raise EntryError(f"entry is a {type(raw).__name__}, not an object")
        problem = problem_from_json(raw.get("problem"))
        if problem.key() != key:
            raise EntryError(f"its problem has key {problem.key()}")
        backend = _get(raw, "backend", str)
        config = _config(raw.get("config"), "config")
        cands = []
        for c in _get(raw, "candidates", list):
            if not isinstance(c, dict):
                raise EntryError("a candidate is not an object")
            m = Measurement(
                backend=_get(c, "backend", str),
                config=_config(c.get("config"), "candidate config"),
                median_us=_opt_num(c, "median_us"),
                min_us=_opt_num(c, "min_us"),
                spread=_opt_num(c, "spread"),
                gbps=_opt_num(c, "gbps"),
                error=c.get("error"),
            )
            if m.error is not None and not isinstance(m.error, str):
                raise EntryError("a candidate's error is not a string")
            if m.ok and not (m.median_us is not None and m.median_us > 0):
                raise EntryError(f"candidate {m.label} has neither a positive time nor an error")
            cands.append(m)
        pruned = _get(raw, "pruned", dict)
        if not all(isinstance(k, str) and _is_int(v) and v >= 0 for k, v in pruned.items()):
            raise EntryError("pruned must map backend names to counts")
        ceiling = _opt_num(raw, "read_ceiling_gbps")
        seeded_from = raw.get("seeded_from")  # absent in files written before it existed
        if seeded_from is not None and not isinstance(seeded_from, str):
            raise EntryError(f"seeded_from must be a key or null, got {seeded_from!r:.60}")
        entry = cls(problem, backend, config, _get(raw, "date", str), cands, pruned, ceiling,
                    seeded_from)
        if not entry.ranked():
            raise EntryError("no candidate was measured")
        w = entry.winner
        if (w.backend, w.config) != (backend, config):
            raise EntryError(f"its winner {backend}[{config_label(config)}] is not the fastest "
                             f"candidate ({w.label})")
        return entry


class EntryError(ValueError):
    """A cache entry is malformed."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _get(d: dict, name: str, typ: type) -> Any:
    v = d.get(name)
    if not isinstance(v, typ) or isinstance(v, bool):
        raise EntryError(f"{name} must be a {typ.__name__}, got {v!r:.60}")
    return v


def _opt_num(d: dict, name: str) -> float | None:
    v = d.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise EntryError(f"{name} must be a finite number or null, got {v!r:.60}")
    return float(v)


def _config(v: Any, what: str) -> dict | None:
    if v is not None and not (isinstance(v, dict) and all(isinstance(k, str) for k in v)):
        raise EntryError(f"{what} must be an object or null, got {v!r:.60}")
    return v


def problem_to_json(p: GemmProblem) -> dict:
    return {
        "m": p.m,
        "n": p.n,
        "k": p.k,
        "scheme": p.scheme.value,
        "act_dtype": dtype_name(p.act_dtype),
        "out_dtype": dtype_name(p.out_dtype),
        "capability": None if p.capability is None else list(p.capability),
        "channel_weight_scale": p.channel_weight_scale,
        "static_act_scale": p.static_act_scale,
    }


def _dtype(name: Any) -> torch.dtype:
    dt = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dt, torch.dtype):
        raise EntryError(f"unknown dtype {name!r:.40}")
    return dt


def problem_from_json(raw: Any) -> GemmProblem:
    if not isinstance(raw, dict):
        raise EntryError("problem must be an object")
    cap = raw.get("capability")
    if cap is not None and not (
        isinstance(cap, list) and len(cap) == 2 and all(_is_int(c) for c in cap)
    ):
        raise EntryError(f"capability must be [major, minor] or null, got {cap!r:.40}")
    try:
        return GemmProblem(
            m=_get(raw, "m", int),
            n=_get(raw, "n", int),
            k=_get(raw, "k", int),
            scheme=Scheme.parse(_get(raw, "scheme", str)),
            act_dtype=_dtype(raw.get("act_dtype")),
            out_dtype=_dtype(raw.get("out_dtype")),
            capability=None if cap is None else (cap[0], cap[1]),
            channel_weight_scale=raw.get("channel_weight_scale") is True,
            static_act_scale=raw.get("static_act_scale") is True,
        )
    except ValueError as e:  # Scheme.parse / GemmProblem validation (EntryError is one too)
        raise EntryError(f"bad problem: {e}") from None


# ============================================================================ tuning


def tuning_operands(
    problem: GemmProblem, device: torch.device, n_copies: int, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor | None, list[Fp8Weight]]:
    """Random activations (M, K) and ``n_copies`` distinct copies of a random FP8 weight.

    The weight is random FP8 data (randn cast: finite, within +-5) with random positive
    scales of the scheme's shapes; a static per-tensor activation scale when the problem
    says so (``static_act_scale``), else dynamic. Copies share values but not memory (the L2
    is physically addressed).
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    m, n, k = problem.m, problem.n, problem.k
    act_scale = None
    if problem.act_dtype == FP8_DTYPE:
        x = torch.randn(m, k, device=device, generator=gen).to(FP8_DTYPE)
        act_scale = torch.tensor(0.01, device=device)
    else:
        x = torch.randn(m, k, device=device, generator=gen, dtype=problem.act_dtype)
    data = torch.randn(n, k, device=device, generator=gen, dtype=torch.bfloat16).to(FP8_DTYPE)
    if problem.scheme is Scheme.PER_TENSOR and problem.channel_weight_scale:
        scale_shape: tuple[int, ...] = (n,)
    else:
        scale_shape = expected_weight_scale_shapes(problem.scheme, n, k)[0]
    scale = torch.rand(scale_shape, device=device, generator=gen) * 1e-2 + 1e-3
    static = None
    if problem.static_act_scale and act_scale is None:
        static = torch.tensor(0.02, device=device)  # a ModelOpt-style static input scale
    weights = [Fp8Weight(data, scale, problem.scheme, static)]
    weights += [
        Fp8Weight(data.clone(), scale.clone(), problem.scheme, static) for _ in range(n_copies - 1)
    ]
    return x, act_scale, weights


def _make_call(backend, config, x, act_scale, weights, out_dtype) -> MakeCall:
    def make(i: int) -> Callable[[], Any]:
        w = weights[i]
        packed = backend.packed_for(w)  # prepared outside the timed graph

        def call():
            return backend.run(
                x, w, packed, act_scale=act_scale, bias=None, out_dtype=out_dtype, config=config
            )

        return call

    return make


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
    """Every config :func:`tune_problem` may time for ``backend`` when it explores (the
    default, the priority configs, the evenly spaced sample): what to build ahead of time."""
    problem = dataclasses.replace(problem, m=problem.bucket)
    default = backend.default_config(problem)
    others = [c for c in backend.configs(problem)
              if normalize_config(c) != normalize_config(default)]
    return [default, *_explored(backend, problem, others, max_configs)]


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
) -> Entry:
    """Time backend x config for ``problem`` at M = its bucket; return the evidence.

    ``candidates``: Backend descriptors able to serve the problem, in registry order.
    Rule: (1) time every backend's ``default_config``; (2) for each backend whose default is
    within ``prune_ratio`` of the best default (or failed), time its ``priority_configs``, then
    at most ``max_configs`` of its other ``configs(problem)``, evenly spaced over its list (the
    first included); the rest are counted in ``pruned``.
    With ``seed`` (a tuned sibling, see SEED_TOP), step (2) times instead the seed's SEED_TOP
    best candidates that are not a default, and the entry records ``seeded_from``.
    The winner is the fastest measured candidate (ties: the first measured). A candidate that
    raises a GPU error (:func:`gpu_errors`) is recorded as failed; other errors propagate.
    The returned entry has no measured candidate if all failed (or there were none).
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
    timer = timer or time_cuda_graph
    l2 = l2_cache_bytes(device) if device.type == "cuda" else 0
    n_copies = rotation_copies(problem.weight_bytes(), l2)
    x, act_scale, weights = tuning_operands(problem, device, n_copies)
    errors = gpu_errors()
    nbytes = problem.bytes_moved()

    def measure(backend, config) -> Measurement:
        make = _make_call(backend, config, x, act_scale, weights, problem.out_dtype)
        try:
            t = timer(make, n_copies)
        except errors as e:
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
    shortlist = [(c.backend, c.config) for c in seed.ranked()[:SEED_TOP]] if seed else []
    for b, first in zip(candidates, list(measured)):
        others = [c for c in b.configs(problem) if normalize_config(c) != defaults[b.name]]
        if seed is not None:
            chosen = [c for c in others if (b.name, normalize_config(c)) in shortlist]
        elif not first.ok or first.median_us <= prune_ratio * best:
            chosen = _explored(b, problem, others, max_configs)
        else:
            chosen = []
        if len(others) > len(chosen):
            pruned[b.name] = len(others) - len(chosen)
        for cfg in chosen:
            measured.append(measure(b, cfg))
    entry = Entry(problem, "", None, now_iso(), measured, pruned, read_ceiling_gbps,
                  seed.key if seed is not None else None)
    if entry.ranked():
        entry.backend, entry.config = entry.winner.backend, entry.winner.config
    return entry


def native_config(backend, problem: GemmProblem, config: dict | None) -> tuple[bool, Any]:
    """The backend's own config object equal (in JSON form) to ``config``: (found, object)."""
    default = backend.default_config(problem)
    if normalize_config(default) == config:
        return True, default
    for c in backend.configs(problem):
        if normalize_config(c) == config:
            return True, c
    return False, None


# ============================================================================ cache

CACHE_FORMAT = 1
_META_KEYS = ("format", "gpu", "driver", "cuda", "torch", "triton", "cutlass", "fp8tower")


def default_cache_dir() -> Path:
    """FP8TOWER_CACHE_DIR, else $XDG_CACHE_HOME/fp8tower, else ~/.cache/fp8tower."""
    env = os.environ.get("FP8TOWER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "fp8tower"


def cache_file_name(device_name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200.json'."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return f"{slug or 'unknown'}.json"


def driver_version() -> str:
    """The NVIDIA driver version: pynvml if importable, else /proc (Linux), else 'unknown'."""
    if importlib.util.find_spec("pynvml") is not None:
        import pynvml

        try:
            pynvml.nvmlInit()
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        except pynvml.NVMLError:
            pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return m.group(1) if m else "unknown"


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def environment_meta(gpu_name: str | None) -> dict:
    """What a cache file must match: GPU (None: CPU), driver, CUDA, torch, triton, CUTLASS
    (nvidia-cutlass), fp8tower."""
    return {
        "format": CACHE_FORMAT,
        "gpu": gpu_name or "cpu",
        "driver": driver_version() if gpu_name else "n/a",
        "cuda": torch.version.cuda or "none",
        "torch": torch.__version__,
        "triton": _package_version("triton"),
        # the CUTLASS headers the cutlass backend's kernels are built from
        "cutlass": _package_version("nvidia-cutlass"),
        "fp8tower": __version__,
    }


def meta_mismatch(found: Any, expected: Mapping) -> str | None:
    """None when a file's metadata matches ``expected``, else what differs."""
    if not isinstance(found, dict):
        return "it has no metadata"
    diffs = [f"{k} {found.get(k)!r} != {expected[k]!r}" for k in _META_KEYS
             if found.get(k) != expected.get(k)]
    return "; ".join(diffs) or None


@dataclass
class CacheFile:
    """A cache file as read, unchecked against this process: meta, valid entries, issues."""

    path: Path
    meta: dict | None
    entries: dict[str, Entry]
    issues: list[str]  # one line per problem found (corrupt file, skipped entries)


def read_cache_file(path: Path) -> CacheFile:
    """Read and validate a cache file; never raises for bad content (issues say why)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return CacheFile(path, None, {}, [])
    except (OSError, UnicodeDecodeError) as e:
        return CacheFile(path, None, {}, [f"{path}: unreadable ({e}); ignored"])
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        return CacheFile(path, None, {}, [f"{path}: corrupt or truncated JSON ({e}); ignored"])
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), dict):
        return CacheFile(path, None, {}, [f"{path}: not a tuning cache (no 'entries'); ignored"])
    entries, issues = {}, []
    for key, value in raw["entries"].items():
        try:
            entries[key] = Entry.from_json(key, value)
        except EntryError as e:
            issues.append(f"{path}: entry {key} skipped: {e}")
    meta = raw.get("meta") if isinstance(raw.get("meta"), dict) else None
    return CacheFile(path, meta, entries, issues)


def _warn(msg: str) -> None:
    warnings.warn(msg, TuningCacheWarning, stacklevel=3)


class DecisionCache:
    """One GPU's cache file: load (validated) and save (locked read-merge-atomic-replace)."""

    LOCK_TIMEOUT_S = 60.0

    def __init__(self, path: Path, meta: Mapping, known_backends: Iterable[str] | None = None):
        self.path = Path(path)
        self.meta = dict(meta)
        self.known = None if known_backends is None else frozenset(known_backends)

    @classmethod
    def for_device(cls, cache_dir: Path, gpu_name: str | None, known_backends=None):
        meta = environment_meta(gpu_name)
        return cls(Path(cache_dir) / cache_file_name(meta["gpu"]), meta, known_backends)

    def _read_matching(self, *, warn: bool) -> tuple[dict[str, Entry], str | None]:
        """Entries of the file if its metadata matches ours; else ({}, why not)."""
        f = read_cache_file(self.path)
        if f.meta is None and not f.entries:
            why = f.issues[0] if f.issues else None
            if warn and why:
                _warn(why)
            return {}, why
        bad = meta_mismatch(f.meta, self.meta)
        if bad:
            why = f"{self.path}: made by another setup ({bad}); ignored, replaced on next save"
            if warn:
                _warn(why)
            return {}, why
        if warn:
            for issue in f.issues:
                _warn(issue)
        return f.entries, None

    def load(self) -> dict[str, Entry]:
        """Valid entries (warnings for a stale/corrupt file, malformed or unknown entries)."""
        entries, _ = self._read_matching(warn=True)
        if self.known is not None:
            for key in [k for k, e in entries.items() if e.backend not in self.known]:
                _warn(f"{self.path}: entry {key} names backend {entries[key].backend!r}, "
                      f"not registered here ({', '.join(sorted(self.known))}); skipped")
                del entries[key]
        return entries

    def save(self, new: Mapping[str, Entry]) -> None:
        """Merge ``new`` into the file under its lock; replace it atomically."""
        from filelock import FileLock

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock", timeout=self.LOCK_TIMEOUT_S):
            entries, why = self._read_matching(warn=False)
            if why:
                _warn(f"replacing {self.path}: {why}")
            merged = {k: e.to_json() for k, e in entries.items()}
            merged.update({k: e.to_json() for k, e in new.items()})
            doc = {"meta": self.meta, "entries": dict(sorted(merged.items()))}
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                       suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(doc, fh, indent=1)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)


# ============================================================================ explain


def explain_row(entry: Entry, *, runners_up: int = 2) -> dict:
    """One decision with its evidence, as plain JSON data (for --explain and --json)."""
    p = entry.problem

    def cand(c: Measurement) -> dict:
        return {"backend": c.backend, "config": c.config, "median_us": c.median_us,
                "min_us": c.min_us, "spread": c.spread, "gbps": c.gbps}

    win = None  # None: every candidate failed
    if entry.ranked():
        w = entry.winner
        win = cand(w)
        win["ceiling_fraction"] = (
            w.gbps / entry.read_ceiling_gbps if entry.read_ceiling_gbps and w.gbps else None
        )
    return {
        "key": entry.key,
        "n": p.n,
        "k": p.k,
        "m_bucket": p.m,
        "scheme": p.scheme.value,
        "act_dtype": dtype_name(p.act_dtype),
        "out_dtype": dtype_name(p.out_dtype),
        "capability": None if p.capability is None else list(p.capability),
        "channel_weight_scale": p.channel_weight_scale,
        "winner": win,
        "runners_up": [cand(c) for c in entry.runners_up(runners_up)],
        "margin": entry.margin(),
        "margin_other_backend": entry.margin_other_backend(),
        "measured": len(entry.ranked()),
        "failed": [{"backend": c.backend, "config": c.config, "error": c.error}
                   for c in entry.failures()],
        "pruned": dict(entry.pruned),
        "seeded_from": entry.seeded_from,
        "bytes_moved": p.bytes_moved(),
        "read_ceiling_gbps": entry.read_ceiling_gbps,
        "date": entry.date,
    }
