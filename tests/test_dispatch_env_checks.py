"""What dispatch reads from the environment and the cache file is honoured or refused by
name, never read as its opposite: on/off words it does not know, RETUNE where tuning may not
run, an empty FP8TOWER_BACKENDS, a relative cache dir; cached choices validated at the M they
were tuned at (the bucket's); cache files with unconvertible numbers or malformed context
rows skipped, not raised; the tune command a capture miss prints tunes that very key."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from test_tuning import FakeClock, FakeTimer, fake_backend

from fp8tower import dispatch, env
from fp8tower.backends import BackendError
from fp8tower.dispatch import Dispatcher
from fp8tower.formats import Scheme
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning.cache import DecisionCache, Entry, Measurement


@pytest.mark.parametrize("value", ["disable", "disabled", "n", "f", "none", "-1", "2"])
def test_an_unknown_on_off_word_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("FP8TOWER_TUNE", value)
    with pytest.raises(ValueError, match=f"FP8TOWER_TUNE='{value}': expected one of"):
        env.flag("FP8TOWER_TUNE", True)


@pytest.mark.parametrize(("value", "want"), [("0", False), (" Off ", False), ("NO", False),
                                             ("1", True), ("yes", True), ("", True)])
def test_known_on_off_words(monkeypatch, value, want):
    monkeypatch.setenv("FP8TOWER_PLAN", value)
    assert env.flag("FP8TOWER_PLAN", True) is want


@pytest.mark.parametrize("name", ["FP8TOWER_TILE_MAJOR", "FP8TOWER_PLAN",
                                  "FP8TOWER_EAGER_ONE_LAUNCH", "FP8TOWER_EARLY_LAUNCH",
                                  "FP8TOWER_HOST_TIE"])
def test_every_switch_reads_the_one_parser(monkeypatch, name):
    from fp8tower import graph_edges
    from fp8tower.kernels.layout import tile_major_enabled
    from fp8tower.nn.plan import eager_one_launch_enabled, plans_enabled_default
    from fp8tower.tuning.cache import host_tie

    read = {"FP8TOWER_TILE_MAJOR": tile_major_enabled, "FP8TOWER_PLAN": plans_enabled_default,
            "FP8TOWER_EAGER_ONE_LAUNCH": eager_one_launch_enabled,
            "FP8TOWER_EARLY_LAUNCH": graph_edges.enabled, "FP8TOWER_HOST_TIE": host_tie}[name]
    monkeypatch.setenv(name, "disabled")  # was read as "on"
    with pytest.raises(ValueError, match=name):
        read()
    monkeypatch.setenv(name, "off")
    assert read() is False


def _cached(tmp_path, clock):
    p = GemmProblem(m=4, n=64, k=32, scheme="per_tensor", capability=(9, 0))
    f1 = {"id": "f1", "block": 64}
    e = Entry(p, "fast", f1, "d", [Measurement("slow", None, 20.0),
                                   Measurement("fast", None, 10.0), Measurement("fast", f1, 6.0)])
    DecisionCache.for_device(tmp_path, "Fake GPU").save({e.key: e})
    backends = [fake_backend("slow", clock, {"default": 20.0}),
                fake_backend("fast", clock, {"default": 10.0, "f1": 6.0})]
    return p, f1, backends


def test_retune_where_tuning_may_not_run_keeps_the_cached_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("FP8TOWER_TUNE", "0")
    monkeypatch.setenv("FP8TOWER_RETUNE", "1")
    clock = FakeClock()
    p, f1, backends = _cached(tmp_path, clock)
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=backends, timer=timer, gpu_name="Fake GPU", cache_dir=tmp_path)
    b, cfg = d.resolve(p)
    assert (b.name, cfg) == ("fast", f1)  # it served the untuned default before
    assert d.stats["hits"] == 1 and d.stats["defaults"] == 0 and timer.calls == 0


def test_a_choice_tuned_at_the_bucket_serves_every_m_of_it(interpret):
    """The Triton space depends on M: 512x4096's default at M = 32 (split_k 8) is not among
    the configs offered at M = 17; the entry was tuned at 32 and serves 17-32."""
    from fp8tower.backends.triton_gemm import BACKEND as triton

    tuned = GemmProblem(m=32, n=512, k=4096, scheme="per_tensor", capability=(9, 0))
    winner = triton.default_config(tuned)
    other = {**winner, "num_stages": 3}
    e = Entry(tuned, "triton", winner, "d",
              [Measurement("triton", winner, 10.0), Measurement("triton", other, 13.0)], {})
    d = Dispatcher(candidates=[triton], tune=False, persist=False)
    d.entries_for(tuned)[tuned.key()] = e
    for m in (17, 24, 32):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "no longer offers config" was warned
            _, cfg = d.resolve(dataclasses.replace(tuned, m=m))
        assert cfg == winner, m


@pytest.mark.parametrize("value", [",", " , ", ",,"])
def test_backends_naming_none_is_refused(monkeypatch, value):
    monkeypatch.setenv("FP8TOWER_BACKENDS", value)
    with pytest.raises(BackendError, match="names no backend"):
        dispatch.candidates_from_env()


def test_a_relative_cache_dir_does_not_move_with_the_working_directory(tmp_path, monkeypatch):
    """The dispatcher keeps the directory as resolved when it was made: a save after a chdir
    went to another directory, relative to the new one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", "relcache")
    d = Dispatcher(persist=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert d.cache_dir.is_absolute() and d.cache_dir == tmp_path / "relcache"


def test_a_huge_integer_in_the_cache_file_is_an_issue_not_a_crash(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"meta": {}, "entries": {}, "junk": 1' + "0" * 5000 + "}")
    f = tcache.read_cache_file(path)
    assert not f.entries and "unreadable JSON" in f.issues[0]


def test_a_context_row_that_is_not_an_object_skips_the_entry(tmp_path):
    _, f1, _ = _cached(tmp_path, FakeClock())
    path = next(tmp_path.glob("*.json"))
    raw = json.loads(path.read_text())
    (key, entry), = raw["entries"].items()
    entry["context"] = {"step": "s", "ms_per_step": [
        {"backend": "fast", "config": f1, "ms": 1.0}, "oops"]}
    path.write_text(json.dumps(raw))
    f = tcache.read_cache_file(path)
    assert key not in f.entries and "a list of objects" in f.issues[0]


@pytest.mark.parametrize("over", [
    {"static_act_scale": False}, {"static_act_scale": True},
    {"channel_weight_scale": True}, {"static_act_scale": True, "channel_weight_scale": True},
    {"m": 24}, {"m": 100}, {"has_bias": True}, {"out_dtype": torch.float16},
    {"act_dtype": torch.float32, "out_dtype": torch.float32},
    {"act_dtype": torch.float8_e4m3fn, "static_act_scale": True},
    {"scheme": Scheme.CHANNEL_TOKEN, "act_dtype": torch.float16},
])
def test_the_printed_tune_command_tunes_the_missed_key(over):
    """The command a capture miss prints, parsed by the CLI's own parser, tunes that key (a
    dynamic per_tensor key was printed without --dynamic-act-scale: the CLI tuned the static
    one). Everything comes from the command's parsed params: the test used to pass bucket 8
    and bf16 itself, so a command with another --m or dtype could not fail it."""
    import shlex

    from typer.main import get_command

    from fp8tower.cli import tune as cli_tune
    from fp8tower.problem import m_bucket

    p = dataclasses.replace(GemmProblem(m=8, n=4096, k=4096, scheme=Scheme.PER_TENSOR,
                                        capability=(9, 0)), **over)
    args = shlex.split(dispatch.tune_command(p))[2:]
    params = get_command(cli_tune.app).commands["tune"].make_context("tune", args).params
    gemms = cli_tune._gemms_from(None, params["shapes"], None, "gdn")[0]
    problems = cli_tune.tune_problems(
        gemms, cli_tune._parse_schemes(params["scheme"]),
        sorted({m_bucket(x) for x in cli_tune._parse_ms(params["m"])}),
        act_dtype=cli_tune._parse_dtype(params["act_dtype"], "--act-dtype"),
        out_dtype=cli_tune._parse_dtype(params["out_dtype"], "--out-dtype",
                                        cli_tune.OUT_DTYPES),
        capability=(9, 0), channel_scale=params["channel_scale"],
        static_act_scale=params["static_act_scale"], has_bias=params["bias"])
    assert [q.key() for q in problems] == [p.key()]
