"""Tensor-parallel shards: the linears one GPU of a TP-N deployment runs, as vLLM splits them.

With ``--tensor-parallel-size N`` each rank holds a slice of every linear:

- column-parallel (attention q/k/v, MLP gate/up, GDN in_proj_*): the output rows, N / tp;
  K stays the hidden size. k_proj / v_proj (QKVParallelLinear): num_key_value_heads / tp
  heads where num_key_value_heads >= tp; below tp each rank holds one kv head, replicated
  (N = head_dim).
- row-parallel (attention o_proj, MLP down_proj, GDN out_proj): the input columns, K / tp;
  N stays the hidden size (the all-reduce after it is not a GEMM and is not modelled).
- replicated (MLA's q_a_proj and kv_a_proj_with_mqa, vLLM's ReplicatedLinear in
  DeepseekV2MLAAttention): whole on every rank; q_b_proj (or q_proj) column-parallel; shared
  experts split as a dense MLP.

A merge group is merged per rank from its sharded members (``TowerSpec.gemms``). The role of
each linear comes from its ``(kind, proj)`` (``ROLES``); a linear with no known role is
refused, not guessed. The checks vLLM makes are made here, each naming the values:
num_attention_heads divisible by tp, num_key_value_heads divisible by tp or tp by it, the GDN
key and value heads, intermediate_size and the MoE expert widths (moe_intermediate_size,
shared_expert_intermediate_size: routed experts are not modelled as GEMMs, but they are
split too) divisible by tp. block128 (128x128 weight blocks, one scale each): every sharded
dimension of an FP8 linear, N of a column-parallel one and K of a row-parallel one, and each
expert width per rank must be a multiple of 128: a rank's shard must hold whole blocks,
since a cut block's one scale would span two ranks' shards (:func:`check_block_shards`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from .spec import ConfigError, LinearSpec

COLUMN, KV, ROW, REPLICATED = "column", "kv", "row", "replicated"
BLOCK = 128  # block128's weight block (formats.BLOCK; models/ stays torch-free)

ROLES: dict[tuple[str, str], str] = {
    # attention: QKVParallelLinear (q, k, v), RowParallelLinear (o)
    ("attention", "q_proj"): COLUMN,
    ("attention", "k_proj"): KV,
    ("attention", "v_proj"): KV,
    ("attention", "o_proj"): ROW,
    # multi-head latent attention (DeepSeek-V2 / V3): the latent projections replicated,
    # q_b_proj ColumnParallelLinear (q_proj without a q LoRA: as above)
    ("attention", "q_a_proj"): REPLICATED,
    ("attention", "kv_a_proj_with_mqa"): REPLICATED,
    ("attention", "q_b_proj"): COLUMN,
    # shared experts (DeepSeek, GLM-4.5, Qwen: blocks.shared_expert_linears): split as a dense
    # MLP
    ("mlp", "shared_expert.gate_proj"): COLUMN,
    ("mlp", "shared_expert.up_proj"): COLUMN,
    ("mlp", "shared_expert.down_proj"): ROW,
    ("mlp", "shared_experts.gate_proj"): COLUMN,
    ("mlp", "shared_experts.up_proj"): COLUMN,
    ("mlp", "shared_experts.down_proj"): ROW,
    # dense MLP: MergedColumnParallelLinear (gate, up), RowParallelLinear (down)
    ("mlp", "gate_proj"): COLUMN,
    ("mlp", "up_proj"): COLUMN,
    ("mlp", "down_proj"): ROW,
    # Gated DeltaNet: MergedColumnParallelLinear in_proj_qkvz / in_proj_ba (Qwen3.5's split
    # members, or Qwen3-Next's fused ones), RowParallelLinear out_proj
    ("gdn", "in_proj_qkv"): COLUMN,
    ("gdn", "in_proj_z"): COLUMN,
    ("gdn", "in_proj_b"): COLUMN,
    ("gdn", "in_proj_a"): COLUMN,
    ("gdn", "in_proj_qkvz"): COLUMN,
    ("gdn", "in_proj_ba"): COLUMN,
    ("gdn", "out_proj"): ROW,
}

# MoE expert widths (Qwen3.5-MoE, Qwen3-Next): split over the ranks, not modelled as GEMMs;
# builders pass them as config.json has them, checked only at tp > 1
EXPERTS = ("moe_intermediate_size", "shared_expert_intermediate_size")
# the config fields whose values a shard must divide, in the order they are checked
DIVIDED = ("num_attention_heads", "linear_num_key_heads", "linear_num_value_heads",
           "intermediate_size") + EXPERTS
KV_HEADS = "num_key_value_heads"


class TpError(ConfigError):
    """A tensor-parallel size that is not an integer >= 1, or that the model cannot be split
    into (the field and value named)."""


def check_tp(tp: object) -> int:
    """``tp`` itself: an integer >= 1 (bool refused: True is no size)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise TpError("tp", tp, "an integer >= 1 (the tensor-parallel size)")
    return tp


