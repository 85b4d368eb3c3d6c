"""Inputs the analysis must refuse or show as they are: kernels of several devices in one
trace, duplicated kernel events, arms of different models, markup in names, CSV widths, the
overlap note's noise floor, failed launch checks in every command's exit code.

Each case is a committed trace (tests/data/trace) with a small gzip+json edit."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from trace_helpers import DATA, edit_trace
from typer.testing import CliRunner

from fp8tower.cli.trace import app
from fp8tower.trace import TraceError, load_trace
from fp8tower.trace.arm import load_arm
from fp8tower.trace.attribute import UNATTRIBUTED, attribute
from fp8tower.trace.compare import compare
from fp8tower.trace.synth import KernelSpec, write_torch_trace
from fp8tower.trace.tables import attribution_table

H200 = DATA / "h200_27b_m1"
VLLM_MAP = DATA / "vllm_map.json"


def run(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def _kernels(events):
    return [e for e in events if e.get("cat") == "kernel"]


def _second_gpu(with_device_arg: bool = True):
    """Every kernel again on GPU 1 (pid 1, args.device 1), 0.5 us later, new correlation ids:
    the trace of two ranks in one file."""

    def fn(events):
        copies = []
        for e in _kernels(events):
            c = json.loads(json.dumps(e))
            c["pid"], c["ts"] = 1, e["ts"] + 0.5
            c["args"]["correlation"] += 1_000_000
            if with_device_arg:
                c["args"]["device"] = 1
            else:
                del c["args"]["device"]
            copies.append(c)
        return events + copies

    return fn


def _vllm_pair(tmp_path, fn, json_path=False):
    paths = [
        edit_trace(DATA / f"vllm_{n}.json.gz", tmp_path / f"vllm_{n}.json.gz", fn,
                   json_path=json_path)
        for n in (2, 6)
    ]
    return ",".join(str(p) for p in paths)


# -- 1: one device per trace ----------------------------------------------------------------


@pytest.mark.parametrize("json_path", [False, True])
@pytest.mark.parametrize("with_device_arg", [True, False])
def test_kernels_of_two_devices_are_refused(tmp_path, json_path, with_device_arg):
    src = DATA / "vllm_6.json.gz"
    path = edit_trace(src, tmp_path / "t.json.gz", _second_gpu(with_device_arg),
                      json_path=json_path)
    n = len(load_trace(src).kernels)
    with pytest.raises(
        TraceError,
        match=rf"holds kernels of 2 devices \(device 0: {n} kernels, device 1: {n} kernels\): "
        r"capture one rank/GPU per trace",
    ):
        load_trace(path)


def test_two_device_arm_exits_2(tmp_path):
    arm = _vllm_pair(tmp_path, _second_gpu())
    r = run("attribute", arm, "--steps", 2, 6, "--map", VLLM_MAP)
    assert r.exit_code == 2 and "holds kernels of 2 devices" in r.output


def test_device_arg_and_pid_of_one_gpu_agree(tmp_path):
    """Kernels that name their device only by pid are the same GPU as those with args.device."""

    def fn(events):
        for e in _kernels(events)[::2]:
            del e["args"]["device"]
        return events

    t = load_trace(edit_trace(DATA / "vllm_6.json.gz", tmp_path / "t.json.gz", fn))
    assert len(t.kernels) == len(load_trace(DATA / "vllm_6.json.gz").kernels)


def test_a_cpu_analysis_ignores_the_kernels_devices(tmp_path):
    op = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 4242,
        "tid": 4242,
        "ts": 5136607152000.0,
        "dur": 5.0,
    }
    path = edit_trace(
        DATA / "vllm_6.json.gz", tmp_path / "t.json.gz", lambda ev: _second_gpu()(ev) + [op]
    )
    with pytest.raises(TraceError, match="2 devices"):
        load_trace(path, "cuda")
    assert load_trace(path, "cpu").is_cpu


# -- 2: duplicated kernel events ------------------------------------------------------------


@pytest.mark.parametrize("json_path", [False, True])
def test_a_duplicated_kernel_event_is_refused(tmp_path, json_path):
    def fn(events):
        i = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
        return events[: i + 1] + [events[i]] + events[i + 1 :]

    path = edit_trace(DATA / "vllm_6.json.gz", tmp_path / "t.json.gz", fn, json_path=json_path)
    with pytest.raises(
        TraceError,
        match=r"1 kernel event\(s\) repeat.*'void \(anonymous "
        r"namespace\)::rms_norm_kernel.* at ts 5136607152100\.403 us",
    ):
        load_trace(path)


def test_a_trace_concatenated_twice_is_refused(tmp_path):
    path = edit_trace(DATA / "vllm_6.json.gz", tmp_path / "t.json.gz", lambda ev: ev + ev)
    n = len(load_trace(DATA / "vllm_6.json.gz").kernels)
    with pytest.raises(TraceError, match=rf"{n} kernel event\(s\) repeat"):
        load_trace(path)
    arm = _vllm_pair(tmp_path, lambda ev: ev + ev)
    r = run("attribute", arm, "--steps", 2, 6, "--map", VLLM_MAP)
    assert r.exit_code == 2 and "repeat" in r.output


@pytest.mark.parametrize(
    "path",
    [
        "old_2.json.gz",
        "vllm_6.json.gz",
        "arm_merged/trace_6.json.gz",
        "arm_unmerged/trace_6.json.gz",
        "h200_27b_m1/merged_triton/trace_136.json.gz",
        "h200_27b_m1/unmerged_cublaslt/trace_136.json.gz",
    ],
)
def test_committed_traces_pass_both_checks(path):
    assert len(load_trace(DATA / path).kernels)


# -- 3: arms of one model -------------------------------------------------------------------


def test_arms_of_different_models_are_refused():
    a = attribute(load_arm(H200 / "merged_triton"))
    b = attribute(load_arm(DATA / "arm_unmerged"))
    with pytest.raises(
        TraceError, match="merged is qwen3.5-27b at M = 1, unmerged is tiny-gdn-2l at M = 1"
    ):
        compare(a, b)
    r = run("compare", H200 / "merged_triton", DATA / "arm_unmerged")
    assert r.exit_code == 2 and "different models" in r.output


def test_arms_of_different_m_are_refused(tmp_path):
    arm = shutil.copytree(DATA / "arm_merged", tmp_path / "m2")
    man = json.loads((arm / "manifest.json").read_text())
    man["m"] = 2
    (arm / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(TraceError, match="tiny-gdn-2l at M = 2, unmerged is tiny-gdn-2l at M = 1"):
        compare(attribute(load_arm(arm)), attribute(load_arm(DATA / "arm_unmerged")))


def test_html_shows_each_arms_steps(tmp_path):
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    from fp8tower.trace.report import write_html

    (tmp_path / "map.json").write_text(json.dumps({"rules": [{"match": "nvjet", "label": "g"}]}))
    step = [KernelSpec("nvjet_gemm", 50.0, (132, 1, 1)), KernelSpec("rms_norm", 3.0, (1, 1, 1))]
    atts = []
    for name, steps in (("a", (2, 6)), ("b", (3, 7))):
        paths = [write_torch_trace(tmp_path / f"{name}{n}.json.gz", n, step) for n in steps]
        spec = ",".join(str(p) for p in paths)
        atts.append(
            attribute(load_arm(spec, map_path=tmp_path / "map.json", steps=steps, name=name))
        )
    text = write_html(tmp_path / "r.html", atts, compare(*atts)).read_text()
    assert "(a: 2 and 6 steps; b: 3 and 7 steps)" in text
    text = write_html(tmp_path / "r.html", atts[:1]).read_text()
    assert "(2 and 6 steps)" in text


# -- 4: markup in names ---------------------------------------------------------------------


def _renamed(tmp_path, src, name, backend=None):
    arm = shutil.copytree(src, tmp_path / name.replace("/", "_"))
    man = json.loads((arm / "manifest.json").read_text())
    man["arm"] = name
    for op in man["ops"]:
        op["backend"] = backend or op["backend"]
    (arm / "manifest.json").write_text(json.dumps(man))
    return arm


def test_brackets_in_arm_names_print_as_written(tmp_path):
    a = _renamed(tmp_path, DATA / "arm_merged", "merged[/]")
    b = _renamed(tmp_path, DATA / "arm_unmerged", "merged[triton]")
    r = run("compare", a, b)
    assert r.exit_code == 0, r.output
    assert "merged[/]" in r.output and "merged[triton]" in r.output
    r = run("attribute", _renamed(tmp_path, DATA / "arm_merged", "x", backend="cub[lt]"))
    assert r.exit_code == 0 and "cub[lt]" in r.output


# -- 5: CSV rows as wide as the header ------------------------------------------------------


def test_attribution_csv_rows_are_as_wide_as_the_header(tmp_path):
    vllm = f"{DATA / 'vllm_2.json.gz'},{DATA / 'vllm_6.json.gz'}"
    att = attribute(load_arm(vllm, map_path=VLLM_MAP, steps=(2, 6)))
    header, rows = attribution_table(att)
    assert any(r[2] == UNATTRIBUTED for r in rows)
    assert {len(r) for r in rows} == {len(header)}
    out = tmp_path / "a.csv"
    assert run("attribute", vllm, "--steps", 2, 6, "--map", VLLM_MAP, "--csv", out).exit_code == 0
    with open(out, newline="") as f:
        assert {len(r) for r in csv.reader(f)} == {len(header)}


# -- 6: the overlap note's noise floor ------------------------------------------------------


def test_no_overlap_note_for_timestamp_jitter():
    att = attribute(load_arm(H200 / "merged_triton"))
    assert not [n for n in att.notes if "overlapped" in n]


# -- 7: failed launch checks fail every command ---------------------------------------------


def _failing_check(tmp_path):
    """arm_merged asking for an impossible share of attributed kernel time."""
    arm = _renamed(tmp_path, DATA / "arm_merged", "checked")
    man = json.loads((arm / "manifest.json").read_text())
    man["meta"] = {"min_attributed_share": 2.0}
    (arm / "manifest.json").write_text(json.dumps(man))
    return arm


def test_failed_launch_check_is_shown_and_fails_attribute(tmp_path):
    arm = _failing_check(tmp_path)
    att = attribute(load_arm(arm))
    assert att.failed and not att.mismatches
    assert not attribute(load_arm(DATA / "arm_merged")).failed
    assert run("attribute", arm).exit_code == 1
    r = run("compare", arm, DATA / "arm_unmerged")
    assert "[FAILED]" in r.output


@pytest.mark.parametrize("command", ["compare", "report"])
def test_failed_launch_check_fails_compare_and_report(tmp_path, command):
    arm = _failing_check(tmp_path)
    extra = ["--html", tmp_path / "r.html"] if command == "report" else []
    r = run(command, arm, DATA / "arm_unmerged", *extra)
    assert r.exit_code == 1, r.output
