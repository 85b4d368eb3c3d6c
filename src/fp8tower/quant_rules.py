"""How each checkpoint format's quantization config names modules: its ignore-list rule and
ModelOpt's quant_algo. Shared by the checkpoint loaders (``fp8tower.checkpoint``) and the
tower specs (``fp8tower.models``), so that both agree on what is FP8. Standard library only:
``fp8tower.models`` imports it and stays free of torch (``fp8tower.checkpoint`` imports torch).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase


@functools.lru_cache(maxsize=8192)
def _regex(pattern: str) -> re.Pattern[str]:
    """Compiled once: re's own cache holds 512 patterns, and an ignore list of more (a vision
    tower's blocks, listed one by one) recompiled each for every module (1,000 entries over
    the 27B's linears: 39 s)."""
    return re.compile(pattern)


def match_exact_or_regex(fqn: str, target: str) -> bool:
    """compressed-tensors' rule (as vLLM applies it): equal, or ``re:<pattern>`` with
    ``re.match`` (anchored at the start only)."""
    if target.startswith("re:"):
        return _regex(target[3:]).match(fqn) is not None
    return target == fqn


@dataclass(frozen=True)
class CtMatch:
    """Which compressed-tensors config group quantized a module (``ct_match``).

    ``group``/``target``: compressed-tensors' pick; ``rank`` 0 exact name, 1 ``re:`` regex,
    2 the class ``Linear``. ``tied``: the other groups with a target of the same rank that
    matches (a regex each; (group, target) pairs), which compressed-tensors passes over for
    the alphabetically first. ``vllm_group``/``vllm_target``: vLLM's pick, the first matching
    target in config order, an exact name and a regex alike."""

    group: int
    target: str
    rank: int
    tied: tuple[tuple[int, str], ...]
    vllm_group: int
    vllm_target: str


def _ct_rank(target: str, names: tuple[str, ...]) -> int | None:
    if target.startswith("re:"):
        return 1 if any(_regex(target[3:]).match(n) for n in names) else None
    return 0 if target in names else 2 if target == "Linear" else None


def ct_match(groups: Iterable[Iterable[str]], names: Iterable[str]) -> CtMatch | None:
    """Which compressed-tensors config group quantized a module known by ``names`` (None: no
    group targets it), as compressed-tensors (0.12-0.20, ``apply_quantization_config`` and
    ``utils/match.py`` ``match_targets``) applies a config: each target maps to the last
    group that lists it (a dict filled in config order); the targets are sorted by
    ``("re:" in t, t)``; the module takes the first that names it exactly, else the first
    ``re:`` regex that ``re.match``-es it (so, of several, the alphabetically first target,
    whatever the config order), else the class (``Linear``)."""
    names = tuple(names)
    group_of: dict[str, int] = {}
    for i, targets in enumerate(groups):
        for t in targets:
            group_of[t] = i
    matched = [(rank, t) for t in group_of if (rank := _ct_rank(t, names)) is not None]
    if not matched:
        return None
    # vLLM (compressed_tensors/utils.py find_matched_target): names before the class, each
    # in config (dict) order
    vllm_target = next((t for rank, t in matched if rank < 2), matched[0][1])
    rank, target = min(matched, key=lambda m: (m[0], "re:" in m[1], m[1]))
    tied = tuple(sorted({(group_of[t], t) for r, t in matched
                         if r == rank and group_of[t] != group_of[target]}))
    return CtMatch(group_of[target], target, rank, tied, group_of[vllm_target], vllm_target)


def ct_best_group(groups: Iterable[Iterable[str]], names: Iterable[str]) -> int | None:
    """The index of the compressed-tensors config group that quantized a module known by
    ``names`` (``ct_match``'s ``group``), or None: no group targets it."""
    m = ct_match(groups, names)
    return None if m is None else m.group


def match_modelopt(fqn: str, pattern: str) -> bool:
    """ModelOpt ``exclude_modules`` as vLLM reads them: exact, substring (also after a leading
    ``language_model.``), or an fnmatch wildcard (``model.layers.0*``)."""
    if pattern == fqn or pattern in fqn:
        return True
    if fqn.startswith("language_model.") and pattern in fqn[len("language_model."):]:
        return True
    return fnmatchcase(fqn, pattern)


def match_hf_not_convert(fqn: str, pattern: str) -> bool:
    """transformers' ``modules_to_not_convert`` rule (5.25, quantizers_utils.py
    should_convert_module): the name ends with the pattern, or the pattern, as a regex, matches
    from the start of the name up to a module boundary: "model.layers.1" matches
    "model.layers.1.mlp", not "model.layers.10.mlp"; "mlp.gate" not "mlp.gate_proj"."""
    if fqn.endswith(pattern):
        return True
    return _regex(rf"(?:{pattern})(?:$|(?=\.)|(?<=\.))").match(fqn) is not None


def modelopt_algo(qconfig: dict):
    """quant_algo of a ModelOpt config (config.json's quantization_config or
    hf_quant_config.json), top level or under "quantization"."""
    nested = qconfig.get("quantization")
    return qconfig.get("quant_algo") or (nested.get("quant_algo") if isinstance(nested, dict)
                                         else None)
