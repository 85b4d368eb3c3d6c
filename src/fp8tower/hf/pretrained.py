"""Build a transformers model from a local checkpoint, already converted; describe one.

    >>> model = fp8tower.from_pretrained("path/to/Qwen3.5-27B-FP8")
    >>> info = fp8tower.hf.describe("path/to/Qwen3.5-27B-FP8")   # what `fp8tower convert` prints
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import nn

from ..checkpoint.base import MOE_EXPERT
from ..formats import Scheme
from .conversion import (
    NOT_IN_TEXT_MODEL,
    ConvertError,
    FilterFn,
    check_merge,
    convert,
    default_filter,
    expert_counts,
    keep_in_fp32,
    open_mapped,
    router_shaped,
)
from .families import GROUPS, config_model_type, per_expert_layout

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- from_pretrained


@contextlib.contextmanager
def params_on_meta():
    """Create every nn.Parameter on the meta device (buffers stay real: rotary tables etc.
    are computed as usual); accelerate's ``init_empty_weights(include_buffers=False)``."""
    orig = nn.Module.register_parameter

    def register(self, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        orig(self, name, param)

    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = orig


_FLOAT_TAGS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _decode_special_floats(obj):
    """config.json's ``{"__float__": "Infinity"}`` (how transformers 5 writes inf / nan) as
    the float, as its ``from_pretrained`` reads it (configuration_utils.py
    ``_decode_special_floats``); before, GraniteMoeHybrid's ``time_step_limit`` [0, inf]
    failed the config's validation (2026-12-06)."""
    if isinstance(obj, dict):
        if set(obj) == {"__float__"} and obj["__float__"] in _FLOAT_TAGS:
            return _FLOAT_TAGS[obj["__float__"]]
        return {k: _decode_special_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode_special_floats(v) for v in obj]
    return obj


def _class_keep_in_fp32(config: dict) -> re.Pattern | None:
    """:func:`~fp8tower.hf.conversion.keep_in_fp32` of the causal LM class transformers maps
    ``config``'s model type to (class attributes: no model is built), so that describe keeps
    what convert keeps (2026-12-06 audit: DeepSeek-V4's BF16 compressor projections were
    reported quantized); None where transformers or the type is not known."""
    try:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        return None
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config_model_type(config) or "")
    try:  # transformers imports the model's module lazily: it may need a package not here
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
    except (ImportError, RuntimeError):
        return None
    return None if cls is None else keep_in_fp32(cls)


def empty_model(config, *, dtype: torch.dtype = torch.bfloat16, cls=None) -> nn.Module:
    """A transformers causal LM of ``config`` (a dict or PretrainedConfig) with its parameters
    on the meta device (no memory, no init time); buffers are real, on the CPU."""
    from .requires import transformers as _transformers

    transformers = _transformers()

    if isinstance(config, dict):
        cfg = _decode_special_floats(dict(config))
        mt = cfg.pop("model_type", None)
        if mt is None:
            raise ConvertError("config.json has no model_type")
        config = transformers.AutoConfig.for_model(mt, **cfg)
    if cls is None:
        cls = transformers.AutoModelForCausalLM
        build = cls.from_config
    else:
        build = cls._from_config
    with params_on_meta():
        return build(config, dtype=dtype)


def _set_tensor(model: nn.Module, name: str, value: torch.Tensor) -> None:
    """Put ``value`` at ``name`` (a Parameter is set as it is: tied names share it; a plain
    tensor becomes one with the requires_grad of the parameter it replaces)."""
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    if attr in parent._parameters:
        old = parent._parameters[attr]
        if tuple(old.shape) != tuple(value.shape):
            raise ConvertError(f"{name}: the checkpoint has shape {tuple(value.shape)}, the "
                               f"model {tuple(old.shape)}")
        if not isinstance(value, nn.Parameter):
            value = nn.Parameter(value, requires_grad=old.requires_grad)
        parent._parameters[attr] = value
    else:
        parent._buffers[attr] = value


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _load_param(ck, name: str, dtype: torch.dtype, device) -> torch.Tensor:
    """A stored tensor for a parameter that stays as the model built it, in ``dtype``. The
    weight of a linear stored in FP8 that was not converted (the filter kept it, e.g.
    ``lm_head``) is dequantized with its scales: its codes alone are not its values."""
    t = ck.load_tensor(name, device=device)
    if t.dtype not in _FP8:
        return t.to(dtype)
    module, _, attr = name.rpartition(".")
    if attr != "weight" or ck.scheme_for(module) is None:
        raise ConvertError(f"{name}: stored as {t.dtype}, but it is not the weight of a "
                           "quantized linear of the checkpoint: no scale to read it with")
    return ck.load_linear(module, device=device).weight.dequantize(dtype)


