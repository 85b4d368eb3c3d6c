"""benchmarks/bench_prepass_group.py's arms on the CPU (the benchmark itself needs a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_prepass_group.py"
_spec = importlib.util.spec_from_file_location("bench_prepass_group", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_groups_are_powers_of_two_the_kernel_takes():
    assert bench.parse_groups("2048,512,256") == ["2048", "512", "256"]
    assert bench.parse_groups("2048,rule") == ["2048", "rule"]


@pytest.mark.parametrize("bad", ["300", "64", "16384", "x", "-256"])
def test_a_group_the_kernel_cannot_take_is_refused_by_name(bad):
    with pytest.raises(SystemExit) as e:
        bench.main(["--groups", f"2048,{bad}", "--json", "unused.json"])
    assert repr(bad) in str(e.value) and "power of two" in str(e.value)
