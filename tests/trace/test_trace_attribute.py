"""Attribution (manifest and map files), verification, comparison of two arms."""

from __future__ import annotations

import json
import shutil

import pytest
from trace_helpers import DATA

from fp8tower.trace import TraceError, attribute, compare, load_arm, read_manifest, read_map
from fp8tower.trace.attribute import UNATTRIBUTED, kernel_family
from fp8tower.trace.manifest import Manifest, OpRecord

VLLM = f"{DATA / 'vllm_2.json.gz'},{DATA / 'vllm_6.json.gz'}"


def _ops(att):
    return {op.label: op for op in att.ops}


def test_manifest_attribution_by_position():
    att = attribute(load_arm(DATA / "arm_unmerged"))
    assert att.arm == "unmerged" and att.source == "manifest" and att.steps == (2, 6)
    ops = _ops(att)
    assert set(ops) == {"gdn.in_proj_qkv", "gdn.in_proj_z", "gdn.out_proj"}
    qkv = ops["gdn.in_proj_qkv"]
    assert qkv.calls_per_step == 2 and qkv.launches_per_step == 4  # split-K GEMM + reduce
    assert qkv.ms_per_step == pytest.approx(2 * 0.125, rel=0.03)
    assert qkv.backends == ["cublaslt"] and qkv.group == "gdn.in_proj"
    assert qkv.n == 10240 and qkv.k == 5120
    assert qkv.bytes_per_step == 2 * (10240 * 5120 + 4 * 10240 + 2 * 5120 + 2 * 10240)
    assert qkv.gbps == pytest.approx(qkv.bytes_per_step / qkv.ms_per_step / 1e6)
    assert qkv.families == [
        "cublasLt::splitKreduce_kernel",
        "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
    ]
    assert att.ceiling_gbps == 4000.0 and att.ceiling_source == "measured"
    assert att.ceiling_pct(qkv) == pytest.approx(100 * qkv.gbps / 4000)
    ideal_ms = qkv.bytes_per_step / 4000 / 1e6
    assert att.excess_us_per_call(qkv) == pytest.approx(1000 * (qkv.ms_per_step - ideal_ms) / 2)
    assert sum(op.share for op in att.ops) == pytest.approx(1.0, abs=1e-3)
    assert att.ops[0].ms_per_step >= att.ops[-1].ms_per_step
    assert not att.mismatches and att.integral and not att.unattributed
    assert att.event_ms_per_step == pytest.approx((2.3 - 0.9) / 4)
    assert att.step_times.method == "host ranges" and att.step_times.steps_seen == 6
    assert att.step_times.span_ms > att.step_times.busy_ms


def test_given_ceiling_wins():
    att = attribute(load_arm(DATA / "arm_unmerged"), ceiling_gbps=1000.0)
    assert att.ceiling_gbps == 1000.0 and att.ceiling_source == "given"


def _copy_arm(tmp_path, name="arm_unmerged"):
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


def _edit_manifest(arm_dir, fn):
    path = arm_dir / "manifest.json"
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def test_kernel_family_mismatch_is_reported(tmp_path):
    arm = _copy_arm(tmp_path)

    def triton_z(doc):
        for op in doc["ops"]:
            if op["label"] == "gdn.in_proj_z":
                op["backend"], op["kernel_regex"] = "triton", "^_fp8_gemm_"

    _edit_manifest(arm, triton_z)
    att = attribute(load_arm(arm))
    assert len(att.mismatches) == 1
    m = att.mismatches[0]
    assert m.label == "gdn.in_proj_z" and m.backend == "triton" and m.launches == 12
    assert "nvjet_sm90_tst_128x16" in m.message() and "/^_fp8_gemm_/" in m.message()


def test_kernel_count_mismatch_is_an_error(tmp_path):
    arm = _copy_arm(tmp_path)

    def one_kernel_qkv(doc):
        for op in doc["ops"]:
            op["kernels"] = 1

    _edit_manifest(arm, one_kernel_qkv)
    with pytest.raises(TraceError, match="step 0 has 8 kernels.*launches 6 per step"):
        attribute(load_arm(arm))


