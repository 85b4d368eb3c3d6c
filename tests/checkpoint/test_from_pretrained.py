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
from fp8tower.hf.conversion import MergedProjection, convert
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
    if fmt == "block_fp8" or preset == "FP8_BLOCK":  # k_proj (64), gate_proj (320):
        assert not merged and all("128" in r["reason"] for r in m.fp8tower_merges)  # unaligned
    else:  # static: siblings share their calibrated input_scale, each keeps its weight scale
        assert [r["merged"] for r in merged] == ["qkv_proj", "gate_up_proj"] * 2
        assert any(isinstance(x, MergedProjection) for x in m.modules())
    assert sum(type(x) is Fp8Linear for x in m.modules()) >= 8


@pytest.mark.parametrize("fmt", ["modelopt", "compressed_tensors"])
def test_static_siblings_with_differing_input_scales_stay_separate(tmp_path, fmt):
    """An exact merge needs one input scale per group: drawn per linear, none merges, and the
    logits still match the oracle."""
    spec = build(fmt, preset="FP8", shared_input_scales=False)
    m = from_pretrained(save(spec, tmp_path / fmt), backend="reference", dtype=torch.float32)
    assert m.fp8tower_merges and all(
        not r["merged_ok"] and "input scales differ" in r["reason"] for r in m.fp8tower_merges)
    with torch.no_grad():
        assert sqnr_db(_oracle_model(spec, "static")(_ids()).logits, m(_ids()).logits) >= 40


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


def test_an_fp8_linear_the_filter_keeps_is_dequantized_not_cast(tmp_path):
    """A linear stored in FP8 that stays an nn.Linear (the filter keeps it) holds its codes x
    scales, not its codes cast to bf16 (those reach 448)."""
    keep = "model.layers.1.mlp.down_proj"
    spec = build("block_fp8")
    m = from_pretrained(save(spec, tmp_path / "ck"), backend="reference", dtype=torch.float32,
                        filter=lambda mod, fqn: fqn != keep and "lm_head" not in fqn)
    down = m.get_submodule(keep)
    assert type(down) is torch.nn.Linear
    q, s, _ = spec.reference[keep]
    torch.testing.assert_close(down.weight, expand_ref(q, s), rtol=0, atol=0)
    with torch.no_grad():
        ref = _oracle_model(spec, "group")(_ids()).logits
        assert sqnr_db(ref, m(_ids()).logits) >= 40


@pytest.mark.parametrize("stored", [True, False])
def test_tied_embeddings_load_once_and_stay_tied(tmp_path, stored):
    """tie_word_embeddings: lm_head.weight is embed_tokens.weight, whether the checkpoint
    stores lm_head.weight (the same values) or not (named_parameters lists a tied Parameter
    once)."""
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    spec.config["tie_word_embeddings"] = True
    if stored:
        spec.tensors["lm_head.weight"] = spec.tensors["model.embed_tokens.weight"].clone()
    else:
        del spec.tensors["lm_head.weight"]
    m = from_pretrained(save(spec, tmp_path / "ck"), backend="reference", dtype=torch.float32)
    assert m.lm_head.weight is m.model.embed_tokens.weight
    assert torch.equal(m.lm_head.weight, spec.tensors["model.embed_tokens.weight"].float())
    with torch.no_grad():
        assert torch.isfinite(m(_ids()).logits).all()


def test_a_checkpoint_that_converts_nothing_is_an_error(tmp_path):
    from fp8tower.hf.conversion import ConvertError

    bf16 = save(build("unquantized"), tmp_path / "bf16")
    with pytest.raises(ConvertError, match="no FP8 linear .* pass scheme="):
        from_pretrained(bf16, backend="reference")
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    spec.tensors = {("foo." + n if n.startswith("model.") else n): v
                    for n, v in spec.tensors.items()}
    with pytest.raises(ConvertError, match="none of the checkpoint's 14 FP8 linears .*"
                                           "'foo.model.layers.0.*key_mapping="):
        from_pretrained(save(spec, tmp_path / "prefixed"), backend="reference",
                        key_mapping={})


