"""Per ``config.model_type``: which sibling projections merge (Liger-Kernel style table), and
how checkpoint tensor names map onto the causal LM's module names.

Each entry of :data:`GROUPS` becomes a patch function ``fn(model, mode) -> records`` (the
table ``conversion.MODEL_TYPE_TO_MERGE``) that replaces sibling :class:`~fp8tower.nn.linear.Fp8Linear` modules reading one input by one
merged GEMM (see :func:`fp8tower.hf.conversion.merge_group`). A group merges only inside the
parent classes named here: their ``forward`` was read (transformers 5.25.0, 2026-12-05) and
calls every member on the same, unmodified tensor, one after the other, in the group's order:

- ``LlamaAttention`` / ``Qwen2Attention`` / ``MistralAttention`` / ``Qwen3Attention`` /
  ``Qwen3_5Attention`` / ``Qwen3_5MoeAttention`` / ``Qwen3NextAttention``: ``q_proj``,
  ``k_proj``, ``v_proj`` on ``hidden_states`` (Qwen3.5's and Qwen3-Next's q_proj carries query
  + output gate);
- ``LlamaMLP`` / ``Qwen2MLP`` / ``MistralMLP`` / ``Qwen3MLP`` / ``Qwen3_5MLP``: ``gate_proj``,
  ``up_proj`` on ``x``; ``Qwen3_5MoeMLP`` (the MoE block's shared expert, called on the
  block's reshaped ``hidden_states``) and ``Qwen3NextMLP`` (shared expert, or the dense MLP
  of ``mlp_only_layers``) alike;
- ``Qwen3_5GatedDeltaNet`` / ``Qwen3_5MoeGatedDeltaNet``: ``in_proj_qkv``, ``in_proj_z``,
  then ``in_proj_b``, ``in_proj_a``, on ``hidden_states`` after
  ``apply_mask_to_padding_states`` (one tensor). (``Qwen3NextGatedDeltaNet`` has
  ``in_proj_qkvz`` and ``in_proj_ba`` already; ``in_proj_ba`` stays bf16 by default.)

MoE experts (3-D parameters, not ``nn.Linear``) are not converted; router gates stay in high
precision (``conversion.kept_high_precision``). A family without an entry converts unmerged.
Merging is always exact in value (a member called on another tensor computes the merged GEMM
afresh, see ``MergedShard``); the class list only keeps that slow path from being taken.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SiblingGroup:
    """Members (attribute names on one parent) merged into ``merged_name`` on that parent."""

    merged_name: str
    members: tuple[str, ...]
    parent_classes: tuple[str, ...]


def _attn(*classes: str) -> SiblingGroup:
    return SiblingGroup("qkv_proj", ("q_proj", "k_proj", "v_proj"), classes)


def _mlp(*classes: str) -> SiblingGroup:
    return SiblingGroup("gate_up_proj", ("gate_proj", "up_proj"), classes)


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
}
GROUPS["qwen3_5_text"] = GROUPS["qwen3_5"]
# MoE families whose checkpoints store each expert's gate_proj / up_proj / down_proj and whose
# transformers 5.25 model fuses them into experts.gate_up_proj / experts.down_proj as
# conversion_mapping.py's "qwen2_moe" entry does (pretrained._load_experts fills them); another
# layout (gpt-oss's transposed experts, Mixtral's w1 / w3 / w2) is left missing, never guessed
PER_EXPERT_TYPES = ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text",
                    "deepseek_v2", "deepseek_v3", "glm4_moe")
GROUPS["qwen3_5_moe_text"] = GROUPS["qwen3_5_moe"]


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
}
# the MoE models' checkpoints have the same layout (transformers 5.25 maps qwen3_5_moe_text
# the same way): before, they needed key_mapping= by hand
for _mt in ("qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"):
    CHECKPOINT_KEY_MAPPING[_mt] = CHECKPOINT_KEY_MAPPING["qwen3_5"]


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
