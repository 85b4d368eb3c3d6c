"""Helpers shared by the property-based fuzz tests of the readers (trace files, tuning
caches, model configs): one settings profile, the hostile values, a nested-field setter."""

from __future__ import annotations

import copy
import math
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz_settings(default_examples: int):
    """FP8TOWER_FUZZ_EXAMPLES=2000 for a longer hunt; the default keeps each test a few
    seconds."""
    return settings(
        max_examples=int(os.environ.get("FP8TOWER_FUZZ_EXAMPLES", str(default_examples))),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# Values a hostile or careless writer puts where a number (or a small object) belongs.
HOSTILE_VALUES = [math.nan, math.inf, -math.inf, -1, 0, -0.5, True, None, "12", [], {},
                  2**63, 2**70, 1e300]


def hostile(*extra):
    """HOSTILE_VALUES plus the reader's own suspects, as a strategy."""
    return st.sampled_from(HOSTILE_VALUES + list(extra))


def set_path(doc, keys, value) -> None:
    """``doc[k0][k1]...[kn] = value`` where that path exists (a dict key, or a list index
    of a non-empty list); otherwise nothing. The value is copied: sampled values are shared
    between examples."""
    for key in keys[:-1]:
        try:
            doc = doc[key]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(doc, dict) or (isinstance(doc, list) and doc and isinstance(keys[-1], int)):
        doc[keys[-1]] = copy.deepcopy(value)
