"""Convert a Hugging Face transformers model's linears to FP8 in place; load FP8 checkpoints.

    >>> model = fp8tower.convert(model, "per_tensor")                 # quantize bf16 weights
    >>> model = fp8tower.convert(model, checkpoint="path/to/Qwen3.5-27B-FP8")  # FP8 weights

(``fp8tower.from_pretrained`` in pretrained.py builds the model too.)

:func:`convert` swaps each ``nn.Linear`` that ``filter(module, fqn)`` accepts for an
:class:`~fp8tower.nn.linear.Fp8Linear` (torchao's ``swap_linear_layers`` style); ``lm_head``
and vision towers stay as they are unless a filter asks for them (embeddings are not
linears), and so do, when bf16 weights are quantized, the small projections FP8 checkpoints
keep BF16 (:data:`KEPT_HIGH_PRECISION`, router gates). With ``merge=True``, the family's
sibling projections (families.py) become one :class:`MergedProjection` GEMM, installed on
the parent under the merged name
(``qkv_proj``, ``gate_up_proj``, ``in_proj_qkvz``, ``in_proj_ba``); each member's attribute
becomes a :class:`MergedShard` view, so the model's own, unchanged forward runs one GEMM
and gets each member's slice of it.

CUDA graphs and torch.compile: the views do pure tensor work and Python bookkeeping (no
``.item()``, no host sync); a merged forward compiles with ``fullgraph=True`` (CPU test).
"""

from __future__ import annotations

import collections
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from ..formats import Scheme
from ..nn.linear import Fp8Linear
from ..nn.merged import MergedFp8Linear, MergeError, MergeMode
from .families import GROUPS, SiblingGroup, checkpoint_key_mapping, config_model_type

FilterFn = Callable[[nn.Module, str], bool]

# Name parts of what transformers' causal LM does not hold: vision towers (BF16 in Qwen3.5 FP8
# checkpoints) and Qwen3.5's multi-token-prediction head ``mtp.*`` (write_merged copies them as
# stored; from_pretrained does not report their tensors as unused).
NOT_IN_TEXT_MODEL = ("visual", "vision_tower", "vision_model", "mtp")
# Not converted unless a filter asks: those and the output head (kept in high precision by every
# FP8 checkpoint we read).
SKIPPED_BY_DEFAULT = ("lm_head", *NOT_IN_TEXT_MODEL)

# Kept in high precision when convert quantizes high-precision weights (no checkpoint, or an
# unquantized one with scheme=): linears that FP8 checkpoints keep BF16 and that cost a launch
# each for a few bytes. Gated DeltaNet's in_proj_a / in_proj_b (Qwen3.5) and in_proj_ba
# (Qwen3-Next), N = number of value heads (models/qwen.py: Qwen3.6-35B-A3B-FP8 stores a and b
# as BF16); MoE routers that are nn.Linear (N = number of experts, or 1 for
# ``shared_expert_gate``), by name: a name component ``router`` (transformers 5.25: Gemma-4
# ``router.proj``, LongCat ``mlp.router.classifier``, AFMoE ``mlp.router.gate``, JetMoE
# ``router.layer``, DBRX ``ffn.router.layer``, Zaya's router MLP) or ``gate`` right under
# ``mlp`` / ``block_sparse_moe`` (``mlp.gate``; Hunyuan-V1-MoE ``mlp.gate.wg``); and by shape:
# see :func:`router_shaped`. Quantized, a router changes the routing: 2026-12-06 audit, tiny
# LongCat, logits cos 0.956 against the bf16 model (0.999 with the routers kept). With an FP8
# checkpoint, the checkpoint decides: what it stores in FP8 is loaded as FP8.
KEPT_HIGH_PRECISION = ("in_proj_a", "in_proj_b", "in_proj_ba", "shared_expert_gate")
ROUTER_PARENTS = ("mlp", "block_sparse_moe")  # <parent>.gate[.*]: a router
ROUTER_PARTS = ("router",)  # <...>.router[.*]: a router (or, Zaya, a router's own MLP)
# config fields that count a MoE model's routed experts (DBRX: under ffn_config)
EXPERT_COUNT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")


def kept_high_precision(fqn: str) -> bool:
    """A linear the default filter keeps in high precision when quantizing, by its name alone
    (see above; describe and write_merged have no model)."""
    parts = fqn.split(".")
    return (parts[-1] in KEPT_HIGH_PRECISION or any(p in ROUTER_PARTS for p in parts)
            or any(p == "gate" and parts[i - 1] in ROUTER_PARENTS
                   for i, p in enumerate(parts) if i > 0))


