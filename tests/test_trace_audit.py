"""The trace tool, an audit of its inputs and messages: each test fails on the code before it.

Inputs are small edits of the committed traces (tests/data/trace), written to tmp_path.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8tower.cli import app
from fp8tower.trace.chrome import load_chrome
from fp8tower.trace.diff import diff_traces
from fp8tower.trace.errors import TraceError
from fp8tower.trace.launches import load_launch_calls
from fp8tower.trace.manifest import read_manifest
from fp8tower.trace.mapfile import read_map

DATA = Path(__file__).parent / "data" / "trace"
ARM = DATA / "arm_merged"
S, L = ARM / "trace_2.json.gz", ARM / "trace_6.json.gz"
VLLM = f"{DATA / 'vllm_2.json.gz'},{DATA / 'vllm_6.json.gz'}"
VLLM_MAP = DATA / "vllm_map.json"


def run(*args):
    r = CliRunner().invoke(app, ["trace", *(str(a) for a in args)])
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r


def events_of(src: Path) -> dict:
    return json.loads(gzip.decompress(src.read_bytes()))


def write_trace(dst: Path, doc: dict, *, json_path: bool = False) -> Path:
    """``doc`` as JSON; ``json_path``: every event's keys reversed, so the fast scan gives up
    and json.load reads the file."""
    if json_path:
        doc = dict(doc, traceEvents=[dict(reversed(e.items())) for e in doc["traceEvents"]])
    dst.write_text(json.dumps(doc))
    return dst


def edit_first(src: Path, dst: Path, cat: str, key: str, value, *, json_path=False) -> Path:
    doc = events_of(src)
    ev = next(e for e in doc["traceEvents"] if e.get("cat") == cat)
    ev[key] = value
    return write_trace(dst, doc, json_path=json_path)


def one_error_line(r) -> str:
    assert r.exit_code == 2, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.output
    return errors[0]


# -- 1. a kernel's pid / tid that is a list or an object --------------------------------------


@pytest.mark.parametrize("json_path", [False, True], ids=["fast", "json"])
@pytest.mark.parametrize("key, value", [
    ("pid", [0]), ("pid", [0, 1]), ("pid", {"x": 1}), ("tid", [7, 1]), ("tid", {"x": 1}),
], ids=["pid-list1", "pid-list2", "pid-object", "tid-list2", "tid-object"])
def test_kernel_pid_or_tid_not_a_scalar_is_one_error_line(tmp_path, key, value, json_path):
    """Was TypeError: unhashable type (a traceback), or silently read as a device "[0]"."""
    short = edit_first(S, tmp_path / "s.json", "kernel", key, value, json_path=json_path)
    with pytest.raises(TraceError, match=rf"event #\d+ \('void .*'\): '{key}' must be"):
        load_chrome(short)
    line = one_error_line(run("diff", short, L, "--steps", 2, 6))
    assert f"'{key}'" in line and str(short) in line


# -- 2. a runtime call's (or kernel's) args that is not an object -----------------------------


@pytest.mark.parametrize("json_path", [False, True], ids=["fast", "json"])
@pytest.mark.parametrize("cat, name", [("cuda_runtime", "cudaLaunchKernel"), ("kernel", "void")])
def test_args_not_an_object_is_an_error_on_both_paths(tmp_path, cat, name, json_path):
    """The fast path read the event without its args (the launch call dropped, the kernel with
    no stream, correlation or dims); the json path refused it."""
    bad = edit_first(S, tmp_path / "s.json", cat, "args", "correlation 5", json_path=json_path)
    with pytest.raises(TraceError, match=rf"\('{name}.*'args' must be an object"):
        load_chrome(bad)


def test_launch_calls_args_not_an_object(tmp_path):
    """launches.py's json.load path: AttributeError 'str' object has no attribute 'get'."""
    bad = edit_first(S, tmp_path / "s.json", "cuda_runtime", "args", "x", json_path=True)
    trace = dataclasses.replace(load_chrome(S), path=str(bad))
    with pytest.raises(TraceError, match=r"cudaLaunchKernel.*'args' must be an object"):
        load_launch_calls(trace)


# -- 3. report has --other-m, as compare ------------------------------------------------------


def test_report_other_m(tmp_path):
    """report's error hinted at --other-m, an option report did not have."""
    a, b = tmp_path / "m1", tmp_path / "m4"
    shutil.copytree(ARM, a)
    shutil.copytree(ARM, b)
    manifest = json.loads((b / "manifest.json").read_text())
    (b / "manifest.json").write_text(json.dumps(dict(manifest, m=4)))
    r = run("report", a, b, "--html", tmp_path / "r.html")
    assert r.exit_code == 2 and "--other-m" in one_error_line(r)
    r = run("report", a, b, "--other-m", "--html", tmp_path / "r.html")
    assert r.exit_code == 0, r.output


# -- 4. one label in two groups ---------------------------------------------------------------


def _two_group_map(tmp_path) -> Path:
    rules = json.loads(VLLM_MAP.read_text())["rules"]
    rules.insert(1, dict(rules[1], match="^rms_norm", group="gdn.norm"))  # label gdn.out_proj
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"rules": rules}))
    return path


def test_map_label_in_two_groups_is_refused(tmp_path):
    """All of the label's time went to the group of its first rule: a false lever."""
    bad = _two_group_map(tmp_path)
    with pytest.raises(TraceError, match=r"'gdn.out_proj'.*'gdn.norm'.*'gdn.out_proj'"):
        read_map(bad)
    line = one_error_line(run("attribute", VLLM, "--map", bad, "--steps", 2, 6))
    assert "gdn.out_proj" in line and "gdn.norm" in line and str(bad) in line


