"""The CLI, session 42's audit (a user at the keyboard): each test fails on the code before
it. Runs that measured nothing exit 1 and write nothing; options that change nothing are
refused; environment errors are one line before any work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from fp8tower.cli import app

DATA = Path(__file__).parent / "data" / "trace"
CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")


def run(*args, env=None):
    r = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert "Traceback" not in r.output, r.output
    return r


def flat(r) -> str:
    return " ".join(r.output.split())


def test_bench_generate_with_every_arm_skipped_fails_and_writes_nothing(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from fp8tower.hf import generate

    monkeypatch.setattr(generate, "arm_unavailable", lambda arm: "not here (test)")
    out = tmp_path / "g.json"
    r = run("bench", "generate", "--model", "tiny-hybrid", "--batch", "1", "--context", "4",
            "--steps", "1", "--rounds", "1", "--arms", "bf16", "--json", out)
    assert r.exit_code == 1 and not out.exists(), r.output
    assert "no arm ran (nothing written): bf16 (batch 1) skipped: not here (test)" in flat(r)


def test_bench_tower_with_every_cell_skipped_fails_and_writes_nothing(tmp_path, monkeypatch):
    from fp8tower.tower import bench
    from fp8tower.tower.bench import BenchRow

    def skipped(spec, **kw):
        return [BenchRow(scheme="per_tensor", m=1, arm="merged", backend="reference", gemms=8,
                         status="skipped", reason="cannot merge (test)")]

    monkeypatch.setattr(bench, "bench_tower", skipped)
    out = tmp_path / "t.json"
    r = run("bench", "tower", "--model", "tiny-hybrid", "--m", "1", "--arms", "merged",
            "--backends", "reference", "--json", out)
    assert r.exit_code == 1 and not out.exists(), r.output
    assert "no cell ran (nothing written): e.g. per_tensor M=1 merged reference: cannot merge " \
           "(test)" in flat(r)


@CPU_ONLY
def test_bench_tower_refuses_a_tower_larger_than_free_memory(tmp_path, monkeypatch):
    """The 27B's tower with its MLP was killed by the OOM killer (exit 137) on a CPU."""
    from fp8tower.hf import random_model

    monkeypatch.setattr(random_model, "free_bytes", lambda device: 1000)
    r = run("bench", "tower", "--model", "tiny-hybrid", "--m", "1", "--json", tmp_path / "t.json")
    assert r.exit_code == 2, r.output
    assert "GB of FP8 weights; this CPU machine has 0.0 GB free: use a GPU or a smaller " \
           "model" in flat(r)


def test_a_bad_fp8tower_backends_is_one_line_before_any_work():
    r = run("info", env={"FP8TOWER_BACKENDS": "bogus"})
    assert r.exit_code == 2, r.output
    assert "error: FP8TOWER_BACKENDS='bogus': unknown backend(s) bogus" in flat(r)


def test_bench_generate_backend_without_an_fp8_arm_is_refused():
    r = run("bench", "generate", "--model", "tiny-hybrid", "--arms", "bf16", "--backend",
            "reference")
    assert r.exit_code == 2
    assert "--backend reference sets the fp8: arms' GEMM backend, but --arms bf16 has no " \
           "fp8: arm" in flat(r)


def test_convert_requant_max_without_per_tensor_groups_says_it_changes_nothing(tmp_path):
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parent / "checkpoint"))
    from ckpt_writer import build, save

    path = save(build("block_fp8"), tmp_path / "b")
    r = run("convert", path, "--write-merged", tmp_path / "out", "--requant-max")
    assert r.exit_code == 0, r.output
    assert "--requant-max rescales per_tensor groups, and" in flat(r)
    assert "has none (its sibling groups: block128): every group is merged exactly" in flat(r)


def test_attribute_with_a_map_on_a_capture_says_its_checks_are_skipped(tmp_path):
    r = run("trace", "attribute", DATA / "arm_merged", "--map", DATA / "vllm_map.json",
            "--json", tmp_path / "a.json")
    assert "the map replaces the capture's manifest: its ops' kernel checks and expected " \
           "launches are not checked" in flat(r)
    assert "replaces the capture's manifest" in (tmp_path / "a.json").read_text()


