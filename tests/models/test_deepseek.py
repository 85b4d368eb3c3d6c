"""DeepSeek-V2 / V3 towers (multi-head latent attention): shapes as transformers 5.25 builds
them, the latent projections' merge group, shared experts, tensor-parallel shards, and the
tower run on the CPU."""

from __future__ import annotations

import pytest
import torch

from fp8tower.formats import sqnr_db
from fp8tower.models import ConfigError, tower_spec_from_config
from fp8tower.models.tp import TpError
from fp8tower.tower.build import build_tower

transformers = pytest.importorskip("transformers")

# DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3), its FP8 quantization_config included
V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
      "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
      "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
      "n_shared_experts": 1, "n_routed_experts": 256, "kv_lora_rank": 512,
      "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
      "first_k_dense_replace": 3, "moe_layer_freq": 1,
      "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                              "quant_method": "fp8", "weight_block_size": [128, 128]}}
TINY = {"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 384,
        "moe_intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 4,
        "kv_lora_rank": 128, "q_lora_rank": 256, "qk_rope_head_dim": 32, "v_head_dim": 64,
        "qk_nope_head_dim": 64, "first_k_dense_replace": 1, "num_experts_per_tok": 2,
        "n_group": 1, "topk_group": 1, "vocab_size": 128, "tie_word_embeddings": False}


def _hf_linears(cfg: dict) -> dict[str, tuple[int, int]]:
    """name -> (N, K) of the nn.Linear modules transformers builds from ``cfg``."""
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return {n.removeprefix("model."): (m.out_features, m.in_features)
            for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


@pytest.mark.parametrize("over", [{}, {"q_lora_rank": None}, {"first_k_dense_replace": 0},
                                  {"attention_bias": True}, {"model_type": "deepseek_v2"},
                                  {"model_type": "deepseek_v2", "mlp_bias": True}])
def test_every_modelled_linear_is_transformers_own(over):
    """Each linear of the spec has the name, shape and bias of the module transformers
    builds; what it leaves out is kv_b_proj and lm_head."""
    cfg = dict(TINY, **over)
    spec = tower_spec_from_config(cfg)
    hf = _hf_linears(cfg)
    ours = {lin.name: (lin.n, lin.k) for lin in spec.all_linears}
    assert {n: hf[n] for n in ours} == ours
    left = sorted({n.rsplit(".", 1)[-1] for n in set(hf) - set(ours)})
    assert left == ["kv_b_proj", "lm_head"]  # (the router is no nn.Linear)
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    mods = dict(model.named_modules())
    assert all((mods["model." + lin.name].bias is not None) == lin.bias
               for lin in spec.all_linears)


def test_deepseek_v3_shapes_and_merges():
    spec = tower_spec_from_config(V3)
    assert spec.scheme_hint == "block128" and spec.mlp_in_scope
    assert spec.shapes("all", merged=True) == {
        (1536 + 576, 7168): 61, (128 * 192, 1536): 61, (7168, 128 * 128): 61,
        (2 * 18432, 7168): 3, (7168, 18432): 3, (2 * 2048, 7168): 58, (7168, 2048): 58}
    groups = spec.merge_groups("all")
    assert [m.proj for m in groups["layers.0.qkv_a"]] == ["q_a_proj", "kv_a_proj_with_mqa"]
    assert [m.proj for m in groups["layers.5.shared_gate_up"]] == [
        "shared_experts.gate_proj", "shared_experts.up_proj"]
    # no q LoRA (DeepSeek-V2-Lite): q_proj and kv_a apart, as vLLM runs them
    lite = tower_spec_from_config(dict(V3, q_lora_rank=None))
    assert not any(g.endswith("qkv_a") for g in lite.merge_groups("all"))
    assert (128 * 192, 7168) in lite.shapes("all", merged=True)
    assert any("kv_b_proj is not modelled" in n for n in spec.notes)


def test_deepseek_v3_tp8_replicates_the_latent_projections():
    """vLLM: q_a / kv_a ReplicatedLinear (whole on each rank; kv_a's N = 576 is no block
    multiple, and needs none), q_b column-parallel, o_proj row-parallel."""
    spec = tower_spec_from_config(V3, tp=8)
    assert spec.shapes("all", merged=True) == {
        (2112, 7168): 61, (3072, 1536): 61, (7168, 2048): 61, (4608, 7168): 3,
        (7168, 2304): 3, (512, 7168): 58, (7168, 256): 58}
    assert any("replicated on every rank" in n for n in spec.notes)
    with pytest.raises(TpError, match="num_attention_heads"):
        tower_spec_from_config(V3, tp=3)


def test_deepseek_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"kv_lora_rank: missing; expected a positive"):
        tower_spec_from_config({k: v for k, v in V3.items() if k != "kv_lora_rank"})
    with pytest.raises(ConfigError, match=r"first_k_dense_replace: got -1; expected an "
                                          r"integer >= 0"):
        tower_spec_from_config(dict(V3, first_k_dense_replace=-1))


@pytest.mark.parametrize("scheme", ["per_tensor", "block128"])
def test_deepseek_tower_runs_merged_and_unmerged_alike(scheme):
    """The tower's stand-ins feed q_b_proj from the latent GEMM and o_proj from q_b_proj;
    the merged arm (q_a + kv_a one GEMM, N = 256 + 160: the last member's partial block)
    computes the unmerged arm's step."""
    spec = tower_spec_from_config(TINY)
    un = build_tower(spec, scheme=scheme, m=2, seed=3, parts="all")
    mg = build_tower(spec, scheme=scheme, m=2, seed=3, parts="all", arm="merged")
    assert len(mg.modules()) < len(un.modules())
    y_un, y_mg = un.step(un.static_x), mg.step(mg.static_x)
    assert torch.isfinite(y_un).all() and sqnr_db(y_un.float(), y_mg.float()) >= 40.0


def test_a_deepseek_trace_with_the_mlps_reads_back(tmp_path):
    """The dense MLP's and the shared experts' GEMMs had one label (mlp.gate_proj) in two
    groups: the manifest was written, then refused by read_manifest."""
    from fp8tower.tower.capture import capture_arm
    from fp8tower.trace.manifest import read_manifest

    spec = tower_spec_from_config(TINY)
    want = {"unmerged": {"mlp.gate_proj", "mlp.shared_experts.gate_proj"},
            "merged": {"mlp.gate_proj+up_proj",
                       "mlp.shared_experts.gate_proj+shared_experts.up_proj",
                       "attention.q_a_proj+kv_a_proj_with_mqa"}}
    for arm, labels in want.items():
        capture_arm(spec, arm, backend="reference", steps=(1, 2), out_dir=tmp_path / arm,
                    device="cpu", parts="all")
        assert labels <= {op.label for op in read_manifest(tmp_path / arm / "manifest.json").ops}


def test_kimi_k2_reads_as_deepseek_v3():
    """Kimi-K2's config.json says model_type kimi_k2 (DeepseekV3ForCausalLM's shapes; a
    kimi_k25 config nests it as its text_config): the DeepSeek-V3 tower, not a ConfigError."""
    kimi = dict(V3, model_type="kimi_k2", n_routed_experts=384, num_attention_heads=64)
    spec = tower_spec_from_config(kimi)
    assert spec.model_type == "kimi_k2"
    assert spec.shapes(merged=True) == {(2112, 7168): 61, (64 * 192, 1536): 61,
                                        (7168, 64 * 128): 61}
    nested = tower_spec_from_config({"model_type": "kimi_k25", "text_config": kimi})
    assert nested.shapes(merged=True) == spec.shapes(merged=True)
