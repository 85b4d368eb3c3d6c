"""Property-based fuzzing of the trace readers (issue 9): hostile values in Chrome traces,
nsys SQLite exports, map files and manifests end in a TraceError (one line naming the file),
never in another traceback; what a reader accepts agrees with a count made here.
"""

from __future__ import annotations

import collections
import json
import math
import sqlite3

import pytest
from fuzzhelpers import fuzz_settings, hostile, set_path
from hypothesis import example, given
from hypothesis import strategies as st

from fp8tower.trace.attribute import OpRow
from fp8tower.trace.chrome import load_chrome
from fp8tower.trace.errors import TraceError
from fp8tower.trace.expect import check_expected
from fp8tower.trace.manifest import Manifest, read_manifest
from fp8tower.trace.mapfile import read_map
from fp8tower.trace.nsys import load_nsys

FUZZ = fuzz_settings(60)
EXACT = 2**53
NAMES = ["gemm", "void k<1>(int)", 'quo"te', "back\\slash", "é", ""]

HOSTILE = hostile(False, -(2**64), 2**53 + 1)
GOOD_TIME = st.one_of(st.integers(0, 10**9), st.floats(0, 1e9, allow_nan=False))
GOOD_DIMS = st.lists(st.integers(0, 2**31 - 1), min_size=0, max_size=3)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _time_ok(v, *, dur: bool) -> bool:
    if not _is_num(v):
        return False
    try:
        f = float(v)
    except OverflowError:
        return False
    return math.isfinite(f) and (0 <= f <= EXACT if dur else abs(f) <= EXACT)


def _dims_ok(v) -> bool:
    return (
        isinstance(v, list)
        and len(v) <= 3
        and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31 for d in v)
    )


def _id_ok(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63


@st.composite
def kernel_events(draw):
    ev = {
        "ph": "X",
        "cat": "kernel",
        "name": draw(st.sampled_from(NAMES)),
        "pid": 0,
        "tid": 7,
        "ts": draw(st.one_of(GOOD_TIME, HOSTILE)),
        "dur": draw(st.one_of(GOOD_TIME, GOOD_TIME, HOSTILE)),
        "args": {
            "stream": 7,
            "correlation": draw(st.one_of(st.integers(0, 10**6), HOSTILE)),
            "grid": draw(st.one_of(GOOD_DIMS, GOOD_DIMS, HOSTILE)),
            "block": draw(GOOD_DIMS),
        },
    }
    if draw(st.booleans()) and draw(st.booleans()):
        del ev["dur"]
    return ev


def _kernel_ok(ev) -> bool:
    a = ev["args"]
    return (
        _time_ok(ev["ts"], dur=False)
        and "dur" in ev
        and _time_ok(ev["dur"], dur=True)
        and (a["correlation"] is None or _id_ok(a["correlation"]))
        and _dims_ok(a["grid"])
    )


def _chrome_repeats(events) -> bool:
    """Two events of one kernel execution (a file merged twice): the reader refuses them.
    Called on valid events only (numeric ts and dur)."""
    keys = [(ev["name"], float(ev["ts"]), float(ev["dur"]),
             -1 if ev["args"]["correlation"] is None else ev["args"]["correlation"])
            for ev in events]
    return len(set(keys)) < len(keys)


@FUZZ
@given(
    events=st.lists(kernel_events(), min_size=1, max_size=12),
    indent=st.sampled_from([None, 1]),
    gz=st.booleans(),
)
def test_fuzz_chrome_trace(tmp_path, events, indent, gz):
    import gzip

    text = json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, indent=indent)
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    valid = all(_kernel_ok(ev) for ev in events) and not _chrome_repeats(events)
    try:
        trace = load_chrome(path)
    except TraceError as e:
        assert not valid, f"a valid trace was refused: {e}"
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert valid, "a trace with a bad kernel value was accepted"
    want_n = collections.Counter(ev["name"] for ev in events)
    want_us = collections.defaultdict(float)
    for ev in events:
        want_us[ev["name"]] += float(ev["dur"])
    k = trace.kernels
    got_n = collections.Counter(k.names[i] for i in k.name_id)
    assert got_n == want_n
    for name, us in want_us.items():
        got = float(k.dur_us[[k.names[i] == name for i in k.name_id]].sum())
        assert got == pytest.approx(us, rel=1e-12, abs=1e-9)


# -- nsys --------------------------------------------------------------------------------

NSYS_HOSTILE = st.sampled_from(["abc", 1.5, None, b"\x00", -1, 2**31, 2.0])


