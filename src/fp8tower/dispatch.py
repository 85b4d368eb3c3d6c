"""Problem -> (backend, kernel config): cache hit, else tune, else a safe default.

- An explicit backend name (or descriptor) bypasses tuning; one that cannot serve the
  problem raises :class:`~fp8tower.backends.BackendError` with the reason.
- ``auto``: the in-process memo (a dict lookup: the hot path of every ``fp8_linear`` call),
  else this GPU's tuning cache file (loaded once), else tune now when allowed, else the safe
  default (:meth:`Dispatcher.safe_default`: on the H200 and the H100 SXM the first able
  backend in registry order or the one its measured ``untuned_defers_to`` rule names; on
  other GPUs and for prefill, cuBLASLt where it can serve).
- Tuning is allowed on a CUDA device unless ``FP8TOWER_TUNE=0``; never on the CPU. Above
  problem.MAX_DECODE_M (M > 64, prefill) a miss is not tuned implicitly: a serving call
  would otherwise stop to tune at each new power-of-two prompt length. Such keys are tuned
  when asked: ``fp8tower tune``, ``FP8TOWER_RETUNE=1`` or ``Dispatcher(tune=True)``.
  ``FP8TOWER_RETUNE=1`` ignores cached entries (each key is then tuned once per process).
  ``FP8TOWER_CACHE_DIR`` moves the cache. ``FP8TOWER_BACKENDS=triton,cublaslt`` (a comma
  list) restricts ``auto`` to those backends: a cached winner outside them gives way to the
  fastest measured candidate of the entry that is inside (and a key tuned meanwhile is tuned
  over them only, and saved so). The environment is read once, when the dispatcher is
  created (the first call, or :func:`reset`).
- A cached winner that cannot run here (its backend unavailable or outside the pool, its
  config no longer offered) gives way to the entry's fastest measured candidate that can,
  with a warning once per key; with none, the key is tuned again or takes the safe default.
- Two choices per key, one per mode: eager calls, whose host sets a decode step's pace,
  take a tie (within cache.HOST_TIE of the fastest) on the cheapest eager host path; a CUDA
  graph's calls (``graph=True``, which nn/ops.run_2d passes under capture) take the fastest
  GPU time (tuning.cache.Entry.choice_for; FP8TOWER_HOST_TIE=1 / 0 sets one rule for both).
  Launch plans whose kernels differ from the graph's choice are eager-only; captures run a
  plan of the graph's choice (nn/plan.py).
- Never tuned under CUDA graph capture: a miss during capture takes the safe default (a cached
  entry is still used), is counted (``stats()["capture_misses"]``) and warns once per
  process with the ``fp8tower tune`` command that would have tuned it. It is not memoized,
  so the first eager call afterwards tunes.
- Tuning (tune one key, pretune many, precompile, seeding, saving) lives in
  :mod:`fp8tower.tuning.tuner`, imported only when a miss may tune; this module is the
  resolution half the hot path imports (nn/ops.py, nn/linear.py, nn/plan.py).

Limitation: one GPU model per process (the memo is keyed by the problem, whose capability
does not tell an H100 from an H200).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from . import backends, env
from .backends import Backend, BackendError
from .formats import Scheme
from .problem import MAX_DECODE_M, GemmProblem
from .tuning import cache as tcache
from .tuning import search
from .tuning.cache import Entry
from .tuning.timer import Timer


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


# The baseline the untuned default falls back on where no measured rule applies: "never more
# than 2% slower than cuBLASLt" holds trivially for cuBLASLt itself.
BASELINE = "cublaslt"
# The GPUs the backends' ``untuned_defers_to`` rules were measured on (device names exactly as
# torch reports them): triton_gemm's rule rests on H200 runs (results/split_k_H200_2026-12-01/,
# deep_default_H200_2026-12-02/) and its wave math on the H200's 132 SMs (configs.H200_SMS);
# the H100 SXM (132 SMs too) was measured against it on the same 29 shapes x M = 1-64 in
# session 39 (results/session39_2026-12-05/call3/rule_*.json: 7 of 609 cells more than 2%
# behind cuBLASLt, which its own deferrals send there; triton_gemm.H100_SXM), then on 42
# shapes it was not fitted on (call4-6), where two more classes lost: the block128 one is
# deferred; the plain-tile one was dropped in session 40, after 52 more held-out shapes
# (results/session40_2026-12-05/).
# One GPU model per process: the memo is keyed by the problem, not the device's name.
UNTUNED_RULE_GPUS = frozenset({"NVIDIA H200", "NVIDIA H100 80GB HBM3"})


def tune_command(problem: GemmProblem) -> str:
    """The ``fp8tower tune`` command line that tunes ``problem``'s key."""
    cmd = f"fp8tower tune --shapes {problem.n}x{problem.k} --m {problem.bucket} " \
          f"--scheme {problem.scheme.value}"
    if problem.has_bias:
        cmd += " --bias"
    if problem.act_dtype != torch.bfloat16:
        cmd += f" --act-dtype {str(problem.act_dtype).removeprefix('torch.')}"
    if problem.out_dtype != torch.bfloat16:
        cmd += f" --out-dtype {str(problem.out_dtype).removeprefix('torch.')}"
    if problem.channel_weight_scale:
        cmd += " --channel-scale"
    if problem.scheme is Scheme.PER_TENSOR and not problem.static_act_scale:
        cmd += " --dynamic-act-scale"  # the CLI tunes static-scale keys by default
    return cmd


