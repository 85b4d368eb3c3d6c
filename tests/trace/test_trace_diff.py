"""Two-length diff and step segmentation."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from trace_helpers import DATA, GEMM, NORM, REDUCE, STEP

from fp8tower.trace import TraceError, diff_traces, load_trace
from fp8tower.trace.diff import delta, is_integral
from fp8tower.trace.steps import segment_steps, step_times, trace_span_us
from fp8tower.trace.synth import KernelSpec, write_torch_trace


def _pair(tmp_path, short=2, long=6, **kw):
    a = load_trace(write_torch_trace(tmp_path / "s.json.gz", short, STEP, seed=1, **kw))
    b = load_trace(write_torch_trace(tmp_path / "l.json.gz", long, STEP, seed=2, **kw))
    return a, b


def test_per_step_launches_and_ms(tmp_path):
    short, long = _pair(tmp_path, jitter=0.0)
    d = diff_traces(short, long, (2, 6))
    assert d.integral and d.device == "cuda"
    by = {k.name: k for k in d.kernels}
    assert by[GEMM].launches_per_step == 2 and by[GEMM].ms_per_step == pytest.approx(0.080)
    assert by[REDUCE].launches_per_step == 1 and by[REDUCE].ms_per_step == pytest.approx(0.004)
    assert by[NORM].ms_per_step == pytest.approx(0.003)
    assert d.launches_per_step == 4 and d.ms_per_step == pytest.approx(0.087)
    assert [k.name for k in d.kernels] == [GEMM, REDUCE, NORM]  # most ms first


def test_json_contract(tmp_path):
    d = diff_traces(*_pair(tmp_path), (2, 6)).to_json()
    assert d["steps"] == {"short": 2, "long": 6}
    assert set(d) >= {"steps", "kernels", "total", "integral"}
    assert d["integral"] is True
    assert set(d["total"]) == {"launches_per_step", "ms_per_step"}
    for k in d["kernels"]:
        assert set(k) == {"name", "launches_per_step", "ms_per_step", "integral"}
    json.dumps(d)  # plain JSON types only


def test_once_per_run_kernels_cancel():
    d = diff_traces(load_trace(DATA / "old_2.json.gz"), load_trace(DATA / "old_6.json.gz"), (2, 6))
    fill = next(k for k in d.kernels if "FillFunctor" in k.name)
    assert fill.launches_short == fill.launches_long == 1 and fill.launches_per_step == 0
    assert d.integral and d.launches_per_step == 8


def test_fractional_launches_are_flagged(tmp_path):
    """A long trace that lost kernels (graph-level tracing, a dropped buffer) is not integral."""
    short, long = _pair(tmp_path)
    keep = np.ones(len(long.kernels), bool)
    keep[np.flatnonzero(long.kernels.name_id == long.kernels.names.index(NORM))[:3]] = False
    long.kernels = long.kernels.take(keep)
    d = diff_traces(short, long, (2, 6))
    assert not d.integral
    assert [k.name for k in d.fractional] == [NORM]
    msg = d.fractional_message()
    assert "not integers" in msg and "graph-level" in msg and "0.250/step" in msg
    assert d.to_json()["integral"] is False


def test_negative_counts_are_not_integral():
    assert not is_integral(-4.0) and is_integral(4.0)


def test_one_extra_launch_in_many_steps_is_not_integral(tmp_path):
    """Audit: with 1024 more steps one stray launch is 0.00098/step, inside the 1e-3 tolerance
    the ratio was checked with; the integer counts are checked exactly."""
    short = load_trace(write_torch_trace(tmp_path / "s.json.gz", 2, STEP, seed=1))
    long = load_trace(write_torch_trace(tmp_path / "l.json.gz", 1026, STEP, seed=2,
                                        prologue=[KernelSpec("stray_kernel", 5.0)]))
    d = diff_traces(short, long, (2, 1026))
    assert [k.name for k in d.fractional] == ["stray_kernel"] and not d.integral
    assert delta("k", (3, 0.0), (3 + 2 * 1024, 0.0), (2, 1026)).integral


def test_swapped_pair_is_named(tmp_path):
    """Issue 9: a swapped pair used to give -4 launches per step; it is named as such."""
    short, long = _pair(tmp_path)
    with pytest.raises(TraceError, match="SHORT and LONG are swapped"):
        diff_traces(long, short, (2, 6))


@pytest.mark.parametrize("steps", [(6, 2), (4, 4), (-1, 3)])
def test_bad_steps(tmp_path, steps):
    short, long = _pair(tmp_path)
    with pytest.raises(TraceError, match="SHORT < LONG"):
        diff_traces(short, long, steps)


def test_cpu_against_cuda_is_refused(tmp_path):
    short, long = _pair(tmp_path)
    short.device = "cpu"
    with pytest.raises(TraceError, match="cannot diff a cpu trace"):
        diff_traces(short, long, (2, 6))


# -- steps -------------------------------------------------------------------------------------


def test_host_ranges_link_graph_replays_to_steps():
    t = load_trace(DATA / "arm_unmerged" / "trace_6.json.gz")
    seg = segment_steps(t, 6)
    assert seg.method == "host ranges" and seg.count == 6
    assert seg.step_of[0] == -1  # the prologue kernel is outside every step
    assert np.bincount(seg.step_of[seg.step_of >= 0]).tolist() == [8] * 6
    assert (np.diff(seg.step_of[1:]) >= 0).all()


def test_gpu_ranges_preferred():
    t = load_trace(DATA / "arm_merged" / "trace_6.json.gz")
    assert segment_steps(t, 6).method == "gpu ranges"
    assert segment_steps(t, 6, prefer_gpu=False).method == "host ranges"
    np.testing.assert_array_equal(
        segment_steps(t, 6).step_of, segment_steps(t, 6, prefer_gpu=False).step_of
    )


def test_graph_launches_when_no_ranges(tmp_path):
    t = load_trace(write_torch_trace(tmp_path / "t.json", 3, STEP, step_ranges=False))
    assert segment_steps(t, 3).method == "graph launches"
    assert np.bincount(segment_steps(t, 3).step_of).tolist() == [4, 4, 4]
    assert segment_steps(t, 5).method == "none"  # 3 launches cannot be 5 steps


def test_no_boundaries():
    t = load_trace(DATA / "old_6.json.gz")
    seg = segment_steps(t, 6)
    assert seg.method == "none" and seg.count == 0 and (seg.step_of == -1).all()
    st = step_times(t, seg)
    assert st.span_ms is None and st.busy_ms is None


def test_declared_steps_must_match_the_ranges():
    t = load_trace(DATA / "arm_unmerged" / "trace_6.json.gz")
    with pytest.raises(TraceError, match="6 step ranges.*declared as 8 steps"):
        segment_steps(t, 8)


def test_step_times(tmp_path):
    t = load_trace(write_torch_trace(tmp_path / "t.json", 3, STEP, jitter=0.0))
    st = step_times(t, segment_steps(t, 3))
    assert st.busy_ms == pytest.approx(0.087)
    assert 0.087 < st.span_ms < 0.087 + 4 * 0.002  # kernels plus the gaps between them
    assert trace_span_us(t) > 3 * st.span_ms * 1e3


def test_custom_step_range_name():
    t = load_trace(DATA / "vllm_6.json.gz")
    assert segment_steps(t, 6).method == "none"
    seg = segment_steps(t, 6, pattern="^execute_model$")
    assert seg.count == 6 and (seg.step_of >= 0).all()


def test_host_ranges_without_launch_calls(tmp_path):
    path = write_torch_trace(tmp_path / "t.json", 2, STEP)
    doc = json.loads(path.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "cuda_runtime"]
    with gzip.open(tmp_path / "nolaunch.json.gz", "wt") as f:
        json.dump(doc, f)
    t = load_trace(tmp_path / "nolaunch.json.gz")
    with pytest.raises(TraceError, match="no launch calls"):
        segment_steps(t, 2)


def test_graph_node_ids_reveal_dropped_kernels(tmp_path):
    from fp8tower.trace.steps import graph_replay_problems

    t = load_trace(DATA / "arm_merged" / "trace_6.json.gz")
    assert graph_replay_problems(t) == []
    keep = np.ones(len(t.kernels), bool)
    keep[np.flatnonzero(t.kernels.graph_node_id == 1002)[2]] = False  # one node of replay 3
    t.kernels = t.kernels.take(keep)
    problems = graph_replay_problems(t)
    assert len(problems) == 1 and "ran 3 kernels for 4 graph nodes" in problems[0]
