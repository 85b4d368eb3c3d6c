"""A checkpoint seen under the model's names: stored names renamed by ``(regex, replacement)``
rules, as transformers' ``key_mapping`` / checkpoint conversion mapping renames them.

Real Qwen3.5 checkpoints (Qwen3_5ForConditionalGeneration) store the text model under
``model.language_model.*``; the causal LM (Qwen3_5ForCausalLM) names it ``model.*``
(transformers 5.17 conversion_mapping.py: ``"qwen3_5_text": [PrefixChange(
prefix_to_remove="language_model", model_prefix="model")]``). The rules are prefix renames,
so they apply alike to tensor names and module names. Ignore lists keep matching the stored
names (they are written in them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .base import module_of
from .reader import CheckpointError


def rename(name: str, rules: Sequence[tuple[str, str]]) -> str:
    """Apply each rule once, in order (``re.sub(pattern, repl, name, count=1)``)."""
    for pattern, repl in rules:
        name = re.sub(pattern, repl, name, count=1)
    return name


class KeyMappedCheckpoint:
    """The Checkpoint API (linear_names, scheme_for, is_ignored, load_linear, load_tensor,
    tensor_names, ...) in the model's names; everything else (path,
    config, format, describe, nbytes, close) is the stored checkpoint's."""

    def __init__(self, ckpt, rules: Iterable[tuple[str, str]]):
        self.stored = ckpt
        self.rules = tuple(rules)
        self._to_stored: dict[str, str] = {}
        names = set(ckpt.tensor_names()) | set(ckpt.linear_names())
        names |= {module_of(n) for n in names}
        for old in sorted(names):
            new = rename(old, self.rules)
            prev = self._to_stored.setdefault(new, old)
            if prev != old:
                raise CheckpointError(f"{ckpt.path}: key mapping {list(self.rules)} maps both "
                                      f"{prev!r} and {old!r} to {new!r}")

    def __getattr__(self, name):
        return getattr(self.stored, name)

    def stored_name(self, name: str) -> str:
        return self._to_stored.get(name, name)

    def model_name(self, stored: str) -> str:
        return rename(stored, self.rules)

    def tensor_names(self) -> list[str]:
        return sorted(self.model_name(n) for n in self.stored.tensor_names())

    def linear_names(self) -> list[str]:
        return sorted(self.model_name(n) for n in self.stored.linear_names())

    def scheme_for(self, fqn: str):
        return self.stored.scheme_for(self.stored_name(fqn))

    def is_ignored(self, fqn: str) -> bool:
        return self.stored.is_ignored(self.stored_name(fqn))

    def kept_unless_asked(self, fqn: str) -> bool:
        return self.stored.kept_unless_asked(self.stored_name(fqn))

    def load_linear(self, fqn: str, device=None):
        return self.stored.load_linear(self.stored_name(fqn), device=device)

    def load_tensor(self, name: str, device=None, dtype=None):
        return self.stored.load_tensor(self.stored_name(name), device=device, dtype=dtype)

    def __repr__(self) -> str:
        return f"KeyMappedCheckpoint({self.stored!r}, rules={list(self.rules)})"
