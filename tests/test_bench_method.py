"""The benchmarks time as the measurement method says (DESIGN.md): findings of session 35's
audit, each test failing on the code before it. CPU only: the timers are spied on."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_bench_scripts import _load
from test_tuning import FakeClock, FakeTimer, cpu_problem, fake_backend

from fp8tower import provenance


def test_chain_timers_capture_and_time_as_the_tuner_does(monkeypatch):
    """bench_chain.time_chain (also bench_stream's and bench_variants' chains) and
    sweep_triton.time_calls captured a plain graph (no early launch, which every fp8tower graph
    gets) and synchronized after each replay (the host's launch inside the events)."""
    seen = []

    def spy(make, n_copies, **kw):
        seen.append((n_copies, kw))
        for i in range(n_copies):
            make(i)()
        return SimpleNamespace(median_us=7.0, min_us=6.0)

    ran = []
    chain = _load("bench_chain")
    monkeypatch.setattr(chain, "time_cuda_graph", spy)
    assert chain.time_chain([lambda: ran.append(1), lambda: ran.append(2)], replays=5) == 7.0
    assert ran == [1, 2] and seen[-1] == (1, {"replays": 5, "min_calls": 1})
    sweep = _load("sweep_triton")
    monkeypatch.setattr(sweep, "time_cuda_graph", spy)
    assert sweep.time_calls([lambda: None] * 3) == (7.0, 6.0)
    assert seen[-1][0] == 3


def test_fourway_retimes_in_the_tuners_chain(monkeypatch):
    """bench_fourway re-timed each arm's winner back to back, a chain the tuner never timed."""
    fourway = _load("bench_fourway")
    built = []
    real = fourway.tsearch.Chain.build

    def spy(*a, **k):
        built.append(k.get("timer"))
        return real(*a, **k)

    monkeypatch.setattr(fourway.tsearch.Chain, "build", spy)
    clock = FakeClock()
    timer = FakeTimer(clock)
    fast = fake_backend("fast", clock, {"default": 10.0})
    times = fourway.retime(cpu_problem(m=4), [("fast", fast, {"id": "default"})], timer)
    assert built == [timer] and times["fast"].median_us == 10.0 and "_writer_us" in times


def test_gemm_rows_keep_the_writer_share_they_subtract():
    common = _load("_common")
    t = SimpleNamespace(median_us=5.0, min_us=4.9, spread=0.01)
    row = common.timing_fields(t, 5_000_000, 4000.0, 2, True, writer_us=1.0)
    assert row["us"] == 5.0 and row["writer_us"] == 1.0 and row["raw_us"] == 6.0
    assert "writer_us" not in common.timing_fields(t, 5_000_000, 4000.0, 2, True)


def test_recorded_command_reruns_in_a_shell():
    """Recorded unquoted, a `;` in --plan ran its rest as another command in a shell."""
    argv = ["python", "benchmarks/bench_stream.py", "--plan", "per_tensor:1,8;block128:1",
            "--arms", "a|b", "--model", "my model/config.json"]
    command = provenance.record(argv, gpu_name=None)["command"]
    assert shlex.split(command) == argv and "'per_tensor:1,8;block128:1'" in command


@pytest.mark.parametrize("name", ["bench_gemm", "bench_fourway", "bench_cutlass"])
def test_an_empty_argv_is_recorded_as_empty(name):
    """`main([])` recorded the caller's sys.argv (``argv or sys.argv[1:]``)."""
    text = (Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py").read_text()
    assert "argv or sys.argv" not in text and "sys.argv[1:] if argv is None else argv" in text


def test_sweep_rotation_reads_the_l2_of_this_gpu():
    """sweep_triton took decimal 60 MB for the L2 and ceil(3 L2 / bytes) copies: exactly 3x
    (not more) for 6144x5120, 2.92x for 1024x5120 on an H200 (62,914,560 B); it now takes the
    tuner's rotation_copies of the device's L2 (tested in test_tuning)."""
    src = (Path(__file__).resolve().parents[1] / "benchmarks" / "sweep_triton.py").read_text()
    assert "60_000_000" not in src and "rotation_copies(n * k, l2_cache_bytes())" in src
