"""torch.profiler Chrome traces (.json, .json.gz) -> `Trace`, without json.load of the file.

The file is streamed in 8 MiB chunks; a compiled regex picks out only the events the
analysis needs (kernels, launch calls, record_function ranges, CPU ops) and a kernel's args
are read with a second small regex. Events of every layout kineto and torch write (one key
per line, the older C++ writer, the python exporter's compact form) match, because the keys
come in the same order in all of them: ph, cat, name, pid, tid, ts, dur, args.

Safety net: every chunk also counts the `"cat"` markers of the categories read; if any such
event did not match the fast pattern (an unusual layout, an escaped quote in a name, `args`
that is not an object), or a closing brace/bracket is followed by an opening one (two JSON
documents in one file; legal only inside a string), the whole file is parsed again with
json.load (slower, memory ~ file size), which reads or refuses it, so nothing is silently
dropped. After the last event the document must close, once, or the file is reported
truncated.

Measured 2026-11-29 on this 2-core CPU box (python 3.11, `benchmarks/bench_trace_ingest.py`):
the 8+136-step pair of a 208-GEMM tower (85k kernels, 75 MB JSON, 1.8 MB gzipped) ingests
and diffs in 0.35 s, json.load of the same pair alone takes 1.0 s; a 1M-kernel trace (890 MB
JSON) ingests in 5.3 s with a 200 MB peak RSS; see benchmarks/results/trace_ingest_cpu.json.
Regex notes: `[^"]*` (a negated single char) runs ~3x faster in `re` than `[^"\\]*`, and a
lazy `.*?` is 6x slower; the close-open check (two documents) is one regex starting with a
literal, ~18 ms of the ~190 ms ingest of a 44 MB trace (2026-12-05); ijson was not used (not
installed, and its C backend still builds a Python object per JSON token, ~30 per kernel
event).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from .errors import TraceError
from .events import KernelTable, Launches, Range, Trace
from .validate import (
    DIM_MAX,
    EXACT_MAX,
    INT64_MAX,
    INT64_MIN,
    check_no_duplicates,
    int_field,
    is_int,
    loads,
    num_field,
    show,
)

CHUNK = 8 << 20

_EVENT = re.compile(
    rb'"cat":\s*"(kernel|Kernel|cuda_runtime|cuda_driver|user_annotation|gpu_user_annotation'
    rb'|cpu_op)",\s*"name":\s*"([^"]*)",'
    rb'\s*"pid":\s*([^,\[{\s][^,]*),\s*"tid":\s*([^,\[{\s][^,]*)'  # a list/object: no match
    rb',\s*"ts":\s*([^,]*),\s*"dur":\s*([^,}]*)(?=[,}])(?:,\s*"args":\s*\{([^}]*)\})?'
    # args that is not an object: no match, the marker count sees it ((?=[,}]) keeps the
    # regex from matching a shorter dur instead)
    rb'(?!,\s*"args")'
)
_MARK = re.compile(
    rb'"cat"\s*:\s*"(?:kernel|Kernel|cuda_runtime|cuda_driver|user_annotation'
    rb'|gpu_user_annotation|cpu_op)"'
)
# a close followed by an open: never in one JSON document outside a string. The first
# document's close is a brace (an object) or a bracket (a bare event list); a regex whose first
# character is one literal runs ~8x faster than one that starts with a class of both
_OBJECT_GAP = re.compile(rb"\}\s*[{\[]")
_LIST_GAP = re.compile(rb"\]\s*[{\[]")
_KARG = re.compile(
    rb'"(stream|correlation|grid|block|graph id|graph node id|device)":\s*'
    rb"(\[\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\]|-?\d+)(?=\s*(?:,|$))"
)
_KARG_KEY = re.compile(rb'"(?:stream|correlation|grid|block|graph id|graph node id|device)":')
_CORR = re.compile(rb'"correlation":\s*(\d+)')
_INT = re.compile(rb"-?\d+")
_LAUNCH_NAMES = re.compile(rb"Launch|launch")
# by prefix: _ptsz (per-thread default stream) and versioned names too, as launches.py reads them
_GRAPH_LAUNCH = (b"cudaGraphLaunch", b"cuGraphLaunch")

# column order of a parsed kernel args tuple
_KARG_INDEX = {b"stream": 0, b"correlation": 1, b"graph id": 8, b"graph node id": 9, b"device": 10}


class _LayoutMismatch(Exception):
    """A kernel event the fast pattern did not match: parse the file with json instead."""


def _parse_kernel_args(args: bytes) -> tuple[int, ...]:
    """(stream, correlation, gx, gy, gz, bx, by, bz, graph id, graph node id, device); absent
    = -1/0. ValueError for any value out of range: the json path then names it."""
    out = [-1, -1, 0, 0, 0, 0, 0, 0, -1, -1, -1]
    found = _KARG.findall(args)
    if len(found) != len(_KARG_KEY.findall(args)):
        raise ValueError("args")  # a value of another form (null, a float, a string)
    for key, value in found:
        is_list = value.startswith(b"[")
        if (key == b"grid" or key == b"block") != is_list:
            raise ValueError(key)  # dims as a scalar, an id as a list: the json path names it
        if is_list:
            dims = [int(v) for v in _INT.findall(value)]
            if len(dims) > 3 or not all(0 <= d <= DIM_MAX for d in dims):
                raise ValueError(key)
            dims += [1] * (3 - len(dims))
            j = 2 if key == b"grid" else 5
            out[j : j + 3] = dims
        else:
            v = int(value)
            if not INT64_MIN <= v <= INT64_MAX:
                raise ValueError(key)
            out[_KARG_INDEX[key]] = v
    return tuple(out)


def _int_or(value, default: int = -1) -> int:
    """A thread id as torch writes it (an int, sometimes a string label): default if not an
    int64."""
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return v if INT64_MIN <= v <= INT64_MAX else default


def _times_ok(ts: np.ndarray, dur: np.ndarray) -> bool:
    """Finite start times within float64's exact integers, finite durations >= 0."""
    return bool(
        np.all(np.abs(ts) <= EXACT_MAX) and np.all(dur >= 0) and np.all(dur <= EXACT_MAX)
    )  # NaN fails every comparison


