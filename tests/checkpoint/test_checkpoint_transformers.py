"""Where transformers itself loads the format (compressed-tensors with run_compressed=False,
block FP8 with dequantize=True), its dequantized weights equal ours.

Needs transformers, accelerate (transformers' FP8 quantizer checks for it) and, for
compressed-tensors, the compressed-tensors package; skipped without them. Dimensions are
multiples of 128 here: transformers 5.17's block-FP8 dequantization infers the block size as
shape / scale grid, so with partial blocks it either refuses (320 rows over 3 block rows) or
silently mis-sizes them (192 rows over 2 block rows -> blocks of 96: max |error| 0.35 on
weights of max 0.77, CPU, 2026-11-30), where the format (and fp8tower) means blocks of 128
with a partial last one.
"""

from __future__ import annotations

import pytest
import torch
from ckpt_writer import QWEN3_CONFIG, build, save

from fp8tower.checkpoint import open_checkpoint

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
pytest.importorskip("accelerate", reason="transformers' FP8 loaders need accelerate")

CFG = dict(QWEN3_CONFIG, hidden_size=256, intermediate_size=384, num_attention_heads=4,
           num_key_value_heads=2)


def _hf_load(path, qconfig):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, quantization_config=qconfig, dtype=torch.float32)
    return dict(model.state_dict())


def _agree(path, hf_sd, scale_dtype=torch.float32):
    """Ours (the exact fp8 x scale product, in fp32) equals transformers' weight, or, where
    transformers multiplies in the stored scales' dtype (its compressed-tensors path in 5.24:
    every weight bf16-rounded, measured on CPU 2026-11-30; 5.17 kept fp32), ours rounded
    once to that dtype: the same dequantization, one rounding apart."""
    ck = open_checkpoint(path)
    assert len(ck.linear_names()) == 14
    for fqn in ck.linear_names():
        ours = ck.load_linear(fqn).weight.dequantize(torch.float32)
        theirs = hf_sd[f"{fqn}.weight"]
        if not torch.equal(theirs, ours):
            torch.testing.assert_close(theirs, ours.to(scale_dtype).float(), rtol=0, atol=0,
                                       msg=f"{fqn}: neither the exact product nor it rounded "
                                           f"to {scale_dtype}")
    for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                 "model.layers.1.self_attn.q_norm.weight"):
        torch.testing.assert_close(hf_sd[name], ck.load_tensor(name, dtype=torch.float32))


def test_block_fp8_agrees_with_transformers_dequantize(tmp_path):
    path = save(build("block_fp8", cfg=CFG, seed=3), tmp_path, shards=2)
    hf = _hf_load(path, transformers.FineGrainedFP8Config(dequantize=True))
    _agree(path, hf)


@pytest.mark.parametrize("preset", ["FP8", "FP8_DYNAMIC", "FP8_BLOCK"])
def test_compressed_tensors_agrees_with_transformers(tmp_path, preset):
    pytest.importorskip("compressed_tensors", reason="transformers needs compressed-tensors")
    path = save(build("compressed_tensors", preset=preset, cfg=CFG, seed=4,
                      scale_dtype=torch.bfloat16), tmp_path)
    hf = _hf_load(path, transformers.CompressedTensorsConfig(run_compressed=False))
    _agree(path, hf, scale_dtype=torch.bfloat16)