def test_manifest_label_in_two_groups_is_refused(tmp_path):
    arm = tmp_path / "arm"
    shutil.copytree(ARM, arm)
    manifest = json.loads((arm / "manifest.json").read_text())
    manifest["ops"][2]["group"] = "gdn.in_proj_b"
    (arm / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TraceError, match=r"'gdn.in_proj_qkvz'.*'gdn.in_proj'.*'gdn.in_proj_b'"):
        read_manifest(arm)


# -- 5. the same-capture warning --------------------------------------------------------------


def test_same_traces_under_two_maps_do_not_warn(tmp_path):
    other = tmp_path / "map.json"
    rules = json.loads(VLLM_MAP.read_text())["rules"]
    other.write_text(json.dumps({"rules": [dict(r, group="all") for r in rules]}))
    args = ("compare", VLLM, VLLM, "--steps", 2, 6, "--map-a", VLLM_MAP)
    r = run(*args, "--map-b", other)
    assert r.exit_code == 0 and "same capture" not in r.output, r.output
    r = run(*args, "--map-b", VLLM_MAP)
    assert r.exit_code == 0 and "same capture" in r.output, r.output


def test_report_of_a_capture_with_itself_warns(tmp_path):
    r = run("report", ARM, ARM, "--html", tmp_path / "r.html")
    assert r.exit_code == 0 and "same capture" in r.output, r.output


# -- 6. the fractional-count error names the arm ----------------------------------------------


def test_fractional_error_names_the_arm(tmp_path):
    doc = events_of(DATA / "vllm_6.json.gz")
    evs = doc["traceEvents"]
    drop = max(i for i, e in enumerate(evs) if e.get("cat") == "kernel"
               and e["name"].startswith("nvjet"))
    doc["traceEvents"] = evs[:drop] + evs[drop + 1:]
    long = write_trace(tmp_path / "lost_6.json", doc)
    bad = f"{DATA / 'vllm_2.json.gz'},{long}"
    for cmd in (("compare", VLLM, bad), ("report", bad, "--html", tmp_path / "r.html")):
        line = one_error_line(run(*cmd, "--steps", 2, 6, "--map-a", VLLM_MAP,
                                  *(("--map-b", VLLM_MAP) if cmd[0] == "compare" else ())))
        assert "arm lost_6" in line and str(long) in line and "not integers" in line


# -- 7. two JSON documents in one file --------------------------------------------------------


def _texts() -> tuple[bytes, bytes]:
    return gzip.decompress(S.read_bytes()), gzip.decompress(L.read_bytes())


def _as_list(text: bytes) -> bytes:
    return json.dumps(json.loads(text)["traceEvents"]).encode()


@pytest.mark.parametrize("first", ["object", "list"])
@pytest.mark.parametrize("second", ["object", "list"])
@pytest.mark.parametrize("sep", [b"", b"\n"], ids=["adjacent", "newline"])
def test_two_documents_in_one_file_are_refused(tmp_path, first, second, sep):
    """Read as one trace (the kernels of both); json.load says 'Extra data'."""
    a, b = _texts()
    a = a if first == "object" else _as_list(a)
    b = b if second == "object" else _as_list(b)
    path = tmp_path / "two.json"
    path.write_bytes(a.rstrip() + sep + b)
    with pytest.raises(TraceError, match="Extra data"):
        load_chrome(path)
    assert "Extra data" in one_error_line(run("diff", path, L, "--steps", 2, 6))


def test_an_object_document_must_close(tmp_path):
    """`{"traceEvents": [...]` (the last brace cut off) was read as a bare event list."""
    text = json.dumps({"traceEvents": events_of(S)["traceEvents"]})
    path = tmp_path / "open.json"
    path.write_text(text[:-1])
    with pytest.raises(TraceError, match="does not close"):
        load_chrome(path)


# -- 8. SHORT and LONG of different shapes ----------------------------------------------------


def test_short_and_long_of_different_shapes_warn(tmp_path):
    """A SHORT of another M (its GEMM's grid differs) was diffed against LONG silently."""
    doc = events_of(S)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "cutlass" in e["name"]:
            e["args"]["grid"] = [4, 1, 1]
    short = write_trace(tmp_path / "m4_2.json", doc)
    result = diff_traces(load_chrome(short), load_chrome(L), (2, 6))
    (warning,) = [w for w in result.warnings if "never ran in LONG" in w]
    assert "cutlass::device_kernel" in warning and "grid [4, 1, 1]" in warning
    r = run("diff", short, L, "--steps", 2, 6)
    assert r.exit_code == 0 and "never ran in LONG" in r.output, r.output


@pytest.mark.parametrize("pair", ["arm_merged", "arm_unmerged", "vllm", "old"])
def test_committed_pairs_have_one_shape(pair):
    short, long = (
        (DATA / pair / "trace_2.json.gz", DATA / pair / "trace_6.json.gz")
        if pair.startswith("arm") else (DATA / f"{pair}_2.json.gz", DATA / f"{pair}_6.json.gz")
    )
    result = diff_traces(load_chrome(short), load_chrome(long), (2, 6))
    assert not [w for w in result.warnings if "never ran in LONG" in w]


def test_a_close_open_inside_a_string_is_still_read(tmp_path):
    """The two-documents check sends such a file to json.load, which reads it whole."""
    doc = events_of(S)
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["name"] = "k<{x}{y}>"
    trace = load_chrome(write_trace(tmp_path / "s.json", doc))
    assert "k<{x}{y}>" in trace.kernels.names and len(trace.kernels) == len(load_chrome(S).kernels)
