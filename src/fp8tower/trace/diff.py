"""Two-length difference of traces: per kernel name, launches and ms per decode step.

Per step = (long - short) / (steps_long - steps_short): whatever happens once per run
(warm-up, input copies, profiler start) cancels. Launch counts per step must be integers:
a fractional count means a graph-level trace (kernels inside CUDA graphs not recorded one by
one) or two runs that did not do the same work per step, and the numbers cannot be trusted;
a negative count means SHORT and LONG are swapped or traces of different programs.

The declared step counts are checked against the traces' own step boundaries: step ranges,
else cudaGraphLaunch calls (one per step); step ranges in only one trace are an error. With
neither, the result carries a warning that the per-step numbers rest on the declared counts
alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from .errors import TraceError
from .events import STEP_RANGE, KernelTable, Trace
from .steps import count_step_ranges, empty_steps

#: |launches per step - nearest integer| above this is "fractional" (op rows, launch checks;
#: a kernel's own count is checked exactly, `KernelDelta.integral`)
INTEGRAL_TOL = 1e-3


def is_integral(launches_per_step: float, tol: float = INTEGRAL_TOL) -> bool:
    """A whole number of launches per step, not negative (see `DiffResult.fractional_message`
    for what a negative one means)."""
    return launches_per_step > -tol and abs(launches_per_step - round(launches_per_step)) <= tol


def check_steps(steps: tuple[int, int]) -> tuple[int, int]:
    short, long = (int(s) for s in steps)
    if short < 0 or long <= short:
        raise TraceError(f"steps must be two counts SHORT < LONG (e.g. 8 136), got {short} {long}")
    return short, long


def name_totals(
    kernels: KernelTable, rows: np.ndarray | None = None
) -> dict[str, tuple[int, float]]:
    """kernel name -> (launches, summed duration in us), over ``rows`` (default: all)."""
    ids = kernels.name_id if rows is None else kernels.name_id[rows]
    dur = kernels.dur_us if rows is None else kernels.dur_us[rows]
    n = len(kernels.names)
    counts = np.bincount(ids, minlength=n)
    sums = np.bincount(ids, weights=dur, minlength=n)
    return {kernels.names[i]: (int(counts[i]), float(sums[i])) for i in np.flatnonzero(counts)}


@dataclass(frozen=True)
class KernelDelta:
    """One kernel name's per-step cost."""

    name: str
    launches_short: int
    launches_long: int
    us_short: float
    us_long: float
    launches_per_step: float
    ms_per_step: float
    steps_diff: int  # steps_long - steps_short

    @property
    def integral(self) -> bool:
        """Exact on the integer counts: a tolerance on the ratio hides an extra launch once
        the step difference exceeds 1/tolerance (1 more launch in 1024 more steps is 0.001)."""
        more = self.launches_long - self.launches_short
        return more >= 0 and more % self.steps_diff == 0


def delta(
    name: str, short: tuple[int, float], long: tuple[int, float], steps: tuple[int, int]
) -> KernelDelta:
    d = steps[1] - steps[0]
    return KernelDelta(
        name,
        short[0],
        long[0],
        short[1],
        long[1],
        (long[0] - short[0]) / d,
        (long[1] - short[1]) / d / 1e3,
        d,
    )


@dataclass
class DiffResult:
    steps: tuple[int, int]
    kernels: list[KernelDelta]  # most ms per step first
    device: str
    paths: tuple[str, str]
    #: what the declared steps could not be checked against (the CLI prints them as warnings)
    warnings: list[str] = field(default_factory=list)

    @property
    def launches_per_step(self) -> float:
        return sum(k.launches_per_step for k in self.kernels)

    @property
    def ms_per_step(self) -> float:
        return sum(k.ms_per_step for k in self.kernels)

    @property
    def fractional(self) -> list[KernelDelta]:
        return [k for k in self.kernels if not k.integral]

    @property
    def integral(self) -> bool:
        return not self.fractional

    def to_json(self) -> dict:
        """The documented JSON contract of `fp8tower trace diff --json`."""
        return {
            "steps": {"short": self.steps[0], "long": self.steps[1]},
            "device": self.device,
            "cpu_run": self.device == "cpu",
            "kernels": [
                {
                    "name": k.name,
                    "launches_per_step": k.launches_per_step,
                    "ms_per_step": k.ms_per_step,
                    "integral": k.integral,
                }
                for k in self.kernels
            ],
            "total": {"launches_per_step": self.launches_per_step, "ms_per_step": self.ms_per_step},
            "integral": self.integral,
            "warnings": list(self.warnings),
        }

    def fractional_message(self, limit: int = 5) -> str:
        bad = self.fractional
        negative = [k for k in bad if k.launches_per_step < 0]
        if negative:
            return (
                f"launch counts per step are negative for {len(negative)} kernel name(s) "
                f"({_listed(negative, limit)}): LONG ran fewer of them than SHORT. Either SHORT "
                "and LONG are swapped (give the shorter run first) or they are traces of "
                "different programs (e.g. of two arms). Per-step numbers from these traces "
                "cannot be trusted."
            )
        return (
            f"launch counts per step are not integers for {len(bad)} kernel name(s) "
            f"({_listed(bad, limit)}). Either the trace is graph-level (kernels inside CUDA graphs "
            "not recorded one by one; capture node-level: torch.profiler records replayed "
            "kernels, nsys needs --cuda-graph-trace=node) or the two runs did not do the "
            "same work per step. Per-step numbers from these traces cannot be trusted."
        )


