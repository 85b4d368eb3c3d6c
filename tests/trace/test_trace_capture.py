"""Capture on the CPU, end to end: capture -> diff -> attribute -> compare -> report."""

from __future__ import annotations

import csv
import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")

from fp8tower.trace import (
    OpRecord,
    TraceError,
    attribute,
    capture_pair,
    compare,
    count_kernels_per_op,
    diff_traces,
    fake_workload,
    load_arm,
    load_trace,
    read_manifest,
    report,
    step_range,
    tables,
)

CPU_REGEX = r"^aten::(matmul|mm|linear|addmm|add)$"


def tower(arm: str, m: int = 1):
    """A 2-layer toy tower. unmerged: q, k, v GEMMs; merged: one qkv GEMM. Both: o_proj,
    which launches two top-level ops (matmul + bias add): 2 'kernels' for one op."""
    g = torch.Generator().manual_seed(0)
    hid = 96
    shapes = (
        [("attn.q_proj", 64), ("attn.k_proj", 32), ("attn.v_proj", 32)]
        if arm == "unmerged"
        else [("attn.qkv_proj", 128)]
    )
    calls, ops = [], []
    x = torch.randn(m, hid, generator=g)
    for _layer in range(2):
        for label, n in shapes:
            w = torch.randn(hid, n, generator=g)
            calls.append((label, lambda w=w: torch.matmul(x, w)))
            ops.append(OpRecord(label, n, hid, n * hid * 4, "torch-cpu", CPU_REGEX, 1, "attn.qkv"))
        wo, bias = torch.randn(hid, hid, generator=g), torch.randn(hid, generator=g)
        calls.append(("attn.o_proj", lambda wo=wo, bias=bias: torch.add(torch.matmul(x, wo), bias)))
        ops.append(OpRecord("attn.o_proj", hid, hid, hid * hid * 4, "torch-cpu", CPU_REGEX))

    def run_steps(n: int) -> float:
        for _ in range(n):
            with step_range():
                for _, fn in calls:
                    fn()
        return 0.01 * n  # a stand-in for the CUDA-event time of the n steps

    return run_steps, ops, calls


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    out = {}
    for arm in ("unmerged", "merged"):
        run_steps, ops, calls = tower(arm)
        d = tmp_path_factory.mktemp(arm)
        out[arm] = capture_pair(
            run_steps,
            ops,
            (2, 5),
            d,
            {"arm": arm, "model": "toy-2l", "m": 1, "note": "test"},
            eager_ops=calls,
            device="cpu",
            warmup_steps=1,
        )
    return out


def test_count_kernels_per_op_on_cpu():
    a, b = torch.ones(3), torch.ones(2, 2)
    counted = count_kernels_per_op(
        [("one", lambda: a @ a), ("two", lambda: torch.add(b @ b, 1.0)), ("none", lambda: None)],
        device="cpu",
    )
    assert [(c.label, c.kernels) for c in counted] == [("one", 1), ("two", 2), ("none", 0)]
    assert counted[1].names == ("aten::matmul", "aten::add")


def test_capture_writes_traces_and_manifest(captures):
    res = captures["unmerged"]
    m = read_manifest(res.directory)
    assert m.device == "cpu" and m.arm == "unmerged" and m.model == "toy-2l" and m.m == 1
    assert m.steps == (2, 5) and m.traces == ("trace_2.json.gz", "trace_5.json.gz")
    assert [op.kernels for op in m.ops] == [1, 1, 1, 2] * 2  # o_proj: matmul + add
    assert m.event_ms == pytest.approx((0.02, 0.05))
    assert m.meta["note"] == "test" and "torch" in m.meta
    for p in res.traces:
        assert p.exists() and p.read_bytes()[:2] == b"\x1f\x8b"


