"""Bad inputs to fp8_linear, Fp8Linear and MergedFp8Linear raise a clear error (never a
silently wrong result): biases, loaded dtypes, act_scale, out_dtype, sizes, weight tying."""

import pytest
import torch
from torch import nn

from fp8tower.formats import quantize_weight, sqnr_db
from fp8tower.nn.linear import Fp8Linear, fp8_linear
from fp8tower.nn.merged import MergedFp8Linear

N, K = 128, 256


def _w(scheme="channel_token", n=N, k=K, seed=0):
    g = torch.Generator().manual_seed(seed)
    return quantize_weight(torch.randn(n, k, generator=g), scheme)


def _x(m=3, dtype=torch.bfloat16):
    return torch.randn(m, K, generator=torch.Generator().manual_seed(1)).to(dtype)


def _mod(bias=True, scheme="channel_token", **kw):
    return Fp8Linear.from_weight(_w(scheme), torch.randn(N) if bias else None,
                                 backend="reference", **kw)


# ----------------------------------------------------------------------------- 1: bias


@pytest.mark.parametrize("bias", [torch.ones(1), torch.ones(N - 1), torch.ones(3, N),
                                  torch.tensor(1.0), torch.arange(N),
                                  torch.ones(N, dtype=torch.bool), torch.ones(N, device="meta")],
                         ids=["1", "N-1", "3xN", "0-dim", "int64", "bool", "meta"])
def test_fp8_linear_refuses_a_bad_bias(bias):
    with pytest.raises(ValueError, match="bias"):
        fp8_linear(_x(), _w(), bias=bias, backend="reference")


def test_fp8_linear_refuses_a_strided_bias():
    with pytest.raises(ValueError, match="contiguous"):
        fp8_linear(_x(), _w(), bias=torch.arange(2.0 * N)[::2], backend="reference")


@pytest.mark.parametrize("bias", [torch.ones(1), torch.arange(2.0 * N)[::2]], ids=["1", "strided"])
def test_triton_never_sees_a_bad_bias(interpret, bias):
    with pytest.raises(ValueError, match="bias"):
        fp8_linear(_x(2), _w(), bias=bias, backend="triton")


def test_module_bias_checked_and_made_contiguous(interpret):
    w, strided = _w(), torch.arange(2.0 * N)[::2]
    with pytest.raises(ValueError, match="bias"):
        Fp8Linear.from_weight(w, torch.ones(1), backend="reference")
    mod = Fp8Linear.from_weight(w, strided, backend="triton")
    assert mod.bias.is_contiguous()
    want = fp8_linear(_x(2), w, bias=strided.contiguous(), backend="reference").float()
    assert sqnr_db(want, mod(_x(2)).float()) > 30  # a bias read as contiguous: about 6 dB
    with pytest.raises(ValueError, match="bias"):
        mod.bias = torch.ones(1)
    mod.bias = strided
    assert mod.bias.is_contiguous() and torch.equal(mod.bias, strided)
    mod.bias = None
    assert mod.bias is None


def test_merged_biases_match_their_shards():
    wa, wb = _w(n=128), _w(n=64, seed=1)
    with pytest.raises(ValueError, match="bias of shard a"):
        MergedFp8Linear.from_weights([wa, wb], ["a", "b"], backend="reference",
                                     biases=[torch.randn(64), torch.randn(128)])
    for biases in ([torch.randn(1)], [torch.randn(192)], [None], [torch.randn(128)] * 3):
        with pytest.raises(ValueError, match="biases"):
            MergedFp8Linear.from_weights([wa, wb], ["a", "b"], biases=biases, backend="reference")
    ba, bb = torch.randn(128), torch.randn(64)
    m = MergedFp8Linear.from_weights([wa, wb], ["a", "b"], biases=[ba, bb], backend="reference")
    assert torch.equal(m.linear.bias, torch.cat([ba, bb]))


# ----------------------------------------------------------------------------- 2: load dtypes


