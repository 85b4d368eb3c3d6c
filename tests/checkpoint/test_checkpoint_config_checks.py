"""Quantization configs the checkpoint loader must refuse (or warn about) instead of loading
something else than the checkpoint says: an FP8 config over bf16 tensors, malformed
ignore/targets lists and block sizes, non-bool ``dynamic``, a bad index, FP8 weights of another
dtype without a scale, and stored input scales that a dynamic config leaves unused."""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch
from ckpt_writer import build, save

from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.models import parse_quant_config
from fp8tower.models.spec import ConfigError

Q = "model.layers.0.self_attn.q_proj"
N_LINEARS = 14  # 2 layers x 7 projections (lm_head is ignored)


def _open(tmp_path, spec):
    return open_checkpoint(save(spec, tmp_path))


def _group(spec) -> dict:
    return spec.config["quantization_config"]["config_groups"]["group_0"]


# --- 1. an FP8 config over tensors that hold no FP8 weight ------------------------------------


@pytest.mark.parametrize("fmt,preset,method", [
    ("block_fp8", "FP8", "fp8"),
    ("compressed_tensors", "FP8", "compressed-tensors"),
    ("compressed_tensors", "FP8_DYNAMIC", "compressed-tensors"),
    ("modelopt", "FP8", "modelopt"),
])
def test_fp8_config_over_bf16_tensors(tmp_path, fmt, preset, method):
    spec = build("unquantized")
    spec.config["quantization_config"] = build(fmt, preset=preset).config["quantization_config"]
    with pytest.raises(CheckpointError, match=(
            rf"config.json: the quantization config declares FP8 quantization \(quant_method "
            rf"'{method}'\), but no FP8 weight was found: no '\*.weight' has an FP8 dtype")) as e:
        _open(tmp_path, spec)
    assert "\n" not in str(e.value)


def test_modelopt_hf_quant_config_over_bf16_tensors(tmp_path):
    spec = build("unquantized")
    spec.hf_quant_config = build("modelopt", config_in="hf_quant_config").hf_quant_config
    with pytest.raises(CheckpointError, match=r"hf_quant_config.json: .*quant_method 'modelopt'"
                       r"\), but no FP8 weight was found"):
        _open(tmp_path, spec)


def test_from_pretrained_fp8_config_over_bf16_tensors(tmp_path):
    pytest.importorskip("transformers")
    from fp8tower.hf.pretrained import from_pretrained

    spec = build("unquantized")
    spec.config["quantization_config"] = build("block_fp8").config["quantization_config"]
    with pytest.raises(CheckpointError, match="no FP8 weight was found"):
        from_pretrained(save(spec, tmp_path), backend="reference")


# --- 2. compressed-tensors ignore / targets ------------------------------------------------


@pytest.mark.parametrize("field,value,message", [
    ("ignore", [None], (r"quantization_config.ignore\[0\]: expected a module name or 're:' "
     r"regex \(a string\), got None")),
    ("ignore", "lm_head", (r"quantization_config.ignore: expected a list of module names / 're:' "
     r"regexes, got 'lm_head'")),
    ("ignore", ["re:(q_proj"], (r"quantization_config.ignore\[0\]: expected a valid regex after "
     r"'re:' \(missing \), unterminated subpattern at position 0\), got 're:\(q_proj'")),
    ("targets", ["re:(Linear"], (r"quantization_config.config_groups.group_0.targets\[0\]: "
     r"expected a valid regex after 're:' \(.*\), got 're:\(Linear'")),
    ("targets", ["Linear", 3], (r"quantization_config.config_groups.group_0.targets\[1\]: "
     r"expected a module name or 're:' regex \(a string\), got 3")),
    ("targets", "Linear", (r"quantization_config.config_groups.group_0.targets: expected a list "
     r"of module names/regexes, got 'Linear'")),
])
def test_ct_ignore_and_targets(tmp_path, field, value, message):
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    if field == "ignore":
        spec.config["quantization_config"]["ignore"] = value
    else:
        _group(spec)["targets"] = value
    with pytest.raises(CheckpointError, match=message) as e:
        _open(tmp_path, spec)
    assert "\n" not in str(e.value)


def test_ct_ignore_null_is_empty(tmp_path):
    spec = build("compressed_tensors", preset="FP8_DYNAMIC", ignore=())
    spec.config["quantization_config"]["ignore"] = None
    assert len(_open(tmp_path, spec).linear_names()) == N_LINEARS


@pytest.mark.parametrize("field,value,message", [
    ("ignore", [None], r"quantization_config.ignore: got \[None\]"),
    ("ignore", "lm_head", r"quantization_config.ignore: got 'lm_head'"),
    ("ignore", ["re:(q_proj"], (r"quantization_config.ignore: got 're:\(q_proj'; expected a "
     r"valid regular expression")),
    ("targets", ["re:(Linear"], (r"quantization_config.config_groups.group_0.targets: got "
     r"'re:\(Linear'; expected a valid regular expression")),
    ("targets", [None], r"quantization_config.config_groups.group_0.targets: got \[None\]"),
])
def test_parse_quant_config_ct_ignore_and_targets(field, value, message):
    qc = build("compressed_tensors", preset="FP8_DYNAMIC").config["quantization_config"]
    if field == "ignore":
        qc["ignore"] = value
    else:
        qc["config_groups"]["group_0"]["targets"] = value
    with pytest.raises(ConfigError, match=message):
        parse_quant_config(qc)


