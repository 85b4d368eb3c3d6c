"""`fp8tower bench generate` on the CPU: the tiny hybrid as a transformers model, reference
backend, eager steps; unavailable arms are recorded with their reason."""

import json

import pytest

pytest.importorskip("transformers")

from typer.testing import CliRunner

from fp8tower.cli import app


def _generate(tmp_path, *args: str):
    """`fp8tower bench generate` on the tiny hybrid, batch 1, with ``args``: (the CLI result,
    the JSON record when it succeeded)."""
    out = tmp_path / "gen.json"
    res = CliRunner().invoke(app, ["bench", "generate", "--model", "tiny-hybrid", "--batch", "1",
                                   *args, "--json", str(out)])
    return res, json.loads(out.read_text()) if res.exit_code == 0 else None


# transformers 5.25 deprecates past_key_values= for cache= (hf/random_model.cache_kwarg)
@pytest.mark.filterwarnings("error:.*past_key_values.*:FutureWarning")
def test_bench_generate_tiny_hybrid_cpu(tmp_path):
    res, rec = _generate(tmp_path, "--context", "8", "--steps", "2", "--rounds", "3",
                         "--arms", "bf16,fp8:per_tensor,torchao:per_row")
    assert res.exit_code == 0, res.output
    assert rec["schema"] == "fp8tower.bench.generate/1"
    assert rec["model_type"] == "qwen3_5_text" and rec["device"] == "cpu"
    assert rec["versions"]["transformers"] and rec["command"].startswith("fp8tower bench generate")
    assert [r["arm"] for r in rec["rows"]] == ["bf16", "fp8:per_tensor", "torchao:per_row"]
    assert rec["rounds"] == 3 and rec["interleaved"] is True
    assert "median of per-round ratios" in res.output and "fp8:per_tensor (batch 1) " in res.output
    # interleaved, each arm says when it is built (bf16 last), before any arm finishes
    out = " ".join(res.output.split())
    assert "built fp8:per_tensor (batch 1, 1 of 3) in" in out
    assert "built bf16 (batch 1, 3 of 3)" in out
    assert out.index("built bf16") < out.index("bf16 batch 1: eager")
    rows = {r["arm"]: r for r in rec["rows"]}
    assert rows["bf16"]["eager_ms"] > 0 and rows["bf16"]["graph_ms"] is None
    for arm in ("bf16", "fp8:per_tensor"):  # the median of three timed rounds
        rounds = rows[arm]["eager_rounds_ms"]
        assert len(rounds) == 3 and rows[arm]["eager_ms"] == pytest.approx(sorted(rounds)[1],
                                                                          abs=1e-3)
    kernels = rec["linear_attention_kernels"]  # the hybrid's GDN: which implementation ran
    assert set(kernels) == {"gated_delta_rule", "causal_conv1d"}
    fp8 = rows["fp8:per_tensor"]
    # 3 GDN layers x 3 (in_proj_qkv, in_proj_z, out_proj: in_proj_a / in_proj_b stay bf16,
    # as FP8 checkpoints keep them) + 1 attention layer x 4 + 4 MLPs x 3
    assert fp8["linears_swapped"] == 25 and fp8["eager_ms"] > 0 and fp8["skipped"] is None
    # the arm's prefill logits against bf16's (same random weights): quantization noise
    # through 4 layers, not a broken arm (about 19 dB measured on the CPU, 2026-12-05)
    assert fp8["logits_finite"] is True and 12 < fp8["logits_sqnr_db_vs_bf16"] < 40
    assert rows["bf16"]["logits_sqnr_db_vs_bf16"] is None and "logits dB" in res.output
    assert fp8["eager_speedup_vs_bf16"] > 0
    assert fp8["eager_min_ms"] == pytest.approx(min(fp8["eager_rounds_ms"]), abs=1e-3)
    paired = sorted(a / c for a, c in zip(fp8["eager_rounds_ms"], rows["bf16"]["eager_rounds_ms"]))
    assert fp8["eager_paired_ratio_vs_bf16"] == pytest.approx(paired[1], abs=2e-3)
    assert rows["bf16"]["eager_paired_ratio_vs_bf16"] == 1.0
    try:
        import torchao  # noqa: F401
    except ImportError:
        assert "torchao" in rows["torchao:per_row"]["skipped"]


def test_bench_generate_unknown_arm_is_one_line(tmp_path):
    res, _ = _generate(tmp_path, "--context", "4", "--steps", "1", "--arms", "fp9")
    assert res.exit_code == 2
    assert "unknown arm 'fp9'" in res.output


