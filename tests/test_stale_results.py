"""A cached plan, prepared weight or merged output is never served after what it was made
from changed: in-place edits seen by a compiled call, storage swapped by ``t.data =``, an x
edited in place between merged views, a view called twice in a round; under
``torch.inference_mode`` (no version counters) after ``Fp8Linear.refresh()``. Each case is
compared with a fresh module loaded from the same tensors."""

import copy

import pytest
import torch

from fp8tower.hf.conversion import MergedProjection, MergedShard
from fp8tower.nn.linear import Fp8Linear

K = 384


def _new(scheme="per_tensor", backend="triton", n=80, seed=0):
    torch.manual_seed(seed)
    return Fp8Linear.from_linear(torch.nn.Linear(K, n), scheme, backend=backend)


def _fresh(m):
    f = _new(m.scheme.value, m.backend, m.out_features)
    f.load_state_dict(m.state_dict())
    return f


def _x(seed=1):
    return torch.randn(1, K, generator=torch.Generator().manual_seed(seed)).bfloat16()


def test_a_compiled_call_sees_a_scale_edited_in_place(interpret):
    """The compiled op finds its prepared weight by the tensors' addresses; Triton's prepared
    per_tensor scale is a copy, stale after ``mul_`` unless the versions are compared."""
    m = _new()
    ref = copy.deepcopy(m)
    ref.use_plans = False
    compiled = torch.compile(m, backend="eager", fullgraph=True)
    compiled(_x())
    with torch.no_grad():
        m.weight_scale.mul_(2)
        ref.weight_scale.mul_(2)
    assert torch.equal(compiled(_x()), ref(_x()))


@pytest.mark.parametrize("plans", [True, False])
def test_storage_swapped_with_data_is_seen(interpret, plans):
    m = _new("channel_token")
    m.use_plans = plans
    m(_x())
    m.weight_scale.data = m.weight_scale.data * 2
    assert torch.equal(m(_x()), _fresh(m)(_x()))
    m.bias.data = m.bias.data + 1
    assert torch.equal(m(_x()), _fresh(m)(_x()))


def test_inference_mode_edits_need_refresh(interpret):
    """Inference tensors count no versions: an edit in place is seen after refresh()."""
    with torch.inference_mode():
        m = _new()
        m(_x())
        m.weight_scale.mul_(2)
        m.refresh()
        assert torch.equal(m(_x()), _fresh(m)(_x()))


def _views(backend="reference"):
    lins = [_new("channel_token", backend, n=64, seed=s) for s in range(3)]
    mp = MergedProjection.from_linears(lins, ["q", "k", "v"])
    return lins, [MergedShard(mp, i, c) for i, c in enumerate("qkv")]


def test_a_view_after_x_was_edited_in_place_runs_afresh():
    lins, (q, k, v) = _views()
    h = _x()
    q(h)
    h.copy_(_x(2))
    assert torch.equal(k(h), lins[1](h))
    assert torch.equal(v(h), lins[2](h))


def test_a_view_called_twice_starts_a_new_round():
    """q twice on a reused buffer, then the buffer edited: the second round is computed, and
    a round left half-taken does not answer the next one."""
    lins, (q, k, v) = _views()
    h = _x()
    q(h)
    q(h)
    h.mul_(-1)
    assert torch.equal(q(h), lins[0](h))
    assert torch.equal(k(h), lins[1](h))
    assert torch.equal(v(h), lins[2](h))


def test_a_partial_round_under_inference_mode_does_not_answer_the_next_step():
    """Under inference_mode x counts no versions. A step that took only some views (k, v),
    then x (a static input buffer) edited in place: the next step's first member (q) got
    the old round's output. A group's first member always starts a round."""
    lins, (q, k, v) = _views()
    with torch.inference_mode():
        h = _x()
        k(h)
        v(h)  # a partial round: q never taken
        h.copy_(_x(2))
        got = [q(h), k(h), v(h)]  # the next step
        want = [lin(h.clone()) for lin in lins]
    assert all(torch.equal(a, b) for a, b in zip(got, want))
