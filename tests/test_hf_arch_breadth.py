"""Conversion and loading across transformers architectures (2026-12-06 architecture audit:
tiny random models of each family through convert / from_pretrained / save_pretrained, CPU,
reference backend). Each test failed before its fix."""

from __future__ import annotations

import copy
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent / "checkpoint"))

from ckpt_writer import Spec, q_block, save
from safetensors.torch import load_file

from fp8tower.hf import conversion, families
from fp8tower.hf.conversion import ConvertError, convert, default_filter
from fp8tower.hf.pretrained import describe, from_pretrained
from fp8tower.hf.write import write_merged
from fp8tower.nn.linear import Fp8Linear

V = 128
# a tiny config of any model type: the fields its config has, set small
SMALL = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "vocab_size": V, "num_experts": 4, "n_routed_experts": 4,
         "num_local_experts": 4, "num_experts_per_tok": 2, "q_lora_rank": 32,
         "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
         "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "n_shared_experts": 1,
         "num_shared_experts": 1, "shared_expert_intermediate_size": 32,
         "max_position_embeddings": 64, "moe_topk": 2, "num_dense_layers": 1,
         "expert_ffn_hidden_size": 32, "ffn_hidden_size": 128, "num_layers": 2,
         "index_head_dim": 16, "index_n_heads": 2, "index_topk": 4, "sliding_window": 16,
         "tie_word_embeddings": False}

NOT_AUTO = {"mistral4": "Mistral4ForCausalLM"}


def _model(model_type: str, **over) -> nn.Module:
    base = transformers.AutoConfig.for_model(model_type)
    kw = {k: v for k, v in SMALL.items()  # fields, not properties (Falcon's head_dim)
          if hasattr(base, k) and not isinstance(getattr(type(base), k, None), property)}
    kw.update(over)
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = cfg.layer_types[:cfg.num_hidden_layers]
    torch.manual_seed(0)
    if model_type in NOT_AUTO:  # not in transformers 5.25's AutoModelForCausalLM table
        m = getattr(transformers, NOT_AUTO[model_type])(cfg).float()
    else:
        m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # wider than the init's std 0.02: logits that vary
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08)
    return m.eval()


def _ids():
    return torch.randint(3, V, (1, 6), generator=torch.Generator().manual_seed(1))


def _logits(model):
    with torch.no_grad():
        return model(_ids()).logits


def _count(model, cls=Fp8Linear):
    return sum(type(m) is cls for m in model.modules())


# ----------------------------------------------------------------------------- 1. Falcon

FALCON = {"hidden_size": 64, "num_attention_heads": 4, "new_decoder_architecture": False,
          "multi_query": True}


def test_falcon_linears_convert():
    """FalconLinear (an nn.Linear whose forward is x @ W.T + b) was skipped as a subclass
    with a forward of its own: convert refused with 'converted nothing', blaming the
    default filter (2026-12-06 audit)."""
    for kw in (FALCON, dict(FALCON, new_decoder_architecture=True, num_kv_heads=2)):
        m = _model("falcon", **kw)
        ref = _logits(m)
        convert(m, "channel_token", backend="reference")
        assert _count(m) == 8 and not conversion.own_forward_linears(m)
        out = _logits(m)
        assert float(20 * torch.log10(ref.norm() / (ref - out).norm())) > 20


def test_falcon_from_pretrained_converts_and_saves(tmp_path):
    """from_pretrained of a Falcon checkpoint returned a model with no Fp8Linear, silently
    (FP8 weights dequantized); its save_pretrained then failed."""
    m = _model("falcon", **FALCON)
    m.save_pretrained(tmp_path / "src")
    ours = from_pretrained(tmp_path / "src", scheme="per_tensor", backend="reference",
                           dtype=torch.float32)
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "src",
                                                            dtype=torch.float32).eval()
    convert(ref, "per_tensor", backend="reference")
    assert _count(ours) == 8 and torch.equal(_logits(ours), _logits(ref))
    ours.save_pretrained(tmp_path / "out")
    back = from_pretrained(tmp_path / "out", backend="reference", dtype=torch.float32)
    assert torch.equal(_logits(back), _logits(ours))


