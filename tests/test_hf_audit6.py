"""fp8tower.from_pretrained against transformers' own load + fp8tower.convert of the same
checkpoint (2026-12 audit): the checkpoint's generation_config.json, trainable parameters and
a backward pass, Fp8Linear biases in the requested dtype; convert keeps an eval() model's
submodules in eval mode."""

from __future__ import annotations

import json
import logging

import pytest
import torch

transformers = pytest.importorskip("transformers")

import fp8tower
from fp8tower.hf.conversion import MergedProjection, MergedShard
from fp8tower.nn.linear import Fp8Linear

VOCAB = 97


def _model(bias=False, seed=0, dtype=torch.float32):
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False,
        attention_bias=bias, mlp_bias=bias)
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    with torch.no_grad():  # wider than the init's: greedy tokens differ from step to step
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
            else:  # norms and biases
                p.add_(torch.randn_like(p) * 0.05)
    return m.eval()


def _ids(batch=1, seq=6):
    return torch.randint(3, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1))


def _hf_convert(path, dtype=torch.float32):
    """transformers' load + fp8tower.convert: what from_pretrained should match."""
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return fp8tower.convert(model, "channel_token", backend="reference")


def _fp8tower(path, dtype=torch.float32):
    return fp8tower.from_pretrained(path, scheme="channel_token", backend="reference",
                                    dtype=dtype)


# ----------------------------------------------------------------------------- generation


def test_generation_stops_at_an_eos_id_of_generation_config_json(tmp_path):
    base, x = _model(), _ids()
    with torch.no_grad():  # the greedy continuation, stopping at nothing
        free = fp8tower.convert(_model(), "channel_token", backend="reference").generate(
            x, do_sample=False, max_new_tokens=6, eos_token_id=None, pad_token_id=0)
    stop = int(free[0, x.shape[1] + 1])  # the 2nd generated token, in config.json nowhere
    base.generation_config = transformers.GenerationConfig(
        eos_token_id=[stop], pad_token_id=0, do_sample=False, max_new_tokens=6)
    base.save_pretrained(tmp_path / "ck")
    assert stop != json.loads((tmp_path / "ck" / "config.json").read_text())["eos_token_id"]
    ref, got = _hf_convert(tmp_path / "ck"), _fp8tower(tmp_path / "ck")
    assert got.generation_config.to_dict() == ref.generation_config.to_dict()
    assert got.generation_config.eos_token_id == [stop]
    assert got.generation_config.max_new_tokens == 6
    assert got.config.name_or_path == ref.config.name_or_path == str(tmp_path / "ck")
    with torch.no_grad():
        want, out = ref.generate(x), got.generate(x)
    assert out.tolist() == want.tolist()
    assert int(out[0, -1]) == stop and out.shape[1] < x.shape[1] + 6  # stopped at eos


def test_generation_config_json_sampling_defaults_are_read(tmp_path):
    base = _model()
    base.generation_config = transformers.GenerationConfig(
        eos_token_id=[5, 6], bos_token_id=1, pad_token_id=0, do_sample=True, temperature=0.6,
        top_p=0.9, max_new_tokens=4)
    base.save_pretrained(tmp_path / "ck")
    got = _fp8tower(tmp_path / "ck").generation_config
    assert (got.eos_token_id, got.do_sample, got.temperature, got.top_p, got.max_new_tokens) \
        == ([5, 6], True, 0.6, 0.9, 4)
    # and through fp8tower's own format: save_pretrained writes it, from_pretrained reads it
    _hf_convert(tmp_path / "ck").save_pretrained(tmp_path / "native")
    back = fp8tower.from_pretrained(tmp_path / "native", backend="reference").generation_config
    assert (back.eos_token_id, back.temperature, back.max_new_tokens) == ([5, 6], 0.6, 4)


