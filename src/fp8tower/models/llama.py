"""Llama-style dense decoders (llama, qwen2, qwen3, mistral): attention then a SwiGLU MLP.

Shapes (HF LlamaAttention / LlamaMLP): head_dim defaults to hidden_size / num_attention_heads
and num_key_value_heads to num_attention_heads; q_proj N = heads * head_dim, k_proj / v_proj
N = kv_heads * head_dim, o_proj K = heads * head_dim; gate/up N = intermediate_size, down
K = intermediate_size. Sliding-window layers have the same projections as full ones, so every
layer is recorded as full_attention.
"""

from __future__ import annotations

from ._fields import Fields
from .blocks import attention_linears, mlp_linears
from .spec import LinearSpec

MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


def build(f: Fields, model_type: str) -> dict:
    hidden = f.pos_int("hidden_size")
    num_layers = f.pos_int("num_hidden_layers")
    heads = f.pos_int("num_attention_heads")
    kv_heads = f.pos_int("num_key_value_heads", default=heads)
    f.multiple("num_attention_heads", heads, "num_key_value_heads", kv_heads)
    if f.has("head_dim"):
        head_dim = f.pos_int("head_dim")
    else:
        f.multiple("hidden_size", hidden, "num_attention_heads (head_dim is absent)", heads)
        head_dim = hidden // heads
    inter = f.pos_int("intermediate_size")

    linears: list[LinearSpec] = []

    for i in range(num_layers):
        linears += attention_linears(i, heads * head_dim, kv_heads * head_dim, hidden,
                                     heads * head_dim)
        linears += mlp_linears(i, inter, hidden)

    return {"hidden_size": hidden, "num_layers": num_layers,
            "layer_types": ("full_attention",) * num_layers, "linears": linears,
            "intermediate_size": inter, "mlp_in_scope": True, "notes": []}
