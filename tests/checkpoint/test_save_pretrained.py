"""A converted model saved and loaded back: ``model.save_pretrained(out)`` (and
``fp8tower.save_pretrained``) writes fp8tower's checkpoint, which ``from_pretrained`` loads to
the same logits, bit for bit, merged or not, from an FP8 checkpoint of every format or from
bf16 weights quantized at conversion.

2026-12-05 audit: transformers' own ``save_pretrained`` wrote a merged group's tensors under
``<merged>.linear.*`` beside the source's quantization config, and a bf16 model's FP8
linears under no quantization config: neither loaded back."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("fp8tower.checkpoint")
transformers = pytest.importorskip("transformers")

from ckpt_writer import CASES, build, build_qwen3_5, save

import fp8tower
from fp8tower.hf.conversion import ConvertError, MergedProjection
from fp8tower.hf.pretrained import from_pretrained

IDS = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(3))


def _logits(model):
    with torch.no_grad():
        return model(IDS).logits


def _same(a, b):
    return a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("fmt,preset,mode", CASES)
@pytest.mark.parametrize("merge", [True, False])
def test_a_loaded_checkpoint_saves_and_loads_back_exactly(tmp_path, fmt, preset, mode, merge):
    src = save(build(fmt, preset=preset), tmp_path / "src")
    m = from_pretrained(src, merge=merge, backend="reference", dtype=torch.float32)
    m.save_pretrained(tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "fp8tower"
    merged = [r for r in m.fp8tower_merges if r["merged_ok"]]
    assert len(cfg["quantization_config"]["merged"]) == len(merged)
    back = from_pretrained(tmp_path / "out", merge=merge, backend="reference",
                           dtype=torch.float32)
    assert _same(_logits(m), _logits(back)), (fmt, preset, merge)
    assert [r["merged"] for r in back.fp8tower_merges if r["merged_ok"]] == \
        [r["merged"] for r in merged]


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128", "weight_only"])
@pytest.mark.parametrize("family", ["llama", "qwen3_5"])
def test_a_converted_bf16_model_saves_and_loads_back_exactly(tmp_path, family, scheme):
    """Quantized at conversion (per_tensor: a dynamic activation scale); the Qwen3.5 GDN's
    in_proj_a / in_proj_b stay bf16 and are written as such; llama's q/k/v have biases."""
    cfg = {"vocab_size": 256, "hidden_size": 256, "intermediate_size": 512,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 64, "tie_word_embeddings": family == "llama"}
    if family == "qwen3_5":
        config = transformers.Qwen3_5TextConfig(
            **cfg, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
            linear_key_head_dim=32, linear_num_value_heads=4, linear_value_head_dim=48,
            linear_conv_kernel_dim=4)
    else:
        config = transformers.LlamaConfig(**cfg, attention_bias=True)
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    for merge in (True, False):
        m = fp8tower.convert(base if not merge else _copy(base), scheme, backend="reference",
                             merge=merge)
        out = tmp_path / f"out_{merge}"
        m.save_pretrained(out)
        back = from_pretrained(out, merge=merge, backend="reference")
        assert _same(_logits(m), _logits(back)), (family, scheme, merge)
        kept = [n for n, x in back.named_modules() if n.endswith("in_proj_a")]
        assert all(type(back.get_submodule(n)) is torch.nn.Linear for n in kept)


def _copy(model):
    import copy

    return copy.deepcopy(model)


def test_requant_max_groups_save_their_one_scale(tmp_path):
    src = save(build("modelopt", preset="FP8"), tmp_path / "src")
    m = from_pretrained(src, requant_max=True, backend="reference", dtype=torch.float32)
    groups = [x for x in m.modules() if isinstance(x, MergedProjection)]
    assert groups and all(g.linear.weight_scale.numel() == 1 for g in groups)
    report = fp8tower.save_pretrained(m, tmp_path / "out")
    assert report["merged"] == len(groups) and report["files"] == ["model.safetensors"]
    back = from_pretrained(tmp_path / "out", backend="reference", dtype=torch.float32)
    assert _same(_logits(m), _logits(back))


def test_qwen3_5_checkpoint_with_vision_and_mtp_saves_its_causal_lm(tmp_path):
    """The source's model.visual.* and mtp.* are not part of the causal LM: not written."""
    src = save(build_qwen3_5("block_fp8"), tmp_path / "src")
    m = from_pretrained(src, backend="reference", dtype=torch.float32)
    m.save_pretrained(tmp_path / "out", max_shard_size="200KB")
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert not [n for n in index["weight_map"] if n.startswith(("model.visual", "mtp."))]
    back = from_pretrained(tmp_path / "out", backend="reference", dtype=torch.float32)
    assert _same(_logits(m), _logits(back))


def test_save_pretrained_refusals(tmp_path):
    src = save(build("modelopt", preset="FP8"), tmp_path / "src")
    m = from_pretrained(src, backend="reference", dtype=torch.float32)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("x")
    with pytest.raises(ConvertError, match="exists and is not an empty directory"):
        m.save_pretrained(tmp_path / "full")
    with pytest.raises(ValueError, match="local directories only"):
        m.save_pretrained(tmp_path / "a", push_to_hub=True)
    with pytest.raises(ValueError, match="safetensors only"):
        m.save_pretrained(tmp_path / "a", safe_serialization=False)
    with pytest.raises(TypeError, match="got variant"):
        m.save_pretrained(tmp_path / "a", variant="fp8")
    with pytest.raises(ValueError, match="max_shard_size.*got '5 bananas'"):
        m.save_pretrained(tmp_path / "a", max_shard_size="5 bananas")
    assert not (tmp_path / "a").exists()
    m.save_pretrained(tmp_path / "skipped", is_main_process=False)
    assert not (tmp_path / "skipped").exists()
    plain = transformers.AutoModelForCausalLM.from_config(m.config)
    with pytest.raises(ConvertError, match="no fp8tower linear: convert it first"):
        fp8tower.save_pretrained(plain, tmp_path / "b")


