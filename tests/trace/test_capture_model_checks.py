"""`trace capture-model` / `trace capture` on tiny-hybrid (CPU): bf16 linears grouped and sized
as FP8 ones, --layers, --device, --eager-out, --backend, --force and unmerged merge groups
checked with one clear line (exit code 2), never a traceback."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fp8tower.cli.trace import app

runner = CliRunner()
FAST = ("--model", "tiny-hybrid", "--steps", "2,6", "--context", "8")
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def error_line(result) -> str:
    return " ".join(result.output.split())


def test_bf16_linears_grouped_and_sized_like_fp8_ones():
    from fp8tower.hf.capture import model_ops
    from fp8tower.hf.random_model import random_model, text_config

    model = random_model(text_config("tiny-hybrid"), torch.device("cpu"))
    fqns = ["model.layers.0.linear_attn.in_proj_qkv", "model.layers.0.linear_attn", "lm_head"]
    ops = model_ops(model, ["aten::linear", "k1", "aten::linear"], fqns, m=1, device="cpu").ops
    qkv, core, head = ops
    assert (qkv.label, qkv.group) == ("layers.*.linear_attn.in_proj_qkv",
                                      "layers.*.linear_attn.in_proj_qkvz")
    assert (qkv.n, qkv.k, qkv.bytes) == (320, 256, 320 * 256 * 2 + 2 * 256 + 2 * 320)
    assert core.group == "layers.*.linear_attn" and core.n == core.k == core.bytes == 0
    assert head.group == "lm_head" and head.k == 256 and head.n == model.config.vocab_size


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_layers_keep_an_attention_layer(layers):
    from fp8tower.hf.random_model import text_config

    types = text_config("tiny-hybrid", layers).layer_types
    assert len(types) == layers and "full_attention" in types


@pytest.mark.parametrize("layers", [0, 9])
def test_layers_out_of_range(layers):
    from fp8tower.hf.random_model import text_config

    with pytest.raises(ValueError, match="has 4 decoder layers"):
        text_config("tiny-hybrid", layers)


def test_cli_layers(tmp_path):
    r = run("capture-model", *FAST, "--arm", "bf16", "--out", tmp_path / "a", "--layers", "9")
    assert r.exit_code == 2 and "layers 9: tiny-hybrid has 4 decoder layers" in error_line(r)
    r = run("capture-model", *FAST, "--arm", "bf16", "--out", tmp_path / "b", "--layers", "1",
            "--device", "cpu")
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "b" / "manifest.json").read_text())["meta"]
    assert meta["num_hidden_layers"] == 1


def test_device_checked(tmp_path):
    r = run("capture-model", *FAST, "--arm", "bf16", "--out", tmp_path / "a", "--device", "foo")
    assert r.exit_code == 2 and "--device 'foo': expected cpu or cuda" in error_line(r)


@NO_GPU
def test_device_cuda_without_a_gpu(tmp_path):
    r = run("capture-model", *FAST, "--arm", "bf16", "--out", tmp_path / "a", "--device", "cuda")
    assert r.exit_code == 2 and "no CUDA GPU is available" in error_line(r)


@pytest.mark.parametrize("extra", [("--device", "cpu"), ("--eager",)])
def test_eager_out_refused_where_it_would_write_nothing(tmp_path, extra):
    r = run("capture-model", *FAST, "--arm", "bf16", "--out", tmp_path / "a",
            "--eager-out", tmp_path / "e", *extra)
    assert r.exit_code == 2 and "--eager-out" in error_line(r)
    assert not (tmp_path / "a").exists() and not (tmp_path / "e").exists()


def test_unknown_backend_refused(tmp_path):
    r = run("capture-model", *FAST, "--arm", "bf16", "--out", tmp_path / "a",
            "--backend", "bogus")
    assert r.exit_code == 2 and "backend 'bogus': expected auto or one of" in error_line(r)
    assert not (tmp_path / "a").exists()


def test_existing_capture_refused_before_the_build_and_force(tmp_path, monkeypatch):
    from fp8tower.hf import random_model

    out = tmp_path / "a"
    args = ("capture-model", *FAST, "--arm", "bf16", "--out", out, "--device", "cpu")
    assert run(*args).exit_code == 0
    built = random_model.random_model

    def no_build(*a, **k):
        raise AssertionError("the model was built")

    monkeypatch.setattr(random_model, "random_model", no_build)
    r = run(*args)
    assert r.exit_code == 2 and "already holds a capture; pass --force" in error_line(r)
    monkeypatch.setattr(random_model, "random_model", built)
    assert run(*args, "--force").exit_code == 0


def test_unmerged_groups_warned_and_recorded(tmp_path):
    out = tmp_path / "a"
    r = run("capture-model", *FAST, "--arm", "fp8:block128:merged", "--backend", "reference",
            "--out", out, "--device", "cpu")
    assert r.exit_code == 0, r.output
    # 11 groups, 3 of them in_proj_b + in_proj_a kept bf16 on purpose (not a failed merge)
    assert ("warning: arm fp8:block128:merged: 8 of 8 sibling groups not merged"
            in error_line(r)) and "not a multiple of 128" in error_line(r)
    meta = json.loads((out / "manifest.json").read_text())["meta"]
    assert meta["unmerged_groups"] == 8 and "N=320" in meta["unmerged_reason"]


def test_tower_capture_merge_error_is_one_line(tmp_path):
    r = run("capture", "--model", "tiny-hybrid", "--arm", "merged", "--scheme", "block128",
            "--steps", "2,6", "--out", tmp_path / "a")
    assert r.exit_code == 2 and "--arm merged --scheme block128:" in error_line(r)
    assert "not a multiple of 128" in error_line(r)


@NO_GPU
def test_tower_capture_rows_standin_needs_a_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    r = run("capture", "--model", "tiny-hybrid", "--arm", "merged", "--standin", "rows",
            "--steps", "2,6", "--out", tmp_path / "a")
    assert r.exit_code == 2 and "--standin rows runs a Triton kernel: it needs a CUDA GPU" in (
        error_line(r))


def test_tower_capture_rows_fp8_standin_needs_per_tensor(tmp_path):
    """--standin rows_fp8 quantizes with per_tensor's static scale: another scheme is refused
    by name, before anything is built (as bench tower refuses it: cli/_common.check_standin)."""
    r = run("capture", "--model", "tiny-hybrid", "--arm", "merged", "--standin", "rows_fp8",
            "--scheme", "channel_token", "--steps", "2,6", "--out", tmp_path / "a")
    assert r.exit_code == 2
    assert ("--standin rows_fp8 quantizes with per_tensor's static activation scale; --scheme "
            "channel_token: pass --scheme per_tensor") in error_line(r)
    assert not (tmp_path / "a").exists()
