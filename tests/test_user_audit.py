"""Session 34's new-user audit (README and docs walked on a CPU): errors that name what is
wrong instead of tracebacks or silent no-ops."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "checkpoint"))
from ckpt_writer import build, save

from fp8tower import dispatch
from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.cli import app

runner = CliRunner()


@pytest.mark.parametrize("var", ["FP8TOWER_TILE_MAJOR", "FP8TOWER_EAGER_ONE_LAUNCH"])
def test_every_on_off_variable_is_checked_where_the_dispatcher_is_made(monkeypatch, var):
    """Read only on GPU paths, these passed any word silently on a CPU."""
    monkeypatch.setenv(var, "x")
    dispatch.reset()
    try:
        with pytest.raises(ValueError, match=f"{var}='x': expected one of"):
            dispatch.default_dispatcher()
    finally:
        monkeypatch.delenv(var)
        dispatch.reset()


def test_a_truncated_safetensors_file_names_the_file(tmp_path):
    src = save(build("block_fp8"), tmp_path / "ck")
    f = src / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated: its header "
                                              r"describes \d+ bytes, the file has \d+"):
        open_checkpoint(src)
    r = runner.invoke(app, ["convert", str(src)])
    assert r.exit_code == 2 and "truncated" in r.output and "Traceback" not in r.output


def test_info_keeps_the_install_hint_brackets():
    r = runner.invoke(app, ["info"], env={"COLUMNS": "250"})
    assert r.exit_code == 0
    from fp8tower import backends

    reason = backends.get("cudnn").unavailable_reason()
    if reason is None or "[" not in reason:
        pytest.skip("the cuDNN frontend is installed here")
    assert "fp8tower[cudnn]" in " ".join(r.output.split())


def test_write_merged_of_a_bf16_checkpoint_needs_a_scheme_and_a_directory(tmp_path):
    src = save(build("unquantized"), tmp_path / "bf16")
    r = runner.invoke(app, ["convert", str(src), "--write-merged", str(tmp_path / "out")])
    assert r.exit_code == 2 and "give the scheme" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "out").exists()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    r = runner.invoke(app, ["convert", str(src), "--scheme", "per_tensor",
                            "--write-merged", str(a_file)])
    assert r.exit_code == 2 and "is a file" in r.output and "Errno" not in r.output, r.output


def test_bench_tower_refuses_named_backends_that_cannot_run_here(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour")
    r = runner.invoke(app, ["bench", "tower", "--model", "tiny-hybrid", "--backends",
                            "triton,reference", "--json", str(tmp_path / "t.json")])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "--backends: cannot run on this machine: triton" in out, out


def test_dispatch_file_that_is_a_directory(tmp_path):
    r = runner.invoke(app, ["dispatch", "--file", str(tmp_path)])
    assert r.exit_code == 2 and "is a directory" in r.output


def test_a_model_too_big_for_free_memory_is_refused_before_allocating(monkeypatch):
    from fp8tower.hf import random_model as rm

    monkeypatch.setattr(rm, "free_bytes", lambda device: 1000)
    config = rm.text_config("tiny-hybrid")
    with pytest.raises(ValueError, match=r"needs [\d.]+ GB of torch.bfloat16 weights on cpu, "
                                         r"which has 0.0 GB free"):
        rm.random_model(config, "cpu")


def test_capture_model_eager_out_on_a_cpu_names_the_option(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour")
    r = runner.invoke(app, ["trace", "capture-model", "--model", "tiny-hybrid", "--arm", "bf16",
                            "--out", str(tmp_path / "c"), "--eager-out", str(tmp_path / "e")])
    assert r.exit_code == 2 and "--eager-out" in r.output and "needs a GPU" in r.output
