"""DeepSeek-V4 towers: shapes as transformers 5.25 builds them, the layer schedule, the merge
group of the query's and the KV head's projections, what is left out, and the tower run on
the CPU."""

from __future__ import annotations

import pytest
import torch

from fp8tower.formats import sqnr_db
from fp8tower.models import ConfigError, tower_spec_from_config
from fp8tower.models.tp import TpError
from fp8tower.tower.build import build_tower

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV4Config"):  # added after transformers 5.17
    pytest.skip("this transformers has no DeepSeek-V4 (5.25 has)", allow_module_level=True)

CSA, HCA, SWA = ("compressed_sparse_attention", "heavily_compressed_attention",
                 "sliding_attention")
TINY = {"model_type": "deepseek_v4", "hidden_size": 256, "moe_intermediate_size": 128,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 64, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64,
        "index_n_heads": 2, "index_head_dim": 32, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "vocab_size": 128, "layer_types": [SWA, CSA, HCA]}


def _hf_linears(cfg: dict) -> dict[str, tuple[int, int, str]]:
    """name -> (N, K, class name) of the nn.Linear modules transformers builds from ``cfg``."""
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return {n.removeprefix("model."): (m.out_features, m.in_features, type(m).__name__)
            for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def test_every_modelled_linear_is_transformers_own():
    """Each linear of the spec has the name and shape of the module transformers builds;
    left out: the grouped o_a_proj, the BF16 compressor / indexer projections, lm_head."""
    spec = tower_spec_from_config(TINY)
    hf = _hf_linears(TINY)
    ours = {lin.name: (lin.n, lin.k) for lin in spec.all_linears}
    assert {n: hf[n][:2] for n in ours} == ours
    assert all(hf[n][2] == "Linear" for n in ours)
    left = {n.split(".", 2)[-1] if n.startswith("layers.") else n for n in set(hf) - set(ours)}
    assert left == {"lm_head", "self_attn.o_a_proj", "self_attn.compressor.kv_proj",
                    "self_attn.compressor.gate_proj", "self_attn.compressor.indexer.kv_proj",
                    "self_attn.compressor.indexer.gate_proj",
                    "self_attn.compressor.indexer.scorer.weights_proj"}
    assert hf["layers.0.self_attn.o_a_proj"][2] == "DeepseekV4GroupedLinear"
    # the indexer runs in the compressed-sparse layer only
    assert [lin.layer for lin in spec.all_linears if "indexer" in lin.name] == [1]
    assert not any(lin.bias for lin in spec.all_linears)


def test_the_default_config_is_v4_flash_shaped():
    """transformers 5.25's DeepseekV4Config defaults (its checkpoint: DeepSeek-V4-Flash-Base):
    hidden 4096, 43 layers, two heavily compressed layers then CSA / HCA alternating."""
    cfg = transformers.DeepseekV4Config().to_dict()
    spec = tower_spec_from_config(cfg)
    assert spec.layer_types == tuple(transformers.DeepseekV4Config().layer_types)
    assert spec.shapes("all", merged=True) == {
        (1024 + 512, 4096): 43, (64 * 512, 1024): 43, (64 * 128, 1024): 20,
        (4096, 8 * 1024): 43, (2 * 2048, 4096): 43, (4096, 2048): 43}
    groups = spec.merge_groups("all")
    assert [m.proj for m in groups["layers.0.qkv_a"]] == ["q_a_proj", "kv_proj"]
    assert any("o_a_proj is not modelled" in n for n in spec.notes)
    assert "23 heavily_compressed_attention, 20 compressed_sparse_attention" in spec.summary()


@pytest.mark.parametrize("over", [
    {"layer_types": [SWA, CSA, HCA, CSA]},  # longer: cut to num_hidden_layers
    {"layer_types": [SWA, CSA, HCA, "full_attention"]},  # cut before transformers checks
    {"layer_types": None, "compress_ratios": [0, 4, 128]},  # the legacy per-layer ratios
])
def test_the_layer_schedule_is_transformers_own(over):
    cfg = dict(TINY, **over)
    spec = tower_spec_from_config(cfg)
    assert spec.layer_types == (SWA, CSA, HCA)
    assert list(spec.layer_types) == transformers.AutoConfig.for_model(**cfg).layer_types
    without = {k: v for k, v in TINY.items() if k != "layer_types"}
    assert tower_spec_from_config(without).layer_types == tuple(
        transformers.AutoConfig.for_model(**without).layer_types)


def test_intermediate_size_is_the_shared_experts_width_as_transformers_reads_it():
    """config.json's intermediate_size sets moe_intermediate_size (the config's attribute
    map); given both, transformers takes intermediate_size."""
    for over in ({"intermediate_size": 96}, {"intermediate_size": 96,
                                             "moe_intermediate_size": None}):
        cfg = {k: v for k, v in dict(TINY, **over).items() if v is not None}
        spec = tower_spec_from_config(cfg)
        assert transformers.AutoConfig.for_model(**cfg).moe_intermediate_size == 96
        assert {lin.n for lin in spec.all_linears if "gate_proj" in lin.name} == {96}


@pytest.mark.parametrize("field, value, match", [
    ("layer_types", [CSA, "full_attention", HCA],
     r"layer_types: got \[.*\]; expected a list of at least num_hidden_layers \(3\) entries"),
    ("layer_types", [CSA, HCA], "at least num_hidden_layers"),
    ("compress_ratios", [0, 4, 64], r"compress_ratios: .* each one of 0, 4, 128"),
    ("o_groups", 3, r"o_groups: got 3; expected a divisor of num_attention_heads \* head_dim"),
    ("head_dim", None, r"head_dim: missing; expected a positive integer"),
])
def test_config_errors_name_the_field(field, value, match):
    cfg = dict(TINY, **{field: value})
    if field == "compress_ratios":
        cfg.pop("layer_types")
    with pytest.raises(ConfigError, match=match):
        tower_spec_from_config(cfg)


@pytest.mark.parametrize("tp", [2, 3, 128])
def test_tp_is_refused_not_guessed(tp):
    """How an engine splits V4's shared KV head and grouped output is not known here: every
    tp > 1 is refused by name (tp 3 was refused for the heads, as if tp 2 would do)."""
    with pytest.raises(TpError, match=rf"tp: got {tp}; expected 1 for deepseek_v4: how an "
                                      r"engine splits DeepSeek-V4's shared KV head"):
        tower_spec_from_config(TINY, tp=tp)


@pytest.mark.parametrize("scheme", ["per_tensor", "block128"])
def test_the_tower_runs_merged_and_unmerged_alike(scheme):
    """q_b_proj and the indexer's q_b_proj read the latent GEMM's stand-in, o_b_proj theirs;
    the merged arm (q_a + kv one GEMM) computes the unmerged arm's step."""
    spec = tower_spec_from_config(TINY)
    un = build_tower(spec, scheme=scheme, m=2, seed=3, parts="all")
    mg = build_tower(spec, scheme=scheme, m=2, seed=3, parts="all", arm="merged")
    assert len(mg.modules()) == len(un.modules()) - 2 * 3  # q_a + kv and gate + up, 3 layers
    y_un, y_mg = un.step(un.static_x), mg.step(mg.static_x)
    assert torch.isfinite(y_un).all() and sqnr_db(y_un.float(), y_mg.float()) >= 40.0
