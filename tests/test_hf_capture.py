"""Model capture (fp8tower.hf.capture): labels, graph/eager alignment, the manifest's op grouping and
expected launches, the launch checks, and the whole capture of tiny-hybrid on the CPU (eager
steps, top-level aten ops as 'kernels'; the CUDA-graph path needs a GPU:
benchmarks/capture_model_h200.sh)."""

from __future__ import annotations

import pytest
import torch

from fp8tower.hf.capture import GEMM_KERNELS, align, label_of
from fp8tower.trace.attribute import OpRow
from fp8tower.trace.expect import check_expected
from fp8tower.trace.manifest import Manifest

transformers = pytest.importorskip("transformers")


def test_label_of():
    assert label_of("model.layers.12.mlp.down_proj") == "layers.*.mlp.down_proj"
    assert label_of("model.layers.3") == "layers.*"
    assert label_of("lm_head") == "lm_head"
    assert label_of("") == "(model)"
    assert label_of("(step)") == "(step)"
    assert label_of("model.embed_tokens") == "embed_tokens"


def test_align_same_and_with_extra_graph_kernels():
    names, fqns = ["a", "b", "c", "d"], ["x", "x", "y", "z"]
    assert align(names, fqns, names) == (fqns, 0)
    # the graph has one kernel the eager step did not launch, and lacks "c"
    out, guessed = align(names, fqns, ["a", "b", "memset", "d"])
    assert out == ["x", "x", "x", "z"] and guessed == 1


def test_gemm_regex_counts_gemms_only():
    import re

    gemm = re.compile(GEMM_KERNELS)
    for k in ("_fp8_gemm_decode_kernel", "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT_x",
              "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize64x64x128"):
        assert gemm.search(k), k
    for k in ("_fp8_act_quant_kernel", "void at::native::reduce_kernel<512, 1>",
              "void at::native::vectorized_elementwise_kernel<4>", "splitKreduce_kernel"):
        assert not gemm.search(k), k


@pytest.mark.parametrize("nested", [False, True])
def test_text_config_without_model_type_names_it(tmp_path, nested):
    """A config.json without model_type: "transformers X has no model_type None", and an
    AttributeError where the text decoder's fields nest under text_config."""
    import json

    from fp8tower.hf.random_model import text_config
    from fp8tower.models import ConfigError
    from fp8tower.models.registry import SUPPORTED_MODEL_TYPES, load_config

    config = load_config("tiny-hybrid")
    config.pop("model_type")
    if nested:
        config = {"text_config": config}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as e:
        text_config(str(tmp_path))
    assert str(e.value) == (f"{tmp_path}: model_type: missing; expected one of "
                            f"{', '.join(SUPPORTED_MODEL_TYPES)}")


def _tiny(merge: bool):
    import torch

    from fp8tower.hf import convert
    from fp8tower.hf.random_model import random_model, text_config

    model = random_model(text_config("tiny-hybrid"), torch.device("cpu"))
    return convert(model, "per_tensor", merge=merge, backend="reference")


def test_model_ops_group_runs_and_expected_from_modules():
    from fp8tower.hf.capture import model_ops

    model = _tiny(merge=False)
    # a fake step: 2 kernels of layer 0's in_proj_qkv, 1 of in_proj_z, 3 of the GDN core,
    # then layer 1's in_proj_qkv; the MergedFp8Linear/shard nesting is not involved here
    fqns = ["model.layers.0.linear_attn.in_proj_qkv"] * 2 + [
        "model.layers.0.linear_attn.in_proj_z"] + ["model.layers.0.linear_attn"] * 3 + [
        "model.layers.1.linear_attn.in_proj_qkv", "(step)"]
    names = ["amax", "_fp8_gemm_decode_kernel", "_fp8_gemm_decode_kernel", "k1", "k2", "k1",
             "_fp8_gemm_decode_kernel", "argmax"]
    mo = model_ops(model, names, fqns, m=1)
    got = [(op.label, op.group, op.kernels) for op in mo.ops]
    assert got == [
        ("layers.*.linear_attn.in_proj_qkv", "layers.*.linear_attn.in_proj_qkvz", 2),
        ("layers.*.linear_attn.in_proj_z", "layers.*.linear_attn.in_proj_qkvz", 1),
        ("layers.*.linear_attn", "layers.*.linear_attn", 3),
        ("layers.*.linear_attn.in_proj_qkv", "layers.*.linear_attn.in_proj_qkvz", 1),
        ("(step)", "(step)", 1),
    ]
    qkv = mo.ops[0]
    assert (qkv.n, qkv.k) == (320, 256)  # tiny-hybrid's in_proj_qkv
    assert qkv.bytes == 320 * 256 + 4 + 2 * 256 + 2 * 320  # FP8 weight + scale + x + y
    # a bias is read too, as GemmProblem.bytes_moved counts it (it was left out here)
    lin = model.get_submodule("model.layers.0.linear_attn.in_proj_qkv")
    lin.bias = torch.zeros(320, dtype=torch.bfloat16)
    assert model_ops(model, names, fqns, m=1).ops[0].bytes == qkv.bytes + 2 * 320
    exp = {e["label"]: e["modules"] for e in mo.expected}
    # tiny-hybrid: 3 GDN layers, 1 attention layer, 4 MLPs
    assert exp["layers.*.linear_attn.in_proj_qkv"] == 3
    assert exp["layers.*.linear_attn.in_proj_z"] == 3
    assert exp["layers.*.mlp.gate_proj"] == 4
    assert exp["layers.*.self_attn.q_proj"] == 1
    merged = {e["label"]: e["modules"] for e in model_ops(_tiny(True), [], [], 1).expected}
    assert merged["layers.*.linear_attn.in_proj_qkvz"] == 3
    assert "layers.*.linear_attn.in_proj_qkv" not in merged