# transformers 5's fused experts of a MoE block: <experts>.gate_up_proj [E, 2I, H] (each
# expert's gate_proj rows, then its up_proj rows) and <experts>.down_proj [E, H, I], for the
# model types of families.per_expert_layout (Mixtral's w1 / w3 / w2 renamed to these)
_FUSED_EXPERTS = re.compile(r"^(?P<experts>.+\.experts)\.(?P<param>gate_up_proj|down_proj)$")


def _load_experts(model: nn.Module, ck, name: str, shape: torch.Size, dtype: torch.dtype,
                  device, stored: set[str]) -> torch.Tensor | None:
    """A fused expert parameter filled from a checkpoint that stores each expert's linears
    (``<experts>.<e>.gate_proj.weight``, ...), as the hub's do: FP8 ones dequantized with
    their scales (_load_param), bf16 ones as stored; the experts stay in high precision
    (fp8tower converts no experts). None: not such a parameter, or an expert's tensor is
    not stored (the caller reports it missing). 2026-12-05 audit: no Qwen3.5-MoE or
    Qwen3-Next checkpoint in that layout loaded, bf16 ones included."""
    m = _FUSED_EXPERTS.match(name)
    config = getattr(model, "config", None)
    if (m is None or len(shape) != 3
            or not per_expert_layout(getattr(config, "model_type", None))):
        return None
    experts = model.get_submodule(m["experts"])
    if getattr(experts, "is_transposed", False) or not getattr(experts, "has_gate", True):
        return None  # a layout of another shape than the one filled here
    projs = ("gate_proj", "up_proj") if m["param"] == "gate_up_proj" else ("down_proj",)
    names = [[f"{m['experts']}.{e}.{p}.weight" for p in projs] for e in range(shape[0])]
    if not all(n in stored for row in names for n in row):
        return None
    out = torch.empty(shape, dtype=dtype, device=device)
    for e, row in enumerate(names):
        parts = [_load_param(ck, n, dtype, device) for n in row]
        got = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
        if got != tuple(shape[1:]) or any(p.shape[1:] != parts[0].shape[1:] for p in parts):
            raise ConvertError(f"{name}: expert {e}'s {' + '.join(row)} make "
                               f"{'x'.join(map(str, got))}, the model's {m['param']} expects "
                               f"{'x'.join(map(str, shape[1:]))} an expert")
        torch.cat(parts, out=out[e])
    return out


def _load_member(ck, name: str, dtype: torch.dtype, device) -> torch.Tensor | None:
    """The weight or bias of a quantized linear the checkpoint stores under another name (a
    member of an fp8tower checkpoint's merged group: a slice of the merged tensor, native.py),
    kept unconverted by the filter: read through load_linear, the weight dequantized as
    _load_param does. None: ``name`` is no such tensor."""
    module, _, attr = name.rpartition(".")
    if attr not in ("weight", "bias") or ck.scheme_for(module) is None:
        return None
    loaded = ck.load_linear(module, device=device)
    if attr == "weight":
        return loaded.weight.dequantize(dtype)
    return None if loaded.bias is None else loaded.bias.to(dtype)


