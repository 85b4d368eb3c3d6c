"""Block-FP8 checkpoints as Qwen3-*-FP8 and DeepSeek-V3 ship them.

config.json ``quantization_config``: ``{"quant_method": "fp8", "fmt": "e4m3",
"activation_scheme": "dynamic", "weight_block_size": [128, 128]}``, optionally
``modules_to_not_convert`` (transformers' FineGrainedFP8Config) or ``ignored_layers`` (vLLM's
Fp8Config). Per linear: ``weight`` F8_E4M3 [N, K] and ``weight_scale_inv`` fp32
[ceil(N/128), ceil(K/128)], which MULTIPLIES the FP8 weight despite its name (real = fp8 *
weight_scale_inv: DeepSeek-V3's weight_dequant and transformers' FP8 dequantization do that),
so it is our block128 decode scale as it is. Activations: dynamic 1x128 groups -> block128.

Ignore lists: ``modules_to_not_convert`` entries match as transformers 5.25's
``should_convert_module`` reads them: a regex matching from the start of the name up to a
module boundary (so a plain prefix of whole components too), or the end of the name.
``ignored_layers`` entries match exact module names, as vLLM's ``is_layer_skipped`` reads them
(transformers 5.25 reads ``ignored_layers`` only as an alias when ``modules_to_not_convert``
is absent, with its own rule).
"""

from __future__ import annotations

import re

from ..formats import Scheme
from .base import Checkpoint, match_hf_not_convert
from .reader import CheckpointReader


class BlockFp8Checkpoint(Checkpoint):
    format = "block_fp8"
    scale_suffix = "weight_scale_inv"

    def __init__(self, reader: CheckpointReader, qconfig: dict):
        super().__init__(reader, qconfig, reader.path / "config.json")
        bs = qconfig.get("weight_block_size")
        if bs is None:
            raise self._field_err("weight_block_size", "[128, 128] (per-tensor quant_method "
                                  "'fp8' checkpoints are not read by fp8tower)", bs)
        if (not isinstance(bs, list) or len(bs) != 2
                or not all(type(b) is int and b > 0 for b in bs)):
            raise self._field_err("weight_block_size", "a list of two positive integers "
                                  "([128, 128])", bs)
        if bs != [128, 128]:
            raise self._field_err("weight_block_size", "[128, 128]", bs)
        if qconfig.get("activation_scheme", "dynamic") != "dynamic":
            raise self._field_err("activation_scheme", "'dynamic' (block FP8 quantizes "
                                  "activations per 1x128 group at run time)",
                                  qconfig.get("activation_scheme"))
        if qconfig.get("fmt", "e4m3") != "e4m3":
            raise self._field_err("fmt", "'e4m3'", qconfig.get("fmt"))
        field = "modules_to_not_convert"
        self.ignore = self._string_list(field, qconfig.get(field))
        for i, p in enumerate(self.ignore):
            try:
                re.compile(p)
            except re.error as e:
                raise self._field_err(f"{field}[{i}]", f"a regex, as transformers matches it "
                                      f"({e})", p) from None
        self.ignored_layers = set(self._string_list("ignored_layers",
                                                    qconfig.get("ignored_layers")))
        self._discover_fp8()

    def is_ignored(self, fqn: str) -> bool:
        return fqn in self.ignored_layers or any(match_hf_not_convert(fqn, p)
                                                 for p in self.ignore)

    def _scheme_of_stored(self, fqn: str) -> Scheme:
        return Scheme.BLOCK128
