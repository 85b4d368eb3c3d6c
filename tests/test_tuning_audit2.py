"""The tuning / dispatch audit of session 34 (2026-12-05, /tmp/audit-tune): seeded siblings
time the seed's refined and tile-major winners, pretune explores the smallest M first, the
winner's output is checked against the reference, explicit backends take the bucket's
default, and formats' checks on act_scale, empty weights and SQNR shapes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from test_tuning import FakeClock, FakeTimer, cfg_id, cpu_problem, fake_backend
from test_tuning_audit import _isolated  # noqa: F401 (the cache dir and environment, autouse)

from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.dispatch import Dispatcher
from fp8tower.formats import Fp8Weight, quantize_weight, sqnr_db
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import search, tuner


def _refined_backend(clock):
    """A fake whose best configs are a refinement and its tile-major variant (not in
    configs()), as Triton's are."""
    times = {"default": 10.0, "a1": 8.0, "a2": 9.5, "a1_d1": 7.0, "a1_d2": 7.1,
             "a1_d1_tm": 6.9, "default_d1": 9.9, "default_d2": 9.95, "default_d1_tm": 9.8,
             "a1_tm": 7.5, "a1_d2_tm": 7.5}
    b = fake_backend("a", clock, times)

    def refine(p, c):
        if c is None:
            return [{"id": "default_d1", "block": 64}, {"id": "default_d2", "block": 64}]
        return [{**c, "id": c["id"] + s} for s in ("_d1", "_d2")] if "_" not in c["id"] else []

    def variants(p, c):
        cid = cfg_id(c)
        return [] if cid.endswith("_tm") else [{"id": cid + "_tm", "block": 64}]

    return dataclasses.replace(
        b, configs=lambda p: [{"id": "a1", "block": 64}, {"id": "a2", "block": 64}],
        refinements=refine, layout_variants=variants)


def test_a_seeded_sibling_times_the_seeds_refined_and_tile_major_winners():
    clock = FakeClock()
    d = Dispatcher(candidates=[_refined_backend(clock)], timer=FakeTimer(clock), tune=True,
                   persist=False)
    m1 = tuner.tune(d, cpu_problem(m=1))
    assert cfg_id(m1.config) == "a1_d1_tm"
    clock.ran.clear()
    m2 = tuner.tune(d, cpu_problem(m=2))
    assert m2.seeded_from == m1.key
    assert [cid for _, cid in clock.ran][:4] == ["default", "a1_d1_tm", "a1_d1", "a1_d2"]
    assert cfg_id(m2.config) == "a1_d1_tm"  # it was default_d1_tm, 42% slower


def test_a_seeded_sibling_times_the_seeds_host_tie_winner():
    """The seed's winner took a host-time tie (cuBLASLt/CUTLASS cost more eager host time)
    and ranks 4th by time: it is still timed."""
    clock = FakeClock()
    cut = fake_backend("cutlass", clock, {"default": 10.0, "c1": 10.02, "c2": 10.04})
    tri = fake_backend("triton", clock, {"default": 12.0, "t1": 10.1, "t2": 11.0})
    d = Dispatcher(candidates=[tri, cut], timer=FakeTimer(clock), tune=True, persist=False)
    m1 = tuner.tune(d, cpu_problem(m=1))
    assert (m1.backend, cfg_id(m1.config)) == ("triton", "t1")
    assert ("triton", "t1") not in [(c.backend, cfg_id(c.config)) for c in m1.ranked()[:3]]
    clock.ran.clear()
    m2 = tuner.tune(d, cpu_problem(m=2))
    assert ("triton", "t1") in clock.ran and (m2.backend, cfg_id(m2.config)) == ("triton", "t1")


def test_pretune_explores_the_smallest_bucket_whatever_the_order_given():
    clock = FakeClock()
    times = {"default": 10.0, "f1": 5.0, "f2": 6.0}
    d = Dispatcher(candidates=[fake_backend("fast", clock, times)], timer=FakeTimer(clock),
                   tune=True, persist=False)
    out = tuner.pretune(d, [cpu_problem(m=16), cpu_problem(m=8), cpu_problem(m=1)],
                        progress=False, precompile=False)
    by_m = {e.problem.m: e for e in out}
    assert by_m[1].seeded_from is None
    assert by_m[8].seeded_from == by_m[16].seeded_from == by_m[1].key


def test_retuning_pretune_skips_keys_this_dispatcher_tuned():
    """FP8TOWER_RETUNE=1 (retune=True) re-tunes cached keys once per process: a second pretune
    (a tower's warm-up runs one every call) re-tuned them all again, replacing choices made
    since (an in-context candidate being timed); explicit retune=True the same."""
    clock = FakeClock()
    d = Dispatcher(candidates=[fake_backend("fast", clock, {"default": 10.0, "f1": 5.0})],
                   timer=FakeTimer(clock), tune=True, retune=True, persist=False)
    problems = [cpu_problem(m=1), cpu_problem(m=2)]
    first = tuner.pretune(d, problems, progress=False, precompile=False)
    assert d.stats["tuned"] == 2
    for retune in (None, True):
        again = tuner.pretune(d, problems, progress=False, precompile=False, retune=retune)
        assert d.stats["tuned"] == 2 and again == first