def _event_time(ev: dict, key: str, where: str, path, *, required: bool) -> float:
    value = ev.get(key)
    if value is None and not required:
        return 0.0
    if value is None:
        raise TraceError(f"{where}: {key!r} is missing (a kernel needs its duration)", path)
    return num_field(
        value,
        f"{where}: {key!r}",
        path,
        lo=0.0 if key == "dur" else -EXACT_MAX,
        hi=EXACT_MAX,
        expected=(
            "a finite number of microseconds >= 0"
            if key == "dur"
            else "a finite number of microseconds (|ts| <= 2^53)"
        ),
    )


def _opt_id(args: dict, key: str, where: str, path, default: int = -1) -> int:
    value = args.get(key)
    if value is None:
        return default
    return int_field(value, f"{where}: args[{key!r}]", path, expected="an integer (int64)")


def _dims_of(args: dict, key: str, where: str, path) -> list[int]:
    value = args.get(key, [0, 0, 0])
    if (
        not isinstance(value, list)
        or len(value) > 3
        or not all(is_int(v) and 0 <= v <= DIM_MAX for v in value)
    ):
        raise TraceError(
            f"{where}: args[{key!r}] must be a list of up to 3 integers in [0, 2^31), "
            f"got {str(value)[:60]}",
            path,
        )
    return (list(value) + [1, 1, 1])[:3]


def _device_of(device: int, pid) -> int | str:
    """The GPU of a kernel event: its args.device, else its pid (kineto writes the kernels of
    GPU i under pid i); a pid that is not an integer stays its text."""
    if device >= 0:
        return device
    if isinstance(pid, bytes):
        pid = _decode(pid.strip().strip(b'"'))
    try:
        return int(pid)
    except (TypeError, ValueError):
        return str(pid)