def test_bench_generate_refuses_a_backend_that_cannot_run_here(tmp_path, monkeypatch):
    """Before any model is built, as bench tower --backends (2026-12-05 audit: --backend
    triton on a CPU failed after the build, on the prefill's key)."""
    from fp8tower import backends

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if backends.get("cublaslt").unavailable_reason() is None:
        pytest.skip("cuBLASLt runs here")
    res, _ = _generate(tmp_path, "--context", "4", "--steps", "1", "--backend", "cublaslt")
    assert res.exit_code == 2
    assert "--backend cublaslt: cannot run on this machine" in " ".join(res.output.split())


def test_bench_generate_one_at_a_time(tmp_path):
    res, rec = _generate(tmp_path, "--context", "4", "--steps", "1", "--rounds", "2",
                         "--one-at-a-time", "--arms", "fp8:block128,bf16")
    assert res.exit_code == 0, res.output
    assert rec["interleaved"] is False and "--one-at-a-time" in rec["command"]
    assert [(r["arm"], len(r["eager_rounds_ms"])) for r in rec["rows"]] == [
        ("fp8:block128", 2), ("bf16", 2)]
    # rounds of arms timed one after another are not pairs
    assert all(r["eager_paired_ratio_vs_bf16"] is None for r in rec["rows"])


def test_bench_generate_transformers_fp8_arm_runs_or_says_why(tmp_path):
    """transformers' own FP8Linear (block128): its matmul kernel comes from the kernels hub or
    DeepGEMM; where neither loads (this CPU machine) the arm is skipped with the reason."""
    res, rec = _generate(tmp_path, "--context", "4", "--steps", "1", "--rounds", "1",
                         "--arms", "bf16,transformers:block128")
    assert res.exit_code == 0, res.output
    row = rec["rows"][1]
    assert row["arm"] == "transformers:block128"
    if row["skipped"] is not None:
        assert "transformers" in row["skipped"]
        # interleaved: said as it is skipped, not "built"
        out = " ".join(res.output.split())
        assert "skipped transformers:block128 (batch 1, 1 of 2): transformers" in out
        assert "built transformers:block128" not in out
    else:
        assert row["linears_swapped"] == 31 and row["eager_ms"] > 0


@pytest.mark.parametrize("arm", ["transformers:block128", "torchao:per_tensor"])
def test_an_arm_that_cannot_run_builds_no_model(monkeypatch, arm):
    """An arm whose library or kernel is missing is skipped before its bf16 model is built
    (session 41: transformers:block128's 16.4 GB model did not fit beside six arms on an
    80 GB card, where the arm would have been skipped anyway)."""
    import torch

    from fp8tower.hf import generate, random_model

    def missing():
        raise generate.ArmSkipped("not here (test)")

    monkeypatch.setattr(generate, "_transformers_fp8", missing)
    monkeypatch.setattr(generate, "_torchao_float8", missing)

    def no_build(*a, **k):
        raise AssertionError("built a model for an arm that cannot run")

    monkeypatch.setattr(random_model, "random_model", no_build)
    live = generate.build_arm("tiny-hybrid", arm, batch=1, context=4, steps=1, rounds=1,
                              device=torch.device("cpu"), backend="auto")
    assert live.res.skipped == "not here (test)" and live.model is None
    assert generate.arm_unavailable("bf16") is None


def test_transformers_fp8_swap_holds_our_block128_weights(monkeypatch):
    """The swap's FP8Linear holds what our block128 quantization gives: W = weight *
    weight_scale_inv per 128x128 block (the convention of Qwen/DeepSeek FP8 checkpoints)."""
    import torch
    from torch import nn
    from transformers.integrations import finegrained_fp8 as tf8

    from fp8tower.formats import dequantize, quantize_weight
    from fp8tower.hf import generate

    monkeypatch.setattr(tf8, "is_deepgemm_loadable", lambda: False)
    monkeypatch.setattr(tf8, "load_finegrained_fp8_kernel", lambda: None)
    torch.manual_seed(0)
    model = nn.Module()
    model.layers = nn.ModuleList([nn.Module()])
    model.layers[0].proj = nn.Linear(256, 384, bias=False)
    w = model.layers[0].proj.weight.detach().clone()
    assert generate.swap_transformers_fp8(model) == 1
    new = model.layers[0].proj
    assert isinstance(new, tf8.FP8Linear) and new.block_size == (128, 128)
    blocks = new.weight_scale_inv.repeat_interleave(128, 0).repeat_interleave(128, 1)
    ours = dequantize(quantize_weight(w, "block128"), torch.float32)
    torch.testing.assert_close(new.weight.float() * blocks, ours, rtol=0, atol=0)


