"""`fp8tower trace` commands: outputs, exit codes, messages without tracebacks."""

from __future__ import annotations

import json
import shutil
import sys
import types

import pytest
from trace_helpers import DATA, STEP
from typer.testing import CliRunner

from fp8tower.cli.trace import app
from fp8tower.trace.synth import write_torch_trace

runner = CliRunner()
UNMERGED, MERGED = str(DATA / "arm_unmerged"), str(DATA / "arm_merged")
VLLM = f"{DATA / 'vllm_2.json.gz'},{DATA / 'vllm_6.json.gz'}"


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def test_help_texts():
    out = run("--help").output
    for cmd in ("diff", "attribute", "compare", "report", "capture"):
        assert cmd in out
    out = run("diff", "--help").output
    assert "--steps" in out and "--allow-fractional" in out and "--json" in out
    assert "SHORT,LONG" in run("attribute", "--help").output
    assert "unmerged" in run("capture", "--help").output


def test_diff_json(tmp_path):
    out = tmp_path / "d.json"
    r = run(
        "diff",
        DATA / "old_2.json.gz",
        DATA / "old_6.json.gz",
        "--steps",
        2,
        6,
        "--json",
        out,
        "--csv",
        tmp_path / "d.csv",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["steps"] == {"short": 2, "long": 6} and doc["integral"] is True
    assert doc["total"]["launches_per_step"] == pytest.approx(8)
    assert (tmp_path / "d.csv").read_text().startswith("device,kernel,")


def _fractional_pair(tmp_path):
    """A long trace that lost one kernel event (a dropped buffer, graph-level tracing)."""
    short = write_torch_trace(tmp_path / "s.json.gz", 2, STEP, seed=1)
    doc = json.loads(write_torch_trace(tmp_path / "l.json", 6, STEP, seed=2).read_text())
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    del doc["traceEvents"][i]
    (tmp_path / "l.json").write_text(json.dumps(doc))
    return short, tmp_path / "l.json"


def test_fractional_launches_exit_2(tmp_path):
    short, long = _fractional_pair(tmp_path)
    r = run("diff", short, long, "--steps", 2, 6)
    assert r.exit_code == 2
    assert "not integers" in r.output and "--allow-fractional" in r.output
    r = run(
        "diff", short, long, "--steps", 2, 6, "--allow-fractional", "--json", tmp_path / "f.json"
    )
    assert r.exit_code == 0 and "warning" in r.output
    assert json.loads((tmp_path / "f.json").read_text())["integral"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("diff", "missing.json", "missing2.json"), "missing.json: no such file"),
        (("diff", DATA / "vllm_map.json", DATA / "old_6.json.gz"), "not a Chrome trace"),
        (("diff", DATA / "old_2.json.gz", DATA / "old_6.json.gz", "--steps", 6, 2), "SHORT < LONG"),
        (("attribute", "nowhere"), "capture directory or SHORT,LONG"),
        (("attribute", VLLM), "need --steps"),
        (("attribute", UNMERGED, "--map", DATA / "nope.toml"), "no such map file"),
        (("compare", UNMERGED, VLLM, "--steps", 2, 6), "need a map file"),
        (
            ("capture", "--model", "x", "--arm", "merged", "--out", "o", "--steps", "8"),
            "expected SHORT,LONG",
        ),
    ],
)
def test_bad_input_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_bad_option_values_exit_2():
    assert run("diff", "a", "b", "--device", "tpu").exit_code == 2
    assert run("capture", "--model", "x", "--arm", "fused", "--out", "o").exit_code == 2
    assert run("diff", "a", "b", "--steps", "eight", "136").exit_code == 2


def test_png_renamed_json(tmp_path):
    png = tmp_path / "trace.json"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)
    r = run("diff", png, png)
    assert r.exit_code == 2 and "looks like a PNG image" in r.output and str(png) in r.output


def test_attribute_outputs(tmp_path):
    r = run(
        "attribute", UNMERGED, "--json", tmp_path / "a.json", "--csv", tmp_path / "a.csv", "--gib"
    )
    assert r.exit_code == 0, r.output
    assert "GiB/s" in r.output
    assert json.loads((tmp_path / "a.json").read_text())["verify"]["ok"] is True


def test_attribute_foreign_trace_with_map():
    r = run(
        "attribute",
        VLLM,
        "--steps",
        2,
        6,
        "--map",
        DATA / "vllm_map.toml",
        "--step-range",
        "execute_model",
        "--ceiling-gbps",
        4800,
    )
    assert r.exit_code == 0, r.output
    assert "gdn.in_proj_qkvz" in r.output and "(unattributed)" in r.output
    assert "read ceiling (given)" in r.output


