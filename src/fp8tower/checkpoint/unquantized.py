"""A bf16/fp16/fp32 checkpoint, quantized at load to the scheme the caller names.

Quantized linears: every 2-D floating ``*.weight`` except the embeddings and ``lm_head``
(``DEFAULT_IGNORE``: they stay as they are unless the caller converts them by name). With no
scheme, nothing is quantized (load_tensor still reads everything). per_tensor uses a dynamic
activation scale: there is no calibration to take a static one from.
"""

from __future__ import annotations

from ..formats import Scheme, quantize_weight
from .base import Checkpoint, LinearSpec, LoadedLinear, match_exact_or_regex, module_of
from .reader import FLOAT_DTYPES, CheckpointError, CheckpointReader

DEFAULT_IGNORE = ("lm_head", r"re:.*embed")


class UnquantizedCheckpoint(Checkpoint):
    format = "unquantized"

    def __init__(self, reader: CheckpointReader, scheme: Scheme | None):
        super().__init__(reader, {}, reader.path / "config.json")
        fp8 = [t for t in reader.tensors.values() if t.dtype.startswith("F8_")]
        if fp8:
            raise CheckpointError(
                f"{fp8[0].where()}: dtype {fp8[0].dtype}, but {self.quant_config_file} has no "
                "quantization_config (and there is no hf_quant_config.json): expected a "
                "bf16/fp16/fp32 checkpoint or an FP8 format's config")
        self.scheme = scheme
        self.ignore: list[str] = list(DEFAULT_IGNORE)
        if scheme is None:
            return
        for name, t in reader.tensors.items():
            fqn = module_of(name)
            if (name.endswith(".weight") and len(t.shape) == 2 and t.dtype in FLOAT_DTYPES
                    and not self.is_ignored(fqn)):
                n, k = t.shape
                self._linears[fqn] = LinearSpec(fqn, scheme, n, k, None)

    def is_ignored(self, fqn: str) -> bool:
        return any(match_exact_or_regex(fqn, p) for p in self.ignore)

    def load_linear(self, fqn: str, device=None) -> LoadedLinear:
        """Read the module's weight (on ``device``) and quantize it there."""
        spec = self._spec(fqn)
        w = self._reader.load(f"{fqn}.weight", device=device)
        try:
            weight = quantize_weight(w, spec.scheme)
        except ValueError as e:
            raise CheckpointError(f"{self._reader.info(fqn + '.weight').where()}: {e}") from None
        return LoadedLinear(weight, self._bias(fqn, device))