def _check_dtype(dtype) -> torch.dtype:
    """``dtype`` (a torch dtype, or its name as transformers takes it: "bfloat16") for the
    model's high-precision tensors: floating and 16 bits or more (an FP8 one failed in torch's
    storage code)."""
    dt = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(dt, torch.dtype):
        raise TypeError(f"dtype: expected a torch dtype (torch.bfloat16, torch.float16, "
                        f"torch.float32), got {dtype!r}")
    if not dt.is_floating_point or dt.itemsize < 2:
        raise ValueError(f"dtype: expected a floating dtype of 16 bits or more for the tensors "
                         f"that stay in high precision (torch.bfloat16, torch.float16, "
                         f"torch.float32), got {dt}")
    return dt


def _unused_tensors(model: nn.Module, ck) -> list[str]:
    """The stored tensors the load did not read, but for what the causal LM does not hold
    (NOT_IN_TEXT_MODEL: vision towers, mtp) and non-persistent buffers it computes itself
    (rotary ``inv_freq``)."""
    model_name = getattr(ck, "model_name", lambda n: n)
    computed = {f"{p}.{a}" if p else a for p, mod in model.named_modules()
                for a in mod._non_persistent_buffers_set}
    return [n for n in ck.tensors_not_read()
            if not any(part in NOT_IN_TEXT_MODEL for part in n.split("."))
            and model_name(n) not in computed]


def _tied_keys(model: nn.Module) -> dict[str, str]:
    """{target: source} of the ties the model's config asks for (transformers 5:
    ``all_tied_weights_keys``, {} when ``tie_word_embeddings`` is off). The class-level
    ``_tied_weights_keys`` lists them whatever the config says: a head missing from an untied
    checkpoint was silently taken from the embedding."""
    keys = getattr(model, "all_tied_weights_keys", None)
    if isinstance(keys, dict):
        return keys
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    keys = getattr(model, "_tied_weights_keys", None)
    if not isinstance(keys, dict) or not getattr(text, "tie_word_embeddings", True):
        return {}
    return keys


def _load_buffers(model: nn.Module, ck, stored: set[str], device) -> None:
    """The persistent buffers the checkpoint stores (e.g. Gemma 4's trained ``layer_scalar``,
    init 1.0: never loaded before, logits at 2 dB SQNR against transformers), each in the
    buffer's own dtype; fp8tower's modules loaded theirs already."""
    for parent, mod in model.named_modules():
        if type(mod).__module__.startswith("fp8tower."):
            continue
        for attr, buf in list(mod._buffers.items()):
            name = f"{parent}.{attr}" if parent else attr
            if buf is None or attr in mod._non_persistent_buffers_set or name not in stored:
                continue
            value = ck.load_tensor(name, device=device)
            if tuple(value.shape) != tuple(buf.shape):
                raise ConvertError(f"{name}: the checkpoint has shape {tuple(value.shape)}, "
                                   f"the model's buffer {tuple(buf.shape)}")
            mod._buffers[attr] = value.to(buf.dtype)


