"""write_merged: fp8tower's own merged checkpoint, read back by fp8tower's loader, gives the
same FP8 weights and scales, module by module, and the same logits (bit for bit) as loading
the source checkpoint, merged and unmerged."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from ckpt_writer import build, build_qwen3_5, save

from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.checkpoint.reader import read_header
from fp8tower.hf import describe, from_pretrained, write_merged
from fp8tower.hf.conversion import MergedProjection
from fp8tower.nn.linear import Fp8Linear


def _ids():
    return torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(7))


def _fp8_modules(model):
    return {n: m.fp8_weight() for n, m in model.named_modules() if type(m) is Fp8Linear}


def _assert_same(a, b):
    wa, wb = _fp8_modules(a), _fp8_modules(b)
    assert list(wa) == list(wb) and wa
    for name in wa:
        x, y = wa[name], wb[name]
        assert x.scheme is y.scheme, name
        assert torch.equal(x.data.view(torch.uint8), y.data.view(torch.uint8)), name
        assert torch.equal(x.scale, y.scale), name
        assert (x.act_scale is None) == (y.act_scale is None), name
        if x.act_scale is not None:
            assert torch.equal(x.act_scale, y.act_scale), name
        assert torch.equal(x.dequantize(), y.dequantize()), name
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k].view(torch.uint8) if sa[k].dtype == torch.float8_e4m3fn
                           else sa[k], sb[k].view(torch.uint8)
                           if sb[k].dtype == torch.float8_e4m3fn else sb[k]), k
    with torch.no_grad():
        assert torch.equal(a(_ids()).logits, b(_ids()).logits)


CASES = [  # (id, spec builder, scheme for a bf16 source, requant_max)
    ("qwen3_5_block_fp8", lambda: build_qwen3_5("block_fp8"), None, False),
    ("qwen3_modelopt_static_requant", lambda: build("modelopt", preset="FP8"), None, True),
    ("qwen3_5_bf16_per_tensor", lambda: build_qwen3_5("unquantized"), "per_tensor", False),
    ("qwen3_per_tensor_requant", lambda: build("unquantized"), "per_tensor", True),
    ("qwen3_ct_fp8_dynamic", lambda: build("compressed_tensors", preset="FP8_DYNAMIC"), None,
     False),
    ("qwen3_modelopt_static", lambda: build("modelopt", preset="FP8"), None, False),
    ("qwen3_ct_static_differing", lambda: build("compressed_tensors", preset="FP8",
                                                shared_input_scales=False), None, False),
    ("qwen3_autofp8_static", lambda: build("fp8_per_tensor", preset="static"), None, False),
    ("qwen3_autofp8_dynamic", lambda: build("fp8_per_tensor", preset="dynamic"), None, False),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_round_trip(tmp_path, case):
    _, make, scheme, requant = case
    src = save(make(), tmp_path / "src", shards=2)
    report = write_merged(src, tmp_path / "out", scheme=scheme, requant_max=requant,
                          max_shard_bytes=60_000)
    out = tmp_path / "out"
    assert len(report["files"]) > 1 and (out / "model.safetensors.index.json").is_file()
    assert open_checkpoint(out).format == "fp8tower"
    kw = {"backend": "reference", "dtype": torch.float32}
    # requant_max rewrites the members' FP8 values (one scale per group): only the merged
    # model is the same; exact merging keeps every member as it was
    for merge in (True,) if requant else (True, False):
        a = from_pretrained(src, scheme=scheme, merge=merge, requant_max=requant, **kw)
        b = from_pretrained(out, merge=merge, **kw)
        _assert_same(a, b)
    merged_a = from_pretrained(src, scheme=scheme, requant_max=requant, **kw)
    written = sorted(g["merged"].replace("language_model.", "") for g in report["groups"]
                     if g["written"] == "merged")
    made = sorted(f"{r['parent']}.{r['merged']}" for r in merged_a.fp8tower_merges
                  if r["merged_ok"])
    assert written == made  # write_merged merges exactly what convert merges
    assert len(report["groups"]) == len(merged_a.fp8tower_merges)  # each, merged or not
    if case[0] == "qwen3_ct_static_differing":  # input scales drawn per linear: none merges
        assert not written and report["groups"]
        assert all("input scales differ" in g["reason"] for g in report["groups"])
    else:
        assert written  # requant_max merges those too, with their max


def test_a_failed_write_leaves_the_directory_as_it_was(tmp_path):
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    spec.tensors["model.layers.1.mlp.down_proj.weight_scale"][3] = 0  # refused on read
    src = save(spec, tmp_path / "src")
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        with pytest.raises(CheckpointError, match="finite and positive"):
            write_merged(src, out, max_shard_bytes=60_000)
        assert (not out.exists()) if out.name == "new" else not any(out.iterdir())
    fixed = build("compressed_tensors", preset="FP8_DYNAMIC")
    write_merged(save(fixed, tmp_path / "src2"), tmp_path / "empty")  # the retry runs


def test_weights_in_other_formats_and_subdirectories_are_not_copied(tmp_path):
    src = save(build("compressed_tensors", preset="FP8_DYNAMIC"), tmp_path / "src")
    (src / "pytorch_model.bin").write_bytes(b"stale")
    (src / "original").mkdir()
    (src / "tokenizer.json").write_text("{}")
    report = write_merged(src, tmp_path / "out")
    assert report["not_copied"] == ["original", "pytorch_model.bin"]
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    assert not (tmp_path / "out" / "pytorch_model.bin").exists()


def test_per_tensor_groups_store_per_member_scales(tmp_path):
    src = save(build_qwen3_5("unquantized"), tmp_path / "src")
    write_merged(src, tmp_path / "out", scheme="per_tensor")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "fp8tower" and cfg["model_type"] == "qwen3_5"
    name = "model.language_model.layers.0.linear_attn.in_proj_qkvz"
    assert qc["merged"][name] == {"members": [name[:-1], name[:-4] + "z"], "sizes": [256, 128]}
    header = read_header(tmp_path / "out" / "model.safetensors")
    assert header[f"{name}.weight"]["dtype"] == "F8_E4M3"
    assert header[f"{name}.weight"]["shape"] == [384, 160]
    assert header[f"{name}.weight_scale"]["shape"] == [2]  # one per member
    # kept as stored: lm_head, embeddings, the vision tower and the MTP head (bf16)
    for kept in ("lm_head.weight", "model.language_model.embed_tokens.weight",
                 "model.visual.merger.linear_fc1.weight", "mtp.fc.weight"):
        assert header[kept]["dtype"] == "BF16", kept
    assert "model.visual.blocks.0.attn.qkv" in qc["ignore"]
    info = describe(tmp_path / "out")
    assert info["format"] == "fp8tower"
    assert info["merge_counts"]["in_proj_qkvz:stored merged"] == 1
    assert name not in info["not_quantized"]
    # and loaded back: the merged module holds the stored tensor
    m = from_pretrained(tmp_path / "out", backend="reference", dtype=torch.float32)
    assert isinstance(m.model.layers[0].linear_attn.in_proj_qkvz, MergedProjection)


def test_refuses_a_non_empty_destination(tmp_path):
    src = save(build("block_fp8"), tmp_path / "src")
    with pytest.raises(ValueError, match="exists and is not empty"):
        write_merged(src, src)


def test_malformed_native_checkpoint(tmp_path):
    src = save(build("compressed_tensors", preset="FP8_DYNAMIC"), tmp_path / "src")
    out = tmp_path / "out"
    write_merged(src, out)
    cfg = json.loads((out / "config.json").read_text())
    name = "model.layers.0.mlp.gate_up_proj"
    cfg["quantization_config"]["merged"][name]["sizes"] = [320, 319]
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"merged weight has N=640, its members' sizes "
                                              r"\[320, 319\] add up to 639"):
        open_checkpoint(out)
    del cfg["quantization_config"]["modules"][name]
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="a name listed in 'modules' too"):
        open_checkpoint(out)


def test_kv_cache_scales_are_copied_through_under_the_member_names(tmp_path):
    """ModelOpt's FP8 KV-cache scales live under k_proj / v_proj, members of a merged qkv_proj:
    written as stored, under those names, and said so in the report."""
    spec = build("modelopt", preset="FP8")
    kv = {}
    for layer in range(2):
        p = f"model.layers.{layer}.self_attn"
        kv[f"{p}.k_proj.k_scale"] = torch.tensor(0.02 + layer)
        kv[f"{p}.v_proj.v_scale"] = torch.tensor(0.03 + layer)
    spec.tensors.update(kv)
    with pytest.warns(UserWarning, match="4 KV-cache scale tensor"):
        report = write_merged(save(spec, tmp_path / "src"), tmp_path / "out")
    assert sorted(report["copied_through"]) == sorted(kv)
    assert any(g["merged"] == "model.layers.0.self_attn.qkv_proj" and g["written"] == "merged"
               for g in report["groups"])
    with pytest.warns(UserWarning, match="4 KV-cache scale tensor"):
        ck = open_checkpoint(tmp_path / "out")
    for name, value in kv.items():
        assert torch.equal(ck.load_tensor(name), value), name


def test_refuses_a_bf16_family_whose_linears_it_cannot_name(tmp_path):
    """GPT-2 stores Conv1D weights [K, N] and wte/wpe tables, all 2-D: no name says which are
    linears, so write_merged quantizes bf16 checkpoints only of the model types it knows."""
    spec = build("unquantized")
    spec.config["model_type"] = "gpt2"
    spec.tensors["transformer.wte.weight"] = torch.zeros(256, 192, dtype=torch.bfloat16)
    src = save(spec, tmp_path / "src")
    with pytest.raises(ValueError, match=r"model_type 'gpt2': write_merged quantizes a bf16 "
                       r"checkpoint only where its linears are known by name, for model_type "
                       r"llama, mistral, qwen2, qwen3, qwen3_5, qwen3_5_text; others may store "
                       r"2-D weights that are not linears \(GPT-2's Conv1D, MoE routers\)"):
        write_merged(src, tmp_path / "out", scheme="per_tensor")
    assert not (tmp_path / "out").exists()


def test_progress_counts_up_to_its_total(tmp_path):
    """`fp8tower convert --write-merged` was silent for the minutes a 27B copy takes."""
    src = save(build("modelopt", preset="FP8"), tmp_path / "src")
    calls = []
    write_merged(src, tmp_path / "out", progress=lambda done, total: calls.append((done, total)))
    total = calls[0][1]
    assert calls[-1] == (total, total) and total > 10
    assert [d for d, _ in calls] == list(range(1, total + 1))
