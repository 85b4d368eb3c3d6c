"""Tensor-parallel shards (models/tp.py, `--tp`): one GPU's GEMMs of a TP-N deployment, as
vLLM splits the model. Expected shapes are computed by hand from the configs' fields."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from test_tuning import entry_with
from typer.testing import CliRunner

from fp8tower.cli import app
from fp8tower.cli import bench as bench_cli
from fp8tower.models import ALL_PARTS, LinearSpec, TpError, get_spec, list_models
from fp8tower.models import tower_spec_from_config as from_config
from fp8tower.models.tp import check_block_shards, shard
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache

BLOCK_FP8 = {"quant_method": "fp8", "weight_block_size": [128, 128],
             "activation_scheme": "dynamic", "fmt": "e4m3"}


def moe(**kw) -> dict:
    """A Qwen3.5-MoE text config (Qwen3.5-35B-A3B's widths, 4 layers): every modelled linear
    holds whole blocks up to tp 8; the experts (512 wide) only up to tp 4."""
    cfg = {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 4,
           "full_attention_interval": 4, "linear_num_key_heads": 16,
           "linear_key_head_dim": 128, "linear_num_value_heads": 32,
           "linear_value_head_dim": 128, "num_attention_heads": 16, "num_key_value_heads": 2,
           "head_dim": 256, "num_experts": 256, "moe_intermediate_size": 512,
           "shared_expert_intermediate_size": 512}
    return {**cfg, **kw}


def llama(**kw) -> dict:
    """Llama-3-70B's attention and MLP fields (hidden 8192, 64 q / 8 kv heads of 128,
    intermediate 28672), two layers."""
    cfg = {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 2,
           "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672}
    return {**cfg, **kw}


def layer0(spec) -> dict[str, tuple[int, int]]:
    """proj -> (N, K) of layer 0's linears."""
    return {lin.proj: (lin.n, lin.k) for lin in spec.all_linears if lin.layer == 0}


def merged0(spec) -> dict[str, tuple[int, int, tuple[int, ...]]]:
    """layer 0's GEMMs, merged: short name -> (N, K, member Ns)."""
    return {g.name.rsplit(".", 1)[-1]: (g.n, g.k, tuple(m.n for m in g.members))
            for g in spec.gemms(ALL_PARTS, merged=True) if g.layer == 0}


# ------------------------------------------------------------------- shapes


# qwen3-8b: hidden 4096, 32 q / 8 kv heads of 128 (q 4096, k/v 1024), intermediate 12288
@pytest.mark.parametrize("tp, q, kv, inter", [
    (1, 4096, 1024, 12288),
    (2, 2048, 512, 6144),
    (4, 1024, 256, 3072),
    (8, 512, 128, 1536),  # 8 kv heads over 8 ranks: one each, none replicated
])
def test_dense_qwen3_shards(tp, q, kv, inter):
    spec = get_spec("qwen3-8b", tp=tp)
    assert spec.tp == tp and spec.hidden_size == 4096
    assert layer0(spec) == {
        "q_proj": (q, 4096), "k_proj": (kv, 4096), "v_proj": (kv, 4096),  # column: N / tp
        "o_proj": (4096, q),  # row: K / tp
        "gate_proj": (inter, 4096), "up_proj": (inter, 4096),  # column
        "down_proj": (4096, inter),  # row
    }
    # merge groups are merged per rank, from the sharded members
    assert merged0(spec) == {"qkv": (q + 2 * kv, 4096, (q, kv, kv)),
                             "o_proj": (4096, q, (4096,)),
                             "gate_up": (2 * inter, 4096, (inter, inter)),
                             "down_proj": (4096, inter, (4096,))}
    assert spec.fp8_bytes(ALL_PARTS) * tp == get_spec("qwen3-8b").fp8_bytes(ALL_PARTS)