def from_pretrained(
    path: str | os.PathLike[str],
    *,
    scheme: Scheme | str | None = None,
    merge: bool = True,
    backend: str = "auto",
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    requant_max: bool = False,
    filter: FilterFn | None = None,
    cls=None,
    key_mapping: dict[str, str] | Sequence[tuple[str, str]] | None = None,
) -> nn.Module:
    """The transformers model of a local checkpoint, already converted: built with its
    parameters on the meta device, FP8 linears filled from the checkpoint (never through a
    bf16 copy), every other tensor loaded with ``load_tensor`` in ``dtype`` on ``device``.
    ``scheme``: the scheme to quantize a bf16 checkpoint to (an FP8 one brings its own).
    ``key_mapping``: stored names -> the model's ({regex: replacement}); default: the family's
    (Qwen3.5: ``model.language_model.`` -> ``model.``; its ``model.visual.*`` and ``mtp.*``
    tensors are not part of the causal LM and are not read). One warning lists the stored tensors
    the model did not use (but vision towers', ``mtp.*`` and KV-cache scales).
    ``merge``, ``backend``, ``requant_max``, ``filter``: as :func:`~fp8tower.convert`.
    ``cls``: the transformers model class to build (default: ``AutoModelForCausalLM``'s
    choice for the config), e.g. ``Qwen3_5ForConditionalGeneration`` with ``key_mapping={}``."""
    check_merge(merge)
    dtype = _check_dtype(dtype)
    ck = open_mapped(Path(path), scheme, key_mapping)
    model = empty_model(ck.config, dtype=dtype, cls=cls)
    # key_mapping passed on: with ``{}`` the checkpoint stays unmapped (convert would apply
    # the family's default to a checkpoint opened without one)
    convert(model, scheme, checkpoint=ck, merge=merge, backend=backend, filter=filter,
            requant_max=requant_max, device=device, key_mapping=key_mapping)
    stored = set(ck.tensor_names())
    # Every name of each parameter still to load: tied ones (lm_head.weight and
    # embed_tokens.weight under tie_word_embeddings) are one Parameter, loaded once, shared.
    names_of: dict[int, list[str]] = collections.defaultdict(list)
    params: dict[int, nn.Parameter] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.device.type == "meta":
            names_of[id(p)].append(name)
            params[id(p)] = p
    missing = []
    for key, names in names_of.items():
        srcs = [n for n in names if n in stored]
        dtype = params[key].dtype
        # trainable as the model built it asked (embeddings, norms, lm_head: as transformers'
        # load + convert leaves them; before, every parameter came back frozen and backward
        # failed with torch's bare "element 0 of tensors does not require grad")
        grad = params[key].requires_grad
        if not srcs:  # MoE experts stored one by one, a merged member kept unconverted
            # (fp8tower's format), or missing
            member = _load_experts(model, ck, names[0], params[key].shape, dtype, device,
                                   stored)
            if member is None:
                member = _load_member(ck, names[0], dtype, device)
            if member is None:
                missing.extend(names)
                continue
            member = nn.Parameter(member, requires_grad=grad)
            for name in names:
                _set_tensor(model, name, member)
            continue
        value = nn.Parameter(_load_param(ck, srcs[0], dtype, device), requires_grad=grad)
        # a tied name stored with other values keeps them, as transformers' tie_weights does
        # (before, the first stored name's values served both)
        own = {}
        for name in srcs[1:]:
            other = _load_param(ck, name, dtype, device)
            if not torch.equal(other, value):
                own[name] = nn.Parameter(other, requires_grad=grad)
        if own:
            warnings.warn(f"{', '.join(own)}: tied to {srcs[0]} by the model's config, but the "
                          "checkpoint stores other values: each keeps its own, untied",
                          stacklevel=2)
        for name in names:
            _set_tensor(model, name, own.get(name, value))
    _load_buffers(model, ck, stored, device)
    tied = _tied_keys(model)
    for name in list(missing):
        # transformers 5: {target: source} (e.g. lm_head.weight -> embed_tokens.weight)
        src = tied.get(name) if isinstance(tied, dict) else None
        if src is not None and src in dict(model.named_parameters()):
            _set_tensor(model, name, model.get_parameter(src))
            missing.remove(name)
    unused = _unused_tensors(model, ck)
    if missing:
        # with the tensors that went unread, where the model's names usually are (2026-12-06
        # audit: Pythia's embed_out for lm_head was only named in a warning after the raise)
        unread = (f"; {len(unused)} stored tensor(s) went unread: {', '.join(unused[:5])}"
                  f"{' ...' if len(unused) > 5 else ''} (pass key_mapping= if they are these)"
                  if unused else "")
        raise ConvertError(f"{len(missing)} parameter(s) of the model are not in the checkpoint "
                           f"{path}: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
                           + unread + ck.moe_experts_note())
    if unused:  # e.g. a misspelt norm: the model kept its init values, silently
        warnings.warn(f"{path}: {len(unused)} checkpoint tensor(s) not used by the model "
                      f"({', '.join(unused[:3])}{', ...' if len(unused) > 3 else ''})",
                      stacklevel=2)
    model.to(device)  # the buffers (computed on the CPU); Fp8Linear keeps its dtypes
    model.eval()
    # as transformers' from_pretrained: the config names the folder, and the generation
    # defaults (eos ids, sampling, max_new_tokens) come from its generation_config.json
    model.config.name_or_path = str(path)
    _load_generation_config(model, Path(path).expanduser())
    return model


