"""benchmarks/fit_fixed_cost.py on synthetic bench_gemm results (no GPU)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_fixed_cost.py"
_spec = importlib.util.spec_from_file_location("fit_fixed_cost", _PATH)
fit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fit)


def _result(ks, body_gbs=4000.0, fixed_us=2.5, n=5120, noise=()):
    rows = []
    for i, k in enumerate(ks):
        nbytes = n * k
        us = nbytes / body_gbs / 1e3 + fixed_us + (noise[i] if noise else 0.0)
        rows.append({"scheme": "per_tensor", "n": n, "k": k, "m": 1, "backend": "auto",
                     "bytes": nbytes, "us": us})
    rows.append({"scheme": "per_tensor", "n": n, "k": ks[0], "m": 1, "backend": "x",
                 "skipped": "not here"})  # rows without a time are left out
    return {"read_ceiling_gbs": 5000.0, "rows": rows}


def test_recovers_body_and_fixed_cost():
    (f,) = fit.fits(_result([3072, 6144, 12288, 24576]), "k")
    assert f["body_gbs"] == 4000 and f["body_pct_ceiling"] == 80.0
    assert f["fixed_us"] == pytest.approx(2.5) and f["worst_residual_us"] == pytest.approx(0)
    assert f["n"] == 5120 and f["k"] == [3072, 6144, 12288, 24576]


def test_residual_shows_a_bend():
    (f,) = fit.fits(_result([3072, 6144, 12288], noise=(0.0, 1.0, 0.0)), "k")
    assert f["worst_residual_us"] > 0.4


def test_too_few_sizes_fit_nothing(tmp_path, capsys):
    assert fit.fits(_result([3072, 6144]), "k") == []
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_result([3072, 6144])))
    with pytest.raises(SystemExit, match="no arm has 3 or more sizes of K at one N"):
        fit.main([str(path)])
    path.write_text(json.dumps(_result([3072, 6144, 12288])))
    fit.main([str(path), "--vary", "k"])
    assert "fixed 2.5 us" in capsys.readouterr().out


def test_one_size_is_refused():
    with pytest.raises(ValueError, match="same size"):
        fit.fit_line([1.0, 1.0], [2.0, 3.0])


def test_flat_times_have_no_body_rate():
    result = _result([3072, 6144, 12288])
    for r in result["rows"]:
        if "us" in r:
            r["us"] = 5.0
    (f,) = fit.fits(result, "k")
    assert f["body_gbs"] is None and f["body_pct_ceiling"] is None and f["fixed_us"] == 5.0


def test_bad_files_are_named(tmp_path):
    with pytest.raises(SystemExit, match="cannot read it as JSON"):
        fit.main([str(tmp_path / "missing.json")])
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="not a benchmarks/bench_gemm.py result.*read_ceiling"):
        fit.main([str(path)])
