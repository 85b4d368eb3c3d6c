"""Checkpoint loading: what an audit found (each test failed before its fix)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parent / "checkpoint"))

from ckpt_writer import QWEN3_CONFIG, build, build_qwen3_5, linear_shapes, save
from safetensors.torch import save_file

from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.hf.conversion import ConvertError, convert
from fp8tower.hf.pretrained import empty_model, from_pretrained
from fp8tower.hf.random_model import random_model
from fp8tower.hf.write import write_merged
from fp8tower.nn.linear import Fp8Linear

Q0 = "model.layers.0.self_attn.q_proj"


def _config(spec):
    cfg = dict(spec.config)
    cfg.pop("quantization_config", None)
    return transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)


def _every(module, fqn):
    return True


def _messages(record, text):
    return [str(w.message) for w in record if text in str(w.message)]


# --- 1. a merged member kept unconverted ----------------------------------------------------


def test_merged_member_kept_unconverted_loads_its_slice(tmp_path):
    """from_pretrained of write_merged's copy with a filter keeping q_proj unconverted raised
    "not in the checkpoint: ...q_proj.weight" (it is a slice of qkv_proj.weight)."""
    spec = build("modelopt", preset="FP8")
    spec.config["attention_bias"] = True
    g = torch.Generator().manual_seed(5)
    for fqn, (n, _) in linear_shapes(spec.config).items():
        if ".self_attn." in fqn:
            spec.tensors[f"{fqn}.bias"] = torch.randn(n, generator=g).to(torch.bfloat16)
    src = save(spec, tmp_path / "src")
    out = tmp_path / "merged"
    report = write_merged(src, out)
    assert any(r["merged"].endswith("0.self_attn.qkv_proj") and r["written"] == "merged"
               for r in report["groups"])

    def keep_q0(module, fqn):
        return fqn != Q0 and fqn != "lm_head"

    kw = {"backend": "reference", "dtype": torch.float32, "filter": keep_q0}
    a, b = from_pretrained(src, **kw), from_pretrained(out, **kw)
    qa, qb = a.get_submodule(Q0), b.get_submodule(Q0)
    assert type(qa) is type(qb) is torch.nn.Linear
    assert torch.equal(qa.weight, qb.weight) and torch.equal(qa.bias, qb.bias)
    ids = torch.randint(0, 256, (1, 6))
    with torch.no_grad():
        assert torch.equal(a(ids).logits, b(ids).logits)


# --- 2. a filter that asks for lm_head of a bf16 checkpoint ----------------------------------


def test_filter_asking_for_lm_head_quantizes_it_from_a_bf16_checkpoint(tmp_path):
    spec = build("unquantized")
    path = save(spec, tmp_path / "bf16")
    m = from_pretrained(path, scheme="per_tensor", backend="reference", filter=_every)
    assert isinstance(m.lm_head, Fp8Linear)
    # as convert does without a checkpoint, on the same weights
    ref = transformers.AutoModelForCausalLM.from_config(_config(spec), dtype=torch.bfloat16)
    ref.load_state_dict(spec.tensors)
    convert(ref, "per_tensor", filter=_every, backend="reference")
    x = torch.randn(3, spec.config["hidden_size"], dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(m.lm_head(x), ref.lm_head(x))
    # the default filter still keeps it
    d = from_pretrained(path, scheme="per_tensor", backend="reference")
    assert type(d.lm_head) is torch.nn.Linear


# --- 3. not a safetensors file ---------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 16060522624\n",
    "<!DOCTYPE html><html><body>Access denied</body></html>"])
def test_not_a_safetensors_file_names_it(tmp_path, text):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_CONFIG))
    (tmp_path / "model.safetensors").write_text(text)
    size = len(text.encode())
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: not a safetensors file: "
                       rf"its first 8 bytes give a header length of \d+ bytes, the file has "
                       rf"{size} \(a Git LFS pointer"):
        open_checkpoint(tmp_path, scheme="per_tensor")


# --- 4. unused tensors, uncovered linears ----------------------------------------------------


def test_unused_checkpoint_tensors_warn_once(tmp_path):
    spec = build("block_fp8")
    spec.config["num_hidden_layers"] = 1  # layer 1's tensors are not read
    norm = "model.layers.0.post_attention_layernorm"
    spec.tensors[f"{norm}.weigth"] = spec.tensors[f"{norm}.weight"].clone()  # misspelt
    path = save(spec, tmp_path / "extra")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        from_pretrained(path, backend="reference")
    found = _messages(record, "not used by the model")
    assert len(found) == 1, [str(w.message) for w in record]
    n = sum(1 for t in spec.tensors if t.startswith("model.layers.1.")) + 1
    assert f"{n} checkpoint tensor(s) not used by the model (" in found[0]
    assert found[0].endswith(", ...)") and found[0].count("model.layers.") == 3


def test_complete_checkpoints_do_not_warn(tmp_path):
    """No unused-tensor warning where nothing is wrong: Qwen3.5's vision tower and mtp.* are
    not part of the causal LM."""
    paths = [save(build("block_fp8"), tmp_path / "a"), save(build_qwen3_5("block_fp8"),
                                                            tmp_path / "q35")]
    for path in paths:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            from_pretrained(path, backend="reference", dtype=torch.float32)
        assert not _messages(record, "not used") and not _messages(record, "unconverted")
    # the other warning fires too: the unused-tensor one is no catch-all
    spec = build("block_fp8")
    spec.tensors["model.layers.0.mlp.junk"] = torch.zeros(2)
    with pytest.warns(UserWarning, match=r"1 checkpoint tensor\(s\) not used by the model "
                      r"\(model\.layers\.0\.mlp\.junk\)"):
        from_pretrained(save(spec, tmp_path / "junk"), backend="reference")


def test_model_linears_the_checkpoint_lacks_are_named(tmp_path):
    """convert(model, checkpoint=) left layer 1 in bf16 with the model's own weights, silently."""
    spec = build("block_fp8")
    for name in [t for t in spec.tensors if t.startswith("model.layers.1.")]:
        del spec.tensors[name]
    path = save(spec, tmp_path / "one_layer")
    model = transformers.AutoModelForCausalLM.from_config(_config(spec))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        convert(model, checkpoint=path, backend="reference")
    found = _messages(record, "left unconverted")
    assert len(found) == 1
    assert ("7 linear(s) of the model left unconverted: the checkpoint has no tensor for them "
            "(model.layers.1.self_attn.q_proj, model.layers.1.self_attn.k_proj, "
            "model.layers.1.self_attn.v_proj, ...)") in found[0]
    assert type(model.model.layers[1].mlp.down_proj) is torch.nn.Linear