@CPU_ONLY
def test_trace_capture_refuses_a_cpu_unservable_backend_before_the_build(tmp_path):
    r = run("trace", "capture", "--model", "tiny-hybrid", "--arm", "merged", "--backend",
            "cublaslt", "--out", tmp_path / "cap")
    assert r.exit_code == 2 and not (tmp_path / "cap").exists(), r.output
    assert "--backend cublaslt: cannot run on this machine: needs a CUDA GPU" in flat(r)


@CPU_ONLY
def test_tune_without_a_gpu_is_an_error_line():
    r = run("tune", "--shapes", "64x64", "--m", "1")
    assert r.exit_code == 2 and "error: tune: tuning needs a CUDA GPU" in flat(r)


def test_a_cache_file_of_another_format_says_so(tmp_path):
    """It said only "no tuned decisions found", the cause unnamed."""
    f = tmp_path / "c.json"
    f.write_text('{"meta": {"format": 99}, "entries": {}}')
    r = run("dispatch", "--file", f)
    assert "cache format 99; this fp8tower reads format 1" in flat(r), r.output


def test_fp8tower_backends_is_checked_without_torch_against_the_registry():
    """The CLI's startup check imports no torch (`--help` took 1.6 s with the variable set):
    env's list of names must be the backends' own."""
    from fp8tower import backends, env

    assert set(backends.names()) <= set(env.BACKEND_NAMES)
    assert len(env.BACKEND_NAMES) == len(backends._MODULES)


def test_help_is_given_whatever_the_environment_says():
    import os
    import subprocess

    env = {**os.environ, "FP8TOWER_BACKENDS": "bogus",
           "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    out = subprocess.run([sys.executable, "-m", "fp8tower", "trace", "diff", "--help"],
                         check=False, capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "Usage" in out.stdout, out.stderr
    out = subprocess.run([sys.executable, "-m", "fp8tower", "info"], check=False,
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2 and "FP8TOWER_BACKENDS='bogus'" in out.stderr


def test_a_cpu_cell_whose_steps_spread_past_2x_is_flagged_noisy():
    """A loaded 2-core host printed 42x and 219x "speedups" with nothing said."""
    from rich.console import Console

    from fp8tower.cli.bench import _table
    from fp8tower.tower.bench import BenchRow

    def row(lo, hi):
        return BenchRow(scheme="per_tensor", arm="merged", backend="reference", m=1,
                        ms_per_step=1.0, min_ms=lo, max_ms=hi, gbps=1.0, speedup=1.0, gemms=8,
                        chosen={"reference": 8})

    def text(rows, cpu):
        console = Console(record=True, width=300)
        console.print(_table(rows, "tiny", None, cpu))
        return console.export_text()

    assert "noisy: its steps ran 1.2-83.8 ms" in text([row(1.2, 83.8)], cpu=True)
    assert "noisy" not in text([row(1.0, 1.5)], cpu=True)
    assert "noisy" not in text([row(1.2, 83.8)], cpu=False)  # GPU rows: CUDA-event medians


def test_a_failed_capture_folder_is_removed_on_a_second_try_or_named(tmp_path, monkeypatch):
    """Ctrl-C during the profiler's export left a hidden `.OUT.tmp-*` folder once in four."""
    import shutil

    from fp8tower.trace import capture

    real, calls = shutil.rmtree, []

    def flaky(path, ignore_errors=False):
        calls.append(path)
        if len(calls) > 1:
            real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(capture.shutil, "rmtree", flaky)
    monkeypatch.setattr("time.sleep", lambda s: None)
    (tmp_path / "a").mkdir()
    capture._remove(tmp_path / "a")
    assert not (tmp_path / "a").exists() and len(calls) == 2
    monkeypatch.setattr(capture.shutil, "rmtree", lambda path, ignore_errors=False: None)
    (tmp_path / "b").mkdir()
    with pytest.warns(RuntimeWarning, match="could not remove the failed capture's temporary"):
        capture._remove(tmp_path / "b")
