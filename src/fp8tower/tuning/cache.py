"""The persistent, versioned tuning cache: :class:`Entry` (a decision and its evidence) and
:class:`DecisionCache`.

One JSON file per GPU model in ``FP8TOWER_CACHE_DIR`` (default ``$XDG_CACHE_HOME/fp8tower``
or ``~/.cache/fp8tower``). Its metadata (fp8tower.provenance.versions: GPU, driver, CUDA,
torch, triton, fp8tower versions) must match this process or the file is ignored with a
warning (and replaced on the next save). Saves lock the file (``filelock``), re-read it,
merge and replace it atomically, so concurrent tuners lose nothing. A corrupt file or a
malformed entry is reported and ignored, never trusted.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import subprocess
import tempfile
import warnings
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..env import flag
from ..formats import Scheme
from ..paths import cache_dir, cache_file_name, umask_mode
from ..problem import GemmProblem, dtype_name
from ..provenance import versions
from .timer import early_launch_state


class TuningCacheWarning(UserWarning):
    """A tuning cache file or entry was ignored (corrupt, stale, unknown backend...)."""


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


# Host time of one planned eager call at M = 1 (microseconds, 4096x4096, H200 machine,
# benchmarks/results/host_per_backend_H200_2026-12-01/after_*.json; nn.Linear bf16: 16-17):
# triton 20-33 (one or two direct launches), cublaslt 33-88 and cutlass 35-37 (a direct
# quant launch, then the library's call), cudnn 175 (its graph execute; before_*.json). In an
# eager decode step the host sets the pace, so a GPU time within HOST_TIE of the fastest is
# not worth 10-150 us of host time per call: among the candidates that close, the one with
# the cheapest host path wins (Entry.winner). Under a CUDA graph that costs at most HOST_TIE
# of that GEMM in the tuner's chain (the 27B tower moved by < 1%:
# tower_qwen3.5-27b_H200_2026-12-01.json), but in a decode step it can cost more: per_tensor's
# M = 32 out_proj on the H200 took Triton over CUTLASS's PDL kernel, 1.1% slower in the chain
# and 1.03 us a GEMM in the step, whose move made it 0.972x
# (results/session63_2026-12-07/moves.txt). A CUDA graph pays no host time per call, so a
# capture takes the fastest GPU time (Entry.choice_for(graph=True), dispatch.resolve's
# ``graph``): two choices, one per mode, from one cache. FP8TOWER_HOST_TIE=1 / 0 makes both
# modes take the host tie / the GPU time (host_tie). Only the order matters; unknown
# backends count as 0 (ties then keep the time order).
EAGER_HOST_US = {"triton": 20.0, "reference": 30.0, "cublaslt": 33.0, "cutlass": 36.0,
                 "cudnn": 175.0}
HOST_TIE = 0.015


def host_tie(graph: bool = False) -> bool:
    """Whether a tie goes to the cheapest eager host path: for eager calls, not for a CUDA
    graph's (``graph``), unless FP8TOWER_HOST_TIE says for both (1: the host path, 0: the
    fastest GPU time). The tile-major memory tie holds either way."""
    both = flag("FP8TOWER_HOST_TIE", None)
    return not graph if both is None else both


def extra_weight_copy(config) -> bool:
    """A config that runs on a second copy of the weights (Triton's tile-major layout,
    backends/triton_gemm.layout_variants): within a tie, the one without it wins, unless the
    same shape's other buckets already run that layout (Entry.held, apply_held_layouts)."""
    return isinstance(config, dict) and bool(config.get("packed"))


