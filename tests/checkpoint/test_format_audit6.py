"""Format audit (2026-12): compressed-tensors ``naive-quantized`` FP8 groups, the W8A8
combinations vLLM accepts beside the presets, the tie-break between config groups whose regexes
both match a module (compressed-tensors': the alphabetically first), and block-FP8
``scale_fmt``. Checkpoints are written by ckpt_writer (plain torch); outputs are checked
against plain-torch fake quantization, independent of fp8tower.formats."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from ckpt_writer import (
    E4M3_MAX,
    OracleLinear,
    build,
    expand_ref,
    input_of,
    linear_shapes,
    save,
)

from fp8tower.checkpoint import CheckpointError, open_checkpoint
from fp8tower.formats import Scheme
from fp8tower.nn.linear import Fp8Linear

Q = "model.layers.0.self_attn.q_proj"
DOWN0, DOWN1 = "model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"


def _qc(spec) -> dict:
    return spec.config["quantization_config"]


def _group0(spec) -> dict:
    return _qc(spec)["config_groups"]["group_0"]


def _open_quiet(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these checkpoints is worth a warning
        return open_checkpoint(path)


def _fq(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Fake-quantize x (float32) with decode scale s: clamp to +-448, cast to E4M3, back."""
    return (x / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * s


def _oracle(x: torch.Tensor, w: torch.Tensor, mode: str, act=None) -> torch.Tensor:
    x = x.float()
    if mode == "static":
        x = _fq(x, act.float().reshape(()))
    elif mode == "dyn_tensor":
        x = _fq(x, x.abs().max() / E4M3_MAX)
    elif mode == "token":
        x = _fq(x, x.abs().amax(dim=1, keepdim=True) / E4M3_MAX)
    return x.double() @ w.double().t()


# --- 1. naive-quantized ---------------------------------------------------------------------


@pytest.mark.parametrize("preset,scheme", [("FP8", Scheme.PER_TENSOR),
                                           ("FP8_DYNAMIC", Scheme.CHANNEL_TOKEN),
                                           ("FP8_BLOCK", Scheme.BLOCK128),
                                           ("weight_only", Scheme.WEIGHT_ONLY)])
@pytest.mark.parametrize("where", ["top", "group"])
def test_ct_naive_quantized_fp8_reads_as_float_quantized(tmp_path, preset, scheme, where):
    """compressed-tensors 0.20 writes format "naive-quantized" for FP8 weight-only schemes
    (older llm-compressor for W8A8 with several weight schemes); its compressor is the one of
    "float-quantized" (an alias subclass), so the tensors are the same. Refused before."""
    spec = build("compressed_tensors", preset="FP8_DYNAMIC" if preset == "weight_only"
                 else preset)
    if preset == "weight_only":
        _group0(spec)["input_activations"] = None
    if where == "top":
        _qc(spec)["format"] = "naive-quantized"
        del _group0(spec)["format"]
    else:
        _group0(spec)["format"] = "naive-quantized"
    ck = _open_quiet(save(spec, tmp_path))
    assert ck.linear_names() == sorted(spec.reference)
    for fqn, (q, s, act) in spec.reference.items():
        w = ck.load_linear(fqn).weight
        assert w.scheme is scheme
        assert torch.equal(w.dequantize(), expand_ref(q, s)), fqn
        assert (w.act_scale is None) == (act is None)


@pytest.mark.parametrize("value", [{"type": "int", "num_bits": 8},
                                   {"type": "float", "num_bits": 4}])
def test_ct_naive_quantized_not_fp8_refused(tmp_path, value):
    """naive-quantized stores any type the scheme gives (INT8, 4-bit...): only FP8 is read."""
    spec = build("compressed_tensors", preset="FP8")
    _group0(spec)["format"] = "naive-quantized"
    _group0(spec)["weights"].update(value)
    with pytest.raises(CheckpointError, match=(
            r"config_groups.group_0.weights: expected type 'float' with num_bits 8 \(FP8\) "
            r"\(format 'naive-quantized' stores the weights in the type and bit width they "
            rf"give; fp8tower reads FP8 only\), got \{{'type': '{value['type']}', 'num_bits': "
            rf"{value['num_bits']}\}}")):
        open_checkpoint(save(spec, tmp_path))
    _group0(spec)["weights"].update(type="float", num_bits=8)  # INT8 activations: the same
    _group0(spec)["input_activations"].update(value)
    with pytest.raises(CheckpointError, match=(
            r"config_groups.group_0.input_activations: expected type 'float' with num_bits 8 "
            rf"\(FP8\), got \{{'type': '{value['type']}'")):
        open_checkpoint(save(spec, tmp_path / "acts"))


def test_ct_other_format_refused_naming_both(tmp_path):
    spec = build("compressed_tensors", preset="FP8")
    _group0(spec)["format"] = "int-quantized"
    with pytest.raises(CheckpointError, match=(
            r"config_groups.group_0.format: expected 'float-quantized' or 'naive-quantized' "
            r"with FP8 weights \(type float, num_bits 8\), got 'int-quantized'")):
        open_checkpoint(save(spec, tmp_path))


# --- 1b. the W8A8 combinations vLLM's _is_fp8_w8a8 accepts beside the presets ---------------


def _mixed(preset_weights: str, acts: dict, static: bool):
    """Channel (FP8_DYNAMIC's) or tensor (FP8's) weights under the given activations."""
    spec = build("compressed_tensors", preset="FP8_DYNAMIC" if preset_weights == "channel"
                 else "FP8")
    _group0(spec)["input_activations"].update(acts)
    g = torch.Generator().manual_seed(7)
    refs = {}
    for fqn, (q, s, _) in spec.reference.items():
        act = None
        if static:
            act = torch.tensor([(0.5 + torch.rand(1, generator=g).item()) * 4 / E4M3_MAX])
            spec.tensors[f"{fqn}.input_scale"] = act
        else:
            spec.tensors.pop(f"{fqn}.input_scale", None)
        refs[fqn] = (q, s, act)
    spec.reference = refs
    return spec


MIXED = [  # weights, input_activations, static, scheme, oracle mode, weight scale shape
    ("channel", {"strategy": "tensor", "dynamic": False}, True, Scheme.PER_TENSOR, "static"),
    ("channel", {"strategy": "tensor", "dynamic": True}, False, Scheme.PER_TENSOR, "dyn_tensor"),
    ("tensor", {"strategy": "token", "dynamic": True}, False, Scheme.CHANNEL_TOKEN, "token"),
]


@pytest.mark.parametrize("weights,acts,static,scheme,mode", MIXED)
def test_ct_mixed_combinations_compute_exactly(tmp_path, weights, acts, static, scheme, mode):
    """Channel weights + per-tensor activations (static or dynamic), tensor weights + dynamic
    per-token activations: vLLM reads them, fp8tower refused them. Each is one of fp8tower's
    schemes exactly (per_tensor with an (N,) weight scale; channel_token with the tensor scale
    expanded to (N,)): outputs match plain-torch fake quantization of x times the stored
    weight dequantized."""
    spec = _mixed(weights, acts, static)
    ck = _open_quiet(save(spec, tmp_path))
    x = torch.randn(5, 192, generator=torch.Generator().manual_seed(1)).bfloat16()
    x[1, 3] = 40.0  # an outlier: a static scale saturates it, a dynamic one does not
    for fqn, (q, s, act) in spec.reference.items():
        assert ck.scheme_for(fqn) is scheme
        w = ck.load_linear(fqn).weight
        n = q.shape[0]
        assert w.scheme is scheme and tuple(w.scale.shape) == (n,)
        assert torch.equal(w.dequantize(), expand_ref(q, s)), fqn
        assert (w.act_scale is None) == (act is None)
        if q.shape[1] != 192:
            continue
        y = Fp8Linear.from_weight(w, backend="reference", out_dtype=torch.float32)(x)
        ref = _oracle(x, expand_ref(q, s), mode, act)
        torch.testing.assert_close(y.double(), ref, rtol=0, atol=1e-6 * ref.abs().max().item())


def test_ct_channel_static_tensor_from_pretrained_matches_oracle(tmp_path):
    """End to end, merges included (siblings keep their (N,) weight scales and share their
    calibrated input scale): logits match a transformers model holding the dequantized
    weights with x fake-quantized by the stored input scales."""
    transformers = pytest.importorskip("transformers")
    from fp8tower.formats import sqnr_db
    from fp8tower.hf.pretrained import from_pretrained

    spec = _mixed("channel", {"strategy": "tensor", "dynamic": False}, False)
    acts = {}
    for fqn, (q, s, _) in spec.reference.items():  # siblings share one, as calibrated
        act = acts.setdefault(input_of(fqn), torch.tensor([(2.0 + len(acts)) / E4M3_MAX]))
        spec.tensors[f"{fqn}.input_scale"] = act.clone()
        spec.reference[fqn] = (q, s, act)
    path = save(spec, tmp_path / "ck")
    cfg = dict(spec.config)
    cfg.pop("quantization_config")
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    oracle = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    oracle.load_state_dict({n: t.float() for n, t in spec.tensors.items()
                            if t.dtype != torch.float8_e4m3fn and not n.endswith("_scale")},
                           strict=False)
    for fqn in linear_shapes(spec.config):
        q, s, act = spec.reference[fqn]
        parent, _, attr = fqn.rpartition(".")
        setattr(oracle.get_submodule(parent), attr, OracleLinear(expand_ref(q, s), act, "static"))
    ids = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = from_pretrained(path, backend="reference", dtype=torch.float32)
    assert [r["merged"] for r in m.fp8tower_merges if r["merged_ok"]] == ["qkv_proj",
                                                                          "gate_up_proj"] * 2
    with torch.no_grad():
        assert sqnr_db(oracle(ids).logits, m(ids).logits) >= 40


@pytest.mark.parametrize("weights,acts,why", [
    ("block", {"strategy": "tensor", "dynamic": False},
     r"block weights pair with dynamic 1x128 activation groups only \(block128\)"),
    ("block", {"strategy": "token", "dynamic": True},
     r"block weights pair with dynamic 1x128 activation groups only \(block128\)"),
    ("channel", {"strategy": "group", "group_size": 128, "dynamic": True},
     (r"channel weights with activation groups: fp8tower's group activations \(block128\) "
      r"need 128x128 block weight scales")),
])
def test_ct_unrepresentable_combinations_refused_saying_why(tmp_path, weights, acts, why):
    spec = build("compressed_tensors", preset="FP8_BLOCK" if weights == "block"
                 else "FP8_DYNAMIC")
    _group0(spec)["input_activations"].update(acts)
    with pytest.raises(CheckpointError, match=(
            rf"config_groups.group_0: expected a combination fp8tower computes exactly; {why}, "
            rf"got \{{'weights.strategy': '{weights}', 'input_activations.strategy': "
            rf"'{acts['strategy']}'")):
        open_checkpoint(save(spec, tmp_path))


# --- 2. overlapping regex targets: compressed-tensors' tie-break --------------------------


def _tie_spec():
    """Tensor weights; group_0 (listed first) quantizes every mlp linear's input dynamically,
    group_1 the down_proj's with its static input_scale, and the rest (Linear)."""
    spec = build("compressed_tensors", preset="FP8")
    static = _group0(spec)
    dynamic = json.loads(json.dumps(static))
    dynamic["input_activations"]["dynamic"] = True
    dynamic["targets"] = ["re:.*mlp.*"]
    static["targets"] = [r"re:.*down_proj$", "Linear"]
    _qc(spec)["config_groups"] = {"group_0": dynamic, "group_1": static}
    for fqn in spec.reference:  # gate/up: dynamic, no input scale stored
        if fqn.endswith(("gate_proj", "up_proj")):
            del spec.tensors[f"{fqn}.input_scale"]
    return spec


def test_ct_regex_tie_takes_alphabetically_first_and_warns(tmp_path):
    """compressed-tensors (utils/match.py match_targets: targets sorted by ("re:" in t, t);
    apply_quantization_config takes the first) applies ``re:.*down_proj$`` (group_1) to the
    down_proj, before ``re:.*mlp.*`` (group_0), whatever their config order: the static input
    scale it stored is used. fp8tower took the first group in config order (vLLM's rule):
    dynamic, the stored input_scale unused. A warning names the module and both groups."""
    spec = _tie_spec()
    with pytest.warns(UserWarning) as record:
        ck = open_checkpoint(save(spec, tmp_path))
    msgs = [str(w.message) for w in record]
    tie = [m for m in msgs if "both match" in m]
    assert len(tie) == 1, msgs
    assert (f"config_groups 'group_1' ('re:.*down_proj$') and 'group_0' ('re:.*mlp.*') both "
            f"match module '{DOWN0}' by regex (and 1 other stored FP8 module(s)): fp8tower "
            "applies 'group_1' (per_tensor), as compressed-tensors does") in tie[0]
    assert ("vLLM takes the first matching target in config order, 'group_0' (per_tensor), "
            "and reads these modules differently") in tie[0]
    assert not any("input_scale" in m for m in msgs), msgs  # every stored one is used
    assert ck.group_for(DOWN0).name == "group_1"
    for fqn in (DOWN0, DOWN1):
        w = ck.load_linear(fqn).weight
        assert w.act_scale is not None
        assert float(w.act_scale) == float(spec.tensors[f"{fqn}.input_scale"])
    assert ck.load_linear("model.layers.0.mlp.up_proj").weight.act_scale is None
    assert ck.load_linear(Q).weight.act_scale is not None


def test_ct_regex_tie_in_alphabetical_order_still_warned(tmp_path):
    """Listed alphabetically, vLLM and compressed-tensors agree; the groups still overlap."""
    spec = _tie_spec()
    groups = _qc(spec)["config_groups"]
    _qc(spec)["config_groups"] = {"group_1": groups["group_1"], "group_0": groups["group_0"]}
    with pytest.warns(UserWarning, match=r"both match module .*vLLM \(first in config order\) "
                      r"takes it too"):
        ck = open_checkpoint(save(spec, tmp_path))
    assert ck.group_for(DOWN0).name == "group_1"


def test_ct_no_overlap_no_warning(tmp_path):
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    _group0(spec)["targets"] = ["re:.*mlp.*", "re:.*self_attn.*"]  # two regexes, one group
    _open_quiet(save(spec, tmp_path))


def test_ct_match_rule():
    from fp8tower.quant_rules import ct_best_group, ct_match

    # the alphabetically first regex, whatever the config order; exact before regex
    assert ct_best_group([["re:a.b"], ["re:a"]], ["a.b"]) == 1
    assert ct_best_group([["re:a"], ["re:a.b"]], ["a.b"]) == 0
    assert ct_best_group([["re:a"], ["a.b"]], ["a.b"]) == 1
    m = ct_match([["re:.*mlp.*"], ["re:.*down_proj$"], ["Linear"]], ["x.mlp.down_proj"])
    assert (m.group, m.target, m.rank) == (1, "re:.*down_proj$", 1)
    assert m.tied == ((0, "re:.*mlp.*"),) and (m.vllm_group, m.vllm_target) == (0, "re:.*mlp.*")
    m = ct_match([["re:.*mlp.*"], ["x.mlp.down_proj"]], ["x.mlp.down_proj"])
    assert (m.group, m.rank, m.tied, m.vllm_group) == (1, 0, (), 0)
    m = ct_match([["Linear"], ["re:.*attn.*"]], ["x.mlp.up"])
    assert (m.group, m.rank, m.tied, m.vllm_group) == (0, 2, (), 0)


def test_quant_policy_follows_the_tie_break():
    """The tower specs (models/quant.py) share the rule: of two tying regexes the
    alphabetically first group decides whether a linear is FP8."""
    from fp8tower.models.quant import parse_quant_config

    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}
    int8 = dict(fp8, type="int")
    token = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}
    qc = {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"targets": ["re:.*mlp.*"], "weights": int8, "input_activations": token},
        "group_1": {"targets": [r"re:.*down_proj$"], "weights": fp8,
                    "input_activations": token}}}
    policy = parse_quant_config(qc)
    assert policy.is_fp8("layers.0.mlp.down_proj", default=False)  # group_1: ".*d" < ".*m"
    assert not policy.is_fp8("layers.0.mlp.up_proj", default=True)  # group_0: INT8


