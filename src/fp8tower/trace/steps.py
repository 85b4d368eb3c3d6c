"""Which decode step each kernel belongs to, and per-step busy time and span.

Step boundaries come, in order of preference, from:
1. "gpu ranges": GPU projections of the step ranges (torch `gpu_user_annotation`), by time;
2. "host ranges": host step ranges (record_function / NVTX `fp8tower.step`): a kernel is in
   step i when the launch call sharing its correlation id (cudaLaunchKernel, or the
   cudaGraphLaunch of a replayed graph) ran inside range i; on a CPU run, the op itself;
3. "graph launches": no ranges, but exactly one cudaGraphLaunch per declared step;
4. "none": per-step spans are then unknown (the two-length span difference still works).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import TraceError
from .events import STEP_RANGE, Range, Trace


@dataclass
class Steps:
    """``step_of[row]``: step index of kernel row, or -1 outside every step."""

    method: str
    step_of: np.ndarray
    count: int

    def rows(self, step: int) -> np.ndarray:
        return np.flatnonzero(self.step_of == step)


def compile_step_pattern(pattern: str) -> re.Pattern:
    """The step range regex (--step-range); a bad one is a TraceError, not a traceback."""
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise TraceError(
            f"step range pattern {pattern!r} (--step-range) is not a regular expression ({e})"
        ) from None


def count_step_ranges(trace: Trace, pattern: str = re.escape(STEP_RANGE)) -> int:
    """How many steps the trace's own ranges mark: host ranges (one per step the run did),
    else their GPU projections; 0 when it has none."""
    host, _ = step_ranges(trace, pattern, prefer_gpu=False)
    if host:
        return len(host)
    gpu, on_gpu = step_ranges(trace, pattern, prefer_gpu=True)
    return len(gpu) if on_gpu else 0


def step_ranges(
    trace: Trace, pattern: str = re.escape(STEP_RANGE), prefer_gpu: bool = True
) -> tuple[list[Range], bool]:
    """The step ranges of a trace (GPU ones when present and preferred) and whether they are
    GPU ranges."""
    rx = compile_step_pattern(pattern)
    gpu = [r for r in trace.ranges if r.on_gpu and rx.search(r.name)]
    host = [r for r in trace.ranges if not r.on_gpu and rx.search(r.name)]
    # kineto projects a range once per (device, stream): a step whose kernels ran on two
    # streams has two GPU ranges, so GPU ranges count steps only on one stream; else the host
    # ranges (linked to kernels by correlation) do
    if gpu and prefer_gpu and not trace.is_cpu and (len({r.tid for r in gpu}) == 1 or not host):
        return gpu, True
    return host, False


def empty_steps(trace: Trace, expected: int, pattern: str = re.escape(STEP_RANGE)) -> list[int]:
    """The steps (0-based) of ``trace`` that hold no kernel, segmented as `segment_steps`
    does with host ranges first (a GPU projection exists only for a range that ran kernels).
    A step with no kernel is a trace that lost them (a full CUPTI buffer drops the last
    steps' kernels, yet the per-name counts may still divide evenly); [] when the trace has
    no step ranges, or host ranges but no launch calls to link them with."""
    host, _ = step_ranges(trace, pattern, prefer_gpu=False)
    if host and not trace.is_cpu and not len(trace.launches):
        return []
    seg = segment_steps(trace, expected, pattern, prefer_gpu=not host)
    if not seg.count:
        return []
    counts = np.bincount(seg.step_of[seg.step_of >= 0], minlength=seg.count)
    return np.flatnonzero(counts == 0).tolist()


def _by_time(starts: np.ndarray, ranges: list[Range]) -> np.ndarray:
    """Index of the range containing each time, or -1 (ranges sorted and disjoint)."""
    r_start = np.array([r.start_us for r in ranges])
    r_end = np.array([r.end_us for r in ranges])
    idx = np.searchsorted(r_start, starts, side="right") - 1
    ok = (idx >= 0) & (starts <= r_end[np.clip(idx, 0, None)])
    return np.where(ok, idx, -1)


def segment_steps(
    trace: Trace,
    expected: int | None = None,
    pattern: str = re.escape(STEP_RANGE),
    prefer_gpu: bool = True,
) -> Steps:
    """Assign each kernel of ``trace`` to a step. ``expected`` (the declared step count) is
    checked against the ranges found; a mismatch is a `TraceError`. ``prefer_gpu=False``
    uses host ranges even when GPU projections exist (torch projects only ranges that
    launched kernels)."""
    k = trace.kernels
    none = Steps("none", np.full(len(k), -1, np.int64), 0)
    ranges, on_gpu = step_ranges(trace, pattern, prefer_gpu)
    ranges = sorted(ranges, key=lambda r: r.start_us)
    if ranges:
        if expected is not None and len(ranges) != expected:
            raise TraceError(
                f"{len(ranges)} step ranges matching {pattern!r}, but the run is "
                f"declared as {expected} steps (mismatched --steps, or the profile "
                "covered warm-up steps too)",
                trace.path,
            )
        if on_gpu or trace.is_cpu:
            return Steps(
                "gpu ranges" if on_gpu else "host ranges (CPU ops)",
                _by_time(k.start_us, ranges),
                len(ranges),
            )
        launches = trace.launches
        if not len(launches):
            raise TraceError(
                "host step ranges but no launch calls to link them to kernels "
                "(trace the CUDA runtime too)",
                trace.path,
            )
        range_tids = {r.tid for r in ranges if r.tid >= 0}
        same_thread = (
            np.isin(launches.tid, list(range_tids)) if range_tids else np.ones(len(launches), bool)
        )
        l_step = np.where(same_thread, _by_time(launches.start_us, ranges), -1)
        inside = l_step >= 0
        corr, l_step = launches.correlation[inside], l_step[inside]
        order = np.argsort(corr, kind="stable")
        corr, l_step = corr[order], l_step[order]
        step_of = np.full(len(k), -1, np.int64)
        if len(corr):
            pos = np.searchsorted(corr, k.correlation).clip(0, len(corr) - 1)
            step_of = np.where(corr[pos] == k.correlation, l_step[pos], -1)
        return Steps("host ranges", step_of.astype(np.int64), len(ranges))
    graph = trace.launches.correlation[trace.launches.is_graph]
    if expected and len(graph) == expected:
        order = np.argsort(trace.launches.start_us[trace.launches.is_graph], kind="stable")
        step_by_corr = {int(c): i for i, c in enumerate(graph[order])}
        step_of = np.array([step_by_corr.get(int(c), -1) for c in k.correlation], np.int64)
        return Steps("graph launches", step_of, expected)
    return none


@dataclass(frozen=True)
class StepTimes:
    """Kernel-busy time and span (first kernel start to last kernel end) of an average step."""

    busy_ms: float | None
    span_ms: float | None
    steps_seen: int
    method: str


def step_times(trace: Trace, steps: Steps) -> StepTimes:
    """Mean over the segmented steps of ``trace``."""
    if steps.count == 0:
        return StepTimes(None, None, 0, steps.method)
    k = trace.kernels
    busy, span = [], []
    for s in range(steps.count):
        rows = steps.rows(s)
        if len(rows) == 0:
            continue
        busy.append(k.dur_us[rows].sum())
        span.append((k.start_us[rows] + k.dur_us[rows]).max() - k.start_us[rows].min())
    if not busy:
        return StepTimes(None, None, 0, steps.method)
    return StepTimes(
        float(np.mean(busy)) / 1e3, float(np.mean(span)) / 1e3, len(busy), steps.method
    )


def trace_span_us(trace: Trace) -> float:
    """First kernel start to last kernel end of the whole trace."""
    k = trace.kernels
    if not len(k):
        return 0.0
    return float((k.start_us + k.dur_us).max() - k.start_us.min())


def graph_replay_problems(trace: Trace, limit: int = 3) -> list[str]:
    """With "graph node id" args (newer torch, nsys graphNodeId): every replay of a graph
    (kernels sharing one launch correlation id) must run the same set of nodes, each once.
    A replay missing nodes means the trace dropped kernels (e.g. a full CUPTI buffer)."""
    k = trace.kernels
    rows = np.flatnonzero((k.graph_node_id >= 0) & (k.correlation >= 0))
    if not len(rows):
        return []
    replays: dict[tuple[int, int], list[int]] = {}
    for g, c, node in zip(
        k.graph_id[rows].tolist(), k.correlation[rows].tolist(), k.graph_node_id[rows].tolist()
    ):
        replays.setdefault((g, c), []).append(node)
    nodes_of: dict[int, set[int]] = {}
    for (g, _), nodes in replays.items():
        nodes_of.setdefault(g, set()).update(nodes)
    problems = []
    for (g, c), nodes in replays.items():
        full = nodes_of[g]
        if len(nodes) != len(full) or len(set(nodes)) != len(nodes):
            problems.append(
                f"replay of graph {g} (correlation {c}) ran {len(nodes)} kernels "
                f"for {len(full)} graph nodes"
            )
    if len(problems) > limit:
        problems = problems[:limit] + [f"... {len(problems) - limit} more incomplete replays"]
    return problems