# --- 3. block_fp8 weight_block_size ------------------------------------------------------------


@pytest.mark.parametrize("value", [128, [128], [128, "128"], [True, 128], [128, 128, 128],
                                   [-128, 128], "128x128"])
def test_block_size_not_two_ints(tmp_path, value):
    spec = build("block_fp8")
    spec.config["quantization_config"]["weight_block_size"] = value
    with pytest.raises(CheckpointError, match=(
            r"config.json: quantization_config.weight_block_size: expected a list of two "
            r"positive integers \(\[128, 128\]\), got " + re.escape(repr(value)) + "$")):
        _open(tmp_path, spec)


# --- 4. the safetensors index ------------------------------------------------------------------


@pytest.mark.parametrize("value", [5, None, ["model-00001-of-00002.safetensors"]])
def test_index_value_not_a_file_name(tmp_path, value):
    path = save(build("block_fp8"), tmp_path, shards=2)
    index_file = path / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    index["weight_map"]["model.norm.weight"] = value
    index_file.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=(
            r"model.safetensors.index.json: weight_map\['model.norm.weight'\]: expected a "
            r"shard file name \(a string\), got ")) as e:
        open_checkpoint(path)
    assert repr(value) in str(e.value)


# --- 5. compressed-tensors input_activations.dynamic -------------------------------------------


@pytest.mark.parametrize("preset,value", [("FP8", "false"), ("FP8", 0), ("FP8_DYNAMIC", "true"),
                                          ("FP8", None)])
def test_ct_dynamic_not_a_bool(tmp_path, preset, value):
    spec = build("compressed_tensors", preset=preset)
    _group(spec)["input_activations"]["dynamic"] = value
    with pytest.raises(CheckpointError, match=(
            r"quantization_config.config_groups.group_0.input_activations.dynamic: expected "
            r"true or false, got " + re.escape(repr(value)))):
        _open(tmp_path, spec)


def test_ct_dynamic_missing_is_static(tmp_path):
    spec = build("compressed_tensors", preset="FP8")
    del _group(spec)["input_activations"]["dynamic"]  # compressed-tensors' default: False
    assert _open(tmp_path, spec).linear_spec(Q).input_scale == f"{Q}.input_scale"


# --- 6. stored input scales a dynamic config leaves unused: one warning -----------------------


def test_ct_dynamic_with_stored_input_scales_warns_once(tmp_path):
    spec = build("compressed_tensors", preset="FP8")
    _group(spec)["input_activations"]["dynamic"] = True
    with pytest.warns(UserWarning) as record:
        ck = _open(tmp_path, spec)
    unused = [str(w.message) for w in record if "input_scale" in str(w.message)]
    assert len(unused) == 1
    msg = unused[0]
    assert (f"{N_LINEARS} stored input_scale tensor(s) are not used (e.g. "
            "'model.layers.0.mlp.down_proj.input_scale')") in msg
    assert "config.json" in msg and "dynamic" in msg
    assert ck.linear_spec(Q).input_scale is None


def test_modelopt_per_channel_with_stored_input_scale_warns(tmp_path):
    spec = build("modelopt", preset="FP8_PER_CHANNEL_PER_TOKEN")
    spec.tensors[f"{Q}.input_scale"] = torch.tensor(0.5)
    with pytest.warns(UserWarning, match=rf"1 stored input_scale tensor\(s\) are not used "
                      rf"\(e.g. '{Q}.input_scale'\)"):
        ck = _open(tmp_path, spec)
    assert ck.linear_spec(Q).input_scale is None


@pytest.mark.parametrize("fmt,preset", [("compressed_tensors", "FP8"), ("modelopt", "FP8"),
                                        ("compressed_tensors", "FP8_DYNAMIC"), ("block_fp8", "")])
def test_used_input_scales_do_not_warn(tmp_path, fmt, preset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _open(tmp_path, build(fmt, preset=preset))


# --- 7. an FP8 weight of another dtype without its scale --------------------------------------


@pytest.mark.parametrize("fmt,preset,scale", [
    ("compressed_tensors", "FP8_DYNAMIC", "weight_scale"),
    ("block_fp8", "", "weight_scale_inv"),
    ("modelopt", "FP8", "weight_scale"),
])
def test_e5m2_weight_without_scale(tmp_path, fmt, preset, scale):
    spec = build(fmt, preset=preset)
    spec.tensors[f"{Q}.weight"] = spec.tensors[f"{Q}.weight"].float().to(torch.float8_e5m2)
    del spec.tensors[f"{Q}.{scale}"]
    with pytest.raises(CheckpointError, match=(
            rf"tensor '{Q}.weight': FP8 weight must have dtype F8_E4M3 \(torch.float8_e4m3fn\), "
            rf"got F8_E5M2 \(and its scale '{Q}.{scale}' is missing\)")):
        _open(tmp_path, spec)
