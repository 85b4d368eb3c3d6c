"""benchmarks/bench_override.py's arms on the CPU (the benchmark itself needs a GPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fp8tower.formats import Scheme
from fp8tower.problem import GemmProblem

_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location("bench_override", _DIR / "bench_override.py")
bench = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(_DIR))
sys.modules["bench_override"] = bench  # its dataclass looks its module up there
_spec.loader.exec_module(bench)


def test_an_arm_is_cached_or_keys_the_triton_backend_reads():
    assert bench.parse_arm("cached") == bench.Arm(())
    assert bench.parse_arm("prequant=false") == bench.Arm((({"prequant": False}, None),))
    assert bench.parse_arm("split_k=2;pdl=True;prefetch=0").parts[0][0] == {
        "split_k": 2, "pdl": True, "prefetch": 0}
    scoped = bench.parse_arm("num_stages=3;block_k=512@5120x6144+16384x5120")
    assert scoped == bench.Arm((({"num_stages": 3, "block_k": 512},
                                 frozenset({(5120, 6144), (16384, 5120)})),))
    pair = bench.parse_arm("block_n=128;num_warps=8@16384x5120|num_stages=5@5120x6144")
    assert pair.parts == (({"block_n": 128, "num_warps": 8}, frozenset({(16384, 5120)})),
                          ({"num_stages": 5}, frozenset({(5120, 6144)})))
    assert pair.shapes == {(16384, 5120), (5120, 6144)}


@pytest.mark.parametrize(("arm", "named"), [("acc_split=2", "'acc_split=2'"),
                                            ("split_k", "'split_k'"),
                                            ("split_k=two", "split_k='two'"),
                                            ("split_k=--1", "split_k='--1'"),
                                            ("cached", "names an arm twice"),
                                            ("num_stages=3@5120", "'5120' is not a shape"),
                                            ("num_stages=3@0x6144", "'0x6144' is not a shape"),
                                            ("num_stages=3@5120x6144+", "'' is not a shape"),
                                            ("num_stages=3@4096x4096",
                                             "has no GEMM 4096x4096 (it has 5120x6144"),
                                            ("num_stages=3@5120x6144|pdl",
                                             "'pdl' is not KEY=VALUE")])
def test_a_key_the_backend_would_ignore_or_a_bad_value_is_refused_by_name(arm, named):
    """An unknown key would be passed through and ignored by the backend: two arms timing the
    same config (so would an arm named twice). Refused before anything runs, naming it."""
    with pytest.raises(SystemExit) as e:
        bench.main(["--arms", f"cached,{arm}", "--json", "unused.json"])
    assert named in str(e.value)


def test_the_arm_applies_to_cached_triton_choices_only(monkeypatch):
    from fp8tower.tuning import search

    cached = {"block_k": 512, "split_k": 1, "prequant": True, "pdl": True, "prefetch": 1}
    monkeypatch.setattr(search, "native_config", lambda b, p, c: (True, dict(cached)))
    monkeypatch.setitem(bench._ARM, "value", bench.parse_arm("prequant=false"))
    bench.patch_dispatch()
    p = GemmProblem(1, 5120, 6144, Scheme.PER_TENSOR)
    other = GemmProblem(1, 16384, 5120, Scheme.PER_TENSOR)
    triton = SimpleNamespace(name="triton")
    assert search.native_config(triton, p, None)[1] == {**cached, "prequant": False}
    assert search.native_config(SimpleNamespace(name="cutlass"), p, None)[1] == cached
    monkeypatch.setitem(bench._ARM, "value", bench.parse_arm("num_stages=3@5120x6144"))
    assert search.native_config(triton, p, None)[1] == {**cached, "num_stages": 3}
    assert search.native_config(triton, other, None)[1] == cached  # not its shape
    monkeypatch.setitem(bench._ARM, "value",
                        bench.parse_arm("num_stages=3@5120x6144|block_n=128@16384x5120"))
    assert search.native_config(triton, p, None)[1] == {**cached, "num_stages": 3}
    assert search.native_config(triton, other, None)[1] == {**cached, "block_n": 128}
    monkeypatch.setitem(bench._ARM, "value", bench.Arm())
    assert search.native_config(triton, p, None)[1] == cached
