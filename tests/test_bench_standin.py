"""benchmarks/bench_standin.py's arms and M ratios on the CPU (the benchmark needs a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_standin.py"
_spec = importlib.util.spec_from_file_location("bench_standin", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_an_unknown_arm_is_refused_by_name():
    with pytest.raises(SystemExit) as e:
        bench.main(["--arms", "torch,fused", "--json", "unused.json"])
    assert "'fused'" in str(e.value) and "rows" in str(e.value)


def test_each_arms_ratios_are_to_its_own_smallest_m():
    rows = [{"scheme": "per_tensor", "m": m, "arms": {"torch": {"ms": t}, "rows": {"ms": r}}}
            for m, t, r in ((32, 2.2, 2.1), (1, 2.0, 2.0), (8, 2.1, 2.02))]
    got = bench.m_ratios(rows)
    assert got == {"per_tensor": {"torch": {1: 1.0, 8: 1.05, 32: 1.1},
                                  "rows": {1: 1.0, 8: 1.01, 32: 1.05}}}


def test_rows_fp8_with_a_scheme_it_cannot_serve_is_refused_before_timing():
    """--arms torch,rows_fp8 with the default schemes crashed mid-run, at channel_token: the
    arms are checked against the schemes first (rows_fp8 quantizes with per_tensor's static
    scale, as cli._common.check_standin says), on any machine."""
    with pytest.raises(SystemExit) as e:
        bench.main(["--arms", "torch,rows_fp8", "--json", "unused.json"])
    assert "--arms rows_fp8 quantizes with per_tensor's static activation scale" in str(e.value)
    assert "--schemes per_tensor,channel_token,block128" in str(e.value)
    if not bench.torch.cuda.is_available():  # per_tensor alone passes, to the GPU check
        with pytest.raises(SystemExit, match="needs a CUDA GPU"):
            bench.main(["--arms", "torch,rows_fp8", "--schemes", "per_tensor", "--json",
                        "unused.json"])