def _load_generation_config(model: nn.Module, folder: Path) -> None:
    """``model.generation_config`` from the checkpoint, as transformers 5's from_pretrained
    sets it (``GenerationMixin.adjust_generation_fn``): its generation_config.json; without
    one, or with one that does not load (an OSError: not valid JSON), one made from
    config.json (legacy generation keys in it included). Before, the model kept the one its
    init made from the config alone: the file's eos ids, sampling defaults and max_new_tokens
    were lost and generate() ran past the end-of-turn token."""
    can_generate = getattr(model, "can_generate", None)
    if can_generate is None or not can_generate():
        return
    from .requires import transformers as _transformers

    generation_config = _transformers().GenerationConfig
    if (folder / "generation_config.json").is_file():
        try:
            model.generation_config = generation_config.from_pretrained(folder)
            return
        except OSError as e:  # transformers logs it (info) and falls back to config.json
            logger.warning("%s: generation_config.json not loaded (%s); using a generation "
                           "config made from config.json, as transformers does", folder, e)
    model.generation_config = generation_config.from_pretrained(
        folder, config_file_name="config.json", _from_model_config=True)


# ----------------------------------------------------------------------------- describe


def merge_groups_of(names: Iterable[str], model_type: str | None,
                    config=None) -> list[dict]:
    """The family's sibling groups among module names (no model needed): one record per
    parent holding every member: ``{"parent", "merged", "members", "skip"}`` (member fqns;
    ``skip``: why the model of ``config`` does not merge it, or None)."""
    present = set(names)
    # MoE experts' projections are no merge groups: fp8tower converts no experts (MOE_EXPERT)
    parents = sorted({n.rpartition(".")[0] for n in present
                      if not MOE_EXPERT.search(n)})
    out = []
    for parent in parents:
        for g in GROUPS.get(model_type, ()):
            members = [f"{parent}.{m}" if parent else m for m in g.members]
            if all(m in present for m in members):
                out.append({"parent": parent, "merged": g.merged_name, "members": members,
                            "skip": g.skip_reason(config)})
    return out


def _exact_merge_reason(ck, members: list[str], scheme: Scheme) -> str | None:
    """Why an exact merge of these quantized members would fail (merge.py's rules), from
    the headers and the scales (weight and static input scales; no weight is read)."""
    from ..formats import BLOCK, check_act_scale_range, check_scale_values

    specs = [ck.linear_spec(m) for m in members]
    if scheme is Scheme.BLOCK128:
        bad = [f"{m.rpartition('.')[2]}: N={s.n}" for m, s in zip(members[:-1], specs[:-1])
               if s.n % BLOCK]
        if bad:
            return (f"block128: {', '.join(bad)} not a multiple of {BLOCK} (a block row "
                    "would straddle two members)")
    # scale values loading would refuse (formats.check_scale_values): not mergeable, and not
    # loadable; said here, where "requant_max merges with their max" was said of NaN input
    # scales and a negative weight scale passed (2026-12-05 audit)
    for m, s in zip(members, specs):
        for name in (s.scale, s.input_scale):
            if name is None:
                continue
            t = ck.load_tensor(name).float()
            try:
                check_scale_values(t, name)
                if name == s.input_scale:
                    check_act_scale_range(float(t.reshape(-1)[0]), name)
            except ValueError as e:
                return f"{m.rpartition('.')[2]}: {e} (loading refuses it)"
    static = [s.input_scale is not None for s in specs]
    if any(static) and not all(static):
        return "members mix static and dynamic input scales"
    if all(static):
        values = [float(ck.load_tensor(s.input_scale).float().reshape(-1)[0]) for s in specs]
        if len(set(values)) > 1:
            listed = ", ".join(f"{m.rpartition('.')[2]}={v:.6g}" for m, v in zip(members, values))
            return f"static input scales differ ({listed}); requant_max merges with their max"
    return None