@st.composite
def nsys_rows(draw):
    start = draw(st.integers(0, 10**12))
    row = {
        "start": start,
        "end": start + draw(st.integers(0, 10**6)),
        "streamId": 7,
        "correlationId": draw(st.integers(0, 2**63 - 1)),
        "gridX": draw(st.integers(0, 2**31 - 1)),
        "blockX": 128,
        "demangledName": draw(st.integers(1, 3)),
    }
    if draw(st.integers(0, 3)) == 0:
        row[draw(st.sampled_from(sorted(row)))] = draw(NSYS_HOSTILE)
    if draw(st.integers(0, 5)) == 0:
        row["end"] = row["start"] - 1 if _id_ok(row["start"]) else row["end"]
    return row


def _nsys_row_ok(r) -> bool:
    def is_i(v):
        return isinstance(v, int)

    ints = all(is_i(r[c]) for c in ("start", "end", "gridX", "blockX")) and all(
        r[c] is None or is_i(r[c]) for c in ("streamId", "correlationId", "demangledName")
    )
    return ints and r["end"] >= r["start"] and 0 <= r["gridX"] < 2**31 and 0 <= r["blockX"] < 2**31


def _nsys_repeats(rows) -> bool:
    """Two rows of one kernel execution (a file merged twice): the loader refuses them."""
    keys = [tuple(-1 if r[c] is None else r[c] for c in
                  ("start", "end", "streamId", "correlationId", "demangledName")) for r in rows]
    return len(set(keys)) < len(keys)


@FUZZ
@given(rows=st.lists(nsys_rows(), min_size=1, max_size=10))
def test_fuzz_nsys_export(tmp_path, rows):
    path = tmp_path / "t.sqlite"
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "a"), (2, "b"), (3, "c")])
    cols = list(rows[0])
    # untyped columns store each value as given (an INT column would turn 2.0 or "12" into
    # integers, which then are integers: the reader checks typeof, as stored)
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(cols)})")
    con.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(cols))})",
        [tuple(r[c] for c in cols) for r in rows],
    )
    con.commit()
    con.close()
    valid = all(_nsys_row_ok(r) for r in rows) and not _nsys_repeats(rows)
    try:
        trace = load_nsys(path)
    except TraceError as e:
        assert not valid, f"a valid export was refused: {e}"
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert valid, "an export with a bad value was accepted"
    names = {1: "a", 2: "b", 3: "c"}
    want = collections.Counter(
        names.get(r["demangledName"], f"<unknown name id {r['demangledName'] or -1}>") for r in rows
    )
    k = trace.kernels
    assert collections.Counter(k.names[i] for i in k.name_id) == want
    assert float(k.dur_us.sum()) == pytest.approx(
        sum(r["end"] - r["start"] for r in rows) / 1000.0, rel=1e-12
    )


# -- map files ---------------------------------------------------------------------------

ANY = st.one_of(
    HOSTILE,
    st.integers(-5, 5),
    st.text(max_size=5),
    st.lists(st.one_of(st.integers(-2, 2**32), st.just("*")), max_size=4),
    st.fixed_dictionaries({"every": st.integers(-1, 4), "index": st.integers(-1, 4)}),
)
MAP_KEYS = ["match", "label", "group", "grid", "block", "ordinal", "n", "k", "bytes", "extra"]


@FUZZ
@given(
    rules=st.lists(
        st.dictionaries(st.sampled_from(MAP_KEYS), ANY, max_size=6).map(
            lambda d: {"match": "gemm", "label": "op", **d}
        ),
        min_size=0,
        max_size=4,
    )
)
def test_fuzz_map_file(tmp_path, rules):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"rules": rules}))
    try:
        parsed = read_map(path)
    except TraceError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert len(parsed) == len(rules) > 0
    for r in parsed:
        assert isinstance(r.label, str) and r.label and isinstance(r.group, str) and r.group
        for v in (r.n, r.k, r.bytes):
            assert v is None or (_id_ok(v) and v >= 1)
        for dims in (r.grid, r.block):
            assert dims is None or all(d is None or 0 <= d < 2**31 for d in dims)


# -- manifests ---------------------------------------------------------------------------

