"""fp8tower.checkpoint loads every format as an independent dequantization says it should."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from ckpt_writer import (
    PROJS,
    QWEN3_CONFIG,
    build,
    expand_ref,
    linear_shapes,
    q_block,
    q_channel,
    q_tensor,
    save,
)

from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.checkpoint.unquantized import LINEARS_BY_NAME
from fp8tower.formats import Scheme

CASES = [
    # fmt, preset, config_in, scale dtype, shards, scheme
    ("modelopt", "FP8", "config", torch.float32, 1, Scheme.PER_TENSOR),
    ("modelopt", "FP8", "hf_quant_config", torch.float32, 2, Scheme.PER_TENSOR),
    ("modelopt", "FP8_PER_CHANNEL_PER_TOKEN", "hf_quant_config", torch.float32, 1,
     Scheme.CHANNEL_TOKEN),
    ("compressed_tensors", "FP8", "config", torch.float32, 1, Scheme.PER_TENSOR),
    ("compressed_tensors", "FP8_DYNAMIC", "config", torch.bfloat16, 2, Scheme.CHANNEL_TOKEN),
    ("compressed_tensors", "FP8_BLOCK", "config", torch.float16, 1, Scheme.BLOCK128),
    ("compressed_tensors", "FP8_BLOCK", "config", torch.float32, 3, Scheme.BLOCK128),
    ("block_fp8", "", "config", torch.float32, 2, Scheme.BLOCK128),
    ("fp8_per_tensor", "static", "config", torch.float32, 2, Scheme.PER_TENSOR),
    ("fp8_per_tensor", "dynamic", "config", torch.float32, 1, Scheme.PER_TENSOR),
]
# each format's own syntax for "layer 1's o_proj and lm_head stay bf16"
IGNORE = {
    "modelopt": ("lm_head", "model.layers.1.self_attn.o_proj*"),
    "compressed_tensors": ("lm_head", r"re:.*layers\.1\.self_attn\.o_proj$"),
    "block_fp8": ("lm_head", "model.layers.1.self_attn.o_proj"),
    "fp8_per_tensor": ("lm_head", "model.layers.1.self_attn.o_proj"),  # vLLM: exact names
}
IGNORED = "model.layers.1.self_attn.o_proj"


@pytest.mark.parametrize("fmt,preset,config_in,scale_dtype,shards,scheme", CASES)
def test_loads_independent_dequantization(tmp_path, fmt, preset, config_in, scale_dtype, shards,
                                          scheme):
    spec = build(fmt, preset=preset, config_in=config_in, scale_dtype=scale_dtype,
                 ignore=IGNORE[fmt], ignored_fqns=(IGNORED,))
    ck = open_checkpoint(save(spec, tmp_path, shards=shards))
    assert ck.format == fmt
    expected = sorted(f for f in linear_shapes(spec.config) if f != IGNORED)
    assert ck.linear_names() == expected
    for fqn in expected:
        assert ck.scheme_for(fqn) is scheme
        loaded = ck.load_linear(fqn)
        q, s, act = spec.reference[fqn]
        w = loaded.weight
        assert w.scheme is scheme and w.data.dtype == torch.float8_e4m3fn
        assert w.scale.dtype == torch.float32  # stored bf16/fp16 scales come back as fp32
        # independent dequantization: plain torch on the tensors the writer stored
        assert torch.equal(w.dequantize(), expand_ref(q, s)), fqn
        if act is None:
            assert w.act_scale is None
        else:
            assert w.act_scale.shape == () and float(w.act_scale) == float(act)
        assert loaded.bias is None
    # the ignored linear and everything else stays as stored
    assert ck.is_ignored(IGNORED) and ck.is_ignored("lm_head")
    assert ck.scheme_for(IGNORED) is None and ck.scheme_for("model.norm") is None
    assert not ck.is_ignored("model.layers.0.self_attn.o_proj")
    assert torch.equal(ck.load_tensor(f"{IGNORED}.weight"), spec.tensors[f"{IGNORED}.weight"])
    emb = ck.load_tensor("model.embed_tokens.weight", dtype=torch.float32)
    assert emb.dtype == torch.float32
    assert torch.equal(emb, spec.tensors["model.embed_tokens.weight"].float())
    with pytest.raises(CheckpointError, match="ignore list"):
        ck.load_linear(IGNORED)
    assert ck.tensor_names() == sorted(spec.tensors)
    d = ck.describe()
    assert d["format"] == fmt and d["scheme_counts"] == {str(scheme): len(expected)}
    assert d["ignored"] == ["lm_head", IGNORED]
    assert d["bytes"] == sum(t.numel() * t.element_size() for t in spec.tensors.values())
    assert d["bytes"] == ck.nbytes()
    static = scheme is Scheme.PER_TENSOR and preset != "dynamic"
    assert d["static_act_scale"] == (expected if static else [])


@pytest.mark.parametrize("scheme,quant", [("per_tensor", q_tensor), ("channel_token", q_channel),
                                          ("block128", q_block), ("weight_only", q_channel)])
def test_unquantized_quantized_at_load(tmp_path, scheme, quant):
    spec = build("unquantized")
    ck = open_checkpoint(save(spec, tmp_path, shards=2), scheme=scheme)
    assert ck.format == "unquantized"
    assert ck.linear_names() == sorted(linear_shapes(spec.config))
    assert ck.is_ignored("lm_head") and ck.is_ignored("model.embed_tokens")
    for fqn in ck.linear_names()[:3] + ["model.layers.1.mlp.down_proj"]:
        w = ck.load_linear(fqn).weight
        assert w.scheme is Scheme(scheme)
        assert w.act_scale is None  # per_tensor: dynamic
        q, s = quant(spec.tensors[f"{fqn}.weight"].float())
        assert torch.equal(w.data.view(torch.uint8), q.view(torch.uint8)), fqn
        assert torch.equal(w.dequantize(), expand_ref(q, s)), fqn


def test_unquantized_without_scheme_quantizes_nothing(tmp_path):
    ck = open_checkpoint(save(build("unquantized"), tmp_path))
    assert ck.linear_names() == [] and ck.scheme_for("model.layers.0.mlp.up_proj") is None
    assert ck.load_tensor("model.layers.0.mlp.up_proj.weight").dtype == torch.bfloat16


def test_modelopt_exclude_matching_like_vllm(tmp_path):
    """Exact, substring and fnmatch wildcard, as vLLM's ModelOpt config reads exclude_modules."""
    ignored = ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj",
               "model.layers.0.mlp.down_proj", "model.layers.1.self_attn.k_proj",
               "model.layers.1.self_attn.v_proj")
    spec = build("modelopt",
                 ignore=("lm_head", "layers.0.mlp", "model.layers.1.self_attn.[kv]_proj"),
                 ignored_fqns=ignored)
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.is_ignored("lm_head")  # exact
    assert ck.is_ignored("model.layers.0.mlp.down_proj")  # substring
    assert ck.is_ignored("model.layers.1.self_attn.k_proj")  # wildcard
    assert not ck.is_ignored("model.layers.1.self_attn.q_proj")
    assert not ck.is_ignored("model.layers.1.mlp.down_proj")
    assert ck.linear_names() == sorted(set(linear_shapes(spec.config)) - set(ignored))