def test_positional_mapping_without_step_ranges(tmp_path):
    """No ranges: the trace must be exactly steps x kernels-per-step kernels."""
    arm = tmp_path / "eager"
    arm.mkdir()
    for n in (2, 6):
        shutil.copy(DATA / f"old_{n}.json.gz", arm / f"trace_{n}.json.gz")
    m = read_manifest(DATA / "arm_unmerged")
    m.directory = arm
    m.write(arm)
    with pytest.raises(TraceError, match="no step boundaries.*steps x 8"):
        attribute(load_arm(arm))  # the prologue kernel makes 13 != 2 x 8


def test_map_attribution_json_and_toml_agree():
    a = attribute(load_arm(VLLM, map_path=DATA / "vllm_map.json", steps=(2, 6)))
    b = attribute(load_arm(VLLM, map_path=DATA / "vllm_map.toml", steps=(2, 6)))
    assert a.source == "map"
    for att in (a, b):
        ops = _ops(att)
        assert ops["gdn.in_proj_qkvz"].launches_per_step == 2
        assert ops["gdn.in_proj_qkvz"].group == "gdn.in_proj"
        assert ops["gdn.out_proj"].launches_per_step == 2
        assert ops["gdn.in_proj_qkvz"].bytes_per_step == 2 * (
            16384 * 5120 + 4 * 16384 + 2 * 5120 + 2 * 16384
        )
        assert [k.name for k in att.unattributed] == [
            "void (anonymous namespace)::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, int)"
        ]
    assert [(o.label, o.ms_per_step) for o in a.ops] == [(o.label, o.ms_per_step) for o in b.ops]


def _write_map(tmp_path, rules, suffix=".json"):
    path = tmp_path / f"map{suffix}"
    path.write_text(json.dumps({"rules": rules}))
    return path


def test_map_grid_filter_and_ordinals(tmp_path):
    rules = [
        {"match": "^nvjet_", "ordinal": {"every": 2, "index": 0}, "label": "layer0.out"},
        {"match": "^nvjet_", "ordinal": [1], "label": "layer1.out"},
        {"match": "cudnn", "grid": [999, "*", "*"], "label": "never"},
        {"match": "cudnn", "block": [384], "label": "qkvz"},
    ]
    att = attribute(
        load_arm(
            VLLM, map_path=_write_map(tmp_path, rules), steps=(2, 6), step_pattern="^execute_model$"
        )
    )
    ops = _ops(att)
    assert ops["layer0.out"].launches_per_step == 1 and ops["layer1.out"].launches_per_step == 1
    assert ops["qkvz"].launches_per_step == 2 and ops["never"].launches_per_step == 0
    assert ops["layer0.out"].bytes_per_step is None and ops["layer0.out"].gbps is None


def test_map_ordinals_need_step_boundaries(tmp_path):
    rules = [{"match": "^nvjet_", "ordinal": 0, "label": "first"}]
    with pytest.raises(TraceError, match="ordinal.*step boundaries"):
        attribute(load_arm(VLLM, map_path=_write_map(tmp_path, rules), steps=(2, 6)))


def test_map_on_a_capture_dir_replaces_the_manifest(tmp_path):
    rules = [{"match": ".", "label": "everything"}]
    att = attribute(load_arm(DATA / "arm_merged", map_path=_write_map(tmp_path, rules)))
    assert att.source == "map" and _ops(att)["everything"].launches_per_step == 4


@pytest.mark.parametrize(
    ("rule", "match"),
    [
        ({"label": "x"}, "'match' is required"),
        ({"match": "(", "label": "x"}, "not a regular expression"),
        ({"match": "a", "label": "x", "grid": [1, "x"]}, "dims must be"),
        ({"match": "a", "label": "x", "grid": 5}, "list of up to 3 dims"),
        ({"match": "a", "label": "x", "ordinal": {"every": 2}}, "every' and 'index"),
        ({"match": "a", "label": "x", "ordinal": {"every": 2, "index": 2}}, "index < every"),
        ({"match": "a", "label": "x", "ordinal": "first"}, "ordinal must be"),
        ({"match": "a", "label": "x", "bytes": -1}, "positive integer"),
        ({"match": "a", "label": "x", "colour": "red"}, "unknown key.*colour"),
    ],
)
def test_bad_map_rules(tmp_path, rule, match):
    path = _write_map(tmp_path, [rule])
    with pytest.raises(TraceError, match=match) as e:
        read_map(path)
    assert str(path) in str(e.value) and "rules[0]" in str(e.value)