# --- 3. block FP8 scale_fmt ----------------------------------------------------------------


def test_block_fp8_scale_fmt_ue8m0_warns_once(tmp_path):
    """DeepSeek-V3.1/3.2 and GLM FP8 configs say scale_fmt "ue8m0": their reference rounds the
    1x128 activation scales to powers of two; fp8tower does not (amax/448): said once at open,
    with the measured effect. The weights (power-of-two scales, stored fp32) load exactly."""
    spec = build("block_fp8")
    for fqn, (q, s, act) in list(spec.reference.items()):
        s2 = torch.exp2(torch.ceil(torch.log2(s)))  # as V3.1 stores them
        spec.tensors[f"{fqn}.weight_scale_inv"] = s2
        spec.reference[fqn] = (q, s2, act)
    _qc(spec)["scale_fmt"] = "ue8m0"
    with pytest.warns(UserWarning) as record:
        ck = open_checkpoint(save(spec, tmp_path))
    msgs = [str(w.message) for w in record if "scale_fmt" in str(w.message)]
    assert len(msgs) == 1
    assert "quantization_config.scale_fmt 'ue8m0'" in msgs[0]
    assert "2^ceil(log2(max(amax, 1e-4) / 448))" in msgs[0] and "amax / 448" in msgs[0]
    assert "31.7 vs 31.6 dB" in msgs[0]
    for fqn, (q, s, _) in spec.reference.items():
        assert torch.equal(ck.load_linear(fqn).weight.dequantize(), expand_ref(q, s, True))


