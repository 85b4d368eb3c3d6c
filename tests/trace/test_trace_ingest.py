"""Chrome trace ingest: the layouts torch writes, CUDA graph replays, hostile files."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest
from trace_helpers import DATA, GEMM, NORM, STEP

from fp8tower.trace import TraceError, load_trace
from fp8tower.trace.synth import KernelSpec, write_torch_trace


def test_graph_replay_kernels_share_the_launch_correlation():
    t = load_trace(DATA / "arm_unmerged" / "trace_6.json.gz")
    assert t.source == "torch" and t.device == "cuda"
    assert len(t.kernels) == 1 + 6 * 8  # prologue fill + 6 steps x 8 kernels
    graph = t.launches.correlation[t.launches.is_graph]
    assert len(graph) == 6
    for c in graph:  # one graph replay = one correlation id for all its 8 kernels
        assert (t.kernels.correlation == c).sum() == 8
    assert np.all(np.diff(t.kernels.start_us) > 0)
    assert (t.kernels.stream == 7).all()
    first_gemm = t.kernels.names.index("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT")
    rows = np.flatnonzero(t.kernels.name_id == first_gemm)
    assert (t.kernels.grid[rows] == [132, 1, 4]).all()
    assert (t.kernels.block[rows] == [128, 1, 1]).all()
    assert not t.kernels.has_graph_ids
    steps = [r for r in t.ranges if r.name == "fp8tower.step"]
    assert len(steps) == 6 and not any(r.on_gpu for r in steps)


def test_graph_ids_and_gpu_ranges_when_present():
    t = load_trace(DATA / "arm_merged" / "trace_2.json.gz")
    assert t.kernels.has_graph_ids
    in_graph = t.kernels.graph_node_id >= 0
    assert in_graph.sum() == 2 * 4 and (t.kernels.graph_id[in_graph] == 1).all()
    assert sorted(set(t.kernels.graph_node_id[in_graph])) == [1000, 1001, 1002, 1003]
    assert sum(r.on_gpu for r in t.ranges) == 2


@pytest.mark.parametrize("layout", ["kineto", "kineto_old", "compact"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_every_layout_gives_the_same_table(tmp_path, layout, suffix):
    ref = load_trace(write_torch_trace(tmp_path / f"ref{suffix}", 3, STEP, graph_ids=True))
    t = load_trace(
        write_torch_trace(tmp_path / f"t{suffix}", 3, STEP, layout=layout, graph_ids=True)
    )
    assert t.kernels.names == ref.kernels.names
    for col in (
        "name_id",
        "start_us",
        "dur_us",
        "stream",
        "correlation",
        "grid",
        "block",
        "graph_id",
        "graph_node_id",
    ):
        np.testing.assert_array_equal(getattr(t.kernels, col), getattr(ref.kernels, col))
    assert len(t.launches) == len(ref.launches) == 3


def test_eager_launches_one_correlation_per_kernel():
    t = load_trace(DATA / "old_6.json.gz")
    assert len(t.kernels) == 1 + 6 * 8
    assert len(set(t.kernels.correlation.tolist())) == len(t.kernels)
    assert not t.launches.is_graph.any() and len(t.launches) == len(t.kernels)
    assert not t.ranges


def _events(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_layout_the_fast_path_misses_falls_back_to_json(tmp_path):
    """Keys in another order and an escaped quote in a name: every kernel still arrives."""
    doc = _events(DATA / "arm_unmerged" / "trace_6.json.gz")
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[3]["name"] = 'kernel_with_"quote"'
    path = tmp_path / "sorted.json"
    path.write_text(json.dumps(doc, sort_keys=True, indent=2))
    t = load_trace(path)
    ref = load_trace(DATA / "arm_unmerged" / "trace_6.json.gz")
    assert len(t.kernels) == len(ref.kernels)
    assert 'kernel_with_"quote"' in t.kernels.names
    np.testing.assert_allclose(t.kernels.dur_us, ref.kernels.dur_us)
    np.testing.assert_array_equal(t.kernels.correlation, ref.kernels.correlation)


def test_unicode_and_escaped_names(tmp_path):
    name = "k\u00e9rnel_\\u00e9/path"  # JSON escape text inside the name, plus a real é
    path = write_torch_trace(tmp_path / "u.json", 2, [KernelSpec(name.replace("\\", ""), 1.0)])
    t = load_trace(path)
    assert t.kernels.names == ["k\u00e9rnel_u00e9/path"]


def test_cpu_only_trace_uses_top_level_cpu_ops(tmp_path):
    torch = pytest.importorskip("torch")
    a = torch.randn(16, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with torch.profiler.record_function("fp8tower.step"):
                torch.matmul(a, a)
                torch.nn.functional.linear(a, a)
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    t = load_trace(path)
    assert t.device == "cpu" and t.is_cpu
    names = [t.kernels.name(i) for i in range(len(t.kernels))]
    assert names == ["aten::matmul", "aten::linear"] * 3  # not aten::mm inside them
    with pytest.raises(TraceError, match="no GPU kernel events"):
        load_trace(path, device="cuda")


# -- hostile inputs: a clear TraceError naming the file, never a half-parsed trace --------------


def _raises(path, match, **kw):
    with pytest.raises(TraceError, match=match) as e:
        load_trace(path, **kw)
    assert str(path) in str(e.value)
    return e.value


def test_truncated_gzip(tmp_path):
    raw = (DATA / "arm_unmerged" / "trace_6.json.gz").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 2])
    _raises(path, "truncated gzip")


def test_corrupt_gzip(tmp_path):
    raw = bytearray((DATA / "arm_unmerged" / "trace_6.json.gz").read_bytes())
    raw[40:60] = b"\x00" * 20
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(raw))
    _raises(path, "gzip|truncated|malformed")


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.9, 0.999])
def test_truncated_json_inside_an_event(tmp_path, fraction):
    with gzip.open(DATA / "arm_unmerged" / "trace_6.json.gz", "rb") as f:
        text = f.read()
    path = tmp_path / "cut.json"
    path.write_bytes(text[: int(len(text) * fraction)])
    _raises(path, "truncated or malformed")


def test_truncated_json_at_an_event_boundary(tmp_path):
    with gzip.open(DATA / "arm_unmerged" / "trace_6.json.gz", "rb") as f:
        text = f.read()
    cut = text.rfind(b"\n  },") + len(b"\n  },")
    for end in (cut - 1, cut):  # "...}" and "...},"
        path = tmp_path / f"cut{end}.json"
        path.write_bytes(text[:end])
        _raises(path, "truncated or malformed")


def test_json_that_is_not_a_trace(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3", "hidden_size": 5120}))
    _raises(path, "not a Chrome trace")


def test_invalid_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", oops}]}')
    _raises(path, "malformed|truncated")


def test_trace_without_events(tmp_path):
    path = tmp_path / "empty_trace.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": []}')
    _raises(path, "no kernel events")


def test_trace_without_kernels(tmp_path):
    path = write_torch_trace(tmp_path / "k.json", 2, STEP)
    text = path.read_text().replace('"cat": "kernel"', '"cat": "cpu_op"')
    path.write_text(text.replace('"name": "fp8tower.step"', '"name": "other"'))
    _raises(path, "no kernel events")


def test_png_renamed_json(tmp_path):
    path = tmp_path / "plot.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    _raises(path, "looks like a PNG image")


def test_png_gzipped(tmp_path):
    path = tmp_path / "plot.json.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    _raises(path, "looks like a PNG image")


@pytest.mark.parametrize("content", [b"", b"   \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_bytes(content)
    _raises(path, "empty")


def test_missing_file_and_directory(tmp_path):
    _raises(tmp_path / "nope.json", "no such file")
    _raises(tmp_path, "directory")


def test_nsys_report_needs_export(tmp_path):
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(b"QDSTRM\x00\x01binary")
    _raises(path, "nsys export --type sqlite")


def test_text_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("kernel times: 1.2 ms\n")
    _raises(path, "not a trace")


def test_bad_device_value(tmp_path):
    with pytest.raises(TraceError, match="device must be one of"):
        load_trace(DATA / "old_2.json.gz", device="gpu")


def test_committed_data_untouched_by_tests(tmp_path):
    """Copies work the same as the committed files (no path-dependent state)."""
    dst = tmp_path / "x.json.gz"
    shutil.copy(DATA / "vllm_6.json.gz", dst)
    a, b = load_trace(dst), load_trace(DATA / "vllm_6.json.gz")
    np.testing.assert_array_equal(a.kernels.dur_us, b.kernels.dur_us)
    assert GEMM not in a.kernels.names and NORM in a.kernels.names


def test_malformed_numbers_are_a_trace_error(tmp_path):
    path = write_torch_trace(tmp_path / "t.json", 2, STEP)
    text = path.read_text()
    i = text.index('"dur": ', text.index('"cat": "kernel"'))
    path.write_text(text[: i + 7] + "NaNx" + text[i + 7 + 5 :])
    _raises(path, "malformed")


def test_odd_grid_values_do_not_crash(tmp_path):
    path = write_torch_trace(tmp_path / "t.json", 2, STEP)
    path.write_text(path.read_text().replace('"grid": [132, 1, 4]', '"grid": []'))
    t = load_trace(path)
    assert len(t.kernels) == 8


@pytest.mark.parametrize(("old", "new", "key"), [
    ('"grid": [132, 1, 4]', '"grid": 0', "grid"),  # dims as a scalar (a fuzz find, 2026-12-01)
    ('"correlation": ', '"correlation": [1], "x": ', "correlation"),  # an id as a list
])
def test_kernel_args_of_the_wrong_form_are_a_trace_error(tmp_path, old, new, key):
    path = write_torch_trace(tmp_path / "t.json", 2, STEP)
    text = path.read_text()
    i = text.index(old, text.index('"cat": "kernel"'))
    path.write_text(text[:i] + new + text[i + len(old):])
    _raises(path, key)


def test_torch_211_compact_kernel_events(tmp_path):
    """The shape of torch 2.11 kernel events seen on the H200 (no spaces, args in any order)."""
    events = [
        (
            '{"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":11,"tid":11,'
            '"ts":100.000,"dur":9.5,"args":{"cbid":311,"correlation":77}}'
        ),
        (
            '{"ph":"X","cat":"kernel","name":"nvjet_a","pid":0,"tid":7,"ts":120.5,"dur":10.25,'
            '"args":{"correlation":77,"stream":7,"grid":[132,1,1],"block":[384,1,1],"device":0}}'
        ),
        (
            '{"ph":"X","cat":"kernel","name":"nvjet_b","pid":0,"tid":7,"ts":131.0,"dur":4.0,'
            '"args":{"correlation":77,"stream":7,"grid":[8,2,1],"block":[128,1,1],"device":0}}'
        ),
    ]
    path = tmp_path / "t211.json"
    path.write_text('{"traceEvents":[' + ",".join(events) + '],"traceName":"x"}')
    t = load_trace(path)
    assert t.kernels.names == ["nvjet_a", "nvjet_b"]
    assert t.kernels.correlation.tolist() == [77, 77] and t.kernels.stream.tolist() == [7, 7]
    assert t.kernels.grid.tolist() == [[132, 1, 1], [8, 2, 1]]
    assert t.kernels.dur_us.tolist() == [10.25, 4.0]
    assert t.launches.is_graph.tolist() == [True] and t.launches.correlation.tolist() == [77]