def test_bad_map_files(tmp_path):
    (tmp_path / "m.yaml").write_text("rules: []")
    with pytest.raises(TraceError, match=r"\.json or \.toml"):
        read_map(tmp_path / "m.yaml")
    (tmp_path / "m.toml").write_text("[[rules]\nmatch = ")
    with pytest.raises(TraceError, match="cannot parse map"):
        read_map(tmp_path / "m.toml")
    (tmp_path / "e.json").write_text('{"rules": []}')
    with pytest.raises(TraceError, match="non-empty 'rules'"):
        read_map(tmp_path / "e.json")
    with pytest.raises(TraceError, match="no such map file"):
        read_map(tmp_path / "missing.json")


def test_manifest_round_trip(tmp_path):
    m = Manifest(
        arm="a",
        steps=(8, 136),
        device="cuda",
        ops=[OpRecord("q", 5120, 5120, 123, "cublaslt", "nvjet", 1, "attn.qkv")],
        traces=("s.json.gz", "l.json.gz"),
        model="x",
        m=1,
        event_ms=(1.0, 2.0),
        read_ceiling_gbps=4100.0,
        meta={"gpu": "H200"},
    )
    m.write(tmp_path)
    r = read_manifest(tmp_path)
    assert (r.arm, r.steps, r.ops, r.event_ms, r.read_ceiling_gbps, r.meta) == (
        "a",
        (8, 136),
        m.ops,
        (1.0, 2.0),
        4100.0,
        {"gpu": "H200"},
    )
    assert r.trace_paths() == (tmp_path / "s.json.gz", tmp_path / "l.json.gz")


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.pop("schema"), "not an fp8tower capture manifest"),
        (lambda d: d.pop("steps"), "steps must be an object with 'short' and 'long'"),
        (lambda d: d["ops"][0].pop("kernel_regex"), r"ops\[0\]: missing field"),
        (lambda d: d["ops"][0].update(kernel_regex="(["), "not a regex"),
        (lambda d: d["ops"][0].update(kernels=0), r"ops\[0\].kernels must be an integer >= 1"),
        (lambda d: d["ops"][0].update(n="wide"), r"ops\[0\].n must be an integer >= 1, got 'wide'"),
        # audit: meta read by trace/expect.py, unchecked: KeyError / re.error / ValueError
        (lambda d: d.update(meta={"expected_launches": [{"label": "gdn.out_proj"}]}),
         r"meta.expected_launches\[0\].modules must be an integer >= 0, got None"),
        (lambda d: d.update(meta={"expected_launches": [
            {"label": "gdn.out_proj", "modules": 2, "kernel_regex": "("}]}),
         r"meta.expected_launches\[0\].kernel_regex '\(' is not a regex"),
        (lambda d: d.update(meta={"expected_launches": [{"label": "x", "modules": True}]}),
         r"modules must be an integer >= 0, got True"),
        (lambda d: d.update(meta={"expected_launches": 5}),
         "meta.expected_launches must be a list of objects, got 5"),
        (lambda d: d.update(meta={"min_attributed_share": "0.99"}),
         r"meta.min_attributed_share must be a finite number >= 0, got '0.99'"),
    ],
)
def test_bad_manifests(tmp_path, edit, match):
    arm = _copy_arm(tmp_path)
    _edit_manifest(arm, edit)
    with pytest.raises(TraceError, match=match) as e:
        read_manifest(arm)
    assert "manifest.json" in str(e.value)


def test_arm_specs():
    with pytest.raises(TraceError, match="need --steps"):
        load_arm(VLLM, map_path=DATA / "vllm_map.json")
    with pytest.raises(TraceError, match="need a map file"):
        load_arm(VLLM, steps=(2, 6))
    with pytest.raises(TraceError, match="capture directory or SHORT,LONG"):
        load_arm("just_one_file.json")
    with pytest.raises(TraceError, match="disagree with the manifest"):
        load_arm(DATA / "arm_unmerged", steps=(8, 136))


