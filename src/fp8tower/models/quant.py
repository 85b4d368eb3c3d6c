"""Which linears a checkpoint's quantization config makes FP8, and the scheme it implies.

A linear is matched by its checkpoint module names: both ``model.<name>`` and
``model.language_model.<name>`` (``<name>`` = ``LinearSpec.name``, e.g.
``layers.3.linear_attn.in_proj_a``), because Qwen3.5's multimodal checkpoints use the second
spelling and text-only ones the first; the two always denote the same module.

Ignore lists are matched by the rule of the format that reads them, the checkpoint loaders'
own functions (``fp8tower/quant_rules.py``, shared with ``fp8tower.checkpoint``), so that a
spec and its loader agree on what is FP8:

- compressed-tensors (``quant_method: compressed-tensors``; ``config_groups`` + ``ignore``):
  as compressed-tensors matches, an entry ``re:<regex>`` matches when ``re.match`` does (anchored
  at the start only), any other entry only the exact module name; the target ``Linear`` matches
  every linear. A linear is FP8 when the best-matching group (exact name, then regex, then
  class) has 8-bit float weights and no ``ignore`` entry matches it.
- ``modules_to_not_convert`` (HF FineGrainedFP8 ``fp8``, ``fbgemm_fp8``): transformers 5.25's
  ``should_convert_module``: a regex matching from the start of the name up to a module
  boundary (``model.layers.1`` excludes layer 1, not layer 10), or the end of the name
  (``in_proj_a`` excludes every layer's in_proj_a). An entry that is no regex is an error.
- ``ignored_layers`` (vLLM ``fp8``): exact module names.
- ModelOpt (``exclude_modules``, else ``ignore``; top level or under ``quantization``): as vLLM
  reads them, exact, substring or fnmatch wildcard of the full name (``model.layers.*.mlp``
  names no projection; ``model.layers.*.mlp*`` does). Its ``quant_algo`` may sit in
  hf_quant_config.json beside a config.json that names only the method (``get_spec`` reads it).
- other FP8 methods: each key by the rule of the format it comes from (``ignore``: as
  compressed-tensors).
- a method that is not FP8 (awq, gptq, bitsandbytes, NVFP4, ...): no linear is FP8.

Without a quantization config the builders' defaults apply (everything FP8 except the GDN's
small in_proj_a / in_proj_b / in_proj_ba, which FP8 checkpoints keep in BF16).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..quant_rules import (
    ct_best_group,
    match_exact_or_regex,
    match_hf_not_convert,
    match_modelopt,
    modelopt_algo,
)
from .spec import ConfigError

NAME_PREFIXES = ("model.", "model.language_model.")
FIELD = "quantization_config"
Rule = Callable[[str, str], bool]  # (module name, entry) -> whether the entry names it


def _exact(fqn: str, entry: str) -> bool:
    return fqn == entry


# Each ignore key by the rule of the format it comes from (the loaders': checkpoint/
# block_fp8.py, modelopt.py, compressed_tensors.py, native.py); "re" says which entries are
# regexes, checked here: "all" (transformers), "re:" (compressed-tensors' prefix) or None.
KEY_RULES: dict[str, tuple[Rule, str | None]] = {
    "modules_to_not_convert": (match_hf_not_convert, "all"),
    "ignored_layers": (_exact, None),
    "exclude_modules": (match_modelopt, None),
    "ignore": (match_exact_or_regex, "re:"),
}
# The keys a method reads (as its loader / transformers does); other FP8 methods: every key
METHOD_KEYS = {"fp8": ("modules_to_not_convert", "ignored_layers"),
               "fbgemm_fp8": ("modules_to_not_convert",)}
CtGroups = tuple[tuple[bool, tuple[str, ...]], ...]  # (weights are FP8, targets) per group


def module_names(name: str) -> tuple[str, ...]:
    """The checkpoint spellings of a linear's module name."""
    return tuple(p + name for p in NAME_PREFIXES)


def _compile(entry: str, field_name: str, context: str, regex: str = "re:") -> None:
    """Check a regex entry: after its ``re:`` prefix, or (``regex="all"``) the whole entry."""
    try:
        re.compile(entry[3:] if regex == "re:" else entry)
    except re.error as e:
        after = "after 're:' " if regex == "re:" else "(transformers matches entries as regexes) "
        raise ConfigError(field_name, entry, f"a valid regular expression {after}({e})",
                          context=context) from None


