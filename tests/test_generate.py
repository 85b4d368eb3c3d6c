"""`fp8tower bench generate` on the CPU: the tiny hybrid as a transformers model, reference
backend, eager steps; unavailable arms are recorded with their reason."""

import json

import pytest

pytest.importorskip("transformers")

from typer.testing import CliRunner

from fp8tower.cli import app


def test_bench_generate_tiny_hybrid_cpu(tmp_path):
    out = tmp_path / "gen.json"
    res = CliRunner().invoke(app, [
        "bench", "generate", "--model", "tiny-hybrid", "--context", "8", "--steps", "2",
        "--batch", "1", "--arms", "bf16,fp8:per_tensor,torchao:per_row", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())
    assert rec["schema"] == "fp8tower.bench.generate/1"
    assert rec["model_type"] == "qwen3_5_text" and rec["device"] == "cpu"
    assert rec["versions"]["transformers"] and rec["command"].startswith("fp8tower bench generate")
    rows = {r["arm"]: r for r in rec["rows"]}
    assert rows["bf16"]["eager_ms"] > 0 and rows["bf16"]["graph_ms"] is None
    fp8 = rows["fp8:per_tensor"]
    assert fp8["linears_swapped"] == 31 and fp8["eager_ms"] > 0 and fp8["skipped"] is None
    assert fp8["eager_speedup_vs_bf16"] > 0
    try:
        import torchao  # noqa: F401
    except ImportError:
        assert "torchao" in rows["torchao:per_row"]["skipped"]


def test_bench_generate_unknown_arm_is_one_line(tmp_path):
    res = CliRunner().invoke(app, [
        "bench", "generate", "--model", "tiny-hybrid", "--context", "4", "--steps", "1",
        "--batch", "1", "--arms", "fp9", "--json", str(tmp_path / "x.json")])
    assert res.exit_code == 2
    assert "unknown arm 'fp9'" in res.output
