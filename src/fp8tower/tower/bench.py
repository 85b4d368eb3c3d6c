"""Benchmark towers: every (scheme, arm, backend, M), with speedups over a baseline."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..formats import Scheme
from ..models import DEFAULT_PARTS, TowerSpec, get_spec
from ..nn.merged import MergeError, MergeMode
from ..tuning.timer import L2_FACTOR
from .build import ARMS, Tower, build_tower
from .timing import time_tower


@dataclass
class BenchRow:
    """One (scheme, arm, backend, M) measurement of :func:`bench_tower` (or why it was not)."""

    scheme: str
    arm: str
    backend: str
    m: int
    status: str = "ok"  # "ok" | "skipped"
    reason: str | None = None  # why skipped
    ms_per_step: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    gbps: float | None = None  # decimal: bytes_per_step / time
    ceiling_pct: float | None = None
    speedup: float | None = None  # baseline ms / ms (> 1: faster than the baseline)
    baseline: str | None = None  # "arm/backend" of the baseline, and why when not cublaslt
    gemms: int | None = None
    bytes_per_step: int | None = None  # GEMM weights + scales + activations + outputs
    fp8_bytes: int | None = None  # N*K summed
    chosen: dict[str, int] = field(default_factory=dict)  # backend -> GEMMs it serves
    timing: str | None = None  # TowerTiming.method
    round_ms: list[float] = field(default_factory=list)  # each round's median ms/step
    early_edges: int | None = None  # PDL edges the timed graph launched early (graph_edges)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


BASELINE = ("unmerged", "cublaslt")


def bench_tower(
    spec: TowerSpec | str,
    *,
    schemes: Sequence[Scheme | str] = (Scheme.PER_TENSOR,),
    arms: Sequence[str] = ARMS,
    backend_names: Sequence[str] = ("cublaslt", "auto"),
    ms: Sequence[int] = (1, 8, 32),
    parts: Sequence[str] | str = DEFAULT_PARTS,
    merge_mode: MergeMode | str = MergeMode.EXACT,
    device: torch.device | str | None = None,
    seed: int = 0,
    replays: int = 20,
    steps: int = 8,
    rounds: int = 1,
    read_ceiling_gbps: float | None = None,
    advance: Callable[[str], None] | None = None,
) -> list[BenchRow]:
    """Measure every (scheme, arm, backend, M). Rows a backend cannot serve (or an arm cannot
    merge) are skipped with the reason. Every cell of the arms held together is warmed up (and
    tuned, with ``auto``) before the first of them is timed.

    ``rounds`` > 1: the arms of a scheme are held together and every (arm, backend, M) cell is
    timed once a round, the order reversed every other round, so the ratios between cells
    (speedups, M ratios) compare times taken side by side, not minutes apart, and no tuning
    falls between two timings; a row's time is the median of its rounds. ``rounds`` = 1 holds
    one arm at a time (for models too large to hold two): a later arm is built, and with
    ``auto`` tuned, after the earlier arms were timed, so its ratios to them compare times
    minutes apart. ``advance(description)`` is called once per cell and round (a progress
    bar)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    spec = get_spec(spec) if isinstance(spec, str) else spec
    build = {"device": device, "seed": seed, "parts": parts, "merge_mode": merge_mode}
    rows: list[BenchRow] = []
    for scheme in (Scheme.parse(s) for s in schemes):
        for group in ([arms] if rounds > 1 else [[a] for a in arms]):
            rows += _bench_arms(spec, scheme, group, backend_names, ms, build, replays, steps,
                                rounds, read_ceiling_gbps, advance)
    add_speedups(rows)
    return rows


