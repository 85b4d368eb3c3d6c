"""fp8tower.convert on tiny transformers models (qwen3, qwen3_5, llama), CPU, reference backend.

The oracle is written here with plain torch ops: each converted linear's weight and input
are fake-quantized per the scheme (quantize, saturate, cast to E4M3, dequantize) and
multiplied with F.linear, in a copy of the unconverted model.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from fp8tower.formats import sqnr_db

transformers = pytest.importorskip("transformers")

from fp8tower.hf.conversion import (
    ConvertError,
    MergedProjection,
    MergedShard,
    convert,
    default_filter,
)
from fp8tower.nn.linear import Fp8Linear

E4M3, MAX = torch.float8_e4m3fn, 448.0
SCHEMES = ["per_tensor", "channel_token", "block128", "weight_only"]
VOCAB = 97


def _cfg(family):
    # hidden 160 and the k/v, b/a widths are not multiples of 128 (partial blocks, and
    # block128 groups that cannot merge exactly); intermediate 256 is.
    common = {"vocab_size": VOCAB, "hidden_size": 160, "intermediate_size": 256,
              "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "head_dim": 64, "tie_word_embeddings": False}
    if family == "qwen3_5":
        return transformers.Qwen3_5TextConfig(
            **common, layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2, linear_key_head_dim=32, linear_num_value_heads=4,
            linear_value_head_dim=48, linear_conv_kernel_dim=4)
    if family == "qwen3":
        return transformers.Qwen3Config(**common)
    return transformers.LlamaConfig(**common, attention_bias=True, mlp_bias=False)


def _model(family, seed=0):
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(_cfg(family), dtype=torch.float32)
    with torch.no_grad():  # wider than the init's std 0.02, biases included: logits vary
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
        for mod in m.modules():
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.normal_(0, 0.05)
    return m.eval()


# ----------------------------------------------------------------------------- the oracle


def _fq(t, scale):
    return (t / scale).clamp(-MAX, MAX).to(E4M3).float() * scale


def _blocks_amax(t, rows, cols):
    n, k = t.shape
    nb, kb = -(-n // rows), -(-k // cols)
    pad = torch.zeros(nb * rows, kb * cols)
    pad[:n, :k] = t.abs()
    return pad.view(nb, rows, kb, cols).amax(dim=(1, 3))


def _expand(s, rows, cols, n, k):
    return s.repeat_interleave(rows, 0)[:n].repeat_interleave(cols, 1)[:, :k]


def fake_quant_weight(w, scheme):
    w = w.float()
    if scheme == "per_tensor":
        return _fq(w, w.abs().amax() / MAX)
    if scheme in ("channel_token", "weight_only"):
        return _fq(w, w.abs().amax(dim=1, keepdim=True) / MAX)
    s = _blocks_amax(w, 128, 128) / MAX
    return _fq(w, _expand(s, 128, 128, *w.shape))


def fake_quant_act(x, scheme):
    x = x.float()
    if scheme == "per_tensor":
        return _fq(x, x.abs().amax() / MAX)
    if scheme == "channel_token":
        return _fq(x, x.abs().amax(dim=1, keepdim=True) / MAX)
    if scheme == "block128":
        s = _blocks_amax(x, 1, 128) / MAX
        return _fq(x, _expand(s, 1, 128, *x.shape))
    return x


class FakeQuantLinear(torch.nn.Module):
    def __init__(self, lin, scheme):
        super().__init__()
        self.scheme = scheme
        self.w = fake_quant_weight(lin.weight.detach(), scheme)
        self.b = None if lin.bias is None else lin.bias.detach().float()

    def forward(self, x):
        x2 = fake_quant_act(x.reshape(-1, x.shape[-1]), self.scheme)
        return F.linear(x2, self.w, self.b).to(x.dtype).reshape(*x.shape[:-1], -1)


def fake_quantized(model, scheme):
    ref = copy.deepcopy(model)
    for fqn, mod in list(ref.named_modules()):
        if isinstance(mod, torch.nn.Linear) and default_filter(mod, fqn):
            parent, _, attr = fqn.rpartition(".")
            setattr(ref.get_submodule(parent), attr, FakeQuantLinear(mod, scheme))
    return ref


def _ids(seed=1, batch=2, seq=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq), generator=g)


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3", "llama"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_converted_logits_match_fake_quant(family, scheme):
    base = _model(family)
    ids = _ids()
    with torch.no_grad():
        ref = fake_quantized(base, scheme)(ids).logits
        unmerged = convert(copy.deepcopy(base), scheme, merge=False, backend="reference")
        merged = convert(copy.deepcopy(base), scheme, merge=True, backend="reference")
        lu, lm = unmerged(ids).logits, merged(ids).logits
    assert sqnr_db(ref, lu) >= 40, (family, scheme, sqnr_db(ref, lu))
    assert sqnr_db(ref, lm) >= 40, (family, scheme, sqnr_db(ref, lm))
    # Merged and unmerged run the same quantized operands; only the GEMM's shape differs.
    assert sqnr_db(lu, lm) >= 60, sqnr_db(lu, lm)
    # Nothing left as nn.Linear but what the filter keeps (lm_head; Qwen3.5's in_proj_b/a).
    left = [n for n, m in merged.named_modules() if type(m) is torch.nn.Linear]
    kept = [f"model.layers.0.linear_attn.in_proj_{c}" for c in "ba"] if family == "qwen3_5" \
        else []
    assert left == [*kept, "lm_head"]
    assert not unmerged.fp8tower_merges


def _expected_merged(family, scheme):
    groups = {"qwen3_5": ["in_proj_qkvz", "gate_up_proj", "qkv_proj", "gate_up_proj"],
              "qwen3": ["qkv_proj", "gate_up_proj"] * 2, "llama": ["qkv_proj", "gate_up_proj"] * 2}
    out = groups[family]
    if scheme == "block128":  # k_proj (64), in_proj_qkv (320): not 128-aligned
        out = [g for g in out if g not in ("qkv_proj", "in_proj_qkvz")]
    return out


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3", "llama"])
@pytest.mark.parametrize("scheme", ["per_tensor", "block128"])
def test_merge_records_and_modules(family, scheme):
    m = convert(_model(family), scheme, backend="reference")
    got = [r["merged"] for r in m.fp8tower_merges if r["merged_ok"]]
    assert got == _expected_merged(family, scheme)
    for r in m.fp8tower_merges:
        parent = m.get_submodule(r["parent"])
        if r["merged_ok"]:
            assert isinstance(getattr(parent, r["merged"]), MergedProjection)
            assert all(isinstance(getattr(parent, n), MergedShard) for n in r["members"])
        elif r["kept"]:  # Qwen3.5's in_proj_b / in_proj_a: high precision, by choice
            assert r["merged"] == "in_proj_ba" and "none converted" in r["reason"]
            assert all(type(getattr(parent, n)) is torch.nn.Linear for n in r["members"])
        else:
            assert "128" in r["reason"]
            assert all(type(getattr(parent, n)) is Fp8Linear for n in r["members"])
    # Each merged weight is held once: the views own no tensors, so no key lies under a
    # member's name, and no two keys share a storage.
    sd = m.state_dict()
    for r in m.fp8tower_merges:
        if r["merged_ok"]:
            under = [f"{r['parent']}.{n}." for n in r["members"]]
            assert not [k for k in sd if k.startswith(tuple(under))], r
    storages = [t.untyped_storage().data_ptr() for t in sd.values()]
    assert len(set(storages)) == len(storages)


def test_merged_runs_one_gemm_per_group(monkeypatch):
    m = convert(_model("qwen3"), "channel_token", backend="reference")
    calls = []
    orig = Fp8Linear.forward

    def counting(self, x):
        calls.append(self.out_features)
        return orig(self, x)

    monkeypatch.setattr(Fp8Linear, "forward", counting)
    with torch.no_grad():
        m(_ids(batch=1, seq=3))
    # per layer: qkv (128+64+64), o, gate_up (512), down; lm_head stays nn.Linear
    assert calls == [256, 160, 512, 160] * 2
    for r in m.fp8tower_merges:  # nothing kept after the forward
        assert getattr(m.get_submodule(r["parent"]), r["merged"])._memo[2] is None


def test_requant_max_one_scale_per_group():
    base = _model("llama")
    m = convert(copy.deepcopy(base), "per_tensor", backend="reference", requant_max=True)
    qkv = m.model.layers[0].self_attn.qkv_proj.linear
    assert qkv.weight_scale.numel() == 1
    exact = convert(copy.deepcopy(base), "per_tensor", backend="reference")
    assert exact.model.layers[0].self_attn.qkv_proj.linear.weight_scale.numel() == 256
    with torch.no_grad():
        ref = fake_quantized(base, "per_tensor")(_ids()).logits
        # requant_max rounds twice: within the scheme's noise, not the same operands
        assert sqnr_db(ref, m(_ids()).logits) >= 20


@pytest.mark.parametrize("family", ["qwen3_5", "llama"])
def test_generate_merged_equals_unmerged(family):
    base = _model(family)
    ids = _ids(batch=1, seq=5)
    outs = []
    for merge in (False, True):
        m = convert(copy.deepcopy(base), "channel_token", merge=merge, backend="reference")
        outs.append(m.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0))
    assert outs[0].shape == (1, 9)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_compiled_merged_matches_eager(family):
    torch._dynamo.reset()
    m = convert(_model(family), "per_tensor", backend="reference")
    ids = _ids(batch=1, seq=4)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with torch.no_grad():
        eager = m(ids).logits
        compiled = torch.compile(m, backend=backend)(ids).logits
    assert sqnr_db(eager, compiled) >= 100
    op = torch.ops.fp8tower.fp8_linear.default
    n_ops = sum(1 for g in graphs for n in g.graph.nodes if n.target is op)
    fp8 = sum(1 for x in m.modules() if type(x) is Fp8Linear)
    assert n_ops == fp8  # each Fp8Linear (merged ones once) is one op in the graphs


def test_compiled_merged_block_fullgraph():
    torch._dynamo.reset()
    m = convert(_model("llama"), "channel_token", backend="reference")
    mlp = m.model.layers[0].mlp
    x = torch.randn(1, 3, 160)
    with torch.no_grad():
        eager = mlp(x)
        out = torch.compile(mlp, backend="eager", fullgraph=True)(x)
    assert torch.equal(eager, out)
    assert mlp.gate_up_proj._memo[2] is None


def test_view_called_on_another_tensor_is_exact():
    m = convert(_model("llama"), "channel_token", backend="reference")
    attn = m.model.layers[0].self_attn
    x, y = torch.randn(3, 160), torch.randn(3, 160)
    with torch.no_grad():
        q = attn.q_proj(x)
        k_other = attn.k_proj(y)  # not the memoized tensor: computed afresh
        full = attn.qkv_proj(y)[1]
    assert q.shape == (3, 128)
    assert torch.equal(k_other, full)


def test_filter_and_errors():
    m = convert(_model("llama"), "weight_only", backend="reference", merge=False,
                filter=lambda mod, fqn: fqn.endswith("down_proj"))
    kinds = {fqn.rsplit(".", 1)[-1]: type(x).__name__ for fqn, x in m.named_modules()
             if isinstance(x, (torch.nn.Linear, Fp8Linear))}
    assert kinds["down_proj"] == "Fp8Linear" and kinds["q_proj"] == "Linear"
    with pytest.raises(ConvertError, match="needs a scheme"):
        convert(_model("llama"))
    with pytest.raises(ValueError, match="unknown scheme 'fp4'"):
        convert(_model("llama"), "fp4")


def test_unknown_family_converts_unmerged():
    # StableLM: q/k/v on one input, but no families.GROUPS entry (OLMo was, until 2026-12-06)
    cfg = transformers.StableLmConfig(vocab_size=VOCAB, hidden_size=160, intermediate_size=256,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1)
    m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    convert(m, "channel_token", backend="reference")
    assert m.fp8tower_merges == []
    assert type(m.model.layers[0].self_attn.q_proj) is Fp8Linear


def test_package_level_exports_are_the_functions():
    import inspect

    import fp8tower
    import fp8tower.hf

    m = fp8tower.convert(_model("llama"), "weight_only", backend="reference")
    assert type(m.model.layers[0].mlp.down_proj) is Fp8Linear
    # plain functions, the same objects however they are reached; no module shadows them
    assert inspect.isfunction(fp8tower.convert) and inspect.isfunction(fp8tower.from_pretrained)
    assert fp8tower.convert is fp8tower.hf.convert is convert
    assert fp8tower.from_pretrained is fp8tower.hf.from_pretrained


# ----------------------------------------------------------------------------- more families


def _family_cfg(family):
    common = {"vocab_size": VOCAB, "hidden_size": 160, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": False}
    gdn = {"layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2,
           "linear_key_head_dim": 32, "linear_num_value_heads": 4, "linear_value_head_dim": 48,
           "linear_conv_kernel_dim": 4, "head_dim": 64}
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
           "shared_expert_intermediate_size": 128}
    if family == "qwen2":
        return transformers.Qwen2Config(**common, intermediate_size=256)
    if family == "mistral":
        return transformers.MistralConfig(**common, intermediate_size=256, head_dim=64)
    if family == "qwen3_5_moe":
        return transformers.Qwen3_5MoeTextConfig(**common, **gdn, **moe)
    # qwen3_next: layer 0 a MoE block (shared expert), layer 1 a dense MLP
    return transformers.Qwen3NextConfig(**common, **gdn, **moe, intermediate_size=256,
                                        mlp_only_layers=[1])


MORE = {  # family -> (parent, merged name) merged, per layer
    "qwen2": [("self_attn", "qkv_proj"), ("mlp", "gate_up_proj")] * 2,
    "mistral": [("self_attn", "qkv_proj"), ("mlp", "gate_up_proj")] * 2,
    "qwen3_5_moe": [("linear_attn", "in_proj_qkvz"), ("mlp.shared_expert", "gate_up_proj"),
                    ("self_attn", "qkv_proj"), ("mlp.shared_expert", "gate_up_proj")],
    "qwen3_next": [("mlp.shared_expert", "gate_up_proj"), ("self_attn", "qkv_proj"),
                   ("mlp", "gate_up_proj")],
}


@pytest.mark.parametrize("family", list(MORE))
def test_more_families_merge_and_match(family, monkeypatch):
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_config(_family_cfg(family), dtype=torch.float32)
    with torch.no_grad():
        for p in base.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08)
    base.eval()
    ids = _ids(batch=1, seq=5)
    with torch.no_grad():
        ref = fake_quantized(base, "channel_token")(ids).logits
        unmerged = convert(copy.deepcopy(base), "channel_token", merge=False, backend="reference")
        merged = convert(copy.deepcopy(base), "channel_token", backend="reference")
        lu = unmerged(ids).logits
        calls = []
        orig = Fp8Linear.forward
        monkeypatch.setattr(Fp8Linear, "forward", lambda self, x: calls.append(self) or
                            orig(self, x))
        lm = merged(ids).logits
    assert sqnr_db(ref, lu) >= 40 and sqnr_db(ref, lm) >= 40
    assert sqnr_db(lu, lm) >= 60
    made = [(r["parent"].split(".", 3)[3], r["merged"]) for r in merged.fp8tower_merges
            if r["merged_ok"]]
    assert made == MORE[family]
    # members called one after the other on one tensor: each GEMM once per forward
    fp8 = [x for x in merged.modules() if type(x) is Fp8Linear]
    assert sorted(map(id, calls)) == sorted(map(id, fp8))
    kept = [r for r in merged.fp8tower_merges if not r["merged_ok"]]
    assert all(r["kept"] and r["merged"] == "in_proj_ba" for r in kept)
    # router gates and GDN b/a stay high precision; MoE experts are not linears
    left = {n.rsplit(".", 1)[-1] for n, x in merged.named_modules() if type(x) is torch.nn.Linear}
    want = {"lm_head"} | ({"shared_expert_gate"} if "moe" in family or "next" in family
                         else set()) | ({"in_proj_a", "in_proj_b"} if family == "qwen3_5_moe"
                                        else set()) | ({"in_proj_ba"} if family == "qwen3_next"
                                                       else set())
    assert left == want


# ----------------------------------------------------------------------------- edge cases


def test_a_second_convert_is_refused():
    m = convert(_model("llama"), "channel_token", backend="reference")
    records = m.fp8tower_merges
    with pytest.raises(ConvertError, match=r"already converted \(model\.layers\.0\.self_attn\."
                                           r"q_proj is MergedShard\)"):
        convert(m, "per_tensor", backend="reference")
    assert m.fp8tower_merges is records and all(r["merged_ok"] for r in records)


def test_hooks_follow_the_converted_module():
    m = _model("llama")
    calls = []
    layer = m.model.layers[0]
    handle = layer.mlp.down_proj.register_forward_hook(lambda mod, i, o: calls.append("down"))
    layer.self_attn.q_proj.register_forward_pre_hook(lambda mod, i: calls.append("q pre"))
    layer.self_attn.k_proj.register_forward_hook(lambda mod, i, o: calls.append(o.shape[-1]))
    convert(m, "channel_token", backend="reference")
    assert type(layer.self_attn.q_proj) is MergedShard
    with torch.no_grad():
        m(_ids(batch=1, seq=3))
    assert calls == ["q pre", 64, "down"]  # dropped silently before
    handle.remove()  # the handle still reaches the hook
    calls.clear()
    with torch.no_grad():
        m(_ids(batch=1, seq=3))
    assert calls == ["q pre", 64]


def test_hooks_that_cannot_follow_are_named():
    m = _model("llama")
    m.model.layers[1].mlp.down_proj._register_state_dict_hook(lambda *a: None)
    with pytest.warns(UserWarning, match=r"model\.layers\.1\.mlp\.down_proj: replaced by "
                                         r"Fp8Linear, which does not take over "
                                         r"_state_dict_hooks"):
        convert(m, "channel_token", backend="reference")


def test_a_shared_linear_is_converted_once_for_every_parent():
    m = _model("llama")
    shared = m.model.layers[0].mlp.down_proj
    m.model.layers[1].mlp.down_proj = shared
    ids = _ids(batch=1, seq=4)
    oracle = fake_quantized(m, "channel_token")  # named_modules() lists it once: share it
    oracle.model.layers[1].mlp.down_proj = oracle.model.layers[0].mlp.down_proj
    with torch.no_grad():
        ref = oracle(ids).logits
    convert(m, "channel_token", backend="reference")
    a, b = m.model.layers[0].mlp.down_proj, m.model.layers[1].mlp.down_proj
    assert type(a) is Fp8Linear and a is b  # layer 1 kept the nn.Linear before
    with torch.no_grad():
        assert sqnr_db(ref, m(ids).logits) >= 40


def test_default_filter_keeps_small_projections_when_quantizing():
    for fqn in ("model.layers.0.linear_attn.in_proj_a", "model.layers.0.linear_attn.in_proj_b",
                "model.layers.0.linear_attn.in_proj_ba", "model.layers.3.mlp.gate",
                "model.layers.3.mlp.shared_expert_gate", "model.layers.3.block_sparse_moe.gate",
                "lm_head", "model.visual.blocks.0.attn.qkv"):
        assert not default_filter(None, fqn), fqn  # write.py calls it with None
    for fqn in ("model.layers.0.linear_attn.in_proj_qkv", "model.layers.0.mlp.gate_proj",
                "model.layers.0.self_attn.gate", "model.layers.3.mlp.shared_expert.up_proj"):
        assert default_filter(None, fqn), fqn


def test_requant_max_warning_does_not_count_kept_groups():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in_proj_ba kept by choice: nothing to warn about
        m = convert(_model("qwen3_5"), "per_tensor", requant_max=True, backend="reference")
    (ba,) = [r for r in m.fp8tower_merges if r["merged"] == "in_proj_ba"]
    assert ba["kept"] and not ba["merged_ok"]
    assert all(r["merged_ok"] for r in m.fp8tower_merges if not r["kept"])


def test_linear_subclasses_with_their_own_forward_are_left_alone():
    """Before: any nn.Linear subclass was swapped (isinstance), e.g. transformers'
    PhimoeTopKRouter, whose forward returns a tuple: the model then failed, or a subclass
    with a same-shaped output would have changed meaning silently."""
    import warnings

    from torch import nn

    from fp8tower.hf.conversion import swap_linear_layers

    class Router(nn.Linear):
        def forward(self, x):
            return super().forward(x).softmax(-1), 1

    class Plain(nn.Linear):  # no forward of its own: a linear
        pass

    model = nn.Sequential(nn.Linear(32, 32), Router(32, 32), Plain(32, 32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        swapped = swap_linear_layers(model, lambda lin, fqn: nn.Identity(),
                                     filter=lambda m, fqn: True)
    assert swapped == ["0", "2"] and type(model[1]) is Router
    assert any("Router (1: 1)" in str(w.message) for w in caught)
