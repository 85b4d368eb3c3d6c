"""How each checkpoint format's quantization config names modules: its ignore-list rule and
ModelOpt's quant_algo. Shared by the checkpoint loaders (``fp8tower.checkpoint``) and the
tower specs (``fp8tower.models``), so that both agree on what is FP8. Standard library only:
``fp8tower.models`` imports it and stays free of torch (``fp8tower.checkpoint`` imports torch).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
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


def ct_best_group(groups: Iterable[Iterable[str]], names: Iterable[str]) -> int | None:
    """Which compressed-tensors config group quantized a module known by ``names``, as
    compressed-tensors applies a config: each target maps to the last group that lists it
    (a dict filled in config order), and the module takes the best-ranked target that
    matches it, 0 an exact name, 1 a ``re:`` regex, 2 the class ``Linear``, the first such
    target in that dict breaking ties. Returns the group's index, or None: no group targets
    it. vLLM ranks an exact name and a regex alike; the two differ only where a regex group
    precedes an exact one for the same module."""
    names = tuple(names)
    group_of: dict[str, int] = {}
    for i, targets in enumerate(groups):
        for t in targets:
            group_of[t] = i
    best: tuple[int, int] | None = None
    for t, i in group_of.items():
        if t.startswith("re:"):
            prio = 1 if any(_regex(t[3:]).match(n) for n in names) else None
        else:
            prio = 0 if t in names else 2 if t == "Linear" else None
        if prio is not None and (best is None or prio < best[0]):
            best = (prio, i)
    return None if best is None else best[1]


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
