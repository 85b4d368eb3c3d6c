"""Each supported architecture family, the tiny shipped model, and text_config nesting."""

from __future__ import annotations

import pytest

from fp8tower.models import get_spec, tower_spec_from_config


def shape(spec, proj, layer):
    (lin,) = [x for x in spec.all_linears if x.proj == proj and x.layer == layer]
    return lin.n, lin.k


def test_tiny_hybrid():
    spec = get_spec("tiny-hybrid")
    assert spec.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert spec.shapes("all") == {
        (320, 256): 3, (192, 256): 3, (256, 192): 4, (688, 256): 8, (256, 688): 4,
        (384, 256): 1, (96, 256): 2,
    }
    assert spec.shapes("all", merged=True) == {
        (512, 256): 3, (256, 192): 4, (1376, 256): 4, (256, 688): 4, (576, 256): 1,
    }
    odd = [g for g in spec.gemms("all") if g.n % 128 or g.k % 128]
    assert [g.name for g in spec.gemms("all") if g not in odd] == ["layers.3.self_attn.q_proj"]
    assert spec.module_name(spec.linears()[0]) == "model.layers.0.linear_attn.in_proj_qkv"
    assert "tiny-hybrid" in spec.summary("all")


def test_qwen35_shapes(qwen35_text):
    spec = tower_spec_from_config(qwen35_text)
    # key_dim = 4 * 32 = 128, value_dim = 8 * 48 = 384
    assert shape(spec, "in_proj_qkv", 0) == (2 * 128 + 384, 512)
    assert shape(spec, "in_proj_z", 0) == (384, 512)
    assert shape(spec, "in_proj_b", 0) == shape(spec, "in_proj_a", 0) == (8, 512)
    assert shape(spec, "out_proj", 0) == (512, 384)
    assert shape(spec, "q_proj", 3) == (2 * 8 * 64, 512)
    assert shape(spec, "k_proj", 3) == shape(spec, "v_proj", 3) == (2 * 64, 512)
    assert shape(spec, "o_proj", 3) == (512, 8 * 64)
    assert shape(spec, "gate_proj", 3) == (1376, 512)
    assert shape(spec, "down_proj", 3) == (512, 1376)
    assert len(spec.gemms()) == 6 * 3 + 2 * 4


def test_attn_output_gate_off(qwen35_text):
    qwen35_text["attn_output_gate"] = False
    assert shape(tower_spec_from_config(qwen35_text), "q_proj", 3) == (8 * 64, 512)


def test_layer_types_from_interval(qwen35_text):
    types = qwen35_text.pop("layer_types")
    qwen35_text["full_attention_interval"] = 4
    assert tower_spec_from_config(qwen35_text).layer_types == tuple(types)


def test_legacy_layer_type_names(qwen35_text):
    expected = tuple(qwen35_text["layer_types"])
    legacy = {"linear_attention": "mamba", "full_attention": "attention"}
    qwen35_text["layer_types"] = [legacy[t] for t in expected]
    assert tower_spec_from_config(qwen35_text).layer_types == expected


def test_text_config_nesting(qwen35_text):
    flat = tower_spec_from_config(qwen35_text)
    nested = tower_spec_from_config({"model_type": "qwen3_5", "text_config": qwen35_text,
                                     "vision_config": {"depth": 2}})
    assert nested.shapes("all") == flat.shapes("all")
    assert nested.model_type == flat.model_type == "qwen3_5_text"
    assert (flat.module_prefix, nested.module_prefix) == ("model.", "model.language_model.")
    # the top-level model_type is used when text_config has none
    del qwen35_text["model_type"]
    top = tower_spec_from_config({"model_type": "qwen3_5", "text_config": qwen35_text})
    assert top.model_type == "qwen3_5" and top.shapes() == flat.shapes()


