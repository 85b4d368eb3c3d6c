"""In-context tuning (fp8tower.tower.context): the shortlist, one coordinate-descent pass over
a tower's keys (the step's time decides, not the per-GEMM time), and the evidence it leaves
in the cache file. On the CPU: a tiny tower on the Triton interpreter, the step timer faked
so that the step's time follows the configs dispatch resolved."""

from __future__ import annotations

import dataclasses

import pytest

from fp8tower import dispatch
from fp8tower.formats import Scheme
from fp8tower.kernels import configs as kc
from fp8tower.tower import context, timing
from fp8tower.tower.build import Tower, build_tower
from fp8tower.tuning.cache import DecisionCache, Entry, EntryError, Measurement


def _m(cfg, us, backend="triton"):
    return Measurement(backend, cfg, us, us, 0.0, 1.0)


def _entry(problem, cands, backend="triton", config=None):
    e = Entry(problem, "", None, "2026-12-01", cands)
    w = e.winner if config is None else next(c for c in cands if c.config == config)
    return dataclasses.replace(e, backend=backend, config=w.config)


def test_shortlist_current_top_then_other_launch_kinds():
    from fp8tower.problem import GemmProblem

    p = GemmProblem(1, 256, 256, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
    a, b, c, d = ({"split_k": s, "prequant": False} for s in (1, 2, 3, 4))
    pair = {"split_k": 5, "prequant": True, "pdl": True, "prefetch": 2}
    pair2 = {**pair, "split_k": 6}
    slow_pdl = {"split_k": 7, "prequant": False, "pdl": True, "prefetch": 2}
    e = _entry(p, [_m(a, 10.0), _m(b, 10.5), _m(c, 11.0), _m(d, 11.2), _m(pair, 11.3),
                   _m(pair2, 11.4), _m(None, 11.45, "cublaslt"), _m(slow_pdl, 11.48),
                   Measurement("triton", {"split_k": 8}, error="OutOfResources")])
    got = [m.config for m in context.shortlist(e, top=2)]
    # current, the next fastest, then one of each other kind within 15%: the PDL pair,
    # cuBLASLt, the in-GEMM PDL launch (11.48 us); never a second pair or a failure
    assert got == [a, b, pair, None, slow_pdl]
    assert [m.config for m in context.shortlist(e, top=2, kinds=3)] == [a, b, pair]
    moved = dataclasses.replace(e, config=c)  # a current choice outside the top comes first
    assert [m.config for m in context.shortlist(moved, top=2)][:3] == [c, a, b]
    far = _entry(p, [_m(a, 10.0), _m(b, 10.5), _m(pair, 11.6)])  # over KIND_RATIO
    assert [m.config for m in context.shortlist(far, top=1)] == [a]


@pytest.fixture
def fresh_dispatch(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    dispatch.reset()
    yield tmp_path
    dispatch.reset()


@pytest.fixture
def no_warmup(monkeypatch):
    """refine warms the tower up before each step timing: on the interpreter 1-2 s a warm-up,
    10-30 a pass. The tests of its ranking fake the step's time from dispatch's choices and
    skip them; test_refine_keeps_what_the_step_says and test_retuning_keeps_what_refine_installed
    run them."""
    calls = []
    monkeypatch.setattr(Tower, "warmup", lambda self, steps=2: calls.append(steps))
    return calls


def _tower_with_two_candidates():
    """A tiny merged per_tensor tower on the CPU whose every key is tuned (fake times) to its
    default config at 10.0 us and another config of the same launch kind at 10.2 us."""
    tower = build_tower("tiny-hybrid", scheme="per_tensor", arm="merged", backend="auto",
                        m=1, device="cpu")
    d = dispatch.default_dispatcher()
    problems = {p.key(): p for p in tower.gemm_problems()}
    alt = {}
    for key, p in problems.items():
        base = kc.default_config(p)
        alt[key] = next(c for c in kc.configs(p) if c != base and c.get("pdl") == base.get("pdl")
                        and c["prequant"] == base["prequant"])
        d.accept(p, _entry(p, [_m(base, 10.0), _m(alt[key], 10.2)]))
    return tower, d, problems, alt


def test_refine_keeps_what_the_step_says(interpret, fresh_dispatch, monkeypatch):
    """Every key gets two candidates; the per-GEMM times favour the default, the (fake) step
    favours the other config on one key only: that key moves, the rest stay, the evidence is
    in the entries and survives the cache file's validation."""
    tower, d, problems, alt = _tower_with_two_candidates()
    per_step = {k: sum(p.weight_bytes() for p in tower.gemm_problems() if p.key() == k)
                for k in problems}
    target = max(per_step, key=per_step.get)  # the most weight bytes per step

    def fake_time_tower(t, *, replays, steps, **kw):
        cfg = dispatch.resolve(problems[target])[1]
        ms = 1.0 if cfg == alt[target] else 1.1
        for key, p in problems.items():  # a 0.1% effect elsewhere: below MIN_GAIN
            if key != target and dispatch.resolve(p)[1] == alt[key]:
                ms -= 0.001
        return timing.TowerTiming(ms, ms, ms, replays, steps, "fake")

    monkeypatch.setattr(timing, "time_tower", fake_time_tower)
    rows = context.refine(tower, steps=1, replays=1)
    assert rows[0]["key"] == target  # most bytes first
    by_key = {r["key"]: r for r in rows}
    assert by_key[target]["ms_after"] == 1.0 and by_key[target]["ms_before"] > 1.0
    assert by_key[target]["confirm_ms"] == [1.1, 1.0, 1.0, 1.1]  # the move, timed again
    for key, p in problems.items():
        entry = d.entries_for(p)[key]
        want = alt[key] if key == target else kc.default_config(p)
        assert (entry.backend, entry.config) == ("triton", want), key
        assert dispatch.resolve(p)[1] == want
        assert entry.winner.config == want  # the step's choice, though not the fastest GEMM
        assert [r["ms"] for r in entry.context["ms_per_step"]] == \
            [r["ms"] for r in by_key[key]["candidates"]]
        # each candidate against the current choice: in the chain (the fake 10.2 - 10.0 us)
        # and in the step, per GEMM of the key
        n = sum(q.key() == key for q in tower.gemm_problems())
        assert by_key[key]["gemms"] == entry.context["gemms"] == n
        first, alt_row = by_key[key]["candidates"]
        assert (first["chain_delta_us"], first["step_delta_us"]) == (0.0, 0.0)
        assert alt_row["chain_delta_us"] == pytest.approx(0.2)
        assert alt_row["step_delta_us"] == pytest.approx(
            (alt_row["ms"] - first["ms"]) * 1e3 / n, abs=1e-3)
    # the saved file: the in-context choices load back as they were chosen
    (path,) = list(fresh_dispatch.glob("*.json"))
    loaded = DecisionCache(path, DecisionCache.for_device(fresh_dispatch, None).meta).load()
    assert (loaded[target].backend, loaded[target].config) == ("triton", alt[target])


def test_refine_forces_each_candidate_so_a_graph_runs_it(interpret, fresh_dispatch, no_warmup,
                                                         monkeypatch):
    """Each candidate the step times is served as set (Entry.forced), also to a CUDA graph,
    which otherwise takes its own choice of a tie (Entry.choice_for): the step is a graph.
    What refine keeps is chosen in context, which stands in both modes."""
    tower, d, problems, _ = _tower_with_two_candidates()
    seen, accept = [], d.accept
    monkeypatch.setattr(d, "accept", lambda p, e: (seen.append((e.forced, e.context)),
                                                   accept(p, e))[1])
    monkeypatch.setattr(timing, "time_tower", lambda t, *, replays, steps, **kw:
                        timing.TowerTiming(1.0, 1.0, 1.0, replays, steps, "fake"))
    context.refine(tower, steps=1, replays=1)
    assert sum(forced for forced, _ in seen) >= 2 * len(problems)
    assert all(forced != (ctx is not None) for forced, ctx in seen)


def _fluke_timer(problems, alt, seen):
    """A fake step timer: 1.1 ms, but 1.0 the first time a key's alternative config is
    timed and 1.2 every time after."""
    def fake_time_tower(t, *, replays, steps, **kw):
        ms = 1.1
        for key, p in problems.items():
            if dispatch.resolve(p)[1] == alt[key]:
                seen[key] = seen.get(key, 0) + 1
                ms = 1.0 if seen[key] == 1 else 1.2  # fast the first time only
        return timing.TowerTiming(ms, ms, ms, replays, steps, "fake")
    return fake_time_tower


def test_a_fast_fluke_is_not_confirmed(interpret, fresh_dispatch, no_warmup, monkeypatch):
    """One round: a challenger that times fast once and not again keeps the current choice."""
    tower, d, problems, alt = _tower_with_two_candidates()
    monkeypatch.setattr(timing, "time_tower", _fluke_timer(problems, alt, {}))
    rows = context.refine(tower, steps=1, replays=1, rounds=1)
    for r in rows:
        assert r["confirm_ms"] == [1.1, 1.2, 1.2, 1.1] and r["kept"] == r["was"], r["key"]
    for key, p in problems.items():
        assert d.entries_for(p)[key].config == kc.default_config(p)
        assert d.entries_for(p)[key].context["confirm_ms"] == [1.1, 1.2, 1.2, 1.1]


def test_two_rounds_average_a_fluke_away(interpret, fresh_dispatch, no_warmup, monkeypatch):
    """By default each candidate is timed twice and ranked by the mean: the fluke's 1.0 and
    1.2 average to the current choice's 1.1, so nothing needs confirming."""
    tower, d, problems, alt = _tower_with_two_candidates()
    seen = {}
    monkeypatch.setattr(timing, "time_tower", _fluke_timer(problems, alt, seen))
    rows = context.refine(tower, steps=1, replays=1)
    assert context.ROUNDS == 2 and set(seen.values()) == {2}  # each alternative, twice
    for r in rows:
        assert r["kept"] == r["was"] and r["confirm_ms"] is None and not r["confirms"], r["key"]
        assert [c["rounds"] for c in r["candidates"]] == [[1.1, 1.1], [1.0, 1.2]]
        assert [c["ms"] for c in r["candidates"]] == [1.1, 1.1]
    for key, p in problems.items():
        assert d.entries_for(p)[key].config == kc.default_config(p)
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        context.refine(tower, steps=1, replays=1, rounds=0)


def test_a_failed_confirmation_tries_the_next_challenger(interpret, fresh_dispatch, no_warmup,
                                                         monkeypatch):
    """The fastest challenger's confirmation fails (a fluke); the second fastest, really
    faster, is confirmed and kept: a fluke must not hide a real gain."""
    tower = build_tower("tiny-hybrid", scheme="per_tensor", arm="merged", backend="auto",
                        m=1, device="cpu")
    d = dispatch.default_dispatcher()
    problems = {p.key(): p for p in tower.gemm_problems()}
    fluke, real = {}, {}
    for key, p in problems.items():
        base = kc.default_config(p)
        fluke[key], real[key] = [c for c in kc.configs(p) if c != base][:2]
        d.accept(p, _entry(p, [_m(base, 10.0), _m(fluke[key], 10.1), _m(real[key], 10.2)]))
    target = max(problems, key=lambda k: sum(p.weight_bytes() for p in tower.gemm_problems()
                                             if p.key() == k))
    fluke_timings = []

    def fake_time_tower(t, *, replays, steps, **kw):
        cfg = dispatch.resolve(problems[target])[1]
        if cfg == fluke[target]:  # 0.9 in its two rounds, 1.2 in its confirmation
            fluke_timings.append(0.9 if len(fluke_timings) < 2 else 1.2)
            ms = fluke_timings[-1]
        else:
            ms = 1.0 if cfg == real[target] else 1.1
        return timing.TowerTiming(ms, ms, ms, replays, steps, "fake")

    monkeypatch.setattr(timing, "time_tower", fake_time_tower)
    row = next(r for r in context.refine(tower, steps=1, replays=1) if r["key"] == target)
    assert [c["ms"] for c in row["candidates"]] == [1.1, 0.9, 1.0]
    assert row["confirms"] == [{"candidate": 1, "ms": [1.1, 1.2, 1.2, 1.1]},
                               {"candidate": 2, "ms": [1.1, 1.0, 1.0, 1.1]}]
    assert row["confirm_ms"] == [1.1, 1.0, 1.0, 1.1] and row["ms_after"] == 1.0
    entry = d.entries_for(problems[target])[target]
    assert entry.config == real[target] and entry.context["confirms"] == row["confirms"]
    assert fluke_timings == [0.9, 0.9, 1.2, 1.2]


def test_a_context_must_name_a_measured_candidate_it_timed():
    from fp8tower.problem import GemmProblem

    p = GemmProblem(1, 256, 256, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
    a, b = {"split_k": 1}, {"split_k": 2}
    e = _entry(p, [_m(a, 10.0), _m(b, 13.0)], config=b)
    ctx = {"step": "t", "date": "d", "ms_per_step": [{"backend": "triton", "config": a, "ms": 2.0},
                                                     {"backend": "triton", "config": b, "ms": 1.9}]}
    ok = dataclasses.replace(e, context=ctx)
    back = Entry.from_json(p.key(), ok.to_json())
    assert back.config == b and back.winner.config == b  # 30% slower per GEMM, kept
    with pytest.raises(EntryError, match="not the fastest"):  # no context: the tie rule
        Entry.from_json(p.key(), e.to_json())
    untimed = dataclasses.replace(e, context={**ctx, "ms_per_step": ctx["ms_per_step"][:1]})
    with pytest.raises(EntryError, match="in-context choice"):
        Entry.from_json(p.key(), untimed.to_json())
    with pytest.raises(EntryError, match="context must be"):
        Entry.from_json(p.key(), {**ok.to_json(), "context": ["x"]})


def test_a_choice_never_timed_is_not_judged_against_another(interpret, fresh_dispatch, no_warmup,
                                                            monkeypatch):
    """A key whose current choice is not among its timed candidates (set by a rule or by
    hand) is left as it is: the pass would otherwise compare challengers with the fastest
    candidate, not with what runs, and could write that candidate back as 'kept'."""
    tower, d, problems, alt = _tower_with_two_candidates()
    key, p = next(iter(problems.items()))
    untimed = next(c for c in kc.configs(p)
                   if c not in (kc.default_config(p), alt[key]))
    d.accept(p, dataclasses.replace(d.entries_for(p)[key], config=untimed))
    monkeypatch.setattr(timing, "time_tower", lambda t, *, replays, steps, **kw:
                        timing.TowerTiming(1.0, 1.0, 1.0, replays, steps, "fake"))
    rows = {r["key"]: r for r in context.refine(tower, steps=1, replays=1)}
    assert rows[key]["note"] == "its choice is not a timed candidate"
    assert d.entries_for(p)[key].config == untimed


def _target_timer(problems, alt, target, ms):
    """A fake step timer and refine's ``advance``: while ``target`` is refined, its n-th step
    timing (from 0: two rounds of current and alternative, then the confirmation's four) is
    ``ms(n, whether its alternative runs)``; every other key's step takes 1.0 ms."""
    state = {"key": None, "n": 0}

    def advance(what):
        state["key"] = what.rsplit(" ", 1)[-1]

    def fake_time_tower(t, *, replays, steps, **kw):
        ms_ = 1.0
        if state["key"] == target:
            ms_ = ms(state["n"], dispatch.resolve(problems[target])[1] == alt[target])
            state["n"] += 1
        return timing.TowerTiming(ms_, ms_, ms_, replays, steps, "fake")

    return fake_time_tower, advance


def _refine_target(monkeypatch, ms):
    """refine over the two-candidate tower with ``ms`` timing its heaviest key: that key's row,
    and whether it moved to its alternative."""
    tower, d, problems, alt = _tower_with_two_candidates()
    target = max(problems, key=lambda k: sum(p.weight_bytes() for p in tower.gemm_problems()
                                             if p.key() == k))
    fake, advance = _target_timer(problems, alt, target, ms)
    monkeypatch.setattr(timing, "time_tower", fake)
    row = next(r for r in context.refine(tower, steps=1, replays=1, advance=advance)
               if r["key"] == target)
    return row, d.entries_for(problems[target])[target].config == alt[target]


def test_a_drift_favours_no_candidate(interpret, fresh_dispatch, no_warmup, monkeypatch):
    """A step timer that drifts (each timing 1/64 ms slower than the last), candidates the
    same: every other round runs in reverse, so each candidate's mean takes the same drift
    (in one order the first candidate would always look faster)."""
    tower, *_ = _tower_with_two_candidates()
    n = [0]

    def drifting(t, *, replays, steps, **kw):
        n[0] += 1
        return timing.TowerTiming(1.0 + n[0] / 64, 0, 0, replays, steps, "fake")

    monkeypatch.setattr(timing, "time_tower", drifting)
    for r in context.refine(tower, steps=1, replays=1):
        (current, other) = r["candidates"]
        assert current["rounds"] != other["rounds"] and current["ms"] == other["ms"], r
        assert r["kept"] == r["was"] and not r["confirms"]
    assert len(no_warmup) == n[0] + 1  # one warm-up before the pass, one before each timing


def test_a_gain_under_min_gain_is_not_confirmed_at_all(interpret, fresh_dispatch, no_warmup,
                                                       monkeypatch):
    """A challenger 0.1% faster in its rounds (under MIN_GAIN) is no challenger: no
    confirmation is timed, though this one would show a 10% gain."""
    row, moved = _refine_target(monkeypatch, lambda n, is_alt:
                                (0.999 if n < 4 else 0.9) if is_alt else 1.0)
    assert [c["ms"] for c in row["candidates"]] == [1.0, 0.999]
    assert row["confirms"] == [] and row["kept"] == row["was"] and not moved


def test_a_confirmation_must_show_min_gain(interpret, fresh_dispatch, no_warmup, monkeypatch):
    """A challenger 10% faster in its rounds whose confirmation shows it 0.1% faster (under
    MIN_GAIN) is not confirmed."""
    row, moved = _refine_target(monkeypatch, lambda n, is_alt:
                                (0.9 if n < 4 else 0.999) if is_alt else 1.0)
    assert row["confirms"] == [{"candidate": 1, "ms": [1.0, 0.999, 0.999, 1.0]}]
    assert row["kept"] == row["was"] and not moved


def test_the_confirmation_is_abba(interpret, fresh_dispatch, no_warmup, monkeypatch):
    """The confirmation times current, challenger, challenger, current and compares the means:
    a timer drifting 1% faster per timing during it, the two the same, confirms nothing
    (current then challenger alone read the drift as a 1% gain)."""
    row, moved = _refine_target(monkeypatch, lambda n, is_alt:
                                (0.9 if is_alt else 1.0) if n < 4 else 1.0 - 0.01 * (n - 4))
    assert row["confirms"] == [{"candidate": 1, "ms": [1.0, 0.99, 0.98, 0.97]}]
    assert row["kept"] == row["was"] and not moved


def test_refine_records_the_stand_in_kernel_of_its_step(interpret, fresh_dispatch, no_warmup,
                                                        monkeypatch):
    """torch, rows and rows_fp8 steps re-rank the same bf16 keys: the entry and the rows say
    which stand-in (and parts) the deciding step ran, or one step's decision reads as
    another's."""
    from fp8tower.tower.build import standin_kernel

    tower, d, problems, _ = _tower_with_two_candidates()
    monkeypatch.setattr(timing, "time_tower", lambda t, *, replays, steps, **kw:
                        timing.TowerTiming(1.0, 1.0, 1.0, replays, steps, "fake"))
    for kernel in ("rows", "torch"):
        with standin_kernel(kernel):
            rows = context.refine(tower, steps=1, replays=1)
        for r in rows:
            assert (r["standin"], r["parts"]) == (kernel, list(tower.parts)), r
        for key, p in problems.items():
            ctx = d.entries_for(p)[key].context
            assert (ctx["standin"], ctx["parts"]) == (kernel, list(tower.parts))
            assert Entry.from_json(key, d.entries_for(p)[key].to_json()).context == ctx


def test_retuning_keeps_what_refine_installed(interpret, fresh_dispatch, monkeypatch):
    """FP8TOWER_RETUNE=1: refine's warm-ups pretune the step, and retuning re-tuned every key
    there, replacing the candidate refine had just installed before it was timed. A key this
    dispatcher tuned (or chose in context) counts as tuned."""
    from fp8tower.tuning import tuner

    dispatch._default = dispatch.Dispatcher(tune=True, retune=True, persist=False)
    tower, d, problems, alt = _tower_with_two_candidates()
    tuned = []

    def fake_tune(d, p, **kw):  # the per-GEMM tuning: it picks the default again
        tuned.append(p.key())
        e = _entry(p, [_m(kc.default_config(p), 10.0), _m(alt[p.key()], 10.2)])
        d.accept(p, e)
        return e

    monkeypatch.setattr(tuner, "tune", fake_tune)
    target = max(problems, key=lambda k: sum(p.weight_bytes() for p in tower.gemm_problems()
                                             if p.key() == k))

    def fake_time_tower(t, *, replays, steps, **kw):
        ms = 1.0 if dispatch.resolve(problems[target])[1] == alt[target] else 1.1
        return timing.TowerTiming(ms, ms, ms, replays, steps, "fake")

    monkeypatch.setattr(timing, "time_tower", fake_time_tower)
    row = next(r for r in context.refine(tower, steps=1, replays=1) if r["key"] == target)
    assert tuned == []
    assert [c["ms"] for c in row["candidates"]] == [1.1, 1.0] and row["ms_after"] == 1.0
    assert d.entries_for(problems[target])[target].config == alt[target]


@pytest.mark.filterwarnings("ignore:fp8tower. cached choice for .* ignored")  # the stuck key
def test_refine_times_only_candidates_that_can_run_here(interpret, fresh_dispatch, no_warmup,
                                                        monkeypatch):
    """A candidate that cannot run here (CUTLASS on the CPU) would be timed as whatever
    dispatch falls back on, under its own label: it is left out; a key whose choice cannot
    run here is skipped, said so."""
    tower = build_tower("tiny-hybrid", scheme="per_tensor", arm="merged", backend="auto",
                        m=1, device="cpu")
    d = dispatch.default_dispatcher()
    problems = {p.key(): p for p in tower.gemm_problems()}
    cut = {"tile": "64x32x128", "sched": "pf", "splits": 1}
    stuck = next(iter(problems))
    for key, p in problems.items():
        base = kc.default_config(p)
        other = next(c for c in kc.configs(p) if c != base)
        cands = [_m(base, 10.0), _m(cut, 10.05, "cutlass"), _m(other, 10.2)]
        e = _entry(p, cands, "cutlass", cut) if key == stuck else _entry(p, cands)
        d.accept(p, e)
    monkeypatch.setattr(timing, "time_tower", lambda t, *, replays, steps, **kw:
                        timing.TowerTiming(1.0, 1.0, 1.0, replays, steps, "fake"))
    rows = {r["key"]: r for r in context.refine(tower, steps=1, replays=1)}
    assert rows[stuck]["note"].startswith("its choice cannot run here: ")
    assert not rows[stuck]["candidates"] and d.entries_for(problems[stuck])[stuck].context is None
    for key in problems.keys() - {stuck}:
        assert [c["backend"] for c in rows[key]["candidates"]] == ["triton", "triton"], key