def test_block_fp8_scale_fmt_null_quiet(tmp_path):
    spec = build("block_fp8")
    _qc(spec)["scale_fmt"] = None
    _open_quiet(save(spec, tmp_path))


@pytest.mark.parametrize("value", ["e8m0", "UE8M0", 8])
def test_block_fp8_unknown_scale_fmt_refused(tmp_path, value):
    spec = build("block_fp8")
    _qc(spec)["scale_fmt"] = value
    with pytest.raises(CheckpointError, match=(
            rf"config.json: quantization_config.scale_fmt: expected null or 'ue8m0' "
            rf"\(power-of-two scales, DeepSeek-V3.1 / V3.2\); fp8tower knows no other scale "
            rf"format, got {value!r}")):
        open_checkpoint(save(spec, tmp_path))


# --- 4. what else reads these configs: the tower spec's scheme hint, write_merged ------------


@pytest.mark.parametrize("weights,acts,hint", [
    ("channel", {"strategy": "tensor", "dynamic": False}, "per_tensor"),
    ("channel", {"strategy": "token", "dynamic": True}, "channel_token"),
    ("tensor", {"strategy": "token", "dynamic": True}, "channel_token"),
    ("tensor", {"strategy": "tensor", "dynamic": False}, "per_tensor"),
])
def test_quant_policy_hints_the_scheme_the_loader_reads(weights, acts, hint):
    """`tune` / `bench tower --quant-config` take the spec's hint: it follows the activations as
    the loader maps them (before: channel weights said channel_token, tensor per_tensor)."""
    from fp8tower.models.quant import parse_quant_config

    w = {"num_bits": 8, "type": "float", "strategy": weights, "symmetric": True}
    a = {"num_bits": 8, "type": "float", **acts}
    qc = {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"targets": ["Linear"], "weights": w, "input_activations": a}}}
    assert parse_quant_config(qc).scheme_hint == hint