def _real_backend(name, clock, times, wrong=()):
    """A fake timed by ``times`` whose outputs are the reference's, except the configs in
    ``wrong`` (zeros)."""
    b = fake_backend(name, clock, times)

    def run(x, weight, packed, *, act_scale, bias, out_dtype, config):
        cid = cfg_id(config)
        clock.ran.append((name, cid))
        clock.now += times[cid]
        y = fp8_linear_ref(x, weight, act_scale=act_scale, bias=bias, out_dtype=out_dtype)
        return torch.zeros_like(y) if cid in wrong else y

    return dataclasses.replace(b, run=run)


def test_candidates_with_wrong_output_are_recorded_failed_and_never_chosen():
    """The winner and every runner-up (a seed's shortlist, a fallback, in-context tuning's
    choices come from them) are checked."""
    clock = FakeClock()
    times = {"default": 10.0, "f1": 5.0, "f2": 6.0, "f3": 7.0}
    b = _real_backend("fast", clock, times, wrong=("f1", "f3"))
    e = search.tune_problem(cpu_problem(m=1), [b], timer=FakeTimer(clock), verify=True)
    assert cfg_id(e.config) == "f2"
    bad = {cfg_id(c.config): c for c in e.candidates if not c.ok}
    assert set(bad) == {"f1", "f3"} and bad["f1"].median_us == 5.0
    assert all("wrong output: SQNR" in c.error for c in bad.values())
    assert [cfg_id(c.config) for c in e.ranked()] == ["f2", "default"]
    # without the check (CPU default) the wrong config would have won
    clock2 = FakeClock()
    b2 = _real_backend("fast", clock2, times, wrong=("f1", "f3"))
    assert cfg_id(search.tune_problem(cpu_problem(m=1), [b2], timer=FakeTimer(clock2)).config) \
        == "f1"


def test_an_explicit_backend_takes_its_default_at_the_bucket():
    seen = []
    clock = FakeClock()
    b = dataclasses.replace(fake_backend("a", clock, {"default": 1.0}),
                            default_config=lambda p: seen.append(p.m) or None)
    d = Dispatcher(candidates=[b], timer=FakeTimer(clock), tune=False, persist=False)
    d.resolve(cpu_problem(m=17), backend=b)
    assert seen == [32]


def test_a_cached_candidate_without_gbps_gets_its_rate():
    """The reader accepted "gbps": null; `fp8tower dispatch --file` then crashed formatting it."""
    p = cpu_problem(m=1)
    e = tcache.Entry(p, "a", None, "2026-12-05T00:00:00+00:00",
                     [tcache.Measurement("a", None, 2.0, 2.0, 0.0, None)])
    raw = json.loads(json.dumps(e.to_json()))
    assert raw["candidates"][0]["gbps"] is None
    back = tcache.Entry.from_json(e.key, raw)
    assert back.candidates[0].gbps == pytest.approx(p.bytes_moved() / 2.0 / 1e3)


def test_act_scale_only_for_per_tensor_and_one_value():
    w = quantize_weight(torch.randn(8, 16), "channel_token")
    with pytest.raises(ValueError, match="applies to per_tensor only, not channel_token"):
        Fp8Weight(w.data, w.scale, "channel_token", torch.tensor(1e-3))
    with pytest.raises(ValueError, match=r"act_scale must be one value, got shape \(2,\)"):
        quantize_weight(torch.randn(8, 16), "per_tensor", act_scale=torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128", "weight_only"])
@pytest.mark.parametrize("shape", [(0, 5), (4, 0)])
def test_an_empty_weight_is_refused_by_name(scheme, shape):
    with pytest.raises(ValueError, match=r"weight must have N >= 1 and K >= 1, got shape"):
        quantize_weight(torch.randn(shape), scheme)


def test_sqnr_db_refuses_outputs_of_another_size():
    ref = torch.randn(4, 8)
    with pytest.raises(ValueError, match="expected the same number of elements"):
        sqnr_db(ref[:1], ref)
    with pytest.raises(ValueError, match="expected the same number of elements"):
        sqnr_db(ref, ref[0])
    assert sqnr_db(ref, ref.reshape(-1)) == float("inf")  # same elements, another view


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128"])
def test_the_reference_takes_fp8_activations_with_the_schemes_scales(scheme):
    """The tuner's output check runs the reference on its FP8-activation operands: per-token
    and per-group scales, not only a scalar (reshape(()) raised for them)."""
    from fp8tower.formats import quantize_activation

    w = quantize_weight(torch.randn(64, 256), scheme)
    x = torch.randn(3, 256)
    xq, s = quantize_activation(x, w.scheme)
    assert torch.equal(fp8_linear_ref(xq, w, act_scale=s, out_dtype=torch.float32),
                       fp8_linear_ref(x, w, out_dtype=torch.float32))