def test_verification_failure_exit_1(tmp_path):
    arm = tmp_path / "arm"
    shutil.copytree(DATA / "arm_unmerged", arm)
    doc = json.loads((arm / "manifest.json").read_text())
    doc["ops"][1]["backend"], doc["ops"][1]["kernel_regex"] = "triton", "^_fp8_gemm_"
    (arm / "manifest.json").write_text(json.dumps(doc))
    r = run("attribute", arm)
    assert r.exit_code == 1
    assert "backend triton expects kernels matching" in r.output
    assert "disagree" in r.output


def test_compare_and_report(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    r = run(
        "compare",
        UNMERGED,
        MERGED,
        "--json",
        tmp_path / "c.json",
        "--csv",
        tmp_path / "c.csv",
        "--html",
        tmp_path / "c.html",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["levers"][0]["group"] == "gdn.in_proj" and doc["levers"][0]["delta_ms"] > 0
    assert (tmp_path / "c.html").stat().st_size > 10_000
    r = run(
        "report", UNMERGED, MERGED, "--html", tmp_path / "r.html", "--json", tmp_path / "r.json"
    )
    assert r.exit_code == 0, r.output
    assert "Levers" in r.output and (tmp_path / "r.html").exists()
    r = run("report", UNMERGED, "--html", tmp_path / "one.html", "--csv", tmp_path / "one.csv")
    assert r.exit_code == 0 and (tmp_path / "one.csv").exists()


def test_report_to_unwritable_path(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    # a missing folder is made (session 34); a parent that is a file is refused up front
    (tmp_path / "f").write_text("x")
    r = run("report", UNMERGED, "--html", tmp_path / "f" / "r.html")
    assert r.exit_code == 2 and "is not a directory" in " ".join(r.output.split())


def test_capture_bad_scheme_is_a_clear_error():
    r = run("capture", "--model", "tiny-hybrid", "--arm", "merged", "--out", "o",
            "--scheme", "int4")
    assert r.exit_code == 2 and "unknown scheme 'int4'" in r.output


def test_capture_calls_the_tower(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # --backend triton is checked before the build
    calls = []
    mod = types.ModuleType("fp8tower.tower.capture")
    mod.capture_arm = lambda **kw: (
        calls.append(kw) or types.SimpleNamespace(directory=kw["out_dir"])
    )
    monkeypatch.setitem(sys.modules, "fp8tower.tower.capture", mod)
    r = run(
        "capture",
        "--model",
        "qwen3.5-27b",
        "--arm",
        "unmerged",
        "--backend",
        "triton",
        "--m",
        4,
        "--steps",
        "8,136",
        "--out",
        tmp_path,
        "--scheme",
        "block128",
    )
    assert r.exit_code == 0, r.output
    assert calls == [
        {
            "model": "qwen3.5-27b",
            "arm": "unmerged",
            "backend": "triton",
            "m": 4,
            "steps": (8, 136),
            "out_dir": tmp_path,
            "scheme": "block128",
            "force": False,
            "standin": "torch",
        }
    ]


def test_capture_bad_standin_is_a_clear_error():
    r = run("capture", "--model", "tiny-hybrid", "--arm", "merged", "--out", "o",
            "--standin", "fused")
    assert r.exit_code == 2 and "--standin 'fused': expected one of torch, rows" in r.output


def test_kernel_names_with_brackets_print_verbatim(tmp_path):
    from fp8tower.trace.synth import KernelSpec

    specs = [KernelSpec("k[bold]x[/bold]<[1]>", 5.0), KernelSpec("Memcpy [pinned]", 1.0)]
    s = write_torch_trace(tmp_path / "s.json", 1, specs, seed=1)
    lng = write_torch_trace(tmp_path / "l.json", 3, specs, seed=2)
    r = run("diff", s, lng, "--steps", 1, 3)
    assert r.exit_code == 0, r.output
    assert "k[bold]x[/bold]<[1]>" in r.output and "Memcpy [pinned]" in r.output


def test_report_without_its_packages_fails_before_reading_traces(tmp_path, monkeypatch):
    """Without jinja2 / matplotlib `trace report` (and `compare --html`) fail at once, naming
    the extra; before, it read and printed everything first, then wrote nothing asked."""
    read = []
    monkeypatch.setitem(sys.modules, "jinja2", None)
    import fp8tower.cli.trace as cli_trace

    monkeypatch.setattr(cli_trace, "_attribution", lambda *a, **k: read.append(1))
    r = run("report", UNMERGED, "--html", tmp_path / "r.html", "--json", tmp_path / "r.json")
    assert r.exit_code == 2 and "pip install 'fp8tower[report]'" in " ".join(r.output.split())
    assert not read and not (tmp_path / "r.json").exists()
    r = run("compare", UNMERGED, MERGED, "--html", tmp_path / "c.html")
    assert r.exit_code == 2 and "fp8tower[report]" in " ".join(r.output.split())
