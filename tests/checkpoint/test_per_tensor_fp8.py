"""AutoFP8's per-tensor ``quant_method: "fp8"`` checkpoints (checkpoint/per_tensor_fp8.py):
refused fields name what was expected, and the tower spec and ``fp8tower tune --model`` pose
the keys the loaded layers look up (static or dynamic activation scale, scalar or (N,) weight
scales). Loading and the logits against an independent oracle are in test_checkpoint_load.py
and test_from_pretrained.py (ckpt_writer.CASES)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from ckpt_writer import build, save
from typer.testing import CliRunner

from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.formats import Scheme
from fp8tower.models import get_spec


def _qc(spec) -> dict:
    return spec.config["quantization_config"]


@pytest.mark.parametrize("value", [None, "Static", "token", 1])
def test_activation_scheme_is_required(tmp_path, value):
    spec = build("fp8_per_tensor", preset="static")
    if value is None:
        del _qc(spec)["activation_scheme"]
    else:
        _qc(spec)["activation_scheme"] = value
    with pytest.raises(CheckpointError, match=r"quantization_config\.activation_scheme: "
                       rf"expected 'static' or 'dynamic' .*got {value!r}"):
        open_checkpoint(save(spec, tmp_path))


def test_a_null_block_size_is_per_tensor(tmp_path):
    spec = build("fp8_per_tensor", preset="dynamic")
    _qc(spec)["weight_block_size"] = None
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.format == "fp8_per_tensor"
    assert {ck.scheme_for(f) for f in ck.linear_names()} == {Scheme.PER_TENSOR}


def test_static_without_input_scale_is_refused(tmp_path):
    spec = build("fp8_per_tensor", preset="static")
    del spec.tensors["model.layers.0.mlp.up_proj.input_scale"]
    with pytest.raises(CheckpointError, match=r"missing scale: static per_tensor activations "
                       r"need tensor 'model\.layers\.0\.mlp\.up_proj\.input_scale'"):
        open_checkpoint(save(spec, tmp_path))


def test_early_autofp8_act_scale_names_the_rename(tmp_path):
    spec = build("fp8_per_tensor", preset="static")
    for name in [n for n in spec.tensors if n.endswith(".input_scale")]:
        spec.tensors[name.replace(".input_scale", ".act_scale")] = spec.tensors.pop(name)
    with pytest.raises(CheckpointError, match=r"act_scale.*early AutoFP8 name .*'input_scale'"):
        open_checkpoint(save(spec, tmp_path))


def test_dynamic_with_stored_input_scales_warns_and_ignores_them(tmp_path):
    static = build("fp8_per_tensor", preset="static")
    _qc(static)["activation_scheme"] = "dynamic"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ck = open_checkpoint(save(static, tmp_path))
    assert any("input_scale tensor(s) are not used" in str(w.message) for w in rec)
    w = ck.load_linear("model.layers.0.self_attn.q_proj").weight
    assert w.scheme is Scheme.PER_TENSOR and w.act_scale is None


def test_modules_to_not_convert_is_read_too(tmp_path):
    ign = "model.layers.1.mlp.down_proj"
    spec = build("fp8_per_tensor", preset="dynamic", ignore=(), ignored_fqns=(ign,))
    _qc(spec)["modules_to_not_convert"] = ["lm_head", "layers.1.mlp.down_proj"]
    ck = open_checkpoint(save(spec, tmp_path))
    assert ck.is_ignored(ign) and ign not in ck.linear_names()


def test_other_fmt_is_refused(tmp_path):
    spec = build("fp8_per_tensor", preset="static")
    _qc(spec)["fmt"] = "e5m2"
    with pytest.raises(CheckpointError, match=r"quantization_config\.fmt: expected 'e4m3', "
                       "got 'e5m2'"):
        open_checkpoint(save(spec, tmp_path))


# --- the keys a model's quantization config implies -------------------------------------------


def _ct_config(weights: str, acts: str, dynamic: bool) -> dict:
    group = {"targets": ["Linear"], "format": "float-quantized",
             "weights": {"num_bits": 8, "type": "float", "strategy": weights,
                         "symmetric": True, "dynamic": False},
             "input_activations": {"num_bits": 8, "type": "float", "strategy": acts,
                                   "symmetric": True, "dynamic": dynamic}}
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "config_groups": {"group_0": group}, "ignore": ["lm_head"]}


QC = {
    "autofp8 static": ({"quant_method": "fp8", "activation_scheme": "static"}, True, False),
    "autofp8 dynamic": ({"quant_method": "fp8", "activation_scheme": "dynamic"}, False, False),
    "modelopt FP8": ({"quant_method": "modelopt", "quant_algo": "FP8"}, True, False),
    "ct tensor+tensor": (_ct_config("tensor", "tensor", False), True, False),
    "ct tensor+dynamic tensor": (_ct_config("tensor", "tensor", True), False, False),
    "ct channel+tensor": (_ct_config("channel", "tensor", False), True, True),
    "ct channel+dynamic tensor": (_ct_config("channel", "tensor", True), False, True),
    "ct FP8_DYNAMIC": (_ct_config("channel", "token", True), None, False),
}


def _config(tmp_path, qc) -> str:
    cfg = dict(build("unquantized").config, quantization_config=qc)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize("case", list(QC))
def test_spec_says_how_per_tensor_layers_are_scaled(tmp_path, case):
    qc, static, channel = QC[case]
    spec = get_spec(_config(tmp_path, qc))
    assert spec.scheme_hint == ("channel_token" if case == "ct FP8_DYNAMIC" else "per_tensor")
    assert (spec.static_act_hint, spec.channel_scale_hint) == (static, channel)


def test_spec_of_groups_that_differ_says_so(tmp_path):
    qc = _ct_config("tensor", "tensor", False)
    other = json.loads(json.dumps(qc["config_groups"]["group_0"]))
    other["targets"], other["weights"]["strategy"] = ["re:.*mlp.*"], "channel"
    other["input_activations"]["dynamic"] = True
    qc["config_groups"]["group_1"] = other
    spec = get_spec(_config(tmp_path, qc))
    assert spec.scheme_hint == "per_tensor"
    assert spec.static_act_hint is None and spec.channel_scale_hint is False
    assert any("static / dynamic activations and tensor / channel weight scales" in n
               for n in spec.notes)


def _tune_keys(monkeypatch, args):
    """The problems ``fp8tower tune`` hands pretune (faked: no GPU here), and its result."""
    from fp8tower.cli import app
    from fp8tower.tuning import tuner

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    seen = []
    monkeypatch.setattr(tuner, "pretune", lambda d, problems, **kw: seen.extend(problems) or [])
    res = CliRunner().invoke(app, ["tune", *args, "--no-ceiling", "--no-precompile", "--m", "1"])
    return seen, res


@pytest.mark.parametrize("case", list(QC))
def test_tune_model_poses_the_keys_its_layers_look_up(tmp_path, monkeypatch, case):
    qc, static, channel = QC[case]
    seen, res = _tune_keys(monkeypatch, ["--model", _config(tmp_path, qc), "--unmerged"])
    assert res.exit_code == 0, res.output
    pt = [p for p in seen if p.scheme is Scheme.PER_TENSOR]
    if static is None:  # not a per_tensor model: its own scheme only
        assert not pt and {p.scheme for p in seen} == {Scheme.CHANNEL_TOKEN}
        return
    assert pt and {p.static_act_scale for p in pt} == {static}
    # unmerged: scalar weight scales unless the config stores (N,) ones
    assert {p.channel_weight_scale for p in pt} == {channel}
    moved = (not static) or channel
    assert ("quantization config: per_tensor keys with" in res.output) == moved


def test_tune_flags_given_win_over_the_model(tmp_path, monkeypatch):
    qc = QC["autofp8 dynamic"][0]
    seen, res = _tune_keys(monkeypatch, ["--model", _config(tmp_path, qc),
                                         "--static-act-scale"])
    assert res.exit_code == 0, res.output
    assert {p.static_act_scale for p in seen} == {True}
    assert "quantization config: per_tensor keys" not in res.output


@pytest.mark.parametrize("case", ["autofp8 dynamic", "ct channel+tensor"])
def test_tune_in_context_refuses_keys_the_tower_does_not_run(tmp_path, monkeypatch, case):
    seen, res = _tune_keys(monkeypatch, ["--model", _config(tmp_path, QC[case][0]),
                                         "--in-context"])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and not seen
    assert "--in-context re-ranks the keys the tower's decode step runs" in out, out
    assert "tune without --in-context" in out


@pytest.mark.gpu
@pytest.mark.parametrize("preset", ["static", "dynamic"])
@pytest.mark.parametrize("backend", ["triton", "cublaslt"])
def test_on_a_gpu_both_activation_schemes_match_the_reference(tmp_path, preset, backend):
    """The GPU backends on AutoFP8's checkpoints, merged (q/k/v and gate/up with per-member
    weight scales), against the reference backend's float32 logits on the CPU."""
    pytest.importorskip("transformers")
    from fp8tower.formats import sqnr_db
    from fp8tower.hf.pretrained import from_pretrained

    path = save(build("fp8_per_tensor", preset=preset), tmp_path / "ck")
    ids = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(5))
    ref = from_pretrained(path, backend="reference", dtype=torch.float32)
    gpu = from_pretrained(path, device="cuda", backend=backend)
    assert [r["merged"] for r in gpu.fp8tower_merges if r["merged_ok"]] == \
        ["qkv_proj", "gate_up_proj"] * 2
    with torch.no_grad():
        want, got = ref(ids).logits, gpu(ids.cuda()).logits.float().cpu()
    assert sqnr_db(want, got) >= 30, sqnr_db(want, got)


def test_tune_hints_apply_only_where_per_tensor_keys_are_tuned(tmp_path, monkeypatch):
    """A dynamic per_tensor model tuned for another scheme: no note, and --in-context is not
    refused for a per_tensor hint it does not use (a review, 2026-12-06)."""
    from fp8tower.cli import tune as cli_tune

    qc = QC["autofp8 dynamic"][0]
    seen, res = _tune_keys(monkeypatch, ["--model", _config(tmp_path, qc), "--scheme",
                                         "block128", "--unmerged"])
    assert res.exit_code == 0, res.output
    assert {p.scheme for p in seen} == {Scheme.BLOCK128}
    assert "quantization config: per_tensor keys" not in res.output
    assert cli_tune._model_scale_keys(None, None, False, torch.bfloat16, True) == (True, False)
