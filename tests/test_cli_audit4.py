"""The CLI, session 35's audit of every option: each test fails on the code before it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fp8tower.cli import app

DATA = Path(__file__).parent / "data" / "trace"
ARM = DATA / "arm_merged"
S, L = ARM / "trace_2.json.gz", ARM / "trace_6.json.gz"


def run(*args, env=None):
    r = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert "Traceback" not in r.output, r.output
    return r


@pytest.mark.parametrize("args", [
    ["trace", "diff", S, L, "--steps", 2, 6, "--csv", "P", "--json", "P"],
    ["trace", "report", ARM, "--html", "P", "--json", "P"],
    ["trace", "compare", ARM, DATA / "arm_unmerged", "--csv", "P", "--json", "P"],
])
def test_two_outputs_on_one_path_are_refused(tmp_path, args):
    """The last write silently replaced the other (exit 0)."""
    out = tmp_path / "out.x"
    r = run(*[out if a == "P" else a for a in args])
    assert r.exit_code == 2 and "same file" in r.output and not out.exists()


def test_convert_json_inside_the_merged_copy_is_refused(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "checkpoint"))
    pytest.importorskip("transformers")
    from ckpt_writer import build_qwen3_5, save

    src = save(build_qwen3_5("block_fp8"), tmp_path / "q35")
    x = tmp_path / "x"
    r = run("convert", src, "--json", x, "--write-merged", x)
    assert r.exit_code == 2 and "--write-merged" in r.output and not x.exists()


def test_requant_max_still_merges_block128_groups(tmp_path):
    """--requant-max (per_tensor's) refused every block128 group: none merged."""
    sys.path.insert(0, str(Path(__file__).parent / "checkpoint"))
    pytest.importorskip("transformers")
    from ckpt_writer import build_qwen3_5, save

    src = save(build_qwen3_5("block_fp8"), tmp_path / "q35", shards=2)
    r = run("convert", src, "--write-merged", tmp_path / "out", "--requant-max")
    assert r.exit_code == 0, r.output
    assert "groups stored merged: 3" in r.output


def test_dispatch_rows_of_two_files_say_whose(tmp_path, monkeypatch):
    """A GPU's default and -no-early-launch files listed each key twice, identical rows."""
    from test_dispatch import write_cli_cache

    write_cli_cache(tmp_path / "nvidia-h200.json")
    shutil.copy(tmp_path / "nvidia-h200.json", tmp_path / "nvidia-h200-no-early-launch.json")
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    r = run("dispatch")
    assert r.exit_code == 0, r.output
    assert "nvidia-h200-no-early-launch" in r.output and "in 2 files" in r.output


@pytest.mark.parametrize("arms", [",", "fp8:per_tensor,fp8:PER_TENSOR",
                                  "fp8:per_tensor,fp8:per-tensor"])
def test_generate_arms_empty_or_spelled_twice_are_refused(monkeypatch, arms):
    def stub(*a, **k):
        raise AssertionError("ran")

    monkeypatch.setattr("fp8tower.hf.generate.bench_generate", stub)
    r = run("bench", "generate", "--arms", arms, "--batch", 1)
    assert r.exit_code == 2 and "--arms" in r.output


@pytest.mark.parametrize(("args", "option"), [
    (["tune", "--shapes", "8x8", "--scheme", ""], "--scheme"),
    (["tune", "--shapes", ",", "--scheme", "per_tensor"], "--shapes"),
    (["dispatch", "--m", ""], "--m"),
    (["dispatch", "--scheme", ","], "--scheme"),
])
def test_empty_lists_are_errors_naming_the_option(args, option, tmp_path, monkeypatch):
    """They meant nothing (0 keys, exit 0) or everything (no filter)."""
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    r = run(*args)
    assert r.exit_code == 2 and option in r.output, r.output
    assert sum(1 for ln in r.output.splitlines() if ln.strip()) == 1  # one `error:` line


def test_a_bad_switch_is_one_line_before_any_work(tmp_path):
    """FP8TOWER_PLAN=maybe was a traceback (exit 1), after the tower's build."""
    r = run("trace", "capture", "--model", "tiny-hybrid", "--arm", "merged", "--backend",
            "reference", "--steps", "1,2", "--out", tmp_path / "c",
            env={"FP8TOWER_PLAN": "maybe"})
    assert r.exit_code == 2 and "FP8TOWER_PLAN='maybe'" in r.output
    assert not (tmp_path / "c").exists()


def test_capture_model_out_and_eager_out_one_folder_refused(tmp_path, monkeypatch):
    def stub(*a, **k):
        raise AssertionError("ran")

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("fp8tower.hf.capture.capture_model", stub)
    d = tmp_path / "d"
    r = run("trace", "capture-model", "--model", "tiny-hybrid", "--arm", "bf16", "--out", d,
            "--eager-out", d, "--force")
    assert r.exit_code == 2 and "--eager-out" in r.output


@pytest.mark.parametrize("args", [["--model", ""], ["--backends", ""],
                                  ["--arms", "unmerged", "--merge-mode", "requant_max"]])
def test_bench_tower_empty_or_idle_options_are_refused(monkeypatch, args):
    def stub(*a, **k):
        raise AssertionError("ran")

    monkeypatch.setattr("fp8tower.tower.bench.bench_tower", stub)
    r = run("bench", "tower", *args)
    assert r.exit_code == 2, r.output


def test_fp8_x_with_a_dynamic_scale_is_told_to_drop_it():
    r = run("tune", "--shapes", "8x8", "--scheme", "per_tensor", "--act-dtype",
            "float8_e4m3fn", "--dynamic-act-scale")
    assert r.exit_code == 2 and "drop --dynamic-act-scale" in r.output
    assert "give --scheme per_tensor" not in r.output


def test_capture_out_below_a_file_is_refused_before_the_build(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = run("trace", "capture", "--model", "tiny-hybrid", "--arm", "merged", "--backend",
            "reference", "--steps", "1,2", "--out", tmp_path / "afile" / "b")
    assert r.exit_code == 2 and "not a directory" in r.output and ".tmp-" not in r.output


def test_compare_one_model_at_two_m_with_other_m(tmp_path):
    """Session 21 compared M = 1 and M = 32 captures; session 31 refused them outright."""
    for m in (1, 4):
        r = run("trace", "capture", "--model", "tiny-hybrid", "--arm", "merged", "--backend",
                "reference", "--steps", "1,2", "--m", m, "--out", tmp_path / f"m{m}")
        assert r.exit_code == 0, r.output
    r = run("trace", "compare", tmp_path / "m1", tmp_path / "m4")
    assert r.exit_code == 2 and "--other-m" in r.output and "merged (2)" not in r.output
    r = run("trace", "compare", tmp_path / "m1", tmp_path / "m4", "--other-m")
    assert r.exit_code == 0, r.output


def test_compare_an_arm_with_itself_warns():
    r = run("trace", "compare", ARM, ARM)
    assert "same capture" in r.output