# --- 5. random_model and tied embeddings -----------------------------------------------------


def test_random_model_keeps_tied_embeddings(monkeypatch):
    cfg = dict(QWEN3_CONFIG, tie_word_embeddings=True)
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    plain = transformers.AutoModelForCausalLM.from_config(config)
    assert plain.lm_head.weight is plain.model.embed_tokens.weight
    # the memory check counts the tied parameter once: exactly that much free is enough
    need = sum(p.numel() * 2 for p in plain.parameters())
    monkeypatch.setattr("fp8tower.hf.random_model.free_bytes", lambda device: need)
    m = random_model(config, "cpu")
    assert m.lm_head.weight is m.model.embed_tokens.weight
    assert float(m.lm_head.weight.float().std()) == pytest.approx(0.02, rel=0.1)


# --- 6. which files without an index ---------------------------------------------------------


def test_model_safetensors_alone_is_read_without_an_index(tmp_path):
    spec = build("block_fp8")
    path = save(spec, tmp_path / "mistral_like")
    # a Mistral repo's consolidated copy beside it, in other names
    save_file({"layers.0.attention.wq.weight": spec.tensors[f"{Q0}.weight"],
               "layers.0.attention.wq.qscale_weight": torch.tensor(0.01)},
              str(path / "consolidated.safetensors"))
    ck = open_checkpoint(path)
    assert ck.tensor_names() == sorted(spec.tensors)
    # no model.safetensors (and no index): every *.safetensors, as before
    (path / "model.safetensors").rename(path / "part-a.safetensors")
    (path / "consolidated.safetensors").unlink()
    save_file({"extra.weight": torch.zeros(2)}, str(path / "part-b.safetensors"))
    assert open_checkpoint(path).tensor_names() == sorted([*spec.tensors, "extra.weight"])