def _str_list(qc: dict[str, Any], key: str, context: str, where: str = FIELD,
              regex: str | None = "re:") -> list[str]:
    """``qc[key]`` as a list of strings, its regexes compiled to check them (``regex``: "re:"
    entries, "all" of them, or None); ``where`` is the dotted field ``qc`` sits at, for
    errors."""
    value = qc.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.{key}", value, "a list of module names / patterns",
                          context=context)
    for v in value:
        if regex == "all" or (regex == "re:" and v.startswith("re:")):
            _compile(v, f"{where}.{key}", context, regex)
    return value


def _subpaths(name: str) -> list[str]:
    """The name, its ancestors and its dotted suffixes: what a glob entry may name."""
    parts = name.split(".")
    heads = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    tails = [".".join(parts[i:]) for i in range(1, len(parts))]
    return heads + tails


@dataclass(frozen=True)
class Ignore:
    """An ignore list: per config key, the format's rule and the entries."""

    lists: tuple[tuple[Rule, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, qc: dict[str, Any], keys: Iterable[str], context: str, where: str = FIELD,
           rule: Rule | None = None) -> Ignore:
        """The entries of ``keys`` in ``qc``, each key by its KEY_RULES rule (or ``rule``)."""
        lists = []
        for key in keys:
            key_rule, regex = KEY_RULES[key]
            entries = _str_list(qc, key, context, where, regex if rule is None else None)
            if entries:
                lists.append((rule or key_rule, tuple(entries)))
        return cls(tuple(lists))

    def matches(self, names: Iterable[str]) -> bool:
        return any(rule(name, e) for rule, entries in self.lists for name in names
                   for e in entries)


@dataclass(frozen=True)
class Matcher:
    """ModelOpt MIXED_PRECISION's ``quantized_layers`` (no loader reads it): exact names (in a
    set), globs and ``re:`` entries, against a name, its ancestors and its dotted suffixes."""

    exact: frozenset[str] = frozenset()
    globs: tuple[re.Pattern[str], ...] = ()  # fullmatch against a name or a subpath
    regexes: tuple[re.Pattern[str], ...] = ()  # "re:" entries: re.match against a name

    @classmethod
    def of(cls, entries: Iterable[str]) -> Matcher:
        entries = list(entries)
        plain = [e for e in entries if not e.startswith("re:")]
        wild = [e for e in plain if any(c in e for c in "*?[")]
        return cls(
            frozenset(e for e in plain if e not in wild),
            tuple(re.compile(fnmatch.translate(e)) for e in wild),
            tuple(re.compile(e[3:]) for e in entries if e.startswith("re:")),
        )

    def matches(self, names: Iterable[str]) -> bool:
        for name in names:
            if any(r.match(name) for r in self.regexes):
                return True
            subs = _subpaths(name)
            if any(s in self.exact for s in subs):
                return True
            if any(g.fullmatch(s) for g in self.globs for s in subs):
                return True
        return False


@dataclass(frozen=True)
class QuantPolicy:
    """A parsed quantization config: ``is_fp8(name, default)`` decides each linear."""

    method: str | None = None  # None: no quantization config, builder defaults apply
    scheme_hint: str | None = None
    notes: tuple[str, ...] = ()
    # per_tensor hints only: whether the activation scale is stored (static; False: an amax
    # per call; None: not said, or groups that differ), and whether the weight scale is an
    # (N,) vector (compressed-tensors' channel weights with tensor activations). The keys
    # the loaded layers look up (``fp8tower tune --model`` tunes those).
    static_act: bool | None = None
    channel_scale: bool = False
    fp8_all: bool = True  # False: the method is not FP8, so nothing is
    exclude: Ignore = Ignore()  # the ignore list, by its format's rule
    fp8_layers: Matcher | None = None  # ModelOpt MIXED_PRECISION: the layers it made FP8
    ct_groups: CtGroups = ()

    def is_fp8(self, name: str, default: bool) -> bool:
        if self.method is None:
            return default
        names = module_names(name)
        if self.method == "compressed-tensors":
            if self.exclude.matches(names):
                return False
            i = ct_best_group((targets for _, targets in self.ct_groups), names)
            return i is not None and self.ct_groups[i][0]
        if not self.fp8_all or self.exclude.matches(names):
            return False
        return self.fp8_layers is None or self.fp8_layers.matches(names)


def _fp8_block_hint(qc: dict[str, Any], context: str) -> tuple[str | None, list[str]]:
    block = qc.get("weight_block_size")
    if block is None:
        return "per_tensor", []
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ConfigError(f"{FIELD}.weight_block_size", block, "a list of two positive integers",
                          context=context)
    if block == [128, 128]:
        return "block128", []
    return None, [f"weight_block_size {block} has no scheme here (only [128, 128])"]


def _ct_groups(qc: dict[str, Any], context: str
               ) -> tuple[CtGroups, str | None, list[str], set[tuple[bool, bool]]]:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ConfigError(f"{FIELD}.config_groups", groups, "an object of quantization groups",
                          context=context)
    parsed, hints, notes, per_tensor = [], set(), [], set()
    for gname, group in groups.items():
        where = f"{FIELD}.config_groups.{gname}"
        if not isinstance(group, dict):
            raise ConfigError(where, group, "an object with targets and weights", context=context)
        for key in ("weights", "input_activations"):  # None: not quantized
            if group.get(key) is not None and not isinstance(group[key], dict):
                raise ConfigError(f"{where}.{key}", group[key], "an object (num_bits, type, "
                                  "strategy, ...) or null", context=context)
        weights = group.get("weights") or {}
        targets = _str_list(group, "targets", context, where)
        if not targets:  # as the loader (checkpoint/compressed_tensors.py) refuses it
            raise ConfigError(f"{where}.targets", group.get("targets"), "a non-empty list of "
                              "module names / 're:' regexes", context=context)
        fp8 = weights.get("type") == "float" and weights.get("num_bits") == 8
        parsed.append((fp8, tuple(targets)))
        if not fp8:
            continue
        strategy, acts = weights.get("strategy"), group.get("input_activations")
        if acts is None:
            notes.append(f"{gname}: FP8 weights without activation quantization (weight-only)")
            hints.add(None)
        elif strategy in ("tensor", "channel") and (
                acts.get("strategy") == "tensor"
                or (acts.get("strategy") == "token" and acts.get("dynamic") is True)):
            # the activations' strategy decides, as the loader maps them (channel weights +
            # tensor activations: per_tensor with an (N,) scale; tensor + token: channel_token)
            hints.add("per_tensor" if acts["strategy"] == "tensor" else "channel_token")
            if acts["strategy"] == "tensor":  # (static, channel weight scale), as the loader
                per_tensor.add((acts.get("dynamic", False) is False, strategy == "channel"))
        elif strategy in ("tensor", "channel"):
            hints.add(None)
            notes.append(f"{gname}: {strategy} weights with {acts.get('strategy')!r} "
                         "activations have no scheme here")
        elif strategy == "block" and weights.get("block_structure") == [128, 128]:
            hints.add("block128")
        else:
            hints.add(None)
            notes.append(f"{gname}: weight strategy {strategy!r} has no scheme here")
    if len(hints) > 1:
        notes.append(f"FP8 groups disagree on the scheme ({sorted(map(str, hints))})")
    hint = hints.pop() if len(hints) == 1 else None
    return tuple(parsed), hint, notes, per_tensor


_MODELOPT_HINTS = {"FP8": "per_tensor", "FP8_PER_CHANNEL_PER_TOKEN": "channel_token"}


def _modelopt(qc: dict[str, Any], context: str) -> QuantPolicy:
    """A ModelOpt config, read as checkpoint/modelopt.py reads it: quant_algo and the exclude
    list at the top level or under "quantization"; ``exclude_modules``, else ``ignore``."""
    method, algo = "modelopt", modelopt_algo(qc)
    if not algo:
        raise ConfigError(f"{FIELD}.quant_algo", None, "a ModelOpt quant_algo (e.g. 'FP8'), "
                          "here or under 'quantization'; a config.json that names only the "
                          "method keeps it in hf_quant_config.json beside it, which get_spec "
                          "reads (or pass it as quant_config)", context=context)
    nested = qc.get("quantization")
    src, where = (nested, f"{FIELD}.quantization") if isinstance(nested, dict) else (qc, FIELD)
    key = "exclude_modules" if "exclude_modules" in src else "ignore"
    exclude = Ignore.of(src, (key,), context, where, rule=match_modelopt)
    algo = str(algo).upper()
    if algo == "MIXED_PRECISION":
        layers = src.get("quantized_layers")
        if not isinstance(layers, dict):
            raise ConfigError(f"{where}.quantized_layers", layers,
                              "an object of module name -> {quant_algo}", context=context)
        fp8 = tuple(k for k, v in layers.items()
                    if isinstance(v, dict) and str(v.get("quant_algo", "")).upper() == "FP8")
        return QuantPolicy(method, "per_tensor" if fp8 else None, (), exclude=exclude,
                           fp8_layers=Matcher.of(fp8), static_act=True if fp8 else None)
    if algo in _MODELOPT_HINTS:  # FP8: static input_scale tensors (checkpoint/modelopt.py)
        hint = _MODELOPT_HINTS[algo]
        return QuantPolicy(method, hint, (), exclude=exclude,
                           static_act=True if hint == "per_tensor" else None)
    if "FP8" in algo:
        return QuantPolicy(method, None, (f"ModelOpt quant_algo {algo} has no scheme here",),
                           exclude=exclude)
    return QuantPolicy(method, None, (f"ModelOpt quant_algo {algo!r} is not FP8",),
                       fp8_all=False)


def parse_quant_config(qc: dict[str, Any] | None, *, context: str = "") -> QuantPolicy:
    """Parse a quantization_config (or a ModelOpt hf_quant_config.json) into a QuantPolicy."""
    if qc is None:
        return QuantPolicy()
    if not isinstance(qc, dict):
        raise ConfigError(FIELD, qc, "an object", context=context)
    if "quant_method" not in qc and isinstance(qc.get("quantization"), dict):
        qc = {"quant_method": "modelopt", **qc["quantization"]}  # hf_quant_config.json
    method = qc.get("quant_method")
    if method is None and "quant_algo" in qc:
        method = "modelopt"
    if method is None and "config_groups" in qc:
        method = "compressed-tensors"
    if not isinstance(method, str):
        raise ConfigError(f"{FIELD}.quant_method", method,
                          "a string such as 'fp8', 'compressed-tensors' or 'modelopt'",
                          context=context)
    method = method.lower()
    if method == "modelopt":
        return _modelopt(qc, context)
    if method == "compressed-tensors":
        exclude = Ignore.of(qc, ("ignore",), context)
        groups, hint, notes, per_tensor = _ct_groups(qc, context)
        static = {st for st, _ in per_tensor}
        channel = {ch for _, ch in per_tensor}
        if hint == "per_tensor" and len(per_tensor) > 1:
            notes.append("per_tensor groups differ in " + " and ".join(
                w for w, v in (("static / dynamic activations", static),
                               ("tensor / channel weight scales", channel)) if len(v) > 1))
        return QuantPolicy(method, hint, tuple(notes), ct_groups=groups, exclude=exclude,
                           static_act=static.pop() if hint == "per_tensor" and len(static) == 1
                           else None,
                           channel_scale=hint == "per_tensor" and channel == {True})
    if "fp8" not in method:
        note = f"quant_method {method!r} is not FP8: no linear is FP8"
        return QuantPolicy(method, None, (note,), fp8_all=False)
    exclude = Ignore.of(qc, METHOD_KEYS.get(method, KEY_RULES), context)
    if method == "fp8":
        hint, notes = _fp8_block_hint(qc, context)
        act = qc.get("activation_scheme")  # per-tensor (AutoFP8): checkpoint/per_tensor_fp8.py
        static = {"static": True, "dynamic": False}.get(act) if hint == "per_tensor" else None
        return QuantPolicy(method, hint, tuple(notes), exclude=exclude, static_act=static)
    if method == "fbgemm_fp8":
        return QuantPolicy(method, "channel_token", (), exclude=exclude)
    return QuantPolicy(method, None, (f"quant_method {method!r}: FP8 assumed, scheme unknown",),
                       exclude=exclude)