def _bench_arms(spec, scheme, arms, backend_names, ms, build, replays, steps, rounds, ceiling,
                advance) -> list[BenchRow]:
    """Rows of ``arms`` (towers held together) for one scheme; see `bench_tower`."""
    combos = [(b, m) for b in backend_names for m in ms]
    rows: list[BenchRow] = []
    cells: list[tuple[BenchRow, Tower]] = []
    towers = []
    for arm in arms:
        try:
            tower = build_tower(spec, scheme=scheme, arm=arm, backend=backend_names[0], m=ms[0],
                                **build)
        except MergeError as e:  # e.g. block128 shards with N not a multiple of 128
            for b, m in combos:
                rows.append(BenchRow(scheme.value, arm, b, m, "skipped", str(e)))
                _advance(advance, rounds, f"{scheme.value} {arm} {b} M={m}")
            continue
        towers.append(tower)
        for b, m in combos:
            row = _prepare(tower, b, m)
            rows.append(row)
            if row.ok:
                cells.append((row, tower))
            else:
                _advance(advance, rounds, f"{scheme.value} {arm} {b} M={m}")
    for r in range(rounds):
        for row, tower in cells if r % 2 == 0 else cells[::-1]:
            if advance:
                advance(f"{scheme.value} {row.arm} {row.backend} M={row.m}"
                        + (f" (round {r + 1}/{rounds})" if rounds > 1 else ""))
            _time_cell(row, tower, replays, steps)
    for row, tower in cells:
        _finish(row, tower, ceiling)
    del towers, cells
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


def _advance(advance, times: int, desc: str) -> None:
    for _ in range(times if advance else 0):
        advance(desc)


def _prepare(tower: Tower, backend: str, m: int) -> BenchRow:
    """The row of one cell, warmed up (tuned): or skipped, with why."""
    tower.reconfigure(backend=backend, m=m)
    row = BenchRow(tower.scheme.value, tower.arm, backend, m, gemms=tower.gemm_count(),
                   fp8_bytes=tower.fp8_bytes(), bytes_per_step=tower.bytes_per_step())
    reason = tower.unservable()
    if reason is not None:
        row.status, row.reason = "skipped", reason
        return row
    tower.warmup()
    return row


def _time_cell(row: BenchRow, tower: Tower, replays: int, steps: int) -> None:
    """One round of one cell: its time appended to the row, its backends counted."""
    tower.reconfigure(backend=row.backend, m=row.m)
    t = time_tower(tower, replays=replays, steps=steps)
    row.round_ms.append(t.ms_per_step)
    row.min_ms = t.min_ms if row.min_ms is None else min(row.min_ms, t.min_ms)
    row.max_ms = t.max_ms if row.max_ms is None else max(row.max_ms, t.max_ms)
    row.timing = t.method
    row.early_edges = getattr(tower._graph, "early_edges", None)
    row.chosen = {}
    for op in tower.ops():
        if op.kind == "gemm":
            row.chosen[op.backend] = row.chosen.get(op.backend, 0) + 1


def _finish(row: BenchRow, tower: Tower, ceiling: float | None) -> None:
    row.ms_per_step = statistics.median(row.round_ms)
    row.gbps = row.bytes_per_step / (row.ms_per_step * 1e-3) / 1e9
    if ceiling and not _fits_in_l2(row.bytes_per_step, tower.device):
        row.ceiling_pct = 100.0 * row.gbps / ceiling


def _fits_in_l2(nbytes: int, device) -> bool:
    """Whether a step's bytes could stay in L2 across replays, in part (L2_FACTOR = 3x the
    L2 or less, the tuner's cold-L2 bound): the tower is timed without rotation
    (tower/timing.py), so such a step reads from L2 and a share of the HBM read ceiling means
    little (a toy tower showed more than 100%)."""
    if getattr(device, "type", "cpu") != "cuda":
        return False
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return nbytes <= L2_FACTOR * l2


def add_speedups(rows: list[BenchRow]) -> None:
    """Each ok row's speedup over the unmerged cublaslt row of its scheme and M; where that
    row was not run or was skipped, over the first ok row of that scheme and M (said so)."""
    for key in dict.fromkeys((r.scheme, r.m) for r in rows):
        same = [r for r in rows if (r.scheme, r.m) == key]
        ok = [r for r in same if r.ok]
        if not ok:
            continue
        base = next((r for r in ok if (r.arm, r.backend) == BASELINE), None)
        if base is not None:
            note = f"{base.arm}/{base.backend}"
        else:
            base = ok[0]
            planned = next((r for r in same if (r.arm, r.backend) == BASELINE), None)
            why = "not asked for" if planned is None else "cannot serve it"
            note = (f"{base.arm}/{base.backend} (the first arm: {'/'.join(BASELINE)} {why})")
        for r in ok:
            r.speedup, r.baseline = base.ms_per_step / r.ms_per_step, note