def tile_layout(config) -> tuple | None:
    """The tile-major layout a config runs on, (BLOCK_N, BLOCK_K): one copy per tile and layer
    (triton_gemm._tile_major), whatever the M; None for row-major weights."""
    if not extra_weight_copy(config):
        return None
    return config.get("block_n"), config.get("block_k")


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
    # In-context tuning (tower/context.py): the decode step that re-ranked the shortlist, and
    # each candidate's ms per step there. Then (backend, config) is that step's fastest.
    context: dict | None = None
    # What the tuning could time: the backends (tuner.tunable) and whether tile-major weights
    # were on. An entry tuned over less (FP8TOWER_BACKENDS, FP8TOWER_TILE_MAJOR=0) is retuned
    # where a process that times more may tune (Dispatcher.narrower): before, a restricted
    # process's choice was served to every later one. None: not recorded (older files).
    tuned_over: list[str] | None = None
    tile_major: bool | None = None
    # The tile-major layouts the same shape's other buckets run by their own choice
    # (apply_held_layouts): the layer holds that copy anyway, so here it is no second one.
    # Derived from the file's other entries, never written.
    held: frozenset = field(default_factory=frozenset, compare=False)
    # (backend, config) set by a caller, not by the tie rule (tower/context.py times each
    # candidate so): it serves CUDA graphs too (choice_for). Never written.
    forced: bool = field(default=False, compare=False)

    @property
    def key(self) -> str:
        return self.problem.key()

    def ranked(self) -> list[Measurement]:
        """Measured candidates, fastest first (stable: ties keep measuring order)."""
        return sorted((c for c in self.candidates if c.ok), key=lambda c: c.median_us)

    def fallbacks(self) -> list[tuple[Measurement, float | None]]:
        """Measured candidates in the order a stale choice falls back on them, each with its
        ms per step in the entry's context (None where not timed there): those the step
        timed (in-context tuning), fastest step first, then the rest by per-GEMM time.
        The step ranks them better than a chain of one shape does (tower/context.py)."""
        rows = [r for r in (self.context or {}).get("ms_per_step", [])
                if isinstance(r.get("ms"), (int, float))]

        def step_ms(c: Measurement) -> float | None:
            return min((r["ms"] for r in rows
                        if (r.get("backend"), r.get("config")) == (c.backend, c.config)),
                       default=None)

        ranked = [(c, step_ms(c)) for c in self.ranked()]
        return sorted(ranked, key=lambda cm: (cm[1] is None, cm[1] or 0.0))

    def ties(self) -> list[Measurement]:
        """The candidates within HOST_TIE of the fastest, fastest first."""
        ranked = self.ranked()
        return [c for c in ranked if c.median_us <= ranked[0].median_us * (1 + HOST_TIE)]

    @property
    def winner(self) -> Measurement:
        """What eager calls run (:meth:`pick`); ``backend`` / ``config`` hold it."""
        return self.pick()

    def pick(self, graph: bool = False) -> Measurement:
        """The fastest candidate, unless one within HOST_TIE of it has a cheaper eager host
        path (EAGER_HOST_US; only while :func:`host_tie`: eager calls, not a CUDA graph's)
        or needs no second copy of the weights (``extra_copy``); then the cheapest of those
        (ties: the faster). An entry tuned in context: its choice, in either mode."""
        if self.context is not None:
            chosen = next((c for c in self.ranked()
                           if (c.backend, c.config) == (self.backend, self.config)), None)
            if chosen is not None:
                return chosen
        host = EAGER_HOST_US if host_tie(graph) else {}
        return min(self.ties(), key=lambda c: (host.get(c.backend, 0.0),
                                               self.extra_copy(c.config)))

    def choice_for(self, graph: bool) -> tuple[str, dict | None]:
        """(backend, config) that serves eager calls (``backend`` / ``config``) or a CUDA
        graph's: there the GPU-time pick (:meth:`pick`) where the tie rule picks differently
        for the two modes, else the same; a choice made in context or ``forced`` stands in
        both."""
        if graph and not self.forced and self.context is None and self.ranked():
            g, w = self.pick(graph=True), self.winner
            if (g.backend, g.config) != (w.backend, w.config):
                return g.backend, g.config
        return self.backend, self.config

    def extra_copy(self, config) -> bool:
        """Whether ``config`` would add a copy of the weights (extra_weight_copy) that the
        layer does not already hold for another bucket (``held``)."""
        return extra_weight_copy(config) and tile_layout(config) not in self.held

    def _others(self) -> list[Measurement]:
        w = self.winner
        return [c for c in self.ranked() if c is not w]

    def runners_up(self, n: int = 2) -> list[Measurement]:
        return self._others()[:n]

    def margin(self) -> float | None:
        """How much slower the runner-up is: runner_up / winner - 1 (None: no runner-up;
        negative where the winner took a host tie, see EAGER_HOST_US, or was chosen in
        context)."""
        others = self._others()
        return others[0].median_us / self.winner.median_us - 1 if others else None

    def within_noise(self) -> bool | None:
        """Whether the winner's lead over the runner-up (``margin``) is smaller than the
        timing noise: |margin| < the larger spread ((max - min) / median over the replays)
        of the two. Then the ranking of the two is not established by this tuning (no more
        timing is done for it: tuning time is a target). None without a runner-up or a
        recorded spread (or a measured candidate)."""
        others = self._others() if self.ranked() else []
        if not others:
            return None
        w, r = self.winner, others[0]
        spreads = [c.spread for c in (w, r) if c.spread is not None]
        if not spreads:
            return None
        return abs(r.median_us / w.median_us - 1) < max(spreads)

    def margin_other_backend(self) -> float | None:
        """The same against the fastest candidate of another backend."""
        w = self.winner
        other = next((c for c in self._others() if c.backend != w.backend), None)
        return None if other is None else other.median_us / w.median_us - 1

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
            "context": self.context,
            "tuned_over": self.tuned_over,
            "tile_major": self.tile_major,
            # derived from the candidates (recomputed on load, never read back)
            "within_noise": self.within_noise(),
        }

    @classmethod
    def from_json(cls, key: str, raw: Any) -> Entry:
        """Parse and validate one entry; EntryError says what is wrong."""
        if not isinstance(raw, dict):
            raise EntryError(f"entry is a {type(raw).__name__}, not an object")
        problem = problem_from_json(raw.get("problem"))
        if problem.key() != key:
            raise EntryError(f"its problem has key {problem.key()}")
        if problem.m != problem.bucket:  # the tuner times at the bucket's M (search.py)
            raise EntryError(f"its problem.m is {problem.m}, expected its bucket's M "
                             f"{problem.bucket} (entries are timed at a power of two)")
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
            if m.ok and m.gbps is None:  # the rate of its time (what search.measure records)
                m.gbps = problem.bytes_moved() / m.median_us / 1e3
            cands.append(m)
        pruned = _get(raw, "pruned", dict)
        if not all(isinstance(k, str) and _is_int(v) and v >= 0 for k, v in pruned.items()):
            raise EntryError("pruned must map backend names to counts")
        ceiling = _opt_num(raw, "read_ceiling_gbps", positive=True)
        seeded_from = raw.get("seeded_from")  # absent in files written before it existed
        if seeded_from is not None and not isinstance(seeded_from, str):
            raise EntryError(f"seeded_from must be a key or null, got {seeded_from!r:.60}")
        context = raw.get("context")  # absent in files written before it existed
        if context is not None and not (
                isinstance(context, dict) and isinstance(context.get("ms_per_step"), list)
                and all(isinstance(r, dict) for r in context["ms_per_step"])):
            raise EntryError(f"context must be an object with ms_per_step (a list of objects), "
                             f"or null, got {context!r:.60}")
        tuned_over = raw.get("tuned_over")  # both absent in files written before them
        if tuned_over is not None and not (isinstance(tuned_over, list)
                                           and all(isinstance(b, str) for b in tuned_over)):
            raise EntryError(f"tuned_over must be a list of backend names or null, got "
                             f"{tuned_over!r:.60}")
        tile_major = raw.get("tile_major")
        if tile_major is not None and not isinstance(tile_major, bool):
            raise EntryError(f"tile_major must be true, false or null, got {tile_major!r:.60}")
        entry = cls(problem, backend, config, _get(raw, "date", str), cands, pruned, ceiling,
                    seeded_from, context, tuned_over, tile_major)
        if not entry.ranked():
            raise EntryError("no candidate was measured")
        if context is not None:  # the step's choice: a measured candidate, timed in it
            timed = [(r.get("backend"), r.get("config")) for r in context["ms_per_step"]
                     if isinstance(r, dict)]
            if not any((c.backend, c.config) == (backend, config) for c in entry.ranked()) \
                    or (backend, config) not in timed:
                raise EntryError(f"its in-context choice {backend}[{config_label(config)}] is "
                                 "not a measured candidate timed in its context")
            return entry
        stored = next((c for c in entry.ties() if (c.backend, c.config) == (backend, config)),
                      None)
        if stored is None:
            raise EntryError(f"its winner {backend}[{config_label(config)}] is not the fastest "
                             f"candidate ({entry.ranked()[0].label}) nor within "
                             f"{HOST_TIE:.1%} of it")
        # Written under an older tie rule: serve what the current rule picks from the same
        # evidence (the stored choice was one of the ties).
        entry.backend, entry.config = entry.winner.backend, entry.winner.config
        return entry