def test_compare_ranks_the_levers():
    a = attribute(load_arm(DATA / "arm_unmerged"))
    b = attribute(load_arm(DATA / "arm_merged"))
    cmp = compare(a, b)
    assert [r.group for r in cmp.rows] == ["gdn.in_proj", "gdn.out_proj", UNATTRIBUTED]
    assert abs(cmp.rows[-1].delta_ms) < 1e-3  # only the once-per-run fill kernel's noise
    top = cmp.rows[0]
    assert top.a.labels == ["gdn.in_proj_qkv", "gdn.in_proj_z"]
    assert top.b.labels == ["gdn.in_proj_qkvz"]
    # unmerged: 2 x (125 + 60) us, merged: 2 x 130 us
    assert top.delta_ms == pytest.approx(0.110, rel=0.05)
    assert top.a.launches_per_step == 6 and top.b.launches_per_step == 2
    assert top.b.gbps > top.a.gbps
    assert top.b.families == ["cutlass::device_kernel"]
    assert cmp.delta_ms == pytest.approx(a.ms_per_step - b.ms_per_step)
    assert sum(r.delta_ms for r in cmp.rows) == pytest.approx(cmp.delta_ms, abs=1e-9)


def test_compare_keeps_unattributed_time(tmp_path):
    a = attribute(load_arm(VLLM, map_path=DATA / "vllm_map.json", steps=(2, 6)))
    b = attribute(load_arm(DATA / "arm_merged"))
    cmp = compare(a, b)
    assert cmp.rows[-1].group == UNATTRIBUTED and cmp.rows[-1].a.ms_per_step > 0
    assert sum(r.delta_ms for r in cmp.rows) == pytest.approx(cmp.delta_ms, abs=1e-9)


def test_compare_refuses_cpu_against_cuda():
    a = attribute(load_arm(DATA / "arm_unmerged"))
    b = attribute(load_arm(DATA / "arm_merged"))
    b.device = "cpu"
    with pytest.raises(TraceError, match="cannot compare"):
        compare(a, b)


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("void cutlass::device_kernel<X<1> >(P)", "cutlass::device_kernel"),
        ("nvjet_sm90_tst_64x8", "nvjet_sm90_tst_64x8"),
        ("_fp8_gemm_swapab_kernel", "_fp8_gemm_swapab_kernel"),
        ("void (anonymous namespace)::rms<int>(int)", "(anonymous namespace)::rms"),
    ],
)
def test_kernel_family(name, family):
    assert kernel_family(name) == family


def test_map_arm_steps_disagreeing_with_the_step_ranges_is_an_error():
    """docs/trace.md: the number of step ranges must equal the declared step count (issue 9:
    a map arm used to turn this into a note and print per-step figures with exit code 0)."""
    arm = load_arm(
        VLLM, map_path=DATA / "vllm_map.json", steps=(1, 5), step_pattern="^execute_model$"
    )
    with pytest.raises(TraceError, match="2 step ranges .* SHORT is declared as 1 steps"):
        attribute(arm)


def test_kernels_without_overlap_partition_the_busy_span():
    """Early-launched kernels start inside their predecessor: each is counted from the later
    of its start and the end of every kernel before it; one inside another counts zero."""
    import numpy as np

    from fp8tower.trace.events import KernelTable

    k = KernelTable.empty()
    n = 4
    table = KernelTable(["a"], np.zeros(n, np.int32), np.array([0.0, 5.0, 12.0, 25.0]),
                        np.array([10.0, 15.0, 3.0, 5.0]), np.zeros(n, np.int64),
                        np.arange(n), np.zeros((n, 3), np.int32), np.zeros((n, 3), np.int32),
                        np.full(n, -1), np.full(n, -1))
    out = table.without_overlap()
    assert out.start_us.tolist() == [0.0, 10.0, 20.0, 25.0]
    assert out.dur_us.tolist() == [10.0, 10.0, 0.0, 5.0]  # 25 us: the union of the four
    assert np.all(np.diff(out.start_us) >= 0) and table.start_us[1] == 5.0  # a copy
    apart = table.take(np.array([0, 3]))
    assert apart.without_overlap() is apart and k.without_overlap() is k


