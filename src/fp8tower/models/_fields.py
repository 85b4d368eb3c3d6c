"""Typed reads of config.json fields that fail with a ConfigError naming the field."""

from __future__ import annotations

from typing import Any

from .spec import ConfigError


class Fields:
    """A config dict plus the context (model name) that error messages carry."""

    def __init__(self, cfg: dict[str, Any], context: str):
        self.cfg, self.context = cfg, context

    def error(self, field: str, value: object, expected: str) -> ConfigError:
        return ConfigError(field, value, expected, context=self.context)

    def has(self, field: str) -> bool:
        return self.cfg.get(field) is not None

    def pos_int(self, field: str, default: int | None = None) -> int:
        """A positive int; ``default`` is used when the field is absent or null."""
        value = self.cfg.get(field)
        if value is None:
            if default is None:
                raise self.error(field, None, "a positive integer")
            return default
        # bool is an int subclass; JSON true is never a size. Sizes become tensor dims: int64.
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 63:
            raise self.error(field, value, "a positive integer (int64)")
        return value

    def count(self, field: str, default: int, null: int | None = None) -> int:
        """An integer >= 0 (a layer or expert count that may be 0); absent: ``default``;
        null: ``null`` where given (vLLM builds no shared expert for n_shared_experts null),
        else refused (transformers and vLLM fail on first_k_dense_replace null)."""
        if field not in self.cfg:
            return default
        value = self.cfg[field]
        if value is None and null is not None:
            return null
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(field, value, "an integer >= 0")
        return value

    def flag(self, field: str, default: bool) -> bool:
        value = self.cfg.get(field)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(field, value, "true or false")
        return value

    def multiple(self, field: str, value: int, of_field: str, of: int) -> None:
        """Check ``value`` (of ``field``) is a multiple of ``of`` (the value of ``of_field``)."""
        if value % of:
            raise self.error(field, value, f"a multiple of {of_field} ({of})")