def test_an_opened_checkpoint_is_checked_against_the_scheme(tmp_path):
    from fp8tower.checkpoint import CheckpointError, open_checkpoint
    from fp8tower.hf.conversion import ConvertError, convert

    def model():
        cfg = {k: v for k, v in build("unquantized").config.items() if k != "model_type"}
        config = transformers.AutoConfig.for_model("qwen3", **cfg)
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)

    ct = open_checkpoint(save(build("compressed_tensors", preset="FP8_DYNAMIC"), tmp_path / "a"))
    with pytest.raises(CheckpointError, match="scheme channel_token.; scheme=per_tensor asks"):
        convert(model(), "per_tensor", checkpoint=ct, backend="reference")
    convert(model(), "channel_token", checkpoint=ct, backend="reference")  # the same: fine
    bf16 = open_checkpoint(save(build("unquantized"), tmp_path / "b"))
    with pytest.raises(ConvertError, match="opened without a scheme"):
        convert(model(), "per_tensor", checkpoint=bf16, backend="reference")


def test_requant_max_says_when_a_group_did_not_merge(tmp_path):
    from fp8tower.hf.conversion import convert

    cfg = {k: v for k, v in build("unquantized").config.items() if k != "model_type"}
    m = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model("qwen3", **cfg), dtype=torch.float32)
    with pytest.warns(UserWarning, match="requant_max: 4 of 4 sibling groups not merged"):
        convert(m, "channel_token", requant_max=True, backend="reference")


def test_a_stored_bias_of_the_wrong_shape_names_its_module(tmp_path):
    from fp8tower.hf.conversion import ConvertError

    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    spec.config["attention_bias"] = True
    for fqn, (n, _) in linear_shapes(spec.config).items():
        if "self_attn" in fqn:
            spec.tensors[f"{fqn}.bias"] = torch.full((n,), 0.5)
    q = "model.layers.0.self_attn.q_proj"
    spec.tensors[f"{q}.bias"] = torch.tensor([7.0])  # one value for N = 192
    with pytest.raises(ConvertError, match=f"{q}: .*bias must be a 1-D floating tensor of N=192"):
        from_pretrained(save(spec, tmp_path / "ck"), backend="reference", merge=False)


def test_moe_experts_stored_one_by_one_load_dequantized(tmp_path):
    """A qwen3_moe block-FP8 checkpoint with per-expert linears (the hub's layout) fills
    transformers' fused expert parameters: each expert's gate_proj rows, then its up_proj
    rows, dequantized with their scales (fp8tower converts no experts); it failed with the
    fused parameters missing (2026-12-05 audit). An expert's tensor missing is still named,
    with the note on MoE experts."""
    from ckpt_writer import write_qwen3_moe_block_fp8
    from safetensors.torch import load_file, save_file

    from fp8tower.checkpoint import open_checkpoint
    from fp8tower.hf.conversion import ConvertError

    path = write_qwen3_moe_block_fp8(tmp_path / "moe")
    m = from_pretrained(path, backend="reference", dtype=torch.float32)
    ck = open_checkpoint(path)
    experts = m.model.layers[0].mlp.experts
    for e in range(2):
        deq = [ck.load_linear(f"model.layers.0.mlp.experts.{e}.{p}").weight.dequantize()
               for p in ("gate_proj", "up_proj", "down_proj")]
        assert torch.equal(experts.gate_up_proj[e], torch.cat(deq[:2]))
        assert torch.equal(experts.down_proj[e], deq[2])
    assert type(m.model.layers[0].self_attn.o_proj) is Fp8Linear
    with torch.no_grad():
        assert bool(torch.isfinite(m(torch.tensor([[1, 2, 3]])).logits).all())
    tensors = load_file(path / "model.safetensors")
    del tensors["model.layers.0.mlp.experts.1.up_proj.weight"]
    del tensors["model.layers.0.mlp.experts.1.up_proj.weight_scale_inv"]
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConvertError, match="experts.gate_up_proj.*5 MoE expert linear"):
        from_pretrained(path, backend="reference", dtype=torch.float32)


