"""fp8tower.models audit: a spec reads what the checkpoint loaders and transformers read.

ModelOpt configs that keep quant_algo in hf_quant_config.json or under "quantization"; ignore
lists matched by each loader's own rule; a group an ignore list splits stays unmerged;
malformed compressed-tensors groups are ConfigErrors; each model type's defaults for fields
config.json leaves out; biases recorded per linear and posed by `fp8tower tune --model`.
"""

from __future__ import annotations

import copy
import json
import re
from functools import partial
from types import SimpleNamespace

import pytest

from fp8tower.models import ConfigError, get_spec, tower_spec_from_config

LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "head_dim": 32, "vocab_size": 128}


def fp8_names(spec) -> set[str]:
    return {lin.name for lin in spec.all_linears if lin.fp8}


def _raises(field, fn, *args, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kw)
    assert info.value.field == field, info.value
    assert "expected" in str(info.value) and "\n" not in str(info.value)
    return info.value


# --- 1. ModelOpt: quant_algo in hf_quant_config.json, or under "quantization" ------------------


def test_modelopt_config_json_naming_only_the_method_reads_hf_quant_config(tmp_path):
    cfg = dict(LLAMA, quantization_config={"quant_method": "modelopt"})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {"quant_algo": "FP8", "exclude_modules": ["lm_head",
                                                                  "model.layers.1.mlp*"]}}))
    spec = get_spec(tmp_path)
    assert (spec.quant_method, spec.scheme_hint) == ("modelopt", "per_tensor")
    off = {lin.name for lin in spec.all_linears if not lin.fp8}
    assert off == {f"layers.1.mlp.{p}_proj" for p in ("gate", "up", "down")}
    assert any("names only the method" in n for n in spec.notes)
    # without hf_quant_config.json there is no algo: an error naming the field, not "no FP8"
    _raises("quantization_config.quant_algo", tower_spec_from_config, cfg)


@pytest.mark.parametrize("algo, hint", [("FP8", "per_tensor"),
                                        ("FP8_PER_CHANNEL_PER_TOKEN", "channel_token")])
def test_modelopt_nested_quantization_in_config_json(algo, hint):
    cfg = dict(LLAMA, quantization_config={
        "quant_method": "modelopt", "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": algo, "exclude_modules": ["lm_head", "o_proj"]}})
    spec = tower_spec_from_config(cfg)
    assert (spec.quant_method, spec.scheme_hint) == ("modelopt", hint)
    assert {lin.proj for lin in spec.all_linears if not lin.fp8} == {"o_proj"}
    assert len(fp8_names(spec)) == 4 * 6


def test_loader_and_spec_share_modelopt_algo():
    from fp8tower.checkpoint import modelopt
    from fp8tower.quant_rules import modelopt_algo

    assert modelopt._algo_of is modelopt_algo


# --- 2. ignore lists: each format's loader rule ----------------------------------------------


def _loader_is_ignored(method: str, qc: dict):
    """The loader's own is_ignored for ``qc`` (checkpoint/<format>.py), without a checkpoint."""
    from fp8tower.checkpoint.block_fp8 import BlockFp8Checkpoint
    from fp8tower.checkpoint.compressed_tensors import CompressedTensorsCheckpoint
    from fp8tower.checkpoint.modelopt import ModelOptCheckpoint

    if method == "fp8":
        me = SimpleNamespace(ignore=qc.get("modules_to_not_convert") or [],
                             ignored_layers=set(qc.get("ignored_layers") or []))
        return partial(BlockFp8Checkpoint.is_ignored, me)
    if method == "modelopt":
        me = SimpleNamespace(ignore=qc.get("exclude_modules") or qc.get("ignore") or [])
        return partial(ModelOptCheckpoint.is_ignored, me)
    me = SimpleNamespace(ignore=qc.get("ignore") or [])
    return partial(CompressedTensorsCheckpoint.is_ignored, me)


