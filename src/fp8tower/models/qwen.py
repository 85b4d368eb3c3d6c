"""Qwen hybrid decoders: Qwen3.5 / 3.6 (dense and MoE) and Qwen3-Next.

Each layer is a Gated DeltaNet ("linear_attention") or a gated full attention layer, then an
MLP. Shapes follow HF transformers (modular_qwen3_next.py, modular_qwen3_5.py):

- GDN, Qwen3.5 (split projections), key_dim = linear_num_key_heads * linear_key_head_dim,
  value_dim = linear_num_value_heads * linear_value_head_dim:
  in_proj_qkv N = 2 * key_dim + value_dim, in_proj_z N = value_dim, in_proj_b / in_proj_a
  N = linear_num_value_heads (K = hidden), out_proj N = hidden, K = value_dim.
- GDN, Qwen3-Next (fused in HF): in_proj_qkvz N = 2 * key_dim + 2 * value_dim,
  in_proj_ba N = 2 * linear_num_value_heads, out_proj as above.
- Attention: q_proj N = num_attention_heads * head_dim, doubled when ``attn_output_gate``
  (query + sigmoid gate; the default, and always so in Qwen3-Next); k_proj / v_proj
  N = num_key_value_heads * head_dim; o_proj K = num_attention_heads * head_dim; each has a
  bias when ``attention_bias`` (default false). GDN and MLP linears have none.
- MLP (Qwen3.5 dense; Qwen3-Next's ``mlp_only_layers`` / ``decoder_sparse_step`` layers):
  gate/up N = intermediate_size, down K = intermediate_size. A MoE layer (Qwen3.5-MoE: every
  one) has a shared expert, one MLP of shared_expert_intermediate_size (default 512) under
  ``mlp.shared_expert``; its N = 1 ``shared_expert_gate`` is not modelled (vLLM builds it
  unquantized, ``quant_config=None``, whatever the checkpoint's config says), nor are the
  routed experts (3-D parameters, not linears).

By default in_proj_b / in_proj_a / in_proj_ba are not FP8: FP8 checkpoints keep these
N = num_value_heads projections in BF16 (e.g. Qwen's Qwen3.6-35B-A3B-FP8 stores a and b as
BF16 beside FP8 qkv / z / out_proj). A quantization config, when given, decides instead.
"""

from __future__ import annotations

from ._fields import Fields
from .blocks import attention_linears, linear, mlp_linears, shared_expert_linears
from .llama import sparse_by_step
from .spec import LinearSpec
from .tp import EXPERTS

LINEAR, FULL = "linear_attention", "full_attention"
LEGACY_LAYER_TYPES = {"mamba": LINEAR, "attention": FULL}  # HF's remap_legacy_layer_types
DENSE_TYPES = ("qwen3_5", "qwen3_5_text")
MOE_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")
MODEL_TYPES = DENSE_TYPES + MOE_TYPES


def layer_types(f: Fields, num_layers: int) -> tuple[str, ...]:
    """``layer_types`` if given, else derived from ``full_attention_interval``; both: must agree."""
    raw, interval = f.cfg.get("layer_types"), f.cfg.get("full_attention_interval")
    derived = None
    if interval is not None:
        interval = f.pos_int("full_attention_interval")
        derived = tuple(LINEAR if (i + 1) % interval else FULL for i in range(num_layers))
    if raw is None:
        if derived is None:
            raise f.error("layer_types", None,
                          "a list of num_hidden_layers entries, or full_attention_interval")
        return derived
    if not isinstance(raw, list):
        raise f.error("layer_types", raw, f"a list of {LINEAR!r} / {FULL!r} entries")
    types = []
    for i, t in enumerate(raw):
        if not isinstance(t, str):
            raise f.error(f"layer_types[{i}]", t, f"{LINEAR!r} or {FULL!r}")
        t = LEGACY_LAYER_TYPES.get(t, t)
        if t not in (LINEAR, FULL):
            raise f.error(f"layer_types[{i}]", raw[i], f"{LINEAR!r} or {FULL!r}")
        types.append(t)
    if len(types) != num_layers:
        raise f.error("len(layer_types)", len(types), f"num_hidden_layers = {num_layers}")
    if derived is not None and tuple(types) != derived:
        first = next(i for i, (a, b) in enumerate(zip(types, derived)) if a != b)
        raise f.error("full_attention_interval", interval,
                      f"agreement with layer_types, which differs at layer {first} "
                      f"({types[first]!r}, the interval gives {derived[first]!r})")
    return tuple(types)