def test_diff_of_a_cpu_capture(captures):
    res = captures["unmerged"]
    d = diff_traces(load_trace(res.traces[0]), load_trace(res.traces[1]), (2, 5))
    assert d.device == "cpu" and d.integral and d.to_json()["device"] == "cpu"
    by = {k.name: k.launches_per_step for k in d.kernels}
    assert by == {"aten::matmul": 8, "aten::add": 2}


def test_attribute_and_compare(captures):
    a = attribute(load_arm(captures["unmerged"].directory))
    b = attribute(load_arm(captures["merged"].directory))
    assert a.device == b.device == "cpu" and not a.mismatches and not b.mismatches
    ops = {op.label: op for op in a.ops}
    assert ops["attn.o_proj"].launches_per_step == 4 and ops["attn.o_proj"].calls_per_step == 2
    assert ops["attn.q_proj"].launches_per_step == 2
    assert a.event_ms_per_step == pytest.approx(0.01)
    cmp = compare(a, b)
    groups = {r.group: r for r in cmp.rows}
    assert sorted(groups["attn.qkv"].a.labels) == ["attn.k_proj", "attn.q_proj", "attn.v_proj"]
    assert groups["attn.qkv"].b.labels == ["attn.qkv_proj"]
    assert (
        groups["attn.qkv"].a.launches_per_step == 6 and groups["attn.qkv"].b.launches_per_step == 2
    )


def test_report_outputs_say_cpu(captures, tmp_path):
    a = attribute(load_arm(captures["unmerged"].directory))
    b = attribute(load_arm(captures["merged"].directory))
    cmp = compare(a, b)
    doc = tables.comparison_json(cmp)
    assert doc["cpu_run"] is True and doc["device"] == "cpu"
    assert all(att["cpu_run"] for att in doc["attributions"])
    report.write_comparison_csv(tmp_path / "c.csv", cmp)
    rows = list(csv.DictReader((tmp_path / "c.csv").read_text().splitlines()))
    assert {r["device"] for r in rows} == {"cpu"} and rows[-1]["group"] == "total"
    if importlib.util.find_spec("matplotlib") and importlib.util.find_spec("jinja2"):
        page = report.write_html(tmp_path / "r.html", [a, b], cmp).read_text()
        assert "CPU run" in page and "attn.qkv" in page
    json.dumps(doc)


def test_capture_validates_its_inputs(tmp_path):
    run_steps, ops, calls = fake_workload()
    with pytest.raises(TraceError, match="must name the arm"):
        capture_pair(run_steps, ops, (2, 4), tmp_path, {}, device="cpu")
    with pytest.raises(TraceError, match="0 < SHORT < LONG"):
        capture_pair(run_steps, ops, (4, 4), tmp_path, {"arm": "x"}, device="cpu")
    with pytest.raises(TraceError, match="one to one"):
        capture_pair(
            run_steps, ops, (1, 2), tmp_path, {"arm": "x"}, device="cpu", eager_ops=calls[:2]
        )
    with pytest.raises(TraceError, match="launched no kernel"):
        capture_pair(
            run_steps,
            ops[:1],
            (1, 2),
            tmp_path,
            {"arm": "x"},
            device="cpu",
            eager_ops=[(ops[0].label, lambda: None)],
        )


def test_fake_workload_smoke(tmp_path):
    run_steps, ops, calls = fake_workload()
    res = capture_pair(
        run_steps,
        ops,
        (1, 3),
        tmp_path,
        {"arm": "fake"},
        eager_ops=calls,
        device="cpu",
        warmup_steps=0,
    )
    att = attribute(load_arm(res.directory))
    assert [op.launches_per_step for op in att.ops] == [1, 1, 1] and not att.mismatches


# -- atomic capture (issue 9) ------------------------------------------------------------------


def _capture(out, steps=(1, 2), force=False, run_steps=None):
    rs, ops, _ = fake_workload()
    return capture_pair(
        run_steps or rs, ops, steps, out, {"arm": "fake"}, device="cpu", warmup_steps=0,
        force=force,
    )


def _files(d):
    return sorted(p.name for p in d.iterdir())