def test_compressed_tensors_ignore_regex_and_targets(tmp_path):
    spec = build("compressed_tensors", ignore=("lm_head", r"re:.*mlp\.down_proj$"),
                 ignored_fqns=("model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"))
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.is_ignored("model.layers.1.mlp.down_proj")
    assert not ck.is_ignored("model.layers.1.mlp.up_proj")
    assert not ck.is_ignored("lm_head.x")  # plain names match exactly, not as prefixes
    assert len(ck.linear_names()) == 12


def test_block_fp8_modules_to_not_convert_like_transformers(tmp_path):
    spec = build("block_fp8", ignore=("lm_head", "model.layers.1.mlp", "k_proj"),
                 ignored_fqns=("model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj",
                               "model.layers.1.mlp.down_proj", "model.layers.0.self_attn.k_proj",
                               "model.layers.1.self_attn.k_proj"))
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.is_ignored("model.layers.1.mlp.up_proj")  # prefix
    assert ck.is_ignored("model.layers.0.self_attn.k_proj")  # suffix
    assert not ck.is_ignored("model.layers.0.mlp.up_proj")
    assert len(ck.linear_names()) == 9


def test_scheme_argument_on_fp8_checkpoint(tmp_path):
    path = save(build("block_fp8"), tmp_path)
    assert open_checkpoint(path, scheme="block128").format == "block_fp8"
    with pytest.raises(CheckpointError, match=r"already quantized \(block_fp8, scheme block128\)"):
        open_checkpoint(path, scheme="per_tensor")
    with pytest.raises(CheckpointError, match="unknown scheme 'fp4'"):
        open_checkpoint(path, scheme="fp4")


