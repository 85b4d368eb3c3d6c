"""benchmarks/bench_prefetch_depth.py's arms on the CPU (the benchmark itself needs a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fp8tower.formats import Scheme
from fp8tower.problem import GemmProblem

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_prefetch_depth.py"
_spec = importlib.util.spec_from_file_location("bench_prefetch_depth", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_all_is_the_programs_k_range_rounded_up_to_a_power_of_two():
    cfg = {"block_k": 256, "split_k": 1}
    p = GemmProblem(1, 16384, 5120, Scheme.PER_TENSOR)
    assert bench.depth_of("all", p, cfg) == 32  # 20 tiles: the kernel's prefetch shape needs 2^n
    assert bench.depth_of("all", GemmProblem(1, 5120, 6144, Scheme.PER_TENSOR),
                          {"block_k": 256, "split_k": 3}) == 8  # 24 tiles over 3 splits
    assert bench.depth_of("4", p, cfg) == 4 and bench.depth_of("0", p, cfg) == 0


@pytest.mark.parametrize("bad", ["3", "x", "-1"])
def test_a_depth_the_kernel_cannot_take_is_refused_by_name(bad):
    with pytest.raises(SystemExit) as e:
        bench.main(["--depths", f"cached,{bad}", "--json", "unused.json"])
    assert repr(bad) in str(e.value) and "power of two" in str(e.value)


def test_only_applies_the_arms_depth_to_the_named_shapes(monkeypatch):
    """--only NxK: the arm's depth goes to the PDL Triton GEMMs of those shapes; every other
    GEMM keeps its cached config (the GEMM after a stand-in alone, session 21)."""
    from types import SimpleNamespace

    from fp8tower.tuning import search

    cached = {"block_k": 512, "split_k": 1, "pdl": True, "prefetch": 1}
    monkeypatch.setattr(search, "native_config", lambda b, p, c: (True, dict(cached)))
    monkeypatch.setattr(bench, "_ONLY", {(5120, 6144)})
    monkeypatch.setitem(bench._DEPTH, "value", "4")
    bench.patch_dispatch()
    triton = SimpleNamespace(name="triton")
    after_standin = GemmProblem(1, 5120, 6144, Scheme.PER_TENSOR)
    other = GemmProblem(1, 16384, 5120, Scheme.PER_TENSOR)
    assert search.native_config(triton, after_standin, None)[1]["prefetch"] == 4
    assert search.native_config(triton, other, None)[1] == cached


def test_a_malformed_only_is_refused_by_name():
    with pytest.raises(SystemExit) as e:
        bench.main(["--only", "5120by6144", "--json", "unused.json"])
    assert "'5120by6144'" in str(e.value) and "NxK" in str(e.value)