def test_a_skipped_subclass_is_the_reason_convert_and_from_pretrained_give(tmp_path,
                                                                          monkeypatch):
    """Where every linear is a subclass left alone, that is the reason given: convert said
    "kept in high precision by the default filter", from_pretrained returned the model
    unconverted."""
    m = _model("falcon", **FALCON)
    m.save_pretrained(tmp_path / "src")
    monkeypatch.setattr(conversion, "PLAIN_LINEAR_SUBCLASSES", frozenset(), raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "left unconverted: ... FalconLinear"
        with pytest.raises(ConvertError, match=r"only the nn.Linear layers lm_head \(kept in "
                                               r"high precision by the default filter\) and "
                                               r"nn.Linear subclasses with a forward of their "
                                               r"own, which fp8tower does not swap: "
                                               r"FalconLinear \(8: "):
            convert(m, "per_tensor", backend="reference")
        with pytest.raises(ConvertError, match=r"8 of the checkpoint's 8 linear\(s\) to load are "
                                               r"nn.Linear subclasses .*FalconLinear"):
            from_pretrained(tmp_path / "src", scheme="per_tensor", backend="reference")


# ----------------------------------------------------------------------------- 2. routers


def test_moe_routers_under_other_names_stay_high_precision():
    """Routers that are nn.Linear under names other than mlp.gate were quantized: tiny
    LongCat's logits cos 0.956 against bf16, 0.999 with the routers kept (2026-12-06)."""
    for fqn in ("model.layers.0.router.proj",  # Gemma-4
                "model.layers.0.mlp.router.classifier",  # LongCat-Flash
                "model.layers.0.mlp.gate.wg",  # Hunyuan-V1-MoE
                "model.layers.1.mlp.router.gate",  # AFMoE
                "model.layers.0.mlp.router.layer",  # JetMoE
                "transformer.blocks.0.ffn.router.layer"):  # DBRX
        assert not default_filter(None, fqn), fqn
    for fqn in ("model.layers.0.mlp.gate_proj", "model.layers.0.self_attn.gate",
                "model.layers.0.mlp.shared_mlp.gate_proj", "model.layers.0.mlp.up_proj"):
        assert default_filter(None, fqn), fqn


@pytest.mark.parametrize("model_type,routers", [
    ("longcat_flash", ("mlp.router.classifier",)),
    ("hunyuan_v1_moe", ("mlp.gate.wg",)),
])
def test_convert_keeps_the_routers(model_type, routers):
    m = _model(model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the experts kept (item 6)
        convert(m, "per_tensor", backend="reference")
    kept = [n for n, x in m.named_modules() if type(x) is nn.Linear]
    assert any(n.endswith(routers) for n in kept), kept
    assert not any(n.endswith(routers) for n, x in m.named_modules() if type(x) is Fp8Linear)


class _Moe(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])
        self.scorer = nn.Linear(16, 4)  # a router by shape: 4 experts
        self.proj = nn.Linear(16, 8)
        self.shared_expert = nn.Sequential(nn.Linear(16, 4))


def test_a_router_is_also_known_by_its_expert_count():
    """A linear beside the experts whose out_features is the config's expert count stays in
    high precision whatever its name; one in the shared expert or attention does not."""
    model = nn.Module()
    model.config = transformers.PretrainedConfig(num_local_experts=4)
    model.moe = _Moe()
    model.attn = nn.Module()
    model.attn.k_proj = nn.Linear(16, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convert(model, "per_tensor", backend="reference")
    assert type(model.moe.scorer) is nn.Linear
    assert type(model.moe.proj) is Fp8Linear and type(model.moe.shared_expert[0]) is Fp8Linear
    assert type(model.attn.k_proj) is Fp8Linear


def test_describe_keeps_the_routers_convert_keeps(tmp_path):
    m = _model("longcat_flash")
    m.save_pretrained(tmp_path)
    kept = describe(tmp_path, scheme="per_tensor")["kept_high_precision"]
    assert "model.layers.0.mlp.router.classifier" in kept


# ----------------------------------------------------------------------------- 3. experts


PER_EXPERT = ["olmoe", "hunyuan_v1_moe", "afmoe", "longcat_flash", "ernie4_5_moe",
              "exaone_moe", "dots1", "glm4_moe_lite", "deepseek_v32", "cohere2_moe",
              "minimax_m2"]


@pytest.mark.parametrize("model_type", PER_EXPERT)
def test_per_expert_checkpoints_of_more_moe_types_load(tmp_path, model_type):
    """transformers 5.25 maps ~25 model types onto the per-expert layout (conversion_mapping.
    py); fp8tower knew 8: "parameter(s) not in the checkpoint: ...experts.gate_up_proj".
    The fused experts and the routers' score biases (ernie4_5_moe, exaone_moe, minimax_m2:
    renamed by transformers) come out as transformers' own load gives them."""
    m = _model(model_type)
    with torch.no_grad():
        for name, t in [*m.named_parameters(), *m.named_buffers()]:
            if "correction_bias" in name:
                t.normal_()
    m.save_pretrained(tmp_path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = from_pretrained(tmp_path, scheme="per_tensor", backend="reference",
                               dtype=torch.float32)
    assert not [w for w in caught if "not used by the model" in str(w.message)]
    want, got = ref.state_dict(), ours.state_dict()
    keys = [k for k in want if k.endswith(("experts.gate_up_proj", "experts.down_proj"))
            or "correction_bias" in k]
    assert len(keys) >= 2
    for k in keys:
        assert torch.equal(want[k], got[k]), k


def test_the_expert_layouts_match_transformers_mapping():
    """Each entry of the table: transformers 5.25's conversion mapping for the type holds
    the layout's expert converters (and only renames fp8tower applies besides)."""
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping as mapping

    def sig(c):
        return (type(c).__name__, tuple(c.source_patterns), tuple(c.target_patterns),
                tuple((type(o).__name__, sorted(vars(o).items()))
                      for o in getattr(c, "operations", ())))

    for mt, layout in families.EXPERT_LAYOUTS.items():
        if mt.startswith("qwen3_5_moe"):  # their own entry: the language_model prefix
            continue
        got = [sig(c) for c in mapping(mt)]
        base = [sig(c) for c in mapping(layout)]
        assert all(b in got for b in base), mt
        extra = [g for g in got if g not in base]
        if mt == "minimax_m2":  # .block_sparse_moe. -> .mlp. (MIXTRAL_RULES' first rule)
            assert [g[1] for g in extra] == [(".block_sparse_moe.e_score_correction_bias",)]
        else:
            assert len(extra) == len(families.EXTRA_RULES.get(mt, ())), mt


def test_an_unlisted_type_takes_transformers_layout_when_it_is_exactly_one(monkeypatch):
    layouts = {k: v for k, v in families.EXPERT_LAYOUTS.items()
               if k not in ("olmoe", "ernie4_5_moe")}
    monkeypatch.setattr(families, "EXPERT_LAYOUTS", layouts)
    families.expert_layout.cache_clear()
    try:
        assert families.expert_layout("olmoe") == "qwen2_moe"
        assert families.expert_layout("ernie4_5_moe") is None  # one rename more: not guessed
        assert families.expert_layout("llama") is None
    finally:
        families.expert_layout.cache_clear()


# ----------------------------------------------------------------------------- 4. GPT-NeoX


def test_gpt_neox_embed_out_loads_as_lm_head(tmp_path):
    """transformers 5 renames embed_out. -> lm_head. at load; from_pretrained failed with
    "lm_head.weight not in the checkpoint"."""
    m = _model("gpt_neox")
    m.save_pretrained(tmp_path)
    assert "embed_out.weight" in load_file(tmp_path / "model.safetensors")
    ours = from_pretrained(tmp_path, scheme="per_tensor", backend="reference",
                           dtype=torch.float32)
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    convert(ref.eval(), "per_tensor", backend="reference")
    assert torch.equal(_logits(ours), _logits(ref))


def test_a_missing_parameter_error_lists_the_tensors_left_unread(tmp_path):
    """The tensors the model did not read were named only in a warning after the raise,
    never seen."""
    _model("gpt_neox").save_pretrained(tmp_path)
    with pytest.raises(ConvertError, match=r"not in the checkpoint .*: lm_head\.weight; 1 "
                                           r"stored tensor\(s\) went unread: embed_out\.weight"):
        from_pretrained(tmp_path, scheme="per_tensor", backend="reference", key_mapping={})


# ----------------------------------------------------------------------------- 5. Mixtral


@pytest.mark.filterwarnings("ignore:.*MoE expert parameter")
@pytest.mark.parametrize("model_type", ["mixtral", "granitemoe"])
def test_mixtral_and_granitemoe_checkpoints_load(tmp_path, model_type):
    """Mixtral (block_sparse_moe.experts.E.w1/w2/w3, router block_sparse_moe.gate) and
    GraniteMoE (input_linear / output_linear, router.layer) checkpoints: "parameter(s) not
    in the checkpoint"."""
    m = _model(model_type)
    m.save_pretrained(tmp_path)
    ours = from_pretrained(tmp_path, scheme="per_tensor", backend="reference",
                           dtype=torch.float32)
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    convert(ref.eval(), "per_tensor", backend="reference")
    assert torch.equal(_logits(ours), _logits(ref))


def test_an_fp8_mixtral_checkpoint_fills_its_experts_dequantized(tmp_path):
    m = _model("mixtral")
    m.save_pretrained(tmp_path / "src")
    tensors = load_file(tmp_path / "src" / "model.safetensors")
    config = dict(m.config.to_dict(), quantization_config={
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "gate"]})
    deq = {}
    for k in [k for k in tensors if re.search(r"(proj|\.w[123])\.weight$", k)]:
        q, s = q_block(tensors[k].float())
        tensors[k], tensors[k[:-len("weight")] + "weight_scale_inv"] = q, s
        deq[k] = q.float() * s.repeat_interleave(128, 0).repeat_interleave(128, 1)[
            :q.shape[0], :q.shape[1]]
    path = save(Spec("block_fp8", config, tensors), tmp_path / "fp8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = from_pretrained(path, backend="reference", dtype=torch.float32)
    experts = ours.model.layers[1].mlp.experts
    stored = "model.layers.1.block_sparse_moe.experts.{}.{}.weight"
    for e in range(4):
        w1, w2, w3 = (deq[stored.format(e, w)] for w in ("w1", "w2", "w3"))
        assert torch.equal(experts.gate_up_proj[e], torch.cat([w1, w3]))
        assert torch.equal(experts.down_proj[e], w2)
    assert type(ours.model.layers[1].self_attn.o_proj) is Fp8Linear
    assert torch.isfinite(_logits(ours)).all()


# ----------------------------------------------------------------------------- 6. experts kept


def test_convert_counts_the_3d_experts_it_leaves_in_high_precision():
    """They hold most of an MoE model's linear weights; nothing said so."""
    m = _model("qwen3_moe")
    experts = sum(p.numel() for n, p in m.named_parameters() if p.dim() == 3)
    linears = sum(x.weight.numel() for x in m.modules() if type(x) is nn.Linear)
    share = f"{experts / (experts + linears):.0%}"
    with pytest.warns(UserWarning, match=rf"4 MoE expert parameter\(s\) stay in high precision "
                                         rf"\(3-D fused experts, .*: {experts} weights, {share} "
                                         r"of the linear and expert weights\)"):
        convert(m, "per_tensor", backend="reference")


# ----------------------------------------------------------------------------- 7. merging

MERGES = {  # model_type -> (config overrides, merged names per layer)
    "gemma": ({}, ["qkv_proj", "gate_up_proj"]),
    "gemma2": ({}, ["qkv_proj", "gate_up_proj"]),
    "gemma3_text": ({}, ["qkv_proj", "gate_up_proj"]),
    "qwen2_moe": ({"mlp_only_layers": [0]}, ["qkv_proj", "gate_up_proj"]),
    "qwen3_moe": ({"mlp_only_layers": [0]}, ["qkv_proj", "gate_up_proj"]),
    "mixtral": ({}, ["qkv_proj"]),
    "glm4_moe": ({}, ["qkv_proj", "gate_up_proj"]),
    "deepseek_v3": ({"head_dim": 8, "num_key_value_heads": 4},
                    ["fused_qkv_a_proj", "gate_up_proj"]),
    # multi-head latent attention: q_a_proj + kv_a_proj_with_mqa (q_proj without a q LoRA)
    "deepseek_v2": ({"head_dim": 8, "num_key_value_heads": 4},
                    ["fused_qkv_a_proj", "gate_up_proj"]),
    "deepseek_v2:no_q_lora": ({"head_dim": 8, "num_key_value_heads": 4, "q_lora_rank": None},
                              ["fused_qkv_a_proj", "gate_up_proj"]),
    "deepseek_v32": ({"num_key_value_heads": 4}, ["fused_qkv_a_proj", "gate_up_proj"]),
    "glm4_moe_lite": ({"num_key_value_heads": 4}, ["fused_qkv_a_proj", "gate_up_proj"]),
    "glm_moe_dsa": ({"num_key_value_heads": 4}, ["fused_qkv_a_proj", "gate_up_proj"]),
    "longcat_flash": ({"num_key_value_heads": 4, "head_dim": 8}, ["fused_qkv_a_proj", "gate_up_proj"]),
    "kimi_linear": ({"num_key_value_heads": 4, "pad_token_id": 0,  # layer 1 MLA
                     "layer_types": ["linear_attention", "full_attention"]},
                    ["fused_qkv_a_proj", "gate_up_proj"]),
    "minicpm3": ({"num_key_value_heads": 4}, ["fused_qkv_a_proj", "gate_up_proj"]),
    "mistral4": ({"num_key_value_heads": 4, "head_dim": 24}, ["fused_qkv_a_proj", "gate_up_proj"]),
    # shared-KV attention: q_a_proj + kv_proj; layer 0's indexer q_b_proj reads q_a_norm's
    # output (another module's: apart), the compressors' kv / gate stay high precision
    "deepseek_v4": ({"num_key_value_heads": 1, "head_dim": 32, "o_groups": 2,
                     "o_lora_rank": 16, "layer_types": ["compressed_sparse_attention",
                                                        "heavily_compressed_attention"]},
                    ["fused_qkv_a_proj", "gate_up_proj"]),
    "olmo": ({"clip_qkv": None}, ["qkv_proj", "gate_up_proj"]),
    "olmoe": ({"clip_qkv": None}, ["qkv_proj"]),
    "olmo2": ({}, ["qkv_proj", "gate_up_proj"]),
    "granite": ({}, ["qkv_proj", "gate_up_proj"]),
    "granitemoe": ({}, ["qkv_proj"]),
    "cohere": ({}, ["qkv_proj", "gate_up_proj"]),
    "starcoder2": ({}, ["qkv_proj"]),
    "gpt_oss": ({"intermediate_size": 64}, ["qkv_proj"]),
}


@pytest.mark.parametrize("model_type", list(MERGES))
def test_more_families_merge_bit_exactly(model_type, monkeypatch):
    """Families whose q/k/v and gate/up read one tensor (forwards read in transformers
    5.25.0, families.py) now merge; their logits are bit-equal to the unmerged model's and
    each GEMM runs once per forward."""
    over, names = MERGES[model_type]
    base = _model(model_type.partition(":")[0], **over)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the experts kept (item 6)
        unmerged = convert(copy.deepcopy(base), "per_tensor", merge=False, backend="reference")
        merged = convert(copy.deepcopy(base), "per_tensor", backend="reference")
    made = {r["merged"] for r in merged.fp8tower_merges if r["merged_ok"]}
    assert made == set(names) and all(r["merged_ok"] for r in merged.fp8tower_merges)
    calls = []
    orig = Fp8Linear.forward
    monkeypatch.setattr(Fp8Linear, "forward", lambda self, x: calls.append(self) or
                        orig(self, x))
    lm = _logits(merged)
    fp8 = [x for x in merged.modules() if type(x) is Fp8Linear]
    assert sorted(map(id, calls)) == sorted(map(id, fp8))
    assert torch.equal(lm, _logits(unmerged))


# ------------------------------------------------------ 8. transformers' fp32-kept modules


def test_modules_transformers_keeps_in_fp32_stay_high_precision():
    """DeepSeek-V3.2's indexer.weights_proj (transformers: _keep_in_fp32_modules) casts its
    input to its weight's dtype: converted to FP8, the forward failed (2026-12-06 audit). Kept
    in high precision when quantizing, the model runs and stays close to the bf16 one."""
    import warnings

    from fp8tower.hf.conversion import keep_in_fp32

    m = _model("deepseek_v32", index_topk=8, num_key_value_heads=4)
    assert keep_in_fp32(m).search("model.layers.0.self_attn.indexer.weights_proj.weight")
    ref = _logits(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the 3-D experts' note
        convert(m, "per_tensor", backend="reference")
    kept = [n for n, x in m.named_modules() if n.endswith("indexer.weights_proj")]
    assert kept and all(type(m.get_submodule(n)) is nn.Linear for n in kept)
    assert _count(m) > 0
    cos = torch.nn.functional.cosine_similarity(ref.flatten(), _logits(m).flatten(), dim=0)
    assert float(cos) > 0.99


def test_deepseek_v4_keeps_its_bf16_projections_and_grouped_output():
    """DeepSeek-V4: the compressors' and the indexer's kv / gate projections and the scorer's
    weights_proj (BF16 in V4 checkpoints, transformers' _keep_in_fp32_modules) stay
    nn.Linear, the grouped o_a_proj stays itself; the indexer's q_b_proj is converted."""
    over, _ = MERGES["deepseek_v4"]
    m = _model("deepseek_v4", **over)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the grouped linear and the experts, left as they are
        convert(m, "per_tensor", backend="reference")
    mods = dict(m.named_modules())
    kept = [n for n in mods if n.endswith(("compressor.kv_proj", "compressor.gate_proj",
                                           "indexer.kv_proj", "indexer.gate_proj",
                                           "scorer.weights_proj"))]
    assert len(kept) == 2 + 2 + 3  # CSA layer 0: all five; HCA layer 1: its compressor's two
    assert all(type(mods[n]) is nn.Linear for n in kept)
    assert all(type(x).__name__ == "DeepseekV4GroupedLinear"
               for n, x in mods.items() if n.endswith("o_a_proj"))
    assert type(mods["model.layers.0.self_attn.compressor.indexer.q_b_proj"]) is Fp8Linear
    assert torch.isfinite(_logits(m)).all()


def test_a_model_saved_under_transformers_original_names_is_explained(tmp_path):
    """DeepSeek-V4 saved by transformers' save_pretrained (DeepSeek's own names by default:
    head.weight, layers.N.attn.wq_a, experts one by one): the error says why and what to do
    (before: only "pass key_mapping=", which could not load the experts); saved with
    save_original_format=False it loads."""
    from fp8tower.hf.conversion import ConvertError

    over, _ = MERGES["deepseek_v4"]
    m = _model("deepseek_v4", **over)
    m.save_pretrained(tmp_path / "orig")
    with pytest.raises(ConvertError, match=r"transformers renames deepseek_v4's checkpoint "
                                           r"tensors on load .* save_original_format=False"):
        from_pretrained(tmp_path / "orig", scheme="per_tensor")
    m.save_pretrained(tmp_path / "hf", save_original_format=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the grouped o_a_proj and the experts, kept
        loaded = from_pretrained(tmp_path / "hf", scheme="per_tensor", backend="reference")
    assert _count(loaded) > 0 and torch.isfinite(_logits(loaded)).all()
    # describe keeps what from_pretrained kept: the BF16 compressor / indexer projections
    # (transformers' _keep_in_fp32_modules; reported quantized before)
    info = describe(tmp_path / "hf", scheme="per_tensor")
    fp8 = {n.removeprefix("model.") for n, x in loaded.named_modules() if type(x) is Fp8Linear}
    kept = {n.removeprefix("model.") for n in info["kept_high_precision"]}
    assert {n for n in kept if "compressor" in n} == {
        n.removeprefix("model.") for n, x in loaded.named_modules()
        if "compressor" in n and type(x) is nn.Linear}
    assert not fp8 & kept


def test_deepseek_v4_is_not_run_step_by_step(tmp_path):
    """bench generate / trace capture-model prefill a StaticCache and repeat one step: V4 has
    neither (a KeyError after the build before); refused by name before anything is built."""
    import json

    from fp8tower.hf.random_model import text_config

    cfg = transformers.AutoConfig.for_model("deepseek_v4").to_dict()
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"model_type 'deepseek_v4' is not run step by step "
                                         r"here: its compressed-attention caches"):
        text_config(str(tmp_path / "config.json"))


def test_gpt_neox_head_is_quantized_when_a_filter_asks(tmp_path):
    """Pythia's embed_out is its lm_head: kept in high precision by default, quantized when
    a filter asks (it counted as an embedding table, which no filter could reach)."""
    _model("gpt_neox").save_pretrained(tmp_path)
    m = from_pretrained(tmp_path, scheme="per_tensor", backend="reference",
                        dtype=torch.float32, filter=lambda mod, fqn: True)
    assert type(m.get_submodule("lm_head")) is Fp8Linear
    default = from_pretrained(tmp_path, scheme="per_tensor", backend="reference",
                              dtype=torch.float32)
    assert type(default.get_submodule("lm_head")) is nn.Linear


# ------------------------------------------------- 10. multi-head latent attention, OLMo


def _block_fp8(m: nn.Module, path: Path) -> Path:
    """``m`` saved as a DeepSeek-style block FP8 checkpoint (every projection quantized)."""
    m.save_pretrained(path / "src")
    tensors = load_file(path / "src" / "model.safetensors")
    config = dict(m.config.to_dict(), quantization_config={
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "gate"]})
    for k in [k for k in tensors if re.search(r"_proj(_with_mqa)?\.weight$", k)]:
        tensors[k], tensors[k[:-len("weight")] + "weight_scale_inv"] = q_block(tensors[k].float())
    return save(Spec("block_fp8", config, tensors), path / "fp8")


@pytest.mark.filterwarnings("ignore:.*MoE expert parameter")
def test_a_deepseek_block_fp8_checkpoint_merges_its_latent_projections(tmp_path):
    """DeepSeek-V3's q_a_proj (N = 1536, 12 block rows) and kv_a_proj_with_mqa (N = 576,
    a partial last block row) read one hidden state: one block128 GEMM (as vLLM's
    fused_qkv_a_proj), the logits bit-equal to the unmerged load; describe says so first."""
    m = _model("deepseek_v3", head_dim=8, num_key_value_heads=4, q_lora_rank=128)
    path = _block_fp8(m, tmp_path)
    groups = {(g["merged"], g["action"]) for g in describe(path)["merge_groups"]}
    assert ("fused_qkv_a_proj", "merge") in groups
    ours = from_pretrained(path, backend="reference", dtype=torch.float32)
    unmerged = from_pretrained(path, backend="reference", dtype=torch.float32, merge=False)
    fused = [r for r in ours.fp8tower_merges if r["merged"] == "fused_qkv_a_proj"]
    assert len(fused) == 2 and all(r["merged_ok"] for r in fused)
    assert fused[0]["sizes"] == [128, 40]  # kv_lora_rank 32 + qk_rope_head_dim 8
    assert torch.equal(_logits(ours), _logits(unmerged))


@pytest.mark.parametrize("model_type", ["olmo", "olmoe"])
def test_olmo_merges_q_k_v_only_where_it_clips_none(tmp_path, model_type):
    """OlmoAttention clamps q/k/v in place under clip_qkv (views of one merged GEMM cannot
    be, under autograd): that group is kept apart with the reason, in convert and in
    describe; gate/up still merge and the logits equal the unmerged model's."""
    base = _model(model_type, clip_qkv=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # OLMoE's experts kept (item 6)
        merged = convert(copy.deepcopy(base), "per_tensor", backend="reference")
        unmerged = convert(copy.deepcopy(base), "per_tensor", merge=False, backend="reference")
    qkv = [r for r in merged.fp8tower_merges if r["merged"] == "qkv_proj"]
    assert qkv and not any(r["merged_ok"] for r in qkv)
    assert all("clip_qkv=0.5" in r["reason"] for r in qkv)
    assert all(r["merged_ok"] for r in merged.fp8tower_merges if r["merged"] == "gate_up_proj")
    assert torch.equal(_logits(merged), _logits(unmerged))
    base.save_pretrained(tmp_path)
    actions = {(g["merged"], g["action"], g["reason"])
               for g in describe(tmp_path, scheme="per_tensor")["merge_groups"]}
    assert {a[:2] for a in actions} == {("qkv_proj", "keep"), ("gate_up_proj", "merge")} - (
        {("gate_up_proj", "merge")} if model_type == "olmoe" else set())
    assert any(a[2] and "clip_qkv" in a[2] for a in actions)
    # write_merged's requant_max merges what an exact merge keeps, never a skipped group
    # (it wrote q/k/v merged, which from_pretrained then kept apart)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # OLMoE's experts, stored per expert
        fp8 = _block_fp8(base, tmp_path / "b")
        report = write_merged(fp8, tmp_path / "out", requant_max=True)
    qkv = [g for g in report["groups"] if g["merged"].endswith("qkv_proj")]
    assert qkv and all(g["written"] == "separate" and "clip_qkv" in g["reason"] for g in qkv)


def test_a_skip_reads_the_text_config_and_capture_groups_by_class():
    """The family may be the text model's: its clip_qkv is the text config's. Kimi-Linear's
    q_proj merges in its MLA layers only: its delta-rule layers' q_proj is no member."""
    from fp8tower.hf.capture import _merged_name

    assert "clip_qkv=8" in families._clips_qkv({"model_type": "x",
                                                "text_config": {"clip_qkv": 8}})
    assert families._clips_qkv({"text_config": {"clip_qkv": None}}) is None
    names = _merged_name("kimi_linear")
    assert names[("KimiLinearAttention", "q_proj")] == "fused_qkv_a_proj"
    assert ("KimiLinearDeltaAttention", "q_proj") not in names
