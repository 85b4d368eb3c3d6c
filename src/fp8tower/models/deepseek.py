"""DeepSeek-V2 / V3 decoders (deepseek_v2, deepseek_v3: DeepSeek-V3 / R1; kimi_k2, Kimi-K2's
own model_type, which transformers 5.25 reads as deepseek_v3, kimi_k25's text_config):
multi-head latent attention (MLA), then a dense MLP (the first ``first_k_dense_replace``
layers) or a mixture of experts with shared experts.

Shapes (transformers 5.25.0, DeepseekV3Attention / DeepseekV2Attention, DeepseekV3MoE),
qk_head_dim = qk_nope_head_dim + qk_rope_head_dim:

- ``q_a_proj`` N = q_lora_rank and ``kv_a_proj_with_mqa`` N = kv_lora_rank +
  qk_rope_head_dim, both K = hidden, both on the normed hidden state: one merge group (vLLM's
  ``fused_qkv_a_proj``); with ``q_lora_rank`` null (DeepSeek-V2-Lite) ``q_proj`` N = heads *
  qk_head_dim, apart from kv_a, as vLLM runs them (fp8tower's HF conversion merges those two
  too, hf/families.py);
- ``q_b_proj`` N = heads * qk_head_dim, K = q_lora_rank, on q_a_layernorm's output;
- ``o_proj`` N = hidden, K = heads * v_head_dim, on the attention's output;
- q_a / kv_a / o carry a bias when ``attention_bias``; q_b / q_proj none;
- dense MLP gate/up/down of ``intermediate_size``; in a MoE layer (layer index >=
  ``first_k_dense_replace``) the shared experts, one MLP of moe_intermediate_size *
  n_shared_experts under ``mlp.shared_experts``; DeepSeek-V2's MLPs a bias by ``mlp_bias``.

Not modelled: ``kv_b_proj`` (N = heads * (qk_nope_head_dim + v_head_dim), K = kv_lora_rank),
which engines absorb into the attention (vLLM's MLA decode applies its halves as batched
matmuls on the latent, in bf16; transformers' eager forward runs it on every cached token,
M = the context length, not a decode-sized GEMM), and the routed experts (3-D, not linears).

Fields config.json leaves out take the type's defaults as transformers 5.25's config classes
set them: q_lora_rank 1536 (null: no q LoRA), first_k_dense_replace 3 (V3) / 0 (V2),
n_shared_experts 1 (V3) / 2 (V2) (null: none); the sizes are required. ``moe_layer_freq``
(which vLLM reads) is ignored, as transformers ignores it: every published model has 1.
"""

from __future__ import annotations

from ._fields import Fields
from .blocks import linear, mlp_linears, shared_expert_linears
from .spec import LinearSpec
from .tp import EXPERTS

MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
DEFAULTS = {"deepseek_v2": {"first_k_dense_replace": 0, "n_shared_experts": 2},
            "deepseek_v3": {"first_k_dense_replace": 3, "n_shared_experts": 1}}
DEFAULTS["kimi_k2"] = DEFAULTS["deepseek_v3"]
Q_LORA_RANK_DEFAULT = 1536


def build(f: Fields, model_type: str) -> dict:
    defaults = DEFAULTS[model_type]
    hidden = f.pos_int("hidden_size")
    num_layers = f.pos_int("num_hidden_layers")
    heads = f.pos_int("num_attention_heads")
    # absent: the type's default; null: no q LoRA (q_proj), as DeepSeek-V2-Lite
    q_lora = (None if "q_lora_rank" in f.cfg and f.cfg["q_lora_rank"] is None
              else f.pos_int("q_lora_rank", default=Q_LORA_RANK_DEFAULT))
    kv_lora = f.pos_int("kv_lora_rank")
    nope, rope = f.pos_int("qk_nope_head_dim"), f.pos_int("qk_rope_head_dim")
    v_dim = f.pos_int("v_head_dim")
    qk_dim = nope + rope
    dense_layers = min(f.count("first_k_dense_replace", defaults["first_k_dense_replace"]),
                       num_layers)
    inter = f.pos_int("intermediate_size") if dense_layers else None
    moe = dense_layers < num_layers
    shared = f.count("n_shared_experts", defaults["n_shared_experts"], null=0) if moe else 0
    moe_inter = f.pos_int("moe_intermediate_size") if shared else 0
    attn_bias = f.flag("attention_bias", False)
    mlp_bias = f.flag("mlp_bias", False) if model_type == "deepseek_v2" else False

    linears: list[LinearSpec] = []
    for i in range(num_layers):
        # vLLM fuses q_a + kv_a (fused_qkv_a_proj); without a q LoRA it keeps q_proj apart
        group = None if q_lora is None else "qkv_a"
        if q_lora is None:
            linears.append(linear(i, "attention", "self_attn", "q_proj", heads * qk_dim, hidden,
                                  None, "hidden_norm"))
        else:
            linears.append(linear(i, "attention", "self_attn", "q_a_proj", q_lora, hidden,
                                  group, "hidden_norm", bias=attn_bias))
        linears.append(linear(i, "attention", "self_attn", "kv_a_proj_with_mqa", kv_lora + rope,
                              hidden, group, "hidden_norm", bias=attn_bias))
        if q_lora is not None:
            linears.append(linear(i, "attention", "self_attn", "q_b_proj", heads * qk_dim, q_lora,
                                  None, "q_a_norm"))
        linears.append(linear(i, "attention", "self_attn", "o_proj", hidden, heads * v_dim, None,
                              "attn_core_out", bias=attn_bias))
        if i < dense_layers:
            linears += mlp_linears(i, inter, hidden, mlp_bias)
        elif shared:
            linears += shared_expert_linears(i, shared * moe_inter, hidden, mlp_bias)

    kv_b = ("MLA kv_b_proj is not modelled: engines absorb it into the attention (vLLM's MLA "
            "decode), and transformers runs it on every cached token, not a decode-sized GEMM")
    notes = [kv_b]
    if moe:
        routed = f.cfg.get("n_routed_experts")
        notes.append(f"layers {dense_layers}-{num_layers - 1} are mixtures of experts "
                     f"(n_routed_experts={routed}): the routed experts are out of scope; "
                     + (f"their shared experts (N = {shared} x {moe_inter}) are modelled as "
                        "an MLP" if shared else "they have no shared expert"))
    tp_fields = {"num_attention_heads": heads}
    if inter is not None:
        tp_fields["intermediate_size"] = inter
    if moe:  # the experts' widths, as given: checked at tp > 1 only (tp.check_fields)
        tp_fields.update({k: f.cfg[k] for k in EXPERTS if f.cfg.get(k) is not None})
    return {"hidden_size": hidden, "num_layers": num_layers,
            "layer_types": ("full_attention",) * num_layers, "linears": linears,
            "intermediate_size": inter, "mlp_in_scope": True, "notes": notes,
            "tp_fields": tp_fields}