CT_GROUP = {"group_0": {"targets": ["Linear"], "weights": {
    "num_bits": 8, "type": "float", "strategy": "channel"}, "input_activations": {
    "num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}


@pytest.mark.parametrize("qc", [
    # a regex, as transformers reads it (the glob reading matched nothing)
    {"quant_method": "fp8", "weight_block_size": [128, 128],
     "modules_to_not_convert": [r"model\.layers\.\d+\.mlp\.down_proj", "model.layers.1"]},
    # vLLM's exact names (the glob reading excluded every layer's q_proj)
    {"quant_method": "fp8", "weight_block_size": [128, 128], "ignored_layers": [
        "q_proj", "model.layers.2.self_attn.k_proj"]},
    # ModelOpt: substring (the glob reading matched nothing) and fnmatch of the full name
    # ("model.layers.*.mlp" names no projection; the glob reading excluded every MLP)
    {"quant_method": "modelopt", "quant_algo": "FP8",
     "exclude_modules": ["self_attn", "model.layers.*.mlp", "model.layers.3.mlp.up*"]},
    {"quant_method": "compressed-tensors", "config_groups": CT_GROUP,
     "ignore": ["lm_head", "re:.*layers\\.[02]\\.mlp\\.", "model.layers.3.self_attn.v_proj"]},
])
def test_spec_and_loader_agree_on_what_is_fp8(qc):
    spec = tower_spec_from_config(dict(LLAMA, quantization_config=qc))
    ignored = _loader_is_ignored(qc["quant_method"], qc)
    want = {lin.name for lin in spec.all_linears if not ignored(spec.module_name(lin))}
    assert fp8_names(spec) == want
    assert 0 < len(want) < len(spec.all_linears)


def test_modules_to_not_convert_entry_that_is_no_regex_is_an_error():
    # transformers' re.match and the loader (block_fp8.py) refuse it; the glob reading
    # matched every in_proj_a
    qc = {"quant_method": "fp8", "modules_to_not_convert": ["lm_head", "*in_proj_a"]}
    err = _raises("quantization_config.modules_to_not_convert", tower_spec_from_config,
                  dict(LLAMA, quantization_config=qc))
    assert "'*in_proj_a'" in str(err) and "regular expression" in str(err)


# --- 3. a group the ignore list splits is not merged -------------------------------------------


def test_partly_ignored_group_is_not_merged():
    qc = {"quant_method": "fp8", "weight_block_size": [128, 128],
          "modules_to_not_convert": ["model.layers.0.self_attn.k_proj"]}
    spec = tower_spec_from_config(dict(LLAMA, quantization_config=qc))
    groups = spec.merge_groups("all")
    assert "layers.0.qkv" not in groups and "layers.1.qkv" in groups
    assert "layers.0.qkv" not in spec.merge_groups("all", fp8_only=False)
    layer0 = [g.name for g in spec.gemms("all", merged=True) if g.layer == 0]
    assert layer0 == ["layers.0.self_attn.q_proj", "layers.0.self_attn.v_proj",
                      "layers.0.self_attn.o_proj", "layers.0.gate_up",
                      "layers.0.mlp.down_proj"]


# --- 4. malformed compressed-tensors groups ------------------------------------------------


@pytest.mark.parametrize("key, value", [("input_activations", "token"), ("weights", "fp8"),
                                        ("weights", [8]), ("targets", None), ("targets", [])])
def test_compressed_tensors_group_fields(key, value):
    qc = {"quant_method": "compressed-tensors", "config_groups": copy.deepcopy(CT_GROUP)}
    if value is None:
        del qc["config_groups"]["group_0"][key]
    else:
        qc["config_groups"]["group_0"][key] = value
    err = _raises(f"quantization_config.config_groups.group_0.{key}", tower_spec_from_config,
                  dict(LLAMA, quantization_config=qc))
    assert ("non-empty list" if key == "targets" else "an object") in str(err)


# --- 5 and 6. each model type's defaults and biases, as transformers builds the model ----------


def _hf_linears(cfg: dict) -> dict[str, tuple[tuple[int, int], bool]]:
    """name below the decoder stack -> (weight shape, has a bias) of the meta-device model."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.AutoConfig.for_model(**copy.deepcopy(cfg))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    out = {}
    for name, mod in model.named_modules():
        m = re.search(r"(layers\.\d+\..*)$", name)
        if m and isinstance(mod, torch.nn.Linear):
            out[m.group(1)] = (tuple(mod.weight.shape), mod.bias is not None)
    return out


BASE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 32, "vocab_size": 128}
QWEN35 = {"model_type": "qwen3_5_text", "hidden_size": 256, "intermediate_size": 512,
          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
          "linear_key_head_dim": 32, "linear_value_head_dim": 32,
          "full_attention_interval": 4, "vocab_size": 128}


MISSING = [  # head_dim and (but the second row) num_key_value_heads left out, or null
    *(dict(BASE, model_type=t) for t in ("llama", "qwen2", "qwen3", "mistral")),
    *(dict(BASE, model_type=t, num_key_value_heads=None) for t in ("llama", "qwen2", "qwen3")),
    dict(BASE, model_type="mistral", head_dim=None, num_key_value_heads=4),
    dict(BASE, model_type="qwen2", num_attention_heads=64),  # kv: 32, not 64
]
BIASES = [
    dict(BASE, model_type="llama", attention_bias=True, mlp_bias=True),
    dict(BASE, model_type="llama", mlp_bias=True),
    dict(BASE, model_type="qwen3", attention_bias=True, mlp_bias=True),
    dict(BASE, model_type="qwen2", attention_bias=False),
    dict(BASE, model_type="mistral", attention_bias=True),
    dict(QWEN35, attention_bias=True),
]


def _id(cfg: dict) -> str:
    base = QWEN35 if cfg["model_type"] == QWEN35["model_type"] else BASE
    return "-".join(f"{k}={v}" for k, v in cfg.items()
                    if k == "model_type" or base.get(k, ...) != v)


@pytest.mark.parametrize("cfg", MISSING, ids=_id)
def test_shapes_of_configs_missing_fields_match_the_hf_model(cfg):
    hf = {name: shape for name, (shape, _) in _hf_linears(cfg).items()}
    spec = tower_spec_from_config(copy.deepcopy(cfg))
    assert {lin.name: (lin.n, lin.k) for lin in spec.all_linears} == hf


@pytest.mark.parametrize("cfg", MISSING[:4] + BIASES, ids=_id)
def test_biases_match_the_hf_model(cfg):
    hf = {name: bias for name, (_, bias) in _hf_linears(cfg).items()}
    spec = tower_spec_from_config(copy.deepcopy(cfg))
    assert {lin.name: lin.bias for lin in spec.all_linears} == hf
    if cfg["model_type"] == "qwen2":
        assert {lin.proj for lin in spec.all_linears if lin.bias} == {"q_proj", "k_proj",
                                                                      "v_proj"}
        assert {g.name for g in spec.gemms("all", merged=True) if g.bias} == {
            "layers.0.qkv", "layers.1.qkv"}


def test_default_kv_heads_that_do_not_divide_the_heads_name_the_default():
    cfg = dict(BASE, model_type="qwen2", num_attention_heads=8)  # kv: Qwen2's default 32
    err = _raises("num_attention_heads", tower_spec_from_config, cfg)
    assert "qwen2's default 32" in str(err)


def _qwen2_path(tmp_path):
    cfg = dict(BASE, model_type="qwen2", num_attention_heads=4, num_key_value_heads=2)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return cfg, str(tmp_path / "config.json")


def test_tune_poses_the_bias_keys_a_converted_model_runs(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from fp8tower import dispatch
    from fp8tower.cli.tune import _gemms_from, tune_problems
    from fp8tower.formats import Scheme
    from fp8tower.hf.conversion import convert

    cfg, path = _qwen2_path(tmp_path)
    gemms, _ = _gemms_from(path, None, True, "all")
    tuned = {p.key() for p in tune_problems(gemms, [Scheme.CHANNEL_TOKEN], [1],
                                            act_dtype=torch.bfloat16, out_dtype=torch.bfloat16,
                                            capability=None)}
    assert any("-bias_" in k for k in tuned) and not all("-bias_" in k for k in tuned)
    # the keys a converted Qwen2 poses in one decode step (M = 1, CPU)
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**cfg), dtype=torch.bfloat16)
    convert(model, "channel_token", backend="reference")
    posed, resolve = set(), dispatch.resolve
    monkeypatch.setattr(dispatch, "resolve", lambda p, b="auto", graph=False: (
        posed.add(p.key()), resolve(p, b, graph=graph))[1])
    with torch.no_grad():
        model(torch.tensor([[1]]))
    assert posed == tuned


def test_tune_in_context_refuses_a_model_with_biases(tmp_path):
    from typer.testing import CliRunner

    from fp8tower.cli import app

    _, path = _qwen2_path(tmp_path)
    r = CliRunner().invoke(app, ["tune", "--model", path, "--in-context"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "--in-context" in r.output and "bias" in r.output
