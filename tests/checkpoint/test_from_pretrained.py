"""fp8tower.from_pretrained / convert(checkpoint=) / describe on checkpoints written in each
format by ckpt_writer: logits match a plain transformers model holding the independently
dequantized weights, with activations fake-quantized in plain torch (>= 40 dB)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("fp8tower.checkpoint")
transformers = pytest.importorskip("transformers")

from ckpt_writer import CASES, OracleLinear, build, expand_ref, linear_shapes, save

from fp8tower.formats import sqnr_db
from fp8tower.hf.conversion import MergedProjection
from fp8tower.hf.pretrained import describe, from_pretrained
from fp8tower.nn.linear import Fp8Linear


def _oracle_model(spec, mode):
    cfg = dict(spec.config)
    cfg.pop("quantization_config", None)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    sd = {n: t.float() for n, t in spec.tensors.items() if t.dtype != torch.float8_e4m3fn
          and not n.endswith(("_scale", "_scale_inv"))}
    model.load_state_dict(sd, strict=False)
    for fqn in linear_shapes(spec.config):
        if fqn not in spec.reference:
            continue
        q, s, act = spec.reference[fqn]
        parent, _, attr = fqn.rpartition(".")
        setattr(model.get_submodule(parent), attr, OracleLinear(expand_ref(q, s), act, mode))
    return model


def _ids():
    return torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("fmt,preset,mode", CASES)
def test_from_pretrained_matches_dequantized_oracle(tmp_path, fmt, preset, mode):
    spec = build(fmt, preset=preset)
    path = save(spec, tmp_path / fmt, shards=2)
    with torch.no_grad():
        ref = _oracle_model(spec, mode)(_ids()).logits
        outs = {}
        for merge in (False, True):
            m = from_pretrained(path, merge=merge, backend="reference", dtype=torch.float32)
            assert not any(p.device.type == "meta" for p in m.parameters())
            assert not any(p.device.type == "meta" for p in m.buffers())
            outs[merge] = m(_ids()).logits
            assert sqnr_db(ref, outs[merge]) >= 40, (fmt, preset, merge, sqnr_db(ref, outs[merge]))
    assert sqnr_db(outs[False], outs[True]) >= 60
    merged = [r for r in m.fp8tower_merges if r["merged_ok"]]
    if mode == "static":
        # ckpt_writer draws each linear's input_scale at random: an exact merge must refuse
        assert not merged and all("input scales differ" in r["reason"]
                                  for r in m.fp8tower_merges)
    elif fmt == "block_fp8" or preset == "FP8_BLOCK":  # k_proj (64), gate_proj (320):
        assert not merged and all("128" in r["reason"] for r in m.fp8tower_merges)  # unaligned
    else:
        assert [r["merged"] for r in merged] == ["qkv_proj", "gate_up_proj"] * 2
        assert any(isinstance(x, MergedProjection) for x in m.modules())
    assert sum(type(x) is Fp8Linear for x in m.modules()) >= 8


def test_from_pretrained_ignored_module_stays_bf16(tmp_path):
    ign = "model.layers.1.mlp.down_proj"
    spec = build("block_fp8", ignore=("lm_head", ign), ignored_fqns=(ign,))
    m = from_pretrained(save(spec, tmp_path / "ck"), backend="reference", dtype=torch.float32)
    down = m.get_submodule(ign)
    assert type(down) is torch.nn.Linear
    assert torch.equal(down.weight, spec.tensors[f"{ign}.weight"].float())
    with torch.no_grad():
        ref = _oracle_model(spec, "group")(_ids()).logits
        assert sqnr_db(ref, m(_ids()).logits) >= 40


def test_describe_lists_merge_groups(tmp_path):
    ign = ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj")
    spec = build("compressed_tensors", preset="FP8_DYNAMIC", ignore=("lm_head", *ign),
                 ignored_fqns=ign)
    info = describe(save(spec, tmp_path / "ck"))
    assert info["format"] == "compressed_tensors" and info["model_type"] == "qwen3"
    assert info["merge_counts"] == {"qkv_proj:merge": 2, "gate_up_proj:merge": 1,
                                    "gate_up_proj:keep": 1}
    kept = [g for g in info["merge_groups"] if g["action"] == "keep"]
    assert kept[0]["parent"] == "model.layers.0.mlp"
    assert info["bytes"] > 0
