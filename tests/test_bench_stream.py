"""benchmarks/bench_stream.py's cluster arms on the CPU: which config each arm times."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from fp8tower.problem import GemmProblem

_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_DIR))  # bench_stream imports bench_chain and bench_gemm
_spec = importlib.util.spec_from_file_location("bench_stream", _DIR / "bench_stream.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _p(n, k, m=1, scheme="per_tensor"):
    return GemmProblem(m, n, k, scheme, capability=(9, 0), static_act_scale=scheme == "per_tensor")


def test_cluster_arms():
    arms = {a: bench.config_of(a, _p(1024, 5120)) for a in bench.CLUSTER_ARMS}
    assert arms["stream_cluster"] == {"stages": 4, "pdl": True, "cluster": 8}  # 6 stages + 7 x 4 KB: no
    assert arms["stream_cluster_small"] == {"stages": 6, "pdl": True, "cluster": 4}
    assert arms["stream_cluster_s4"] is None  # the same as stream_cluster
    assert arms["stream_cluster_fp8x"] == arms["stream_cluster"]
    assert arms["stream_cluster_xq"] == {"stages": 4, "pdl": True, "cluster": 8, "xq": True}
    # 5120x6144: clusters of 2 only; xq's 12 K steps of x leave room for 4 stages
    assert bench.config_of("stream_cluster", _p(5120, 6144)) == {"stages": 6, "pdl": True, "cluster": 2}
    assert bench.config_of("stream_cluster_xq", _p(5120, 6144)) == {"stages": 4, "pdl": True, "cluster": 2,
                                                                    "xq": True}
    assert bench.config_of("stream_cluster_small", _p(5120, 6144)) is None
    # no cluster split where the tiles fill the SMs; no xq for block128
    assert bench.config_of("stream_cluster", _p(16384, 5120)) is None
    assert bench.config_of("stream_cluster_xq", _p(1024, 5120, scheme="block128")) is None
    assert bench.config_of("stream_cluster", _p(1024, 5120, scheme="block128")) is not None
