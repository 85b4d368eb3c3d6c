"""DeepSeek-V4 decoders (deepseek_v4: DeepSeek-V4-Flash, V4-Pro): shared-KV multi-query
attention with a low-rank query, a grouped low-rank output projection, compressed-KV
branches (CSA / HCA) on most layers, and a mixture of experts with one shared expert in every
layer.

Shapes (transformers 5.25.0, DeepseekV4Attention / DeepseekV4Indexer / DeepseekV4MLP, read
2026-12-06); every one bias-free but the shared expert's (``mlp_bias``):

- ``q_a_proj`` N = q_lora_rank and ``kv_proj`` N = head_dim (the one KV head, read as key and
  value), both K = hidden on the normed hidden state: one merge group (fp8tower's HF
  conversion merges them too, hf/families.py);
- ``q_b_proj`` N = heads * head_dim, K = q_lora_rank, on q_a_norm's output; in a
  compressed-sparse-attention layer the indexer's ``compressor.indexer.q_b_proj``
  N = index_n_heads * index_head_dim reads the same tensor (another module's: not merged);
- ``o_b_proj`` N = hidden, K = o_groups * o_lora_rank, on the grouped projection's output;
- the shared expert ``mlp.shared_experts.*``, one MLP of moe_intermediate_size (transformers
  builds one whatever ``n_shared_experts`` says).

Not modelled: ``o_a_proj`` (a block-diagonal grouped linear, o_groups GEMMs of N =
o_lora_rank, K = heads * head_dim / o_groups on slices of the attention output: one batched
GEMM, not one fp8tower backends run), the compressors' and the indexer's ``kv_proj`` /
``gate_proj`` and the indexer's ``weights_proj`` (BF16 in DeepSeek-V4 checkpoints:
transformers 5.25 keeps them so, ``_keep_in_fp32_modules``), the routed experts (3-D, not
linears) and the hyper-connections (fp32 mixing weights, not linears).

Layer types as the config class sets them: ``layer_types``, else the legacy per-layer
``compress_ratios`` (0 / 4 / 128), else two heavily compressed layers then compressed-sparse
and heavily compressed alternating; a list longer than num_hidden_layers is cut to it, as
transformers does. The V4-specific sizes config.json leaves out take the config class's
defaults (o_groups 8, o_lora_rank 1024, index_n_heads 64, index_head_dim 128); the common
sizes are required. ``--tp`` > 1 is refused (:data:`TP_REFUSED`).
"""

from __future__ import annotations

from ._fields import Fields
from .blocks import linear, shared_expert_linears
from .spec import LinearSpec
from .tp import EXPERTS

MODEL_TYPES = ("deepseek_v4",)
SLIDING, CSA, HCA = ("sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention")
LAYER_TYPES = (SLIDING, CSA, HCA)
COMPRESS_RATIO_TYPES = {0: SLIDING, 4: CSA, 128: HCA}
DEFAULTS = {"o_groups": 8, "o_lora_rank": 1024, "index_n_heads": 64, "index_head_dim": 128}
TP_REFUSED = ("how an engine splits DeepSeek-V4's shared KV head (kv_proj), the indexer's "
              "q_b_proj and the grouped output projection over tensor-parallel ranks is not "
              "known here: refused rather than guessed")


def layer_types(f: Fields, num_layers: int) -> tuple[str, ...]:
    """Each layer's attention type, as transformers 5.25's DeepseekV4Config derives it."""
    types = f.cfg.get("layer_types")
    field, allowed = "layer_types", LAYER_TYPES
    if types is None and f.cfg.get("compress_ratios") is not None:
        field, allowed = "compress_ratios", tuple(COMPRESS_RATIO_TYPES)
        types = f.cfg["compress_ratios"]
    if types is None:
        return ((HCA,) * min(num_layers, 2)
                + tuple(CSA if i % 2 else HCA for i in range(max(num_layers - 2, 0))))
    expected = (f"a list of at least num_hidden_layers ({num_layers}) entries, each one of "
                f"{', '.join(map(repr, allowed))}")
    if not isinstance(types, list) or len(types) < num_layers:
        raise f.error(field, types, expected)
    # transformers maps every compress ratio, then cuts; it cuts layer_types, then checks
    checked = types if field == "compress_ratios" else types[:num_layers]
    if any(isinstance(t, bool) or t not in allowed for t in checked):
        raise f.error(field, types, expected)
    types = types[:num_layers]
    return tuple(COMPRESS_RATIO_TYPES[t] for t in types) if field != "layer_types" \
        else tuple(types)


