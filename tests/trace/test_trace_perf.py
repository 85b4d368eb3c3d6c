"""Ingest speed: the 8+136-step pair of a 208-GEMM tower (~85k kernel events, ~75 MB of JSON)
must ingest and diff faster than the standard library's json.loads parses the long trace
alone (measured on the 2-core CPU box: 0.35 s in 2026-11-29, benchmarks/results/
trace_ingest_cpu.json, with json.load of the pair ~1.0 s). Relative, timed alternately: a
fixed 1.5 s budget failed a CI run whose machine was shared, which says nothing about our
code."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from fp8tower.trace import diff_traces, load_trace
from fp8tower.trace.synth import tower_kernels, write_torch_trace


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("pair")
    specs = tower_kernels()
    return (
        write_torch_trace(d / "s.json.gz", 8, specs, seed=8),
        write_torch_trace(d / "l.json.gz", 136, specs, seed=136),
        len(specs),
    )


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def test_85k_pair_ingest_and_diff_faster_than_json_parses_one_trace(pair):
    short, long, per_step = pair
    raw = gzip.decompress(Path(long).read_bytes())
    ours, parse = float("inf"), float("inf")
    for _ in range(3):  # best of 3 each, alternated: a noisy neighbour slows both alike
        ours = min(ours, _timed(lambda: diff_traces(load_trace(short), load_trace(long),
                                                    (8, 136))))
        parse = min(parse, _timed(lambda: json.loads(raw)))
    d = diff_traces(load_trace(short), load_trace(long), (8, 136))
    assert d.integral and d.launches_per_step == pytest.approx(per_step)
    assert per_step * 144 > 84_000
    assert ours < parse, (f"ingest+diff of the 85k pair took {ours:.2f} s, json.loads of the "
                          f"long trace alone {parse:.2f} s")
