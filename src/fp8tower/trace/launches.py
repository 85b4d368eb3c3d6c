"""Host time per kernel launch, as HTA's kernel launch statistics compute it.

From the runtime/driver launch calls of a torch-profiler trace (``cudaLaunchKernel``,
``cudaLaunchKernelExC``, ``cuLaunchKernel``, ``cuLaunchKernelEx``, ``cudaGraphLaunch``, ...),
matched to their kernels by correlation id:

- CPU duration: the launch call's own duration on the host (its ``dur``);
- launch delay: kernel start - launch call start (HTA: ``launch_delay``).

An eager model that is host-bound shows it here: CPU microseconds per launch comparable to
or above the GPU time of its kernels, and launch delays that grow along the step. A kernel
replayed from a CUDA graph shares its correlation id with the ``cudaGraphLaunch`` that
replayed it: the graph launch is one host call per replay, reported as its own row
(``GRAPH_LAUNCH``: CPU time per replay, delay to the replay's first kernel), not per kernel.

Per op label: launches per step and host CPU ms per step come from the two-length
difference (like the kernel numbers); the per-launch distributions (mean, median, p90, max)
from the long trace's launches inside the steps' op units.

The calls are read from the file again (a streaming regex over the runtime/driver events
only), so the ingest used by every other analysis stays as it is. nsys exports: the
``CUPTI_ACTIVITY_KIND_RUNTIME`` table (start/end/correlationId/nameId).
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import TraceError
from .events import Trace
from .nsys import check_integers, connect_readonly, table_names
from .validate import show

#: row label of the graph launches (one host call per CUDA graph replay)
GRAPH_LAUNCH = "(cudaGraphLaunch)"
UNATTRIBUTED = "(unattributed)"

_CALL = re.compile(
    rb'"cat":\s*"(cuda_runtime|cuda_driver)",\s*"name":\s*"([^"]*)",\s*"pid":\s*[^,]*,'
    rb'\s*"tid":\s*[^,]*,\s*"ts":\s*([^,]*),\s*"dur":\s*([^,}]*)(?=[,}])'
    rb'(?:,\s*"args":\s*\{([^}]*)\})?(?!,\s*"args")'  # args not an object: json.load path
)
_CALL_MARK = re.compile(rb'"cat"\s*:\s*"cuda_(?:runtime|driver)"')
_CORR = re.compile(rb'"correlation":\s*(\d+)')


def is_launch_name(name: str) -> bool:
    """A runtime/driver call that launches work: cudaLaunchKernel(ExC), cuLaunchKernel(Ex),
    cudaLaunchCooperativeKernel, cudaGraphLaunch, ..."""
    return "Launch" in name or "launch" in name


def is_graph_launch(name: str) -> bool:
    return name.startswith(("cudaGraphLaunch", "cuGraphLaunch"))


@dataclass
class LaunchCalls:
    """Host launch calls of one trace, sorted by correlation id."""

    path: str
    api: list[str]  # call names
    api_id: np.ndarray  # int32 into api
    correlation: np.ndarray  # int64
    start_us: np.ndarray  # float64
    dur_us: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.correlation)

    @property
    def is_graph(self) -> np.ndarray:
        graph = np.array([is_graph_launch(a) for a in self.api], bool)
        return graph[self.api_id] if len(self.api) else np.zeros(0, bool)

    def index_of(self, correlation: np.ndarray) -> np.ndarray:
        """Row of the call with each correlation id (-1: no such call)."""
        if not len(self):
            return np.full(len(correlation), -1, np.int64)
        i = np.searchsorted(self.correlation, correlation)
        i = np.clip(i, 0, len(self) - 1)
        return np.where(self.correlation[i] == correlation, i, -1)


def _calls(path: str, rows: list[tuple[str, int, float, float]]) -> LaunchCalls:
    rows = [r for r in rows if is_launch_name(r[0]) and r[1] >= 0]
    rows.sort(key=lambda r: r[1])
    api: dict[str, int] = {}
    ids = [api.setdefault(r[0], len(api)) for r in rows]
    names = list(api)
    corr = np.array([r[1] for r in rows], np.int64)
    if len(corr) and np.any(np.diff(corr) == 0):
        raise TraceError("two launch calls share one correlation id", path)
    return LaunchCalls(
        path,
        names,
        np.array(ids, np.int32),
        corr,
        np.array([r[2] for r in rows], np.float64),
        np.array([r[3] for r in rows], np.float64),
    )


def _chrome_rows_json(path: Path) -> list[tuple[str, int, float, float]]:
    from .chrome import _read_chunks

    try:
        doc = json.loads(b"".join(_read_chunks(path)))
    except ValueError as e:
        raise TraceError(f"malformed JSON ({e})", path) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    rows = []
    for i, ev in enumerate(events if isinstance(events, list) else ()):
        if not isinstance(ev, dict) or ev.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        if ev.get("ph", "X") != "X":
            continue
        args = ev.get("args") or {}
        if not isinstance(args, dict):  # as chrome.py's json path says it
            raise TraceError(f"event #{i} ({str(ev.get('name', ''))[:60]!r}): 'args' must be "
                             f"an object, got {show(args)}", path)
        corr = args.get("correlation")
        try:
            rows.append((str(ev.get("name", "")), int(corr), float(ev["ts"]), float(ev["dur"])))
        except (KeyError, TypeError, ValueError):
            continue  # a call without correlation / times cannot be matched
    return rows


def _chrome_rows(path: Path) -> list[tuple[str, int, float, float]]:
    """(name, correlation, ts, dur) of every runtime/driver call; json.load when the fast
    pattern missed one (an unusual layout)."""
    from .chrome import _read_chunks

    rows: list[tuple[str, int, float, float]] = []
    carry = b""

    def scan(buf: bytes, end: int) -> bool:
        found = _CALL.findall(buf, 0, end)
        if len(found) != len(_CALL_MARK.findall(buf, 0, end)):
            return False
        for _, name, ts, dur, args in found:
            m = _CORR.search(args or b"")
            if m:
                try:
                    rows.append((name.decode("utf-8", "replace"), int(m.group(1)), float(ts),
                                 float(dur)))
                except ValueError:
                    return False
        return True

    for data in _read_chunks(path):
        buf = carry + data if carry else data
        cut = buf.rfind(b'"ph"')
        if cut <= 0:
            carry = buf
            continue
        if not scan(buf, cut):
            return _chrome_rows_json(path)
        carry = buf[cut:]
    if not scan(carry, len(carry)):
        return _chrome_rows_json(path)
    return rows


def _nsys_rows(path: Path) -> list[tuple[str, int, float, float]]:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    con = connect_readonly(path)
    try:
        if table not in table_names(con):
            return []
        # correlationId is nullable in the schema: a call without one matches no kernel (it
        # was int(None), a traceback); a text / real time is one TraceError
        check_integers(con, table, ["correlationId", "start", "end"], path,
                        nullable=("correlationId",))
        q = (f"SELECT s.value, r.correlationId, r.start, r.end FROM {table} r "
             "JOIN StringIds s ON s.id = r.nameId WHERE r.correlationId IS NOT NULL")
        return [(str(n), c, s / 1e3, (e - s) / 1e3) for n, c, s, e in con.execute(q)]
    except sqlite3.Error as e:
        raise TraceError(f"cannot read the runtime calls ({e})", path) from None
    finally:
        con.close()


def load_launch_calls(trace: Trace) -> LaunchCalls:
    """The launch calls of ``trace``'s file (torch Chrome JSON or nsys SQLite)."""
    path = Path(trace.path)
    rows = _nsys_rows(path) if trace.source == "nsys" else _chrome_rows(path)
    return _calls(str(path), rows)


