"""A bf16/fp16/fp32 checkpoint, quantized at load to the scheme the caller names.

Quantized linears, by name alone (the files do not say which 2-D tensor is a linear): every
2-D floating ``*.weight`` except ``lm_head`` and the embeddings (``is_embedding``). That is
exact for the model types of ``LINEARS_BY_NAME`` (``linears_by_name``). ``lm_head`` is
quantized too where a filter asks for it (``kept_unless_asked``), as ``convert`` does without a
checkpoint. ``from_pretrained`` / ``convert`` quantize only those that are the model's
``nn.Linear`` modules, so e.g. GPT-2's Conv1D weights ([K, N], not linears) are never quantized
there, while ``write_merged`` (no model) refuses other model types. With no scheme, nothing is
quantized (load_tensor still reads everything). per_tensor uses a dynamic activation scale:
there is no calibration to take a static one from.
"""

from __future__ import annotations

from ..formats import Scheme, quantize_weight
from .base import Checkpoint, LinearSpec, LoadedLinear, module_of
from .reader import FLOAT_DTYPES, CheckpointError, CheckpointReader

# Name components of tables that are not linears: GPT-2/GPT-J's wte/wpe, T5's shared, and every
# *embed* (embed_tokens, embeddings, word_embeddings, position_embeddings, GPT-NeoX embed_in,
# pos_embed); lm_head stays in high precision as in every FP8 checkpoint we read, and so does
# GPT-NeoX's embed_out, its lm_head (transformers 5 renames it at load): both quantized when a
# filter asks (before, embed_out counted as an embedding and a filter could not; 2026-12-06).
EMBEDDING_PARTS = ("wte", "wpe", "shared")
KEPT_PARTS = ("lm_head", "embed_out")
# model_types whose every 2-D float *.weight but lm_head and the embeddings is an nn.Linear
# [out, in] (transformers 5.25; test_checkpoint_load.py builds each model and compares); not
# MoE ones (routers, per-expert weights) nor GPT-2 (Conv1D [in, out])
LINEARS_BY_NAME = ("llama", "mistral", "qwen2", "qwen3", "qwen3_5", "qwen3_5_text")


def is_embedding(fqn: str) -> bool:
    return any(p in EMBEDDING_PARTS or ("embed" in p and p not in KEPT_PARTS)
               for p in fqn.split("."))


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
        self.linears_by_name = self.config.get("model_type") in LINEARS_BY_NAME
        self._kept: dict[str, LinearSpec] = {}  # lm_head: quantized only when a filter asks
        if scheme is None:
            return
        for name, t in reader.tensors.items():
            fqn = module_of(name)
            if not name.endswith(".weight") or len(t.shape) != 2 or is_embedding(fqn):
                continue
            kept = self.is_ignored(fqn)
            if t.dtype.startswith("F") and t.dtype not in FLOAT_DTYPES and not kept:
                # e.g. F64: was left out silently, then "opened without a scheme"
                raise CheckpointError(f"{t.where()}: dtype {t.dtype}; scheme={scheme} quantizes "
                                      f"weights of dtype {', '.join(FLOAT_DTYPES)} (convert the "
                                      "checkpoint to one of them first)")
            if t.dtype in FLOAT_DTYPES:
                n, k = t.shape
                (self._kept if kept else self._linears)[fqn] = LinearSpec(fqn, scheme, n, k, None)

    def is_ignored(self, fqn: str) -> bool:
        return is_embedding(fqn) or any(p in KEPT_PARTS for p in fqn.split("."))

    def kept_unless_asked(self, fqn: str) -> bool:
        return fqn in self._kept

    def _spec(self, fqn: str) -> LinearSpec:
        return self._kept.get(fqn) or super()._spec(fqn)

    def describe(self) -> dict:
        return {**super().describe(), "linears_by_name": self.linears_by_name}

    def load_linear(self, fqn: str, device=None) -> LoadedLinear:
        """Read the module's weight (on ``device``) and quantize it there."""
        spec = self._spec(fqn)
        w = self._reader.load(f"{fqn}.weight", device=device)
        try:
            weight = quantize_weight(w, spec.scheme)
        except ValueError as e:
            raise CheckpointError(f"{self._reader.info(fqn + '.weight').where()}: {e}") from None
        return LoadedLinear(weight, self._bias(fqn, device))