def _listed(kernels: list[KernelDelta], limit: int) -> str:
    shown = ", ".join(f"{k.name[:60]} {k.launches_per_step:.3f}/step" for k in kernels[:limit])
    return shown + (f" and {len(kernels) - limit} more" if len(kernels) > limit else "")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def orphan_graph_launches(trace: Trace) -> int:
    """How many cudaGraphLaunch calls of ``trace`` share their correlation id with no kernel:
    a node-level trace records every replayed kernel under its replay's id."""
    graph = trace.launches.correlation[trace.launches.is_graph]
    if not len(graph) or trace.is_cpu:
        return 0
    return int(np.count_nonzero(~np.isin(graph, trace.kernels.correlation)))


def check_graph_launches(short: Trace, long: Trace, steps: tuple[int, int]) -> str | None:
    """Graph replays read as `steps.segment_steps` reads them, one cudaGraphLaunch per step: LONG
    then holds steps_long - steps_short more of them than SHORT (replays outside the steps,
    e.g. warm-up, cancel). More of them, but not a whole number per declared step, is an error.
    None when they confirm the steps, else why they do not."""
    n_s, n_l = (int(np.count_nonzero(t.launches.is_graph)) for t in (short, long))
    more, d = n_l - n_s, steps[1] - steps[0]
    if more == d:
        return None
    if more <= 0:
        if not n_s and not n_l:
            return "no cudaGraphLaunch calls"
        return f"no more cudaGraphLaunch calls in LONG ({n_l}) than in SHORT ({n_s})"
    if more % d:
        raise TraceError(
            f"{more} more cudaGraphLaunch calls in LONG ({n_l}) than in SHORT ({n_s}) for "
            f"{d} more declared steps: {more / d:.3g} per step, not a whole number "
            "(mismatched --steps, or runs that did not replay the same graphs per step): the "
            "per-step figures would be wrong"
        )
    return (
        f"{more // d} cudaGraphLaunch calls per declared step, not one (several graphs per "
        "step, or --steps off by that factor)"
    )


def _launch_shapes(k: KernelTable) -> dict[tuple, int]:
    """(kernel name, grid x/y/z, block x/y/z) -> its first row, per distinct one in ``k``."""
    cols = np.column_stack([k.name_id, k.grid, k.block]).astype(np.int32)
    rows = np.unique(cols.view(np.dtype((np.void, 4 * 7))).ravel(), return_index=True)[1]
    return {(k.names[c[0]], *c[1:]): int(r) for c, r in zip(cols[rows].tolist(), rows.tolist())}


def shape_mismatch(short: Trace, long: Trace) -> str | None:
    """Why SHORT and LONG look like runs of different programs or shapes (another M, model or
    arm), or None: LONG runs more steps of the same program, so it launched every (kernel
    name, grid, block) SHORT did. Two runs whose kernels are the same (e.g. two scaling
    schemes that differ only in their weights' values) cannot be told apart here."""
    if not len(short.kernels) or not len(long.kernels):
        return None
    in_short, in_long = _launch_shapes(short.kernels), _launch_shapes(long.kernels)
    missing = sorted((row, shape) for shape, row in in_short.items() if shape not in in_long)
    if not missing:
        return None
    name, *dims = missing[0][1]  # the first SHORT launched
    shape = f" (grid {dims[:3]}, block {dims[3:]})" if short.device == "cuda" else ""
    return (
        f"SHORT's kernel {name[:80]!r}{shape} never ran in LONG ({len(missing)} of SHORT's "
        f"{len(in_short)} kernel name, grid and block combinations are not in LONG): SHORT "
        "and LONG look like captures of different programs or shapes (another M, model or "
        "arm), and their difference is no per-step cost"
    )


