"""Qwen3.5 checkpoints in their real names (text model under model.language_model.*, vision
tower under model.visual.*, MTP under mtp.*) load into Qwen3_5ForCausalLM (model.*): our key
mapping agrees with transformers' own loading of the same files."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from ckpt_writer import OracleLinear, build_qwen3_5, expand_ref, q_channel, save

from fp8tower.checkpoint import open_checkpoint
from fp8tower.checkpoint.keymap import KeyMappedCheckpoint
from fp8tower.formats import sqnr_db
from fp8tower.hf import ConvertError, describe, from_pretrained
from fp8tower.hf.conversion import MergedProjection
from fp8tower.nn.linear import Fp8Linear

PREFIX = "model.language_model."


def _ids():
    return torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(5))


def _hf(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_key_mapping_matches_transformers_on_bf16_checkpoint(tmp_path):
    path = save(build_qwen3_5("unquantized"), tmp_path / "q35", shards=2)
    ref = _hf(path)
    assert type(ref).__name__ == "Qwen3_5ForCausalLM"
    ours = from_pretrained(path, scheme="channel_token", backend="reference",
                           dtype=torch.float32, merge=False)
    ref_sd, our_sd = ref.state_dict(), ours.state_dict()
    n_linear = 0
    for name, t in ref_sd.items():
        mod = ours.get_submodule(name.rpartition(".")[0])
        if type(mod) is Fp8Linear:  # same weight, through FP8: within E4M3's resolution
            n_linear += 1
            assert sqnr_db(t, mod.fp8_weight().dequantize()) >= 28, name
        else:
            assert torch.equal(our_sd[name], t), name
    # layer 0: 3 GDN (in_proj_a / in_proj_b stay bf16, as FP8 checkpoints keep them) + 3 MLP,
    # layer 1: 4 attention + 3 MLP
    assert n_linear == 13
    # transformers' model, its linears fake-quantized in plain torch (channel weights, token
    # activations) from the weights transformers loaded: the same operands as ours
    for name, mod in list(ours.named_modules()):
        if type(mod) is Fp8Linear:
            parent, _, attr = name.rpartition(".")
            w = ref.get_submodule(name).weight.detach()
            setattr(ref.get_submodule(parent), attr,
                    OracleLinear(expand_ref(*q_channel(w)), None, "token"))
    with torch.no_grad():
        a, b = ref(_ids()).logits, ours(_ids()).logits
    assert sqnr_db(a, b) >= 40, sqnr_db(a, b)


def test_no_key_mapping_is_a_clear_error(tmp_path):
    path = save(build_qwen3_5("unquantized"), tmp_path / "q35")
    # key_mapping={} reaches convert too (session 34): the linears are named, not only the
    # embeddings (convert used to apply the family's mapping anyway)
    with pytest.raises(ConvertError, match=r"none of the checkpoint's 20 linears to quantize "
                                           r"\(e\.g\. 'model\.language_model\.layers"):
        from_pretrained(path, scheme="channel_token", key_mapping={}, dtype=torch.float32)


def test_keymapped_view_names_and_ignore_list(tmp_path):
    spec = build_qwen3_5("block_fp8")
    ck = open_checkpoint(save(spec, tmp_path / "q35"))
    view = KeyMappedCheckpoint(ck, [(r"^model\.language_model\.", "model.")])
    assert "model.layers.0.linear_attn.in_proj_qkv" in view.linear_names()
    assert view.stored_name("model.layers.0.mlp.up_proj") == PREFIX + "layers.0.mlp.up_proj"
    # the ignore list is written in stored names and still applies through the view
    assert view.is_ignored("model.layers.0.linear_attn.in_proj_b")
    assert view.scheme_for("model.layers.0.linear_attn.in_proj_b") is None
    assert "model.visual.merger.linear_fc1.weight" in view.tensor_names()  # not renamed
    w = view.load_linear("model.layers.1.self_attn.q_proj").weight
    q, s, _ = spec.reference[PREFIX + "layers.1.self_attn.q_proj"]
    assert torch.equal(w.dequantize(), expand_ref(q, s, blocks=True))


def _oracle(spec):
    """transformers' model of the same checkpoint (bf16 tensors loaded by transformers'
    mapping), each quantized linear replaced by its independently dequantized weight with
    1x128 fake-quantized activations."""
    cfg = dict(spec.config)
    cfg.pop("quantization_config")
    text = dict(cfg["text_config"])
    config = transformers.AutoConfig.for_model(text.pop("model_type"), **text)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    sd = {("model." + n[len(PREFIX):] if n.startswith(PREFIX) else n): t.float()
          for n, t in spec.tensors.items() if not n.startswith(("model.visual", "mtp"))
          and t.dtype != torch.float8_e4m3fn and not n.endswith("_scale_inv")}
    _, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected
    for fqn, (q, s, _) in spec.reference.items():
        name = "model." + fqn[len(PREFIX):]
        parent, _, attr = name.rpartition(".")
        oracle = OracleLinear(expand_ref(q, s, blocks=True), None, "group")
        setattr(model.get_submodule(parent), attr, oracle)
    return model


def test_block_fp8_qwen3_5_real_names_merged_and_unmerged(tmp_path):
    spec = build_qwen3_5("block_fp8")
    path = save(spec, tmp_path / "q35", shards=3)
    with torch.no_grad():
        ref = _oracle(spec)(_ids()).logits
        outs = {}
        for merge in (False, True):
            m = from_pretrained(path, merge=merge, backend="reference", dtype=torch.float32)
            outs[merge] = m(_ids()).logits
            assert sqnr_db(ref, outs[merge]) >= 40, (merge, sqnr_db(ref, outs[merge]))
    assert sqnr_db(outs[False], outs[True]) >= 60
    records = {(r["parent"], r["merged"]): r for r in m.fp8tower_merges}
    assert records[("model.layers.0.linear_attn", "in_proj_qkvz")]["merged_ok"]
    assert records[("model.layers.0.mlp", "gate_up_proj")]["merged_ok"]
    assert "128" in records[("model.layers.1.self_attn", "qkv_proj")]["reason"]  # k_proj 64
    ba = records[("model.layers.0.linear_attn", "in_proj_ba")]  # kept bf16 by the checkpoint
    assert not ba["merged_ok"] and "not all members are Fp8Linear" in ba["reason"]
    assert type(m.model.layers[0].linear_attn.in_proj_b) is torch.nn.Linear
    assert isinstance(m.model.layers[0].linear_attn.in_proj_qkvz, MergedProjection)


def test_describe_qwen3_5_real_names(tmp_path):
    info = describe(save(build_qwen3_5("block_fp8"), tmp_path / "q35"))
    assert info["format"] == "block_fp8" and info["model_type"] == "qwen3_5"
    # the same decisions convert made above, from the headers alone
    assert info["merge_counts"] == {"in_proj_qkvz:merge": 1, "in_proj_ba:keep": 1,
                                    "qkv_proj:keep": 1, "gate_up_proj:merge": 2}
    reasons = {g["merged"]: g["reason"] for g in info["merge_groups"]}
    assert reasons["in_proj_ba"] == "not quantized in the checkpoint"
    assert "k_proj: N=64 not a multiple of 128" in reasons["qkv_proj"]
    assert all(g["parent"].startswith(PREFIX) for g in info["merge_groups"])
    assert "model.visual.merger.linear_fc1" in info["ignored"]
    assert PREFIX + "layers.0.linear_attn.in_proj_a" in info["ignored"]


def test_from_pretrained_then_generate(tmp_path):
    """README's use: from_pretrained(path) then generate (bf16 activations, merged)."""
    path = save(build_qwen3_5("block_fp8"), tmp_path / "q35")
    ids = torch.tensor([[1, 2, 3, 4]])
    outs = [from_pretrained(path, backend="reference", merge=merge).generate(
        ids, max_new_tokens=5, do_sample=False, pad_token_id=0) for merge in (False, True)]
    assert outs[0].shape == (1, 9) and torch.equal(outs[0], outs[1])