def test_overlapping_kernels_add_up_to_the_step_not_more():
    """The same arm with every kernel launched early (starting half-way into the one before,
    as programmatic dependent launch does): the raw durations would sum to more than the
    busy span; the attribution counts each kernel without the overlap, so the ops and the
    unattributed rest add up to the two-length span difference, and a note says so."""
    import dataclasses

    import numpy as np

    from fp8tower.trace.steps import segment_steps

    arm = load_arm(DATA / "arm_merged")

    def early(trace, steps):
        k = trace.kernels
        step = segment_steps(trace, steps, arm.step_pattern).step_of
        same = (step[1:] == step[:-1]) & (step[1:] >= 0)  # within a step: steps stay apart
        start = k.start_us.copy()
        start[1:] = np.where(same, k.start_us[:-1] + k.dur_us[:-1] / 2, start[1:])
        kernels = k.take(np.arange(len(k)))
        kernels.dur_us = k.end_us - start
        kernels.start_us = start
        return dataclasses.replace(trace, kernels=kernels)

    raw = dataclasses.replace(arm, short=early(arm.short, arm.steps[0]),
                              long=early(arm.long, arm.steps[1]))
    raw_sum = float(raw.long.kernels.dur_us.sum() - raw.short.kernels.dur_us.sum())
    att = attribute(raw)
    d = att.steps[1] - att.steps[0]
    assert raw_sum / d / 1e3 > 1.2 * att.span_diff_ms  # what summing raw durations would say
    # the busy union: the span less the idle gaps between kernels (a few % here)
    assert 0.9 * att.span_diff_ms < att.ms_per_step <= att.span_diff_ms * (1 + 1e-9)
    total = sum(op.ms_per_step for op in att.ops) + att.unattributed_ms
    assert total == pytest.approx(att.ms_per_step)
    assert any("ran under an earlier kernel" in n for n in att.notes)
    assert not any("ran under" in n for n in attribute(arm).notes)


def test_op_without_bytes_has_no_bandwidth(tmp_path):
    """Audit: n = k = bytes = 0 (a non-GEMM op, as hf/capture.py writes them) read as 0 GB/s,
    0 % of the ceiling, the whole call as fixed cost, N/K 0 and a 0 GB/s bar."""
    from rich.console import Console

    from fp8tower.trace import report, tables

    arm = _copy_arm(tmp_path, "arm_merged")

    def no_gemm(d):
        for op in d["ops"]:
            if op["label"] == "gdn.out_proj":
                op.update(n=0, k=0, bytes=0)

    _edit_manifest(arm, no_gemm)
    att = attribute(load_arm(arm), 4000.0)
    out, qkvz = _ops(att)["gdn.out_proj"], _ops(att)["gdn.in_proj_qkvz"]
    assert out.ms_per_step > 0 and out.launches_per_step == 2
    assert (out.n, out.k, out.bytes_per_step, out.gbps) == (None, None, None, None)
    assert att.ceiling_pct(out) is None and att.excess_us_per_call(out) is None
    assert qkvz.gbps > 0 and att.excess_us_per_call(qkvz) is not None
    assert [b[1] for b in tables.bandwidth_bars([att], False)] == ["gdn.in_proj_qkvz"]
    console = Console(record=True, width=250)
    report.print_attribution(att, console)
    row = next(ln for ln in console.export_text().splitlines() if "gdn.out_proj" in ln)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[1:3] == ["–", "–"] and cells[-4:] == ["–"] * 4  # N, K; MB, GB/s, %, us


def test_op_row_integrality_is_exact_on_counts():
    """Audit: an op row was integral within 1e-3 of a whole number, so one stray launch in
    1024 more steps (0.00098/step) passed; with the counts known the check is exact."""
    from fp8tower.trace.attribute import OpRow
    from fp8tower.trace.expect import check_expected

    d = 1024
    lps = (2 * d + 1) / d
    row = OpRow("op", "op", None, None, [], 1.0, lps, 0.1, None, {"gemm_kernel": lps},
                kernel_more={"gemm_kernel": 2 * d + 1}, steps_diff=d)
    assert not row.integral
    assert OpRow("op", "op", None, None, [], 1.0, lps, 0.1, None, {}).integral  # no counts
    whole = OpRow("op", "op", None, None, [], 1.0, 2.0, 0.1, None, {"gemm_kernel": 2.0},
                  kernel_more={"gemm_kernel": 2 * d}, steps_diff=d)
    assert whole.integral

    from types import SimpleNamespace

    _M = SimpleNamespace(meta={"expected_launches": [{"label": "op", "modules": 2,
                                                      "kernel_regex": "gemm"}]})

    assert check_expected(_M, [whole], (2, 2 + d))[0].ok
    (bad,) = check_expected(_M, [row], (2, 2 + d))
    assert not bad.ok and bad.observed == pytest.approx(lps)