def test_qwen3_next(qwen35_text):
    cfg = dict(qwen35_text, model_type="qwen3_next", attn_output_gate=None, num_experts=512,
               mtp_num_hidden_layers=1)
    del cfg["intermediate_size"]
    spec = tower_spec_from_config(cfg)
    assert [lin.proj for lin in spec.linears() if lin.layer == 0] == [
        "in_proj_qkvz", "in_proj_ba", "out_proj"]
    assert shape(spec, "in_proj_qkvz", 0) == (2 * 128 + 2 * 384, 512)
    assert shape(spec, "in_proj_ba", 0) == (2 * 8, 512)
    assert shape(spec, "q_proj", 3) == (2 * 8 * 64, 512)  # always gated
    assert not any(lin.fp8 for lin in spec.linears() if lin.proj == "in_proj_ba")
    assert all(lin.merge_group is None for lin in spec.linears() if lin.kind == "gdn")
    assert len(spec.gemms()) == 6 * 2 + 2 * 4
    assert spec.mlp_in_scope and spec.intermediate_size is None
    assert any("routed experts are out of scope; the shared expert (N = 512)" in n
               for n in spec.notes)
    assert any("MTP" in n for n in spec.notes)
    # every layer's shared expert (512 by default); its N = 1 gate not (vLLM: unquantized)
    assert [(x.proj, x.n, x.k, x.fp8) for x in spec.linears("all") if x.layer == 0][3:] == [
        ("shared_expert.gate_proj", 512, 512, True), ("shared_expert.up_proj", 512, 512, True),
        ("shared_expert.down_proj", 512, 512, True)]
    # mlp_only_layers: a dense MLP of intermediate_size there
    dense = tower_spec_from_config(dict(cfg, mlp_only_layers=[1], intermediate_size=1024))
    assert [(x.proj, x.n) for x in dense.linears("all") if x.layer == 1][-3:] == [
        ("gate_proj", 1024), ("up_proj", 1024), ("down_proj", 512)]
    none = tower_spec_from_config(dict(cfg, shared_expert_intermediate_size=0))
    assert not none.mlp_in_scope
    with pytest.raises(ValueError, match="mixtures of experts without a shared expert"):
        none.linears("all")
    with pytest.raises(ValueError, match="mixtures of experts without a shared expert"):
        none.fp8_bytes(("gdn", "attention", "mlp"))


def test_qwen35_moe_nested(qwen35_text):
    text = dict(qwen35_text, model_type="qwen3_5_moe_text", num_experts=256,
                moe_intermediate_size=512)
    del text["intermediate_size"]
    spec = tower_spec_from_config({"model_type": "qwen3_5_moe", "text_config": text})
    assert [lin.proj for lin in spec.linears() if lin.layer == 0] == [
        "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]
    assert spec.mlp_in_scope  # the shared experts (512 by default)
    assert spec.module_prefix == "model.language_model."
    assert spec.shapes(merged=True)[(2 * 128 + 2 * 384, 512)] == 6
    shared = [g for g in spec.gemms("all", merged=True) if g.name.endswith("shared_gate_up")]
    assert len(shared) == spec.num_layers and {(g.n, g.k) for g in shared} == {(2 * 512, 512)}


def test_llama_defaults(llama_cfg):
    spec = tower_spec_from_config(llama_cfg)
    assert spec.layer_types == ("full_attention",) * 3
    # head_dim = 1024 / 16 = 64
    assert shape(spec, "q_proj", 1) == (1024, 1024)
    assert shape(spec, "k_proj", 1) == (4 * 64, 1024)
    assert shape(spec, "o_proj", 1) == (1024, 1024)
    assert shape(spec, "up_proj", 1) == (2816, 1024)
    assert shape(spec, "down_proj", 1) == (1024, 2816)
    assert len(spec.gemms()) == 3 * 4 and len(spec.gemms("all")) == 3 * 7
    assert spec.shapes("all", merged=True) == {
        (1024 + 2 * 256, 1024): 3, (1024, 1024): 3, (2 * 2816, 1024): 3, (1024, 2816): 3}
    del llama_cfg["num_key_value_heads"]  # defaults to num_attention_heads
    assert shape(tower_spec_from_config(llama_cfg), "v_proj", 0) == (1024, 1024)


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "mistral"])
def test_llama_style_types(llama_cfg, model_type):
    cfg = dict(llama_cfg, model_type=model_type, head_dim=128)  # qwen3-style: heads*hd != hidden
    spec = tower_spec_from_config(cfg)
    assert shape(spec, "q_proj", 0) == (16 * 128, 1024)
    assert shape(spec, "o_proj", 0) == (1024, 16 * 128)
    cfg["head_dim"] = None  # mistral writes null: the type's default applies (Qwen3's: 128)
    q_n = 16 * 128 if model_type == "qwen3" else 1024
    assert shape(tower_spec_from_config(cfg), "q_proj", 0) == (q_n, 1024)
