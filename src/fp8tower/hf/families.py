"""Per ``config.model_type``: which sibling projections merge (Liger-Kernel style table), and
how checkpoint tensor names map onto the causal LM's module names.

Each entry of :data:`GROUPS` becomes a patch function ``fn(model, mode) -> records`` (the
table ``conversion.MODEL_TYPE_TO_MERGE``) that replaces sibling :class:`~fp8tower.nn.linear.Fp8Linear` modules reading one input by one
merged GEMM (see :func:`fp8tower.hf.conversion.merge_group`). A group merges only inside the
parent classes named here: their ``forward`` was read (transformers 5.25.0, 2026-12-05 and,
the families after Qwen3-Next, 2026-12-06) and calls every member on the same, unmodified
tensor, one after the other, in the group's order, and changes no member's output in place:

- ``LlamaAttention`` / ``Qwen2Attention`` / ``MistralAttention`` / ``Qwen3Attention`` /
  ``Qwen3_5Attention`` / ``Qwen3_5MoeAttention`` / ``Qwen3NextAttention``: ``q_proj``,
  ``k_proj``, ``v_proj`` on ``hidden_states`` (Qwen3.5's and Qwen3-Next's q_proj carries query
  + output gate); likewise ``GemmaAttention``, ``Gemma2Attention``, ``Gemma3Attention``,
  ``Qwen2MoeAttention``, ``Qwen3MoeAttention`` (q/k norms after the GEMMs),
  ``MixtralAttention``, ``Glm4MoeAttention``, ``Olmo2Attention`` (q/k norms after),
  ``GraniteAttention``, ``GraniteMoeAttention``, ``CohereAttention``,
  ``Starcoder2Attention``, ``GptOssAttention``;
- ``LlamaMLP`` / ``Qwen2MLP`` / ``MistralMLP`` / ``Qwen3MLP`` / ``Qwen3_5MLP``: ``gate_proj``,
  ``up_proj`` on ``x``; ``Qwen3_5MoeMLP`` (the MoE block's shared expert, called on the
  block's reshaped ``hidden_states``) and ``Qwen3NextMLP`` (shared expert, or the dense MLP
  of ``mlp_only_layers``) alike; and ``GemmaMLP``, ``Gemma2MLP``, ``Gemma3MLP``,
  ``Qwen2MoeMLP`` (shared expert, dense MLP), ``Qwen3MoeMLP`` (dense MLP of
  ``mlp_only_layers``), ``Glm4MoeMLP``, ``DeepseekV2MLP``, ``DeepseekV3MLP`` (dense MLP and
  ``shared_experts``, called on the block's input), ``Olmo2MLP``, ``GraniteMLP``,
  ``CohereMLP``: ``down_proj(act(gate_proj(x)) * up_proj(x))``;
- ``Qwen3_5GatedDeltaNet`` / ``Qwen3_5MoeGatedDeltaNet``: ``in_proj_qkv``, ``in_proj_z``,
  then ``in_proj_b``, ``in_proj_a``, on ``hidden_states`` after
  ``apply_mask_to_padding_states`` (one tensor). (``Qwen3NextGatedDeltaNet`` has
  ``in_proj_qkvz`` and ``in_proj_ba`` already; ``in_proj_ba`` stays bf16 by default.)

- Multi-head latent attention (2026-12-06, transformers 5.25.0): ``DeepseekV2Attention``,
  ``DeepseekV3Attention``, ``DeepseekV32Attention``, ``Glm4MoeLiteAttention``,
  ``GlmMoeDsaAttention``, ``LongcatFlashMLA``, ``KimiLinearAttention``,
  ``MiniCPM3Attention``, ``Mistral4Attention``: ``q_a_proj`` (through ``q_a_layernorm`` to
  ``q_b_proj``), then ``kv_a_proj_with_mqa``, on ``hidden_states`` -> ``fused_qkv_a_proj``
  (vLLM's name; DeepSeek-V3: 1536 + 576 rows of K = 7168, one GEMM); with ``q_lora_rank``
  null (DeepSeek-V2-Lite) ``q_proj`` and ``kv_a_proj_with_mqa`` alike (fp8tower's own: vLLM
  keeps those two apart; with ``attention_bias`` only kv_a has a bias and they stay apart).
  The DSA indexer's ``wk`` reads ``hidden_states`` too but is called later, inside the
  indexer: not merged.
  Their MLPs (dense, shared experts) are gate/up groups as above.
- ``DeepseekV4Attention`` (2026-12-06, transformers 5.25.0): ``q_a_proj`` (through
  ``q_a_norm`` to ``q_b_proj``), then ``kv_proj`` (the one shared KV head), on
  ``hidden_states`` -> ``fused_qkv_a_proj``; ``DeepseekV4MLP`` (the shared expert) gate/up,
  each clamped after its GEMM (not in place). The compressors' ``kv_proj`` / ``gate_proj``
  read ``hidden_states`` too but are BF16 in V4 checkpoints (``_keep_in_fp32_modules``): kept.
- ``OlmoAttention`` / ``OlmoeAttention`` (q/k norms after): q/k/v on ``hidden_states``, but
  under ``clip_qkv`` they clamp q/k/v in place (``clamp_``), which a merged GEMM's split
  views do not allow under autograd: merged only where ``config.clip_qkv`` is null
  (:attr:`SiblingGroup.skip`).

Phi-3 and Falcon store q/k/v (and Phi-3 gate/up) fused already.

MoE experts (3-D parameters, not ``nn.Linear``) are not converted; router gates stay in high
precision (``conversion.kept_high_precision``). A family without an entry converts unmerged.
Merging is always exact in value (a member called on another tensor computes the merged GEMM
afresh, see ``MergedShard``); the class list only keeps that slow path from being taken.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SiblingGroup:
    """Members (attribute names on one parent) merged into ``merged_name`` on that parent.
    ``skip(config)``: why the model of that config must not merge the group (None: it may)."""

    merged_name: str
    members: tuple[str, ...]
    parent_classes: tuple[str, ...]
    skip: Callable[[object], str | None] | None = None

    def skip_reason(self, config) -> str | None:
        return None if self.skip is None else self.skip(config)


def _attn(*classes: str) -> SiblingGroup:
    return SiblingGroup("qkv_proj", ("q_proj", "k_proj", "v_proj"), classes)


def _mlp(*classes: str) -> SiblingGroup:
    return SiblingGroup("gate_up_proj", ("gate_proj", "up_proj"), classes)


def _mla(*classes: str) -> tuple[SiblingGroup, SiblingGroup]:
    """The latent projections of multi-head latent attention (one of the two is present)."""
    return (SiblingGroup("fused_qkv_a_proj", ("q_a_proj", "kv_a_proj_with_mqa"), classes),
            SiblingGroup("fused_qkv_a_proj", ("q_proj", "kv_a_proj_with_mqa"), classes))


def _field(config, name: str):
    """``config``'s field ``name`` (a PretrainedConfig or a config.json dict), else its
    text_config's (the family may be the text model's, ``config_model_type``)."""
    for c in (config, getattr(config, "text_config", None) if not isinstance(config, dict)
              else config.get("text_config")):
        value = c.get(name) if isinstance(c, dict) else getattr(c, name, None)
        if value is not None:
            return value
    return None


def _clips_qkv(config) -> str | None:
    clip = _field(config, "clip_qkv")
    return None if clip is None else (
        f"clip_qkv={clip}: the attention clamps q/k/v in place, which views of one merged "
        "GEMM do not allow under autograd")


def _gdn(cls: str) -> tuple[SiblingGroup, SiblingGroup]:
    return (SiblingGroup("in_proj_qkvz", ("in_proj_qkv", "in_proj_z"), (cls,)),
            SiblingGroup("in_proj_ba", ("in_proj_b", "in_proj_a"), (cls,)))


GROUPS: dict[str, tuple[SiblingGroup, ...]] = {
    "llama": (_attn("LlamaAttention"), _mlp("LlamaMLP")),
    "qwen2": (_attn("Qwen2Attention"), _mlp("Qwen2MLP")),
    "mistral": (_attn("MistralAttention"), _mlp("MistralMLP")),
    "qwen3": (_attn("Qwen3Attention"), _mlp("Qwen3MLP")),
    "qwen3_5": (*_gdn("Qwen3_5GatedDeltaNet"), _attn("Qwen3_5Attention"), _mlp("Qwen3_5MLP")),
    "qwen3_5_moe": (*_gdn("Qwen3_5MoeGatedDeltaNet"), _attn("Qwen3_5MoeAttention"),
                    _mlp("Qwen3_5MoeMLP")),
    "qwen3_next": (_attn("Qwen3NextAttention"), _mlp("Qwen3NextMLP")),
    # 2026-12-06 (forwards read in transformers 5.25.0, see above; merged logits bit-equal
    # to unmerged ones, tests/test_hf_arch_breadth.py)
    "gemma": (_attn("GemmaAttention"), _mlp("GemmaMLP")),
    "gemma2": (_attn("Gemma2Attention"), _mlp("Gemma2MLP")),
    "gemma3_text": (_attn("Gemma3Attention"), _mlp("Gemma3MLP")),
    "qwen2_moe": (_attn("Qwen2MoeAttention"), _mlp("Qwen2MoeMLP")),
    "qwen3_moe": (_attn("Qwen3MoeAttention"), _mlp("Qwen3MoeMLP")),
    "mixtral": (_attn("MixtralAttention"),),
    "glm4_moe": (_attn("Glm4MoeAttention"), _mlp("Glm4MoeMLP")),
    "deepseek_v2": (*_mla("DeepseekV2Attention"), _mlp("DeepseekV2MLP")),
    "deepseek_v3": (*_mla("DeepseekV3Attention"), _mlp("DeepseekV3MLP")),
    "deepseek_v32": (*_mla("DeepseekV32Attention"), _mlp("DeepseekV32MLP")),
    "glm4_moe_lite": (*_mla("Glm4MoeLiteAttention"), _mlp("Glm4MoeLiteMLP")),
    "glm_moe_dsa": (*_mla("GlmMoeDsaAttention"), _mlp("GlmMoeDsaMLP")),
    "longcat_flash": (*_mla("LongcatFlashMLA"), _mlp("LongcatFlashMLP")),
    "kimi_linear": (*_mla("KimiLinearAttention"), _mlp("KimiLinearMLP")),
    "minicpm3": (*_mla("MiniCPM3Attention"), _mlp("MiniCPM3MLP")),
    "mistral4": (*_mla("Mistral4Attention"), _mlp("Mistral4MLP")),
    "deepseek_v4": (SiblingGroup("fused_qkv_a_proj", ("q_a_proj", "kv_proj"),
                                 ("DeepseekV4Attention",)), _mlp("DeepseekV4MLP")),
    "olmo2": (_attn("Olmo2Attention"), _mlp("Olmo2MLP")),
    "olmo": (SiblingGroup("qkv_proj", ("q_proj", "k_proj", "v_proj"), ("OlmoAttention",),
                          _clips_qkv), _mlp("OlmoMLP")),
    "olmoe": (SiblingGroup("qkv_proj", ("q_proj", "k_proj", "v_proj"), ("OlmoeAttention",),
                           _clips_qkv),),
    "granite": (_attn("GraniteAttention"), _mlp("GraniteMLP")),
    "granitemoe": (_attn("GraniteMoeAttention"),),
    "cohere": (_attn("CohereAttention"), _mlp("CohereMLP")),
    "starcoder2": (_attn("Starcoder2Attention"),),
    "gpt_oss": (_attn("GptOssAttention"),),
}
GROUPS["qwen3_5_text"] = GROUPS["qwen3_5"]
# Kimi-K2's model_type (its remote code's classes are DeepseekV3Attention / DeepseekV3MLP;
# transformers 5.25 reads a kimi_k2 text config as deepseek_v3: kimi_k25's configuration)
GROUPS["kimi_k2"] = GROUPS["deepseek_v3"]
GROUPS["qwen3_5_moe_text"] = GROUPS["qwen3_5_moe"]


# How a MoE model type's checkpoints store its experts, as transformers 5.25.0's
# conversion_mapping.py maps them onto the model's fused 3-D ``experts.gate_up_proj``
# [E, 2I, H] (each expert's gate rows, then its up rows) and ``experts.down_proj`` [E, H, I]
# (``_MODEL_TO_CONVERSION_PATTERN``: each type below is mapped to the pattern named, read
# there; a tiny model of each, saved by transformers, loads in tests/test_hf_arch_breadth.py):
# - "qwen2_moe": ``mlp.experts.<e>.{gate,up,down}_proj.weight``, one tensor per expert
#   (pretrained._load_experts stacks them; FP8 ones dequantized);
# - "mixtral": the same as ``block_sparse_moe.experts.<e>.{w1,w3,w2}.weight``, the block
#   renamed ``mlp`` (its router too): renamed to the qwen2_moe names (:data:`MIXTRAL_RULES`);
# - "granitemoe": fused already, ``block_sparse_moe.input_linear.weight`` [E, 2I, H] /
#   ``output_linear.weight`` [E, H, I], router ``block_sparse_moe.router.layer.weight``:
#   renamed only (:data:`GRANITEMOE_RULES`); stored in FP8, they are refused (no scales read).
# Another layout (gpt-oss's transposed experts, Phi-MoE's, JetMoE's, DBRX's) is reported
# missing, never guessed. A model type not listed takes the layout transformers' own
# ``get_checkpoint_conversion_mapping`` gives it, where it is exactly one of these
# (:func:`expert_layout`).
EXPERT_LAYOUTS: dict[str, str] = {
    **{mt: "qwen2_moe" for mt in (
        "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text",
        "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe", "glm4_moe_lite",
        "glm_moe_dsa", "olmoe", "flex_olmo", "hunyuan_v1_moe", "afmoe", "longcat_flash",
        "ernie4_5_moe", "dots1", "exaone_moe", "cohere2_moe", "solar_open", "mellum", "beam",
        "sarvam_mla")},
    **{mt: "mixtral" for mt in ("mixtral", "minimax", "minimax_m2")},
    **{mt: "granitemoe" for mt in ("granitemoe", "granitemoeshared", "granitemoehybrid")},
}
# the model types whose experts pretrained._load_experts fills from per-expert tensors
PER_EXPERT_TYPES = tuple(mt for mt, lay in EXPERT_LAYOUTS.items()
                         if lay in ("qwen2_moe", "mixtral"))
# Mixtral / MiniMax: transformers 5.25 renames ".block_sparse_moe." -> ".mlp." and fuses
# experts.*.w1 (gate) / w3 (up) / w2 (down); here each expert's names become qwen2_moe's.
# Written for module names too (no trailing dot), as KeyMappedCheckpoint renames both.
MIXTRAL_RULES: tuple[tuple[str, str], ...] = (
    (r"\.block_sparse_moe(\.|$)", r".mlp\1"),
    (r"(\.experts\.\d+)\.w1(\.|$)", r"\1.gate_proj\2"),
    (r"(\.experts\.\d+)\.w3(\.|$)", r"\1.up_proj\2"),
    (r"(\.experts\.\d+)\.w2(\.|$)", r"\1.down_proj\2"),
)
# GraniteMoE (-Shared, -Hybrid): transformers 5.25's renames (conversion_mapping.py
# "granitemoe"), tensors only (the router module keeps its stored name: renamed, it would be
# its parent's, GraniteMoeTopKRouter's, so an FP8 router is refused, not read)
GRANITEMOE_RULES: tuple[tuple[str, str], ...] = (
    (r"(\.block_sparse_moe)\.input_linear\.weight$", r"\1.experts.gate_up_proj"),
    (r"(\.block_sparse_moe)\.output_linear\.weight$", r"\1.experts.down_proj"),
    (r"(\.block_sparse_moe\.router)\.layer\.weight$", r"\1.weight"),
)
_LAYOUT_RULES = {"qwen2_moe": (), "mixtral": MIXTRAL_RULES, "granitemoe": GRANITEMOE_RULES}
# Renames transformers 5.25 applies besides the experts' (conversion_mapping.py's own entries
# for these types): the routers' score-correction biases moved under the gate
EXTRA_RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "ernie4_5_moe": ((r"\.mlp\.moe_statics\.e_score_correction_bias$",
                      ".mlp.gate.moe_statics.e_score_correction_bias"),),
    "exaone_moe": ((r"\.mlp\.e_score_correction_bias$", ".mlp.gate.e_score_correction_bias"),),
    # minimax_m2: ".block_sparse_moe.e_score_correction_bias" -> ".mlp.": MIXTRAL_RULES' first
}


@functools.cache
def expert_layout(model_type: str | None) -> str | None:
    """The experts' checkpoint layout of ``model_type``: "qwen2_moe", "mixtral", "granitemoe"
    (see :data:`EXPERT_LAYOUTS`) or None: the table's, else the layout whose conversion
    mapping transformers' ``get_checkpoint_conversion_mapping`` gives ``model_type`` exactly
    (a later transformers' new MoE types)."""
    if model_type in EXPERT_LAYOUTS or model_type is None:
        return EXPERT_LAYOUTS.get(model_type)
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    except ImportError:  # transformers 4, or a layout of the module we do not know
        return None

    def signature(mt: str):
        return tuple((type(c).__name__, tuple(getattr(c, "source_patterns", ())),
                      tuple(getattr(c, "target_patterns", ())),
                      tuple((type(op).__name__, sorted(vars(op).items()))
                            for op in getattr(c, "operations", ())))
                     for c in get_checkpoint_conversion_mapping(mt) or ())

    mine = signature(model_type)
    return next((lay for lay in _LAYOUT_RULES if mine and signature(lay) == mine), None)


def per_expert_layout(model_type: str | None) -> bool:
    """Whether the checkpoints of ``model_type`` store one tensor per expert and projection
    that pretrained._load_experts stacks into the fused experts."""
    return expert_layout(model_type) in ("qwen2_moe", "mixtral")


# Stored name -> model name, per model_type: (regex, replacement) rules applied in order (see
# fp8tower.checkpoint.keymap). Qwen3.5 / 3.6 checkpoints are Qwen3_5ForConditionalGeneration's:
# text model under model.language_model.*, vision tower under model.visual.*, MTP head under
# mtp.*; Qwen3_5ForCausalLM names the text model model.* and ignores model.visual.* / mtp.*
# (transformers 5.17: conversion_mapping.py "qwen3_5_text": PrefixChange(prefix_to_remove=
# "language_model", model_prefix="model"); modeling_qwen3_5.py Qwen3_5ForCausalLM.
# _keys_to_ignore_on_load_unexpected = [r"^mtp.*", r"^model.visual.*"]). A checkpoint already
# in the causal LM's names (no language_model) is left as it is.
CHECKPOINT_KEY_MAPPING: dict[str, tuple[tuple[str, str], ...]] = {
    "qwen3_5": ((r"^model\.language_model\.", "model."),),
    # GPT-NeoX (Pythia): transformers 5.25 renames the head at load (conversion_mapping.py
    # "GPTNeoXForCausalLM": ^embed_out. -> lm_head.); before, "lm_head.weight not in the
    # checkpoint" (2026-12-06 audit)
    "gpt_neox": ((r"^embed_out(\.|$)", r"lm_head\1"),),
}
# the MoE models' checkpoints have the same layout (transformers 5.25 maps qwen3_5_moe_text
# the same way): before, they needed key_mapping= by hand
for _mt in ("qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"):
    CHECKPOINT_KEY_MAPPING[_mt] = CHECKPOINT_KEY_MAPPING["qwen3_5"]
for _mt, _layout in EXPERT_LAYOUTS.items():
    if _LAYOUT_RULES[_layout] or _mt in EXTRA_RULES:
        CHECKPOINT_KEY_MAPPING[_mt] = _LAYOUT_RULES[_layout] + EXTRA_RULES.get(_mt, ())


def checkpoint_key_mapping(model_type: str | None) -> tuple[tuple[str, str], ...]:
    """The family's default key mapping: :data:`CHECKPOINT_KEY_MAPPING`'s, else the renames
    of the experts' layout transformers gives the model type (:func:`expert_layout`)."""
    if model_type in CHECKPOINT_KEY_MAPPING:
        return CHECKPOINT_KEY_MAPPING[model_type]
    return _LAYOUT_RULES.get(expert_layout(model_type) or "", ())


def config_model_type(config: dict) -> str | None:
    """The model_type that selects a family: the top-level one if it has an entry here, else
    the text_config's (a multimodal checkpoint whose text model is a known family)."""
    mt = config.get("model_type")
    if mt in GROUPS or mt in CHECKPOINT_KEY_MAPPING:
        return mt
    text = config.get("text_config")
    if isinstance(text, dict) and text.get("model_type"):
        return text["model_type"]
    return mt
