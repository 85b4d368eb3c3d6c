"""Attribute kernels to ops, and check each op ran its backend's kernels.

With a manifest, the kernels of each step map to the op sequence by position (op i owns
`kernels` consecutive launches). With a map file, each kernel takes the first matching rule
(see mapfile). Per op the two-length difference gives launches and ms per step; bytes per
step come from the manifest/map, GB/s is decimal (1e9 B/s).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np

from .arm import Arm
from .diff import (
    INTEGRAL_TOL,
    DiffResult,
    KernelDelta,
    delta,
    diff_traces,
    is_integral,
    name_totals,
)
from .errors import TraceError
from .events import Trace
from .expect import LaunchCheck, check_expected
from .launches import HostStats, host_stats, load_launch_calls
from .manifest import OpRecord
from .mapfile import Rule
from .steps import (
    Steps,
    StepTimes,
    graph_replay_problems,
    segment_steps,
    step_times,
    trace_span_us,
)
from .validate import num_field

UNATTRIBUTED = "(unattributed)"

#: Hidden kernel time per step under which the overlap note is not printed. Kernel start and
#: end timestamps jitter by tens of ns (h200_27b_m1/merged_triton: 12 overlaps of < 0.07 us
#: in 136 steps, 0.000006 ms/step), while early launch hides microseconds per kernel (27B
#: block128 M = 32: ~1.2 ms/step). Under 0.5 us per step the note would print noise, "0.0000"
#: to "0.0005"; the kernels are still counted without the overlap.
OVERLAP_NOTE_MIN_MS = 0.0005

#: An op's ms per step under minus this is reported as noise (float rounding is far below).
NEGATIVE_MS_TOL = 1e-6


def kernel_family(name: str) -> str:
    """A short, stable name for a kernel: no 'void ', template arguments or parameters."""
    s = name.removeprefix("void ")
    cut = min((i for i in (s.find("<"), s.find("(")) if i > 0), default=len(s))
    return s[:cut][:80]


@dataclass
class OpRow:
    """One op label's per-step cost in one arm."""

    label: str
    group: str
    n: int | None
    k: int | None
    backends: list[str]
    calls_per_step: float
    launches_per_step: float
    ms_per_step: float
    bytes_per_step: float | None
    kernels: dict[str, float]  # kernel name -> launches per step
    share: float = 0.0
    #: the exact counts behind ``launches_per_step``: kernel name -> launches in the long
    #: trace minus the short one, and the step difference (0: counts not known, e.g. a row
    #: built by hand; ``integral`` then falls back to the ratio's tolerance)
    kernel_more: dict[str, int] = field(default_factory=dict)
    steps_diff: int = 0

    @property
    def gbps(self) -> float | None:
        if self.bytes_per_step is None or self.ms_per_step <= 0:
            return None
        return self.bytes_per_step / self.ms_per_step / 1e6

    @property
    def families(self) -> list[str]:
        return sorted({kernel_family(n) for n, lps in self.kernels.items() if lps > INTEGRAL_TOL})

    @property
    def launches_more(self) -> int:
        return sum(self.kernel_more.values())

    @property
    def integral(self) -> bool:
        """Exact on the integer counts where known (as `KernelDelta.integral`): one extra
        launch in 2000 more steps is 0.0005 a step, inside any tolerance on the ratio."""
        if self.steps_diff <= 0:
            return is_integral(self.launches_per_step)
        more = self.launches_more
        return more >= 0 and more % self.steps_diff == 0


@dataclass(frozen=True)
class Mismatch:
    """An op whose kernels do not match its backend's kernel regex."""

    label: str
    backend: str
    kernel_regex: str
    kernel: str
    launches: int  # in the long trace

    def message(self) -> str:
        return (
            f"op {self.label}: backend {self.backend} expects kernels matching "
            f"/{self.kernel_regex}/, but {self.launches} launch(es) of {self.kernel[:100]!r} "
            "ran in its place"
        )