def test_profile_eager_script_on_the_tiny_model(tmp_path):
    """benchmarks/profile_eager.py on the CPU: per arm, the timed rounds, the top host
    functions per step and the kernel counts (none on the CPU)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "profile_eager.py"
    spec = importlib.util.spec_from_file_location("profile_eager", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "prof.json"
    mod.main(["--model", "tiny-hybrid", "--arms", "bf16,fp8:per_tensor", "--backend",
              "reference", "--context", "4", "--steps", "2", "--top", "5", "--json", str(out)])
    rec = json.loads(out.read_text())
    assert rec["benchmark"] == "profile_eager" and set(rec["arms"]) == {"bf16", "fp8:per_tensor"}
    for arm in rec["arms"].values():
        assert len(arm["eager_ms_rounds"]) == 2 and all(v > 0 for v in arm["eager_ms_rounds"])
        assert len(arm["host"]["top_own"]) == 5 and arm["host"]["profiled_us_per_step"] > 0
        assert arm["kernels"]["kernels_per_step"] == 0  # no GPU here
    fns = " ".join(r["fn"] for r in rec["arms"]["fp8:per_tensor"]["host"]["top_cumulative"])
    assert "eager_round" in fns and "_call_impl" in fns  # the step, then the modules


def test_bench_host_summarizes_interleaved_rounds():
    """benchmarks/bench_host.py: medians over interleaved rounds, ratios to the base arm,
    and the paired ratio that cancels a slow phase of the host falling on one round."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_host.py"
    spec = importlib.util.spec_from_file_location("bench_host", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    us = 1e-6
    base = [{"b2b": v * us, "host": v * us, "idle": [v * us]} for v in (20, 20, 40)]
    arm = [{"b2b": v * us, "host": v * us, "idle": [v * us]} for v in (16, 30, 32)]
    r = mod.summarize(arm, base)
    assert r["b2b_us"] == 30.0 and r["b2b_rounds_us"] == [16.0, 30.0, 32.0]
    assert r["b2b_ratio"] == 1.5 and r["idle_ratio"] == 1.5
    assert r["b2b_paired_ratio"] == 0.8  # per round 0.8, 1.5, 0.8: the slow round stands out
    assert "b2b_ratio" not in mod.summarize(base, None)


@pytest.mark.parametrize(("args", "says"), [
    (["--batch", "0"], "--batch '0': expected positive integers"),
    (["--backend", "bogus"], "unknown backend 'bogus' in --backend"),
    (["--arms", "bf16,fp8:bogus"], "--arms: arm 'fp8:bogus': unknown scheme 'bogus'"),
    (["--arms", "bf16,fp8:block128:merge"], "unknown arm 'fp8:block128:merge'"),
    (["--arms", "bf16,bf16"], "an arm is listed twice"),
])
def test_cli_generate_names_the_bad_option_before_building_a_model(args, says, monkeypatch):
    import fp8tower.hf.generate as gen

    def no_build(*a, **kw):
        raise AssertionError("a model was built before the options were checked")

    monkeypatch.setattr(gen, "bench_generate", no_build)
    res = CliRunner().invoke(app, ["bench", "generate", "--model", "tiny-hybrid", *args])
    assert res.exit_code != 0 and says in res.output, res.output


def test_text_config_of_a_llava_style_nested_llama(tmp_path):
    """A multimodal config that nests a plain llama text config: transformers has no
    "llama_text" type (Qwen3.5 has "qwen3_5_text"), so the text part keeps its own type."""
    from fp8tower.hf.random_model import text_config

    cfg = {"model_type": "llava", "vision_config": {"model_type": "clip_vision_model"},
           "text_config": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "intermediate_size": 128,
                           "num_hidden_layers": 2, "vocab_size": 100}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    got = text_config(str(tmp_path / "config.json"))
    assert got.model_type == "llama" and got.hidden_size == 64


def test_a_broken_arm_gets_no_speedup(monkeypatch):
    """An arm whose prefill logits are not finite is reported with its times but no
    speedup, no graph timing, and a note saying why."""
    import torch

    import fp8tower.hf.generate as gen

    real_apply = gen.apply_arm

    def apply_nan(model, arm, backend, calib):
        out = real_apply(model, arm, backend, calib)
        if arm != "bf16":
            model.lm_head.register_forward_hook(lambda m, a, y: y * float("nan"))
        return out

    monkeypatch.setattr(gen, "apply_arm", apply_nan)
    rec = gen.bench_generate("tiny-hybrid", ["bf16", "fp8:channel_token"], [1], context=4,
                             steps=1, device="cpu", backend="reference", graph=False,
                             command="test", rounds=1)
    rows = {r["arm"]: r for r in rec["rows"]}
    bad = rows["fp8:channel_token"]
    assert bad["logits_finite"] is False and bad["logits_sqnr_db_vs_bf16"] is None
    assert bad["eager_speedup_vs_bf16"] is None and bad["eager_ms"] is None
    assert any("not finite" in n for n in bad["notes"])
    assert torch.isfinite(torch.tensor(rows["bf16"]["eager_ms"]))


def test_bench_generate_merged_arm_runs(tmp_path):
    """fp8:<scheme>:merged (the GPU's default arm list has one) merges the swapped model's
    siblings: it failed on every model after convert began refusing converted models."""
    res, rec = _generate(tmp_path, "--context", "4", "--steps", "1", "--rounds", "1",
                         "--arms", "bf16,fp8:per_tensor,fp8:per_tensor:merged")
    assert res.exit_code == 0, res.output
    rows = {r["arm"]: r for r in rec["rows"]}
    merged = rows["fp8:per_tensor:merged"]
    assert merged["skipped"] is None and merged["eager_ms"] > 0
    assert any("sibling groups merged" in n and not n.startswith("0 of") for n in merged["notes"])
    # the same calibrated scales, merged exactly: the unmerged arm's logits within noise
    assert abs(merged["logits_sqnr_db_vs_bf16"]
               - rows["fp8:per_tensor"]["logits_sqnr_db_vs_bf16"]) < 1


def test_interleaved_arms_that_outgrow_memory_name_one_at_a_time(monkeypatch):
    """Interleaved, every arm is held at once: where the next one no longer fits (8 arms of
    Qwen3-8B on an 80 GB H100, session 40), the error names the arms held and the way out
    (--one-at-a-time), and frees them; one at a time, the same memory runs every arm. Memory
    here: room for one and a half models, less the models alive."""
    import gc
    import weakref

    import fp8tower.hf.generate as gen
    import fp8tower.hf.random_model as rm

    alive = weakref.WeakSet()
    real = rm.random_model

    def tracked(*a, **k):
        model = real(*a, **k)
        alive.add(model)
        return model

    one = sum(p.numel() * p.element_size()
              for p in real(rm.text_config("tiny-hybrid"), "cpu").parameters())
    gc.collect()
    monkeypatch.setattr(rm, "random_model", tracked)
    monkeypatch.setattr(rm, "free_bytes", lambda device: int(1.5 * one) - one * len(alive))
    kw = {"context": 4, "steps": 1, "device": "cpu", "backend": "reference", "graph": False,
          "command": "test", "rounds": 1}
    arms = ["bf16", "fp8:per_tensor", "fp8:channel_token"]
    with pytest.raises(rm.NotEnoughMemory, match=r"arm fp8:channel_token does not fit beside "
                       r"the 1 arm\(s\) built before it and held for the interleaved rounds "
                       r"\(fp8:per_tensor\): .*which has [\d.]+ GB free.*Pass --one-at-a-time"):
        gen.bench_generate("tiny-hybrid", arms, [1], **kw)
    assert len(alive) == 0  # freed
    rec = gen.bench_generate("tiny-hybrid", arms, [1], interleave=False, **kw)
    assert [r["arm"] for r in rec["rows"]] == arms and len(alive) == 0


def test_a_first_arm_too_big_is_not_told_to_go_one_at_a_time(monkeypatch):
    """Nothing held: --one-at-a-time would not help, so the error is the model's own."""
    import fp8tower.hf.generate as gen
    import fp8tower.hf.random_model as rm

    monkeypatch.setattr(rm, "free_bytes", lambda device: 1000)
    with pytest.raises(rm.NotEnoughMemory) as err:
        gen.bench_generate("tiny-hybrid", ["bf16", "fp8:per_tensor"], [1], context=4, steps=1,
                           device="cpu", backend="reference", graph=False, command="test",
                           rounds=1)
    assert "one-at-a-time" not in str(err.value) and str(err.value).startswith("Qwen")


def test_a_model_too_big_for_a_gpu_is_not_told_to_use_a_gpu(monkeypatch):
    import fp8tower.hf.random_model as rm

    monkeypatch.setattr(rm, "free_bytes", lambda device: 1000)
    with pytest.raises(rm.NotEnoughMemory, match="use a smaller model .* or a GPU with more "
                                                 "memory"):
        rm.random_model(rm.text_config("tiny-hybrid"), "cuda")


@pytest.mark.parametrize("edit,match", [
    (lambda c: c.pop("hidden_size"), "hidden_size: missing; expected a positive integer"),
    (lambda c: c.update(hidden_size="256"), "hidden_size: got '256'; expected a positive"),
])
def test_random_model_config_fields_are_checked_as_the_towers(tmp_path, edit, match):
    """A config.json missing a field the decode step needs (or with a wrong type) is refused
    naming it, as `bench tower` refuses it (2026-12-05 audit: transformers' default
    hidden_size 4096 was taken silently, and a string gave a raw validation traceback)."""
    from importlib.resources import files

    from fp8tower.hf.random_model import text_config

    cfg = json.loads((files("fp8tower.models") / "configs" / "qwen3-8b.json").read_text())
    edit(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=match):
        text_config(str(path))


def test_bench_generate_compile_times_compiled_steps_for_every_arm(tmp_path, monkeypatch):
    """--compile: every timed step of every arm runs the compiled step, past Dynamo's default
    recompile_limit (8): each arm's step is one code object to Dynamo, and the ninth compiled
    entry would have run uncompiled with only a warning. 3 arms x 3 batches = 9 entries."""
    import fp8tower.hf.generate as gen

    cfg = tmp_path / "config.json"  # one small llama layer: tracing it takes a second
    cfg.write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256}))
    calls = []

    def counting(gm, example_inputs):  # a Dynamo backend: counts the compiled graph's runs
        def run(*args):
            calls.append(1)
            return gm.forward(*args)
        return run

    monkeypatch.setattr(gen, "COMPILE_BACKEND", counting)
    arms = ["bf16", "fp8:per_tensor", "fp8:channel_token"]
    steps, rounds, batches = 2, 2, [1, 2, 3]
    rec = gen.bench_generate(str(cfg), arms, batches, context=4, steps=steps,
                             device="cpu", backend="reference", graph=False, command="test",
                             rounds=rounds, compile=True)
    assert rec["compiled"] is True
    assert [r["skipped"] for r in rec["rows"]] == [None] * 9
    assert all(r["compile_s"] is not None and r["eager_ms"] for r in rec["rows"])
    # each arm: WARM compiled warm-up steps, then every timed step, each one compiled call
    assert len(calls) == 9 * (gen.WARM + rounds * steps)