class EntryError(ValueError):
    """A cache entry is malformed."""


def shape_of(problem: GemmProblem) -> GemmProblem:
    """What a key's buckets share (all but M): one layer's weights serve them all."""
    return dataclasses.replace(problem, m=1)


def apply_held_layouts(entries: Iterable[Entry], *, keep: Iterable[str] = ()) -> list[str]:
    """Set each entry's ``held`` and serve what the tie rule then picks, except the ``keep``
    keys (their choice stands: a fresh tuning's siblings, a candidate the decode step times);
    the keys whose choice changed. A shape's buckets run on one layer's weights, and a
    tile-major copy is made once per tile whatever the M (triton_gemm._tile_major): where one
    bucket runs a tile by its own choice (its winner with nothing held: faster than the
    row-major candidates by more than HOST_TIE, or chosen in its decode step), a tie in
    another bucket takes that tile too at no cost in memory. Only those own choices hold a
    tile (no chain of ties), so the result depends on the evidence, not on the order of
    tuning. H200, session 62's 27B towers (results/session63_2026-12-07/moves.txt): 5 of the
    7 keys their decode steps moved were such ties (the GDN in_proj at M = 8 / 32 onto
    M = 1's tile), each worth 0.990-0.995x the step."""
    keep = set(keep)
    groups: dict[GemmProblem, list[Entry]] = {}
    for e in entries:
        if e.ranked():
            groups.setdefault(shape_of(e.problem), []).append(e)
    changed = []
    for group in groups.values():
        own = []
        for e in group:
            e.held = frozenset()
            own.append(tile_layout(e.winner.config))
        for e in group:
            e.held = frozenset(t for other, t in zip(group, own)
                               if other is not e and t is not None)
            w = e.winner
            if e.key not in keep and (w.backend, w.config) != (e.backend, e.config):
                e.backend, e.config = w.backend, w.config
                changed.append(e.key)
    return changed