def role(lin: LinearSpec) -> str:
    """COLUMN, KV or ROW for ``lin``; a TpError for one whose sharding is not known."""
    r = ROLES.get((lin.kind, lin.proj))
    if r is None:
        known = ", ".join(f"{k}.{p}" for k, p in ROLES)
        raise TpError(lin.name, f"{lin.kind}.{lin.proj}", f"a linear whose tensor-parallel "
                      f"split is known ({known}); tp > 1 is refused rather than guessed")
    return r


def check_fields(tp: int, fields: Mapping[str, int], context: str = "") -> None:
    """vLLM's divisibility checks for the config fields a spec's linears depend on."""
    for name in DIVIDED:
        value = fields.get(name)
        if name in EXPERTS and value is not None and (  # 0: no such expert
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise TpError(name, value, "an integer >= 0", context=context)
        if value is not None and value % tp:
            raise TpError(name, value, f"a multiple of tp ({tp}): vLLM splits it evenly over "
                          "the tensor-parallel ranks", context=context)
    kv = fields.get(KV_HEADS)
    if kv is not None and (kv % tp if kv >= tp else tp % kv):
        raise TpError(KV_HEADS, kv, f"a multiple of tp ({tp}), or a divisor of it (then each "
                      "rank holds one kv head, replicated), as vLLM requires", context=context)


def shard(linears: Iterable[LinearSpec], tp: int, fields: Mapping[str, int],
          context: str = "") -> list[LinearSpec]:
    """The linears of one rank of a TP-``tp`` deployment: N / tp column-parallel, K / tp
    row-parallel, kv heads split or replicated; ``fields`` holds the config values the checks
    need (num_attention_heads, num_key_value_heads, linear_num_key_heads,
    linear_num_value_heads, intermediate_size: those the model has). tp = 1: unchanged."""
    tp = check_tp(tp)
    linears = list(linears)
    if tp == 1:
        return linears
    check_fields(tp, fields, context)
    out = []
    for lin in linears:
        r = role(lin)
        if r == REPLICATED:
            out.append(lin)
        elif r == ROW:
            out.append(replace(lin, k=_divide(lin, "K", lin.k, tp, context)))
        elif r == COLUMN:
            out.append(replace(lin, n=_divide(lin, "N", lin.n, tp, context)))
        else:  # KV: k_proj / v_proj, N = num_key_value_heads * head_dim
            kv = fields.get(KV_HEADS)
            if kv is None:
                raise TpError(KV_HEADS, None, f"a positive integer: {lin.name} is split by "
                              "kv heads", context=context)
            head_dim = _divide(lin, "N", lin.n, kv, context)
            out.append(replace(lin, n=head_dim * max(1, kv // tp)))
    return out


def _divide(lin: LinearSpec, dim: str, value: int, by: int, context: str) -> int:
    if value % by:  # the field checks make this unreachable for the modelled families
        raise TpError(f"{lin.name} {dim}", value, f"a multiple of {by}", context=context)
    return value // by


def check_block_shards(linears: Iterable[LinearSpec], tp: int, context: str = "",
                       fields: Mapping[str, int] | None = None,
                       fix: str | None = "use another tp or scheme") -> None:
    """block128 at tp > 1: each FP8 linear's sharded dimension (N of a column-parallel one,
    K of a row-parallel one, per rank) and each MoE expert width per rank (``fields``, as
    :func:`shard` takes them) must hold whole 128x128 blocks; the first that does not is named
    with its value, then ``fix`` (what to change; None: nothing)."""
    if tp == 1:
        return

    def refuse(what: str, value: int) -> TpError:
        return TpError(what, value, f"a multiple of {BLOCK} for block128 at tp {tp}: a rank's "
                       f"shard must hold whole {BLOCK}x{BLOCK} weight blocks (a cut block's "
                       "one scale would span two ranks' shards)" + (f"; {fix}" if fix else ""),
                       context=context)

    linears = list(linears)
    for lin in linears:
        if not lin.fp8 or role(lin) == REPLICATED:  # whole on every rank: no block is cut
            continue
        dim, value = ("K", lin.k) if role(lin) == ROW else ("N", lin.n)
        if value % BLOCK:
            raise refuse(f"{lin.name} {dim} per rank", value)
    # a shared expert modelled (Qwen's mlp.shared_expert.*) is checked as its linears above,
    # FP8 or not; the routed experts, not modelled as GEMMs, by their per-rank width
    modelled = {"shared_expert_intermediate_size"} if any(
        lin.proj.startswith("shared_expert.") for lin in linears) else set()
    for name in EXPERTS:
        if name in modelled:
            continue
        value = (fields or {}).get(name)
        if isinstance(value, int) and value % tp == 0 and value // tp % BLOCK:
            raise refuse(f"{name} per rank ({value} / {tp})", value // tp)


def block_split_error(spec, fix: str | None = "use another tp or scheme") -> TpError | None:
    """:func:`check_block_shards` of a TowerSpec built at its ``tp`` (its shards and expert
    widths): the TpError, or None where every rank holds whole blocks (always at tp 1)."""
    try:
        check_block_shards(spec.all_linears, spec.tp, context=spec.name,
                           fields=dict(spec.tp_fields), fix=fix)
    except TpError as e:
        return e
    return None
