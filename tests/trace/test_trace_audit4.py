"""Traces the tool must refuse (or read) that it got wrong before session 35's audit: each test
fails on the code before it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from trace_helpers import DATA, GEMM, NORM, STEP, cli, edit_trace

from fp8tower.trace import TraceError, diff_traces, load_trace
from fp8tower.trace.arm import load_arm
from fp8tower.trace.attribute import attribute
from fp8tower.trace.manifest import read_manifest
from fp8tower.trace.synth import write_torch_trace
from fp8tower.trace.tables import attribution_json

S, L = DATA / "arm_merged" / "trace_2.json.gz", DATA / "arm_merged" / "trace_6.json.gz"


def _graph_corr(events):
    return {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "GraphLaunch" in e["name"]
    }


def _drop_replayed(events):
    """The kernels of every graph replay gone, as in a graph-level trace; one eager norm kept."""
    graph = _graph_corr(events)
    return [
        e
        for e in events
        if not (e.get("cat") == "kernel" and e["args"].get("correlation") in graph)
    ]


@pytest.mark.parametrize("ranges", [True, False])
def test_graph_launches_without_kernels_are_refused(tmp_path, ranges):
    """Before: replays whose kernels the trace lacks counted 0 a step, integral, exit 0."""
    pair = []
    for n in (2, 6):
        src = write_torch_trace(tmp_path / f"g{n}.json.gz", n, STEP, graph=True,
                                step_ranges=ranges, prologue=STEP[2:3] * (n // 2))
        pair.append(load_trace(edit_trace(src, tmp_path / f"gl{n}.json.gz", _drop_replayed)))
    with pytest.raises(TraceError, match="cudaGraphLaunch calls have no kernel"):
        diff_traces(*pair, (2, 6))


def _drop_launched_after(step_kept: int):
    """Drop the kernels launched from the (step_kept + 1)-th host step range on, as a full
    profiler buffer drops the last ones; host ranges and launch calls stay."""

    def fn(events):
        host = sorted(e["ts"] for e in events if e.get("cat") == "user_annotation"
                      and "fp8tower.step" in e["name"])
        late = {e["args"]["correlation"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["ts"] >= host[step_kept]
                and "correlation" in e.get("args", {})}
        return [e for e in events
                if not (e.get("cat") in ("kernel", "gpu_user_annotation")
                        and e.get("args", {}).get("correlation") in late)]

    return fn


def test_long_trace_missing_its_last_steps_is_refused(tmp_path):
    """Before: 2 of LONG's 6 eager steps without kernels gave half the launches and ms a step,
    integral, exit 0."""
    short = load_trace(write_torch_trace(tmp_path / "s.json.gz", 2, STEP, graph=False))
    src = write_torch_trace(tmp_path / "l.json.gz", 6, STEP, graph=False, seed=2)
    long = load_trace(edit_trace(src, tmp_path / "t6.json.gz", _drop_launched_after(4)))
    assert len(long.kernels) == 4 * len(STEP)
    with pytest.raises(TraceError, match="2 of its 6 steps hold no kernel"):
        diff_traces(short, long, (2, 6))


def test_graph_replays_missing_their_kernels_are_refused(tmp_path):
    """The same loss in a graph capture (the arm in the real layout): its replays have no
    kernel."""
    t6 = edit_trace(L, tmp_path / "t6.json.gz", _drop_launched_after(4))
    with pytest.raises(TraceError, match="no kernel"):
        diff_traces(load_trace(S), load_trace(t6), (2, 6))


def test_a_step_on_two_streams_reads_as_one_step(tmp_path):
    """kineto projects a step range once per stream: before, a step whose GEMMs ran on a
    second stream counted as two steps and the capture was refused."""
    arm = tmp_path / "ms_arm"
    shutil.copytree(DATA / "arm_merged", arm)

    def two_streams(events):
        out = []
        for e in events:
            if e.get("cat") == "kernel" and e["name"].startswith("nvjet"):
                e = {**e, "tid": 8, "args": {**e["args"], "stream": 8}}
            out.append(e)
            if e.get("cat") == "gpu_user_annotation":
                out.append({**e, "tid": 8})
        return out

    for n in (2, 6):
        edit_trace(arm / f"trace_{n}.json.gz", arm / f"trace_{n}.json.gz", two_streams)
    base, moved = attribute(load_arm(DATA / "arm_merged")), attribute(load_arm(arm))
    assert [(o.label, o.launches_per_step) for o in moved.ops] == [
        (o.label, o.launches_per_step) for o in base.ops
    ]


def test_map_regex_too_deep_or_too_big_is_a_clean_error(tmp_path):
    for bad in ("(" * 1000 + "a" + ")" * 1000, "a{4294967296}"):
        m = tmp_path / "m.json"
        m.write_text(json.dumps({"rules": [{"match": bad, "label": "x"}]}))
        r = cli("attribute", f"{S},{L}", "--steps", 2, 6, "--map", m)
        assert r.exit_code == 2 and "not a regular expression" in r.output


def test_verify_ok_is_false_when_a_launch_check_failed(tmp_path):
    """Before: `verify.ok` was true while the command exited 1 on a failed launch check."""
    arm = tmp_path / "m7"
    shutil.copytree(DATA / "arm_merged", arm)
    man = json.loads((arm / "manifest.json").read_text())
    man.setdefault("meta", {})["expected_launches"] = [{"label": "gdn.out_proj", "modules": 0}]
    (arm / "manifest.json").write_text(json.dumps(man))
    att = attribute(load_arm(arm))
    assert att.failed
    assert attribution_json(att)["verify"]["ok"] is False


def test_two_graph_nodes_at_one_timestamp_are_not_repeats(tmp_path):
    ev = {"ph": "X", "cat": "kernel", "name": NORM, "pid": 0, "tid": 7, "ts": 100.0, "dur": 2.0,
          "args": {"stream": 7, "correlation": 5, "grid": [1, 1, 1], "block": [256, 1, 1],
                   "graph id": 1, "graph node id": 1000}}
    twin = {**ev, "args": {**ev["args"], "graph node id": 1001}}
    p = tmp_path / "par.json"
    p.write_text(json.dumps({"traceEvents": [ev, twin]}))
    assert len(load_trace(p).kernels) == 2


def test_per_thread_stream_graph_launch_is_a_graph_launch(tmp_path):
    src = write_torch_trace(tmp_path / "p6.json.gz", 6, STEP, graph=True, step_ranges=False)

    def ptsz(events):
        return [{**e, "name": e["name"] + "_ptsz"} if e.get("name") == "cudaGraphLaunch" else e
                for e in events]

    t = load_trace(edit_trace(src, tmp_path / "pt6.json.gz", ptsz))
    assert int(np.count_nonzero(t.launches.is_graph)) == 6


def test_dollar_signs_in_labels_draw_literally(tmp_path):
    pytest.importorskip("matplotlib")
    m = tmp_path / "mapx.json"
    m.write_text(json.dumps({"rules": [{"match": "nvjet", "label": "out_$\\frac$_proj"}]}))
    r = cli("report", f"{S},{L}", "--steps", 2, 6, "--map-a", m, "--html", tmp_path / "r.html")
    assert r.exit_code in (0, 1), r.output
    assert (tmp_path / "r.html").exists()


def test_event_ms_long_not_more_than_short_is_refused(tmp_path):
    arm = tmp_path / "m15"
    shutil.copytree(DATA / "arm_merged", arm)
    man = json.loads((arm / "manifest.json").read_text())
    man["event_ms"] = {"short": 5, "long": 1}
    (arm / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(TraceError, match="event_ms.long"):
        read_manifest(arm)


def test_an_empty_ordinal_list_is_refused(tmp_path):
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"rules": [{"match": "a", "label": "x", "ordinal": []}]}))
    r = cli("attribute", f"{S},{L}", "--steps", 2, 6, "--map", m)
    assert r.exit_code == 2 and "empty list" in r.output


def test_diff_json_says_cpu_run_and_carries_warnings(tmp_path):
    a = load_trace(write_torch_trace(tmp_path / "a.json.gz", 2, STEP, step_ranges=False,
                                     graph=False))
    b = load_trace(write_torch_trace(tmp_path / "b.json.gz", 6, STEP, step_ranges=False,
                                     graph=False, seed=3))
    doc = diff_traces(a, b, (2, 6)).to_json()
    assert doc["cpu_run"] is False and doc["warnings"] and "rest on --steps" in doc["warnings"][0]
    assert GEMM in {k["name"] for k in doc["kernels"]}
