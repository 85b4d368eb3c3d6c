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


QWEN35_TEXT = {
    "model_type": "qwen3_5_text",
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"]
    + ["linear_attention"] * 3 + ["full_attention"],
    "linear_num_key_heads": 4,
    "linear_key_head_dim": 32,
    "linear_num_value_heads": 8,
    "linear_value_head_dim": 48,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "attn_output_gate": True,
    "intermediate_size": 1376,
}


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
