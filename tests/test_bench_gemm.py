"""benchmarks/bench_gemm.py's arm and shape handling on the CPU, with fake backends."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch
from test_tuning import FakeClock, cpu_problem, fake_backend

from fp8tower import dispatch
from fp8tower.dispatch import Dispatcher

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gemm.py"
_spec = importlib.util.spec_from_file_location("bench_gemm", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_shape_sets_and_lists():
    shapes, roles = bench.parse_shapes("families")
    assert (8192, 1024) in shapes and roles["8192x1024"] == "Llama-3.1-70B TP8 o_proj shard"
    assert len(shapes) == len(bench.FAMILY_SHAPES) == 21
    shapes, roles = bench.parse_shapes("5120x6144,123x456")
    assert shapes == [(5120, 6144), (123, 456)]
    assert roles == {"5120x6144": "GDN out_proj / attn o_proj", "123x456": ""}


@pytest.mark.parametrize("bad", ["5120", "axb", "5120x6144,towr"])
def test_bad_shapes_name_the_value_and_what_was_expected(bad):
    with pytest.raises(SystemExit, match="neither NxK .* nor one of tower, families"):
        bench.parse_shapes(bad)


def test_untuned_arm_is_the_dispatchers_safe_default():
    """"untuned" serves what auto serves with no cache entry: the first able backend, or the
    one its untuned_defers_to names."""
    clock = FakeClock()
    fast = fake_backend("fast", clock, {"default": 1.0})
    slow = fake_backend("slow", clock, {"default": 2.0})
    slow = dataclasses.replace(slow, untuned_defers_to=lambda p, gpu=None: "fast")
    p = cpu_problem(m=4)
    untuned = Dispatcher(candidates=[slow, fast], tune=False, persist=False)
    be, _, chosen = bench.arm_choice("untuned", p, untuned)
    assert (be.name, chosen) == ("fast", "fast")


def test_rule_arm_is_the_safe_default_as_on_the_rules_gpu(monkeypatch):
    """"rule" serves what the untuned default serves on an H200, on any GPU: on one outside
    UNTUNED_RULE_GPUS "untuned" is cuBLASLt and "rule" still the H200 rule's choice."""
    from fp8tower.problem import GemmProblem

    clock = FakeClock()
    triton = fake_backend("triton", clock, {"default": 1.0})
    cublaslt = fake_backend("cublaslt", clock, {"default": 2.0})
    real = dispatch.Dispatcher
    monkeypatch.setattr(dispatch, "Dispatcher", lambda **kw: real(
        candidates=[triton, cublaslt], **kw))
    p = GemmProblem(1, 5120, 6144, cpu_problem().scheme, capability=(9, 0))
    other = dispatch.Dispatcher(tune=False, persist=False, gpu_name="NVIDIA L40S")
    rule = bench.rule_dispatcher()
    assert rule._device_name() == "NVIDIA H200" and "NVIDIA H200" in dispatch.UNTUNED_RULE_GPUS
    assert bench.arm_choice("untuned", p, other, rule)[2] == "cublaslt"
    assert bench.arm_choice("rule", p, other, rule)[2] == "triton"


