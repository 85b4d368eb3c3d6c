"""Which sibling projections merge, per ``config.model_type`` (Liger-Kernel style table).

Each entry of :data:`MODEL_TYPE_TO_MERGE` is a patch function ``fn(model, mode) -> records``
that replaces sibling :class:`~fp8tower.nn.linear.Fp8Linear` modules reading one input by one
merged GEMM (see :func:`fp8tower.convert.merge_group`). A group merges only inside the
parent classes named here: their ``forward`` was read (transformers 5.17.0, 2026-11-30) and
calls every member on the same, unmodified tensor, one after the other:

- ``LlamaAttention`` / ``Qwen3Attention`` / ``Qwen3_5Attention``: ``q_proj``, ``k_proj``,
  ``v_proj`` on ``hidden_states`` (Qwen3.5's q_proj carries query + output gate);
- ``LlamaMLP`` / ``Qwen3MLP`` / ``Qwen3_5MLP``: ``gate_proj``, ``up_proj`` on ``x``;
- ``Qwen3_5GatedDeltaNet``: ``in_proj_qkv``, ``in_proj_z``, then ``in_proj_b``,
  ``in_proj_a``, on ``hidden_states`` after ``apply_mask_to_padding_states`` (one tensor).

A family without an entry converts unmerged. Merging is always exact in value (a member
called on another tensor computes the merged GEMM afresh, see ``MergedShard``); the class
list only keeps that slow path from being taken.
"""

from __future__ import annotations

from collections.abc import Callable
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


GROUPS: dict[str, tuple[SiblingGroup, ...]] = {
    "llama": (_attn("LlamaAttention"), _mlp("LlamaMLP")),
    "qwen3": (_attn("Qwen3Attention"), _mlp("Qwen3MLP")),
    "qwen3_5": (
        SiblingGroup("in_proj_qkvz", ("in_proj_qkv", "in_proj_z"), ("Qwen3_5GatedDeltaNet",)),
        SiblingGroup("in_proj_ba", ("in_proj_b", "in_proj_a"), ("Qwen3_5GatedDeltaNet",)),
        _attn("Qwen3_5Attention"),
        _mlp("Qwen3_5MLP"),
    ),
}
GROUPS["qwen3_5_text"] = GROUPS["qwen3_5"]


def _patch(groups: tuple[SiblingGroup, ...]) -> Callable:
    def apply(model, mode) -> list[dict]:
        from .convert import merge_siblings  # convert imports this module at top level

        return merge_siblings(model, groups, mode)

    return apply


MODEL_TYPE_TO_MERGE: dict[str, Callable] = {t: _patch(g) for t, g in GROUPS.items()}
