"""Shared small configs for the models tests (and src/ on sys.path when not installed)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

try:
    import fp8tower  # noqa: F401
except ImportError:  # running from a plain checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


from model_configs import QWEN35_TEXT


@pytest.fixture
def qwen35_text():
    """A small flat Qwen3.5 text config; tests mutate their own copy."""
    return copy.deepcopy(QWEN35_TEXT)


@pytest.fixture
def llama_cfg():
    return {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_hidden_layers": 3,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 2816,
    }