_INT64_MAX = (1 << 63) - 1


def _is_int(v: Any) -> bool:
    """An int (not a bool) that fits in int64."""
    return isinstance(v, int) and not isinstance(v, bool) and -_INT64_MAX - 1 <= v <= _INT64_MAX


def _get(d: dict, name: str, typ: type) -> Any:
    v = d.get(name)
    if not isinstance(v, typ) or isinstance(v, bool) or (typ is int and not _is_int(v)):
        raise EntryError(f"{name} must be a {typ.__name__}, got {v!r:.60}")
    return v


def _opt_num(d: dict, name: str, positive: bool = False) -> float | None:
    """A finite number >= 0 (> 0 when ``positive``), or null: times, spreads, bandwidths."""
    v = d.get(name)
    if v is None:
        return None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    try:
        ok = ok and math.isfinite(v) and (v > 0 if positive else v >= 0)
    except OverflowError:  # an int beyond float range
        ok = False
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise EntryError(f"{name} must be a finite number {bound} or null, got {v!r:.60}")
    return float(v)


def _config(v: Any, what: str) -> dict | None:
    """A kernel config: an object of JSON scalars (int64, finite float, str, bool, null)."""
    if v is None:
        return None
    if not (isinstance(v, dict) and all(isinstance(k, str) for k in v)):
        raise EntryError(f"{what} must be an object or null, got {v!r:.60}")
    for key, value in v.items():
        if isinstance(value, int) and not _is_int(value) and not isinstance(value, bool):
            raise EntryError(f"{what}.{key} must fit in int64, got {value!r:.60}")
        if isinstance(value, float) and not math.isfinite(value):
            raise EntryError(f"{what}.{key} must be finite, got {value!r}")
        if not (value is None or isinstance(value, (bool, int, float, str))):
            raise EntryError(f"{what}.{key} must be a number, string, boolean or null, "
                             f"got {value!r:.60}")
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
        # written only when set: entries without a bias keep their bytes (and keys)
        **({"has_bias": True} if p.has_bias else {}),
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
            has_bias=raw.get("has_bias") is True,
        )
    except ValueError as e:  # Scheme.parse / GemmProblem validation (EntryError is one too)
        raise EntryError(f"bad problem: {e}") from None


