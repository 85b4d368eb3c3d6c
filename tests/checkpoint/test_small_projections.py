"""Qwen3.5's in_proj_a / in_proj_b (N = number of value heads): kept in high precision when
bf16 weights are quantized (the default filter, as FP8 checkpoints keep them), loaded as the
checkpoint stores them otherwise: an FP8 checkpoint that quantized them is not dequantized."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from ckpt_writer import build_qwen3_5, q_block, save

from fp8tower.hf import from_pretrained
from fp8tower.hf.conversion import default_filter
from fp8tower.nn.linear import Fp8Linear


def _all_fp8_qwen3_5():
    """block FP8 with in_proj_a / in_proj_b quantized too (not in modules_to_not_convert)."""
    spec = build_qwen3_5("block_fp8")
    for fqn in spec.ignored:
        q, s = q_block(spec.tensors[f"{fqn}.weight"].float())
        spec.tensors[f"{fqn}.weight"], spec.tensors[f"{fqn}.weight_scale_inv"] = q, s
        spec.reference[fqn] = (q, s, None)
    qc = spec.config["quantization_config"]
    qc["modules_to_not_convert"] = [m for m in qc["modules_to_not_convert"]
                                    if m not in spec.ignored]
    stored = {fqn: spec.tensors[f"{fqn}.weight"] for fqn in spec.ignored}
    spec.ignored = []
    return spec, stored


@pytest.mark.parametrize("filter", [None, default_filter], ids=["no filter", "default_filter"])
def test_an_fp8_checkpoint_decides(tmp_path, filter):
    spec, stored = _all_fp8_qwen3_5()
    m = from_pretrained(save(spec, tmp_path / "q35"), backend="reference", dtype=torch.float32,
                        filter=filter)
    a = m.model.layers[0].linear_attn.in_proj_a
    assert type(a) is Fp8Linear  # FP8 as stored, not dequantized into an nn.Linear
    name = next(k for k in stored if k.endswith("linear_attn.in_proj_a"))
    assert torch.equal(a.weight.view(torch.uint8), stored[name].view(torch.uint8))
    (rec,) = [r for r in m.fp8tower_merges if r["merged"] == "in_proj_ba"]
    assert not rec["kept"]  # tried: N = 4 is not 128-aligned for block128


def test_a_bf16_checkpoint_keeps_them_in_high_precision(tmp_path):
    m = from_pretrained(save(build_qwen3_5("unquantized"), tmp_path / "q35"), scheme="per_tensor",
                        backend="reference", dtype=torch.float32)
    gdn = m.model.layers[0].linear_attn
    assert type(gdn.in_proj_a) is torch.nn.Linear and type(gdn.in_proj_b) is torch.nn.Linear
    (rec,) = [r for r in m.fp8tower_merges if r["merged"] == "in_proj_ba"]
    assert rec["kept"] and not rec["merged_ok"]
    assert type(gdn.in_proj_qkv).__name__ == "MergedShard"


def test_describe_says_what_convert_does(tmp_path):
    from fp8tower.hf import describe

    path = save(build_qwen3_5("unquantized"), tmp_path / "q35")
    info = describe(path, scheme="per_tensor")
    (ba,) = [g for g in info["merge_groups"] if g["merged"] == "in_proj_ba"]
    assert ba["action"] == "keep" and "high precision" in ba["reason"]  # "merge" before
    assert info["merge_counts"]["in_proj_qkvz:merge"] == 1