# --- 7. messages -----------------------------------------------------------------------------


def test_f64_checkpoint_says_its_dtype(tmp_path):
    spec = build("unquantized")
    spec.tensors = {k: v.double() for k, v in spec.tensors.items()}
    path = save(spec, tmp_path / "f64")
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.mlp\.down_proj\.weight': "
                       r"dtype F64; scheme=per_tensor quantizes weights of dtype BF16, F16, F32"):
        from_pretrained(path, scheme="per_tensor", backend="reference")


def test_config_json_not_utf8_names_the_file(tmp_path):
    path = save(build("block_fp8"), tmp_path / "u16")
    (path / "config.json").write_bytes(json.dumps(QWEN3_CONFIG).encode("utf-16"))
    with pytest.raises(CheckpointError, match=r"u16/config\.json: not UTF-8 text"):
        open_checkpoint(path)


def test_meta_device_linear_is_named_by_its_fqn(tmp_path):
    spec = build("block_fp8")
    path = save(spec, tmp_path / "a")
    model = empty_model(spec.config)
    with pytest.raises(ConvertError, match=r"^model\.layers\.0\.self_attn\.q_proj: its weight "
                       r"is on the meta device: pass device="):
        convert(model, checkpoint=path, backend="reference")


@pytest.mark.parametrize("value", ["false", 0, None])
def test_static_input_scale_must_be_a_json_bool(tmp_path, value):
    out = tmp_path / "merged"
    write_merged(save(build("block_fp8"), tmp_path / "src"), out)
    cfg = json.loads((out / "config.json").read_text())
    first = min(cfg["quantization_config"]["modules"])
    cfg["quantization_config"]["modules"][first]["static_input_scale"] = value
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=rf"modules\.{first}\.static_input_scale: "
                       rf"expected true or false \(a JSON bool\), got {value!r}"):
        open_checkpoint(out)


# --- 8. write_merged's max_shard_bytes -------------------------------------------------------


@pytest.mark.parametrize("value", [0, -5, 1.5, "4GB", True])
def test_write_merged_checks_max_shard_bytes(tmp_path, value):
    src = save(build("block_fp8"), tmp_path / "src")
    with pytest.raises(ValueError, match=rf"max_shard_bytes: expected a positive int \(bytes\), "
                       rf"got {value!r}"):
        write_merged(src, tmp_path / "out", max_shard_bytes=value)
    assert not (tmp_path / "out").exists()


# --- 9. from_pretrained's arguments ----------------------------------------------------------


@pytest.mark.parametrize("kw,err,match", [
    ({"key_mapping": {"(": "x"}}, ValueError,
     r"key_mapping: '\(' is not a valid regex \(missing \)"),
    ({"key_mapping": "abc"}, TypeError, r"key_mapping: expected a dict .*got 'abc'"),
    ({"key_mapping": {"^model\\.": 1}}, TypeError, r"key_mapping: .*the entry \('\^model"),
    ({"merge": "no"}, TypeError, r"merge: expected True or False, got 'no'"),
    ({"dtype": torch.float8_e4m3fn}, ValueError,
     r"dtype: expected a floating dtype .*got torch\.float8_e4m3fn"),
    ({"dtype": torch.int8}, ValueError, r"dtype: .*got torch\.int8"),
    ({"dtype": "fp16"}, TypeError, r"dtype: expected a torch dtype .*got 'fp16'"),
])
def test_from_pretrained_checks_its_arguments(tmp_path, kw, err, match):
    path = save(build("block_fp8"), tmp_path / "a")
    with pytest.raises(err, match=match):
        from_pretrained(path, backend="reference", **kw)


def test_from_pretrained_still_takes_a_dtype_name(tmp_path):
    m = from_pretrained(save(build("block_fp8"), tmp_path / "a"), backend="reference",
                        dtype="float32")
    assert m.model.norm.weight.dtype is torch.float32
