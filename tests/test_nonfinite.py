"""A NaN or an inf in x, on the GPU (marker: gpu): every backend, every way the Triton GEMM
takes x, and Fp8Linear's planned call give a non-finite output exactly where the reference
does, and the reference's values elsewhere.

What the reference does (formats.quantize_activation, then dequantized x @ W): a NaN in a
token's row (channel_token), group (block128) or anywhere (per_tensor with a static scale)
makes that token's row NaN; per_tensor's dynamic scale is the amax of the whole batch, so a
NaN anywhere makes it NaN and every row of the batch NaN; per_tensor's static scale
saturates an inf to +-448 (a finite row); a dynamic scale of an inf is inf, so that row is
NaN (0 * inf); weight_only multiplies x as it is
(+-inf or NaN; our split makes the row NaN: non-finite either way). Until 2026-12-01 the
Triton quantization's clamp returned a bound for a NaN, so such rows came out finite
(results/cluster_split_H200_2026-12-01/call6/tests.log). The CPU interpreter cannot test
the whole path: its fp32 -> FP8 cast of a NaN gives a finite value; it tests the fp32
quotient before that cast (the last test).
"""

import warnings

import pytest
import torch

from fp8tower import backends
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import Scheme, quantize_weight, sqnr_db
from fp8tower.kernels import configs as kconfigs
from fp8tower.kernels.fp8_gemm import _div_by_scale, _saturate
from fp8tower.nn.linear import Fp8Linear
from fp8tower.problem import GemmProblem

# (N, K, M, poison): M = 1 takes the one-token paths (fp8_gemm.row1); 200x328 the masked
# tiles. Every case compiles each way of taking x: the first took 106 s on the H200.
CASES = [(1024, 5120, 1, "nan"), (1024, 5120, 1, "inf"), (1024, 5120, 1, "-inf"),
         (1024, 5120, 4, "mixed"), (1024, 5120, 16, "mixed"), (200, 328, 4, "mixed")]
# (row, column as a fraction of K, value) written into x; rows past M are left out
POISON = {"nan": [(0, 1 / 3, "nan")], "inf": [(0, 1 / 2, "inf")], "-inf": [(0, 0.0, "-inf")],
          "mixed": [(0, 1 / 3, "nan"), (1, 1 / 2, "inf"), (2, 0.0, "-inf")]}


def _operands(n, k, scheme, m, poison, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    for row, frac, value in POISON[poison]:
        if row < m:
            x[row, int(frac * (k - 1))] = float(value)
    act = 0.02 if scheme is Scheme.PER_TENSOR else None
    return quantize_weight(w, scheme, act_scale=act), x


def _x_modes(p: GemmProblem) -> list[dict]:
    """The Triton default, then one config of each other way of taking x (pre-pass or not,
    fused amax, PDL, weight_only's split in the GEMM) from the tuner's space."""
    out, seen = [], set()
    for c in kconfigs.configs(p):
        key = tuple(c.get(f) for f in ("prequant", "fused_amax", "pdl", "wo_mode"))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _needs_build(be, p) -> bool:
    """A CUTLASS library not built yet (a build takes minutes; tests/test_gpu.py builds and
    checks them): CUTLASS takes the same FP8 x from our pre-pass as cuBLASLt, checked here."""
    if be.name != "cutlass":
        return False
    from fp8tower.backends import cutlass

    return not cutlass.library_path(cutlass.spec_of(be.default_config(p))).exists()


def _check(name, ref, y):
    bad_ref, bad = ~torch.isfinite(ref), ~torch.isfinite(y.double())
    assert torch.equal(bad, bad_ref), (
        f"{name}: non-finite at {bad.nonzero()[:4].tolist()} ({int(bad.sum())}), reference at "
        f"{bad_ref.nonzero()[:4].tolist()} ({int(bad_ref.sum())})")
    rows = ~bad_ref.any(dim=1)
    if rows.any():
        db = sqnr_db(ref[rows], y[rows])
        assert db >= 40, f"{name}: finite rows {db:.1f} dB"


@pytest.mark.gpu
@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
@pytest.mark.parametrize("n,k,m,poison", CASES, ids=lambda v: str(v))
def test_nonfinite_x_as_the_reference(n, k, m, poison, scheme):
    w, x = _operands(n, k, scheme, m, poison, seed=n + m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    assert (~torch.isfinite(ref)).any() or (scheme is Scheme.PER_TENSOR and poison != "nan"), \
        "the poison must reach the reference's output"
    p = GemmProblem.for_call(x, w, torch.bfloat16)
    runs = []
    for be in backends.available():
        if be.name == "reference" or be.check(p) is not None:
            continue
        if _needs_build(be, p):
            warnings.warn(f"{be.name} left out: its library for {p} is not built", stacklevel=1)
            continue
        cfgs = _x_modes(p) if be.name == "triton" else [None]
        runs += [(f"{be.name} {cfg}", be, cfg) for cfg in cfgs]
    assert runs, "no backend serves this problem"
    for name, be, cfg in runs:
        out = torch.zeros(m, n, dtype=torch.bfloat16, device="cuda")
        be.run(x, w, be.packed_for(w), out_dtype=torch.bfloat16, out=out, config=cfg)
        torch.cuda.synchronize()
        _check(name, ref, out)
    layer = Fp8Linear.from_weight(w)  # the planned eager call (nn/plan.py)
    _check("Fp8Linear", ref, layer(x))


def test_quotient_before_the_fp8_cast_as_torch(interpret):
    """fp8_gemm's x / s (``_div_by_scale``, from r = 1 / s) then the saturation, in fp32, on the
    interpreter: torch's x / s clamped to +-448 with NaN kept, bit for bit, for finite,
    huge, +-inf and NaN x and for finite, tiny and inf scales."""
    import triton
    import triton.language as tl

    @triton.jit
    def k(x_ptr, s_ptr, y_ptr, n: tl.constexpr):
        o = tl.arange(0, n)
        s = tl.load(s_ptr + o)
        r = tl.math.div_rn(tl.full((n,), 1.0, tl.float32), s)
        tl.store(y_ptr + o, _saturate(_div_by_scale(tl.load(x_ptr + o), s, r), 448.0))

    g = torch.Generator().manual_seed(0)
    xs = torch.cat([torch.randn(200, generator=g) * 300,
                    torch.tensor([float("inf"), -float("inf"), float("nan"), 3e38, -3e38, 0.0])])
    scales = torch.tensor([0.0173, 1e-12, 1.0, 448.0, float("inf")])
    x, s = (t.reshape(-1) for t in torch.meshgrid(xs, scales, indexing="ij"))
    n = triton.next_power_of_2(x.numel())
    x, s = torch.cat([x, torch.zeros(n - x.numel())]), torch.cat([s, torch.ones(n - s.numel())])
    y = torch.empty_like(x)
    k[(1,)](x, s, y, n)
    torch.testing.assert_close(y, (x / s).clamp(-448, 448), rtol=0, atol=0, equal_nan=True)
