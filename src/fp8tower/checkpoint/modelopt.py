"""NVIDIA ModelOpt FP8 checkpoints.

Config (either place; config.json wins when both are present):
- config.json ``quantization_config``: ``{"quant_method": "modelopt", "quant_algo": "FP8",
  "ignore": [...]}``
- hf_quant_config.json: ``{"quantization": {"quant_algo": "FP8", "exclude_modules": [...]}}``

Tensors per linear (vLLM's ModelOptFp8LinearMethod / ModelOptFp8PcPtLinearMethod create these):
- ``FP8``: ``weight`` F8_E4M3 [N, K], ``weight_scale`` and ``input_scale`` fp32 scalars
  (shape [] or [1]) -> per_tensor with a static activation scale.
- ``FP8_PER_CHANNEL_PER_TOKEN``: ``weight_scale`` [N] (or [N, 1]), no input_scale -> channel_token.

``exclude_modules`` / ``ignore`` entries match exactly, as substrings and as fnmatch wildcards
(``model.layers.0*``), as vLLM's ModelOptQuantConfigBase.is_layer_excluded reads them.
"""

from __future__ import annotations

from ..formats import Scheme
from ..quant_rules import modelopt_algo as _algo_of
from .base import Checkpoint, match_modelopt
from .reader import CheckpointError, CheckpointReader

ALGOS = {"FP8": Scheme.PER_TENSOR, "FP8_PER_CHANNEL_PER_TOKEN": Scheme.CHANNEL_TOKEN}


class ModelOptCheckpoint(Checkpoint):
    format = "modelopt"

    def __init__(self, reader: CheckpointReader, qconfig: dict | None):
        if qconfig is not None and not _algo_of(qconfig) and reader.hf_quant_config is not None:
            qconfig = None  # config.json names only the method: hf_quant_config.json the rest
        if qconfig is not None:
            file, nested = reader.path / "config.json", qconfig.get("quantization")
            field = "quantization_config" + (".quantization" if isinstance(nested, dict) else "")
        else:
            file, nested = reader.path / "hf_quant_config.json", None
            qconfig = reader.hf_quant_config or {}
            field = "quantization"
            nested = qconfig.get("quantization")
            if not isinstance(nested, dict):
                raise CheckpointError(f"{file}: field 'quantization' must be an object with "
                                      f"'quant_algo', got {nested!r}")
        src = nested if isinstance(nested, dict) else qconfig
        super().__init__(reader, qconfig, file)
        self.config_field = field
        algo = str(src.get("quant_algo") or "").upper()
        if algo not in ALGOS:
            raise CheckpointError(f"{file}: {field}.quant_algo is {src.get('quant_algo')!r}; "
                                  f"fp8tower reads ModelOpt {', '.join(ALGOS)}")
        self.quant_algo = algo
        self._scheme = ALGOS[algo]
        key = "exclude_modules" if "exclude_modules" in src else "ignore"
        self.ignore = self._string_list(key, src.get(key))
        self._discover_fp8()

    def is_ignored(self, fqn: str) -> bool:
        return any(match_modelopt(fqn, p) for p in self.ignore)

    def _scheme_of_stored(self, fqn: str) -> Scheme:
        return self._scheme

    def _has_static_input_scale(self, fqn: str) -> bool:
        return self._scheme is Scheme.PER_TENSOR