@pytest.mark.parametrize("tp, q, kv, inter", [
    (2, 4096, 512, 14336),
    (4, 2048, 256, 7168),
    (8, 1024, 128, 3584),
    (16, 512, 128, 1792),  # 8 kv heads < 16: one kv head a rank (N = head_dim), replicated
])
def test_dense_llama_shards(tp, q, kv, inter):
    spec = from_config(llama(), tp=tp)
    assert layer0(spec) == {"q_proj": (q, 8192), "k_proj": (kv, 8192), "v_proj": (kv, 8192),
                            "o_proj": (8192, q), "gate_proj": (inter, 8192),
                            "up_proj": (inter, 8192), "down_proj": (8192, inter)}
    replicated = [n for n in spec.notes if "replicated" in n]
    assert bool(replicated) == (tp == 16)


def test_kv_heads_below_tp_are_replicated():
    """Qwen3.5-27B at tp 8: 4 kv heads of 256 over 8 ranks: each rank holds one (k/v N = 256,
    not 4 * 256 / 8 = 128); q (query + gate) 24 * 256 * 2 / 8 = 1536, o_proj K 24 * 256 / 8."""
    spec = get_spec("qwen3.5-27b", tp=8)
    attn = layer0_of_type(spec, "full_attention")
    assert attn == {"q_proj": (1536, 5120), "k_proj": (256, 5120), "v_proj": (256, 5120),
                    "o_proj": (5120, 768), "gate_proj": (2176, 5120), "up_proj": (2176, 5120),
                    "down_proj": (5120, 2176)}
    assert any("num_key_value_heads 4 < tp 8: each rank holds one kv head" in n
               for n in spec.notes)
    # kv 2 over tp 4 (Llama-style, head_dim 64): one head of 64 a rank
    spec = from_config(llama(hidden_size=1024, num_attention_heads=16, num_key_value_heads=2,
                             intermediate_size=2816), tp=4)
    assert layer0(spec)["k_proj"] == layer0(spec)["v_proj"] == (64, 1024)
    assert layer0(spec)["q_proj"] == (256, 1024)


def layer0_of_type(spec, layer_type):
    i = spec.layer_types.index(layer_type)
    return {lin.proj: (lin.n, lin.k) for lin in spec.all_linears if lin.layer == i}