@pytest.mark.parametrize("model_type", ["qwen3_5_moe_text", "qwen3_next"])
def test_a_bf16_moe_checkpoint_transformers_wrote_loads(tmp_path, model_type):
    """transformers 5.25's save_pretrained writes a MoE block's experts one by one: such a
    bf16 checkpoint loads with scheme= to what transformers' own load then convert gives,
    bit for bit (it was refused: its fused experts "not in the checkpoint")."""
    common = {"vocab_size": 128, "hidden_size": 128, "intermediate_size": 256,
              "moe_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
              "shared_expert_intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
              "linear_num_key_heads": 2, "linear_key_head_dim": 32, "linear_num_value_heads": 2,
              "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4,
              "layer_types": ["linear_attention", "full_attention"],
              "tie_word_embeddings": False}
    if model_type == "qwen3_next":
        common.update(decoder_sparse_step=1, mlp_only_layers=[], full_attention_interval=2)
    config = transformers.AutoConfig.for_model(model_type, **common)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "ck")
    ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(1))
    ours = from_pretrained(tmp_path / "ck", scheme="channel_token", backend="reference")
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ck",
                                                            dtype=torch.bfloat16).eval()
    convert(ref, "channel_token", backend="reference")
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, ref(ids).logits)


def test_tied_head_stored_with_other_values_keeps_them(tmp_path):
    """Before: under tie_word_embeddings a stored lm_head.weight of other values was dropped
    for the embedding's; transformers' tie_weights keeps it, untied, with a warning."""
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    spec.config["tie_word_embeddings"] = True
    head = spec.tensors["lm_head.weight"]
    assert not torch.equal(head, spec.tensors["model.embed_tokens.weight"])
    with pytest.warns(UserWarning, match="lm_head.weight: tied to model.embed_tokens.weight"):
        m = from_pretrained(save(spec, tmp_path / "ck"), backend="reference",
                            dtype=torch.float32)
    assert torch.equal(m.lm_head.weight, head.float())
    assert torch.equal(m.model.embed_tokens.weight,
                       spec.tensors["model.embed_tokens.weight"].float())


def test_untied_head_missing_from_the_checkpoint_is_an_error(tmp_path):
    """Before: with tie_word_embeddings off, a checkpoint without lm_head.weight silently got
    the embedding as its head (the class-level _tied_weights_keys, not the config's ties)."""
    from fp8tower.hf.conversion import ConvertError

    spec = build("modelopt")
    assert not spec.config.get("tie_word_embeddings", False)
    del spec.tensors["lm_head.weight"]
    with pytest.raises(ConvertError, match="lm_head.weight"):
        from_pretrained(save(spec, tmp_path / "ck"), backend="reference")


def test_persistent_buffers_are_loaded_from_the_checkpoint(tmp_path):
    """Before: only parameters were read, a stored persistent buffer kept its init value
    (Gemma 4's trained layer_scalar: logits at 2 dB SQNR against transformers)."""
    import json

    import transformers
    from safetensors.torch import save_file

    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 128,
           "max_position_embeddings": 64}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model("llama", **cfg))
    model.model.register_buffer("trained_scalar", torch.ones(3))  # persistent, as Gemma 4's
    tensors = {k: v.detach().bfloat16().contiguous() for k, v in model.state_dict().items()}
    tensors["model.trained_scalar"] = torch.tensor([0.25, 1.5, 3.0])
    ck = tmp_path / "ck"
    ck.mkdir()
    save_file(tensors, ck / "model.safetensors")
    (ck / "config.json").write_text(json.dumps({"model_type": "llama", **cfg}))

    class WithBuffer(transformers.LlamaForCausalLM):
        def __init__(self, config):
            super().__init__(config)
            self.model.register_buffer("trained_scalar", torch.ones(3))

    m = from_pretrained(ck, scheme="per_tensor", backend="reference", cls=WithBuffer)
    assert torch.equal(m.model.trained_scalar, torch.tensor([0.25, 1.5, 3.0]))


def test_a_gpt2_checkpoint_says_its_projections_are_not_linears(tmp_path):
    """GPT-2's projections are transformers' Conv1D under the checkpoint's own names: the
    error said to pass key_mapping=, which cannot help (2026-12-05 audit)."""
    from fp8tower.hf.conversion import ConvertError

    config = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=2, vocab_size=64,
                                     n_positions=32)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "g")
    with pytest.raises(ConvertError, match=r"modules of the model but not torch.nn.Linear "
                                           r"\(e.g. 'transformer.h.0.attn.c_attn': Conv1D\)"):
        from_pretrained(tmp_path / "g", scheme="per_tensor", backend="reference")
