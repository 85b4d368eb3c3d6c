"""Host launch statistics (trace/launches.py) against independent counts from json.load."""

from __future__ import annotations

import gzip
import json
import sqlite3

import numpy as np
import pytest
from nsys_db import K, build_nsys
from trace_helpers import DATA

from fp8tower.trace import TraceError, attribute, load_arm, load_trace
from fp8tower.trace.chrome import load_chrome
from fp8tower.trace.launches import GRAPH_LAUNCH, UNATTRIBUTED, host_stats, load_launch_calls
from fp8tower.trace.manifest import Manifest, OpRecord

H200 = DATA / "h200_27b_m1" / "merged_triton"


def _events(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _graph_launch_samples(path):
    """Independent: (cpu dur, first kernel start - call start) per cudaGraphLaunch that
    replayed kernels, from json.load."""
    ev = _events(path)
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"}
    first = {}
    for e in ev:
        if e.get("cat") == "kernel":
            c = e["args"]["correlation"]
            first[c] = min(first.get(c, float("inf")), e["ts"])
    return [(calls[c]["dur"], first[c] - calls[c]["ts"]) for c in calls if c in first]


def test_real_h200_graph_launches():
    """Real H200 capture (torch 2.11, one cudaGraphLaunch per step): one launch per step,
    CPU time and delay per replay as json.load counts them."""
    att = attribute(load_arm(H200))
    row = att.host.row(GRAPH_LAUNCH)
    assert row.apis == ["cudaGraphLaunch"]
    assert row.launches_per_step == pytest.approx(1.0)
    short = _graph_launch_samples(H200 / "trace_8.json.gz")
    long = _graph_launch_samples(H200 / "trace_136.json.gz")
    assert row.launches == len(long) == 136
    want = (sum(d for d, _ in long) - sum(d for d, _ in short)) / 128 / 1e3
    assert row.cpu_ms_per_step == pytest.approx(want, rel=1e-9)
    assert row.cpu_us_median == pytest.approx(float(np.median([d for d, _ in long])))
    assert row.delay_us_median == pytest.approx(float(np.median([x for _, x in long])), abs=2e-3)
    assert row.delay_us_max == pytest.approx(max(x for _, x in long), abs=2e-3)
    assert att.host.unmatched_kernels == 0
    # every op row is graph-replayed: no eager launch rows
    assert [r.label for r in att.host.rows] == [GRAPH_LAUNCH]


def _eager_trace(path, steps, seed):
    """SYNTHETIC, in the exact torch.profiler chrome layout of the python exporter (compact
    json.dump): per step a cudaLaunchKernel ('mm') and a cuLaunchKernelEx ('tri'), each with
    its own CPU duration and launch delay; one prologue launch outside the steps."""
    rng = np.random.default_rng(seed)
    ev, t, corr, samples = [], 1000.0, 1, []

    def launch(api, cat, kname, cpu, delay):
        nonlocal t, corr
        ev.append({"ph": "X", "cat": cat, "name": api, "pid": 1, "tid": 1, "ts": t, "dur": cpu,
                   "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7,
                   "ts": t + delay, "dur": 3.0,
                   "args": {"stream": 7, "correlation": corr, "grid": [1, 1, 1],
                            "block": [128, 1, 1]}})
        samples.append((kname, api, cpu, delay))
        corr += 1
        t += cpu + 1.0

    launch("cudaLaunchKernel", "cuda_runtime", "prologue_fill", 50.0, 7.0)
    for s in range(steps):
        t0 = t
        launch("cudaLaunchKernel", "cuda_runtime", "mm",
               float(rng.integers(3, 9)), float(rng.integers(5, 40)))
        launch("cuLaunchKernelEx", "cuda_driver", "tri",
               float(rng.integers(10, 30)), float(rng.integers(5, 90)))
        ev.append({"ph": "X", "cat": "user_annotation", "name": "fp8tower.step", "pid": 1,
                   "tid": 1, "ts": t0 - 0.5, "dur": t - t0 + 1.0, "args": {}})
        t += 100.0
    with open(path, "w") as f:
        json.dump({"traceEvents": ev}, f, separators=(",", ":"))
    return samples


def test_eager_launch_stats_match_independent_count(tmp_path):
    s_short = _eager_trace(tmp_path / "s.json", 3, 0)
    s_long = _eager_trace(tmp_path / "l.json", 7, 1)
    traces = tuple(load_chrome(tmp_path / n) for n in ("s.json", "l.json"))
    calls = tuple(load_launch_calls(t) for t in traces)
    assert calls[1].api == ["cudaLaunchKernel", "cuLaunchKernelEx"]
    names = ["gemm", "triton"]

    def labels(tr):  # prologue kernel unattributed (-1)
        return np.array([{"mm": 0, "tri": 1}.get(tr.kernels.name(i), -1)
                         for i in range(len(tr.kernels))])

    hs = host_stats(traces, calls, (labels(traces[0]), labels(traces[1])), names, (3, 7))
    for label, kname, api in (("gemm", "mm", "cudaLaunchKernel"),
                              ("triton", "tri", "cuLaunchKernelEx")):
        r = hs.row(label)
        lo = [x for x in s_long if x[0] == kname]
        sh = [x for x in s_short if x[0] == kname]
        assert r.apis == [api]
        assert r.launches == len(lo) == 7
        assert r.launches_per_step == pytest.approx(1.0)
        assert r.cpu_ms_per_step == pytest.approx(
            (sum(x[2] for x in lo) - sum(x[2] for x in sh)) / 4 / 1e3)
        assert r.cpu_us_mean == pytest.approx(np.mean([x[2] for x in lo]))
        assert r.delay_us_median == pytest.approx(np.median([x[3] for x in lo]))
        assert r.delay_us_max == pytest.approx(max(x[3] for x in lo))
        assert r.delay_us_p90 == pytest.approx(np.percentile([x[3] for x in lo], 90))
    un = hs.row("(unattributed)")
    assert un.launches_per_step == pytest.approx(0.0)  # the prologue cancels
    assert hs.launches_per_step == pytest.approx(2.0)


def test_attribute_json_and_csv_carry_host_columns(tmp_path):
    from fp8tower.trace import report, tables

    att = attribute(load_arm(H200))
    doc = tables.attribution_json(att)
    assert doc["host"]["rows"][0]["label"] == GRAPH_LAUNCH
    assert doc["launch_checks"] == []  # the tower manifest asks for none
    path = report.write_attribution_csv(tmp_path / "a.csv", att)
    header = path.read_text().splitlines()[0].split(",")
    assert "launch_delay_us_median" in header and "host_cpu_ms_per_step" in header


def _nsys_arm(d, sql=(), prologue=()):
    """SYNTHETIC eager nsys capture in ``d``: 2 and 6 steps of two ops (one cudaLaunchKernel
    each), ``sql`` statements run on both exports, ``prologue`` kernels before the steps."""
    d.mkdir(parents=True)
    for n in (2, 6):
        path = build_nsys(d / f"t{n}.sqlite", n, [K("nvjet_a", 50_000), K("nvjet_b", 30_000)],
                          graph=False, prologue=list(prologue))
        con = sqlite3.connect(path)
        for statement in sql:
            con.execute(statement)
        con.commit()
        con.close()
    ops = [OpRecord(x, 64, 64, 100, "cublaslt", "nvjet") for x in "ab"]
    Manifest("x", (2, 6), "cuda", ops, ("t2.sqlite", "t6.sqlite")).write(d)
    return d


def _host_rows(att):
    return {r.label: r.launches_per_step for r in att.host.rows}


@pytest.mark.parametrize("name", ["run#1", "run?1"])
def test_nsys_launch_calls_under_a_path_with_uri_characters(tmp_path, name):
    """Audit: f"file:{path}?mode=ro" cut the path at '#' / '?', opened (and created) an empty
    database "run" next to it and found no launch calls."""
    att = attribute(load_arm(_nsys_arm(tmp_path / name)))
    assert _host_rows(att) == {"a": 1.0, "b": 1.0}
    assert not (tmp_path / "run").exists()


def test_nsys_runtime_row_without_correlation_id(tmp_path):
    """Audit: correlationId is nullable in the schema; a NULL one was int(None), a TypeError."""
    host_fn = "INSERT INTO StringIds VALUES (999, 'cudaLaunchHostFunc_v10000')"
    null_row = "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5, 10, 1, 0, NULL, 999, 0, 0)"
    att = attribute(load_arm(_nsys_arm(tmp_path / "arm", [host_fn, null_row])))
    assert _host_rows(att) == {"a": 1.0, "b": 1.0}


def test_nsys_runtime_text_time_is_a_trace_error(tmp_path):
    bad = "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = 'soon' WHERE rowid = 2"
    arm = _nsys_arm(tmp_path / "arm", [bad])
    with pytest.raises(TraceError, match="CUPTI_ACTIVITY_KIND_RUNTIME.end holds str 'soon'"):
        load_launch_calls(load_trace(arm / "t2.sqlite"))
    att = attribute(load_arm(arm))  # host statistics absent, said in a note
    assert att.host is None and any("RUNTIME.end holds str" in n for n in att.notes)


def test_kernels_outside_the_steps_are_no_host_row(tmp_path):
    """Audit: with a manifest, a capture's prologue (outside every step) landed in the host
    "(unattributed)" row; host_stats leaves such kernels out (-3)."""
    att = attribute(load_arm(_nsys_arm(tmp_path / "arm", prologue=[K("fill", 1000)])))
    assert UNATTRIBUTED not in _host_rows(att)
    assert _host_rows(att) == {"a": 1.0, "b": 1.0} and att.host.launches_per_step == 2.0
    assert {r.label: r.launches for r in att.host.rows} == {"a": 6, "b": 6}