def expert_counts(config) -> frozenset[int]:
    """The routed-expert counts a config (a PretrainedConfig or a dict; its text_config and
    DBRX's ffn_config too) names in :data:`EXPERT_COUNT_FIELDS`; empty for a dense model."""
    def get(c, key):
        return c.get(key) if isinstance(c, dict) else getattr(c, key, None)

    configs, counts = [config], set()
    while configs:
        c = configs.pop()
        if c is None:
            continue
        for key in EXPERT_COUNT_FIELDS:
            v = get(c, key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                counts.add(v)
        configs += [get(c, "text_config"), get(c, "ffn_config")]
    return frozenset(counts)


def router_shaped(fqn: str, out_features: int, counts: frozenset[int],
                  holds_experts: Callable[[str], bool]) -> bool:
    """A linear that looks like a MoE router whatever its name: ``out_features`` is the
    config's expert count and the module that holds the ``experts`` is its parent or
    grandparent, not through an attention or shared-expert module (``holds_experts(prefix)``:
    whether ``<prefix>.experts`` exists)."""
    if out_features not in counts:
        return False
    parts = fqn.split(".")
    for up in (1, 2):
        between = parts[len(parts) - up:-1]
        if len(parts) > up and holds_experts(".".join(parts[:-up])) and not any(
                "attn" in p or "attention" in p or "shared" in p or p in ("experts", "mlp")
                for p in between):
            return True
    return False


def keep_in_fp32(model: nn.Module) -> re.Pattern | None:
    """The model's ``_keep_in_fp32_modules`` and ``_keep_in_fp32_modules_strict`` (transformers
    upcasts the parameters they name: patterns searched in a parameter's name, ``*`` a
    wildcard, as its loader's build_glob_alternation reads them) as one regex; None where it
    has none. A linear named there stays in high precision when quantizing: DeepSeek-V3.2's
    ``indexer.weights_proj`` casts its input to its weight's dtype, FP8 once converted, and
    its forward failed (2026-12-06 audit)."""
    pats = set()
    for attr in ("_keep_in_fp32_modules", "_keep_in_fp32_modules_strict"):
        pats |= set(getattr(model, attr, None) or ())
    pats = sorted(p for p in pats if isinstance(p, str) and p)
    return re.compile("|".join(re.escape(p).replace(r"\*", ".*") for p in pats)) if pats \
        else None


def default_filter_for(model: nn.Module, filt: FilterFn | None = None) -> FilterFn:
    """What ``convert`` quantizes in ``model`` with the default filter: ``filt`` (default
    :func:`default_filter`) less the linears :func:`router_shaped` names in ``model`` (its
    config's expert count, beside its ``experts``) and those :func:`keep_in_fp32` names."""
    filt = filt or default_filter
    counts = expert_counts(getattr(model, "config", None))
    modules = dict(model.named_modules())
    fp32 = keep_in_fp32(model)

    def holds(prefix: str) -> bool:
        return f"{prefix}.experts" in modules

    def accept(module: nn.Module | None, fqn: str) -> bool:
        out = getattr(module, "out_features", None)
        return filt(module, fqn) and not (
            isinstance(out, int) and router_shaped(fqn, out, counts, holds)) and not (
            fp32 is not None and fp32.search(f"{fqn}.weight") is not None)

    accept.default = True  # convert's own choice, not the caller's
    return accept


def _not_skipped(module: nn.Module | None, fqn: str) -> bool:
    return not any(part in SKIPPED_BY_DEFAULT for part in fqn.split("."))


def default_filter(module: nn.Module | None, fqn: str) -> bool:
    """Every ``nn.Linear`` except those under a name in :data:`SKIPPED_BY_DEFAULT` and those
    :func:`kept_high_precision` names. ``convert`` with an FP8 checkpoint uses only the first
    rule (given as ``filter`` too): the checkpoint says which small projections are FP8."""
    return _not_skipped(module, fqn) and not kept_high_precision(fqn)


class ConvertError(ValueError):
    """A model or checkpoint that cannot be converted; the message names the module."""


# ----------------------------------------------------------------------------- merged views


class MergedProjection(MergedFp8Linear):
    """A MergedFp8Linear whose shards are served to :class:`MergedShard` views.

    The first view called with a tensor ``x`` runs the one GEMM and keeps its outputs; the
    others, called with the same tensor object, unchanged since (its version counter), take
    their slice; once every member has taken its slice the outputs are dropped. A view
    called with another tensor, with ``x`` edited in place, or a second time in a round runs
    the GEMM afresh, and so does the group's first member always: the parents' forwards call
    the members in the group's order (families.py), so each step starts a round with it,
    whatever an earlier round left untaken. Inference-mode tensors count no versions: an
    ``x`` edited in place between two views of one round, or before a later member called
    without the first, is not seen there.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # [x, its version, outputs, bit mask of the shards taken]: one list mutated in place,
        # because every nn.Module attribute assignment goes through its slow __setattr__
        # (1248 of them per eager step of the merged 27B model: ~2.5 ms under cProfile, H200
        # host, results/profile_eager_qwen3.5-27b_H200_2026-12-01.json)
        self._memo: list = [None, None, None, 0]
        self._all = (1 << len(self.sizes)) - 1

    def shard(self, x: torch.Tensor, index: int) -> torch.Tensor:
        memo, bit = self._memo, 1 << index
        # (compiled: the graph holds one GEMM per round as traced; no version to read)
        version = (None if torch.compiler.is_compiling() or x.is_inference()
                   else x._version)
        if (index == 0 or memo[2] is None or memo[0] is not x or memo[1] != version
                or memo[3] & bit):
            memo[0], memo[1], memo[2], memo[3] = x, version, self(x), 0
        out = memo[2][index]
        memo[3] |= bit
        if memo[3] == self._all:
            memo[0] = memo[2] = None
        return out


class MergedShard(nn.Module):
    """Stands in for one member of a merged group: its slice of the group's one GEMM.

    Holds no tensors (the parent owns the merged module, so state_dict lists it once)."""

    def __init__(self, group: MergedProjection, index: int, name: str) -> None:
        super().__init__()
        object.__setattr__(self, "_group", group)  # not a submodule
        self.index, self.name = index, name
        self.in_features, self.out_features = group.in_features, group.sizes[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._group.shard(x, self.index)

    def extra_repr(self) -> str:
        return f"{self.name}: shard {self.index} of {self._group.names}, N={self.out_features}"


def _merge_reason(linears: Sequence[nn.Module], group: SiblingGroup) -> str | None:
    """Why these members cannot merge (None: they can)."""
    if not all(type(m) is Fp8Linear for m in linears):
        kinds = ", ".join(f"{n}: {type(m).__name__}" for n, m in zip(group.members, linears))
        if all(type(m) is nn.Linear for m in linears):
            return (f"not all members are Fp8Linear ({kinds}): none converted, kept in high "
                    "precision (by the filter or the checkpoint)")
        return f"not all members are Fp8Linear ({kinds})"
    return None


def merge_group(parent: nn.Module, group: SiblingGroup, mode: MergeMode) -> MergedProjection:
    """Replace ``group``'s members on ``parent`` by one MergedProjection + views, in the
    train / eval mode of the modules they replace (the merged one: its parent's)."""
    linears = [getattr(parent, name) for name in group.members]
    merged = MergedProjection.from_linears(linears, group.members, mode)
    merged.train(parent.training)
    setattr(parent, group.merged_name, merged)
    for i, (name, lin) in enumerate(zip(group.members, linears)):
        shard = MergedShard(merged, i, name)
        shard.train(lin.training)
        _carry_hooks(lin, shard, name)
        setattr(parent, name, shard)
    return merged


def _candidate(parent: nn.Module, group: SiblingGroup) -> bool:
    """Whether ``parent`` is of a class the group merges in and holds all its members."""
    return (type(parent).__name__ in group.parent_classes
            and all(isinstance(getattr(parent, m, None), nn.Module) for m in group.members))


def merge_siblings(model: nn.Module, groups: Iterable[SiblingGroup],
                   mode: str | MergeMode = MergeMode.EXACT) -> list[dict]:
    """Merge each group wherever its parent class is listed; one record per candidate:
    ``{"parent", "merged", "members", "sizes", "merged_ok", "kept", "split", "reason"}``.
    ``kept``: no member was converted (all kept in high precision, a choice): not a failed
    merge; ``split``: some members were converted, others kept in high precision (by the
    checkpoint or a filter): each runs as its own GEMM (vLLM's loader refuses such a
    checkpoint; fp8tower loads it unmerged). A group the model's forward rules out
    (``SiblingGroup.skip``) is neither."""
    mode = MergeMode.parse(mode)
    groups = tuple(groups)
    config = getattr(model, "config", None)
    records = []
    for fqn, parent in list(model.named_modules()):
        for group in groups:
            if not _candidate(parent, group):
                continue
            linears = [getattr(parent, m) for m in group.members]
            skip = group.skip_reason(config)
            rec = {"parent": fqn, "merged": group.merged_name, "members": list(group.members),
                   "sizes": [int(getattr(m, "out_features", 0)) for m in linears],
                   "merged_ok": False, "kept": all(type(m) is nn.Linear for m in linears),
                   "reason": skip or _merge_reason(linears, group)}
            rec["split"] = (not rec["kept"] and any(type(m) is nn.Linear for m in linears)
                            and skip is None)
            if rec["reason"] is None:
                try:
                    merge_group(parent, group, mode)
                    rec["merged_ok"] = True
                except MergeError as e:  # e.g. block128 with a member N not a multiple of 128
                    rec["reason"] = str(e)
            records.append(rec)
    return records


def _patch(groups: tuple[SiblingGroup, ...]) -> Callable:
    def apply(model, mode) -> list[dict]:
        return merge_siblings(model, groups, mode)

    return apply


# config.model_type -> patch(model, mode) -> records (Liger-Kernel's MODEL_TYPE_TO_APPLY_LIGER_FN)
MODEL_TYPE_TO_MERGE: dict[str, Callable] = {t: _patch(g) for t, g in GROUPS.items()}


def merge_family(model: nn.Module, mode: str | MergeMode = MergeMode.EXACT) -> list[dict]:
    """The model family's sibling groups merged in a model whose linears are FP8 already
    (e.g. swapped one by one with calibrated scales); the records, [] for a family without
    groups. Also ``model.fp8tower_merges``."""
    patch = MODEL_TYPE_TO_MERGE.get(_model_type(model))
    model.fp8tower_merges = [] if patch is None else patch(model, MergeMode.parse(mode))
    return model.fp8tower_merges


# ----------------------------------------------------------------------------- swapping


# Hooks of a replaced module that its replacement takes over: the same dicts, so the handles
# that registered them still remove them.
_CARRIED_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                  "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
                  "_backward_pre_hooks")
_DROPPED_HOOKS = ("_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                  "_load_state_dict_post_hooks")


def _carry_hooks(old: nn.Module, new: nn.Module, fqn: str) -> None:
    """``old``'s forward and backward hooks fire on ``new``; what cannot follow (state-dict
    hooks: the keys change; an instance ``forward``, e.g. accelerate's offload hooks) is
    named in a warning."""
    for name in _CARRIED_HOOKS:
        hooks = getattr(old, name, None)
        if hooks:
            object.__setattr__(new, name, hooks)
    if getattr(old, "_is_full_backward_hook", None) is not None:
        object.__setattr__(new, "_is_full_backward_hook", old._is_full_backward_hook)
    lost = [name for name in _DROPPED_HOOKS if getattr(old, name, None)]
    if "forward" in vars(old):
        lost.append("its instance forward (accelerate hooks?)")
    if lost:
        warnings.warn(f"{fqn}: replaced by {type(new).__name__}, which does not take over "
                      f"{', '.join(lost)} of the {type(old).__name__}", stacklevel=4)


# nn.Linear subclasses whose forward is exactly the linear map, swapped like nn.Linear, by
# (module, class name): read in transformers 5.25.0's source. FalconLinear.forward is
# ``input @ self.weight.T`` plus ``self.bias`` when there is one (modeling_falcon.py): every
# Falcon projection is one, so nothing converted before (2026-12-06 audit).
PLAIN_LINEAR_SUBCLASSES = frozenset({
    ("transformers.models.falcon.modeling_falcon", "FalconLinear"),
})


def is_plain_linear(module: nn.Module) -> bool:
    """An ``nn.Linear`` whose forward an Fp8Linear computes: nn.Linear's own, or a subclass
    of :data:`PLAIN_LINEAR_SUBCLASSES`."""
    cls = type(module)
    return isinstance(module, nn.Linear) and (
        cls.forward is nn.Linear.forward
        or (cls.__module__, cls.__qualname__) in PLAIN_LINEAR_SUBCLASSES)


def own_forward_linears(model: nn.Module) -> dict[str, str]:
    """{fqn: class name} of the nn.Linear subclasses with a forward of their own that
    :func:`swap_linear_layers` leaves as they are."""
    return {fqn: type(m).__name__ for fqn, m in model.named_modules()
            if fqn and isinstance(m, nn.Linear) and not is_plain_linear(m)}


def _listed(by_class: dict[str, list[str]]) -> str:
    return "; ".join(f"{cls} ({len(f)}: {f[0]}{', ...' if len(f) > 1 else ''})"
                     for cls, f in by_class.items())


def swap_linear_layers(
    model: nn.Module,
    from_float: Callable[[nn.Linear, str], nn.Module | None],
    filter: FilterFn | None = None,
) -> list[str]:
    """Replace each ``nn.Linear`` that ``filter(module, fqn)`` accepts by
    ``from_float(module, fqn)`` (None keeps it); returns the fqns swapped. A linear held by
    several parents (shared, tied) is converted once (from its first accepted name that
    ``from_float`` takes) and set on each parent whose name the filter accepts; its forward
    and backward hooks and its train / eval mode carry over (before, the new modules of an
    eval() model came back in training mode). A subclass with a ``forward`` of its own is no plain
    linear (transformers 5.25: PhimoeTopKRouter and Llama4Router return tuples,
    DeepseekV4GroupedLinear runs a grouped bmm) and is left as it is, with a warning, unless
    :data:`PLAIN_LINEAR_SUBCLASSES` lists it (Falcon's FalconLinear)."""
    filt = filter or default_filter
    names: dict[int, list[str]] = {}
    linears: dict[int, nn.Linear] = {}
    kept: dict[str, list[str]] = {}
    for fqn, m in model.named_modules(remove_duplicate=False):
        if not isinstance(m, nn.Linear) or not fqn or fqn in names.get(id(m), ()):
            continue
        if not is_plain_linear(m):
            if filt(m, fqn):
                kept.setdefault(type(m).__name__, []).append(fqn)
            continue
        names.setdefault(id(m), []).append(fqn)
        linears[id(m)] = m
    if kept:
        warnings.warn(f"left unconverted: nn.Linear subclasses with a forward of their own, "
                      f"which an Fp8Linear would not compute: {_listed(kept)}", stacklevel=2)
    swapped = []
    for key, lin in linears.items():
        accepted = [fqn for fqn in names[key] if filt(lin, fqn)]
        new = None
        for fqn in accepted:
            new = from_float(lin, fqn)
            if new is not None:
                break
        if new is None:
            continue
        new.train(lin.training)
        _carry_hooks(lin, new, accepted[0])
        for fqn in accepted:
            parent_name, _, attr = fqn.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attr, new)
            swapped.append(fqn)
    return swapped


def _model_type(model: nn.Module) -> str | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = getattr(config, "text_config", None) if hasattr(config, "get_text_config") else None
    mt = getattr(config, "model_type", None)
    if mt not in MODEL_TYPE_TO_MERGE and text is not None:
        mt = getattr(text, "model_type", mt)
    return mt


def open_mapped(checkpoint, scheme=None, key_mapping: dict[str, str] | Sequence[tuple[str, str]] | None = None):
    """A checkpoint (a path, or one already opened) seen under the model's names:
    ``key_mapping`` ({regex: replacement}, as transformers' ``from_pretrained(key_mapping=)``)
    or else the family's (:func:`~fp8tower.hf.families.checkpoint_key_mapping`); None stays
    None."""
    if checkpoint is None:
        return None
    if not hasattr(checkpoint, "load_linear"):
        from ..checkpoint import open_checkpoint

        checkpoint = open_checkpoint(checkpoint, scheme=scheme)
    elif scheme is not None:
        _check_opened_scheme(checkpoint, Scheme.parse(scheme))
    if hasattr(checkpoint, "stored_name"):  # already mapped
        return checkpoint
    if key_mapping is None:
        rules = checkpoint_key_mapping(config_model_type(checkpoint.config))
    else:
        rules = check_key_mapping(key_mapping)
    if not rules:
        return checkpoint
    from ..checkpoint.keymap import KeyMappedCheckpoint

    return KeyMappedCheckpoint(checkpoint, rules)


def check_key_mapping(key_mapping) -> tuple[tuple[str, str], ...]:
    """``key_mapping`` as (regex, replacement) rules: a dict {str: str} (or a sequence of such
    pairs) whose patterns compile; a TypeError / ValueError naming the bad entry otherwise."""
    if isinstance(key_mapping, dict):
        rules = tuple(key_mapping.items())
    elif isinstance(key_mapping, Sequence) and not isinstance(key_mapping, str):
        rules = tuple(key_mapping)
    else:
        raise TypeError(f"key_mapping: expected a dict {{regex: replacement}}, got "
                        f"{key_mapping!r}")
    for rule in rules:
        if not (isinstance(rule, tuple) and len(rule) == 2
                and all(isinstance(x, str) for x in rule)):
            raise TypeError(f"key_mapping: expected str regex -> str replacement, got the "
                            f"entry {rule!r}")
        try:
            re.compile(rule[0])
        except re.error as e:
            raise ValueError(f"key_mapping: {rule[0]!r} is not a valid regex ({e})") from None
    return rules


def check_merge(merge) -> None:
    if not isinstance(merge, bool):  # merge="no" merged
        raise TypeError(f"merge: expected True or False, got {merge!r}")


def _check_opened_scheme(ck, scheme: Scheme) -> None:
    """``scheme`` against a checkpoint opened before, as open_checkpoint checks a path's; a
    bf16 one opened without a scheme has no linear to load at all."""
    from ..checkpoint import check_scheme

    check_scheme(ck, scheme)
    if not ck.linear_names() and getattr(ck, "scheme", None) is not None:
        raise ConvertError(f"{ck.path}: opened with scheme={ck.scheme}, the checkpoint has no "
                           "linear to quantize (no 2-D BF16, F16 or F32 *.weight but lm_head "
                           "and the embeddings)")
    if not ck.linear_names():
        raise ConvertError(f"{ck.path}: opened without a scheme, the checkpoint has no FP8 "
                           f"linear to load; to quantize it to {scheme}, pass its path or "
                           f"open_checkpoint(path, scheme={str(scheme)!r})")


def _nothing_converted(model: nn.Module, ck, names: set[str]) -> ConvertError | None:
    """Why a checkpoint converted none of ``model``'s linears, if nothing but a mistake can
    explain it (a filter or an ignore list that keeps every linear is a choice)."""
    if not names:
        return ConvertError(f"{ck.path}: the checkpoint has no FP8 linear (bf16?) and no "
                            "scheme was given: pass scheme= to quantize it")
    linears = [fqn for fqn, m in model.named_modules() if is_plain_linear(m)]
    modules = dict(model.named_modules())
    own = own_forward_linears(model)
    if names.isdisjoint(linears) and not names.isdisjoint(own):
        # Falcon before FalconLinear was allow-listed: every projection skipped, the FP8
        # weights dequantized, a model without one Fp8Linear returned (2026-12-06 audit)
        hit = sorted(names & own.keys())
        kinds = sorted({own[n] for n in hit})
        return ConvertError(
            f"{ck.path}: {len(hit)} of the checkpoint's {len(names)} linear(s) to load are "
            f"nn.Linear subclasses with a forward of their own ({', '.join(kinds)}, e.g. "
            f"{hit[0]!r}), which fp8tower does not swap (an Fp8Linear would not compute their "
            "forward); nothing converted")
    other = sorted(n for n in names if n in modules and not isinstance(modules[n], nn.Linear))
    if names.isdisjoint(linears) and other:  # GPT-2's Conv1D: the names match, the type not
        # (2026-12-05 audit: this said to pass key_mapping=, which cannot help)
        kinds = sorted({type(modules[n]).__name__ for n in other})
        rest = "" if len(other) == len(names) else ", the others none of its modules"
        return ConvertError(
            f"{ck.path}: {len(other)} of the checkpoint's {len(names)} linear(s) to quantize are "
            f"modules of the model but not torch.nn.Linear (e.g. {other[0]!r}: "
            f"{', '.join(kinds)}){rest}; fp8tower swaps nn.Linear layers only")
    if names.isdisjoint(linears):
        example = linears[0] if linears else "none"
        rules = getattr(ck, "rules", ())
        mapped = (f" (after the key mapping {[list(r) for r in rules]}; key_mapping={{}} "
                  "turns it off)" if rules else "")
        what = "linears to quantize" if ck.format == "unquantized" else "FP8 linears"
        return ConvertError(
            f"{ck.path}: none of the checkpoint's {len(names)} {what} (e.g. "
            f"{min(names)!r}{mapped}) is a linear of the model (e.g. {example!r}); pass "
            "key_mapping= if the checkpoint names them differently"
            + _original_format_hint(getattr(getattr(model, "config", None), "model_type", None),
                                    rules))
    return None


def _original_format_hint(model_type: str | None, rules) -> str:
    """Where transformers renames ``model_type``'s tensors on load (its conversion mapping)
    and fp8tower applies none of it: its save_pretrained writes those original names back
    by default, which fp8tower does not read (2026-12-06 audit: a DeepSeek-V4 model saved by
    transformers, DeepSeek's own names, and a key_mapping= hint that could not load its
    per-expert tensors)."""
    if not model_type or rules:
        return ""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    except ImportError:  # transformers 4, or a layout of the module we do not know
        return ""
    renamed = bool(get_checkpoint_conversion_mapping(model_type))
    return (f"; transformers renames {model_type}'s checkpoint tensors on load and writes "
            "them back under their original names (save_pretrained's save_original_format="
            "True): fp8tower does not apply those renames, so save with "
            "save_original_format=False" if renamed else "")


def _device_of(lin: nn.Linear, fqn: str, device) -> torch.device:
    if device is not None:
        return torch.device(device)
    if lin.weight.device.type == "meta":
        raise ConvertError(f"{fqn}: its weight is on the meta device: pass device= for the FP8 "
                           "weights")
    return lin.weight.device


def _warn_experts_kept(model: nn.Module, linear_weights: int) -> None:
    """One warning counting the 3-D MoE expert parameters (transformers 5 fuses each block's
    experts into ``experts.gate_up_proj`` / ``down_proj``, no nn.Linear) that stay in high
    precision, and their share of the weights of the linears and experts. 2026-12-06 audit:
    tiny Mixtral / Qwen3-MoE / DeepSeek-V3 / gpt-oss converted with no word about them,
    though they hold most of an MoE model's linear weights."""
    experts = [(n, p.numel()) for n, p in model.named_parameters()
               if p.dim() == 3 and "experts" in n.split(".")]
    if not experts:
        return
    count = sum(n for _, n in experts)
    share = count / max(count + linear_weights, 1)
    warnings.warn(f"{len(experts)} MoE expert parameter(s) stay in high precision (3-D fused "
                  f"experts, e.g. {experts[0][0]}: {count} weights, {share:.0%} of the linear "
                  "and expert weights): fp8tower converts nn.Linear layers only", stacklevel=3)


# Called with each model convert() returns (hf/save.py installs save_pretrained): the writers
# import this module, not the other way round
ON_CONVERTED: list[Callable[[nn.Module], None]] = []


def convert(
    model: nn.Module,
    scheme: Scheme | str | None = None,
    *,
    checkpoint: Any = None,
    merge: bool = True,
    backend: str = "auto",
    filter: FilterFn | None = None,
    requant_max: bool = False,
    device: torch.device | str | None = None,
    key_mapping: dict[str, str] | Sequence[tuple[str, str]] | None = None,
) -> nn.Module:
    """Swap ``model``'s linears for FP8 ones in place and return it.

    Without ``checkpoint``: each accepted linear's weight is quantized to ``scheme``
    (per_tensor: dynamic activation scale, one amax over all of a call's rows, so a row's
    result depends on the others in its batch: padding, draft tokens, one NaN; channel_token
    scales each token alone). With ``checkpoint`` (a path or an opened
    :mod:`fp8tower.checkpoint`): FP8 weights and scales come from it (the model's own
    weights may be on the meta device; ``device`` then says where they go); modules the
    checkpoint ignores stay as they are; ``scheme`` only names the scheme for a bf16
    checkpoint. ``merge``: merge the family's siblings (:data:`MODEL_TYPE_TO_MERGE`),
    exactly, or with one rescaled per-tensor scale per group when ``requant_max``.
    ``key_mapping``: checkpoint names -> the model's ({regex: replacement}); default: the
    family's (e.g. Qwen3.5's ``model.language_model.`` -> ``model.``). ``filter``: default
    :func:`default_filter`; with an FP8 checkpoint, only lm_head, vision towers and ``mtp``
    are left out by default (the checkpoint says which small projections are FP8); a bf16
    checkpoint's lm_head is quantized where the filter asks for it. Linears the filter accepts
    but the checkpoint has no tensor for keep the model's own weights, named in one warning.
    The result: ``model.fp8tower_merges`` lists each merge group and why it did not merge
    (``kept``: none of its members converted, by choice). A model converted already is
    refused (:class:`ConvertError`).
    """
    done = next(((fqn, m) for fqn, m in model.named_modules()
                 if isinstance(m, (Fp8Linear, MergedFp8Linear, MergedShard))), None)
    if done is not None:  # a second convert would only overwrite fp8tower_merges
        raise ConvertError(f"the model is already converted ({done[0] or 'the model'} is "
                           f"{type(done[1]).__name__}): convert a model once, with a filter "
                           "that selects every linear to convert")
    check_merge(merge)
    ck = open_mapped(checkpoint, scheme, key_mapping)
    if ck is None and scheme is None:
        raise ConvertError("convert needs a scheme (per_tensor, channel_token, block128, "
                           "weight_only) to quantize with, or a checkpoint to load")
    scheme = None if scheme is None else Scheme.parse(scheme)

    if ck is None:
        def from_float(lin: nn.Linear, fqn: str) -> nn.Module:
            if lin.weight.device.type == "meta":
                raise ConvertError(f"{fqn}: its weight is on the meta device; quantizing needs "
                                   "real weights (or pass checkpoint=)")
            out = Fp8Linear.from_linear(lin, scheme, backend=backend)
            return out if device is None else out.to(device)
    else:
        names, stored = set(ck.linear_names()), set(ck.tensor_names())
        shared = collections.Counter(id(p) for _, p in model.named_parameters(
            remove_duplicate=False))
        uncovered: list[str] = []  # accepted, real weights, and no tensor in the checkpoint

        def from_float(lin: nn.Linear, fqn: str) -> nn.Module | None:
            # a bf16 checkpoint's lm_head: quantized where the filter asks for it
            asked = ck.kept_unless_asked(fqn)
            if not asked and (fqn not in names or ck.is_ignored(fqn)
                              or ck.scheme_for(fqn) is None):
                if (f"{fqn}.weight" not in stored and lin.weight.device.type != "meta"
                        and shared[id(lin.weight)] == 1):  # a tied weight has its source
                    uncovered.append(fqn)
                return None
            loaded = ck.load_linear(fqn, device=_device_of(lin, fqn, device))
            w = loaded.weight
            if (w.n, w.k) != (lin.out_features, lin.in_features):
                raise ConvertError(
                    f"{fqn}: the checkpoint's weight is {w.n}x{w.k}, the model's linear "
                    f"{lin.out_features}x{lin.in_features}")
            if (loaded.bias is None) != (lin.bias is None):
                raise ConvertError(f"{fqn}: the model's linear {'has' if lin.bias is not None else 'has no'} "
                                   "bias, the checkpoint disagrees")
            bias = loaded.bias
            if bias is not None and bias.is_floating_point() and lin.bias.is_floating_point():
                # in the dtype of the linear it replaces, as transformers casts a float bias
                # to the model's dtype (before: the stored one, fp32 in a bf16 model)
                bias = bias.to(lin.bias.dtype)
            try:
                return Fp8Linear.from_weight(w, bias, backend=backend)
            except ValueError as e:  # e.g. a stored bias of the wrong shape: name the module
                raise ConvertError(f"{fqn}: {e}") from None

    # who keeps a member in high precision, for the split warning below
    keeper = ("the checkpoint" if filter is None and ck is not None and ck.format != "unquantized"
              else "the filter" if ck is None or ck.format == "unquantized"
              else "the checkpoint or the filter")
    if (filter is None or filter is default_filter) and ck is not None \
            and ck.format != "unquantized":
        filter = _not_skipped  # FP8 weights: the checkpoint says which are FP8
    elif filter is None or filter is default_filter:  # quantizing: routers by shape too
        filter = default_filter_for(model)
    linear_weights = sum(m.weight.numel() for m in {id(m): m for m in model.modules()
                                                     if is_plain_linear(m)}.values())
    swapped = swap_linear_layers(model, from_float, filter)
    if ck is not None and not swapped:
        error = _nothing_converted(model, ck, names)
        if error is not None:
            raise error
    if ck is not None and uncovered:  # they keep the model's own weights
        warnings.warn(f"{ck.path}: {len(uncovered)} linear(s) of the model left unconverted: "
                      f"the checkpoint has no tensor for them ({', '.join(uncovered[:3])}"
                      f"{', ...' if len(uncovered) > 3 else ''}); they keep the model's own "
                      "weights", stacklevel=2)
    if not swapped and ck is None and (filter in (None, default_filter)
                                       or getattr(filter, "default", False)):
        # e.g. GPT-2: its projections are transformers' Conv1D, its one nn.Linear the lm_head
        # the default filter keeps. Not a choice the caller made (2026-12-05 audit: the model
        # came back unchanged, silently); a filter of one's own may keep every linear.
        linears = [fqn for fqn, m in model.named_modules() if is_plain_linear(m)]
        own: dict[str, list[str]] = {}
        for fqn, cls in own_forward_linears(model).items():
            own.setdefault(cls, []).append(fqn)
        others = sorted({type(m).__name__ for m in model.modules()
                         if not isinstance(m, nn.Linear) and m.__class__ is not nn.Embedding
                         and isinstance(getattr(m, "weight", None), torch.Tensor)
                         and m.weight.dim() == 2})
        has = ("no torch.nn.Linear" if not linears else
               f"only the nn.Linear layers {', '.join(linears[:4])} (kept in high precision "
               "by the default filter)")
        if own:  # the reason, not the filter (2026-12-06 audit: Falcon blamed the filter)
            has += (f"{' and' if linears else ','} nn.Linear subclasses with a forward of "
                    f"their own, which fp8tower does not swap: {_listed(own)}")
        raise ConvertError(
            f"converted nothing: {type(model).__name__} has {has}; fp8tower swaps nn.Linear "
            f"layers only (2-D weights also in: {', '.join(others) or 'none'})")
    _warn_experts_kept(model, linear_weights)
    records: list[dict] = []
    if merge:
        records = merge_family(model, MergeMode.REQUANT_MAX if requant_max else MergeMode.EXACT)
    split = [r for r in records if r["split"]]
    if split:  # e.g. an ignore list naming one member of a group: slower, never wrong
        first = split[0]
        warnings.warn(f"{len(split)} sibling group(s) not merged: some members are FP8, others "
                      f"kept in high precision by {keeper} (e.g. {first['parent']}."
                      f"{first['merged']}: {first['reason']}); each member runs as its own "
                      "GEMM; see model.fp8tower_merges", stacklevel=2)
    tried = [r for r in records if not r["kept"]]
    failed = [r for r in tried if not r["merged_ok"] and not r["split"]]
    if requant_max and failed:  # asked for: say it did not happen (the numbers stay right)
        warnings.warn(f"requant_max: {len(failed)} of {len(tried)} sibling groups not merged "
                      f"({failed[0]['parent']}.{failed[0]['merged']}: {failed[0]['reason']}); "
                      "see model.fp8tower_merges", stacklevel=2)
    model.fp8tower_merges = records
    for hook in ON_CONVERTED:  # hf/save.py: save_pretrained writes what loads back
        hook(model)
    return model
