"""`fp8tower bench tower` on the CPU (tiny-hybrid): table, JSON record, skips, errors."""

import datetime
import json

import pytest
import torch
from typer.testing import CliRunner

from fp8tower.cli import app as main_app
from fp8tower.cli.bench import app

runner = CliRunner()
FAST = ("--model", "tiny-hybrid", "--replays", "2", "--steps", "1")


def run(*args, main=False):
    result = runner.invoke(main_app if main else app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's table (ceiling n/a, wall clock)")
def test_table_and_json(tmp_path):
    out = tmp_path / "t.json"
    r = run("tower", *FAST, "--m", "1,3", "--backends", "reference", "--json", out)
    assert r.exit_code == 0, r.output
    for text in ("FP8 tower decode step", "tiny-hybrid", "unmerged", "merged", "n/a (CPU)",
                 "ms/step", "GB/s", "speedup", "CPU wall clock", f"wrote {out}"):
        assert text in r.output
    rec = json.loads(out.read_text())
    assert rec["schema"] == "fp8tower.bench.tower/1"
    assert rec["model"] == "tiny-hybrid" and rec["device"] == "cpu" and rec["gpu"] is None
    assert {"torch", "triton", "cuda", "fp8tower"} <= set(rec["versions"])
    assert rec["versions"]["torch"] == torch.__version__
    assert rec["date"].startswith(str(datetime.datetime.now(datetime.timezone.utc).year))
    assert rec["command"].startswith("fp8tower bench tower --model tiny-hybrid --m 1,3")
    assert rec["read_ceiling_gbps"] is None
    rows = rec["rows"]
    assert [(r["arm"], r["m"]) for r in rows] == [("unmerged", 1), ("unmerged", 3),
                                                  ("merged", 1), ("merged", 3)]
    for row in rows:
        assert row["status"] == "ok" and row["ms_per_step"] > 0 and row["gbps"] > 0
        assert row["bytes_per_step"] > row["fp8_bytes"] == 737280
        assert row["ceiling_pct"] is None and row["timing"] == "cpu-eager"
        assert row["baseline"].startswith("unmerged/reference (the first arm: unmerged/cublaslt")
        assert row["gemms"] == (13 if row["arm"] == "unmerged" else 8)
    assert rows[0]["speedup"] == 1.0
    # rounds (3 by default): each row is the median of its rounds, the command says how many;
    # early launch is recorded (None: no GPU graphs)
    assert rec["rounds"] == 3 and "--rounds 3" in rec["command"] and "early_launch" in rec
    assert rec["early_launch"] is None
    assert all(len(r["round_ms"]) == 3 for r in rows)
    assert all(r["ms_per_step"] == sorted(r["round_ms"])[1] for r in rows)


def test_skips_say_why(tmp_path):
    out = tmp_path / "t.json"
    r = run("tower", *FAST, "--m", "1", "--scheme", "block128,weight_only",
            "--backends", "reference", "--json", out)
    assert r.exit_code == 0, r.output
    assert "skipped" in r.output
    rows = json.loads(out.read_text())["rows"]
    by = {(r["scheme"], r["arm"], r["backend"]): r for r in rows}
    assert "not a multiple of 128" in by[("block128", "merged", "reference")]["reason"]
    assert by[("weight_only", "merged", "reference")]["status"] == "ok"
    assert "unmerged/cublaslt not asked for" in by[("weight_only", "merged", "reference")][
        "baseline"]
    if not torch.cuda.is_available():  # a named backend that cannot run here: refused first
        r = run("tower", *FAST, "--m", "1", "--backends", "reference,cublaslt", "--json", out)
        assert r.exit_code == 2 and "cannot run on this machine: cublaslt" in r.output


def test_include_mlp_and_main_cli_mount(tmp_path):
    out = tmp_path / "t.json"
    r = run("bench", "tower", *FAST, "--m", "1", "--arms", "merged", "--backends", "reference",
            "--include-mlp", "--json", out, main=True)
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    assert rec["parts"] == ["gdn", "attention", "mlp"]
    assert rec["rows"][0]["gemms"] == 8 + 4 * 2  # + merged gate_up and down in 4 layers
    assert "--include-mlp" in rec["command"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU defaults")
def test_cpu_defaults_and_default_json_path(tmp_path, monkeypatch):
    """The default JSON goes to benchmarks/results/ where that exists (a checkout), else to
    the current folder: no new folder tree wherever a user runs it (2026-12-06 audit)."""
    monkeypatch.chdir(tmp_path)
    date = datetime.datetime.now(datetime.timezone.utc).date()
    name = f"tower_tiny-hybrid_cpu_{date}.json"
    r = run("tower", "--m", "1", "--replays", "1", "--steps", "1", "--arms", "merged")
    assert r.exit_code == 0, r.output
    assert (tmp_path / name).is_file() and not (tmp_path / "benchmarks").exists()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    r = run("tower", "--m", "1", "--replays", "2", "--steps", "1")
    assert r.exit_code == 0, r.output
    assert "backend reference" in r.output
    path = tmp_path / "benchmarks" / "results" / name
    rec = json.loads(path.read_text())
    assert {r["backend"] for r in rec["rows"]} == {"reference"}
    # written as benchmarks/compact_results.py stores results: run from the repository root,
    # it lands under benchmarks/results/, which CI checks (2026-12-05: an indented one failed)
    text = path.read_text(encoding="utf-8")
    assert text == json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n"


@pytest.mark.parametrize("args,message", [
    (("--arms", "unmerged,fused"), "unknown arm 'fused' in --arms: expected one of unmerged"),
    (("--backends", "cublas"), "unknown backend 'cublas' in --backends: expected one of"),
    (("--scheme", "fp4"), "unknown scheme 'fp4' in --scheme: expected one of per_tensor"),
    (("--model", "nope"), "model: got 'nope'; expected a shipped name"),
    (("--m", "0"), "--m '0': expected positive integers"),
    (("--merge-mode", "max"), "unknown merge mode 'max': expected one of exact, requant_max"),
    (("--merge-mode", "requant_max", "--scheme", "per_tensor,channel_token"),
     ("--merge-mode requant_max applies to per_tensor only (the other schemes have "
      "per-channel or per-block scales already), but --scheme has channel_token")),
    (("--standin", "fused"), "--standin 'fused': expected one of torch, rows, rows_fp8"),
    (("--standin", "rows_fp8", "--scheme", "per_tensor,block128"),
     ("--standin rows_fp8 quantizes with per_tensor's static activation scale; --scheme "
      "per_tensor,block128: pass --scheme per_tensor")),
])
def test_bad_inputs(args, message):
    r = run("tower", "--model", "tiny-hybrid", *args)
    assert r.exit_code == 2
    assert message in " ".join(r.output.split())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU tower, Triton interpreted")
def test_standin_rows_is_recorded(tmp_path, monkeypatch):
    """--standin rows (tower/standin.rows_add; on the CPU under the Triton interpreter):
    recorded in the JSON and its command; torch is the default and is recorded too."""
    out_t, out_r = tmp_path / "t.json", tmp_path / "r.json"
    common = ("tower", *FAST, "--m", "3", "--arms", "merged", "--backends", "reference")
    assert run(*common, "--json", out_t).exit_code == 0
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    r = run(*common, "--standin", "rows", "--json", out_r)
    assert r.exit_code == 0, r.output
    rec_t, rec_r = json.loads(out_t.read_text()), json.loads(out_r.read_text())
    assert rec_t["standin"] == "torch" and "--standin torch" in rec_t["command"]
    assert rec_r["standin"] == "rows" and "--standin rows" in rec_r["command"]
    assert rec_r["rows"][0]["status"] == "ok"
    out_f = tmp_path / "f.json"  # rows_fp8: per_tensor's GEMMs read the stand-ins' FP8 x
    r = run(*common, "--scheme", "per_tensor", "--standin", "rows_fp8", "--json", out_f)
    assert r.exit_code == 0, r.output
    rec_f = json.loads(out_f.read_text())
    assert rec_f["standin"] == "rows_fp8" and rec_f["rows"][0]["status"] == "ok"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU without the interpreter")
def test_standin_rows_on_the_cpu_says_what_it_needs(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    r = run("tower", *FAST, "--m", "1", "--standin", "rows")
    assert r.exit_code == 2
    assert "needs a CUDA GPU (on the CPU, set TRITON_INTERPRET=1)" in " ".join(r.output.split())


def test_the_help_names_every_standin_kernel():
    """cli/bench.py and cli/trace.py name the kernels without importing the tower."""
    from fp8tower.cli import bench, trace
    from fp8tower.tower.build import STANDIN_KERNELS

    for name in STANDIN_KERNELS:
        assert f"{name} (" in bench.STANDIN_HELP
    assert STANDIN_KERNELS == trace.STANDIN_KERNELS


def test_the_record_names_what_shaped_the_numbers(tmp_path, monkeypatch):
    """The FP8TOWER_* variables set (they change what runs) and the model as given: a config
    path stays a path in the command, so the command runs again as written."""
    from fp8tower.models.registry import load_config

    cfg = tmp_path / "my model" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(load_config("tiny-hybrid")))
    monkeypatch.setenv("FP8TOWER_EARLY_LAUNCH", "0")
    out = tmp_path / "t.json"
    r = run("tower", "--model", cfg, "--replays", "2", "--steps", "1", "--m", "1",
            "--arms", "merged", "--backends", "reference", "--json", out)
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text())
    assert rec["versions"]["env"]["FP8TOWER_EARLY_LAUNCH"] == "0"
    assert rec["command"].startswith(f"fp8tower bench tower --model '{cfg}' --m 1")
    assert "tuning_cache" in rec["versions"]  # None without a GPU: no cache file is read


def test_the_tuning_cache_read_is_named_with_a_hash_of_its_bytes(tmp_path, monkeypatch):
    import hashlib

    from fp8tower import provenance

    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    assert provenance.tuning_cache(None) is None
    assert provenance.tuning_cache("NVIDIA H200") == {
        "path": str(tmp_path / "nvidia-h200.json"), "sha256": None}  # no file yet
    (tmp_path / "nvidia-h200.json").write_text('{"entries": {}}')
    want = hashlib.sha256(b'{"entries": {}}').hexdigest()[:16]
    assert provenance.tuning_cache("NVIDIA H200")["sha256"] == want


@pytest.mark.parametrize("config,args,message", [
    ({"model_type": "qwen3_next", "hidden_size": 256, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 64, "linear_num_key_heads": 2,
      "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
      "full_attention_interval": 2, "num_hidden_layers": 2, "num_experts": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 64, "vocab_size": 1000,
      "shared_expert_intermediate_size": 0},  # no shared expert: no MLP modelled
     ("--include-mlp",), "--include-mlp: "),
    ({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 512, "num_hidden_layers": 2,
      "vocab_size": 1000, "quantization_config": {"quant_method": "awq", "bits": 4}},
     (), "no FP8 linears to run (quantization_config method 'awq')"),
])
def test_configs_a_tower_cannot_run_are_one_line(tmp_path, config, args, message, monkeypatch):
    """A MoE model's MLP, or a checkpoint with no FP8 linear: refused before anything is
    built, in one line (they were tracebacks from inside the benchmark). In tmp_path: a case
    that ran anyway wrote its default JSON under the checkout's benchmarks/results."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    r = run("tower", "--model", str(tmp_path / "config.json"), "--m", "1", *args)
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split()) and "Traceback" not in r.output


def test_a_gpu_sized_model_on_the_cpu_is_said_up_front():
    """`bench generate --model qwen3-8b` on a CPU printed nothing for 170 s (building 16 GB
    of weights), `bench tower --model qwen3.5-27b` nothing for minutes: each now says the
    size first. The CPU-sized model says nothing."""
    from rich.console import Console

    from fp8tower.cli.bench import _cpu_size_note

    for model, said in (("qwen3-8b", "qwen3-8b's 16.4 GB of bf16 weights"), ("tiny-hybrid", "")):
        console = Console(record=True, width=200)
        _cpu_size_note(console, model)
        text = console.export_text()
        assert (said in text and "expect minutes" in text) if said else text == "", text