def test_capture_refuses_an_existing_capture_without_force(tmp_path):
    out = tmp_path / "cap"
    _capture(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(TraceError, match="already holds a capture; pass --force"):
        _capture(out, (2, 3))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _files(tmp_path) == ["cap"]  # no temporary directory left behind


def test_capture_force_replaces_the_capture_whole(tmp_path):
    out = tmp_path / "cap"
    _capture(out, (1, 2))
    res = _capture(out, (2, 3), force=True)
    assert _files(out) == ["manifest.json", "trace_2.json.gz", "trace_3.json.gz"]
    assert res.manifest.steps == (2, 3) and res.traces[0] == out / "trace_2.json.gz"
    att = attribute(load_arm(out))
    assert [op.launches_per_step for op in att.ops] == [1, 1, 1]
    assert _files(tmp_path) == ["cap"]


def test_interrupted_capture_leaves_the_old_one_whole(tmp_path):
    out = tmp_path / "cap"
    _capture(out, (1, 2))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rs, _, _ = fake_workload()

    def dies_in_the_long_run(n):
        if n == 3:
            raise KeyboardInterrupt
        rs(n)

    with pytest.raises(KeyboardInterrupt):
        _capture(out, (2, 3), force=True, run_steps=dies_in_the_long_run)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _files(tmp_path) == ["cap"]


def test_capture_never_replaces_a_directory_that_is_not_a_capture(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(TraceError, match="non-empty directory without a capture manifest"):
        _capture(out, force=True)
    assert (out / "notes.txt").read_text() == "keep me"


def test_capture_refuses_a_bad_read_ceiling_before_capturing(tmp_path):
    rs, ops, _ = fake_workload()
    for bad in (0, -1.0, float("nan"), "fast"):
        with pytest.raises(TraceError, match="read_ceiling_gbps must be a finite number > 0"):
            capture_pair(rs, ops, (1, 2), tmp_path / "c", {"arm": "x", "read_ceiling_gbps": bad},
                         device="cpu")
    assert not (tmp_path / "c").exists()


def test_a_capture_whose_event_times_are_not_a_step_time_stays_readable(tmp_path):
    """The long run timed no longer than the short one (a shared GPU: session 39's tiny tower
    under 14 test workers, 0.362 / 0.278 ms): the capture records no event times and says
    why, instead of writing a manifest read_manifest refuses."""
    rs, ops, _ = fake_workload()

    def shorter_when_longer(n):
        rs(n)
        return 1.0 / n

    res = capture_pair(shorter_when_longer, ops, (2, 4), tmp_path / "c", {"arm": "x"},
                       device="cpu", warmup_steps=0)
    m = read_manifest(tmp_path / "c")
    assert m.event_ms is None and res.manifest.event_ms is None
    assert "0.2500 ms" in m.meta["event_ms_dropped"] and "0.5000 ms" in m.meta["event_ms_dropped"]
    att = attribute(load_arm(tmp_path / "c"))
    assert att.event_ms_per_step is None
    assert any(n.startswith("event_ms: the long run's") for n in att.notes)
    # times that are no times (a caller's run_steps): dropped the same way
    for bad in (float("inf"), float("nan"), -0.1):
        out = tmp_path / f"bad{bad}"
        capture_pair(lambda n, b=bad: (rs(n), b if n == 4 else 0.01)[1], ops, (2, 4), out,
                     {"arm": "x"}, device="cpu", warmup_steps=0)
        m = read_manifest(out)
        assert m.event_ms is None and "not finite times >= 0" in m.meta["event_ms_dropped"]
    # consistent times are kept, with no such note
    res = capture_pair(lambda n: (rs(n), 0.01 * n)[1], ops, (2, 4), tmp_path / "d", {"arm": "x"},
                       device="cpu", warmup_steps=0)
    assert res.manifest.event_ms == pytest.approx((0.02, 0.04))
    assert "event_ms_dropped" not in read_manifest(tmp_path / "d").meta