def test_gdn_shards_and_merge_groups():
    """Qwen3.5-27B's GDN (16 key heads of 128, 48 value heads of 128): key_dim 2048, value_dim
    6144. tp 2: in_proj_qkv (2 * 2048 + 6144) / 2, in_proj_z 6144 / 2, in_proj_b / a 48 / 2,
    out_proj K 6144 / 2; in_proj_qkv + in_proj_z merge per rank."""
    spec = get_spec("qwen3.5-27b", tp=2)
    assert layer0(spec) == {"in_proj_qkv": (5120, 5120), "in_proj_z": (3072, 5120),
                            "in_proj_b": (24, 5120), "in_proj_a": (24, 5120),
                            "out_proj": (5120, 3072), "gate_proj": (8704, 5120),
                            "up_proj": (8704, 5120), "down_proj": (5120, 8704)}
    assert merged0(spec)["gdn_in"] == (8192, 5120, (5120, 3072))
    # Qwen3-Next's fused projections: in_proj_qkvz (2 * key_dim + 2 * value_dim) / tp,
    # in_proj_ba 2 * value heads / tp
    cfg = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 4,
           "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
           "linear_num_value_heads": 32, "linear_value_head_dim": 128,
           "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256}
    spec = from_config(cfg, tp=4)
    assert layer0(spec) == {"in_proj_qkvz": ((2 * 2048 + 2 * 4096) // 4, 2048),
                            "in_proj_ba": (16, 2048), "out_proj": (2048, 1024),
                            # its shared expert (512 by default) split as an MLP (its N = 1
                            # gate is not modelled)
                            "shared_expert.gate_proj": (128, 2048),
                            "shared_expert.up_proj": (128, 2048),
                            "shared_expert.down_proj": (2048, 128)}
    assert layer0_of_type(spec, "full_attention") == {
        "q_proj": (2048, 2048), "k_proj": (256, 2048), "v_proj": (256, 2048),
        "o_proj": (2048, 1024), "shared_expert.gate_proj": (128, 2048),
        "shared_expert.up_proj": (128, 2048), "shared_expert.down_proj": (2048, 128)}


# ------------------------------------------------------------------- tp = 1


# sha256 of digest(get_spec(name)), computed with the code before --tp (f1e7ddf, the parent
# of the commit that added models/tp.py); deepseek-v3 (shipped later, 2026-12-06) pins the
# spec its builder gave when it came, checked against transformers' modules by
# tests/models/test_deepseek.py
TP1_GOLDEN = {
    "deepseek-v3": "a88c003f80411e38928ccd70378e0b0287842f46a51bfb23bfa7b2945ac988c9",
    "qwen3-8b": "ed78ebf97b38a8c2e12a689e3f077f037bd79d53c5041c5110c1f4aeeae9664b",
    "qwen3.5-27b": "6e43d9884bd3eac6ea999c8272e31109701afcfe4f61f08e86ac93e843878638",
    "tiny-hybrid": "2b5e9cc93bb8905d57bb069585687c1dbb0a6a63343eae5383c8d27b88542f3d",
}


def digest(spec) -> str:
    """A canonical dump of the spec's summary and GEMMs (unmerged and merged, FP8 only and
    all), hashed."""
    parts = [("gdn", "attention")] + ([ALL_PARTS] if spec.mlp_in_scope else [])
    dump = {"summary": [spec.summary(p) for p in parts], "gemms": [
        [[g.name, g.n, g.k, g.layer, g.kind, g.input,
          [[m.name, m.n, m.k, m.merge_group, m.fp8, m.bias] for m in g.members]]
         for g in spec.gemms(p, merged=merged, fp8_only=fp8_only)]
        for p in parts for merged in (False, True) for fp8_only in (True, False)]}
    return hashlib.sha256(json.dumps(dump, sort_keys=True).encode()).hexdigest()


def test_tp1_golden_covers_the_shipped_models():
    assert sorted(TP1_GOLDEN) == list_models()


@pytest.mark.parametrize("name", sorted(TP1_GOLDEN))
def test_tp1_changes_nothing(name):
    """The default: every spec, GEMM and merge group exactly as before --tp (the keys `tune`
    poses come from these): the digests the code before it gave."""
    spec = get_spec(name)
    assert digest(spec) == digest(get_spec(name, tp=1)) == TP1_GOLDEN[name]
    assert spec.tp == 1 and get_spec(name, tp=1) == spec
    assert not any("tp " in n for n in spec.notes) and "of tp" not in spec.summary()
    parts = ALL_PARTS if spec.mlp_in_scope else ("gdn", "attention")
    linears = list(spec.all_linears)
    assert shard(linears, 1, {}) == linears
    for merged in (False, True):
        assert spec.gemms(parts, merged=merged) == get_spec(name, tp=1).gemms(parts,
                                                                              merged=merged)


def test_tp1_never_refuses():
    """tp 1 splits nothing: a linear of no known role, or fields tp would not divide, pass."""
    odd = LinearSpec("layers.0.mixer.foo", 100, 64, 0, "other", "foo", None,
                     "layers.0.hidden_norm", True)
    assert shard([odd], 1, {"num_attention_heads": 7}) == [odd]
    check_block_shards([odd], 1)


# ------------------------------------------------------------------- refusals


@pytest.mark.parametrize("bad", [0, -2, 1.5, 2.0, "2", True, None])
def test_tp_must_be_an_integer_at_least_1(bad):
    got = "missing" if bad is None else f"got {bad!r}"
    with pytest.raises(TpError, match=rf"tp: {got}; expected an integer >= 1"):
        get_spec("qwen3-8b", tp=bad)
    with pytest.raises(TpError, match=r"expected an integer >= 1"):
        from_config(llama(), tp=bad)


@pytest.mark.parametrize("cfg, tp, field, value", [
    ("qwen3-8b", 3, "num_attention_heads", 32),
    ("qwen3.5-27b", 16, "num_attention_heads", 24),
    ("qwen3.5-27b", 3, "linear_num_key_heads", 16),
    (llama(num_attention_heads=24, num_key_value_heads=4, hidden_size=3072,
           intermediate_size=6144), 6, "num_key_value_heads", 4),
    (llama(num_key_value_heads=4), 8, "num_key_value_heads", None),  # 4 % 8: divisor: fine
    # kv >= tp: kv must be a multiple of tp (6 % 4 = 2), not only share a factor with it
    (llama(num_attention_heads=24, num_key_value_heads=6, hidden_size=3072,
           intermediate_size=6144), 4, "num_key_value_heads", 6),
    # MoE expert widths: split over the ranks too (any scheme)
    (moe(moe_intermediate_size=100), 8, "moe_intermediate_size", 100),
    (moe(shared_expert_intermediate_size=100), 8, "shared_expert_intermediate_size", 100),
    (llama(intermediate_size=28680), 16, "intermediate_size", 28680),
])
def test_a_split_vllm_refuses_is_refused_naming_the_values(cfg, tp, field, value):
    def build():
        return get_spec(cfg, tp=tp) if isinstance(cfg, str) else from_config(cfg, tp=tp)

    if value is None:
        assert build().tp == tp
        return
    with pytest.raises(TpError) as e:
        build()
    assert e.value.field == field and e.value.value == value
    assert f"{field}: got {value}; expected a multiple of tp ({tp})" in str(e.value)


def test_a_linear_of_unknown_role_is_refused():
    odd = LinearSpec("layers.0.mixer.foo", 128, 64, 0, "other", "foo", None,
                     "layers.0.hidden_norm", True)
    with pytest.raises(TpError, match=r"layers\.0\.mixer\.foo: got 'other\.foo'; expected a "
                       r"linear whose tensor-parallel split is known .*refused rather than "
                       r"guessed"):
        shard([odd], 2, {})


def test_block128_shards_must_hold_whole_blocks():
    """A rank's shard must hold whole 128x128 weight blocks (a cut block's one scale would span
    two ranks' shards): a checkpoint of 128x128 blocks at a tp that cuts one is refused with
    the linear and its per-rank size; where every shard holds whole blocks it builds."""
    # 16 q / 4 kv heads of 64: tp 4 leaves k_proj 64 rows a rank
    cfg = llama(hidden_size=1024, num_attention_heads=16, num_key_value_heads=4,
                intermediate_size=2816, quantization_config=BLOCK_FP8)
    assert from_config(cfg, tp=2).scheme_hint == "block128"  # q 512, k/v 128, gate 1408
    with pytest.raises(TpError, match=r"layers\.0\.self_attn\.k_proj N per rank: got 64; "
                       r"expected a multiple of 128 for block128 at tp 4") as e:
        from_config(cfg, tp=4)
    # the reason that holds whatever the engine; the checkpoint's blocks are fixed: --scheme
    # cannot help, another tp can
    assert ("a rank's shard must hold whole 128x128 weight blocks (a cut block's one scale "
            "would span two ranks' shards); the checkpoint is block128: use another tp"
            ) in str(e.value)
    assert "vLLM" not in str(e.value) and "scheme" not in str(e.value).split("block128:")[-1]
    # the other schemes split it: no block to cut
    assert layer0(from_config(llama(hidden_size=1024, num_attention_heads=16,
                                    num_key_value_heads=4, intermediate_size=2816), tp=4)
                  )["k_proj"] == (64, 1024)
    # row-parallel: K per rank (here the column-parallel linears stay BF16)
    row = LinearSpec("layers.0.self_attn.o_proj", 1024, 192, 0, "attention", "o_proj", None,
                     "layers.0.attn_core_out", True)
    col = LinearSpec("layers.0.self_attn.q_proj", 192, 1024, 0, "attention", "q_proj", "qkv",
                     "layers.0.hidden_norm", False)
    with pytest.raises(TpError, match=r"o_proj K per rank: got 192; expected a multiple of 128"):
        check_block_shards([col, row], 2)
    # Qwen3.5-27B's shards hold whole blocks at tp 2, 4 and 8
    for tp in (2, 4, 8):
        check_block_shards(get_spec("qwen3.5-27b", tp=tp).all_linears, tp)


def test_block128_moe_experts_must_hold_whole_blocks():
    """The routed experts are not modelled as GEMMs, but a block128 checkpoint's experts are
    split too: moe_intermediate_size / tp must be a multiple of 128, and so must the shared
    expert's N per rank (modelled since 2026-12-06). Qwen3.5-35B-A3B's 512 at tp 8: 64 a rank
    (GDN in_proj_b / a / ba kept BF16, as FP8 checkpoints keep them)."""
    block = {**BLOCK_FP8, "modules_to_not_convert": ["in_proj_a", "in_proj_b", "in_proj_ba"]}
    for tp in (2, 4):  # 256, 128 a rank
        assert from_config(moe(quantization_config=block), tp=tp).tp == tp
    wide = 1024  # a shared expert that holds blocks at tp 8: the routed experts' width refused
    with pytest.raises(TpError, match=r"moe_intermediate_size per rank \(512 / 8\): got 64; "
                       r"expected a multiple of 128 for block128 at tp 8.*the checkpoint is "
                       r"block128: use another tp"):
        from_config(moe(quantization_config=block, shared_expert_intermediate_size=wide), tp=8)
    with pytest.raises(TpError, match=r"layers\.0\.mlp\.shared_expert\.gate_proj N per rank: "
                       r"got 192; expected a multiple of 128"):
        from_config(moe(shared_expert_intermediate_size=384, quantization_config=block),
                    tp=2)
    nxt = moe(model_type="qwen3_next", quantization_config=block,
              shared_expert_intermediate_size=wide)
    with pytest.raises(TpError, match=r"moe_intermediate_size per rank \(512 / 8\): got 64"):
        from_config(nxt, tp=8)
    # other schemes: nothing to cut
    assert from_config(moe(), tp=8).tp == 8
    # a malformed width is refused where it is split, not at tp 1 (unchanged: not modelled)
    assert from_config(moe(moe_intermediate_size="512")).tp == 1
    with pytest.raises(TpError, match=r"moe_intermediate_size: got '512'; expected an integer >= 0"):
        from_config(moe(moe_intermediate_size="512"), tp=2)


def test_row_parallel_bias_is_rank_0s():
    """vLLM adds o_proj's / down_proj's bias on rank 0 only: `tune` poses both keys."""
    from fp8tower.cli.tune import _model_gemms

    spec = from_config(llama(attention_bias=True, mlp_bias=True), tp=2)
    assert any("bias on rank 0 only" in n for n in spec.notes)
    gemms = _model_gemms(spec, False, "attention,mlp")
    assert (8192, 4096, (), True) in gemms and (8192, 4096, (), False) in gemms  # o_proj
    assert (4096, 8192, (), True) in gemms and (4096, 8192, (), False) not in gemms  # q_proj
    assert (8192, 14336, (), False) in gemms  # down_proj, ranks 1..
    tp1 = _model_gemms(from_config(llama(attention_bias=True, mlp_bias=True)), False,
                       "attention,mlp")
    assert all(bias for *_, bias in tp1)


# ------------------------------------------------------------------- CLI


def run(*args, env=None):
    r = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert "Traceback" not in r.output and not isinstance(r.exception, AssertionError), r.output
    return r.exit_code, " ".join(r.output.split())


@pytest.mark.parametrize("cmd", ["tune", "dispatch"])
@pytest.mark.parametrize("tp, says", [
    ("0", "error: --tp: 0: expected an integer >= 1"),
    ("-1", "error: --tp: -1: expected an integer >= 1"),
    ("1.5", "error: --tp: '1.5': expected an integer >= 1"),
    ("two", "error: --tp: 'two': expected an integer >= 1"),
    ("1_0", "error: --tp: '1_0': expected an integer >= 1"),  # int() takes it: 10
    ("+2", "error: --tp: '+2': expected an integer >= 1"),
    ("16", "--tp: qwen3.5-27b: num_attention_heads: got 24; expected a multiple of tp (16)"),
    ("3", "--tp: qwen3.5-27b: linear_num_key_heads: got 16; expected a multiple of tp (3)"),
])
def test_cli_tp_refusals_name_the_value(cmd, tp, says):
    code, out = run(cmd, "--model", "qwen3.5-27b", "--tp", tp)
    assert code == 2 and says in out and "needs a CUDA GPU" not in out, out


def test_cli_tp_needs_a_model():
    for cmd in (["tune", "--shapes", "8x8"], ["dispatch"]):
        code, out = run(*cmd, "--tp", "2")
        assert code == 2 and ("--tp selects the GEMMs of --model; without --model it would be "
                              "ignored: give --model or drop it") in out, out


@pytest.mark.parametrize("cmd", ["tune", "dispatch"])
def test_cli_tp_help_says_shapes_are_not_sharded(cmd):
    code, out = run(cmd, "--help")
    assert code == 0 and "--shapes are taken as given, not sharded" in out, out


def test_cli_block128_split_is_refused(tmp_path):
    """tiny-hybrid at tp 2: in_proj_qkv 320 / 2 = 160 rows a rank, not whole blocks. Refused
    where --scheme names block128; without --scheme, block128 is left out of the defaults with
    a note (tune tunes the rest: here it reaches the GPU check)."""
    for args in (["tune", "--scheme", "block128"], ["tune", "--scheme", "per_tensor,block128"],
                 ["dispatch", "--scheme", "block128"]):
        code, out = run(*args, "--model", "tiny-hybrid", "--tp", "2")
        assert code == 2 and ("layers.0.linear_attn.in_proj_qkv N per rank: got 160; expected "
                              "a multiple of 128 for block128 at tp 2") in out, out
        assert "use another --tp, or leave block128 out of --scheme" in out, out
        assert "needs a CUDA GPU" not in out
    code, out = run("tune", "--model", "tiny-hybrid", "--tp", "2")
    assert ("note: --tp 2: block128 left out of the default schemes: tiny-hybrid: "
            "layers.0.linear_attn.in_proj_qkv N per rank: got 160") in out, out
    assert "--scheme per_tensor,channel_token,block128" not in out, out
    if not torch.cuda.is_available():
        assert code == 2 and "needs a CUDA GPU" in out, out
    # an MoE model whose experts cannot hold blocks at this tp: the same
    cfg = tmp_path / "moe" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(moe(shared_expert_intermediate_size=1024)))
    code, out = run("dispatch", "--model", cfg, "--tp", "8", "--scheme", "block128")
    assert code == 2 and "moe_intermediate_size per rank (512 / 8): got 64" in out, out


