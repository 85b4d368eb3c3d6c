"""Every error path names the offending field (and says what was expected)."""

from __future__ import annotations

import pytest

from fp8tower.models import (
    SUPPORTED_MODEL_TYPES,
    ConfigError,
    get_spec,
    load_config,
    tower_spec_from_config,
)


def raises_on(field, fn, *args, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}:") or f": {field}:" in str(info.value)
    assert "expected" in str(info.value)
    return info.value


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "linear_num_key_heads",
                                   "linear_value_head_dim", "head_dim", "num_key_value_heads",
                                   "intermediate_size"])
def test_missing_field(qwen35_text, field):
    del qwen35_text[field]
    err = raises_on(field, tower_spec_from_config, qwen35_text)
    assert "missing" in str(err) and "positive integer" in str(err)


@pytest.mark.parametrize("value", ["5120", 0, -8, True, 51.2])
def test_malformed_size(qwen35_text, value):
    qwen35_text["hidden_size"] = value
    err = raises_on("hidden_size", tower_spec_from_config, qwen35_text)
    assert repr(value) in str(err)


def test_message_carries_the_model_name(qwen35_text):
    del qwen35_text["head_dim"]
    with pytest.raises(ConfigError, match=r"^mymodel: head_dim: missing; expected"):
        tower_spec_from_config(qwen35_text, name="mymodel")


def test_layer_types_length(qwen35_text):
    qwen35_text["layer_types"] = qwen35_text["layer_types"][:-1]
    err = raises_on("len(layer_types)", tower_spec_from_config, qwen35_text)
    assert "got 7" in str(err) and "num_hidden_layers = 8" in str(err)


def test_unknown_layer_type(qwen35_text):
    qwen35_text["layer_types"][2] = "sliding_attention"
    err = raises_on("layer_types[2]", tower_spec_from_config, qwen35_text)
    assert "'sliding_attention'" in str(err)


def test_layer_types_not_a_list(qwen35_text):
    qwen35_text["layer_types"] = "linear_attention"
    raises_on("layer_types", tower_spec_from_config, qwen35_text)


def test_no_layer_pattern(qwen35_text):
    del qwen35_text["layer_types"]
    err = raises_on("layer_types", tower_spec_from_config, qwen35_text)
    assert "full_attention_interval" in str(err)


def test_contradictory_interval(qwen35_text):
    qwen35_text["full_attention_interval"] = 2
    err = raises_on("full_attention_interval", tower_spec_from_config, qwen35_text)
    assert "layer 1" in str(err)
    qwen35_text["full_attention_interval"] = 4  # agrees: fine
    tower_spec_from_config(qwen35_text)


def test_heads_not_a_multiple_of_kv_heads(qwen35_text, llama_cfg):
    qwen35_text["num_key_value_heads"] = 3
    err = raises_on("num_attention_heads", tower_spec_from_config, qwen35_text)
    assert "num_key_value_heads (3)" in str(err)
    llama_cfg["num_key_value_heads"] = 5
    raises_on("num_attention_heads", tower_spec_from_config, llama_cfg)


def test_gdn_value_heads_not_a_multiple_of_key_heads(qwen35_text):
    qwen35_text["linear_num_value_heads"] = 6
    raises_on("linear_num_value_heads", tower_spec_from_config, qwen35_text)


def test_head_dim_cannot_be_derived(llama_cfg):
    llama_cfg["hidden_size"] = 1000
    err = raises_on("hidden_size", tower_spec_from_config, llama_cfg)
    assert "num_attention_heads" in str(err) and "head_dim" in str(err)


def test_attn_output_gate_not_bool(qwen35_text):
    qwen35_text["attn_output_gate"] = "yes"
    raises_on("attn_output_gate", tower_spec_from_config, qwen35_text)


def test_unknown_model_type(qwen35_text):
    qwen35_text["model_type"] = "gpt_oss"
    err = raises_on("model_type", tower_spec_from_config, qwen35_text)
    assert all(t in str(err) for t in SUPPORTED_MODEL_TYPES)
    del qwen35_text["model_type"]
    raises_on("model_type", tower_spec_from_config, qwen35_text)


def test_text_config_not_an_object():
    raises_on("text_config", tower_spec_from_config, {"model_type": "qwen3_5",
                                                      "text_config": [1, 2]})


@pytest.mark.parametrize("qc, field", [
    ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"},
     "quantization_config.modules_to_not_convert"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"]}},
      "ignore": ["re:(unclosed"]}, "quantization_config.ignore"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "quantization_config.weight_block_size"),
    ({"weight_block_size": [128, 128]}, "quantization_config.quant_method"),
    ({"quant_method": 8}, "quantization_config.quant_method"),
    ({"quant_method": "compressed-tensors"}, "quantization_config.config_groups"),
    ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"},
     "quantization_config.quantized_layers"),
    ("fp8", "quantization_config"),
])
def test_bad_quant_config(qwen35_text, qc, field):
    raises_on(field, tower_spec_from_config, qwen35_text, quant_config=qc)


def test_unknown_model_name_lists_shipped_ones():
    err = raises_on("model", load_config, "qwen9-1t")
    assert "qwen3.5-27b" in str(err) and "tiny-hybrid" in str(err)
    raises_on("model", get_spec, "/nonexistent/config.json")


def test_bad_json_files(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    err = raises_on("config.json", load_config, tmp_path)
    assert "valid JSON" in str(err)
    (tmp_path / "config.json").write_text("[1, 2]")
    raises_on("config.json", load_config, tmp_path)


def test_bad_parts():
    spec = get_spec("tiny-hybrid")
    with pytest.raises(ValueError, match="parts"):
        spec.linears(("gdn", "ffn"))
    with pytest.raises(ValueError, match="parts"):
        spec.shapes(())
