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

``scale_fmt: "ue8m0"`` (DeepSeek-V3.1 / V3.2, GLM FP8 builds): the weight scales are stored as
they are (powers of two, fp32), read exactly; the producer's inference code (DeepSeek's
``act_quant``) also rounds each 1x128 activation group's scale up to a power of two,
2^ceil(log2(max(amax, 1e-4) / 448)). fp8tower's kernels use amax / 448, unrounded: one warning
at open says so (UE8M0_NOTE). Another ``scale_fmt`` is refused; null or absent is the usual
float scale.
"""

from __future__ import annotations

import re
import warnings

from ..formats import Scheme
from .base import Checkpoint, match_hf_not_convert
from .reader import CheckpointReader

# Measured (the 2026-12 format audit: random 512x1024 block weights with power-of-two scales,
# 8 bf16 tokens; reference backend): vs the unquantized-x product, fp8tower's outputs and the
# ue8m0 reference's are equally close (SQNR 31.7 vs 31.6 dB); against each other 28.7 dB,
# the difference of two equally fine roundings of x, not an error of either.
UE8M0_NOTE = ("DeepSeek's reference rounds each 1x128 activation group's scale up to a power "
              "of two, 2^ceil(log2(max(amax, 1e-4) / 448)); fp8tower uses amax / 448, not "
              "rounded (its weight scales are read as stored, exactly). Measured on random "
              "weights: both are as close to the unquantized-x product (SQNR 31.7 vs 31.6 "
              "dB), but outputs differ from that reference's (28.7 dB SQNR between the two), "
              "so they are not bit-exact with an engine that rounds (docs/models.md)")


class Fp8MethodCheckpoint(Checkpoint):
    """What every ``quant_method: "fp8"`` checkpoint shares (this block one and the
    per-tensor one of per_tensor_fp8.py): ``fmt`` and the two ignore lists."""

    def _read_fp8_method_fields(self, qconfig: dict) -> None:
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

    def is_ignored(self, fqn: str) -> bool:
        return fqn in self.ignored_layers or any(match_hf_not_convert(fqn, p)
                                                 for p in self.ignore)


class BlockFp8Checkpoint(Fp8MethodCheckpoint):
    format = "block_fp8"
    scale_suffix = "weight_scale_inv"

    def __init__(self, reader: CheckpointReader, qconfig: dict):
        super().__init__(reader, qconfig, reader.path / "config.json")
        bs = qconfig.get("weight_block_size")
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
        self._read_fp8_method_fields(qconfig)
        scale_fmt = qconfig.get("scale_fmt")
        if scale_fmt not in (None, "ue8m0"):
            raise self._field_err("scale_fmt", "null or 'ue8m0' (power-of-two scales, "
                                  "DeepSeek-V3.1 / V3.2); fp8tower knows no other scale format",
                                  scale_fmt)
        if scale_fmt == "ue8m0":
            warnings.warn(f"fp8tower: {self.path}: quantization_config.scale_fmt 'ue8m0': "
                          f"{UE8M0_NOTE}", stacklevel=3)
        self._discover_fp8()

    def _scheme_of_stored(self, fqn: str) -> Scheme:
        return Scheme.BLOCK128