def test_cli_tune_default_schemes_leave_block128_out(monkeypatch):
    """tune --model tiny-hybrid --tp 2, no --scheme: tunes per_tensor and channel_token (the
    GPU stubbed: the problems pretune gets), and its --json names tp."""
    from fp8tower.tuning import tuner

    posed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(tuner, "pretune", lambda d, problems, **kw: posed.extend(problems) or [])
    r = CliRunner().invoke(app, ["tune", "--model", "tiny-hybrid", "--tp", "2", "--m", "1",
                                 "--no-ceiling", "--no-precompile", "--json"])
    assert r.exit_code == 0, r.output
    assert {p.scheme.value for p in posed} == {"per_tensor", "channel_token"}
    rec = json.loads(r.stdout)
    assert rec["tp"] == 2 and rec["decisions"] == []
    r = CliRunner().invoke(app, ["tune", "--shapes", "256x256", "--m", "1", "--no-ceiling",
                                 "--no-precompile", "--json"])
    assert r.exit_code == 0 and "tp" not in json.loads(r.stdout), r.output


def test_cli_dispatch_default_schemes_leave_block128_out(tmp_path):
    """dispatch --model tiny-hybrid --tp 2 without --scheme: no block128 row (a key no rank of
    that split runs), a note saying why; --json names tp where --model is given."""
    path = tmp_path / "nvidia-h200.json"
    entries = [entry_with({"cublaslt": 8.0}, GemmProblem(m=1, n=256, k=96, scheme=s,
                                                         capability=(9, 0)))
               for s in ("per_tensor", "block128")]
    tcache.DecisionCache(path, tcache.environment_meta("NVIDIA H200")).save(
        {e.key: e for e in entries})

    def schemes(*args):
        r = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--json", *args])
        assert r.exit_code == 0, r.output
        rec = json.loads(r.stdout)
        return sorted(d["scheme"] for d in rec["decisions"]), rec.get("tp"), r.output

    assert schemes()[:2] == (["block128", "per_tensor"], None)
    got, tp, out = schemes("--model", "tiny-hybrid", "--tp", "2")
    assert got == ["per_tensor"] and tp == 2, out
    assert "note: --tp 2: block128 left out of the default schemes" in out
    assert schemes("--model", "tiny-hybrid")[:2] == ([], 1)  # tp 1 runs no 256x96


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour: on a GPU tune tunes")
def test_cli_tune_with_tp_parses_up_to_the_gpu():
    for args in (["--model", "qwen3-8b", "--tp", "2"],
                 ["--model", "tiny-hybrid", "--tp", "2", "--scheme", "per_tensor"],
                 ["--model", "qwen3.5-27b", "--tp", "8", "--scheme", "block128"]):
        code, out = run("tune", *args)
        assert code == 2 and "needs a CUDA GPU" in out, out


