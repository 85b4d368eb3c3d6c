"""benchmarks/bench_knob.py's arms on the CPU (the benchmark itself needs a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fp8tower.formats import Scheme
from fp8tower.problem import GemmProblem

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_knob.py"
_spec = importlib.util.spec_from_file_location("bench_knob", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_prefetch_all_is_the_programs_k_range_rounded_up_to_a_power_of_two():
    cfg = {"block_k": 256, "split_k": 1}
    p = GemmProblem(1, 16384, 5120, Scheme.PER_TENSOR)
    assert bench.depth_of("all", p, cfg) == 32  # 20 tiles: the kernel's prefetch shape needs 2^n
    assert bench.depth_of("all", GemmProblem(1, 5120, 6144, Scheme.PER_TENSOR),
                          {"block_k": 256, "split_k": 3}) == 8  # 24 tiles over 3 splits
    assert bench.depth_of("4", p, cfg) == 4 and bench.depth_of("0", p, cfg) == 0


def test_an_arms_settings_reach_the_cached_config():
    p = GemmProblem(1, 5120, 6144, Scheme.BLOCK128)
    cfg = {"block_k": 256, "split_k": 3, "pdl": True, "prefetch": 1}
    assert bench.knobbed(bench.parse_arm("cached"), p, cfg) is cfg
    assert bench.knobbed(bench.parse_arm("k_rot"), p, cfg) == {**cfg, "k_rot": True}
    assert bench.knobbed(bench.parse_arm("k_rot+prefetch=all"), p, cfg) == {
        **cfg, "k_rot": True, "prefetch": 8}
    no_pdl = {"block_k": 256, "split_k": 3}  # a prefetch needs PDL's wait: left alone
    assert bench.knobbed(bench.parse_arm("prefetch=4"), p, no_pdl) == no_pdl


@pytest.mark.parametrize("bad", ["prefetch=3", "prefetch=x", "prefetch=-1", "k_rot=1", "rot"])
def test_a_setting_the_kernel_cannot_take_is_refused_by_name(bad):
    with pytest.raises(SystemExit) as e:
        bench.main(["--arms", f"cached,{bad}", "--json", "unused.json"])
    assert repr(bad.split("+")[0]) in str(e.value) and "power of two" in str(e.value)
