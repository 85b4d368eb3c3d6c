"""Per-tensor FP8 checkpoints of ``quant_method: "fp8"`` without block sizes: AutoFP8's
format (the neuralmagic ``*-FP8`` checkpoints of 2024), which vLLM's ``Fp8Config`` reads.

config.json ``quantization_config``: ``{"quant_method": "fp8", "activation_scheme": "static" |
"dynamic"}``, optionally ``ignored_layers`` (exact module names, vLLM's ``is_layer_skipped``;
AutoFP8 writes ``["lm_head"]``) or ``modules_to_not_convert`` (as transformers reads it), and
``fmt`` ``"e4m3"``. Per linear: ``weight`` F8_E4M3 [N, K] and ``weight_scale`` fp32 [] or [1]
(real = fp8 * weight_scale); with ``"static"`` also ``input_scale`` fp32 [] or [1]. Both map
onto per_tensor: static, the stored activation scale; dynamic, one amax / 448 over each call's
x (as vLLM's dynamic per-tensor quantization). KV-cache scales (``k_scale`` / ``v_scale``) are
not read (fp8tower quantizes no cache).

``activation_scheme`` is required, as vLLM requires it: absent, whether the stored
``input_scale`` tensors are meant is a guess. Early AutoFP8 versions named the static scale
``act_scale``: refused with that name, since no reader of today's format reads it.
"""

from __future__ import annotations

from ..formats import Scheme
from .block_fp8 import Fp8MethodCheckpoint
from .reader import CheckpointReader

ACTIVATION_SCHEMES = ("static", "dynamic")


class PerTensorFp8Checkpoint(Fp8MethodCheckpoint):
    format = "fp8_per_tensor"

    def __init__(self, reader: CheckpointReader, qconfig: dict):
        super().__init__(reader, qconfig, reader.path / "config.json")
        act = qconfig.get("activation_scheme")
        if act not in ACTIVATION_SCHEMES:
            raise self._field_err("activation_scheme", "'static' or 'dynamic' (a per-tensor "
                                  "quant_method 'fp8' checkpoint, no weight_block_size: "
                                  "AutoFP8's format; vLLM requires the field too)", act)
        self.static = act == "static"
        self._read_fp8_method_fields(qconfig)
        old = sorted(n for n in reader.tensors if n.endswith(".act_scale"))
        if old:
            raise self._err(reader.info(old[0]), "an early AutoFP8 name for the static "
                            "activation scale; AutoFP8's later checkpoints and vLLM name it "
                            "'input_scale' (rename the tensors, e.g. with safetensors, to load "
                            "this checkpoint)")
        self._discover_fp8()

    def _scheme_of_stored(self, fqn: str) -> Scheme:
        return Scheme.PER_TENSOR

    def _has_static_input_scale(self, fqn: str) -> bool:
        return self.static