class _Builder:
    """Accumulates parsed events chunk by chunk into compact numpy columns."""

    def __init__(self) -> None:
        self.name_index: dict[bytes, int] = {}
        self.k_parts: list[tuple[np.ndarray, ...]] = []
        self.args_cache: dict[bytes, tuple[int, ...]] = {}
        self.launch_rows: list[tuple[int, float, int, bool]] = []
        self.ranges: list[Range] = []
        self.cpu_rows: list[tuple[int, float, float, int]] = []  # name id, ts, dur, tid
        self.json_rows: list[tuple] = []  # kernels from the json.load path
        self.devices: Counter = Counter()  # (args.device or -1, pid) -> kernels

    def flush_json_rows(self) -> None:
        if self.json_rows:
            ids, ts, dur, rows = zip(*self.json_rows)
            self._add_part(
                np.array(ids, np.int32),
                np.array(ts, np.float64),
                np.array(dur, np.float64),
                np.array(rows, np.int64),
            )
            self.json_rows = []

    # -- fast path: tuples from _EVENT.findall ------------------------------------------
    def add_matches(self, found: list[tuple[bytes, ...]]) -> int:
        """Add one chunk's matches; return how many were kernels."""
        kern = [m for m in found if m[0] == b"kernel" or m[0] == b"Kernel"]
        if len(kern) != len(found):
            for m in found:
                if m[0] != b"kernel" and m[0] != b"Kernel":
                    self._add_other(m[0], m[1], m[3], float(m[4]), float(m[5]), m[6])
        if not kern:
            return 0
        _, names, pids, _, tss, durs, argss = zip(*kern)
        index = self.name_index
        ids = np.array([index.setdefault(n, len(index)) for n in names], np.int32)
        cache = self.args_cache
        if len(cache) > 4096:  # graph replays repeat args within a step; eager ones never
            cache.clear()
        parsed = []
        for a in argss:
            p = cache.get(a)
            if p is None:
                p = cache[a] = _parse_kernel_args(a)
            parsed.append(p)
        ts, dur = np.array(tss).astype(np.float64), np.array(durs).astype(np.float64)
        if not _times_ok(ts, dur):
            raise ValueError("time")  # NaN, inf, negative: the json path names the event
        cols = np.array(parsed, np.int64).reshape(len(parsed), 11)
        self.devices.update(zip(cols[:, 10].tolist(), pids))
        self._add_part(ids, ts, dur, cols)
        return len(kern)

    def _add_part(self, ids, ts, dur, cols) -> None:
        """Store one chunk's kernels as typed columns, in KernelTable field order."""
        self.k_parts.append(
            (
                ids,
                ts,
                dur,
                cols[:, 0].copy(),
                cols[:, 1].copy(),
                cols[:, 2:5].astype(np.int32),
                cols[:, 5:8].astype(np.int32),
                cols[:, 8].copy(),
                cols[:, 9].copy(),
            )
        )

    def _add_other(self, cat: bytes, name: bytes, tid, ts: float, dur: float, args) -> None:
        if not _times_ok(np.array([ts]), np.array([dur])):
            raise ValueError("time")
        if cat in (b"cuda_runtime", b"cuda_driver"):
            if _LAUNCH_NAMES.search(name):
                m = _CORR.search(args or b"")
                if m:
                    if int(m.group(1)) > INT64_MAX:
                        raise ValueError("correlation")
                    self.launch_rows.append(
                        (int(m.group(1)), ts, _int_or(tid), name.startswith(_GRAPH_LAUNCH))
                    )
        elif cat == b"cpu_op":
            nid = self.name_index.setdefault(name, len(self.name_index))
            self.cpu_rows.append((nid, ts, dur, _int_or(tid)))
        else:  # user_annotation / gpu_user_annotation
            self.ranges.append(
                Range(_decode(name), ts, ts + dur, _int_or(tid), cat == b"gpu_user_annotation")
            )

    # -- slow path: dicts from json.load ------------------------------------------------
    def add_json_event(self, ev: dict, where: str, path) -> None:
        """Add one event of the json.load path, validating every field it uses."""
        cat = ev.get("cat", "")
        if (
            not isinstance(cat, str)
            or cat
            not in (
                "kernel",
                "Kernel",
                "cuda_runtime",
                "cuda_driver",
                "user_annotation",
                "gpu_user_annotation",
                "cpu_op",
            )
            or ev.get("ph", "X") != "X"
        ):
            return
        name = json.dumps(str(ev.get("name", "")))[1:-1].encode()
        is_kernel = cat in ("kernel", "Kernel")
        ts = _event_time(ev, "ts", where, path, required=True)
        dur = _event_time(ev, "dur", where, path, required=is_kernel)
        args = ev.get("args") or {}
        if not isinstance(args, dict):
            raise TraceError(f"{where}: 'args' must be an object, got {str(args)[:60]}", path)
        if is_kernel:
            for key in ("pid", "tid"):  # a GPU (pid) and a stream (tid): never a list/object
                if isinstance(ev.get(key), (list, dict)):
                    raise TraceError(
                        f"{where}: {key!r} must be a number or a string, got {show(ev[key])}",
                        path,
                    )
            row = (
                _opt_id(args, "stream", where, path, _int_or(ev.get("tid"))),
                _opt_id(args, "correlation", where, path),
                *_dims_of(args, "grid", where, path),
                *_dims_of(args, "block", where, path),
                _opt_id(args, "graph id", where, path),
                _opt_id(args, "graph node id", where, path),
            )
            self.devices[(_opt_id(args, "device", where, path), ev.get("pid"))] += 1
            nid = self.name_index.setdefault(name, len(self.name_index))
            self.json_rows.append((nid, ts, dur, row))
            if len(self.json_rows) >= 65536:
                self.flush_json_rows()
        else:
            corr = args.get("correlation")
            if corr is not None:
                corr = int_field(corr, f"{where}: args['correlation']", path, lo=0)
            fake_args = b'"correlation": %d' % corr if corr is not None else b""
            self._add_other(cat.encode(), name, ev.get("tid"), ts, dur, fake_args)

    # -- result ------------------------------------------------------------------------
    def check_one_device(self, path) -> None:
        """The analysis orders, counts and de-overlaps kernels as one GPU's: the kernels of a
        second rank in the same file would count twice per step and hide under the first's."""
        per_device: Counter = Counter()
        for (device, pid), n in self.devices.items():
            per_device[_device_of(device, pid)] += n
        if len(per_device) > 1:
            shown = ", ".join(f"device {d!r}: {n} kernels" for d, n in per_device.items())
            raise TraceError(
                f"this trace holds kernels of {len(per_device)} devices ({shown}): capture "
                "one rank/GPU per trace",
                path,
            )

    def kernel_table(self) -> KernelTable:
        names = [""] * len(self.name_index)
        for raw, i in self.name_index.items():
            names[i] = _decode(raw)
        if not self.k_parts:
            t = KernelTable.empty()
            t.names = names
            return t
        parts, self.k_parts = self.k_parts, []
        columns = []
        for c in range(9):  # column by column, freeing the chunks' copies as we go
            columns.append(np.concatenate([p[c] for p in parts]))
            parts = [p[:c] + (None,) + p[c + 1 :] for p in parts]
        return KernelTable(names, *columns).sorted()

    def launches(self) -> Launches:
        if not self.launch_rows:
            return Launches.empty()
        corr, ts, tid, graph = zip(*self.launch_rows)
        return Launches(
            np.array(corr, np.int64),
            np.array(ts, np.float64),
            np.array(tid, np.int64),
            np.array(graph, bool),
        )

    def cpu_table(self, names: list[str]) -> KernelTable:
        """Top-level CPU ops (not nested in another CPU op of the same thread) as 'kernels'."""
        if not self.cpu_rows:
            t = KernelTable.empty()
            t.names = names
            return t
        rows = sorted(self.cpu_rows, key=lambda r: (r[3], r[1], -r[2]))
        keep = []
        open_end = {}  # tid -> end of the current top-level op
        for nid, ts, dur, tid in rows:
            if ts < open_end.get(tid, -np.inf):
                continue  # nested inside a top-level op
            open_end[tid] = ts + dur
            keep.append((nid, ts, dur, tid))
        nid, ts, dur, tid = (np.array(c) for c in zip(*keep))
        n = len(keep)
        minus = np.full(n, -1, np.int64)
        return KernelTable(
            names,
            nid.astype(np.int32),
            ts.astype(np.float64),
            dur.astype(np.float64),
            tid.astype(np.int64),
            minus,
            np.zeros((n, 3), np.int32),
            np.zeros((n, 3), np.int32),
            minus.copy(),
            minus.copy(),
        ).sorted()