def test_cli_dispatch_lists_the_shards_shapes(tmp_path):
    """dispatch --model X --tp N keeps the cached decisions of one rank's shapes: qwen3-8b at
    tp 2 runs q 2048x4096 and o_proj 4096x2048, not tp 1's 4096x4096."""
    path = tmp_path / "nvidia-h200.json"
    entries = [entry_with({"cublaslt": 8.0}, GemmProblem(m=1, n=n, k=k, scheme="per_tensor",
                                                         capability=(9, 0)))
               for n, k in ((4096, 4096), (2048, 4096), (4096, 2048), (512, 4096))]
    tcache.DecisionCache(path, tcache.environment_meta("NVIDIA H200")).save(
        {e.key: e for e in entries})

    def shapes(*args):
        code, _ = run("dispatch", "--file", path, "--model", "qwen3-8b", *args)
        r = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--json", "--model",
                                     "qwen3-8b", *args])
        assert code == 0 and r.exit_code == 0, r.output
        return sorted((d["n"], d["k"]) for d in json.loads(r.output)["decisions"])

    assert shapes() == [(4096, 4096)]
    assert shapes("--tp", "2") == [(512, 4096), (2048, 4096), (4096, 2048)]  # k/v: 512
    assert shapes("--tp", "2", "--merged") == [(4096, 2048)]  # qkv 3072 rows: none cached


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU run (reference backend)")
def test_cli_bench_tower_runs_one_ranks_tower(tmp_path):
    out = tmp_path / "t.json"
    code, text = run("bench", "tower", "--model", "tiny-hybrid", "--tp", "2", "--m", "1",
                     "--arms", "merged", "--backends", "reference", "--replays", "1",
                     "--steps", "1", "--rounds", "1", "--json", out)
    assert code == 0 and "tiny-hybrid, one rank of tp 2" in text, text
    rec = json.loads(out.read_text())
    assert rec["tp"] == 2 and "--model tiny-hybrid --tp 2 " in rec["command"]
    (row,) = rec["rows"]
    assert row["status"] == "ok"
    # tiny-hybrid (hidden 256) at tp 2, FP8 GDN + attention: GDN key_dim 2 * 32 = 64,
    # value_dim 6 * 32 = 192: in_proj_qkv (2 * 64 + 192) / 2 = 160, in_proj_z 192 / 2 = 96,
    # out_proj K 192 / 2 = 96 -> (160 + 96) * 256 + 256 * 96 = 90112 a layer, 3 layers 270336;
    # attention q 4 * 48 * 2 / 2 = 192, k / v one kv head of 48 each (2 over 2 ranks),
    # o_proj K 4 * 48 / 2 = 96 -> (192 + 48 + 48) * 256 + 256 * 96 = 98304. 368640 in all.
    assert row["fp8_bytes"] == 368640
    code, text = run("bench", "tower", "--model", "tiny-hybrid", "--tp", "2", "--scheme",
                     "block128")
    assert code == 2 and "--tp 2 --scheme block128" in text and "got 160" in text, text
    code, text = run("bench", "tower", "--model", "qwen3.5-27b", "--tp", "3")
    assert code == 2 and "--tp 3: qwen3.5-27b: linear_num_key_heads: got 16" in text, text
    assert "one rank of tp 2" in get_spec("tiny-hybrid", tp=2).summary()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU run (reference backend)")
