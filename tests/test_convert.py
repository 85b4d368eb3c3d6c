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
    # Nothing left as nn.Linear but what the filter keeps (lm_head).
    left = [n for n, m in merged.named_modules() if type(m) is torch.nn.Linear]
    assert left == ["lm_head"]
    assert not unmerged.fp8tower_merges


def _expected_merged(family, scheme):
    groups = {"qwen3_5": ["in_proj_qkvz", "in_proj_ba", "gate_up_proj", "qkv_proj", "gate_up_proj"],
              "qwen3": ["qkv_proj", "gate_up_proj"] * 2, "llama": ["qkv_proj", "gate_up_proj"] * 2}
    out = groups[family]
    if scheme == "block128":  # k_proj (64), in_proj_qkv (320), in_proj_b (4): not 128-aligned
        out = [g for g in out if g not in ("qkv_proj", "in_proj_ba", "in_proj_qkvz")]
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
        else:
            assert "128" in r["reason"]
            assert all(type(getattr(parent, n)) is Fp8Linear for n in r["members"])
    # Each merged weight is held once: the views own no tensors.
    keys = list(m.state_dict())
    assert not any(k.split(".")[-2] in ("q_proj", "gate_proj", "in_proj_qkv") and
                   k.endswith("weight") and isinstance(m.get_submodule(k.rsplit(".", 1)[0]),
                                                       MergedShard) for k in keys)


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
    cfg = transformers.MistralConfig(vocab_size=VOCAB, hidden_size=160, intermediate_size=256,
                                     num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=1, head_dim=64)
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