def test_write_merged_refuses_per_row_per_tensor_scales_by_name(tmp_path):
    """Channel weights under per-tensor activations load as per_tensor with an (N,) scale,
    which fp8tower's format cannot store: refused naming the module (before: a RuntimeError
    from reshape, "shape '[]' is invalid for input of size 320")."""
    from fp8tower.hf.conversion import ConvertError
    from fp8tower.hf.write import write_merged

    spec = _mixed("channel", {"strategy": "tensor", "dynamic": False}, True)
    src = save(spec, tmp_path / "src")
    with pytest.raises(ConvertError, match=r"a per_tensor weight with a scale per row, "
                                           r"shape \(\d+,\).*keep the source checkpoint"):
        write_merged(src, tmp_path / "out")


def test_ct_overlap_of_groups_that_read_alike_is_quiet(tmp_path):
    """Two groups whose regexes tie but that read their tensors alike (same scheme, weight
    strategy, static x) give the same layer either way: no warning (a review, 2026-12-06)."""
    spec = build("compressed_tensors", preset="FP8_DYNAMIC")
    g0 = _group0(spec)
    g0["targets"] = ["re:.*mlp.*"]
    _qc(spec)["config_groups"]["group_1"] = {**json.loads(json.dumps(g0)),
                                             "targets": ["re:.*down_proj$", "re:.*attn.*",
                                                         "re:.*linear_attn.*"]}
    _open_quiet(save(spec, tmp_path))
