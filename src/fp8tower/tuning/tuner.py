"""Tuning for the dispatcher: tune one key, pretune many, precompile, seed, save.

The other half of :mod:`fp8tower.dispatch`: that module resolves (memo, cache lookup, safe
default, capture safety, the generation counter); this one measures and records. It works on
any object with the :class:`DispatchState` surface (``fp8tower.dispatch.Dispatcher``) and never
imports ``fp8tower.dispatch``: dispatch imports this module lazily, on a tuning cache miss.

- Tuning times each key at M = its bucket (:func:`fp8tower.tuning.search.tune_problem`) and
  saves the entry with its evidence. If every candidate fails, nothing is saved (the safe
  default serves).
- A bucket whose sibling is already explored is seeded from it (search.SEED_TOP) unless
  ``full``; cached siblings count unless retuning. The winners of the same shape's keys in
  other seed groups are timed too (:func:`neighbours_for`).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import torch

from ..kernels.layout import tile_major_enabled
from ..problem import MAX_DECODE_M, GemmProblem
from . import cache as tcache
from . import search
from .cache import Entry
from .timer import Timer

log = logging.getLogger(__name__)


class DispatchState(Protocol):
    """What tuning needs of a dispatcher (fp8tower.dispatch.Dispatcher provides it)."""

    timer: Timer | None
    retune: bool
    stats: Counter

    def pool(self) -> list: ...
    def able(self, b: Any, problem: GemmProblem) -> str | None: ...
    def entries_for(self, problem: GemmProblem) -> dict[str, Entry]: ...
    def is_fresh(self, key: str) -> bool: ...
    def choice(self, problem: GemmProblem, entry: Entry) -> tuple[Any, Any] | None: ...
    def narrower(self, problem: GemmProblem, entry: Entry) -> str | None: ...
    def accept(self, problem: GemmProblem, entry: Entry) -> tcache.DecisionCache | None: ...


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def tunable(d: DispatchState, problem: GemmProblem) -> list:
    """The backends the tuner times for ``problem`` (able ones, the oracle excluded)."""
    return [b for b in d.pool()
            if b.name not in search.TUNING_EXCLUDED and d.able(b, problem) is None]


def precompile(d: DispatchState, problems: list[GemmProblem], max_configs: int,
               announce: Callable[[str], None] | None = None) -> None:
    """Build ahead what tuning ``problems`` may launch (CUDA problems, backends with a
    ``precompile`` hook); failures are logged, tuning then builds as it goes. ``announce``
    is told, before each backend's builds, what is being built (a cold machine's CUTLASS
    libraries take about a minute: results/audit2_H200_2026-12-05/call5/tune.log)."""
    jobs: dict[str, list] = {}
    hooks = {}
    for p in problems:
        if not p.on_cuda:
            continue
        for b in tunable(d, p):
            if b.precompile is None:
                continue
            hooks[b.name] = b.precompile
            jobs.setdefault(b.name, []).extend(
                (dataclasses.replace(p, m=p.bucket), c)
                for c in search.planned_configs(p, b, max_configs))
    for name, js in jobs.items():
        if announce is not None:
            announce(f"{name}: compiling up to {len(js)} configs ahead of tuning "
                     "(once per machine: cached)")
        report = hooks[name](js)
        d.stats["precompiled_jobs"] += len(js)
        if report.failures:  # tuning still works: it builds what it times, one by one
            warnings.warn(f"fp8tower: {name} precompile: {report.summary()}",
                          RuntimeWarning, stacklevel=3)
        else:
            log.info("%s: %s", name, report.summary())


def _other_buckets(d: DispatchState, problem: GemmProblem,
                   cached: bool) -> list[tuple[int, Entry]]:
    """(bucket, entry): the same shape's measured entries at the other decode buckets
    (M = 1..MAX_DECODE_M), ones tuned by this dispatcher or (``cached``) from the cache file."""
    entries = d.entries_for(problem)
    out = []
    b = 1
    while b <= MAX_DECODE_M:
        key = dataclasses.replace(problem, m=b).key()
        e = entries.get(key)
        if b != problem.bucket and e is not None and e.ranked() and \
                (cached or d.is_fresh(key)):
            out.append((b, e))
        b *= 2
    return out


def seed_for(d: DispatchState, problem: GemmProblem, *, cached: bool = True) -> Entry | None:
    """A fully explored entry of a sibling bucket (same seed group, tuning.search.SEED_TOP):
    one tuned by this dispatcher, or (``cached``) one from the cache file."""
    group = search.seed_group(problem.bucket)
    return next((e for b, e in _other_buckets(d, problem, cached)
                 if search.seed_group(b) == group and e.seeded_from is None), None)


def neighbours_for(d: DispatchState, problem: GemmProblem, *,
                   cached: bool = True) -> list[Entry]:
    """The same shape's measured entries in the other seed groups (their winners are timed
    too, tuning.search._neighbour_shortlist): ones tuned by this dispatcher, or (``cached``)
    ones from the cache file."""
    group = search.seed_group(problem.bucket)
    return [e for b, e in _other_buckets(d, problem, cached)
            if search.seed_group(b) != group]


def tune(
    d: DispatchState,
    problem: GemmProblem,
    *,
    read_ceiling_gbps: float | None = None,
    max_configs: int = search.MAX_CONFIGS,
    full: bool = False,
    retune: bool | None = None,
) -> Entry:
    """Tune ``problem``'s key now (whatever the policy), record it in ``d`` and save it.

    Unless ``full``, a bucket whose sibling is already explored is seeded from it
    (see tuning.search.SEED_TOP); the winners of the same shape's keys in other seed groups
    are timed too (:func:`neighbours_for`); cached siblings and neighbours count unless
    retuning."""
    if problem.on_cuda and _capturing():
        raise RuntimeError(f"cannot tune {problem.key()} during CUDA graph capture")
    retune = d.retune if retune is None else retune
    seed = None if full else seed_for(d, problem, cached=not retune)
    neighbours = neighbours_for(d, problem, cached=not retune)
    pool = tunable(d, problem)
    entry = search.tune_problem(problem, pool, timer=d.timer,
                                read_ceiling_gbps=read_ceiling_gbps, max_configs=max_configs,
                                seed=seed, neighbours=neighbours)
    entry.tuned_over = sorted(b.name for b in pool)
    entry.tile_major = tile_major_enabled()
    if not entry.ranked():
        d.stats["tune_failed"] += 1
        failures = "; ".join(f"{c.label}: {c.error}" for c in entry.failures()) or \
            "no tunable backend can serve it"
        warnings.warn(f"fp8tower: tuning {entry.key} measured nothing ({failures}); "
                      "the safe default serves it", RuntimeWarning, stacklevel=3)
        return entry
    d.stats["tuned"] += 1
    # its own choice with the tile-major layouts its siblings hold (cache.apply_held_layouts)
    shape = tcache.shape_of(problem)
    siblings = [e for k, e in d.entries_for(problem).items()
                if k != entry.key and tcache.shape_of(e.problem) == shape]
    tcache.apply_held_layouts([*siblings, entry], keep=[e.key for e in siblings])
    w, margin = entry.winner, entry.margin()
    log.info("tuned %s: %s %.2f us %.0f GB/s (runner-up %s%s)", entry.key, w.label,
             w.median_us, w.gbps, "none" if margin is None else f"{margin:+.1%} slower",
             ", within noise" if entry.within_noise() else "")
    cache = d.accept(problem, entry)
    if cache is not None:
        save(cache, entry)
    return entry


def save(cache: tcache.DecisionCache, entry: Entry) -> None:
    """Save ``entry`` to ``cache``'s file; a failure warns (the entry still serves)."""
    from filelock import Timeout

    try:
        cache.save({entry.key: entry})
    except (OSError, Timeout) as e:
        warnings.warn(f"fp8tower: could not save the tuning of {entry.key} to "
                      f"{cache.path}: {e}", tcache.TuningCacheWarning, stacklevel=4)