@dataclass
class Attribution:
    arm: str
    device: str
    steps: tuple[int, int]
    source: str  # "manifest" | "map"
    ops: list[OpRow]
    unattributed: list[KernelDelta]
    diff: DiffResult
    step_times: StepTimes
    span_diff_ms: float  # two-length difference of the whole-trace kernel span
    event_ms_per_step: float | None
    ceiling_gbps: float | None
    ceiling_source: str | None  # "given" | "measured"
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    host: HostStats | None = None  # host launch statistics (launches.py), GPU traces
    launch_checks: list[LaunchCheck] = field(default_factory=list)  # expect.py

    @property
    def ms_per_step(self) -> float:
        return self.diff.ms_per_step

    @property
    def launches_per_step(self) -> float:
        return self.diff.launches_per_step

    @property
    def unattributed_ms(self) -> float:
        """Everything no op took, including once-per-run noise not listed in unattributed."""
        return self.ms_per_step - sum(op.ms_per_step for op in self.ops)

    @property
    def unattributed_launches(self) -> float:
        return self.launches_per_step - sum(op.launches_per_step for op in self.ops)

    @property
    def integral(self) -> bool:
        return self.diff.integral and all(op.integral for op in self.ops)

    @property
    def failed(self) -> bool:
        """Verification failed (exit code 1): an op's kernels do not match its backend, or a
        step launches other than what the model should (a failed launch-count check)."""
        return bool(self.mismatches) or any(not c.ok for c in self.launch_checks)

    def ceiling_pct(self, op: OpRow) -> float | None:
        if self.ceiling_gbps is None or op.gbps is None:
            return None
        return 100.0 * op.gbps / self.ceiling_gbps

    def excess_us_per_call(self, op: OpRow) -> float | None:
        """Microseconds each call takes beyond moving its bytes at the read ceiling: the
        fixed cost of a call (launch, ramp-up, tail, split-K reduction). On the H200 27B
        tower every merged GEMM, 31 to 84 MB, paid 4.6-5.0 us (trace_27b_m1/report.json)."""
        if self.ceiling_gbps is None or op.bytes_per_step is None or op.calls_per_step <= 0:
            return None
        ideal_ms = op.bytes_per_step / self.ceiling_gbps / 1e6
        return 1000.0 * (op.ms_per_step - ideal_ms) / op.calls_per_step


# -- kernel -> unit assignment ---------------------------------------------------------------


def _positions(trace: Trace, seg: Steps, per_step: int, steps: int) -> np.ndarray:
    """Position of each kernel within its step (-1 outside steps)."""
    n = len(trace.kernels)
    if seg.count == 0:
        if n != steps * per_step:
            raise TraceError(
                f"no step boundaries in the trace and {n} kernels != {steps} steps x {per_step} "
                "kernels per step (manifest): wrap each step in capture.step_range() so the "
                "kernels can be mapped to ops by position",
                trace.path,
            )
        return np.arange(n) % per_step
    pos = np.full(n, -1, np.int64)
    rows = np.flatnonzero(seg.step_of >= 0)
    rows = rows[np.argsort(seg.step_of[rows], kind="stable")]  # by step, then start time
    counts = np.bincount(seg.step_of[rows], minlength=seg.count)
    bad = np.flatnonzero(counts != per_step)
    if len(bad):
        s = int(bad[0])
        raise TraceError(
            f"step {s} has {counts[s]} kernels but the manifest's op sequence launches "
            f"{per_step} per step ({len(bad)} of {seg.count} steps differ): the ops cannot be "
            "mapped by position (did the backend launch a different number of kernels than the "
            "eager profile counted?)",
            trace.path,
        )
    pos[rows] = np.arange(len(rows)) % per_step
    return pos


def _manifest_units(trace: Trace, seg: Steps, ops: list[OpRecord], steps: int) -> np.ndarray:
    """Op index of each kernel (-1 outside steps)."""
    op_of_pos = np.repeat(np.arange(len(ops)), [op.kernels for op in ops])
    pos = _positions(trace, seg, len(op_of_pos), steps)
    return np.where(pos >= 0, op_of_pos[np.clip(pos, 0, None)], -1)