def test_bench_generate_compile_failure_skips_the_arm_with_the_error(monkeypatch):
    import fp8tower.hf.generate as gen

    def broken(gm, example_inputs):
        raise RuntimeError("no compiler here (test)")

    monkeypatch.setattr(gen, "COMPILE_BACKEND", broken)
    rec = gen.bench_generate("tiny-hybrid", ["bf16"], [1], context=4, steps=1, device="cpu",
                             backend="reference", graph=False, command="test", rounds=1,
                             compile=True)
    (row,) = rec["rows"]
    assert row["skipped"].startswith("torch.compile failed: ") and "no compiler" in row["skipped"]
    assert row["eager_ms"] is None


@pytest.mark.parametrize("interleave", [True, False])
def test_bench_generate_a_recompile_while_timed_skips_that_arm_only(monkeypatch, interleave):
    """A compiled arm that recompiles in a timed round is skipped with Dynamo's reason (its
    compile time is not a step); the other arms are timed (before: the whole run ended)."""
    import torch

    import fp8tower.hf.generate as gen

    monkeypatch.setattr(gen, "COMPILE_BACKEND", lambda gm, example_inputs: gm.forward)
    built = gen.build_arm

    def build(*a, **k):
        live = built(*a, **k)
        if live.res.arm == "fp8:per_tensor":
            def step(tok, pos):
                raise torch._dynamo.exc.RecompileError("guard failed: pos (test)")
            live.step = step
        return live

    monkeypatch.setattr(gen, "build_arm", build)
    rec = gen.bench_generate("tiny-hybrid", ["bf16", "fp8:per_tensor"], [1], context=4,
                             steps=1, device="cpu", backend="reference", graph=False,
                             command="test", rounds=2, compile=True, interleave=interleave)
    bf16, fp8 = rec["rows"]
    assert bf16["skipped"] is None and bf16["eager_ms"] is not None
    assert fp8["skipped"].startswith("recompiled while timed") and "guard failed" in fp8["skipped"]
    assert fp8["eager_ms"] is None and fp8["eager_rounds_ms"] == []