def test_a_converted_model_is_freed_without_a_garbage_collection(tmp_path):
    """save_pretrained held the model in its own __dict__ (a cycle): `del model` freed
    nothing until gc ran. Copies and pickles save themselves, not the original."""
    import copy
    import gc
    import io
    import weakref

    src = save(build("compressed_tensors", preset="FP8_DYNAMIC"), tmp_path / "src")
    m = from_pretrained(src, backend="reference", dtype=torch.float32)
    twin = copy.deepcopy(m)
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    ref = weakref.ref(m)
    gc.disable()
    try:
        del m
        assert ref() is None
    finally:
        gc.enable()
    for i, other in enumerate((twin, loaded)):
        other.save_pretrained(tmp_path / f"out{i}")
        back = from_pretrained(tmp_path / f"out{i}", backend="reference", dtype=torch.float32)
        assert _same(_logits(other), _logits(back))


def test_per_row_scales_that_are_not_one_a_linear_are_refused_named(tmp_path):
    src = save(build("modelopt", preset="FP8"), tmp_path / "src")
    m = from_pretrained(src, merge=False, backend="reference", dtype=torch.float32)
    lin = m.model.layers[0].self_attn.o_proj
    w = lin.fp8_weight()
    rows = torch.full((w.n,), float(w.scale))
    rows[0] *= 2
    m.model.layers[0].self_attn.o_proj = type(lin).from_weight(
        fp8tower.Fp8Weight(w.data, rows, w.scheme, w.act_scale), backend="reference")
    with pytest.raises(ConvertError, match="o_proj: a per_tensor weight with a scale per row"):
        m.save_pretrained(tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()  # nor the parent it made


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,preset", [("modelopt", "FP8"), ("block_fp8", "FP8")])
def test_on_a_gpu_a_saved_model_loads_back_exactly(tmp_path, fmt, preset):
    """The same round trip with the weights on the GPU and the Triton GEMMs (auto would tune
    here, building CUTLASS libraries for minutes: the first run timed out), and a MoE
    checkpoint's experts filled on the GPU."""
    from ckpt_writer import write_qwen3_moe_block_fp8

    src = save(build(fmt, preset=preset), tmp_path / "src")
    ids = IDS.cuda()
    for path, name in ((src, "dense"), (write_qwen3_moe_block_fp8(tmp_path / "moe"), "moe")):
        m = from_pretrained(path, device="cuda", backend="triton")
        m.save_pretrained(tmp_path / f"out_{name}")
        back = from_pretrained(tmp_path / f"out_{name}", device="cuda", backend="triton")
        with torch.no_grad():
            a, b = m(ids % m.config.vocab_size).logits, back(ids % m.config.vocab_size).logits
        assert a.is_cuda and torch.equal(a, b), name


def test_save_pretrained_chained_on_the_conversion_and_with_trainers_state_dict(tmp_path):
    """`from_pretrained(src, ...).save_pretrained(out)` in one expression raised ReferenceError
    (the override held its model weakly); transformers' Trainer passes the model's own
    state_dict, which was refused. An unconverted model of the same class keeps
    transformers' own save_pretrained."""
    src = save(build("compressed_tensors", preset="FP8_DYNAMIC"), tmp_path / "src")
    from_pretrained(src, backend="reference", dtype=torch.float32).save_pretrained(
        tmp_path / "chained")
    cfg = json.loads((tmp_path / "chained" / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "fp8tower"
    m = from_pretrained(src, backend="reference", dtype=torch.float32)
    m.save_pretrained(tmp_path / "trainer", state_dict=m.state_dict())
    back = from_pretrained(tmp_path / "trainer", backend="reference", dtype=torch.float32)
    assert _same(_logits(m), _logits(back))
    other = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match="has other tensors or keys"):
        m.save_pretrained(tmp_path / "other", state_dict=other)
    with pytest.raises(TypeError, match="by keyword"):
        m.save_pretrained(tmp_path / "pos", {})
    plain = type(m)(m.config)  # the same class, never converted: transformers' own writer
    plain.save_pretrained(tmp_path / "plain")
    plain_cfg = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert plain_cfg.get("quantization_config", {}).get("quant_method") != "fp8tower"


def test_a_pickled_converted_model_saves_fp8towers_format_in_another_process(tmp_path):
    """The override lives on the class: a model unpickled in a fresh process (which never
    imported fp8tower.hf.save) wrote transformers' format again (a review, 2026-12-05); its
    flag now brings the override with it."""
    import subprocess
    import sys

    src = save(build("compressed_tensors", preset="FP8_DYNAMIC"), tmp_path / "src")
    m = from_pretrained(src, backend="reference", dtype=torch.float32)
    torch.save(m, tmp_path / "m.pt")
    code = ("import sys, torch\n"
            "m = torch.load(sys.argv[1], weights_only=False)\n"
            "m.save_pretrained(sys.argv[2])\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.pt"), str(tmp_path / "out")],
                       check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "fp8tower"
    back = from_pretrained(tmp_path / "out", backend="reference", dtype=torch.float32)
    assert _same(_logits(m), _logits(back))
    import inspect

    assert "of a converted model" in (inspect.getdoc(m.save_pretrained) or "")
    assert "variant" not in inspect.signature(m.save_pretrained).parameters
