"""Host launch statistics (trace/launches.py) against independent counts from json.load."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from trace_helpers import DATA

from fp8tower.trace import attribute, load_arm
from fp8tower.trace.chrome import load_chrome
from fp8tower.trace.launches import GRAPH_LAUNCH, host_stats, load_launch_calls

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