def test_cli_bench_tower_default_json_names_tp(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_cli, "RESULTS", tmp_path)
    code, text = run("bench", "tower", "--model", "tiny-hybrid", "--tp", "2", "--m", "1",
                     "--arms", "merged", "--backends", "reference", "--replays", "1",
                     "--steps", "1", "--rounds", "1")
    assert code == 0, text
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("tower_tiny-hybrid_tp2_cpu_"), path.name
    assert json.loads(path.read_text())["tp"] == 2


def test_a_zero_shared_expert_width_means_none_at_any_tp():
    """shared_expert_intermediate_size 0 (no shared expert) splits at every tp; a negative
    width is refused, naming it."""
    from fp8tower.models.tp import TpError, check_fields

    check_fields(4, {"shared_expert_intermediate_size": 0, "moe_intermediate_size": 512})
    with pytest.raises(TpError, match="shared_expert_intermediate_size.*-1"):
        check_fields(4, {"shared_expert_intermediate_size": -1})


def test_trace_capture_tp_records_it_and_report_compares_one_tp_only(tmp_path):
    """trace capture --tp captures one rank's tower: the manifest says tp 2 and its GEMMs are
    the shard's; report refuses to pair it with a tp 1 capture (another model's GEMMs), naming both."""
    from fp8tower.cli import app

    run = CliRunner().invoke
    caps = {}
    for tp in (1, 2):
        caps[tp] = tmp_path / f"tp{tp}"
        r = run(app, ["trace", "capture", "--model", "tiny-hybrid", "--arm", "merged",
                      "--steps", "2,6", "--tp", str(tp), "--out", str(caps[tp])])
        assert r.exit_code == 0, r.output
    man = {tp: json.loads((caps[tp] / "manifest.json").read_text()) for tp in (1, 2)}
    assert "tp" not in man[1]["meta"] and man[2]["meta"]["tp"] == 2
    def shapes(tp):
        return {op["label"]: (op["n"], op["k"]) for op in man[tp]["ops"]
                if op["label"] in ("gdn.in_proj_qkv+in_proj_z", "gdn.out_proj")}

    # the GDN's in_proj_qkv 320 + in_proj_z 192 rows, column-parallel: 160 + 96 per rank; its
    # out_proj's K 192, row-parallel: 96 per rank
    assert shapes(1) == {"gdn.in_proj_qkv+in_proj_z": (512, 256), "gdn.out_proj": (256, 192)}
    assert shapes(2) == {"gdn.in_proj_qkv+in_proj_z": (256, 256), "gdn.out_proj": (256, 96)}
    r = run(app, ["trace", "report", str(caps[1]), str(caps[2])])
    assert r.exit_code != 0
    text = " ".join(r.output.split())
    assert "one rank of tp 2" in text and "cannot compare captures of different --tp" in text
    assert "--other-m" not in text  # it would refuse them too
    r = run(app, ["trace", "capture", "--model", "tiny-hybrid", "--arm", "merged", "--scheme",
                  "block128", "--tp", "2", "--out", str(tmp_path / "b")])
    assert r.exit_code != 0 and "--tp 2" in r.output and "128" in r.output
