"""Which linears a quantization config makes FP8, and the scheme it implies."""

from __future__ import annotations

import json

import pytest

from fp8tower.models import get_spec, load_config, parse_quant_config, tower_spec_from_config

GDN_AB = [f"model.language_model.layers.{i}.linear_attn.in_proj_{x}"
          for i in range(64) if (i + 1) % 4 for x in "ab"]


@pytest.fixture(scope="module")
def cfg27b():
    return load_config("qwen3.5-27b")


def fp8_projs(spec, layer):
    return [lin.proj for lin in spec.all_linears if lin.layer == layer and lin.fp8]


def test_qwen_block_fp8_release(cfg27b):
    # Qwen's FP8 releases: fine-grained 128x128 blocks; a/b listed by full nested name.
    qc = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
          "weight_block_size": [128, 128],
          "modules_to_not_convert": ["lm_head", "model.visual.blocks.0.attn.proj", *GDN_AB]}
    spec = tower_spec_from_config(cfg27b, quant_config=qc)
    assert (spec.quant_method, spec.scheme_hint) == ("fp8", "block128")
    assert len(spec.gemms()) == 208 and spec.fp8_bytes() == 7_214_202_880
    assert len(spec.gemms(("mlp",))) == 192


def test_config_is_followed_even_where_it_differs_from_the_default(cfg27b):
    spec = tower_spec_from_config(cfg27b, quant_config={
        "quant_method": "fp8", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head"]})
    assert len(spec.gemms()) == 208 + 96  # a and b are FP8 by this config
    assert "layers.0.gdn_ba" in spec.merge_groups()


def test_quantization_config_inside_config_json(cfg27b):
    cfg = dict(cfg27b, quantization_config={"quant_method": "fp8", "modules_to_not_convert": [
        "in_proj_a", "linear_attn.in_proj_b", "lm_head"]})  # bare trailing names match
    spec = tower_spec_from_config(cfg)
    assert (spec.quant_method, spec.scheme_hint, len(spec.gemms())) == ("fp8", "per_tensor", 208)
    override = tower_spec_from_config(cfg, quant_config={"quant_method": "awq"})
    assert override.fp8_bytes() == 0 and override.quant_method == "awq"
    assert any("replaces" in n for n in override.notes)
    assert any("not FP8" in n for n in override.notes)


def test_names_match_on_dot_boundaries(llama_cfg):
    cfg = dict(llama_cfg, num_hidden_layers=12)
    spec = tower_spec_from_config(cfg, quant_config={
        "quant_method": "fp8", "modules_to_not_convert": ["model.layers.1"]})
    assert fp8_projs(spec, 1) == []
    assert len(fp8_projs(spec, 10)) == 7 and len(fp8_projs(spec, 11)) == 7


def test_compressed_tensors_channel(cfg27b):
    qc = {"quant_method": "compressed-tensors", "format": "float-quantized",
          "config_groups": {"group_0": {
              "targets": ["Linear"],
              "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False},
              "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                    "dynamic": True}}},
          "ignore": ["lm_head", "re:.*linear_attn\\.in_proj_[ab]$", "re:model.visual.*"]}
    spec = tower_spec_from_config(cfg27b, quant_config=qc)
    assert (spec.scheme_hint, len(spec.gemms())) == ("channel_token", 208)


def _ct(strategy, ignore=(), targets=("Linear",), **weights):
    return {"quant_method": "compressed-tensors", "ignore": list(ignore), "config_groups": {
        "group_0": {"targets": list(targets),
                    "weights": {"num_bits": 8, "type": "float", "strategy": strategy, **weights},
                    "input_activations": {"num_bits": 8, "type": "float",
                                          "strategy": "tensor"}}}}


def test_compressed_tensors_ignore_exact_and_regex(qwen35_text):
    spec = tower_spec_from_config(qwen35_text, quant_config=_ct(
        "tensor", ignore=["re:.*self_attn.*", "model.layers.0.linear_attn.out_proj"]))
    assert spec.scheme_hint == "per_tensor"
    assert fp8_projs(spec, 3) == ["gate_proj", "up_proj", "down_proj"]
    assert "out_proj" not in fp8_projs(spec, 0) and "out_proj" in fp8_projs(spec, 1)
    # compressed-tensors entries are exact names: a bare suffix matches nothing
    bare = tower_spec_from_config(qwen35_text, quant_config=_ct("tensor", ignore=["out_proj"]))
    assert "out_proj" in fp8_projs(bare, 0)


def test_compressed_tensors_targets_and_block(qwen35_text):
    spec = tower_spec_from_config(qwen35_text, quant_config=_ct(
        "block", targets=["re:.*mlp\\..*"], block_structure=[128, 128]))
    assert spec.scheme_hint == "block128"
    assert fp8_projs(spec, 0) == ["gate_proj", "up_proj", "down_proj"]
    # a more specific (exact-name) non-FP8 group wins over the class target
    qc = _ct("channel")
    qc["config_groups"]["group_1"] = {"targets": ["model.layers.3.self_attn.q_proj"],
                                      "weights": {"num_bits": 4, "type": "float"}}
    mixed = tower_spec_from_config(qwen35_text, quant_config=qc)
    assert "q_proj" not in fp8_projs(mixed, 3) and "k_proj" in fp8_projs(mixed, 3)
    # channel weights + tensor activations: per_tensor with an (N,) scale, as the loader
    # maps them (test_format_audit6), not a channel_token hint with a note
    assert mixed.scheme_hint == "per_tensor" and not any("activations" in n for n in mixed.notes)


def test_modelopt_hf_quant_config(qwen35_text, tmp_path):
    hf_quant = {"producer": {"name": "modelopt", "version": "0.37.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None,
                                 "exclude_modules": ["lm_head", "*in_proj_a", "*in_proj_b",
                                                     "model.layers.*.mlp*"]}}
    (tmp_path / "config.json").write_text(json.dumps(qwen35_text))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    spec = get_spec(tmp_path)
    assert (spec.name, spec.quant_method, spec.scheme_hint) == (tmp_path.name, "modelopt",
                                                                "per_tensor")
    assert fp8_projs(spec, 0) == ["in_proj_qkv", "in_proj_z", "out_proj"]
    assert fp8_projs(spec, 3) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert get_spec(tmp_path / "config.json").quant_method == "modelopt"


def test_modelopt_mixed_precision(qwen35_text):
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["mtp*"],
          "quantized_layers": {"model.layers.0.linear_attn.out_proj": {"quant_algo": "FP8"},
                               "model.layers.3.self_attn": {"quant_algo": "FP8"},
                               "model.layers.3.mlp": {"quant_algo": "NVFP4"}}}
    spec = tower_spec_from_config(qwen35_text, quant_config=qc)
    assert spec.scheme_hint == "per_tensor"
    assert [lin.name for lin in spec.all_linears if lin.fp8] == [
        "layers.0.linear_attn.out_proj"] + [f"layers.3.self_attn.{p}_proj" for p in "qkvo"]


@pytest.mark.parametrize("qc, hint", [
    ({"quant_method": "fp8"}, "per_tensor"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "block128"),
    ({"quant_method": "fp8", "weight_block_size": [64, 64]}, None),
    ({"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]}, "channel_token"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "per_tensor"),
    ({"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN"}, "channel_token"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, None),
    ({"quant_method": "gptq", "bits": 4}, None),
    (None, None),
])
def test_scheme_hints(qc, hint):
    assert parse_quant_config(qc).scheme_hint == hint


def test_non_fp8_methods_make_nothing_fp8(qwen35_text):
    for qc in ({"quant_method": "modelopt", "quant_algo": "NVFP4"},
               {"quant_method": "bitsandbytes", "load_in_4bit": True}):
        spec = tower_spec_from_config(qwen35_text, quant_config=qc)
        assert spec.gemms("all") == [] and spec.fp8_bytes("all") == 0
