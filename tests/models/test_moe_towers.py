"""Qwen3-MoE, Mixtral and GLM-4.5 towers: the attention of every layer, the dense MLPs and
(GLM) the shared experts, with the shapes and biases of the modules transformers 5.25
builds; the routed experts left out."""

from __future__ import annotations

import pytest
import torch

from fp8tower.models import ConfigError, tower_spec_from_config

transformers = pytest.importorskip("transformers")

# Qwen3-30B-A3B's architecture fields (hidden 2048, 48 layers, 32 q / 4 kv heads of 128,
# 128 experts of 768), cut to 4 layers
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
             "moe_intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 32,
             "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
             "num_experts_per_tok": 8, "vocab_size": 128}
GLM4_MOE = {"model_type": "glm4_moe", "hidden_size": 512, "intermediate_size": 1024,
            "moe_intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 64, "n_routed_experts": 4,
            "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
            "n_group": 1, "topk_group": 1, "attention_bias": True, "vocab_size": 128}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 512, "intermediate_size": 1024,
           "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
           "num_local_experts": 4, "vocab_size": 128}


def _hf(cfg: dict) -> dict[str, torch.nn.Linear]:
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return {n.removeprefix("model."): m for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear)}


@pytest.mark.parametrize("cfg", [
    QWEN3_MOE, dict(QWEN3_MOE, mlp_only_layers=[0, 2]), dict(QWEN3_MOE, decoder_sparse_step=2),
    dict(QWEN3_MOE, attention_bias=True), {k: v for k, v in QWEN3_MOE.items()
                                           if k not in ("head_dim", "num_key_value_heads")},
    MIXTRAL, dict({k: v for k, v in MIXTRAL.items() if k != "num_key_value_heads"},
                  num_attention_heads=16),
    GLM4_MOE, dict(GLM4_MOE, n_shared_experts=2, attention_bias=False, first_k_dense_replace=0),
    {k: v for k, v in GLM4_MOE.items() if k not in ("head_dim", "num_key_value_heads")}],
    ids=lambda c: str(sorted(c.items())))
def test_every_modelled_linear_is_transformers_own(cfg):
    spec = tower_spec_from_config(cfg)
    hf = _hf(cfg)
    ours = {lin.name: lin for lin in spec.all_linears}
    assert {n: (hf[n].out_features, hf[n].in_features, hf[n].bias is not None)
            for n in ours} == {n: (x.n, x.k, x.bias) for n, x in ours.items()}
    assert sorted(set(hf) - set(ours)) == ["lm_head"]  # routers and experts: no nn.Linear


def test_qwen3_moe_dense_layers_and_scope():
    spec = tower_spec_from_config(dict(QWEN3_MOE, mlp_only_layers=[1]))
    assert spec.mlp_in_scope and [lin.layer for lin in spec.all_linears
                                  if lin.kind == "mlp"] == [1, 1, 1]
    assert spec.shapes(merged=True) == {(4096 + 2 * 512, 2048): 4, (2048, 4096): 4}
    assert any("3 of 4 layers are mixtures of experts (128 experts)" in n for n in spec.notes)
    every = tower_spec_from_config(QWEN3_MOE)
    assert not every.mlp_in_scope and every.intermediate_size is None
    with pytest.raises(ValueError, match="mixtures of experts without a shared expert"):
        every.linears("all")
    with pytest.raises(ConfigError, match=r"mlp_only_layers: got 'all'; expected a list"):
        tower_spec_from_config(dict(QWEN3_MOE, mlp_only_layers="all"))


def test_qwen3_moe_block128_tp8_is_refused_by_its_expert_width():
    """Qwen3-30B-A3B's experts (768 wide) at tp 8 are 96 a rank: no whole 128-blocks; tp 2
    (384) holds them."""
    fp8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
           "weight_block_size": [128, 128]}
    cfg = dict(QWEN3_MOE, quantization_config=fp8)
    assert tower_spec_from_config(cfg, tp=2).tp == 2
    with pytest.raises(ConfigError, match=r"moe_intermediate_size per rank \(768 / 8\)"):
        tower_spec_from_config(cfg, tp=8)