class Dispatcher:
    """Dispatch state: memo, loaded cache entries, policy, counters.

    Every argument defaults to the process policy (registry, env vars, CUDA timer); tests
    pass ``candidates`` (fake Backend descriptors, in fallback order), a fake ``timer``,
    ``tune=True`` to tune CPU problems (and prefill keys), ``cache_dir`` / ``persist`` and
    ``gpu_name`` (the GPU whose cache file and untuned rules CUDA problems use, instead of
    asking CUDA).
    """

    def __init__(
        self,
        *,
        candidates: Sequence[Backend] | None = None,
        timer: Timer | None = None,
        tune: bool | None = None,
        retune: bool | None = None,
        cache_dir: str | Path | None = None,
        persist: bool = True,
        gpu_name: str | None = None,
    ) -> None:
        self._candidates = None if candidates is None else list(candidates)
        self.timer = timer  # what tuning times with (None: CUDA graphs)
        self._tune_policy = tune  # None: CUDA only, unless FP8TOWER_TUNE=0
        self._tune_env = env.flag("FP8TOWER_TUNE", True)
        self.retune = env.flag("FP8TOWER_RETUNE", False) if retune is None else retune
        self.cache_dir = Path(cache_dir) if cache_dir is not None else tcache.default_cache_dir()
        self.persist = persist
        self._gpu_name = gpu_name
        self._memo: dict[GemmProblem, tuple[Backend, Any]] = {}
        self._graph_memo: dict[GemmProblem, tuple[Backend, Any]] = {}  # resolve(graph=True)
        self._explicit: dict[tuple[GemmProblem, str], tuple[Backend, Any]] = {}
        self._caches: dict[str, tuple[tcache.DecisionCache | None, dict[str, Entry]]] = {}
        self._fresh: set[str] = set()  # keys tuned by this dispatcher
        self._bad: set[str] = set()  # keys whose cached choice was rejected (warned once)
        self._warned_capture = False
        self._lock = threading.RLock()
        self.stats: Counter = Counter()  # hits, tuned, defaults, capture_misses, tune_failed

    # ------------------------------------------------------------------ candidates

    def pool(self) -> list[Backend]:
        """All candidate backends, in fallback order."""
        return backends.all_backends() if self._candidates is None else self._candidates

    def able(self, b: Backend, problem: GemmProblem) -> str | None:
        """Why ``b`` cannot serve ``problem`` here, or None."""
        return b.unavailable_reason() or b.check(problem)

    def safe_default(self, problem: GemmProblem) -> tuple[Backend, Any]:
        """What serves ``problem`` untuned, with its config at the bucket's M (where the
        rules and defaults were measured, and what a tuning of the key times first):

        - a CUDA problem on a GPU of UNTUNED_RULE_GPUS (the H200, the H100 SXM), M <=
          MAX_DECODE_M, and any CPU problem (interpreter, tests): the first able backend in
          fallback order, or the able backend its ``untuned_defers_to`` names for this GPU
          (Triton -> cuBLASLt where its default lost there), with the config its
          ``untuned_config`` gives for this GPU (Triton on the H100 SXM: the deep tile at
          small M, configs.small_m_deep), else its ``default_config``;
        - a CUDA problem on any other GPU, or of M > MAX_DECODE_M (prefill, where the
          Triton kernels are decode kernels): BASELINE (cuBLASLt) where it can serve, else
          the first able backend. The Triton defaults and the rule's wave math were measured
          on 132-SM cards; nothing measured says they do not lose to cuBLASLt elsewhere.
          weight_only has no cuBLASLt path (bf16 activations): its Triton default serves
          there unmeasured; tune it (``fp8tower tune``).

        The rule is evaluated at the bucket: its thresholds are at power-of-two M. At the call's
        M it kept at M = 17-31 and 33-63 the Triton defaults it sends to cuBLASLt at 32 and 64
        (0.64-0.98x there, untuned_defers_to's evidence): per_tensor 10240x5120 M = 24 ->
        triton, M = 32 -> cublaslt (2026-12-05 audit; pinned by tests/test_tuning_audit.py's
        test_the_untuned_rule_is_evaluated_at_the_bucket_not_the_call_m)."""
        at = problem if problem.m == problem.bucket else replace(problem, m=problem.bucket)
        reasons, first = [], None
        for b in self.pool():
            reason = self.able(b, problem)
            if reason is None:
                first = b
                break
            reasons.append(f"{b.name}: {reason}")
        if first is None:
            raise BackendError(f"no backend can serve {problem.key()}: " + "; ".join(reasons))
        gpu = self._device_name() if problem.on_cuda else None  # asked once: a CUDA query
        rules = not problem.on_cuda or self.untuned_rule_applies(problem, gpu)
        # an evidence rule, e.g. -> cuBLASLt; per GPU where the GPUs differ
        other = first.untuned_defers_to(at, gpu) if rules else BASELINE
        alt = next((a for a in self.pool() if a.name == other), None) if other else None
        chosen = alt if alt is not None and self.able(alt, problem) is None else first
        if chosen.untuned_config is None or not rules:
            return chosen, chosen.default_config(at)
        return chosen, chosen.untuned_config(at, gpu)  # e.g. the H100's own small-M tile

    def untuned_rule_applies(self, problem: GemmProblem, gpu: str | None = None) -> bool:
        """Whether the backends' ``untuned_defers_to`` rules hold for CUDA ``problem``: decode
        M on the GPU they were measured on (UNTUNED_RULE_GPUS; ``gpu``: its name if known)."""
        return problem.bucket <= MAX_DECODE_M and (gpu or self._device_name()) in UNTUNED_RULE_GPUS

    def _device_name(self) -> str | None:
        """This dispatcher's GPU (``gpu_name``, else CUDA's current device; None without)."""
        if self._gpu_name is not None:
            return self._gpu_name
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.cuda.current_device())
        return None

    def _require(self, backend: str | Backend, problem: GemmProblem) -> Backend:
        pool = self.pool()
        names = ", ".join(b.name for b in pool)
        if isinstance(backend, Backend):
            b = backend
        else:
            b = next((b for b in pool if b.name == backend), None)
            if b is None and backend in backends.names():
                raise BackendError(f"backend {backend!r} is not among this dispatcher's "
                                   f"candidates ({names}; FP8TOWER_BACKENDS sets them)")
            if b is None:
                raise BackendError(f"unknown backend {backend!r}: expected auto or one of {names}")
        reason = self.able(b, problem)
        if reason is not None:
            raise BackendError(
                f"backend {b.name!r} cannot serve {problem.key()}: {reason} "
                f"(registered backends: {names}; use backend='auto' to pick one)"
            )
        return b

    # ------------------------------------------------------------------ resolve

    def resolve(self, problem: GemmProblem, backend: str | Backend = "auto", *,
                graph: bool = False) -> tuple[Backend, Any]:
        """The backend and kernel config that will serve ``problem``: in eager calls, or
        (``graph``) in a CUDA graph's (the module doc: two choices per key)."""
        if backend == "auto":
            if graph:
                hit = self._graph_memo.get(problem)
                return hit if hit is not None else self._resolve_graph(problem)
            hit = self._memo.get(problem)
            return hit if hit is not None else self._resolve_miss(problem)
        name = backend.name if isinstance(backend, Backend) else backend
        hit = self._explicit.get((problem, name))
        if hit is None or (isinstance(backend, Backend) and hit[0] is not backend):
            b = self._require(backend, problem)
            # its default at the bucket's M, as the tuner takes it (at the call's M, triton at
            # per_tensor 10240x5120 M = 17 ran another config than auto); not the GPU's own
            # untuned config (safe_default): a named backend runs its one default everywhere
            at = problem if problem.m == problem.bucket else replace(problem, m=problem.bucket)
            hit = self._explicit[(problem, name)] = (b, b.default_config(at))
        return hit

    def _resolve_miss(self, problem: GemmProblem) -> tuple[Backend, Any]:
        with self._lock:
            hit = self._memo.get(problem)
            if hit is not None:
                return hit
            capturing = problem.on_cuda and _capturing()
            key = problem.key()
            entry = self.entries_for(problem).get(key)
            # RETUNE re-times a cached key only where tuning may run (else it would serve
            # the untuned default over a valid decision); so does an entry tuned over fewer
            # backends than this dispatcher times (narrower)
            may_retune = key not in self._fresh and not capturing and self._may_tune(problem)
            if entry is not None and not (may_retune and (self.retune
                                                          or self.narrower(problem, entry))):
                choice = self.choice(problem, entry)
                if choice is not None:
                    self.stats["hits"] += 1
                    self._memo[problem] = choice
                    return choice
            if capturing:
                self.stats["capture_misses"] += 1
                if not self._warned_capture:
                    self._warned_capture = True
                    warnings.warn(
                        f"fp8tower: {key} is not tuned and a CUDA graph is being captured, so "
                        f"the safe default serves it (misses under capture are counted in "
                        f"fp8tower.dispatch.stats()). Tune it first: {tune_command(problem)}",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                return self.safe_default(problem)  # not memoized: tune on the next eager call
            choice = None
            if self._may_tune(problem):
                from .tuning import tuner  # the tuning half, loaded on the first miss that tunes

                choice = self.choice(problem, tuner.tune(self, problem))
            if choice is None:
                self.stats["defaults"] += 1
                choice = self.safe_default(problem)
            self._memo[problem] = choice
            return choice

    def _resolve_graph(self, problem: GemmProblem) -> tuple[Backend, Any]:
        """The eager choice (resolved as always: memo, cache, tuning, default), or where the
        key's entry picks otherwise for a CUDA graph (Entry.choice_for), that pick when it
        can run here (else, silently, the eager choice)."""
        choice = self.resolve(problem)
        with self._lock:
            if problem not in self._memo:
                return choice  # a capture's miss: its safe default is not final
            entry = self.entries_for(problem).get(problem.key())
            if entry is not None:
                pick = entry.choice_for(graph=True)
                if pick != (entry.backend, entry.config):
                    hit = self.runnable(problem, *pick)[0]
                    choice = hit if hit is not None else choice
            self._graph_memo[problem] = choice
            return choice

    def may_tune(self, problem: GemmProblem) -> bool:
        """Whether ``auto`` would tune ``problem`` on a cache miss (the policy)."""
        return self._may_tune(problem)

    def _may_tune(self, problem: GemmProblem) -> bool:
        if self._tune_policy is not None:
            return self._tune_policy
        if problem.bucket > MAX_DECODE_M:  # prefill: only when asked (module doc)
            return self._tune_env and problem.on_cuda and self.retune
        return self._tune_env and problem.on_cuda

    def narrower(self, problem: GemmProblem, entry: Entry) -> str | None:
        """Why ``entry`` was tuned over less than this dispatcher would time for ``problem``
        (backends it can time that the tuning could not, tile-major weights now on), or None.
        Entries that do not record it (older files) are taken as complete."""
        from .kernels.layout import tile_major_enabled
        from .tuning.tuner import tunable  # called where tuning may run: its half is needed

        if entry.tuned_over is not None:
            missing = sorted({b.name for b in tunable(self, problem)} - set(entry.tuned_over))
            if missing:
                return f"tuned without {', '.join(missing)}"
        if entry.tile_major is False and tile_major_enabled():
            return "tuned without tile-major weights (FP8TOWER_TILE_MAJOR=0)"
        return None

    def runnable(self, problem: GemmProblem, backend: str, config: Any):
        """((backend, native config), None) if it can run here, else (None, why not)."""
        b = next((b for b in self.pool() if b.name == backend), None)
        if b is None:
            return None, f"backend {backend!r} is not registered" + (
                "" if self._candidates is None else " among this dispatcher's candidates")
        why = self.able(b, problem)
        if why is not None:
            return None, why
        # offered at the M the key was tuned at (its bucket): every M of the bucket runs it
        tuned_at = problem if problem.m == problem.bucket else replace(problem, m=problem.bucket)
        found, native = search.native_config(b, tuned_at, config)
        if not found:
            return None, f"{backend} no longer offers config {config}"
        return (b, native), None

    def choice(self, problem: GemmProblem, entry: Entry) -> tuple[Backend, Any] | None:
        """The entry's (backend, native config) if still valid here; else its fastest
        runnable candidate (warned once): in its context step where it was tuned in one
        (Entry.fallbacks), else per GEMM; else None."""
        if not entry.ranked():
            return None  # a tuning where everything failed
        hit, why = self.runnable(problem, entry.backend, entry.config)
        if hit is not None:
            return hit
        fallback, instead = None, ""
        # H200 2026-12-02 (results/refine_rounds_H200_2026-12-02/call2/): a CUTLASS config
        # taken out of its space fell back on the fastest per GEMM, a Triton config that the
        # entry's own 27B step had timed 5% slower; per_tensor's tower went 2.190 -> 2.222 ms.
        for c, step_ms in entry.fallbacks():
            fallback = self.runnable(problem, c.backend, c.config)[0]
            if fallback is not None:
                where = f"{step_ms:.4f} ms per step in its context" if step_ms is not None \
                    else f"{c.median_us:.2f} us measured"
                instead = (f"; using its fastest runnable candidate, {c.backend} {c.config} "
                           f"({where})")
                break
        if entry.key not in self._bad:
            self._bad.add(entry.key)
            warnings.warn(f"fp8tower: cached choice for {entry.key} ignored: {why}{instead}",
                          tcache.TuningCacheWarning, stacklevel=5)
        return fallback

    # ------------------------------------------------------------------ cache and tuning

    def _label(self, problem: GemmProblem) -> str | None:
        """The GPU name whose cache file serves ``problem`` (None: CPU)."""
        if not problem.on_cuda:
            return None
        return self._gpu_name or torch.cuda.get_device_name(torch.cuda.current_device())

    def _cache(self, problem: GemmProblem) -> tuple[tcache.DecisionCache | None, dict]:
        label = self._label(problem) if self.persist else None
        slot = self._caches.get(label or "")
        if slot is None:
            cache = None
            if self.persist:
                # every registered backend: a winner outside the pool still ranks its
                # runners-up (choice), an unregistered one's entry is skipped at load
                known = {*backends.names(), *(b.name for b in self.pool())}
                cache = tcache.DecisionCache.for_device(self.cache_dir, label, known)
            slot = (cache, cache.load() if cache is not None else {})
            self._caches[label or ""] = slot
        return slot

    def entries_for(self, problem: GemmProblem) -> dict[str, Entry]:
        """The valid cached entries of the file that serves ``problem`` (loaded once)."""
        return self._cache(problem)[1]

    def is_fresh(self, key: str) -> bool:
        """Whether ``key`` was tuned by this dispatcher (not only read from the cache file)."""
        return key in self._fresh

    def accept(self, problem: GemmProblem, entry: Entry) -> tcache.DecisionCache | None:
        """Record a new tuning of ``problem``'s key: it serves from now on (memoized choices
        and cached launch plans of that key are dropped). The cache file to save it to, or
        None when not persisting."""
        with self._lock:
            cache, entries = self._cache(problem)
            entries[entry.key] = entry
            self._fresh.add(entry.key)
            self._bad.discard(entry.key)
            # its siblings' ties may now take a tile-major layout it holds (or no longer)
            shape = tcache.shape_of(problem)
            stale = {entry.key, *tcache.apply_held_layouts(
                (e for e in entries.values() if tcache.shape_of(e.problem) == shape),
                keep=(entry.key,))}
            self._memo = {p: c for p, c in self._memo.items() if p.key() not in stale}
            self._graph_memo = {p: c for p, c in self._graph_memo.items()
                                if p.key() not in stale}
            _bump()  # cached launch plans resolved before this tuning are stale
        return cache


# ---------------------------------------------------------------------- process default

_default: Dispatcher | None = None
_default_lock = threading.Lock()
# Bumped whenever a memoized decision may change (reset, a new tuning): cached launch plans
# (plan.py) compare it per call and rebuild when it moved.
_generation = 0


def _bump() -> None:
    global _generation
    _generation += 1


def generation() -> int:
    """A counter that moves whenever a dispatch decision may have changed."""
    return _generation


def candidates_from_env() -> list[Backend] | None:
    """The backends FP8TOWER_BACKENDS names (comma list), or None when it is unset or empty."""
    value = os.environ.get("FP8TOWER_BACKENDS", "").strip()
    if not value:
        return None
    registered = backends.names()
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise BackendError(f"FP8TOWER_BACKENDS={value!r} names no backend: expected a comma "
                           f"list of {', '.join(registered)} (or leave it unset)")
    unknown = [n for n in names if n not in registered]
    if unknown:
        raise BackendError(f"FP8TOWER_BACKENDS={value!r}: unknown backend(s) "
                           f"{', '.join(unknown)}; registered backends are {', '.join(registered)}")
    return [backends.get(n) for n in registered if n in names]  # in fallback order


def default_dispatcher() -> Dispatcher:
    """The process's dispatcher (created on first use, reading the environment then)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                candidates = candidates_from_env()  # its BackendError, with the registry
                env.check_flags()
                _default = Dispatcher(candidates=candidates)
    return _default


def reset() -> None:
    """Forget the memo, loaded caches and counters; re-read the environment on next use."""
    global _default
    with _default_lock:
        _default = None
        _bump()


def resolve(problem: GemmProblem, backend: str | Backend = "auto", *,
            graph: bool = False) -> tuple[Backend, Any]:
    """The backend and kernel config that will serve ``problem``, in eager calls or
    (``graph``) in a CUDA graph's (see the module doc)."""
    d = _default if _default is not None else default_dispatcher()
    if backend == "auto":
        hit = (d._graph_memo if graph else d._memo).get(problem)
        if hit is not None:
            return hit
    return d.resolve(problem, backend, graph=graph)


def pretune(problems: Iterable[GemmProblem], progress: bool = True, **kw) -> list[Entry]:
    """Tune many problems with the process's dispatcher (see
    :func:`fp8tower.tuning.tuner.pretune`)."""
    from .tuning import tuner

    return tuner.pretune(default_dispatcher(), problems, progress=progress, **kw)


def stats() -> dict[str, int]:
    """Counters of the process's dispatcher: hits, tuned, defaults, capture_misses, ..."""
    return dict(default_dispatcher().stats)