def pretune(
    d: DispatchState,
    problems: Iterable[GemmProblem],
    *,
    progress: bool = True,
    retune: bool | None = None,
    read_ceiling_gbps: float | None = None,
    max_configs: int = search.MAX_CONFIGS,
    full: bool = False,
    precompile: bool = True,
) -> list[Entry]:
    """Tune each distinct key (skipping valid cached ones unless retuning, and when retuning
    those this dispatcher tuned already: ``d.is_fresh``); the entries.

    Entries that measured nothing (every candidate failed) are returned but not cached.
    Keys are tuned in bucket order within each shape, so M = 1 is explored and M = 2..16
    are seeded from it (unless ``full``). With ``precompile``, backends that can build
    their kernels ahead (Triton) first build the configs the tuning will sample
    (search.planned_configs), in parallel processes.
    """
    retune = d.retune if retune is None else retune
    todo: dict[str, GemmProblem] = {}
    # bucket order (stable: shapes keep theirs), whatever the caller's, so that the explored
    # sibling of each seed group is the smallest M (decode's M = 1), not the first given
    for p in sorted(problems, key=lambda p: p.bucket):
        todo.setdefault(p.key(), p)
    out: list[Entry] = []

    def cached(p: GemmProblem) -> Entry | None:
        entry = d.entries_for(p).get(p.key())
        # retuning skips a key this dispatcher already tuned (or chose in context): a tower's
        # warm-up pretunes on every call, and would replace that choice before it is timed
        if entry is None or (retune and not d.is_fresh(p.key())) or \
                d.choice(p, entry) is None or d.narrower(p, entry):
            return None
        return entry

    if precompile:
        pending = [p for p in todo.values() if cached(p) is None]
        if progress and pending:
            from rich.console import Console

            console = Console(stderr=True)
            with console.status("compiling kernels ahead of tuning") as status:
                def announce(text: str) -> None:  # a line for logs, the spinner for a terminal
                    console.print(f"fp8tower: {text}", highlight=False, soft_wrap=True)
                    status.update(text)

                _precompile(d, pending, max_configs, announce=announce)
        else:
            _precompile(d, pending, max_configs)

    def step(p: GemmProblem) -> None:
        entry = cached(p)
        if entry is None:
            entry = tune(d, p, read_ceiling_gbps=read_ceiling_gbps,
                         max_configs=max_configs, full=full, retune=retune)
        out.append(entry)

    if not progress:
        for p in todo.values():
            step(p)
        return out
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task("tuning", total=len(todo))
        for key, p in todo.items():
            bar.update(task, description=f"tuning {key}")
            step(p)
            bar.advance(task)
    return out


_precompile = precompile  # pretune's keyword argument shadows the function's name