# -- statistics --------------------------------------------------------------------------------


@dataclass
class HostRow:
    """Host launch cost of one op label (or of the graph launches)."""

    label: str
    apis: list[str]
    launches_per_step: float  # two-length difference
    cpu_ms_per_step: float  # two-length difference of summed launch-call CPU time
    launches: int  # launches in the long trace's steps (the distributions' sample)
    cpu_us_mean: float | None
    cpu_us_median: float | None
    cpu_us_p90: float | None
    cpu_us_max: float | None
    delay_us_mean: float | None
    delay_us_median: float | None
    delay_us_p90: float | None
    delay_us_max: float | None


@dataclass
class HostStats:
    """Host launch statistics of one arm (see the module docstring)."""

    rows: list[HostRow]
    launches_per_step: float
    cpu_ms_per_step: float
    unmatched_kernels: int  # long trace: kernels whose correlation id has no launch call
    notes: list[str] = field(default_factory=list)

    def row(self, label: str) -> HostRow | None:
        return next((r for r in self.rows if r.label == label), None)


def _per_launch(trace: Trace, calls: LaunchCalls, labels: np.ndarray):
    """One sample per launch: (label, api id, cpu us, delay us) arrays, and the count of
    kernels without a call. ``labels``: label id per kernel row (-1: not counted)."""
    k = trace.kernels
    idx = calls.index_of(k.correlation)
    unmatched = int(np.sum((idx < 0) & (labels >= 0)))
    graph = calls.is_graph
    ok = idx >= 0
    eager = ok & ~graph[np.clip(idx, 0, None)] if len(calls) else np.zeros(len(k), bool)
    e_rows = np.flatnonzero(eager & (labels >= 0))
    e_idx = idx[e_rows]
    lab = labels[e_rows]
    api = calls.api_id[e_idx]
    cpu = calls.dur_us[e_idx]
    delay = k.start_us[e_rows] - calls.start_us[e_idx]
    # graph replays: one sample per cudaGraphLaunch, delay to its first kernel
    g_rows = np.flatnonzero(ok & ~eager & (labels >= 0))
    if len(g_rows):
        g_rows = g_rows[np.argsort(idx[g_rows], kind="stable")]
        g_idx, first = np.unique(idx[g_rows], return_index=True)
        starts = np.minimum.reduceat(k.start_us[g_rows], first)
        lab = np.concatenate([lab, np.full(len(g_idx), -2, np.int64)])
        api = np.concatenate([api, calls.api_id[g_idx]])
        cpu = np.concatenate([cpu, calls.dur_us[g_idx]])
        delay = np.concatenate([delay, starts - calls.start_us[g_idx]])
    return lab, api, cpu, delay, unmatched