def check_pair(
    short: Trace, long: Trace, steps: tuple[int, int], pattern: str = re.escape(STEP_RANGE)
) -> list[str]:
    """The two traces are two different runs whose step boundaries agree with the declared
    step counts: otherwise the per-step figures come out doubled, halved or zero with nothing
    to show for it. The boundaries are step ranges (in both traces), else graph launches
    (`check_graph_launches`); returns a warning when there are neither (the figures then rest
    on ``steps`` alone), and one when SHORT launched a kernel LONG never did
    (`shape_mismatch`)."""
    if _same_file(short.path, long.path):
        raise TraceError(f"SHORT and LONG are the same file ({long.path}): give two runs")
    k_s, k_l = short.kernels, long.kernels
    if (
        len(k_s)
        and len(k_s) == len(k_l)
        and k_s.names == k_l.names
        and np.array_equal(k_s.start_us, k_l.start_us)
        and np.array_equal(k_s.dur_us, k_l.dur_us)
    ):
        raise TraceError(
            f"SHORT ({short.path}) and LONG ({long.path}) hold the same trace: give two runs"
        )
    found = (count_step_ranges(short, pattern), count_step_ranges(long, pattern))
    if found == (steps[1], steps[0]):
        raise TraceError(
            f"SHORT and LONG are swapped: {short.path} holds {found[0]} step ranges and "
            f"{long.path} {found[1]}, but the steps are declared as {steps[0]} {steps[1]} "
            "(give the shorter run first)"
        )
    for trace, n, want, other, which in (
        (short, found[0], steps[0], found[1], "SHORT"),
        (long, found[1], steps[1], found[0], "LONG"),
    ):
        # one trace's ranges say nothing about the other's length: unchecked, a LONG run of
        # 10 steps declared as 6 came out with no error and no warning
        if not n and want and other:
            raise TraceError(
                f"{which} holds no step ranges matching {pattern!r}, but the other trace "
                f"holds {other}: its declared {want} steps cannot be checked (two runs "
                "captured differently, or a trace of another program); capture both with "
                "step ranges",
                trace.path,
            )
        if n and n != want:
            raise TraceError(
                f"{n} step ranges matching {pattern!r}, but {which} is declared as {want} "
                "steps (mismatched --steps, or the profile covered warm-up steps too): the "
                "per-step figures would be wrong",
                trace.path,
            )
    for trace, want, which in ((short, steps[0], "SHORT"), (long, steps[1], "LONG")):
        orphans = orphan_graph_launches(trace)
        if orphans:
            raise TraceError(
                f"{which}: {orphans} of its {int(np.count_nonzero(trace.launches.is_graph))} "
                "cudaGraphLaunch calls have no kernel in the trace (a graph-level trace, "
                "kernels the profiler dropped, or graphs without kernels): the replayed "
                "kernels would count 0 a step, integral but wrong; capture node-level "
                "(torch.profiler records replayed kernels, nsys needs --cuda-graph-trace=node)",
                trace.path,
            )
        empty = empty_steps(trace, want, pattern) if found[0] or found[1] else []
        if empty:
            shown = ", ".join(str(s + 1) for s in empty[:8]) + (" ..." if len(empty) > 8 else "")
            raise TraceError(
                f"{which}: {len(empty)} of its {want} steps hold no kernel (step {shown}): "
                "the trace lost kernels (a full profiler buffer drops the last steps') or "
                "the step ranges mark steps that launched nothing; the per-step figures "
                "would be wrong",
                trace.path,
            )
    shape = shape_mismatch(short, long)
    warnings = [] if shape is None else [shape]
    if any(found):
        return warnings
    graphs = check_graph_launches(short, long, steps)
    if graphs is None:
        return warnings
    warning = (
        f"no step boundaries to check --steps {steps[0]} {steps[1]} against: no ranges "
        f"matching '{pattern}' (--step-range) in either trace, and {graphs}; the per-step "
        "numbers rest on --steps alone"
    )
    return [warning, *warnings]


def diff_traces(
    short: Trace, long: Trace, steps: tuple[int, int], step_pattern: str = re.escape(STEP_RANGE)
) -> DiffResult:
    """Per kernel name, (long - short) / (steps_long - steps_short) launches and ms.

    The pair is checked first (`check_pair`): two different runs, step boundaries (if any)
    agreeing with ``steps``, and LONG holding more kernels than SHORT."""
    steps = check_steps(steps)
    warnings = check_pair(short, long, steps, step_pattern)
    if short.device != long.device:
        raise TraceError(
            f"cannot diff a {short.device} trace ({short.path}) against a "
            f"{long.device} trace ({long.path})"
        )
    n_s, n_l = len(short.kernels), len(long.kernels)
    if n_l <= n_s:
        raise TraceError(
            f"LONG ({long.path}) holds {n_l} kernels and SHORT ({short.path}) {n_s}: "
            f"{(n_l - n_s) / (steps[1] - steps[0]):.3f} launches per step, but LONG, run for "
            "more steps, must hold more kernels than SHORT (SHORT and LONG swapped, two runs "
            "of the same length, or traces of different programs)"
        )
    a, b = name_totals(short.kernels), name_totals(long.kernels)
    rows = [
        delta(name, a.get(name, (0, 0.0)), b.get(name, (0, 0.0)), steps)
        for name in sorted(set(a) | set(b))
    ]
    rows.sort(key=lambda k: (-k.ms_per_step, k.name))
    return DiffResult(steps, rows, long.device, (short.path, long.path), warnings)