def build(f: Fields, model_type: str) -> dict:
    """The linears of a Qwen hybrid config, plus the facts TowerSpec records."""
    hidden = f.pos_int("hidden_size")
    num_layers = f.pos_int("num_hidden_layers")
    types = layer_types(f, num_layers)
    next_style = model_type == "qwen3_next"
    dense_mlp = model_type in DENSE_TYPES

    if LINEAR in types:
        nk, dk = f.pos_int("linear_num_key_heads"), f.pos_int("linear_key_head_dim")
        nv, dv = f.pos_int("linear_num_value_heads"), f.pos_int("linear_value_head_dim")
        f.multiple("linear_num_value_heads", nv, "linear_num_key_heads", nk)
        key_dim, value_dim = nk * dk, nv * dv
    if FULL in types:
        heads, kv_heads = f.pos_int("num_attention_heads"), f.pos_int("num_key_value_heads")
        head_dim = f.pos_int("head_dim")
        f.multiple("num_attention_heads", heads, "num_key_value_heads", kv_heads)
        gate = True if next_style else f.flag("attn_output_gate", True)
        bias = f.flag("attention_bias", False)  # q/k/v/o; GDN and MLP linears have none
    if dense_mlp:
        sparse = [False] * num_layers
    elif model_type == "qwen3_next":
        sparse = sparse_by_step(f, num_layers, 512)
    else:  # Qwen3_5MoeDecoderLayer: every layer a mixture of experts
        sparse = [True] * num_layers
    inter = f.pos_int("intermediate_size") if not all(sparse) else None
    shared = f.count("shared_expert_intermediate_size", 512) if any(sparse) else 0

    linears: list[LinearSpec] = []

    def add(*args, **kw):
        linears.append(linear(*args, **kw))

    for i, t in enumerate(types):
        if t == LINEAR and next_style:
            add(i, "gdn", "linear_attn", "in_proj_qkvz", 2 * key_dim + 2 * value_dim, hidden,
                None, "hidden_norm")
            add(i, "gdn", "linear_attn", "in_proj_ba", 2 * nv, hidden, None, "hidden_norm",
                fp8=False)
            add(i, "gdn", "linear_attn", "out_proj", hidden, value_dim, None, "gdn_core_out")
        elif t == LINEAR:
            add(i, "gdn", "linear_attn", "in_proj_qkv", 2 * key_dim + value_dim, hidden,
                "gdn_in", "hidden_norm")
            add(i, "gdn", "linear_attn", "in_proj_z", value_dim, hidden, "gdn_in", "hidden_norm")
            add(i, "gdn", "linear_attn", "in_proj_b", nv, hidden, "gdn_ba", "hidden_norm",
                fp8=False)
            add(i, "gdn", "linear_attn", "in_proj_a", nv, hidden, "gdn_ba", "hidden_norm",
                fp8=False)
            add(i, "gdn", "linear_attn", "out_proj", hidden, value_dim, None, "gdn_core_out")
        else:
            q_n = heads * head_dim * (2 if gate else 1)  # query (+ output gate)
            linears += attention_linears(i, q_n, kv_heads * head_dim, hidden, heads * head_dim,
                                         bias, bias)
        if not sparse[i]:
            linears += mlp_linears(i, inter, hidden)
        elif shared:
            linears += shared_expert_linears(i, shared, hidden, module="shared_expert")

    tp_fields = {}  # the values a tensor-parallel split must divide (models/tp.py)
    if LINEAR in types:
        tp_fields.update(linear_num_key_heads=nk, linear_num_value_heads=nv)
    if FULL in types:
        tp_fields.update(num_attention_heads=heads, num_key_value_heads=kv_heads)
    if inter is not None:
        tp_fields["intermediate_size"] = inter
    if any(sparse):  # the experts' widths, as given: checked at tp > 1 only (tp.check_fields)
        tp_fields.update({k: f.cfg[k] for k in EXPERTS if f.cfg.get(k) is not None})

    notes = []
    if LINEAR in types:
        ab = "in_proj_ba" if next_style else "in_proj_b / in_proj_a"
        notes.append(f"GDN {ab} (N = {nv if not next_style else 2 * nv}) are modelled but not "
                     "FP8 unless a quantization config says so: FP8 checkpoints keep them BF16")
    if any(sparse):
        experts = f.cfg.get("num_experts")
        count = f" (num_experts={experts})" if experts is not None else ""
        dense = num_layers - sum(sparse)
        notes.append(f"{sum(sparse)} of {num_layers} MLPs are mixtures of experts{count}: "
                     "the routed experts are out of scope; "
                     + (f"the shared expert (N = {shared}) is modelled as an MLP, not its N = 1 "
                        "shared_expert_gate (unquantized in vLLM)" if shared
                        else "no shared expert")
                     + (f"; {dense} dense MLPs" if dense else ""))
    mtp = f.cfg.get("mtp_num_hidden_layers")
    if isinstance(mtp, int) and mtp > 0:
        notes.append(f"MTP draft layer(s) (mtp_num_hidden_layers={mtp}) are not included")
    return {"hidden_size": hidden, "num_layers": num_layers, "layer_types": types,
            "linears": linears, "intermediate_size": inter,
            "mlp_in_scope": not all(sparse) or bool(shared),
            "notes": notes, "tp_fields": tp_fields}
