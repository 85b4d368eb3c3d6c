"""The shipped Qwen3.5-27B spec reproduces the report's facts exactly."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fp8tower.models import get_spec, list_models, load_config


@pytest.fixture(scope="module")
def spec():
    return get_spec("qwen3.5-27b")


def test_shipped_models():
    assert {"qwen3.5-27b", "tiny-hybrid"} <= set(list_models())
    assert load_config("qwen3.5-27b")["text_config"]["hidden_size"] == 5120
    assert get_spec("Qwen3.5-27B.json").name == "qwen3.5-27b"


def test_layers(spec):
    assert spec.hidden_size == 5120 and spec.num_layers == 64
    assert spec.layer_types.count("linear_attention") == 48
    full = [i for i, t in enumerate(spec.layer_types) if t == "full_attention"]
    assert full == list(range(3, 64, 4))
    assert spec.intermediate_size == 17408 and spec.mlp_in_scope


def test_fp8_tower_is_208_gemms(spec):
    gemms = spec.gemms()
    assert len(gemms) == 208 == 48 * 3 + 16 * 4
    assert Counter(g.members[0].proj for g in gemms) == {
        "in_proj_qkv": 48, "in_proj_z": 48, "out_proj": 48,
        "q_proj": 16, "k_proj": 16, "v_proj": 16, "o_proj": 16,
    }
    assert all(g.fp8 and not g.merged for g in gemms)


def test_shapes(spec):
    by_proj = {(lin.proj): (lin.n, lin.k) for lin in spec.linears(fp8_only=True)}
    assert by_proj == {
        "in_proj_qkv": (10240, 5120), "in_proj_z": (6144, 5120), "out_proj": (5120, 6144),
        "q_proj": (12288, 5120), "k_proj": (1024, 5120), "v_proj": (1024, 5120),
        "o_proj": (5120, 6144),
    }
    assert spec.shapes() == {
        (10240, 5120): 48, (6144, 5120): 48, (5120, 6144): 64, (12288, 5120): 16,
        (1024, 5120): 32,
    }


def test_merged_shapes(spec):
    assert spec.shapes(merged=True) == {(16384, 5120): 48, (5120, 6144): 64, (14336, 5120): 16}
    assert spec.shapes("all", merged=True) == {
        (16384, 5120): 48, (5120, 6144): 64, (34816, 5120): 64, (5120, 17408): 64,
        (14336, 5120): 16,
    }
    assert len(spec.gemms(merged=True)) == 48 * 2 + 16 * 2


def test_bytes(spec):
    assert spec.fp8_bytes() == 7_214_202_880
    assert spec.fp8_bytes(("gdn",)) == 48 * (10240 + 6144 + 6144) * 5120
    mlp = spec.fp8_bytes(("mlp",))
    assert mlp == 64 * 3 * 17408 * 5120
    assert spec.fp8_bytes("all") == 7_214_202_880 + mlp


def test_small_gdn_projections_are_modelled_but_not_fp8(spec):
    ab = [lin for lin in spec.linears() if lin.proj in ("in_proj_a", "in_proj_b")]
    assert len(ab) == 96
    assert all((lin.n, lin.k, lin.fp8) == (48, 5120, False) for lin in ab)
    assert any("in_proj_b / in_proj_a" in n for n in spec.notes)


def test_execution_order_names_inputs_and_groups(spec):
    layer0 = [lin for lin in spec.linears("all") if lin.layer == 0]
    assert [lin.proj for lin in layer0] == [
        "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj",
        "gate_proj", "up_proj", "down_proj",
    ]
    assert [lin.name for lin in layer0][:1] == ["layers.0.linear_attn.in_proj_qkv"]
    assert spec.module_name(layer0[0]) == "model.language_model.layers.0.linear_attn.in_proj_qkv"
    inputs = {lin.proj: lin.input for lin in layer0}
    assert inputs["in_proj_qkv"] == inputs["in_proj_z"] == "layers.0.hidden_norm"
    assert inputs["out_proj"] == "layers.0.gdn_core_out"
    assert inputs["gate_proj"] == "layers.0.post_attn_norm"
    assert inputs["down_proj"] == "layers.0.mlp_act"
    groups = {lin.proj: lin.merge_group for lin in layer0}
    assert groups["in_proj_qkv"] == groups["in_proj_z"] == "layers.0.gdn_in"
    assert groups["in_proj_a"] == "layers.0.gdn_ba" and groups["out_proj"] is None
    assert groups["gate_proj"] == groups["up_proj"] == "layers.0.gate_up"

    layer3 = [lin for lin in spec.linears() if lin.layer == 3]
    assert [lin.name for lin in layer3] == [f"layers.3.self_attn.{p}_proj" for p in "qkvo"]
    assert {lin.merge_group for lin in layer3[:3]} == {"layers.3.qkv"}
    assert layer3[3].input == "layers.3.attn_core_out"


def test_merge_groups(spec):
    groups = spec.merge_groups()
    assert len(groups) == 64
    assert list(groups)[:4] == ["layers.0.gdn_in", "layers.1.gdn_in", "layers.2.gdn_in",
                                "layers.3.qkv"]
    assert [m.proj for m in groups["layers.3.qkv"]] == ["q_proj", "k_proj", "v_proj"]
    assert "layers.0.gdn_ba" not in groups  # not FP8
    everything = spec.merge_groups("all", fp8_only=False)
    assert sum(m.n for m in everything["layers.0.gdn_ba"]) == 96
    assert sum(m.n for m in everything["layers.7.gate_up"]) == 34816
    first = spec.gemms(merged=True)[0]
    assert (first.name, first.n, first.k, first.input) == ("layers.0.gdn_in", 16384, 5120,
                                                          "layers.0.hidden_norm")


def test_import_needs_no_torch():
    # fp8tower.models alone, with torch made unimportable (the parent package is stubbed so
    # that only this package's imports are tested).
    pkg = Path(__file__).resolve().parents[2] / "src" / "fp8tower"
    code = f"""
import sys, types
sys.modules["torch"] = None
stub = types.ModuleType("fp8tower"); stub.__path__ = [{str(pkg)!r}]
sys.modules["fp8tower"] = stub
import fp8tower.models as m
assert m.get_spec("qwen3.5-27b").fp8_bytes() == 7214202880
"""
    subprocess.run([sys.executable, "-c", code], check=True)