def _map_units(trace: Trace, seg: Steps, rules: list[Rule]) -> np.ndarray:
    """Rule index of each kernel (-1: no rule matched)."""
    k = trace.kernels
    n = len(k)
    if n == 0:
        return np.zeros(0, np.int64)
    sig_cols = np.column_stack([k.name_id.astype(np.int64), k.grid, k.block])
    sigs, inverse = np.unique(sig_cols, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    cands = [
        [i for i, r in enumerate(rules) if r.matches_kernel(k.names[int(s[0])], s[1:4], s[4:7])]
        for s in sigs
    ]
    if not any(r.has_ordinal for r in rules):
        first = np.array([c[0] if c else -1 for c in cands], np.int64)
        return first[inverse]
    if seg.count == 0:
        raise TraceError(
            "map rules with an 'ordinal' need step boundaries (fp8tower.step "
            "ranges, or --step-range NAME for the trace's own step ranges)",
            trace.path,
        )
    out = np.full(n, -1, np.int64)
    counter = [0] * len(rules)
    current = None
    rows = np.argsort(seg.step_of, kind="stable")  # by step, then start time
    for row in rows:
        step = int(seg.step_of[row])
        c = cands[int(inverse[row])]
        if step < 0:  # outside steps: only rules without an ordinal apply
            out[row] = next((i for i in c if not rules[i].has_ordinal), -1)
            continue
        if step != current:
            current, counter = step, [0] * len(rules)
        chosen = -1
        for i in c:
            occ = counter[i]
            counter[i] = occ + 1
            if chosen < 0 and rules[i].takes_occurrence(occ):
                chosen = i
        out[row] = chosen
    return out


def _unit_totals(
    trace: Trace, unit: np.ndarray, n_units: int
) -> dict[tuple[int, str], tuple[int, float]]:
    """(unit, kernel name) -> (launches, us) over kernels with unit >= 0."""
    k = trace.kernels
    rows = unit >= 0
    n_names = max(len(k.names), 1)
    key = unit[rows] * n_names + k.name_id[rows]
    size = n_units * n_names
    counts = np.bincount(key, minlength=size)
    sums = np.bincount(key, weights=k.dur_us[rows], minlength=size)
    return {
        (int(i) // n_names, k.names[int(i) % n_names]): (int(counts[i]), float(sums[i]))
        for i in np.flatnonzero(counts)
    }


def _verify(trace: Trace, unit: np.ndarray, ops: list[OpRecord]) -> list[Mismatch]:
    """Kernels that do not match their op's kernel regex, summed over the op's calls."""
    k = trace.kernels
    rows = unit >= 0
    n_names = max(len(k.names), 1)
    key = unit[rows] * n_names + k.name_id[rows]
    uniq, counts = np.unique(key, return_counts=True)
    bad: dict[tuple[str, str, str, str], int] = {}
    for u, c in zip(uniq, counts):
        op, name = ops[int(u) // n_names], k.names[int(u) % n_names]
        if not re.search(op.kernel_regex, name):
            where = (op.label, op.backend, op.kernel_regex, name)
            bad[where] = bad.get(where, 0) + int(c)
    return [Mismatch(*where, launches) for where, launches in bad.items()]


# -- the attribution --------------------------------------------------------------------------


def _segments(arm: Arm, required: bool, notes: list[str]) -> list[Steps]:
    """Step segmentation of both traces; when the attribution does not need it (a map without
    ordinals), a failure only costs the per-step spans."""
    out = []
    for trace, expected in ((arm.short, arm.steps[0]), (arm.long, arm.steps[1])):
        try:
            out.append(segment_steps(trace, expected, arm.step_pattern))
        except TraceError as e:
            if required:
                raise
            notes.append(f"no per-step spans: {e}")
            out.append(Steps("none", np.full(len(trace.kernels), -1, np.int64), 0))
    return out


def _op_rows(arm: Arm, units: list[np.ndarray], n_units: int) -> dict[str, OpRow]:
    """Aggregate the (unit, kernel name) totals of both traces into one row per op label.
    A unit is a manifest op call (manifest) or a rule (map)."""
    totals = [_unit_totals(t, u, n_units) for t, u in zip((arm.short, arm.long), units)]
    names_of: dict[int, set[str]] = {}
    for unit, nm in list(totals[0]) + list(totals[1]):
        names_of.setdefault(unit, set()).add(nm)
    rows: dict[str, OpRow] = {}
    bytes_known: dict[str, bool] = {}
    for unit in range(n_units):
        if arm.rules is not None:
            r = arm.rules[unit]
            label, group, n, kk, backend, nbytes = r.label, r.group, r.n, r.k, None, r.bytes
        else:
            op = arm.manifest.ops[unit]
            label, group, backend = op.label, op.group_key, op.backend
            # n = k = bytes = 0: not a GEMM (hf/capture.py's attention / GDN cores): no shape,
            # bytes unknown (as 0 they read as 0 GB/s and the whole call as fixed cost)
            n, kk, nbytes = op.n or None, op.k or None, op.bytes or None
        row = rows.get(label)
        if row is None:
            row = rows[label] = OpRow(label, group, n, kk, [], 0.0, 0.0, 0.0, 0.0, {},
                                      steps_diff=arm.steps[1] - arm.steps[0])
            bytes_known[label] = True
        if backend and backend not in row.backends:
            row.backends.append(backend)
        if row.n != n:  # calls of one label with different shapes
            row.n = None
        if row.k != kk:
            row.k = None
        launches = 0.0
        for nm in sorted(names_of.get(unit, ())):
            kd = delta(
                nm,
                totals[0].get((unit, nm), (0, 0.0)),
                totals[1].get((unit, nm), (0, 0.0)),
                arm.steps,
            )
            row.kernels[nm] = row.kernels.get(nm, 0.0) + kd.launches_per_step
            more = kd.launches_long - kd.launches_short
            row.kernel_more[nm] = row.kernel_more.get(nm, 0) + more
            row.launches_per_step += kd.launches_per_step
            row.ms_per_step += kd.ms_per_step
            launches += kd.launches_per_step
        # a rule's bytes are per launch; a manifest op's per call, one call per step
        calls = launches if arm.rules is not None else 1
        row.calls_per_step += calls
        if nbytes is None:
            bytes_known[label] = False
        else:
            row.bytes_per_step += nbytes * calls
    for label, row in rows.items():
        if not bytes_known[label]:
            row.bytes_per_step = None
    return rows


def attribute(arm: Arm, ceiling_gbps: float | None = None) -> Attribution:
    """Per-op launches, ms, bytes and GB/s per step of ``arm`` (pure: no printing)."""
    if ceiling_gbps is not None:
        ceiling_gbps = num_field(
            ceiling_gbps,
            "the read ceiling (--ceiling-gbps)",
            lo=0.0,
            lo_open=True,
            expected="a finite number of GB/s > 0",
        )
    steps = arm.steps
    d = steps[1] - steps[0]
    notes: list[str] = []
    if arm.rules is not None and arm.manifest is not None:  # a capture attributed by a map:
        # its manifest's ops, their kernel regexes and launch checks go unused (2026-12-05
        # audit: a capture that failed them exited 0 with --map, without a word)
        notes.append("the map replaces the capture's manifest: its ops' kernel checks and "
                     "expected launches are not checked")
    if arm.rules is not None:
        segs = _segments(arm, any(r.has_ordinal for r in arm.rules), notes)
        units = [_map_units(t, seg, arm.rules) for t, seg in zip((arm.short, arm.long), segs)]
        n_units = len(arm.rules)
    elif arm.manifest is not None:
        ops = arm.manifest.ops
        if not ops:
            raise TraceError("the manifest lists no ops", arm.manifest.directory)
        segs = _segments(arm, True, notes)
        units = [
            _manifest_units(t, seg, ops, s) for t, seg, s in zip((arm.short, arm.long), segs, steps)
        ]
        n_units = len(ops)
    else:
        raise TraceError(f"arm {arm.name}: no manifest and no map file to attribute with")
    use_map = arm.rules is not None
    # steps and units come from the kernels' real starts; times from the kernels counted
    # without overlap (same rows, same order)
    flat = _without_overlap(arm, notes)
    rows = _op_rows(flat, units, n_units)

    diff = diff_traces(flat.short, flat.long, steps, arm.step_pattern)
    notes += diff.warnings  # unchecked --steps scale every number: say so here, not only in diff
    un = [_unattributed(t, u) for t, u in zip((flat.short, flat.long), units)]
    unattributed = [
        delta(nm, un[0].get(nm, (0, 0.0)), un[1].get(nm, (0, 0.0)), steps)
        for nm in sorted(set(un[0]) | set(un[1]))
    ]
    # once-per-run kernels cancel to ~0 launches and ~0 ms: drop that noise
    floor = 1e-3 * max(diff.ms_per_step, 0.0)
    unattributed = [
        kd
        for kd in unattributed
        if abs(kd.launches_per_step) > INTEGRAL_TOL or abs(kd.ms_per_step) > floor
    ]
    unattributed.sort(key=lambda kd: -kd.ms_per_step)

    total_ms = diff.ms_per_step
    op_rows = sorted(rows.values(), key=lambda r: -r.ms_per_step)
    for row in op_rows:
        row.share = row.ms_per_step / total_ms if total_ms > 0 else 0.0
    # an op cannot take negative time: its long run was faster than its short one by more
    # than the extra steps cost (host noise on a CPU capture of few steps)
    negative = [r.label for r in op_rows if r.ms_per_step < -NEGATIVE_MS_TOL]
    if negative:
        notes.append(f"negative ms/step for {', '.join(negative)}: the two runs' difference "
                     f"is noise-dominated at {steps[0]} and {steps[1]} steps; capture more "
                     f"steps, or on a GPU")

    mismatches: list[Mismatch] = []
    if not use_map:
        mismatches = _verify(arm.long, units[1], arm.manifest.ops)
    for trace in (arm.short, arm.long):
        notes += [
            f"{trace.path}: {p} (kernels were dropped?)" for p in graph_replay_problems(trace)
        ]
    if arm.manifest is not None and arm.manifest.meta.get("event_ms_dropped"):
        notes.append(f"event_ms: {arm.manifest.meta['event_ms_dropped']}")
    notes = list(dict.fromkeys(arm.short.notes + arm.long.notes + notes))
    event = None
    if arm.manifest is not None and arm.manifest.event_ms is not None:
        event = (arm.manifest.event_ms[1] - arm.manifest.event_ms[0]) / d
    source = None
    if ceiling_gbps is not None:
        source = "given"
    elif arm.manifest is not None and arm.manifest.read_ceiling_gbps:
        ceiling_gbps, source = arm.manifest.read_ceiling_gbps, "measured"
    meta = {}
    if arm.manifest is not None:
        meta = {"model": arm.manifest.model, "m": arm.manifest.m, **arm.manifest.meta}
    host = None
    if arm.device == "cuda":
        labels = [r.label for r in arm.rules] if use_map else [op.label for op in arm.manifest.ops]
        host = _host(arm, units, segs, labels, notes)
    checks = [] if use_map else check_expected(arm.manifest, op_rows, arm.steps, total_ms)
    return Attribution(
        host=host,
        launch_checks=checks,
        arm=arm.name,
        device=arm.device,
        steps=steps,
        source="map" if use_map else "manifest",
        ops=op_rows,
        unattributed=unattributed,
        diff=diff,
        step_times=step_times(flat.long, segs[1]),
        span_diff_ms=(trace_span_us(arm.long) - trace_span_us(arm.short)) / d / 1e3,
        event_ms_per_step=event,
        ceiling_gbps=ceiling_gbps,
        ceiling_source=source,
        mismatches=mismatches,
        notes=notes,
        meta=meta,
    )


def _without_overlap(arm: Arm, notes: list[str]) -> Arm:
    """``arm`` with each trace's kernels counted without overlap (KernelTable.without_overlap),
    and a note of how much kernel time per step ran under an earlier kernel."""
    short, long = arm.short.without_overlap(), arm.long.without_overlap()
    if short is arm.short and long is arm.long:
        return arm
    hidden = [float(a.kernels.dur_us.sum() - b.kernels.dur_us.sum())
              for a, b in ((arm.short, short), (arm.long, long))]
    per_step = (hidden[1] - hidden[0]) / (arm.steps[1] - arm.steps[0]) / 1e3
    if abs(per_step) >= OVERLAP_NOTE_MIN_MS:
        notes.append(f"kernels overlapped (early launch / programmatic dependent launch): "
                     f"{per_step:.4f} ms/step of kernel time ran under an earlier kernel; "
                     f"each kernel is counted from the later of its start and the end of the "
                     f"kernels before it, so the ops add up to the busy span")
    return dataclasses.replace(arm, short=short, long=long)


def _unattributed(trace: Trace, unit: np.ndarray) -> dict[str, tuple[int, float]]:
    return name_totals(trace.kernels, np.flatnonzero(unit < 0))


def _host(arm: Arm, units: list[np.ndarray], segs: list[Steps], labels: list[str],
          notes: list[str]):
    """Host launch statistics per op label; None (with a note) where the calls cannot be read.
    Kernels outside the steps (when there are step boundaries) are left out (-3), not counted
    as unattributed: a manifest's units are -1 there, and a capture's warm-up / input copies
    made an "(unattributed)" host row of launches that are no op's."""
    names = list(dict.fromkeys(labels))
    of_unit = np.array([names.index(lb) for lb in labels] + [-1], np.int64)
    try:
        calls = tuple(load_launch_calls(t) for t in (arm.short, arm.long))
    except TraceError as e:
        notes.append(f"no host launch statistics: {e}")
        return None
    lab = []
    for u, seg in zip(units, segs):
        outside = seg.step_of < 0 if seg.count else np.zeros(len(u), bool)
        lab.append(np.where(outside, -3, of_unit[np.where(u >= 0, u, len(labels))]))
    return host_stats((arm.short, arm.long), calls, tuple(lab), names, arm.steps)
