"""Per-layer linear builders shared by the model families (names follow HF modules)."""

from __future__ import annotations

from .spec import LinearSpec


def linear(i, kind, module, proj, n, k, group, inp, fp8=True, bias=False) -> LinearSpec:
    """One linear of layer ``i``: ``layers.{i}.{module}.{proj}``, reading ``layers.{i}.{inp}``;
    siblings share the merge group ``layers.{i}.{group}`` (None: not merged)."""
    return LinearSpec(f"layers.{i}.{module}.{proj}", n, k, i, kind, proj,
                      f"layers.{i}.{group}" if group else None, f"layers.{i}.{inp}", fp8, bias)


def attention_linears(i, q_n, kv_n, hidden, o_k, qkv_bias=False,
                      o_bias=False) -> list[LinearSpec]:
    """self_attn q/k/v (one merge group, reading the normed hidden state) and o_proj."""
    return [
        linear(i, "attention", "self_attn", "q_proj", q_n, hidden, "qkv", "hidden_norm",
               bias=qkv_bias),
        linear(i, "attention", "self_attn", "k_proj", kv_n, hidden, "qkv", "hidden_norm",
               bias=qkv_bias),
        linear(i, "attention", "self_attn", "v_proj", kv_n, hidden, "qkv", "hidden_norm",
               bias=qkv_bias),
        linear(i, "attention", "self_attn", "o_proj", hidden, o_k, None, "attn_core_out",
               bias=o_bias),
    ]


def mlp_linears(i, inter, hidden, bias=False) -> list[LinearSpec]:
    """Dense MLP gate/up (one merge group) and down."""
    return [
        linear(i, "mlp", "mlp", "gate_proj", inter, hidden, "gate_up", "post_attn_norm",
               bias=bias),
        linear(i, "mlp", "mlp", "up_proj", inter, hidden, "gate_up", "post_attn_norm",
               bias=bias),
        linear(i, "mlp", "mlp", "down_proj", hidden, inter, None, "mlp_act", bias=bias),
    ]


def shared_expert_linears(i, inter, hidden, bias=False,
                          module="shared_experts") -> list[LinearSpec]:
    """A MoE layer's shared experts as one MLP (``mlp.shared_experts.*``, DeepSeek / GLM-4.5;
    Qwen's ``mlp.shared_expert.*``): their proj names say so, so that a trace's labels
    (kind.proj) tell them from a dense MLP's; gate/up one merge group on the post-attention
    norm, down on ``shared_act``."""
    return [
        linear(i, "mlp", "mlp", f"{module}.gate_proj", inter, hidden, "shared_gate_up",
               "post_attn_norm", bias=bias),
        linear(i, "mlp", "mlp", f"{module}.up_proj", inter, hidden, "shared_gate_up",
               "post_attn_norm", bias=bias),
        linear(i, "mlp", "mlp", f"{module}.down_proj", hidden, inter, None, "shared_act",
               bias=bias),
    ]
