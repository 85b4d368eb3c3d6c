"""Merging sibling FP8 projections: exactness, views, the cost of requant_max, errors."""

import pytest
import torch
from fp8helpers import exact_activations, random_weight

from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import Scheme, quantize_weight, sqnr_db
from fp8tower.nn.linear import Fp8Linear
from fp8tower.nn.merged import MergedFp8Linear, MergeError, MergeMode, merge_linears, merge_weights

K = 192
MIN_DB = 40.0


def _sizes(scheme):
    # block128 shards but the last must have N % 128 == 0; others: odd sizes.
    return (256, 128, 72) if scheme is Scheme.BLOCK128 else (200, 72, 40)


def _linears(scheme, sizes=None, backend="reference", k=K, act=0.05):
    act = act if scheme is Scheme.PER_TENSOR else None
    sizes = sizes or _sizes(scheme)
    # Shards of different magnitudes (1x, 8x, ...): per_tensor scales really differ.
    ws = [quantize_weight(random_weight(n, k, seed=i + 1) * (1 + 7 * (i % 2)), scheme,
                          act_scale=act) for i, n in enumerate(sizes)]
    return [Fp8Linear.from_weight(w, backend=backend) for w in ws]


def _x(m, scheme, k=K):
    if scheme is Scheme.WEIGHT_ONLY:
        return torch.randn(m, k, generator=torch.Generator().manual_seed(0)).bfloat16()
    return exact_activations(m, k, scheme, 0.05).bfloat16()


def _check_same(lins, merged, x, exact: bool):
    """``exact``: the same bits (the reference backend computes each output element alike,
    merged or not); else within MIN_DB (a Triton GEMM may split K differently at another N)."""
    outs = merged(x)
    assert len(outs) == len(lins)
    for lin, y in zip(lins, outs):
        ref = lin(x)
        assert y.shape == ref.shape
        if exact:
            assert torch.equal(y, ref)
        else:
            assert sqnr_db(ref.float(), y.float()) >= MIN_DB


@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize("m", (1, 5))
def test_exact_merge_equals_shards_reference(scheme, m):
    lins = _linears(scheme)
    _check_same(lins, merge_linears(lins), _x(m, scheme), exact=True)


@pytest.mark.parametrize("scheme", list(Scheme))
def test_exact_merge_equals_shards_triton_interpreter(scheme, interpret):
    lins = _linears(scheme, backend="triton")
    merged = merge_linears(lins)
    assert merged.backend == "triton"
    _check_same(lins, merged, _x(3, scheme), exact=False)


def test_outputs_are_views_of_one_result():
    lins = _linears(Scheme.PER_TENSOR)
    merged = merge_linears(lins, names=["q", "k", "v"])
    x = _x(4, Scheme.PER_TENSOR)
    outs = merged(x)
    whole = merged.forward_merged(x)
    assert whole.shape == (4, sum(_sizes(Scheme.PER_TENSOR)))
    base = outs[0].data_ptr()
    item = outs[0].element_size()
    offset = 0
    for y, n in zip(outs, merged.sizes):
        assert y.shape == (4, n)
        assert y.data_ptr() == base + offset * item  # inside the one (4, N_total) result
        assert y.untyped_storage().data_ptr() == outs[0].untyped_storage().data_ptr()
        offset += n
    assert merged.names == ("q", "k", "v")
    assert "q=200" in repr(merged)


def test_exact_scales_per_scheme():
    lins = _linears(Scheme.PER_TENSOR)
    w = merge_weights([lin.fp8_weight() for lin in lins])
    expected = torch.cat([lin.fp8_weight().channel_scale() for lin in lins])
    assert w.scale.shape == (sum(_sizes(Scheme.PER_TENSOR)),)
    assert torch.equal(w.scale, expected)
    assert float(w.act_scale) == pytest.approx(0.05)
    # Equal scalars stay one scalar (nothing to preserve; cheaper epilogue).
    same = [lins[0].fp8_weight(), lins[0].fp8_weight()]
    assert merge_weights(same).scale.numel() == 1
    for scheme in (Scheme.CHANNEL_TOKEN, Scheme.WEIGHT_ONLY):
        shards = [lin.fp8_weight() for lin in _linears(scheme)]
        ch = merge_weights(shards)
        assert ch.scale.shape == (312,)
        assert torch.equal(ch.scale, torch.cat([s.channel_scale() for s in shards]))
        assert torch.equal(ch.data, torch.cat([s.data for s in shards]).view(ch.data.dtype))
    shards = [lin.fp8_weight() for lin in _linears(Scheme.BLOCK128)]
    blk = merge_weights(shards)
    assert blk.scale.shape == (2 + 1 + 1, 2) and blk.shape == (456, K)
    assert torch.equal(blk.scale, torch.cat([s.scale for s in shards]))


