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
     r"of module names / 're:' regexes, got 'Linear'")),
    ("targets", [], (r"quantization_config.config_groups.group_0.targets: expected a non-empty "
     r"list of module names / 're:' regexes, got \[\]")),
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


# --- 8. KV-cache scales: read by no one here, one warning -------------------------------------


def _with_kv_scales(spec):
    """ModelOpt's FP8 KV cache: k_proj.k_scale, v_proj.v_scale per layer (compressed-tensors
    stores k_proj.output_scale, v_proj.output_scale)."""
    for layer in range(2):
        p = f"model.layers.{layer}.self_attn"
        if spec.format == "modelopt":
            spec.tensors[f"{p}.k_proj.k_scale"] = torch.tensor(0.02)
            spec.tensors[f"{p}.v_proj.v_scale"] = torch.tensor(0.03)
        else:
            spec.tensors[f"{p}.k_proj.output_scale"] = torch.tensor([0.02])
            spec.tensors[f"{p}.v_proj.output_scale"] = torch.tensor([0.03])
    return spec


@pytest.mark.parametrize("fmt", ["modelopt", "compressed_tensors"])
def test_kv_cache_scales_warn_once(tmp_path, fmt):
    with pytest.warns(UserWarning) as record:
        ck = _open(tmp_path, _with_kv_scales(build(fmt, preset="FP8")))
    kv = [str(w.message) for w in record if "KV-cache" in str(w.message)]
    assert len(kv) == 1 and "4 KV-cache scale tensor(s) are not used" in kv[0]
    assert "write_merged copies them through" in kv[0]
    assert len(ck.linear_names()) == N_LINEARS


# --- 9. fp8tower's own format: ignore and module names -----------------------------------------


@pytest.fixture(scope="module")
def native_dir(tmp_path_factory):
    pytest.importorskip("transformers")  # fp8tower.hf.write imports it through hf
    from fp8tower.hf import write_merged

    root = tmp_path_factory.mktemp("native")
    write_merged(save(build("compressed_tensors", preset="FP8_DYNAMIC"), root / "src"),
                 root / "out")
    return root / "out"


def _native(native_dir, tmp_path, edit):
    out = tmp_path / "native"
    out.mkdir()
    for f in native_dir.iterdir():
        (out / f.name).symlink_to(f)
    cfg = json.loads((native_dir / "config.json").read_text())
    edit(cfg["quantization_config"])
    (out / "config.json").unlink()
    (out / "config.json").write_text(json.dumps(cfg))
    return out


GU = "model.layers.0.mlp.gate_up_proj"


@pytest.mark.parametrize("edit,message", [
    (lambda qc: qc.update(ignore="lm_head"),
     r"quantization_config.ignore: expected a list of module names, got 'lm_head'"),
    (lambda qc: qc.update(ignore=["lm_head", 3]),
     r"quantization_config.ignore\[1\]: expected a module name \(a string\), got 3"),
    (lambda qc: qc["modules"].update({"model.layers.0.mlp.up_proj": {"scheme": "channel_token"}}),
     (rf"quantization_config.merged.{GU}.members: 'model.layers.0.mlp.up_proj' is also in "
      r"quantization_config.modules; expected each module in one place")),
    (lambda qc: qc["merged"].update({"model.layers.0.self_attn.qkv_proj": {
        "members": ["model.layers.0.mlp.gate_proj", "model.layers.0.self_attn.k_proj"],
        "sizes": [320, 64]}}),
     (r"merged.model.layers.0.self_attn.qkv_proj.members: 'model.layers.0.mlp.gate_proj' is "
      rf"also in quantization_config.merged.{GU}.members")),
    (lambda qc: qc["ignore"].append("model.layers.1.mlp.gate_proj"),
     (r"quantization_config.ignore: 'model.layers.1.mlp.gate_proj' is also in "
      r"quantization_config.merged.model.layers.1.mlp.gate_up_proj.members")),
])
def test_native_names(native_dir, tmp_path, edit, message):
    with pytest.raises(CheckpointError, match=message) as e:
        open_checkpoint(_native(native_dir, tmp_path, edit))
    assert "config.json: " in str(e.value)


# --- 10. safetensors dtypes: every one sized, an unknown one refused ---------------------------


def test_bytes_of_every_torch_dtype_safetensors_writes(tmp_path):
    spec = build("block_fp8")
    extra = {"u16": torch.uint16, "u32": torch.uint32, "u64": torch.uint64,
             "c64": torch.complex64, "fnuz": torch.float8_e4m3fnuz, "f64": torch.float64}
    for name, dtype in extra.items():
        spec.tensors[f"model.extra_{name}"] = torch.zeros(1000, dtype=dtype)
    ck = _open(tmp_path, spec)
    assert ck.nbytes() == sum(t.numel() * t.element_size() for t in spec.tensors.values())
    by = ck.describe()["bytes_by_dtype"]
    assert (by["U16"], by["U32"], by["U64"], by["C64"], by["F8_E4M3FNUZ"]) == (
        2000, 4000, 8000, 8000, 1000)


def _raw_safetensors(path, header: dict, data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


@pytest.mark.parametrize("meta,message", [
    ({"dtype": "F3", "shape": [2], "data_offsets": [0, 2]},
     r"model.safetensors: tensor 'model.odd': unknown dtype 'F3'; safetensors defines BOOL, F4"),
    ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]},
     r"tensor 'model.odd': F32 of shape \[3\] is 12 bytes, its data_offsets span 8"),
    ({"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}, None),  # 4 bits each: 2 bytes
    ({"dtype": "F32", "shape": [2]},
     r"tensor 'model.odd': header entry must have dtype, shape and data_offsets"),
])
def test_header_dtype_and_size(tmp_path, meta, message):
    (tmp_path / "config.json").write_text(json.dumps(build("unquantized").config))
    size = meta.get("data_offsets", [0, 8])[1]
    _raw_safetensors(tmp_path / "model.safetensors", {"model.odd": meta}, b"\0" * size)
    if message is None:
        assert open_checkpoint(tmp_path).nbytes() == 2
        return
    with pytest.raises(CheckpointError, match=message):
        open_checkpoint(tmp_path)