def test_variant_arms_are_the_default_tile_taken_other_ways():
    """pair / deep / deep_own: the default without configs.deep_default (nodeep), its x from
    the PDL pre-pass pair, its BLOCK_N unsplit at BLOCK_K 512; per_tensor and channel_token
    only, but nodeep."""
    from fp8tower.formats import Scheme
    from fp8tower.kernels import configs as kc
    from fp8tower.problem import GemmProblem

    p = GemmProblem(1, 5120, 6144, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
    base = kc.default_config(p, deep=False)
    assert bench.variant_config("nodeep", p) == base and base["split_k"] == 3
    assert bench.variant_config("pair", p) == {**base, "prequant": True, **kc.PDL_PAIR}
    deep = bench.variant_config("deep", p)
    assert [deep[f] for f in ("block_k", "split_k", "num_stages", "prequant")] == [512, 1, 4, True]
    own = bench.variant_config("deep_own", p)
    assert {**own, "prequant": True, **kc.PDL_PAIR} == deep and not own["prequant"]
    ct = GemmProblem(1, 5120, 6144, Scheme.CHANNEL_TOKEN, capability=(9, 0))
    assert bench.variant_config("deep_own", ct)["fused_amax"]  # as its default at M = 1
    assert "fused_amax" not in bench.variant_config("deep", ct)
    b128 = GemmProblem(1, 5120, 6144, Scheme.BLOCK128, capability=(9, 0))
    assert bench.variant_config("deep", b128) is None
    assert bench.variant_config("nodeep", b128) == kc.default_config(b128)
    be, reason, _ = bench.arm_choice("deep", b128, None)
    assert be is None and "no deep variant for block128" in reason


def test_an_arm_with_overrides_is_its_config_with_those_keys_replaced():
    """``triton[split_k=8,num_stages=3]``: the arm's config, those keys set (the other keys
    as the arm has them), so one run times a default against its neighbours."""
    from fp8tower.formats import Scheme
    from fp8tower.kernels import configs as kc
    from fp8tower.problem import GemmProblem

    assert bench.split_arms("cublaslt,triton[split_k=8,num_stages=3],deep") == [
        "cublaslt", "triton[split_k=8,num_stages=3]", "deep"]
    p = GemmProblem(64, 1280, 8192, Scheme.BLOCK128, capability=(9, 0))
    be, cfg, _ = bench.arm_choice("nodeep[split_k=8,num_stages=3]", p, None)
    assert be.name == "triton" and cfg == {**kc.default_config(p), "split_k": 8, "num_stages": 3}
    pt = GemmProblem(1, 5120, 6144, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
    _, cfg, _ = bench.arm_choice("deep[pdl=false,prefetch=0]", pt, None)
    assert cfg == {**bench.variant_config("deep", pt), "pdl": False, "prefetch": 0}
    # a config as dispatch --explain prints it (tuning.cache.config_label) is taken as is
    from fp8tower.tuning.cache import config_label
    label = config_label({"block_k": 512, "pdl": True, "prequant": False})
    assert bench.parse_override(f"triton[{label}]") == (
        "triton", {"block_k": 512, "pdl": True, "prequant": False})
    be, reason, _ = bench.arm_choice("deep[num_stages=3]", p, None)  # no deep block128 arm
    assert be is None and "no deep variant" in reason


def test_an_override_arm_prints_with_its_brackets():
    """rich reads "[num_stages=4]" as markup: unescaped, session 48's table and summary printed
    three arms as "triton" alike (results/session48_2026-12-06/call4/family.log)."""
    from rich.console import Console
    from rich.table import Table

    row = {"backend": "triton[num_stages=4]", "scheme": "block128", "n": 8704, "k": 8192,
           "m": 16, "us": 29.94, "speedup_vs_cublaslt": 0.93}
    console = Console(record=True, width=200)
    table = Table()
    table.add_column("backend")
    table.add_row(bench.arm_label(row))
    console.print(table)
    console.print(bench.slow_line(row))
    console.print(bench.slow_line({**row, "backend": "untuned", "chosen": "triton"}))
    text = console.export_text()
    assert text.count("triton[num_stages=4]") == 2
    assert "slower than cuBLASLt by > 2%: triton[num_stages=4] block128 8704x8192 M=16 29.94 us" \
        in text
    assert "untuned (triton) block128" in text


def test_a_cutlass_arm_takes_its_own_keys_strings_and_floats_as_written(monkeypatch):
    """``cutlass[cluster=2,sched=pp]``: CUTLASS's default config with those keys set."""
    import dataclasses

    from fp8tower import backends
    from fp8tower.formats import Scheme
    from fp8tower.problem import GemmProblem

    assert bench.parse_override("cutlass[cluster=2,sched=pp,tile=64x32x128,overlap=0.25]") == (
        "cutlass", {"cluster": 2, "sched": "pp", "tile": "64x32x128", "overlap": 0.25})
    be = dataclasses.replace(backends.get("cutlass"), unavailable_reason=lambda: None,
                             check=lambda p: None)  # as on an sm_90 machine with nvcc
    monkeypatch.setattr(bench.backends, "get", lambda name: be)
    p = GemmProblem(32, 16384, 5120, Scheme.PER_TENSOR, capability=(9, 0),
                    static_act_scale=True)
    got, cfg, _ = bench.arm_choice("cutlass[cluster=4]", p, None)
    assert got is be and cfg == {**be.default_config(p), "cluster": 4}
    assert cfg["sched"] == "pf" and cfg["tile"] == "64x32x128"


def test_auto_with_overrides_changes_its_triton_choices_only(monkeypatch):
    """``auto[num_stages=3]``: where auto chose Triton, its cached config with those keys
    set; where it chose another backend, that choice as it is."""
    from fp8tower import backends
    from fp8tower.formats import Scheme
    from fp8tower.problem import GemmProblem

    p = GemmProblem(1, 5120, 6144, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
    tuned = {"block_k": 512, "pdl": True, "prefetch": 1}
    monkeypatch.setattr(bench.dispatch, "resolve",
                        lambda q, b, graph=False: (backends.get("triton"), tuned))
    assert bench.arm_choice("auto[num_stages=3]", p, None)[1] == {**tuned, "num_stages": 3}
    lt = backends.get("cublaslt")
    monkeypatch.setattr(bench.dispatch, "resolve", lambda q, b, graph=False: (lt, None))
    assert bench.arm_choice("auto[num_stages=3]", p, None) == (lt, None, "cublaslt")


@pytest.mark.parametrize("bad, says", [
    ("cublaslt[split_k=2]", "ARM triton, auto, cutlass or one of"),
    ("triton[split_k=2", "ARM triton, auto, cutlass or one of"),
    ("triton[splitk=2]", "KEY one of"),
    ("triton[split_k]", "KEY one of"),
    ("triton[split_k=two]", "neither an integer nor true / false"),
    ("cutlass[block_n=64]", "KEY one of sched, tile, cluster"),
    ("cutlass[overlap=half]", "is not a number"),
])
def test_a_malformed_override_is_refused_before_any_timing(bad, says):
    with pytest.raises(SystemExit) as e:
        bench.main(["--backends", f"cublaslt,{bad}", "--json", "unused.json"])
    assert repr(bad) in str(e.value) and says in str(e.value)


def test_the_json_is_written_partial_then_complete(tmp_path):
    """write_result: after each scheme ("complete": false, the rows so far), then at the end;
    a run stopped between schemes keeps what it measured."""
    import json

    path = tmp_path / "g.json"
    row = {"scheme": "per_tensor", "n": 1024, "k": 5120, "m": 1, "backend": "auto", "us": 5.0}
    common = (4400.0, {"triton_read": 4400.0}, (9, 0), ["--m", "1"])
    assert bench.write_result(str(path), [row], [], {}, *common, complete=False) == path
    doc = json.loads(path.read_text())
    assert doc["complete"] is False and doc["rows"] == [row] and doc["accuracy"] == {}
    assert doc["command"].endswith("bench_gemm.py --m 1")
    bench.write_result(str(path), [row, row], [], {"per_tensor": 40.0}, *common, complete=True)
    doc = json.loads(path.read_text())
    assert doc["complete"] is True and len(doc["rows"]) == 2 and doc["read_ceiling_gbs"] == 4400.0
    assert doc["chain"] == bench.CHAIN_HELP["model"]  # the default: the tuner's chain
    bench.write_result(str(path), [row], [], {}, *common, complete=True, chain="gemm")
    assert json.loads(path.read_text())["chain"] == "GEMMs back to back"


def test_chain_option(capsys):
    """--chain takes model (the tuner's chain) or gemm, and nothing else, before any timing."""
    with pytest.raises(SystemExit) as e:
        bench.main(["--chain", "norm"])
    assert e.value.code == 2 and "invalid choice: 'norm'" in capsys.readouterr().err
    if not torch.cuda.is_available():  # accepted: it gets as far as asking for a GPU
        with pytest.raises(SystemExit, match="needs a CUDA GPU"):
            bench.main(["--chain", "gemm"])


def test_the_ratio_cell_is_a_dash_without_a_cublaslt_row():
    """weight_only has no cuBLASLt arm: its cells read "-", not "nanx" (session 61's table)."""
    assert bench.ratio_cell({"us": 21.0}) == "-"
    assert bench.ratio_cell({"us": 21.0, "speedup_vs_cublaslt": 1.234}) == "1.23x"
