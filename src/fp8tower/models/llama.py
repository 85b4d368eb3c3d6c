"""Llama-style dense decoders (llama, qwen2, qwen3, mistral): attention then a SwiGLU MLP.

Shapes (HF LlamaAttention / LlamaMLP): q_proj N = heads * head_dim, k_proj / v_proj
N = kv_heads * head_dim, o_proj K = heads * head_dim; gate/up N = intermediate_size, down
K = intermediate_size. Sliding-window layers have the same projections as full ones, so every
layer is recorded as full_attention.

Fields config.json leaves out take the model type's defaults, as transformers 5.25's config
classes set them (configuration_<type>.py): num_key_value_heads is num_attention_heads for
llama, 8 for mistral, 32 for qwen2 / qwen3 (null: num_attention_heads, for all); head_dim is
hidden_size / num_attention_heads, 128 for qwen3. Biases as the modeling code builds them:
llama q/k/v/o by attention_bias and gate/up/down by mlp_bias; qwen2 q/k/v always, o_proj and
the MLP never; qwen3 q/k/v/o by attention_bias; mistral none.
"""

from __future__ import annotations

from ._fields import Fields
from .blocks import attention_linears, mlp_linears
from .spec import LinearSpec

MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
KV_HEADS_DEFAULT = {"mistral": 8, "qwen2": 32, "qwen3": 32}  # others: num_attention_heads
HEAD_DIM_DEFAULT = {"qwen3": 128}  # others: hidden_size / num_attention_heads


def build(f: Fields, model_type: str) -> dict:
    hidden = f.pos_int("hidden_size")
    num_layers = f.pos_int("num_hidden_layers")
    heads = f.pos_int("num_attention_heads")
    # absent: the type's default; null: num_attention_heads (the config classes' __post_init__)
    kv_default = KV_HEADS_DEFAULT.get(model_type) if "num_key_value_heads" not in f.cfg else None
    kv_heads = f.pos_int("num_key_value_heads", default=kv_default or heads)
    kv_field = "num_key_value_heads" + (f" (absent: {model_type}'s default {kv_default})"
                                        if kv_default else "")
    f.multiple("num_attention_heads", heads, kv_field, kv_heads)
    if f.has("head_dim") or model_type in HEAD_DIM_DEFAULT:
        head_dim = f.pos_int("head_dim", default=HEAD_DIM_DEFAULT.get(model_type))
    else:
        f.multiple("hidden_size", hidden, "num_attention_heads (head_dim is absent)", heads)
        head_dim = hidden // heads
    inter = f.pos_int("intermediate_size")
    if model_type == "qwen2":
        qkv_bias, o_bias, mlp_bias = True, False, False
    elif model_type == "mistral":
        qkv_bias = o_bias = mlp_bias = False
    else:
        qkv_bias = o_bias = f.flag("attention_bias", False)
        mlp_bias = f.flag("mlp_bias", False) if model_type == "llama" else False

    linears: list[LinearSpec] = []

    for i in range(num_layers):
        linears += attention_linears(i, heads * head_dim, kv_heads * head_dim, hidden,
                                     heads * head_dim, qkv_bias, o_bias)
        linears += mlp_linears(i, inter, hidden, mlp_bias)

    return {"hidden_size": hidden, "num_layers": num_layers,
            "layer_types": ("full_attention",) * num_layers, "linears": linears,
            "intermediate_size": inter, "mlp_in_scope": True, "notes": [],
            "tp_fields": {"num_attention_heads": heads, "num_key_value_heads": kv_heads,
                          "intermediate_size": inter}}