@pytest.mark.parametrize("key,value", [
    ("weight", lambda sd: sd["weight"].float().bfloat16()),
    ("weight", lambda sd: sd["weight"].float().to(torch.float8_e5m2)),
    ("weight_scale", lambda sd: sd["weight_scale"].to(torch.int32)),
    ("bias", lambda sd: sd["bias"].to(torch.int64)),
])
def test_load_state_dict_refuses_a_wrong_dtype(key, value):
    sd = _mod().state_dict()
    sd[key] = value(sd)
    mod = Fp8Linear(K, N, "channel_token", bias=True, backend="reference")
    with pytest.raises(RuntimeError, match=rf"{key} has dtype {sd[key].dtype}"):
        mod.load_state_dict(sd)


def test_load_state_dict_accepts_fp8_and_exact_scale_upcasts():
    src = _mod()
    sd = src.state_dict()
    sd["weight_scale"] = sd["weight_scale"].bfloat16().float().bfloat16()
    mod = Fp8Linear(K, N, "channel_token", bias=True, backend="reference")
    mod.load_state_dict(sd)
    assert mod.weight_scale.dtype == torch.float32 and torch.equal(mod.weight, src.weight)


# ----------------------------------------------------------------------------- 3: act_scale


@pytest.mark.parametrize("scheme", ["channel_token", "block128", "weight_only"])
@pytest.mark.parametrize("act_scale", [0.1, torch.tensor(0.1)], ids=["number", "tensor"])
def test_act_scale_applies_to_per_tensor_only(scheme, act_scale):
    with pytest.raises(ValueError, match=f"only applies to per_tensor, not {scheme}"):
        fp8_linear(_x(), _w(scheme), act_scale=act_scale, backend="reference")


def test_tensor_act_scale_must_be_one_value():
    with pytest.raises(ValueError, match=r"act_scale must be one value, got shape \(3,\)"):
        fp8_linear(_x(), _w("per_tensor"), act_scale=torch.ones(3), backend="reference")
    y = fp8_linear(_x(), _w("per_tensor"), act_scale=torch.ones(1), backend="reference")
    assert y.shape == (3, N)


# ----------------------------------------------------------------------------- 4: out_dtype


BAD_OUT = [torch.int32, torch.float8_e4m3fn, torch.float64, "bfloat16"]


@pytest.mark.parametrize("out_dtype", BAD_OUT, ids=str)
def test_out_dtype_is_a_float_output_dtype(out_dtype):
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        fp8_linear(_x(), _w(), out_dtype=out_dtype, backend="reference")
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        _mod(out_dtype=out_dtype)
    mod = _mod()
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        mod.out_dtype = out_dtype
    assert mod.out_dtype is None
    mod.out_dtype = torch.float16
    assert mod(_x()).dtype == torch.float16


# ----------------------------------------------------------------------------- 5: sizes


@pytest.mark.parametrize("k,n", [(-1, 128), (0, 128), (128, 0), (128.0, 128), (True, 128)])
def test_features_are_positive_ints(k, n):
    with pytest.raises(ValueError, match="must be a positive int"):
        Fp8Linear(k, n, "per_tensor", backend="reference")


@pytest.mark.parametrize("sizes", [[200, -8, 0], [100, 92.0, 0], [96, 96]])
def test_merged_split_sizes(sizes):
    lin = Fp8Linear(K, 192, "channel_token", backend="reference")
    with pytest.raises(ValueError, match="shard sizes"):
        MergedFp8Linear(lin, ["a", "b", "c"], sizes)


# ----------------------------------------------------------------------------- 6: tying


def test_fp8_buffers_cannot_become_parameters():
    mod = _mod()
    for name in ("weight", "weight_scale", "bias"):
        with pytest.raises(TypeError, match=f"Fp8Linear.{name} is a buffer"):
            setattr(mod, name, nn.Parameter(getattr(mod, name).float()))
    assert mod(_x()).shape == (3, N)  # unchanged, still runs


def test_tie_weights_on_an_fp8_lm_head_is_a_clear_error():
    transformers = pytest.importorskip("transformers")
    from fp8tower.hf.conversion import convert

    cfg = transformers.Qwen3Config(vocab_size=97, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, head_dim=64, tie_word_embeddings=True)
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    convert(m, "channel_token", backend="reference", filter=lambda mod, fqn: True)
    assert isinstance(m.lm_head, Fp8Linear)
    with pytest.raises(TypeError, match="tie_weights"):
        m.tie_weights()
    ids = torch.randint(0, 97, (1, 5))
    with torch.no_grad():
        assert m(ids).logits.shape == (1, 5, 97)  # the FP8 head is untouched
