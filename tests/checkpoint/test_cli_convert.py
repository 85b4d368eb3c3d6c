"""`fp8tower convert PATH`: the report on a checkpoint written by ckpt_writer, --json,
--write-merged, and one clear line with exit code 2 on bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("transformers")

from ckpt_writer import build, build_qwen3_5, save

from fp8tower.cli import app


def _run(*args):
    return CliRunner().invoke(app, ["convert", *map(str, args)])


def test_report_json_and_write_merged(tmp_path):
    src = save(build_qwen3_5("block_fp8"), tmp_path / "q35", shards=2)
    r = _run(src, "--json", tmp_path / "r.json", "--write-merged", tmp_path / "out")
    assert r.exit_code == 0, r.output
    for word in ("block_fp8", "qwen3_5", "F8_E4M3", "block128",
                 "model.language_model.layers.*.linear_attn.in_proj_qkv",
                 "in the ignore list", "in_proj_qkv+in_proj_z", "merge",
                 "k_proj: N=64 not a multiple of 128", "groups stored merged: 3"):
        assert word in r.output, word
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["checkpoint"]["merge_counts"]["gate_up_proj:merge"] == 2
    assert report["written"]["bytes"] > 0
    r = _run(tmp_path / "out")  # the merged checkpoint, read back
    assert r.exit_code == 0, r.output
    assert "fp8tower" in r.output and "stored merged" in r.output


def test_unquantized_with_scheme(tmp_path):
    src = save(build("unquantized"), tmp_path / "bf16")
    r = _run(src, "--scheme", "channel_token")
    assert r.exit_code == 0, r.output
    assert "unquantized" in r.output and "channel_token" in r.output
    assert "nothing is quantized without --scheme" not in " ".join(r.output.split())
    r = _run(src)  # without a scheme: 0 quantized linears, and what to pass
    assert r.exit_code == 0, r.output
    assert "nothing is quantized without --scheme" in " ".join(r.output.split())


@pytest.mark.parametrize("scheme", [(), ("--scheme", "per_tensor")])
def test_unquantized_lm_head_and_embeddings_are_not_in_an_ignore_list(tmp_path, scheme):
    """A bf16 checkpoint has no ignore list: its lm_head and embeddings were listed "in the
    ignore list"."""
    src = save(build("unquantized"), tmp_path / "bf16")
    r = _run(src, *scheme)
    assert r.exit_code == 0, r.output
    assert "in the ignore list" not in r.output
    for module in ("lm_head", "model.embed_tokens"):
        line = next(ln for ln in r.output.splitlines() if f" {module} " in ln)
        assert "lm_head / embedding (never quantized)" in line, line


@pytest.mark.parametrize("make,args,match", [
    (None, (), "no such file or directory"),
    (lambda p: (p / "config.json").write_text("{not json"), (), "not valid JSON"),
    (lambda p: (p / "config.json").unlink(), (), "config.json: missing"),
    (None, ("--scheme", "fp4"), "unknown scheme 'fp4'"),
    (None, ("--write-merged", "SRC"), "exists and is not empty"),
    # it was silently ignored
    (None, ("--requant-max",), ("--requant-max applies to --write-merged's copy; give "
                                "--write-merged too, or drop --requant-max")),
])
def test_bad_input_is_one_line_exit_2(tmp_path, make, args, match):
    src = save(build("unquantized" if "--scheme" in args else "block_fp8"), tmp_path / "ck")
    target = tmp_path / "nothing" if make is None and not args else src
    if make is not None:
        make(src)
    args = [str(src) if a == "SRC" else a for a in args]
    r = _run(target, *args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and match in lines[0], r.output
    assert "Traceback" not in r.output


def test_help_explains():
    r = CliRunner().invoke(app, ["convert", "--help"])
    assert r.exit_code == 0
    for word in ("--write-merged", "--json", "--scheme", "merge", "ignore", "format"):
        assert word in r.output, word


def test_moe_experts_are_reported_apart(tmp_path):
    """MoE expert linears in FP8 are listed apart (fp8tower loads them dequantized and does
    not convert them), not among the quantized linears."""
    from ckpt_writer import write_qwen3_moe_block_fp8

    r = _run(write_qwen3_moe_block_fp8(tmp_path / "moe"))
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert ("MoE expert linears: 6 in FP8, not converted by fp8tower: from_pretrained loads "
            "them dequantized") in text
    assert "quantized linears: 4" in text  # q, k, v, o: the one layer's MLP is its experts