def test_glm4_moe_models_its_shared_experts():
    spec = tower_spec_from_config(GLM4_MOE)
    assert spec.mlp_in_scope
    assert spec.shapes("all", merged=True) == {
        (512 + 2 * 128, 512): 3, (512, 512): 3, (2 * 1024, 512): 1, (512, 1024): 1,
        (2 * 128, 512): 2, (512, 128): 2}
    assert any("2 of 3 layers are mixtures of experts (4 experts)" in n
               and "shared experts (N = 1 x 128" in n for n in spec.notes)


def test_moe_edges_tp_and_null_counts():
    """GLM's shared experts split as a dense MLP at tp > 1; qwen3_moe with no experts is
    dense everywhere; a null first_k_dense_replace (transformers and vLLM fail on it) is
    refused, naming the field; the note leaves out an expert count config.json does not
    give."""
    glm = tower_spec_from_config(GLM4_MOE, tp=2)
    assert glm.shapes("all", merged=True)[(128, 512)] == 2  # shared gate+up: 2 x 128 / 2
    assert glm.shapes("all", merged=True)[(512, 64)] == 2  # shared down: K 128 / 2
    dense = tower_spec_from_config(dict(QWEN3_MOE, num_experts=0))
    assert dense.mlp_in_scope and not dense.notes[:-2]
    assert len([x for x in dense.all_linears if x.kind == "mlp"]) == 3 * 4
    with pytest.raises(ConfigError, match=r"first_k_dense_replace: missing; expected an "
                                          r"integer >= 0"):
        tower_spec_from_config(dict(GLM4_MOE, first_k_dense_replace=None))
    quiet = tower_spec_from_config({k: v for k, v in GLM4_MOE.items()
                                    if k != "n_routed_experts"})
    assert any("2 of 3 layers are mixtures of experts: " in n for n in quiet.notes)


QWEN_MOE = {"hidden_size": 256, "num_hidden_layers": 4, "full_attention_interval": 2,
            "linear_num_key_heads": 2, "linear_key_head_dim": 32, "linear_num_value_heads": 4,
            "linear_value_head_dim": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 64, "shared_expert_intermediate_size": 96,
            "intermediate_size": 384, "vocab_size": 128}


@pytest.mark.parametrize("cfg", [
    dict(QWEN_MOE, model_type="qwen3_5_moe_text"),
    dict(QWEN_MOE, model_type="qwen3_next"),
    dict(QWEN_MOE, model_type="qwen3_next", mlp_only_layers=[1], decoder_sparse_step=1)],
    ids=["qwen3_5_moe_text", "qwen3_next", "qwen3_next-dense1"])
def test_qwen_moe_shared_experts_are_transformers_own(cfg):
    """Qwen3.5-MoE / Qwen3-Next: every linear the spec models (the shared expert among them)
    is a module transformers builds, of that shape and bias; left out: the routers and
    experts (no nn.Linear), the shared expert's N = 1 gate (unquantized in vLLM) and
    lm_head."""
    spec = tower_spec_from_config(cfg)
    hf = _hf(cfg)
    ours = {lin.name: lin for lin in spec.all_linears}
    assert {n: (hf[n].out_features, hf[n].in_features, hf[n].bias is not None)
            for n in ours} == {n: (x.n, x.k, x.bias) for n, x in ours.items()}
    assert sorted({n.rsplit(".", 1)[-1] for n in set(hf) - set(ours)}) == [
        "lm_head", "shared_expert_gate"]
    assert sum(x.proj.startswith("shared_expert.") for x in spec.all_linears) == 3 * sum(
        n.endswith("shared_expert_gate") for n in hf)


def test_qwen_moe_shared_expert_edges():
    """A null shared_expert_intermediate_size is refused (transformers and vLLM fail on it);
    a block128 shared expert kept in BF16 by the ignore list is not block-checked at tp > 1
    (it was, by its width, though no FP8 block is cut)."""
    cfg = dict(QWEN_MOE, model_type="qwen3_next")
    with pytest.raises(ConfigError, match=r"shared_expert_intermediate_size: missing; "
                                          r"expected an integer >= 0"):
        tower_spec_from_config(dict(cfg, shared_expert_intermediate_size=None))
    block = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128],
             "modules_to_not_convert": [r".*\.linear_attn", r".*\.self_attn",
                                        r".*\.shared_expert"]}
    spec = tower_spec_from_config(dict(cfg, quantization_config=block, moe_intermediate_size=256,
                                       shared_expert_intermediate_size=384), tp=2)
    assert not any(x.fp8 for x in spec.all_linears if "shared_expert" in x.proj)