def _decode(raw: bytes) -> str:
    if b"\\" in raw:
        try:
            return json.loads(b'"' + raw + b'"')
        except ValueError:
            pass
    return raw.decode("utf-8", errors="replace")


def _open(path: Path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def _read_chunks(path: Path):
    """Yield decompressed chunks; decompression errors become TraceError."""
    try:
        with _open(path) as f:
            while True:
                data = f.read(CHUNK)
                if not data:
                    return
                yield data
    except EOFError as e:
        raise TraceError(f"truncated gzip stream ({e})", path) from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(f"corrupt gzip stream ({e})", path) from None


def _check_start(head: bytes, path: Path) -> None:
    text = head.lstrip()
    if not text:
        raise TraceError("empty file, not a Chrome trace", path)
    if text[:1] not in (b"{", b"["):
        raise TraceError(f"not a Chrome trace JSON file ({sniff(head)})", path)


def _check_end(tail: bytes, path: Path, is_list: bool) -> None:
    """The last segment (from the last event's "ph") must close the event, the event list,
    and the document: nothing after a bare event list (``is_list``), the closing brace after
    an object's."""
    start = tail.find(b'"ph"')
    if start < 0:  # no event at all: the (small) document must be valid JSON as a whole
        loads(tail, path, "the trace")
        return
    text = "{" + tail[start:].decode("utf-8", errors="replace")
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        raise TraceError("truncated or malformed: the last event is cut off", path) from None
    text = text[end:]
    rest = text.strip()
    if not rest.startswith("]"):
        raise TraceError("truncated or malformed: the event list is not closed", path)
    rest = rest[1:].strip()
    if is_list:  # a bare JSON array of events
        if rest:
            raise TraceError("malformed: data after the event list", path)
        return
    try:  # the keys after "traceEvents" and the closing brace
        json.loads("{" + rest.removeprefix(","))
    except (ValueError, RecursionError):
        raise TraceError(
            "truncated or malformed: the document does not close after the event list", path
        ) from None


def sniff(head: bytes) -> str:
    """A few words on what a file that is not what we expected looks like."""
    magic = {
        b"\x89PNG": "a PNG image",
        b"SQLite format 3": "an SQLite database",
        b"PK\x03\x04": "a ZIP archive",
        b"%PDF": "a PDF document",
        b"\x1f\x8b": "gzip data",
        b"\x7fELF": "an ELF binary",
        b"GIF8": "a GIF image",
        b"\xff\xd8\xff": "a JPEG image",
    }
    for m, what in magic.items():
        if head.startswith(m):
            return f"looks like {what}"
    if b"\x00" in head[:512]:
        return "binary data"
    return f"starts with {head[:24]!r}"


def load_chrome(path: str | Path, device: str = "auto", allow_empty: bool = False) -> Trace:
    """Read a torch.profiler Chrome trace (.json or .json.gz) into a `Trace`.

    ``device``: "cuda" wants GPU kernel events; "cpu" uses the top-level CPU ops (aten::...)
    as the 'kernels' (a CPU-only run); "auto" takes kernels when there are any, else CPU
    ops when the trace has `fp8tower.step` ranges, else raises.
    """
    path = Path(path)
    b = _Builder()
    try:
        saw_events = _scan_fast(path, b)
    except _LayoutMismatch:
        b = _Builder()
        saw_events = _scan_json(path, b)
    if not saw_events:
        raise TraceError('JSON but not a Chrome trace: no "traceEvents" list', path)
    kernels = b.kernel_table()
    ranges = sorted(b.ranges, key=lambda r: r.start_us)
    trace = Trace(str(path), "torch", "cuda", kernels, ranges, b.launches())
    if device == "cuda" or (device == "auto" and len(kernels)):
        if not len(kernels) and not allow_empty:
            raise TraceError(
                "no GPU kernel events (was the profiler run with ProfilerActivity.CUDA on a GPU?)",
                path,
            )
        b.check_one_device(path)
        check_no_duplicates(kernels, path)
        return trace
    has_steps = any(r.name.startswith("fp8tower.step") for r in ranges)
    if device == "cpu" or has_steps:
        trace.kernels = b.cpu_table(kernels.names)
        trace.device = "cpu"
        if not len(trace.kernels) and not allow_empty:
            raise TraceError("no kernel events and no CPU op events", path)
        return trace
    raise TraceError(
        "no kernel events (a CPU-only trace? pass device 'cpu' to analyse its "
        "CPU ops; a GPU capture needs ProfilerActivity.CUDA)",
        path,
    )


def _scan_fast(path: Path, b: _Builder) -> bool:
    """Regex scan; returns whether a trace event list was seen. Raises _LayoutMismatch."""
    carry = b""
    gap = None  # the pattern of a second document after the first (set by the first chunk)
    saw_events = False
    for data in _read_chunks(path):
        buf = carry + data if carry else data
        if gap is None:
            _check_start(buf[:4096], path)
            gap = _LIST_GAP if buf[:4096].lstrip().startswith(b"[") else _OBJECT_GAP
        cut = buf.rfind(b'"ph"')
        if cut <= 0:
            carry = buf
            continue
        saw_events = _scan_region(buf, cut, b, saw_events, gap)
        carry = buf[cut:]  # a region ends at a quote: no close-open pair spans two
    if gap is None:
        raise TraceError("empty file, not a Chrome trace", path)
    saw_events = saw_events or _is_trace(carry, len(carry))
    if saw_events:  # first: a cut-off last event is "truncated", not json.load's words for it
        _check_end(carry, path, gap is _LIST_GAP)
    return _scan_region(carry, len(carry), b, saw_events, gap)


def _is_trace(buf: bytes, end: int) -> bool:
    """The region holds the start of the event list (a bare list, or "traceEvents")."""
    return buf[:end].lstrip().startswith(b"[") or buf.find(b'"traceEvents"', 0, end) >= 0


def _scan_region(buf: bytes, end: int, b: _Builder, saw_events: bool, gap: re.Pattern) -> bool:
    if gap.search(buf, 0, end):  # two documents (or a close-open in a string): json.load
        raise _LayoutMismatch()
    saw_events = saw_events or _is_trace(buf, end)
    found = _EVENT.findall(buf, 0, end)
    try:
        if found:
            b.add_matches(found)
    except ValueError:  # a number that is not one: let json.load judge the file
        raise _LayoutMismatch() from None
    if len(found) != len(_MARK.findall(buf, 0, end)):  # an event the pattern missed
        raise _LayoutMismatch()
    return saw_events


def _scan_json(path: Path, b: _Builder) -> bool:
    data = b"".join(_read_chunks(path))
    _check_start(data[:4096], path)
    doc = loads(data, path, "the trace")
    del data
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return False
    for i, ev in enumerate(events):
        if isinstance(ev, dict):
            b.add_json_event(ev, f"event #{i} ({str(ev.get('name', ''))[:60]!r})", path)
    b.flush_json_rows()
    return True