# ============================================================================ cache

CACHE_FORMAT = 1
_META_KEYS = ("format", "gpu", "driver", "cuda", "torch", "triton", "fp8tower", "kernels",
              "cudnn", "cudnn_frontend", "cutlass", "nvcc", "nvcc_flags", "early_launch")


default_cache_dir = cache_dir  # the tuning cache's folder: fp8tower.paths' rule


def environment_meta(gpu_name: str | None) -> dict:
    """What a cache file must match: GPU (None: CPU), driver, CUDA, torch, triton, fp8tower
    and its kernel code, cuDNN and its frontend, CUTLASS (the headers the cutlass backend
    builds from), and whether the timed graphs launched PDL kernels early
    (timer.early_launch_state: FP8TOWER_EARLY_LAUNCH, and the driver's edge API), and the
    nvcc and NVCC_*_FLAGS that build the CUTLASS and stream kernels (their libraries' build
    keys hold both: a new nvcc built other binaries, timed under the old ones' choices)."""
    return {"format": CACHE_FORMAT, **versions(gpu_name), **_nvcc_meta(),
            "early_launch": early_launch_state(gpu_name)}


def _nvcc_meta() -> dict:
    from ..backends.nvcc import nvcc_env_key, nvcc_path, nvcc_version

    nvcc = nvcc_path()
    try:
        version = nvcc_version(nvcc) if nvcc else "none"
    except (OSError, subprocess.CalledProcessError):
        version = "unknown"
    return {"nvcc": version, "nvcc_flags": nvcc_env_key()}


def meta_mismatch(found: Any, expected: Mapping) -> str | None:
    """None when a file's metadata matches ``expected``, else what differs."""
    if not isinstance(found, dict):
        return "it has no metadata"
    diffs = [f"{k} {found.get(k)!r} != {expected.get(k)!r}" for k in _META_KEYS
             if found.get(k) != expected.get(k)]
    return "; ".join(diffs) or None


@dataclass
class CacheFile:
    """A cache file as read, unchecked against this process: meta, valid entries, issues."""

    path: Path
    meta: dict | None
    entries: dict[str, Entry]
    issues: list[str]  # one line per problem found (corrupt file, skipped entries)
    error: str | None = None  # why no entry at all could be read (None: the file was read)


def _unread(path: Path, why: str) -> CacheFile:
    return CacheFile(path, None, {}, [f"{path}: {why}; ignored"], error=why)