def describe(path, *, scheme: Scheme | str | None = None) -> dict:
    """What a checkpoint (a path or an opened one) holds, in its stored names: format, scheme
    per module, ignored modules, bytes (the checkpoint's own ``describe()``), and the merge
    groups ``convert`` would form, each ``"merge"`` (all members FP8, one scheme), ``"keep"``
    with the reason, or ``"stored merged"`` (an fp8tower checkpoint holding it as one tensor).
    The reasons are those of an exact merge (fp8tower.nn.merged), checked from the headers and
    the scales alone (no weight is read): members not all quantized, mixed schemes, block128
    members not 128-aligned, a scale loading refuses (not finite, not > 0, an input scale
    out of range), static input scales that differ."""
    if hasattr(path, "load_linear"):
        ck = getattr(path, "stored", path)
    else:
        from ..checkpoint import open_checkpoint

        ck = open_checkpoint(Path(path), scheme=scheme)
    info = dict(ck.describe())
    if ck.format == "unquantized":
        # what convert / write_merged quantize: default_filter keeps the rest in bf16, and
        # convert the router-shaped linears (out_features the expert count, beside experts)
        counts = expert_counts(ck.config)
        holders = {n.split(".experts.")[0] for n in ck.tensor_names() if ".experts." in n}
        fp32 = _class_keep_in_fp32(ck.config)
        kept = sorted(f for f in info["schemes"] if not default_filter(None, f) or (
            counts and router_shaped(f, ck.linear_spec(f).n, counts, holders.__contains__))
            or (fp32 is not None and fp32.search(f"{f}.weight") is not None))
        info["schemes"] = {f: s for f, s in info["schemes"].items() if f not in set(kept)}
        info["scheme_counts"] = dict(collections.Counter(info["schemes"].values()))
        info["kept_high_precision"] = kept
    mt = config_model_type(ck.config)
    stored_merged = ck.stored_merged() if hasattr(ck, "stored_merged") else {}
    weights = {n[: -len(".weight")] for n in ck.tensor_names() if n.endswith(".weight")}
    groups = merge_groups_of(weights | set(ck.linear_names()), mt, ck.config)
    merged_members = {tuple(g["members"]): name for name, g in stored_merged.items()}
    for g in groups:
        schemes = [ck.scheme_for(m) for m in g["members"]]
        split = [m.rpartition(".")[2] for m in g["members"] if ck.is_ignored(m)]
        if tuple(g["members"]) in merged_members:
            g["action"], g["reason"] = "stored merged", None
        elif g["skip"]:  # the model's forward rules it out (families.SiblingGroup.skip)
            g["action"], g["reason"] = "keep", g["skip"]
        elif split and len(split) < len(g["members"]):  # convert's records: "split"
            g["action"], g["reason"] = "keep", (
                f"the ignore list covers only {', '.join(split)}: the members load unmerged, "
                "each its own GEMM")
        elif all(s is None for s in schemes):
            g["action"], g["reason"] = "keep", "not quantized in the checkpoint"
        elif any(s is None for s in schemes):  # e.g. compressed-tensors targets: "split" too
            only = [m.rpartition(".")[2] for m, s in zip(g["members"], schemes) if s is not None]
            g["action"], g["reason"] = "keep", (
                f"only {', '.join(only)} quantized in the checkpoint: the members load "
                "unmerged, each its own GEMM")
        elif ck.format == "unquantized" and not all(default_filter(None, m)
                                                    for m in g["members"]):
            # convert's default filter keeps them in high precision when quantizing
            g["action"], g["reason"] = "keep", "kept in high precision (default_filter)"
        elif len(set(schemes)) > 1:
            g["action"], g["reason"] = "keep", f"mixed schemes {sorted(map(str, schemes))}"
        else:
            reason = _exact_merge_reason(ck, g["members"], schemes[0])
            g["action"], g["reason"] = ("keep", reason) if reason else ("merge", None)
        # the group's one scheme; None where its members' differ or one is not quantized
        g["scheme"] = str(schemes[0]) if len(set(schemes)) == 1 and schemes[0] else None
    info["model_type"] = mt
    info["merge_groups"] = groups
    info["merge_counts"] = dict(collections.Counter(
        f"{g['merged']}:{g['action']}" for g in groups))
    return info


