"""Llama-style decoders: attention then a SwiGLU MLP (llama, qwen2, qwen3, mistral) or a
mixture of experts (qwen3_moe: Qwen3-30B-A3B / 235B-A22B; mixtral; glm4_moe: GLM-4.5 / 4.6).

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

MoE types (transformers 5.25 Qwen3MoeDecoderLayer / MixtralDecoderLayer): qwen3_moe's layer i
is sparse unless listed in ``mlp_only_layers`` or ``(i + 1) % decoder_sparse_step`` (a dense
MLP of intermediate_size there, modelled), its attention as qwen3's but head_dim absent is
hidden_size / num_attention_heads and num_key_value_heads absent 4; every mixtral layer is
sparse; glm4_moe's layers from ``first_k_dense_replace`` (default 1) on, each with shared
experts of moe_intermediate_size * n_shared_experts (default 1), modelled as an MLP
(``mlp.shared_experts.*``), its q/k/v biased by attention_bias, o_proj never, head_dim absent
hidden_size / num_attention_heads, num_key_value_heads absent 8. The routed experts are out
of scope (3-D parameters, not linears).
"""

from __future__ import annotations

from ._fields import Fields
from .blocks import attention_linears, mlp_linears, shared_expert_linears
from .spec import LinearSpec

DENSE_TYPES = ("llama", "qwen2", "qwen3", "mistral")
MOE_TYPES = ("qwen3_moe", "mixtral", "glm4_moe")
MODEL_TYPES = DENSE_TYPES + MOE_TYPES
# others: num_attention_heads
KV_HEADS_DEFAULT = {"mistral": 8, "qwen2": 32, "qwen3": 32, "qwen3_moe": 4, "mixtral": 8,
                    "glm4_moe": 8}
HEAD_DIM_DEFAULT = {"qwen3": 128}  # others: hidden_size / num_attention_heads


def _sparse_layers(f: Fields, model_type: str, num_layers: int) -> list[bool]:
    """Whether each layer's MLP is a mixture of experts (transformers 5.25's rule)."""
    if model_type == "mixtral":
        return [True] * num_layers
    if model_type == "glm4_moe":
        return [i >= f.count("first_k_dense_replace", 1) for i in range(num_layers)]
    if model_type != "qwen3_moe":
        return [False] * num_layers
    return sparse_by_step(f, num_layers, 128)


def sparse_by_step(f: Fields, num_layers: int, experts_default: int) -> list[bool]:
    """Qwen's rule (Qwen3MoeDecoderLayer, Qwen3NextDecoderLayer): layer i is a mixture of
    experts unless listed in ``mlp_only_layers``, or ``(i + 1) % decoder_sparse_step``, or
    ``num_experts`` is 0."""
    dense = f.cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise f.error("mlp_only_layers", dense, "a list of layer indices")
    experts = f.cfg.get("num_experts", experts_default)
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 0:
        raise f.error("num_experts", experts, "an integer >= 0")
    step = f.pos_int("decoder_sparse_step", default=1)
    return [i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(num_layers)]


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
    sparse = _sparse_layers(f, model_type, num_layers)
    if model_type == "qwen2":
        qkv_bias, o_bias, mlp_bias = True, False, False
    elif model_type in ("mistral", "mixtral"):
        qkv_bias = o_bias = mlp_bias = False
    elif model_type == "glm4_moe":
        qkv_bias, o_bias, mlp_bias = f.flag("attention_bias", False), False, False
    else:
        qkv_bias = o_bias = f.flag("attention_bias", False)
        mlp_bias = f.flag("mlp_bias", False) if model_type == "llama" else False

    shared = (f.count("n_shared_experts", 1, null=0) if model_type == "glm4_moe" and any(sparse)
              else 0)
    moe_inter = f.pos_int("moe_intermediate_size") if shared else 0
    linears: list[LinearSpec] = []

    for i in range(num_layers):
        linears += attention_linears(i, heads * head_dim, kv_heads * head_dim, hidden,
                                     heads * head_dim, qkv_bias, o_bias)
        if not sparse[i]:
            linears += mlp_linears(i, inter, hidden, mlp_bias)
        elif shared:
            linears += shared_expert_linears(i, shared * moe_inter, hidden)

    tp_fields = {"num_attention_heads": heads, "num_key_value_heads": kv_heads,
                 "intermediate_size": inter}  # (mixtral: its experts' width, split too)
    notes = []
    if any(sparse):
        dense = num_layers - sum(sparse)
        experts = f.cfg.get({"mixtral": "num_local_experts",
                             "glm4_moe": "n_routed_experts"}.get(model_type, "num_experts"))
        modelled = [f"the {dense} dense layers' MLPs"] if dense else []
        modelled += [f"their shared experts (N = {shared} x {moe_inter}, as an MLP)"] * bool(shared)
        count = f" ({experts} experts)" if experts is not None else ""
        notes.append(f"{sum(sparse)} of {num_layers} layers are mixtures of experts{count}: "
                     "the routed experts are out of scope; "
                     + (" and ".join(modelled) + " are modelled" if modelled
                        else "the spec covers the attention only"))
        if model_type != "mixtral" and f.cfg.get("moe_intermediate_size") is not None:
            tp_fields["moe_intermediate_size"] = f.cfg["moe_intermediate_size"]
        if not dense and model_type != "mixtral":
            del tp_fields["intermediate_size"]  # no dense MLP: nothing of that width
    in_scope = not all(sparse) or bool(shared)
    return {"hidden_size": hidden, "num_layers": num_layers,
            "layer_types": ("full_attention",) * num_layers, "linears": linears,
            "intermediate_size": inter if not all(sparse) else None,
            "mlp_in_scope": in_scope, "notes": notes, "tp_fields": tp_fields}