def build(f: Fields, model_type: str) -> dict:
    hidden = f.pos_int("hidden_size")
    num_layers = f.pos_int("num_hidden_layers")
    heads = f.pos_int("num_attention_heads")
    head_dim = f.pos_int("head_dim")
    q_lora = f.pos_int("q_lora_rank")
    o_groups = f.pos_int("o_groups", default=DEFAULTS["o_groups"])
    o_lora = f.pos_int("o_lora_rank", default=DEFAULTS["o_lora_rank"])
    if heads * head_dim % o_groups:
        raise f.error("o_groups", o_groups, f"a divisor of num_attention_heads * head_dim "
                      f"({heads} x {head_dim}): each group projects an equal slice of heads")
    # config.json's intermediate_size is moe_intermediate_size (the config's attribute_map);
    # given both, transformers sets intermediate_size last: it wins
    inter_field = "intermediate_size" if f.has("intermediate_size") else "moe_intermediate_size"
    moe_inter = f.pos_int(inter_field)
    mlp_bias = f.flag("mlp_bias", False)
    types = layer_types(f, num_layers)
    if CSA in types:
        idx_n = (f.pos_int("index_n_heads", default=DEFAULTS["index_n_heads"])
                 * f.pos_int("index_head_dim", default=DEFAULTS["index_head_dim"]))

    linears: list[LinearSpec] = []
    for i, kind in enumerate(types):
        linears += [
            linear(i, "attention", "self_attn", "q_a_proj", q_lora, hidden, "qkv_a",
                   "hidden_norm"),
            linear(i, "attention", "self_attn", "kv_proj", head_dim, hidden, "qkv_a",
                   "hidden_norm"),
            linear(i, "attention", "self_attn", "q_b_proj", heads * head_dim, q_lora, None,
                   "q_a_norm"),
        ]
        if kind == CSA:
            linears.append(linear(i, "attention", "self_attn", "compressor.indexer.q_b_proj",
                                  idx_n, q_lora, None, "q_a_norm"))
        linears.append(linear(i, "attention", "self_attn", "o_b_proj", hidden,
                              o_groups * o_lora, None, "attn_core_out"))
        linears += shared_expert_linears(i, moe_inter, hidden, mlp_bias)

    routed = f.cfg.get("n_routed_experts", f.cfg.get("num_local_experts"))
    routed = "not given" if routed is None else routed
    notes = [
        (f"o_a_proj is not modelled: a grouped linear, {o_groups} GEMMs of N = {o_lora}, "
         f"K = {heads * head_dim // o_groups} on slices of the attention output (one batched "
         "GEMM, not one fp8tower backends run)"),
        ("the compressors' and the indexer's kv_proj / gate_proj and the indexer's "
         "weights_proj are not modelled: DeepSeek-V4 checkpoints keep them BF16"),
        (f"every layer is a mixture of experts (n_routed_experts={routed}): the routed experts "
         f"are out of scope; each layer's shared expert (N = {moe_inter}) is modelled as an "
         "MLP"),
    ]
    tp_fields = {"num_attention_heads": heads}
    tp_fields.update({k: f.cfg[k] for k in EXPERTS if f.cfg.get(k) is not None})
    return {"hidden_size": hidden, "num_layers": num_layers, "layer_types": types,
            "linears": linears, "intermediate_size": None, "mlp_in_scope": True,
            "notes": notes, "tp_fields": tp_fields, "tp_refused": TP_REFUSED}