GOOD_MANIFEST = {
    "schema": "fp8tower.trace.manifest/1",
    "arm": "merged",
    "model": "m",
    "m": 1,
    "device": "cuda",
    "steps": {"short": 8, "long": 136},
    "traces": {"short": "trace_8.json.gz", "long": "trace_136.json.gz"},
    "step_range": "fp8tower.step",
    "event_ms": {"short": 1.0, "long": 2.0},
    "read_ceiling_gbps": 4000.0,
    "ops": [
        {
            "label": "a",
            "n": 64,
            "k": 32,
            "bytes": 4096,
            "backend": "x",
            "kernel_regex": "g",
            "kernels": 1,
        }
    ],
    "meta": {
        "expected_launches": [
            {"label": "a", "modules": 2, "per_module": 1, "kernel_regex": "g", "what": "GEMM"}
        ],
        "min_attributed_share": 0.99,
    },
}
EXPECTATION = ("meta", "expected_launches", 0)
FIELDS = [
    ("arm",),
    ("m",),
    ("device",),
    ("steps", "short"),
    ("steps", "long"),
    ("traces", "short"),
    ("traces", "long"),
    ("event_ms", "short"),
    ("read_ceiling_gbps",),
    ("step_range",),
    ("ops", 0, "n"),
    ("ops", 0, "k"),
    ("ops", 0, "bytes"),
    ("ops", 0, "kernels"),
    ("ops", 0, "label"),
    ("ops", 0, "kernel_regex"),
    ("ops", 0, "group"),
    ("meta",),
    ("meta", "expected_launches"),
    EXPECTATION,
    *[(*EXPECTATION, key) for key in ("label", "modules", "per_module", "kernel_regex", "what")],
    ("meta", "min_attributed_share"),
    ("ops",),
    ("steps",),
]


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(FIELDS), ANY), max_size=3))
# a valid non-GEMM op (hf/capture.py writes them), and meta edits that were tracebacks
@example(edits=[(("ops", 0, f), 0) for f in ("n", "k", "bytes")])
@example(edits=[((*EXPECTATION, "modules"), None)])
@example(edits=[((*EXPECTATION, "kernel_regex"), "(")])
@example(edits=[(("meta", "min_attributed_share"), "12")])
@example(edits=[(("meta", "expected_launches"), 0)])
def test_fuzz_manifest(tmp_path, edits):
    d = json.loads(json.dumps(GOOD_MANIFEST))
    for keys, value in edits:
        set_path(d, keys, value)
    (tmp_path / "manifest.json").write_text(json.dumps(d))
    try:
        m = read_manifest(tmp_path)
    except TraceError as e:
        assert "manifest.json" in str(e) and "\n" not in str(e)
        return
    assert isinstance(m, Manifest)
    s, lg = m.steps
    assert _id_ok(s) and _id_ok(lg) and 0 < s < lg
    assert m.traces[0] != m.traces[1] and all(isinstance(t, str) and t for t in m.traces)
    assert m.m is None or (_id_ok(m.m) and m.m >= 1)
    assert m.read_ceiling_gbps is None or (
        math.isfinite(m.read_ceiling_gbps) and m.read_ceiling_gbps > 0
    )
    assert m.event_ms is None or all(math.isfinite(v) and v >= 0 for v in m.event_ms)
    for op in m.ops:
        sizes = (op.n, op.k, op.bytes)
        assert all(_id_ok(v) for v in sizes) and (min(sizes) >= 1 or sizes == (0, 0, 0))
        assert _id_ok(op.kernels) and op.kernels >= 1
    # what the manifest accepted, the launch checks read without a traceback
    rows = [OpRow(str(e["label"]), "g", None, None, [], 1.0, 2.0, 1.0, None, {"gemm": 2.0})
            for e in m.meta.get("expected_launches") or []]
    for check in check_expected(m, rows, m.steps, 1.0):
        assert isinstance(check.message(), str)


# -- deep nesting ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["trace", "map", "map_toml", "manifest"])
def test_deeply_nested_json_is_a_trace_error(tmp_path, kind):
    deep = "[" * 100_000 + "]" * 100_000
    if kind == "trace":
        path = tmp_path / "t.json"
        path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "args": ' + deep + "}]}")
        call = lambda: load_chrome(path)
    elif kind == "map":
        path = tmp_path / "map.json"
        path.write_text('{"rules": ' + deep + "}")
        call = lambda: read_map(path)
    elif kind == "map_toml":
        path = tmp_path / "map.toml"
        path.write_text("rules = " + deep + "\n")
        call = lambda: read_map(path)
    else:
        path = tmp_path / "manifest.json"
        path.write_text('{"schema": ' + deep + "}")
        call = lambda: read_manifest(path)
    with pytest.raises(TraceError, match="nested too deeply|malformed|truncated") as e:
        call()
    assert str(path) in str(e.value)