def _read_text(path: Path) -> str:
    """The file's text; gzip data (the caches committed under benchmarks/results are
    ``*.json.gz``) is decompressed, whatever the name."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def read_cache_file(path: Path) -> CacheFile:
    """Read and validate a cache file, plain or gzipped; never raises for bad content (issues
    say why)."""
    try:
        text = _read_text(path)
    except FileNotFoundError:
        return CacheFile(path, None, {}, [])
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:  # gzip's: truncated, corrupt
        return _unread(path, f"unreadable ({e})")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        return _unread(path, f"corrupt or truncated JSON ({e})")
    except RecursionError:
        return _unread(path, "JSON nested too deeply to read")
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        return _unread(path, f"unreadable JSON ({e})")
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), dict):
        return _unread(path, "no 'entries' object")
    entries, issues = {}, []
    for key, value in raw["entries"].items():
        try:
            entries[key] = Entry.from_json(key, value)
        except EntryError as e:
            issues.append(f"{path}: entry {key} skipped: {e}")
    apply_held_layouts(entries.values())
    meta = raw.get("meta") if isinstance(raw.get("meta"), dict) else None
    if meta is not None and meta.get("format", CACHE_FORMAT) != CACHE_FORMAT:  # said why
        issues.insert(0, f"{path}: cache format {meta.get('format')!r}; this fp8tower reads "
                         f"format {CACHE_FORMAT}")
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

        if self.path.parent.exists() and not self.path.parent.is_dir():
            raise NotADirectoryError(
                f"the tuning cache folder {self.path.parent} is a file (FP8TOWER_CACHE_DIR, "
                "else $XDG_CACHE_HOME/fp8tower or ~/.cache/fp8tower)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock", timeout=self.LOCK_TIMEOUT_S):
            try:  # a file this process cannot read (another user's) is not replaced: that
                mode = self.path.stat().st_mode & 0o777  # dropped every entry of its owner
                self.path.open("rb").close()
            except FileNotFoundError:
                mode = umask_mode()
            entries, why = self._read_matching(warn=False)
            if why:
                _warn(f"replacing {self.path}: {why}")
            merged = {k: e.to_json() for k, e in entries.items()}
            merged.update({k: e.to_json() for k, e in new.items()})
            doc = {"meta": self.meta, "entries": dict(sorted(merged.items()))}
            # under the lock no writer is alive: a temp file left is a crashed writer's
            for old in self.path.parent.glob(f".{self.path.name}.*.tmp"):
                old.unlink(missing_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                       suffix=".tmp")
            if hasattr(os, "fchmod"):
                os.fchmod(fd, mode)  # mkstemp's 0600 would lock the team out of a shared folder
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

    win = graph = None  # None: every candidate failed
    if entry.ranked():
        w = entry.winner
        win = cand(w)
        win["ceiling_fraction"] = (
            w.gbps / entry.read_ceiling_gbps if entry.read_ceiling_gbps and w.gbps else None
        )
        g = entry.choice_for(graph=True)
        if g != (entry.backend, entry.config):
            graph = cand(next(c for c in entry.ranked() if (c.backend, c.config) == g))
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
        "has_bias": p.has_bias,
        "winner": win,
        # what a CUDA graph runs where that is not the winner (Entry.choice_for), else None
        "graph_winner": graph,
        "runners_up": [cand(c) for c in entry.runners_up(runners_up)],
        "margin": entry.margin(),
        "within_noise": entry.within_noise(),
        "margin_other_backend": entry.margin_other_backend(),
        "measured": len(entry.ranked()),
        "failed": [{"backend": c.backend, "config": c.config, "error": c.error}
                   for c in entry.failures()],
        "pruned": dict(entry.pruned),
        "seeded_from": entry.seeded_from,
        "context": entry.context,  # in-context tuning: the step and its times per candidate
        "bytes_moved": p.bytes_moved(),
        "read_ceiling_gbps": entry.read_ceiling_gbps,
        "date": entry.date,
    }
