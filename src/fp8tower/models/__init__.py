"""Decode-step tower specs from Hugging Face config.json files.

A TowerSpec lists the linear layers one decode step runs, in execution order, with their
shapes (N out, K in), merge groups (siblings reading one input) and whether the checkpoint
stores them in FP8. Pure Python: no torch, no CUDA.

    >>> from fp8tower.models import get_spec
    >>> spec = get_spec("qwen3.5-27b")
    >>> len(spec.gemms()), spec.fp8_bytes()     # the FP8 tower: GDN + attention
    (208, 7214202880)

Supported model_type values: Qwen3.5 / 3.6 hybrids (qwen3_5, qwen3_5_text; qwen3_5_moe and
qwen3_next with their shared experts, routed experts out of scope), Llama-style decoders
(dense: llama, qwen2, qwen3, mistral; MoE, their routed experts out of scope: qwen3_moe,
mixtral, glm4_moe), DeepSeek-V2 / V3 (deepseek_v2, deepseek_v3:
multi-head latent attention, dense MLPs and shared experts; routed experts out of scope) and
DeepSeek-V4 (deepseek_v4: shared-KV attention, shared experts).
See ``spec.py`` for names and inputs, ``quant.py`` for how a quantization config decides
FP8, ``qwen.py`` / ``llama.py`` / ``deepseek.py`` / ``deepseek_v4.py`` for the shapes,
``tp.py`` for one tensor-parallel rank's shards (``get_spec(name, tp=N)``).
"""

from .quant import QuantPolicy, parse_quant_config
from .registry import (
    SUPPORTED_MODEL_TYPES,
    get_spec,
    list_models,
    load_config,
    text_config,
    tower_spec_from_config,
)
from .spec import ALL_PARTS, DEFAULT_PARTS, KINDS, ConfigError, GemmSpec, LinearSpec, TowerSpec
from .tp import TpError

__all__ = [
    "ALL_PARTS",
    "DEFAULT_PARTS",
    "KINDS",
    "SUPPORTED_MODEL_TYPES",
    "ConfigError",
    "GemmSpec",
    "LinearSpec",
    "QuantPolicy",
    "TowerSpec",
    "TpError",
    "get_spec",
    "list_models",
    "load_config",
    "parse_quant_config",
    "text_config",
    "tower_spec_from_config",
]