def _dist(x: np.ndarray) -> tuple[float | None, ...]:
    if not len(x):
        return (None,) * 4
    return (float(np.mean(x)), float(np.median(x)), float(np.percentile(x, 90)),
            float(np.max(x)))


def host_stats(
    traces: tuple[Trace, Trace],
    calls: tuple[LaunchCalls, LaunchCalls],
    labels: tuple[np.ndarray, np.ndarray],
    names: list[str],
    steps: tuple[int, int],
) -> HostStats:
    """Per label: host launch calls and their CPU time per step (two-length difference), and
    the per-launch CPU time / launch delay distributions of the long trace.

    ``labels[i]``: per kernel row of ``traces[i]``, an index into ``names`` (-1: an
    unattributed kernel, counted under "(unattributed)"; -3: outside the steps, ignored).
    Graph replays count once per ``cudaGraphLaunch``, under :data:`GRAPH_LAUNCH`.
    """
    d = steps[1] - steps[0]
    all_names = [*names, UNATTRIBUTED, GRAPH_LAUNCH]
    un, gl = len(names), len(names) + 1
    per = []
    for trace, c, lab in zip(traces, calls, labels):
        lab = np.where(lab == -1, un, lab)
        lab = np.where(lab < -1, -1, lab)  # outside the steps
        s_lab, s_api, s_cpu, s_delay, unmatched = _per_launch(trace, c, lab)
        s_lab = np.where(s_lab == -2, gl, s_lab)
        per.append((s_lab, s_api, s_cpu, s_delay, unmatched, c))
    rows = []
    n = len(all_names)
    cnt = [np.bincount(p[0], minlength=n) for p in per]
    cpu_sum = [np.bincount(p[0], weights=p[2], minlength=n) for p in per]
    s_lab, s_api, s_cpu, s_delay, _, c_long = per[1]
    for i in np.flatnonzero(cnt[0] + cnt[1]):
        sel = s_lab == i
        apis = sorted({c_long.api[int(a)] for a in np.unique(s_api[sel])})
        rows.append(HostRow(
            all_names[i], apis,
            (cnt[1][i] - cnt[0][i]) / d,
            (cpu_sum[1][i] - cpu_sum[0][i]) / d / 1e3,
            int(np.sum(sel)), *_dist(s_cpu[sel]), *_dist(s_delay[sel]),
        ))
    rows.sort(key=lambda r: -r.cpu_ms_per_step)
    notes = []
    unmatched = per[1][4]
    if unmatched:
        notes.append(f"{unmatched} kernel(s) of the long trace have no launch call with their "
                     "correlation id (host statistics leave them out)")
    if not len(calls[1]):
        notes.append("no launch calls with correlation ids in the trace: no host statistics")
    return HostStats(
        rows,
        float(sum(r.launches_per_step for r in rows)),
        float(sum(r.cpu_ms_per_step for r in rows)),
        unmatched,
        notes,
    )
