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