def test_lazy_loading_reads_only_the_module(tmp_path, monkeypatch):
    """Opening reads headers only; load_linear reads that module's tensors and nothing else."""
    from fp8tower.checkpoint import reader

    read: list[str] = []
    real = reader.safe_open

    class Counting:
        def __init__(self, *a, **k):
            assert k.get("framework") == "pt"
            self._f = real(*a, **k)

        def get_tensor(self, name):
            read.append(name)
            return self._f.get_tensor(name)

    monkeypatch.setattr(reader, "safe_open", Counting)
    spec = build("modelopt")
    ck = open_checkpoint(save(spec, tmp_path, shards=2))
    assert read == []
    ck.load_linear("model.layers.1.self_attn.v_proj")
    assert sorted(read) == [f"model.layers.1.self_attn.v_proj.{t}"
                            for t in ("input_scale", "weight", "weight_scale")]
    read.clear()
    ck.load_tensor("model.norm.weight")
    assert read == ["model.norm.weight"]


def test_import_does_not_pull_transformers():
    code = ("import sys, fp8tower.checkpoint; "
            "print([m for m in ('transformers', 'compressed_tensors') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --- ignore lists: module boundaries -----------------------------------------------------------

HF_NAMES = ("model.layers.1.self_attn.q_proj", "model.layers.10.self_attn.q_proj",
            "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.gate", "lm_head",
            "model.layers.1.mlp.down_proj", "model.layers.0.self_attn.k_proj")
HF_PATTERNS = (["model.layers.1"], ["model.layers.0.mlp.gate"], ["lm_head"], [r"model.layers.\d+"],
               [r"model\.layers\.1\d"], ["mlp.down_proj"], ["proj"], ["model.layers.1.*"],
               ["model.layers.", "k_proj"], [r"model.layers.[01].mlp"])


def test_modules_to_not_convert_matches_transformers():
    """Each pattern list against each name, as transformers' should_convert_module decides.
    fp8tower reads the list as transformers 5.25 does; 5.17 (the GPU machine's) matched
    "model.layers.1" inside "model.layers.10.self_attn.q_proj" (session 42, on the device)."""
    hf = pytest.importorskip("transformers.quantizers.quantizers_utils")
    import transformers

    if tuple(int(p) for p in transformers.__version__.split(".")[:2]) < (5, 25):
        pytest.skip(f"transformers {transformers.__version__}: its rule predates 5.25's")
    from fp8tower.checkpoint.base import match_hf_not_convert

    for patterns in HF_PATTERNS:
        for name in HF_NAMES:
            ours = any(match_hf_not_convert(name, p) for p in patterns)
            assert ours == (not hf.should_convert_module(name, patterns)), (name, patterns)


def test_block_fp8_ignore_stops_at_a_module_boundary(tmp_path):
    """modules_to_not_convert ["model.layers.1"] keeps layer 1, not layers 10-19, in bf16."""
    cfg = dict(QWEN3_CONFIG, num_hidden_layers=11, hidden_size=128, intermediate_size=128,
               num_attention_heads=2, head_dim=64, vocab_size=64)
    layer1 = tuple(f"model.layers.1.{p}" for p in PROJS)
    ck = open_checkpoint(save(build("block_fp8", ignore=("lm_head", "model.layers.1"),
                                    ignored_fqns=layer1, cfg=cfg), tmp_path))
    assert ck.is_ignored("model.layers.1.mlp.up_proj")
    assert not ck.is_ignored("model.layers.10.mlp.up_proj")
    assert len(ck.linear_names()) == 10 * 7


def test_block_fp8_ignored_layers_are_exact_names(tmp_path):
    """vLLM's Fp8Config reads ignored_layers as exact module names (is_layer_skipped)."""
    q0 = "model.layers.0.self_attn.q_proj"
    spec = build("block_fp8", ignore=(), ignored_fqns=(q0,))
    spec.config["quantization_config"]["ignored_layers"] = [q0, "model.layers.1.mlp", "lm_head"]
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.is_ignored(q0) and ck.is_ignored("lm_head")
    assert not ck.is_ignored("model.layers.1.mlp.up_proj")  # a prefix names no module here
    assert not ck.is_ignored("model.layers.0.self_attn.q_proj_extra")
    assert len(ck.linear_names()) == 13


def test_block_fp8_ignore_pattern_not_a_regex(tmp_path):
    spec = build("block_fp8", ignore=("lm_head", "model.layers.(1"))
    with pytest.raises(CheckpointError, match=(
            r"config.json: quantization_config.modules_to_not_convert\[1\]: expected a regex, "
            r"as transformers matches it \(missing \), .*\), got 'model.layers.\(1'")):
        open_checkpoint(save(spec, tmp_path))


# --- MoE experts: loadable, listed apart, not converted ----------------------------------------


def test_moe_expert_linears_are_listed_apart(tmp_path):
    spec = build("block_fp8")
    experts = [f"model.layers.{layer}.mlp.experts.{e}.{p}" for layer in range(2)
               for e in range(3) for p in ("gate_proj", "up_proj", "down_proj")]
    for fqn in experts:
        q, s = q_block(torch.randn(128, 192) * 0.02)
        spec.tensors[f"{fqn}.weight"], spec.tensors[f"{fqn}.weight_scale_inv"] = q, s
    shared = "model.layers.0.mlp.shared_experts.gate_proj"  # an nn.Linear in transformers 5
    q, s = q_block(torch.randn(128, 192) * 0.02)
    spec.tensors[f"{shared}.weight"], spec.tensors[f"{shared}.weight_scale_inv"] = q, s
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.moe_expert_linears() == sorted(experts)
    assert ck.load_linear(experts[0]).weight.scheme is Scheme.BLOCK128
    info = ck.describe()
    assert sorted(info["moe_experts_not_converted"]) == sorted(experts)
    assert not set(experts) & set(info["schemes"]) and shared in info["schemes"]
    assert sum(info["scheme_counts"].values()) == 15
    note = ck.moe_experts_note()
    assert note.startswith("; the checkpoint stores 18 MoE expert linear(s) (e.g. "
                           "'model.layers.0.mlp.experts.0.down_proj'), which fp8tower does not "
                           "convert")
    assert open_checkpoint(save(build("block_fp8"), tmp_path / "dense")).moe_experts_note() == ""


# --- unquantized: which 2-D weights are linears -------------------------------------------------


def test_unquantized_embeddings_are_not_linears(tmp_path):
    spec = build("unquantized")
    for name in ("transformer.wte", "transformer.wpe", "shared", "gpt_neox.embed_in",
                 "encoder.embeddings.word_embeddings", "encoder.embeddings.position_embeddings"):
        spec.tensors[f"{name}.weight"] = torch.zeros(64, 192, dtype=torch.bfloat16)
    ck = open_checkpoint(save(spec, tmp_path), scheme="per_tensor")
    assert ck.linear_names() == sorted(linear_shapes(spec.config))
    assert ck.is_ignored("transformer.wte") and ck.is_ignored("lm_head")
    assert not ck.is_ignored("model.layers.0.mlp.shared_experts.up_proj")


def _tiny_model(model_type):
    """A transformers model of ``model_type`` with a tiny config (ckpt_writer's shapes)."""
    import transformers
    from ckpt_writer import QWEN3_5_CONFIG

    if model_type.startswith("qwen3_5"):
        cfg = json.loads(json.dumps(QWEN3_5_CONFIG))
        if model_type == "qwen3_5_text":
            cfg = cfg["text_config"]
    else:
        cfg = dict(QWEN3_CONFIG)
    cfg.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    auto = (transformers.AutoModelForImageTextToText if model_type == "qwen3_5"
            else transformers.AutoModelForCausalLM)
    return dict(cfg, model_type=model_type), auto.from_config(config)


@pytest.mark.parametrize("model_type", LINEARS_BY_NAME)
def test_unquantized_linears_by_name_are_the_models(tmp_path, model_type):
    """For each model type write_merged quantizes from a bf16 checkpoint, the 2-D weights taken
    as linears by name are exactly the model's nn.Linear modules (lm_head apart)."""
    pytest.importorskip("transformers")
    from ckpt_writer import Spec

    cfg, model = _tiny_model(model_type)
    tensors = {n: t.to(torch.bfloat16) for n, t in model.state_dict().items()}
    linears = [n for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    ck = open_checkpoint(save(Spec("unquantized", cfg, tensors), tmp_path), scheme="block128")
    assert ck.linears_by_name and ck.describe()["linears_by_name"]
    assert ck.linear_names() == sorted(linears)


@pytest.mark.parametrize("preset", ["FP8", "FP8_DYNAMIC"])
def test_compressed_tensors_weight_only_loads(tmp_path, preset):
    """compressed-tensors FP8 weights without input_activations are weight_only, the weight
    scale a tensor's (1,) or a channel's (N, 1), expanded to (N,). No test loaded one: a loader
    that dropped the expansion passed every test."""
    spec = build("compressed_tensors", preset=preset)
    spec.config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = None
    for name in [n for n in spec.tensors if n.endswith(".input_scale")]:
        del spec.tensors[name]
    ck = open_checkpoint(save(spec, tmp_path))
    for fqn in ck.linear_names():
        w = ck.load_linear(fqn).weight
        q, s, _ = spec.reference[fqn]
        assert w.scheme is Scheme.WEIGHT_ONLY and w.scale.shape == (w.n,), fqn
        assert w.act_scale is None
        assert torch.equal(w.dequantize(), expand_ref(q, s)), fqn


def test_compressed_tensors_class_target_is_linear_only(tmp_path):
    """A module-name target that merely contains "linear" (a GDN ``linear_attn`` module, a
    vision ``linear_fc1``) names that module, not the class: the other Linears keep the
    group that targets "Linear" (2026-12-05 audit: they took the weight-only group's scheme,
    and their activations went unquantized)."""
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    groups = spec.config["quantization_config"]["config_groups"]
    weight_only = json.loads(json.dumps(groups["group_0"]))
    weight_only["input_activations"] = None
    weight_only["targets"] = ["model.layers.0.mlp.down_proj", "model.visual.merger.linear_fc1"]
    groups["group_1"] = groups.pop("group_0")
    spec.config["quantization_config"]["config_groups"] = {"group_0": weight_only, **groups}
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.scheme_for("model.layers.0.mlp.down_proj") is Scheme.WEIGHT_ONLY
    assert ck.scheme_for("model.layers.0.self_attn.q_proj") is Scheme.CHANNEL_TOKEN
    assert ck.scheme_for("model.layers.1.mlp.down_proj") is Scheme.CHANNEL_TOKEN


def test_compressed_tensors_exact_name_outranks_an_earlier_regex(tmp_path):
    """compressed-tensors applies a config's groups by rank, an exact module name before a
    ``re:`` regex before the class ``Linear``, whatever their order in the config; the loader
    took the first group in config order that named the module (2026-12-05 code audit), while
    the tower specs ranked them: one rule now serves both (quant_rules.ct_best_group)."""
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    groups = spec.config["quantization_config"]["config_groups"]
    weight_only = json.loads(json.dumps(groups["group_0"]))
    weight_only["input_activations"] = None
    weight_only["targets"] = ["re:.*mlp.*"]
    dynamic = groups.pop("group_0")
    dynamic["targets"] = ["Linear", "model.layers.0.mlp.down_proj"]
    spec.config["quantization_config"]["config_groups"] = {"group_0": weight_only,
                                                           "group_1": dynamic}
    # vLLM takes the first matching target in config order, the regex: said at open
    with pytest.warns(UserWarning, match=r"'group_1' \('model.layers.0.mlp.down_proj', an exact "
                      r"name\) and 'group_0' \('re:.\*mlp.\*', listed first\) both match .*"
                      r"vLLM takes the first matching target in config order, 'group_0' "
                      r"\(weight_only\)"):
        ck = open_checkpoint(save(spec, tmp_path))
    assert ck.scheme_for("model.layers.0.mlp.down_proj") is Scheme.CHANNEL_TOKEN  # exact
    assert ck.scheme_for("model.layers.1.mlp.down_proj") is Scheme.WEIGHT_ONLY  # regex
    assert ck.scheme_for("model.layers.0.self_attn.q_proj") is Scheme.CHANNEL_TOKEN  # class


def test_ct_best_group_ranks_exact_regex_class():
    from fp8tower.quant_rules import ct_best_group

    groups = [["Linear"], ["re:.*mlp.*"], ["a.mlp.x"]]
    assert ct_best_group(groups, ["a.mlp.x"]) == 2
    assert ct_best_group(groups, ["a.mlp.y"]) == 1
    assert ct_best_group(groups, ["a.attn.q"]) == 0
    assert ct_best_group([["b"], ["c"]], ["a"]) is None
    # a tie between regexes: compressed-tensors' match_targets sorts targets by
    # ("re:" in t, t) and applies the first, the alphabetically first regex, whatever the
    # config order (vLLM's first-in-config-order rule read it otherwise; the loader warns)
    assert ct_best_group([["re:a"], ["re:a.b"]], ["a.b"]) == 0
    assert ct_best_group([["re:a.b"], ["re:a"]], ["a.b"]) == 1
    assert ct_best_group([["Linear", "x"], ["x"]], ["x"]) == 1  # one target twice: the last
