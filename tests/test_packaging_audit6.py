"""A non-editable install and missing or old extras (2026-12-06 audit): each test fails on the
code before it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8tower.cli import app

ARM = Path(__file__).parent / "data" / "trace" / "arm_merged"


@pytest.mark.parametrize("version,refused", [
    ("4.57.1", True), ("5.16.2", True), ("5.17.0.dev0", False), ("5.25.0", False),
    ("not-a-version", False),
])
def test_an_old_transformers_is_refused_in_one_line(monkeypatch, version, refused):
    """transformers' floor sits only in the hf extra: `pip install fp8tower` keeps an old one,
    and 4.57 refused a Qwen3.5 checkpoint with a 4.7 kB list of model types."""
    transformers = pytest.importorskip("transformers")
    from fp8tower.hf import requires

    monkeypatch.setattr(transformers, "__version__", version)
    if not refused:
        assert requires.transformers() is transformers
        return
    with pytest.raises(ImportError, match=rf"transformers {version} is older than fp8tower "
                                          r"needs \(>= 5.17\): pip install -U 'fp8tower\[hf\]'"):
        requires.transformers()


def test_the_cli_prints_an_old_transformers_in_one_line(monkeypatch, capsys):
    from fp8tower import cli

    def old():
        raise ImportError("transformers 4.57.1 is older than fp8tower needs (>= 5.17): "
                          "pip install -U 'fp8tower[hf]'", name="transformers")

    monkeypatch.setattr(cli, "app", old)
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    assert capsys.readouterr().err == ("error: transformers 4.57.1 is older than fp8tower needs "
                                       "(>= 5.17): pip install -U 'fp8tower[hf]'\n")


def test_the_offline_compiler_without_triton_says_so(monkeypatch, capsys):
    import importlib.util

    from fp8tower.kernels import offline

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else find(name, *a))
    with pytest.raises(SystemExit) as e:
        offline.main(["--shape", "256x128"])
    assert e.value.code == 2
    assert "needs triton >= 3.5: pip install 'fp8tower[triton]'" in capsys.readouterr().err


def test_trace_report_without_the_report_extra(monkeypatch, tmp_path):
    """--no-html: the tables and JSON without jinja2 / matplotlib; without it the error names
    the extra and --no-html (before: no way to get the JSON without the extra)."""
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 -> ImportError
    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["trace", "report", str(ARM), "--no-html", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["arm"] and not list(tmp_path.glob("*.html"))
    r = CliRunner().invoke(app, ["trace", "report", str(ARM), "--html", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and "fp8tower[report]" in r.output and "--no-html" in r.output


@pytest.mark.parametrize("version,expect", [
    (None, "not installed: pip install --no-deps 'nvidia-cutlass>=4.2' (the fp8tower[cutlass]"),
    ("4.1.0", "nvidia-cutlass 4.1.0 is older than the kernels need: pip install --no-deps"),
])
def test_cutlass_headers_missing_or_old(monkeypatch, version, expect):
    from fp8tower.backends import cutlass

    monkeypatch.setattr(cutlass, "cutlass_version", lambda: version)
    monkeypatch.setattr(cutlass, "cutlass_root", lambda: Path("/nonexistent"))
    assert expect in cutlass.build_unavailable()
