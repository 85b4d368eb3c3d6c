"""nsys SQLite ingest: real schema, older schemas, graph-level traces, hostile databases."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from nsys_db import K, build_nsys

from fp8tower.trace import TraceError, diff_traces, load_trace
from fp8tower.trace.steps import segment_steps

GEMM = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
CUTLASS = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<int> >(Params)"
KERNELS = [
    K(GEMM, 50_000, (132, 1, 4)),
    K(CUTLASS, 80_000, (128, 1, 1), (384, 1, 1)),
    K(GEMM, 20_000, (64, 1, 1)),
]


def test_node_level_export(tmp_path):
    path = build_nsys(tmp_path / "run.sqlite", 4, KERNELS)
    t = load_trace(path)
    assert t.source == "nsys" and t.graph_trace_mode == "node" and not t.notes
    k = t.kernels
    assert len(k) == 12 and k.names == sorted(set(k.names), key=k.names.index)
    assert set(k.names) == {GEMM, CUTLASS}
    np.testing.assert_allclose(sorted(set(k.dur_us.tolist())), [20.0, 50.0, 80.0])
    rows = [i for i in range(len(k)) if k.name(i) == CUTLASS]
    assert (k.grid[rows] == [128, 1, 1]).all() and (k.block[rows] == [384, 1, 1]).all()
    assert (k.graph_id == 1).all() and sorted(set(k.graph_node_id)) == [1000, 1001, 1002]
    assert len(t.launches) == 4 and t.launches.is_graph.all()
    assert len(t.ranges) == 4 and t.ranges[0].name == "fp8tower.step"
    seg = segment_steps(t, 4)
    assert seg.method == "host ranges" and np.bincount(seg.step_of).tolist() == [3, 3, 3, 3]


def test_nsys_pair_diff_is_integral(tmp_path):
    short = load_trace(build_nsys(tmp_path / "s.sqlite", 2, KERNELS, prologue=[K("fill", 1000)]))
    long = load_trace(build_nsys(tmp_path / "l.sqlite", 6, KERNELS, prologue=[K("fill", 1000)]))
    d = diff_traces(short, long, (2, 6))
    assert d.integral
    by_name = {k.name: k for k in d.kernels}
    assert by_name[GEMM].launches_per_step == 2 and by_name[CUTLASS].launches_per_step == 1
    assert by_name[CUTLASS].ms_per_step == pytest.approx(0.080)
    assert by_name["fill"].launches_per_step == 0


def test_short_names_on_request(tmp_path):
    from fp8tower.trace.nsys import load_nsys

    t = load_nsys(build_nsys(tmp_path / "run.sqlite", 1, KERNELS), name_column="shortName")
    assert "void cutlass::device_ker" in t.kernels.names


def test_older_schema_without_graph_columns_or_mode(tmp_path):
    path = build_nsys(
        tmp_path / "old.sqlite",
        3,
        KERNELS,
        graph=False,
        graph_columns=False,
        meta_layout="none",
        nvtx_text_ids=True,
    )
    t = load_trace(path)
    assert t.graph_trace_mode is None
    assert any("does not record the CUDA graph trace mode" in n for n in t.notes)
    assert not t.kernels.has_graph_ids and (t.kernels.graph_node_id == -1).all()
    assert len(t.launches) == 9 and not t.launches.is_graph.any()
    assert [r.name for r in t.ranges] == ["fp8tower.step"] * 3  # via NVTX textId
    assert segment_steps(t, 3).count == 3


def test_mode_in_string_id_layout(tmp_path):
    t = load_trace(build_nsys(tmp_path / "k.sqlite", 1, KERNELS, meta_layout="key_ids"))
    assert t.graph_trace_mode == "node"


def test_graph_level_trace_is_refused(tmp_path):
    path = build_nsys(tmp_path / "graph.sqlite", 2, KERNELS[:1], mode="graph", graph_trace_rows=2)
    with pytest.raises(TraceError, match="graph-level.*--cuda-graph-trace=node") as e:
        load_trace(path)
    assert str(path) in str(e.value) and "per-kernel numbers" in str(e.value)


def test_graph_mode_with_graph_launches_but_no_graph_table(tmp_path):
    path = build_nsys(tmp_path / "graph2.sqlite", 2, KERNELS[:1], mode="graph")
    with pytest.raises(TraceError, match="graph-level"):
        load_trace(path)


def test_graph_mode_without_graphs_is_a_note(tmp_path):
    t = load_trace(build_nsys(tmp_path / "g.sqlite", 2, KERNELS, graph=False, mode="graph"))
    assert any("graph-level" in n for n in t.notes)


def test_missing_columns(tmp_path):
    path = build_nsys(tmp_path / "nocorr.sqlite", 1, KERNELS, drop_columns=("correlationId",))
    with pytest.raises(TraceError, match="lacks column.*correlationId"):
        load_trace(path)


def test_missing_name_columns(tmp_path):
    path = build_nsys(
        tmp_path / "nonames.sqlite",
        1,
        KERNELS,
        drop_columns=("demangledName", "shortName", "mangledName"),
    )
    with pytest.raises(TraceError, match="demangledName"):
        load_trace(path)


def test_empty_kernel_table(tmp_path):
    path = build_nsys(tmp_path / "empty.sqlite", 0, KERNELS)
    with pytest.raises(TraceError, match="no kernel events"):
        load_trace(path)


def test_sqlite_that_is_not_nsys(tmp_path):
    path = tmp_path / "app.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INT, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(TraceError, match="not an nsys export"):
        load_trace(path)


def test_corrupt_sqlite(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 2000)
    with pytest.raises(TraceError, match="SQLite|nsys") as e:
        load_trace(path)
    assert str(path) in str(e.value)


def test_cpu_device_does_not_apply(tmp_path):
    with pytest.raises(TraceError, match="does not apply"):
        load_trace(build_nsys(tmp_path / "x.sqlite", 1, KERNELS), device="cpu")


def _edit(path, sql: str):
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    return path


def test_kernels_of_two_devices_are_refused(tmp_path):
    """Two ranks' kernels in one export would count twice a step and hide under each other."""
    path = build_nsys(tmp_path / "two.sqlite", 2, KERNELS)
    _edit(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1 WHERE rowid % 2 = 0")
    with pytest.raises(TraceError, match=r"kernels of 2 devices \(device 0: 3 kernels, "
                                         r"device 1: 3 kernels\)"):
        load_trace(path)


def test_a_kernel_recorded_twice_is_refused(tmp_path):
    path = build_nsys(tmp_path / "dup.sqlite", 2, KERNELS)
    _edit(path, "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL "
                "WHERE rowid = 1")
    with pytest.raises(TraceError, match="1 kernel event.s. repeat another exactly"):
        load_trace(path)
