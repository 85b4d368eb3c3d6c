"""Cached launch plans on the GPU (marker: gpu): the direct CompiledKernel launch gives the
same bits as the unplanned path (Triton's generic launcher), also under a CUDA graph."""

import pytest
import torch

from fp8tower.formats import Scheme, quantize_weight
from fp8tower.nn.linear import Fp8Linear

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 1160)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_direct_launch_equals_generic(scheme, m, shape):
    n, k = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                        act_scale=0.02 if scheme is Scheme.PER_TENSOR else None)
    bias = torch.randn(n, device="cuda", generator=g)
    planned = Fp8Linear.from_weight(w, bias, backend="triton")
    plain = Fp8Linear.from_weight(w, bias, backend="triton")
    plain.use_plans = False
    for _ in range(3):
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)
    (entry,) = planned._plans.values()
    assert entry.plan.direct_launches > 0, "the direct launch never ran"
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = planned(x)
    x.copy_(torch.randn(m, k, device="cuda", generator=g).bfloat16())
    graph.replay()
    torch.testing.assert_close(y, plain(x), rtol=0, atol=0)
