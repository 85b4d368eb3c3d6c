"""benchmarks/bench_fourway.py's bookkeeping on the CPU, with fake backends and a fake timer."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

from rich.console import Console
from test_tuning import FakeClock, FakeTimer, cpu_problem, fake_backend

from fp8tower.dispatch import Dispatcher

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_fourway.py"
_spec = importlib.util.spec_from_file_location("bench_fourway", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_each_arm_tuned_alone_then_retimed_with_auto():
    clock = FakeClock()
    timer = FakeTimer(clock)
    slow = fake_backend("slow", clock, {"default": 20.0, "s1": 12.0})
    fast = fake_backend("fast", clock, {"default": 10.0, "f1": 6.0})
    never = fake_backend("never", clock, {"default": 1.0}, reason="cannot serve (fake)")
    auto = Dispatcher(candidates=[slow, fast], timer=timer, tune=True, persist=False)
    p = cpu_problem(m=4)
    rows = bench.measure(p, [slow, fast, never], auto, timer, max_configs=4, ceiling=1000.0)
    by = {r["arm"]: r for r in rows}
    assert by["never"]["skipped"] == "cannot serve (fake)"
    assert by["slow"]["config"]["id"] == "s1" and by["slow"]["us"] == 12.0
    assert by["fast"]["config"]["id"] == "f1" and by["fast"]["vs_best_arm"] == 1.0
    assert by["slow"]["vs_best_arm"] == 2.0
    assert by["auto"]["backend"] == "fast" and by["auto"]["config"]["id"] == "f1"
    assert by["auto"]["auto_within_tolerance"] is True
    console = Console(file=io.StringIO(), width=200)
    console.print(bench.table(rows, "fake GPU", 1000.0))
    assert "yes" in console.file.getvalue()


def test_unregistered_arm_is_recorded_with_its_reason():
    status = bench.arm_status(["cublaslt", "no_such_backend"])
    assert "not registered" in status["no_such_backend"]
    assert isinstance(status["cublaslt"], str)  # no GPU here: the reason, not the backend


def test_resume_refuses_another_timing_and_names_the_earlier_run(tmp_path):
    """--resume kept an earlier run's rows under this run's settings and ceiling: rows tuned
    with other --max-configs / --replays are refused; kept rows name their own run."""
    import argparse

    import pytest

    old = {"date": "2026-12-01T10:00:00", "read_ceiling_gbs": 4470.0, "max_configs": 4,
           "replays": 20, "rows": [{"scheme": "per_tensor", "n": 64, "k": 64, "m": 1}]}
    same = argparse.Namespace(max_configs=4, replays=20)
    rows = bench.resumable_rows(old, same, tmp_path / "f.json")
    assert rows[0]["run"] == "2026-12-01T10:00:00" and rows[0]["read_ceiling_gbs"] == 4470.0
    with pytest.raises(SystemExit, match="max_configs 4, this one 8"):
        bench.resumable_rows(old, argparse.Namespace(max_configs=8, replays=20), "f.json")
    with pytest.raises(SystemExit, match="replays 20, this one 5"):
        bench.resumable_rows(old, argparse.Namespace(max_configs=4, replays=5), "f.json")
