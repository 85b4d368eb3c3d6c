"""What `describe` / `fp8tower convert` report is what loading does (session 34's audit):
linears convert's default filter keeps in bf16 are not counted as quantized, MoE experts form
no merge groups, a group the ignore list splits is reported (not an error), and the errors of
plausible inputs name the tensor or field."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_writer import build, build_qwen3_5, save, write_qwen3_moe_block_fp8
from typer.testing import CliRunner

from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.cli import app
from fp8tower.hf.pretrained import describe, from_pretrained
from fp8tower.hf.write import write_merged


def test_bf16_report_counts_what_write_merged_quantizes(tmp_path):
    src = save(build_qwen3_5("unquantized"), tmp_path / "bf16")
    info = describe(src, scheme="per_tensor")
    out = tmp_path / "w"
    write_merged(src, out, scheme="per_tensor")
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    kept = info["kept_high_precision"]
    assert any("in_proj_a" in f for f in kept) and any(f.startswith("mtp.") for f in kept)
    assert any(".visual." in f for f in kept)
    assert not any("in_proj_a" in f or "visual" in f or "mtp" in f for f in info["schemes"])
    assert sum(info["scheme_counts"].values()) == len(info["schemes"])
    for f in kept:  # each is in the written copy's ignore list
        assert f in qc["ignore"] or any(f.startswith(p) for p in qc["ignore"]), f
    r = CliRunner().invoke(app, ["convert", str(src), "--scheme", "per_tensor"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert f"quantized linears: {len(info['schemes'])}" in text
    assert "default_filter" in text


def test_moe_experts_form_no_merge_groups(tmp_path):
    p = write_qwen3_moe_block_fp8(tmp_path / "moe")
    cfg = json.loads((p / "config.json").read_text())
    cfg["model_type"] = "qwen3_5_moe"  # a family with a gate_up group
    (p / "config.json").write_text(json.dumps(cfg))
    groups = describe(p)["merge_groups"]
    assert groups and not any(".experts." in g["parent"] for g in groups)


def test_a_group_the_ignore_list_splits_is_reported(tmp_path):
    k = "model.layers.0.self_attn.k_proj"
    src = save(build("compressed_tensors", preset="FP8_DYNAMIC", ignore=("lm_head", k),
                     ignored_fqns=(k,)), tmp_path / "ck")
    (g,) = [g for g in describe(src)["merge_groups"] if g["parent"] == "model.layers.0.self_attn"]
    assert g["action"] == "keep" and "covers only k_proj" in g["reason"]
    r = CliRunner().invoke(app, ["convert", str(src)])
    assert r.exit_code == 0 and "covers only k_proj" in " ".join(r.output.split()), r.output
    # loads, that group unmerged (it raised before: one group cost every merge of the model)
    with pytest.warns(UserWarning, match=r"1 sibling group\(s\) not merged: some members are "
                                         r"FP8, others kept .*layers\.0\.self_attn\.qkv_proj"):
        merged = from_pretrained(src, backend="reference", dtype=torch.float32)
    recs = {(r["parent"], r["merged"]): r for r in merged.fp8tower_merges}
    assert recs[("model.layers.0.self_attn", "qkv_proj")]["split"]
    assert not recs[("model.layers.0.self_attn", "qkv_proj")]["merged_ok"]
    assert recs[("model.layers.1.self_attn", "qkv_proj")]["merged_ok"]
    unmerged = from_pretrained(src, backend="reference", dtype=torch.float32, merge=False)
    ids = torch.arange(3, 11).reshape(1, -1)
    with torch.no_grad():
        assert torch.equal(merged(ids).logits, unmerged(ids).logits)


@pytest.mark.parametrize("value, match", [(1e-40, "at least"), (1e36, "at most")])
def test_an_input_scale_out_of_range_names_its_tensor(tmp_path, value, match):
    q = "model.layers.0.self_attn.q_proj"
    spec = build("modelopt")
    spec.tensors[f"{q}.input_scale"] = torch.tensor(value)
    src = save(spec, tmp_path / "ck")
    with pytest.raises(CheckpointError, match=f"'{q}.input_scale': act_scale .* must be {match}"):
        open_checkpoint(src).load_linear(q)
    r = CliRunner().invoke(app, ["convert", str(src), "--write-merged", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.output.startswith("error:") and f"{q}.input_scale" in r.output


@pytest.mark.parametrize("tensor,value,match", [
    ("input_scale", float("nan"), "must be finite and > 0"),
    ("weight_scale", -1.0, "must be finite and > 0"),
    ("input_scale", 1e-40, "must be at least"),
])
def test_the_report_keeps_a_group_with_a_scale_loading_refuses(tmp_path, tensor, value, match):
    """The report reads the scales loading checks (2026-12-05 audit: NaN input scales were
    reported as "differ; requant_max merges with their max", a negative weight scale as
    mergeable)."""
    q = "model.layers.0.self_attn.q_proj"
    spec = build("modelopt")
    spec.tensors[f"{q}.{tensor}"] = torch.full_like(spec.tensors[f"{q}.{tensor}"], value)
    src = save(spec, tmp_path / "ck")
    (g,) = [g for g in describe(src)["merge_groups"] if g["parent"] == "model.layers.0.self_attn"]
    assert g["action"] == "keep", g
    assert f"q_proj: {q}.{tensor}" in g["reason"] and match in g["reason"]
    assert "loading refuses it" in g["reason"]


def test_a_bf16_checkpoint_opened_with_another_scheme_says_reopen(tmp_path):
    from fp8tower.hf.conversion import convert
    from fp8tower.hf.pretrained import empty_model

    ck = open_checkpoint(save(build("unquantized"), tmp_path / "bf16"), scheme="per_tensor")
    with pytest.raises(CheckpointError, match="bf16 checkpoint opened with scheme=per_tensor; "
                                              "scheme=block128 .* reopen it"):
        convert(empty_model(ck.config), "block128", checkpoint=ck, device="cpu")


def test_json_path_checked_before_the_copy_is_written(tmp_path):
    src = save(build("block_fp8"), tmp_path / "ck")
    (tmp_path / "jdir").mkdir()
    r = CliRunner().invoke(app, ["convert", str(src), "--write-merged", str(tmp_path / "out"),
                                 "--json", str(tmp_path / "jdir")])
    assert r.exit_code == 2 and "is a directory" in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_modelopt_method_only_in_config_reads_hf_quant_config(tmp_path):
    spec = build("modelopt")
    spec.config["quantization_config"] = {"quant_method": "modelopt"}
    spec.hf_quant_config = {"quantization": {"quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
    ck = open_checkpoint(save(spec, tmp_path / "ck"))
    assert ck.format == "modelopt" and ck.linear_names() and ck.is_ignored("lm_head")


@pytest.mark.parametrize("key", ["transform_config", "transforms_config"])
def test_compressed_tensors_online_transforms_are_refused(tmp_path, key):
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    spec.config["quantization_config"][key] = {"config_groups": {"v": {"type": "hadamard"}}}
    with pytest.raises(CheckpointError, match=f"{key}: expected null or absent: fp8tower "
                                              "applies no online transforms"):
        open_checkpoint(save(spec, tmp_path / "ck"))


def test_an_empty_key_mapping_turns_the_family_default_off(tmp_path):
    from fp8tower.hf.conversion import ConvertError

    src = save(build_qwen3_5("block_fp8"), tmp_path / "q35")
    from_pretrained(src, backend="reference", dtype=torch.float32)  # the default mapping fits
    with pytest.raises(ConvertError, match=r"'model\.language_model\.layers\.0\.[a-z_.]+'\) is "
                                           "a linear of the model"):
        from_pretrained(src, backend="reference", dtype=torch.float32, key_mapping={})


@pytest.mark.parametrize("fmt", ["modelopt", "block_fp8"])
def test_nan_codes_in_an_fp8_weight_name_the_tensor(tmp_path, fmt):
    q = "model.layers.0.self_attn.q_proj"
    spec = build(fmt)
    w = spec.tensors[f"{q}.weight"].clone()
    w.view(torch.uint8)[1, 2] = 0xFF
    spec.tensors[f"{q}.weight"] = w
    ck = open_checkpoint(save(spec, tmp_path / "ck"))
    with pytest.raises(CheckpointError, match=rf"'{q}.weight': 1 FP8 code\(s\) are NaN .* "
                                              r"index \(1, 2\)"):
        ck.load_linear(q)


def test_an_input_scale_refusal_names_its_tensor_whatever_the_message(tmp_path, monkeypatch):
    """The tensor was guessed from the message ("act_scale" in it: the input scale, else the
    weight): a reworded one named the weight. Now the ScaleError's field names it."""
    from fp8tower.checkpoint import base

    q = "model.layers.0.self_attn.q_proj"
    spec = build("modelopt")
    spec.tensors[f"{q}.input_scale"] = torch.tensor(1e36)
    real = base.Fp8Weight

    def reworded(*args, **kw):  # Fp8Weight's checks, the same error with another message
        try:
            return real(*args, **kw)
        except ValueError as e:
            e.args = ("the static input scale is out of range",)
            raise

    monkeypatch.setattr(base, "Fp8Weight", reworded)
    with pytest.raises(CheckpointError, match=f"'{q}.input_scale': the static input scale"):
        open_checkpoint(save(spec, tmp_path / "ck")).load_linear(q)


def test_a_weight_scale_refusal_names_the_scale_tensor(tmp_path, monkeypatch):
    from fp8tower.checkpoint import base
    from fp8tower.formats import ScaleError

    def refusing(*args, **kw):
        raise ScaleError("odd", "scale")

    q = "model.layers.0.self_attn.q_proj"
    ck = open_checkpoint(save(build("modelopt"), tmp_path / "ck"))
    monkeypatch.setattr(base, "Fp8Weight", refusing)
    with pytest.raises(CheckpointError, match=f"'{q}.weight_scale': odd"):
        ck.load_linear(q)