def test_qwen3_5_moe_real_layout_maps_without_key_mapping(tmp_path):
    """Before: only qwen3_5 / qwen3_5_text had the model.language_model. -> model. mapping;
    a Qwen3.5 MoE checkpoint in its real layout needed key_mapping= by hand."""
    import json

    import transformers
    from safetensors.torch import save_file

    import fp8tower

    cfg = {"vocab_size": 256, "hidden_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "num_experts": 4,
           "num_experts_per_tok": 2, "moe_intermediate_size": 64,
           "shared_expert_intermediate_size": 128, "linear_num_key_heads": 2,
           "linear_key_head_dim": 32, "linear_num_value_heads": 4, "linear_value_head_dim": 32,
           "layer_types": ["linear_attention", "full_attention"]}
    try:
        config = transformers.AutoConfig.for_model("qwen3_5_moe_text", **cfg)
    except (KeyError, ValueError):
        pytest.skip("this transformers has no qwen3_5_moe_text")
    model = transformers.AutoModelForCausalLM.from_config(config)
    save_file({k.replace("model.", "model.language_model.", 1): v.bfloat16().contiguous()
               for k, v in model.state_dict().items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe_text", **cfg}))
    fp8tower.convert(model, "per_tensor", checkpoint=tmp_path, backend="reference")
    assert any("in_proj_qkvz" in str(m) for m in model.fp8tower_merges)
