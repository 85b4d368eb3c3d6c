"""Every malformed checkpoint gets a one-line CheckpointError naming the file and the tensor or
field, and what was expected."""

from __future__ import annotations

import json
import re

import pytest
import torch
from ckpt_writer import build, save

from fp8tower.checkpoint import CheckpointError, open_checkpoint

Q = "model.layers.0.self_attn.q_proj"  # 192 x 192: block scales (2, 2)


def _drop(name):
    def f(spec):
        del spec.tensors[name]
    return f


def _set(name, value):
    def f(spec):
        spec.tensors[name] = value(spec.tensors[name])
    return f


def _rename(old, new):
    def f(spec):
        spec.tensors[new] = spec.tensors.pop(old)
    return f


def _add(name, value):
    def f(spec):
        spec.tensors[name] = value
    return f


def _qc(**kw):
    def f(spec):
        spec.config["quantization_config"].update(kw)
    return f


def _ct_group(**kw):
    def f(spec):
        g = spec.config["quantization_config"]["config_groups"]["group_0"]
        for k, v in kw.items():
            part, field = k.split("__")
            g[part][field] = v
    return f


def _group(**kw):
    def f(spec):
        spec.config["quantization_config"]["config_groups"]["group_0"].update(kw)
    return f


# (id, format, preset, mutation, raised at "open" or "load", message regex)
CASES = [
    ("missing weight scale", "modelopt", "FP8", _drop(f"{Q}.weight_scale"), "open",
     (rf"model.safetensors: tensor '{Q}.weight': missing scale: expected tensor "
     rf"'{Q}.weight_scale' \(per_tensor scale of shape \[\] or \[1\]\)")),
    ("missing input scale", "modelopt", "FP8", _drop(f"{Q}.input_scale"), "open",
     (rf"tensor '{Q}.weight': missing scale: static per_tensor activations need tensor "
     rf"'{Q}.input_scale'")),
    ("missing block scale", "block_fp8", "", _drop(f"{Q}.weight_scale_inv"), "open",
     (rf"missing scale: expected tensor '{Q}.weight_scale_inv' \(block128 scale of shape "
      r"\[2, 2\]\)")),
    ("block scale under the multiplier's name", "block_fp8", "",
     _rename(f"{Q}.weight_scale_inv", f"{Q}.weight_scale"), "open",
     (rf"missing scale: expected tensor '{Q}.weight_scale_inv' .*; the checkpoint has "
      rf"'{Q}.weight_scale' instead")),
    ("block scale under DeepSeek's own name", "block_fp8", "",
     _rename(f"{Q}.weight_scale_inv", f"{Q}.scale"), "open",
     (rf"missing scale: expected tensor '{Q}.weight_scale_inv' .*; the checkpoint has "
      rf"'{Q}.scale' instead, DeepSeek's own naming, which fp8tower does not read")),
    ("channel scale under the inverse's name", "compressed_tensors", "FP8_DYNAMIC",
     _rename(f"{Q}.weight_scale", f"{Q}.weight_scale_inv"), "open",
     rf"expected tensor '{Q}.weight_scale' .*; the checkpoint has '{Q}.weight_scale_inv' instead"),
    ("block scale wrong shape", "block_fp8", "", _set(f"{Q}.weight_scale_inv", lambda t: t[:1]),
     "open", rf"tensor '{Q}.weight_scale_inv': scale must have shape \[2, 2\], got \[1, 2\]"),
    ("channel scale wrong shape", "compressed_tensors", "FP8_DYNAMIC",
     _set(f"{Q}.weight_scale", lambda t: t.reshape(1, -1)), "open",
     rf"tensor '{Q}.weight_scale': scale must have shape \[192, 1\] or \[192\], got \[1, 192\]"),
    ("tensor scale wrong shape", "compressed_tensors", "FP8",
     _set(f"{Q}.weight_scale", lambda t: t.repeat(2)), "open",
     rf"tensor '{Q}.weight_scale': scale must have shape \[1\] or \[\], got \[2\]"),
    ("scale wrong dtype", "modelopt", "FP8",
     _set(f"{Q}.weight_scale", lambda t: t.to(torch.int32)), "open",
     rf"tensor '{Q}.weight_scale': scale must have dtype F32, BF16 or F16, got I32"),
    ("input scale fp8", "modelopt", "FP8",
     _set(f"{Q}.input_scale", lambda t: t.to(torch.float8_e4m3fn)), "open",
     rf"tensor '{Q}.input_scale': scale must have dtype F32, BF16 or F16, got F8_E4M3"),
    ("inf scale", "modelopt", "FP8", _set(f"{Q}.weight_scale", lambda t: t * float("inf")),
     "load", (rf"tensor '{Q}.weight_scale': scale must be finite and positive; 1 value\(s\) are "
     r"not, the first is inf at index \(\)")),
    ("nan block scale", "block_fp8", "",
     _set(f"{Q}.weight_scale_inv", lambda t: t.index_put((torch.tensor(1), torch.tensor(0)),
                                                         torch.tensor(float("nan")))),
     "load", (rf"'{Q}.weight_scale_inv': scale must be finite and positive; 1 value\(s\) are not, "
     r"the first is nan at index \(1, 0\)")),
    ("zero channel scale", "compressed_tensors", "FP8_DYNAMIC",
     _set(f"{Q}.weight_scale", lambda t: t.index_fill(0, torch.tensor([5, 7]), 0.0)), "load",
     r"2 value\(s\) are not, the first is 0.0 at index \(5, 0\)"),
    ("negative input scale", "compressed_tensors", "FP8",
     _set(f"{Q}.input_scale", lambda t: -t), "load",
     rf"tensor '{Q}.input_scale': scale must be finite and positive"),
    ("weight not fp8", "modelopt", "FP8",
     _set(f"{Q}.weight", lambda t: t.to(torch.bfloat16)), "open",
     rf"tensor '{Q}.weight': FP8 weight must have dtype F8_E4M3 \(torch.float8_e4m3fn\), got BF16"),
    ("weight e5m2", "block_fp8", "", _set(f"{Q}.weight", lambda t: t.to(torch.float8_e5m2)),
     "open", rf"tensor '{Q}.weight': FP8 weight must have dtype F8_E4M3.*got F8_E5M2"),
    ("scale without weight", "block_fp8", "", _drop(f"{Q}.weight"), "open",
     rf"tensor '{Q}.weight_scale_inv': scale without a weight: '{Q}.weight' is missing"),
    ("ignored but fp8", "compressed_tensors", "FP8", _qc(ignore=["lm_head", Q]), "open",
     (rf"tensor '{Q}.weight': module '{Q}' is in the ignore list of config.json but is stored "
      r"in FP8")),
    ("unknown quant_method", "block_fp8", "", _qc(quant_method="awq"), "open",
     (r"config.json: unknown quantization_config.quant_method 'awq'; fp8tower reads modelopt, "
     r"compressed-tensors, fp8")),
    ("modelopt nvfp4", "modelopt", "FP8", _qc(quant_algo="NVFP4"), "open",
     (r"config.json: quantization_config.quant_algo is 'NVFP4'; fp8tower reads ModelOpt FP8, "
     r"FP8_PER_CHANNEL_PER_TOKEN")),
    ("block size 64", "block_fp8", "", _qc(weight_block_size=[64, 64]), "open",
     r"config.json: quantization_config.weight_block_size: expected \[128, 128\], got \[64, 64\]"),
    ("static block acts", "block_fp8", "", _qc(activation_scheme="static"), "open",
     r"quantization_config.activation_scheme: expected 'dynamic'"),
    ("ct int8", "compressed_tensors", "FP8", _ct_group(weights__type="int"), "open",
     (r"config.json: quantization_config.config_groups.group_0.weights: expected type 'float' "
     r"with num_bits 8")),
    ("ct static token acts", "compressed_tensors", "FP8_DYNAMIC",
     _ct_group(input_activations__dynamic=False), "open",
     r"config_groups.group_0: expected one of the FP8 presets.*'dynamic': False"),
    ("ct pack format", "compressed_tensors", "FP8", _group(format="pack-quantized"), "open",
     r"config_groups.group_0.format: expected 'float-quantized'"),
    # asymmetric / dynamic weights / output quantization: real = (q - zero_point) * scale, or
    # another product; loading q * scale would be silently wrong
    ("ct asymmetric weights", "compressed_tensors", "FP8_DYNAMIC",
     _ct_group(weights__symmetric=False), "open",
     (r"config.json: quantization_config.config_groups.group_0.weights.symmetric: expected "
      r"true \(fp8tower reads no zero points\), got False")),
    ("ct asymmetric acts", "compressed_tensors", "FP8",
     _ct_group(input_activations__symmetric=False), "open",
     r"group_0.input_activations.symmetric: expected true .*, got False"),
    ("ct dynamic weights", "compressed_tensors", "FP8_DYNAMIC",
     _ct_group(weights__dynamic=True), "open",
     (r"group_0.weights.dynamic: expected false \(FP8 weights are stored with their "
      r"scales\), got True")),
    ("ct output acts", "compressed_tensors", "FP8_DYNAMIC",
     _group(output_activations={"num_bits": 8, "type": "float"}), "open",
     r"group_0.output_activations: expected null"),
    ("ct sparse", "compressed_tensors", "FP8_DYNAMIC",
     _qc(sparsity_config={"format": "sparse-24-bitmask", "sparsity_structure": "2:4"}), "open",
     r"quantization_config.sparsity_config.format: expected 'dense'"),
    # tensors under a linear that change its output: refused, named
    ("ct weight zero point", "compressed_tensors", "FP8_DYNAMIC",
     _add(f"{Q}.weight_zero_point", torch.zeros(192, 1).to(torch.float8_e4m3fn)), "open",
     (rf"tensor '{Q}.weight_zero_point': quantized linear '{Q}' has a tensor fp8tower does not "
      r"read, 'weight_zero_point', which would change its output; expected only bias, "
      r"input_scale, weight, weight_scale \(and KV-cache scales\)")),
    ("ct input zero point", "compressed_tensors", "FP8", _add(f"{Q}.input_zero_point",
                                                               torch.zeros(1)), "open",
     rf"'{Q}.input_zero_point': quantized linear '{Q}' has a tensor fp8tower does not read"),
    ("modelopt pre_quant_scale", "modelopt", "FP8", _add(f"{Q}.pre_quant_scale",
                                                         torch.ones(192)), "open",
     rf"'{Q}.pre_quant_scale': quantized linear '{Q}' has a tensor fp8tower does not read"),
    ("block_fp8 o_proj output_scale", "block_fp8", "",
     _add("model.layers.1.self_attn.o_proj.output_scale", torch.ones(())), "open",
     (r"has a tensor fp8tower does not read, 'output_scale'.*expected only bias, input_scale, "
      r"weight, weight_scale_inv")),
    ("nested under a linear", "block_fp8", "", _add(f"{Q}.lora_A.weight", torch.ones(4, 192)),
     "open", rf"quantized linear '{Q}' has a tensor fp8tower does not read, 'lora_A.weight'"),
    ("ct no targets", "compressed_tensors", "FP8",
     _group(targets=["re:.*mlp.*"]), "open",
     (r"tensor 'model.layers.0.self_attn.k_proj.weight': stored in FP8 but no "
     r"quantization_config.config_groups entry targets 'model.layers.0.self_attn.k_proj'")),
]