def test_requant_max_accuracy_cost():
    """The module docstring's table: 1x and 8x shards, K=512, M=16, seeds 0-4."""
    k, m = 512, 16
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        w_small = torch.randn(256, k, generator=g) * 0.02
        w_large = torch.randn(192, k, generator=g) * 0.16
        x = torch.randn(m, k, generator=g)
        act = float(x.abs().amax()) / 448
        shards = [quantize_weight(w, "per_tensor", act_scale=act) for w in (w_small, w_large)]
        exact = merge_weights(shards, "exact")
        requant = merge_weights(shards, "requant_max")
        assert requant.scale.numel() == 1 and exact.scale.shape == (448,)

        own_db = sqnr_db(w_small, shards[0].dequantize())
        exact_db = sqnr_db(w_small, exact.dequantize()[:256])
        requant_db = sqnr_db(w_small, requant.dequantize()[:256])
        assert exact_db == own_db  # exact keeps the shard's own quantization bit for bit
        assert requant_db <= exact_db - 1.5, (seed, exact_db, requant_db)
        assert torch.equal(requant.dequantize()[256:], shards[1].dequantize())  # max: unchanged

        ref = x.double() @ w_small.double().t()
        exact_out, requant_out = (_small_out_db(x, w, ref) for w in (exact, requant))
        assert exact_out >= 28.0
        assert requant_out <= exact_out - 1.0, (seed, exact_out, requant_out)


def _small_out_db(x, w, ref):
    """SQNR of the small shard's outputs (the first 256 columns) vs the unquantized product."""
    y = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    return sqnr_db(ref, y[:, :256])


def test_requant_max_through_the_module():
    lins = _linears(Scheme.PER_TENSOR, sizes=(64, 48))
    merged = merge_linears(lins, mode="requant_max")
    assert merged.mode is MergeMode.REQUANT_MAX
    assert merged.fp8_weight().scale.numel() == 1
    x = _x(2, Scheme.PER_TENSOR)
    for lin, y in zip(lins, merged(x)):
        assert sqnr_db(lin(x).float(), y.float()) > 20.0  # close, not exact


def test_bias_is_merged():
    ws = [quantize_weight(random_weight(n, 64, seed=n), "channel_token") for n in (32, 16)]
    lins = [Fp8Linear.from_weight(w, torch.randn(w.n)) for w in ws]
    merged = merge_linears(lins)
    x = torch.randn(3, 64).bfloat16()
    for lin, y in zip(lins, merged(x)):
        assert sqnr_db(lin(x).float(), y.float()) >= MIN_DB
    with pytest.raises(MergeError, match="bias"):
        MergedFp8Linear.from_weights(ws, biases=[torch.zeros(32), None])


# ----------------------------------------------------------------------------- errors


def test_error_mismatched_k():
    a = quantize_weight(random_weight(32, 64), "channel_token")
    b = quantize_weight(random_weight(32, 96), "channel_token")
    with pytest.raises(MergeError, match=r"q has K=64, k has K=96"):
        merge_weights([a, b], names=["q", "k"])


def test_error_mismatched_scheme():
    a = quantize_weight(random_weight(32, 64), "channel_token")
    b = quantize_weight(random_weight(32, 64), "weight_only")
    with pytest.raises(MergeError, match="different schemes.*channel_token.*weight_only"):
        merge_weights([a, b])


def test_error_block128_n_not_multiple_of_128():
    ws = [quantize_weight(random_weight(n, 256), "block128") for n in (200, 128)]
    with pytest.raises(MergeError, match=r"shard qkv has N=200, not a multiple of 128"):
        merge_weights(ws, names=["qkv", "z"])
    # Only the last shard may have a partial block row.
    assert merge_weights(ws[::-1]).scale.shape == (1 + 2, 2)


def test_error_different_static_input_scales_in_exact_mode():
    a = quantize_weight(random_weight(32, 64), "per_tensor", act_scale=0.05)
    b = quantize_weight(random_weight(16, 64), "per_tensor", act_scale=0.07)
    with pytest.raises(MergeError, match=r"q=0\.05, k=0\.07.*requant_max"):
        merge_weights([a, b], names=["q", "k"])
    with pytest.warns(RuntimeWarning, match="maximum, 0.07"):
        w = merge_weights([a, b], "requant_max", names=["q", "k"])
    assert float(w.act_scale) == pytest.approx(0.07)


def test_error_static_and_dynamic_input_scales():
    a = quantize_weight(random_weight(32, 64), "per_tensor", act_scale=0.05)
    b = quantize_weight(random_weight(16, 64), "per_tensor")
    with pytest.raises(MergeError, match=r"q \(static\), k \(dynamic\)"):
        merge_weights([a, b], names=["q", "k"])


def test_error_requant_max_needs_per_tensor():
    ws = [quantize_weight(random_weight(32, 64), "channel_token") for _ in range(2)]
    with pytest.raises(MergeError, match="per_tensor only"):
        merge_weights(ws, "requant_max")


def test_error_bad_mode_and_empty_and_backends():
    with pytest.raises(ValueError, match="unknown merge mode 'max'.*exact, requant_max"):
        merge_weights([], "max")
    with pytest.raises(MergeError, match="nothing to merge"):
        merge_weights([])
    lins = _linears(Scheme.CHANNEL_TOKEN, sizes=(32, 16))
    lins[1].backend = "triton"
    with pytest.raises(MergeError, match="different backend"):
        merge_linears(lins)