def test_an_unreadable_generation_config_json_falls_back_as_transformers_does(tmp_path, caplog):
    """transformers: an OSError (not valid JSON) -> a generation config made from config.json,
    legacy generation keys in it included (the config object drops them)."""
    _model().save_pretrained(tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    cfg.update(num_beams=2, max_length=33)
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "ck" / "generation_config.json").write_text("{ not json")
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ck").generation_config
    with caplog.at_level(logging.WARNING, logger="fp8tower.hf.pretrained"):
        got = _fp8tower(tmp_path / "ck").generation_config
    assert (got.num_beams, got.max_length) == (ref.num_beams, ref.max_length) == (2, 33)
    assert got.to_dict() == ref.to_dict()
    assert "generation_config.json not loaded" in caplog.text


# ----------------------------------------------------------------------------- training


def test_trainable_parameters_and_grads_match_transformers_load_and_convert(tmp_path):
    _model().save_pretrained(tmp_path / "ck")
    ref, got = _hf_convert(tmp_path / "ck"), _fp8tower(tmp_path / "ck")
    want = {n: p.requires_grad for n, p in ref.named_parameters()}
    assert {n: p.requires_grad for n, p in got.named_parameters()} == want
    n_train = got.num_parameters(only_trainable=True)
    assert n_train == ref.num_parameters(only_trainable=True) > 0
    x = _ids(2, 7)
    for m in (ref, got):
        m.train()
        m(x, labels=x).loss.backward()
    grads = dict(ref.named_parameters())
    for name, p in got.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-5, atol=1e-6)


def test_tied_embeddings_stay_one_trainable_parameter(tmp_path):
    cfg = _model().config
    cfg.tie_word_embeddings = True
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "ck")
    got = _fp8tower(tmp_path / "ck")
    assert got.lm_head.weight is got.model.embed_tokens.weight
    assert got.lm_head.weight.requires_grad
    x = _ids(2, 5)
    got.train()
    got(x, labels=x).loss.backward()
    assert got.model.embed_tokens.weight.grad is not None


# ----------------------------------------------------------------------------- bias dtype


@pytest.mark.parametrize("saved,loaded", [(torch.float32, torch.bfloat16),
                                          (torch.bfloat16, torch.float32),
                                          (torch.float16, torch.bfloat16)])
def test_fp8linear_biases_take_the_requested_dtype(tmp_path, saved, loaded):
    _model(bias=True).to(saved).save_pretrained(tmp_path / "bf16")  # a high-precision one
    native = fp8tower.convert(_model(bias=True), "channel_token", backend="reference")
    native.to(saved).save_pretrained(tmp_path / "native")  # fp8tower's FP8 format
    ref = _hf_convert(tmp_path / "bf16", dtype=loaded)
    for path in ("bf16", "native"):
        got = fp8tower.from_pretrained(tmp_path / path, scheme="channel_token" if path ==
                                       "bf16" else None, backend="reference", dtype=loaded)
        biases = {n: m.bias for n, m in got.named_modules()
                  if type(m) is Fp8Linear and m.bias is not None}
        assert biases and {b.dtype for b in biases.values()} == {loaded}, path
        if path == "bf16":  # the same values as transformers' cast
            want = {n: m.bias for n, m in ref.named_modules() if type(m) is Fp8Linear}
            for n, b in biases.items():
                torch.testing.assert_close(b, want[n], rtol=0, atol=0)
        with torch.no_grad():
            assert got(_ids()).logits.dtype == loaded


# ----------------------------------------------------------------------------- train / eval


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("merge", [True, False])
def test_convert_keeps_the_models_train_eval_mode(tmp_path, training, merge):
    model = _model(bias=True).train(training)
    fp8tower.convert(model, "channel_token", backend="reference", merge=merge)
    new = [m for m in model.modules() if isinstance(m, (Fp8Linear, MergedProjection,
                                                        MergedShard))]
    assert new and any(type(m) is Fp8Linear for m in new)
    assert merge == any(isinstance(m, MergedShard) for m in new)
    assert {m.training for m in model.modules()} == {training}
    # and with FP8 weights from a checkpoint
    _model().save_pretrained(tmp_path / "ck")
    model = _model().train(training)
    fp8tower.convert(model, checkpoint=tmp_path / "ck", scheme="channel_token",
                     backend="reference", merge=merge)
    assert {m.training for m in model.modules()} == {training}
