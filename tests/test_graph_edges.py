"""Early launch (fp8tower.graph_edges): which edges move (CPU, a fake driver), and on the GPU
the same bits from a graph whose PDL edges launch early as from eager calls and from the
graph as captured."""

import ctypes

import pytest
import torch

from fp8tower import graph_edges as ge

gpu = pytest.mark.gpu


class FakeGraph:
    """The driver's edge functions over a Python edge list (what ctypes hands them)."""

    def __init__(self, edges):
        self.edges = [(a, b, (p, t)) for a, b, p, t in edges]  # (from, to, (port, type))

    def get(self, handle, src, dst, data, n):
        n = n._obj
        if src is not None:
            for i, (a, b, (port, typ)) in enumerate(self.edges[: n.value]):
                src[i], dst[i] = a, b
                data[i].from_port, data[i].type = port, typ
        n.value = len(self.edges)
        return 0

    def remove(self, handle, src, dst, data, count):
        for i in range(count):
            self.edges.remove((src[i], dst[i], (data[i].from_port, data[i].type)))
        return 0

    def add(self, handle, src, dst, data, count):
        assert all(data[i].to_port == 0 and bytes(data[i].reserved) == bytes(5)
                   for i in range(count))
        self.edges += [(src[i], dst[i], (data[i].from_port, data[i].type)) for i in range(count)]
        return 0


@pytest.fixture
def fake(monkeypatch):
    def install(edges):
        g = FakeGraph(edges)
        monkeypatch.setattr(ge, "_driver", lambda: {
            "cuGraphGetEdges_v2": g.get, "cuGraphRemoveDependencies_v2": g.remove,
            "cuGraphAddDependencies_v2": g.add, "cuGetErrorString": lambda rc, p: 0})
        return g
    return install


def test_only_programmatic_edges_move_to_launch_order(fake):
    g = fake([(1, 2, ge.PORT_DEFAULT, ge.TYPE_DEFAULT),            # a torch op after a GEMM
              (2, 3, ge.PORT_PROGRAMMATIC, ge.TYPE_PROGRAMMATIC),  # a PDL GEMM after it
              (3, 4, ge.PORT_PROGRAMMATIC, ge.TYPE_PROGRAMMATIC),
              (4, 5, ge.PORT_LAUNCH_ORDER, ge.TYPE_PROGRAMMATIC)])  # already early
    assert ge.early_launch(1234) == 2
    assert sorted(g.edges) == [(1, 2, (ge.PORT_DEFAULT, ge.TYPE_DEFAULT)),
                               (2, 3, (ge.PORT_LAUNCH_ORDER, ge.TYPE_PROGRAMMATIC)),
                               (3, 4, (ge.PORT_LAUNCH_ORDER, ge.TYPE_PROGRAMMATIC)),
                               (4, 5, (ge.PORT_LAUNCH_ORDER, ge.TYPE_PROGRAMMATIC))]
    assert ge.early_launch(1234) == 0  # idempotent
    fake([])
    assert ge.early_launch(1234) == 0 and ge.edges(1234) == []


def test_driver_errors_name_the_call(monkeypatch):
    def fail(*args):
        return 1  # CUDA_ERROR_INVALID_VALUE

    def error_string(rc, p):
        p._obj.value = b"invalid argument"
        return 0

    monkeypatch.setattr(ge, "_driver", lambda: {"cuGraphGetEdges_v2": fail,
                                                 "cuGetErrorString": error_string})
    with pytest.raises(RuntimeError, match=r"cuGraphGetEdges failed: CUDA error 1 \(invalid argument\)"):
        ge.edges(1)


@pytest.mark.parametrize("value,on", [(None, True), ("1", True), ("0", False), ("off", False),
                                      ("false", False), (" No ", False)])
def test_switch(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(ge.ENV, raising=False)
    else:
        monkeypatch.setenv(ge.ENV, value)
    assert ge.enabled() is on


def test_edge_data_is_the_driver_struct():
    assert ctypes.sizeof(ge.EdgeData) == 8  # CUgraphEdgeData: 3 chars + 5 reserved


@gpu
@pytest.mark.parametrize("scheme,cfg", [
    ("per_tensor", {"prequant": False, "pdl": True, "prefetch": 2, "split_k": 3}),
    ("channel_token", {"prequant": False, "pdl": True, "prefetch": 2, "split_k": 1}),
    ("block128", {"prequant": True, "pdl": True, "prefetch": 2, "split_k": 2}),
])
def test_early_graph_gives_the_eager_bits(scheme, cfg):
    """A torch op then PDL GEMMs (pre-pass pairs for channel_token / block128), chained: the
    graph with early launch moves every programmatic edge and gives the same bits as eager
    calls and as the graph without it."""
    from fp8tower.backends import triton_gemm
    from fp8tower.formats import Scheme, quantize_weight

    scheme = Scheme.parse(scheme)
    torch.manual_seed(0)
    n = k = 1024
    ws = [quantize_weight(torch.randn(n, k, device="cuda") * 0.03, scheme,
                          act_scale=0.05 if scheme is Scheme.PER_TENSOR else None)
          for _ in range(3)]
    packed = [triton_gemm.BACKEND.packed_for(w) for w in ws]
    config = {"block_n": 64, "block_k": 256, "num_warps": 4, "num_stages": 3, **cfg}
    src = torch.randn(1, k, device="cuda").bfloat16()

    def step():
        x = torch.mul(src, 1.0)  # a torch kernel (no PDL) before the first GEMM
        for w, p in zip(ws, packed):
            x = triton_gemm._run(x, w, p, config=config)
        return x

    eager = step()
    torch.cuda.synchronize()
    outs, moved = {}, {}
    for early in (False, True):
        g = ge.new_graph()
        with ge.capture(g, early=early):
            out = step()
        moved[early] = getattr(g, "early_edges", 0)
        g.replay()
        torch.cuda.synchronize()
        outs[early] = out.clone()
        kinds = {(e.type, e.from_port) for _, _, e in ge.edges(g.raw_cuda_graph())}
        assert (ge.TYPE_PROGRAMMATIC, ge.PORT_PROGRAMMATIC) not in kinds or not early
    launches = 3 * (2 if triton_gemm.x_is_fp8(scheme, False, config) else 1)
    assert moved[False] == 0 and moved[True] == launches  # every PDL launch, the first too
    assert torch.equal(outs[True], eager) and torch.equal(outs[False], eager)