@pytest.mark.parametrize("fmt,preset,mutate,when,message",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed(tmp_path, fmt, preset, mutate, when, message):
    spec = build(fmt, preset=preset)
    mutate(spec)
    path = save(spec, tmp_path)
    if when == "open":
        with pytest.raises(CheckpointError, match=message) as e:
            open_checkpoint(path)
    else:
        ck = open_checkpoint(path)
        with pytest.raises(CheckpointError, match=message) as e:
            ck.load_linear(Q)
        ck.load_linear("model.layers.1.self_attn.q_proj")  # the others still load
    assert "\n" not in str(e.value)


def test_shard_missing_from_index(tmp_path):
    path = save(build("compressed_tensors"), tmp_path, shards=3)
    (path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match=re.escape(
            f"{path / 'model.safetensors.index.json'}: shard 'model-00002-of-00003.safetensors' "
            "(holding ") + r"\d+ tensor\(s\), e.g. '.*'\) is missing from " + re.escape(str(path))):
        open_checkpoint(path)


def test_index_names_tensor_its_shard_lacks(tmp_path):
    path = save(build("block_fp8"), tmp_path, shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="tensor 'model.extra.weight' is mapped to "
                       "'model-00001-of-00002.safetensors', which does not hold it"):
        open_checkpoint(path)


def test_fp8_tensors_without_quant_config(tmp_path):
    spec = build("block_fp8")
    del spec.config["quantization_config"]
    with pytest.raises(CheckpointError, match=r"tensor '.*': dtype F8_E4M3, but .*config.json has "
                       "no quantization_config"):
        open_checkpoint(save(spec, tmp_path))


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="nope: no such file or directory .*downloads "
                       "nothing"):
        open_checkpoint(tmp_path / "nope")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointError, match="afile: not a directory"):
        open_checkpoint(tmp_path / "afile")
    with pytest.raises(CheckpointError, match=r"config.json: missing"):
        open_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"no \*.safetensors files"):
        open_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"config.json: not valid JSON"):
        open_checkpoint(tmp_path)


def test_unknown_linear(tmp_path):
    ck = open_checkpoint(save(build("modelopt"), tmp_path))
    with pytest.raises(CheckpointError, match="cannot load 'model.norm' as an FP8 linear: no such "
                       "quantized linear"):
        ck.load_linear("model.norm")
    with pytest.raises(CheckpointError, match="no tensor 'model.nope.weight' in the checkpoint"):
        ck.load_tensor("model.nope.weight")