def _row(label, kernels):
    return OpRow(label, label, None, None, [], 0.0, sum(kernels.values()), 1.0, None, kernels)


def test_launch_checks_fail_on_wrong_gemm_count_and_low_share():
    man = Manifest("a", (2, 4), "cuda", [], ("s", "l"), meta={
        "expected_launches": [{"label": "q", "modules": 2, "per_module": 1,
                               "kernel_regex": GEMM_KERNELS, "what": "GEMM"}],
        "min_attributed_share": 0.99})
    ok = check_expected(man, [_row("q", {"_fp8_gemm_decode_kernel": 2.0,
                                         "_fp8_act_quant_kernel": 2.0})], (2, 4), 1.0)
    assert [c.ok for c in ok] == [True, True]
    assert "+1 other" in ok[0].message()
    bad = check_expected(man, [_row("q", {"_fp8_gemm_decode_kernel": 4.0})], (2, 4), 1.05)
    assert [c.ok for c in bad] == [False, False]  # 4 GEMMs for 2 modules; 95% named
    odd = check_expected(man, [_row("q", {"_fp8_gemm_decode_kernel": 2.0, "x": 1.0})], (2, 4))
    assert not odd[0].ok  # half a pre-pass per module
    missing = check_expected(man, [_row("other", {"g": 1.0})], (2, 4))
    assert not missing[0].ok and "no such op row" in missing[0].message()


# transformers 5.25 deprecates past_key_values= for cache= (hf/random_model.cache_kwarg)
@pytest.mark.filterwarnings("error:.*past_key_values.*:FutureWarning")
def test_capture_tiny_hybrid_on_cpu(tmp_path):
    """The whole path on the CPU: eager steps, module ranges, manifest, attribution."""
    from fp8tower.hf.capture import capture_model
    from fp8tower.trace import attribute, load_arm

    res = capture_model("tiny-hybrid", "fp8:per_tensor:merged", tmp_path / "cap",
                        steps=(1, 3), device="cpu", backend="reference", context=8)
    man = res.manifest
    assert man.device == "cpu" and man.meta["mode"] == "eager"
    # in_proj_b / in_proj_a stay bf16 (FP8 checkpoints keep them): no in_proj_ba group
    assert man.meta["merged_groups"] == {"in_proj_qkvz": 3, "qkv_proj": 1, "gate_up_proj": 4}
    labels = {op.label for op in man.ops}
    assert {"layers.*.linear_attn.in_proj_qkvz", "layers.*.linear_attn", "layers.*.self_attn",
            "layers.*.mlp.down_proj", "lm_head", "(step)"} <= labels
    assert not any(lb.endswith(".linear") for lb in labels)  # folded into the merged module
    att = attribute(load_arm(tmp_path / "cap"))
    assert not att.mismatches
    assert att.launch_checks and all(c.ok for c in att.launch_checks), [
        c.message() for c in att.launch_checks if not c.ok]
    assert att.unattributed_ms == pytest.approx(0.0, abs=1e-9)
    # no share check on the CPU (noisy CPU op times); every GEMM check is there
    assert "min_attributed_share" not in man.meta
    assert len(att.launch_checks) == len(man.meta["expected_launches"]) == 6  # no in_proj_ba
