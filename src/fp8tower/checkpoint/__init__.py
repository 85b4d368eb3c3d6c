"""Load FP8 (and bf16) checkpoints lazily, tensor by tensor, as fp8tower ``Fp8Weight``s.

``open_checkpoint(path)`` reads a local checkpoint directory (config.json, *.safetensors and
``model.safetensors.index.json``, hf_quant_config.json when present), detects its format and
checks every quantized linear's tensors from the safetensors headers alone; ``load_linear``
then reads one module's tensors. No bf16 copy of an FP8 model is ever made.

Formats (one module each) and the schemes they map onto:

====================  =====================================================  ===============
format                config                                                  schemes
====================  =====================================================  ===============
modelopt              quant_method "modelopt" / hf_quant_config.json,         per_tensor
                      quant_algo FP8 | FP8_PER_CHANNEL_PER_TOKEN              (static act),
                                                                              channel_token
compressed_tensors    quant_method "compressed-tensors", format               per_tensor,
                      "float-quantized": FP8, FP8_DYNAMIC, FP8_BLOCK presets  channel_token,
                                                                              block128,
                                                                              weight_only
block_fp8             quant_method "fp8", weight_block_size [128, 128]        block128
                      (Qwen3-*-FP8, DeepSeek-V3)
fp8_per_tensor        quant_method "fp8" without weight_block_size,           per_tensor
                      activation_scheme static | dynamic (AutoFP8)            (static or
                                                                              dynamic act)
fp8tower              quant_method "fp8tower" (written by                     any, merged
                      fp8tower.hf.write_merged; see native.py)               groups stored
                                                                              as one tensor
unquantized           no quantization_config: bf16/fp16/fp32, quantized at    the one given
                      load to the scheme the caller names
====================  =====================================================  ===============

Importing this package imports neither transformers nor compressed_tensors.
"""

from __future__ import annotations

from pathlib import Path

from ..formats import Scheme
from .base import Checkpoint, LoadedLinear
from .reader import CheckpointError, CheckpointReader

__all__ = ["Checkpoint", "CheckpointError", "LoadedLinear", "check_scheme",
           "open_checkpoint"]

_QUANT_METHODS = {"modelopt": "modelopt", "compressed-tensors": "compressed_tensors",
                  "fp8": "block_fp8", "fp8tower": "fp8tower"}  # native.QUANT_METHOD


def open_checkpoint(path: str | Path, *, scheme: Scheme | str | None = None) -> Checkpoint:
    """Open a local checkpoint directory (see the module doc for the formats).

    ``scheme``: for an unquantized (bf16/fp16/fp32) checkpoint, the scheme its linears are
    quantized to at load (per_tensor: dynamic activation scale). For an FP8 checkpoint it may
    only repeat the checkpoint's own scheme; anything else is a CheckpointError.
    """
    reader = CheckpointReader(path)
    if scheme is not None:
        try:
            scheme = Scheme.parse(scheme)
        except ValueError as e:
            raise CheckpointError(str(e)) from None
    qc = reader.config.get("quantization_config", reader.config.get("compression_config"))
    if qc is not None and not isinstance(qc, dict):
        raise CheckpointError(f"{reader.path / 'config.json'}: quantization_config must be an "
                              f"object, got {qc!r}")
    if qc is None and reader.hf_quant_config is not None:
        from .modelopt import ModelOptCheckpoint

        ckpt: Checkpoint = ModelOptCheckpoint(reader, None)
        method = "modelopt"
    elif qc is None:
        from .unquantized import UnquantizedCheckpoint

        return UnquantizedCheckpoint(reader, scheme)
    else:
        method = str(qc.get("quant_method", "")).lower()
        fmt = _QUANT_METHODS.get(method)
        if fmt is None:
            raise CheckpointError(
                f"{reader.path / 'config.json'}: unknown quantization_config.quant_method "
                f"{qc.get('quant_method')!r}; fp8tower reads {', '.join(_QUANT_METHODS)}")
        if fmt == "modelopt":
            from .modelopt import ModelOptCheckpoint

            ckpt = ModelOptCheckpoint(reader, qc)
        elif fmt == "compressed_tensors":
            from .compressed_tensors import CompressedTensorsCheckpoint

            ckpt = CompressedTensorsCheckpoint(reader, qc)
        elif fmt == "fp8tower":
            from .native import NativeCheckpoint

            ckpt = NativeCheckpoint(reader, qc)
        elif qc.get("weight_block_size") is not None:
            from .block_fp8 import BlockFp8Checkpoint

            ckpt = BlockFp8Checkpoint(reader, qc)
        else:  # vLLM's Fp8Config without blocks: one scale per tensor
            from .per_tensor_fp8 import PerTensorFp8Checkpoint

            ckpt = PerTensorFp8Checkpoint(reader, qc)
    if not ckpt.linear_names() and ckpt.format != "fp8tower":
        raise CheckpointError(
            f"{ckpt.quant_config_file}: the quantization config declares FP8 quantization "
            f"(quant_method {method!r}), but no FP8 weight was found: no '*.weight' has an FP8 "
            f"dtype and no module has a {ckpt.scale_suffix!r} (a bf16 checkpoint? remove the "
            "quantization config and pass scheme= to quantize it at load)")
    if scheme is not None:
        check_scheme(ckpt, scheme)
    return ckpt


def check_scheme(ckpt, scheme: Scheme | str) -> None:
    """``scheme`` must be the one an opened checkpoint's linears load as (an FP8 one brings
    its own; a bf16 one was opened with it): a CheckpointError otherwise."""
    scheme = Scheme.parse(scheme)
    other = sorted({str(s) for s in map(ckpt.scheme_for, ckpt.linear_names()) if s != scheme})
    if other and ckpt.format == "unquantized":  # a bf16 checkpoint, opened with a scheme
        raise CheckpointError(
            f"{ckpt.path}: a bf16 checkpoint opened with scheme={', '.join(other)}; "
            f"scheme={scheme} asks for another: reopen it with "
            f"open_checkpoint(path, scheme={str(scheme)!r}), or pass its path")
    if other:
        raise CheckpointError(
            f"{ckpt.quant_config_file}: the checkpoint is already quantized ({ckpt.format}, "
            f"scheme {', '.join(other)}); scheme={scheme} asks for another (leave it out)")
