"""The Triton GEMM's default configs compile for sm_90 (H100/H200) on this machine, without a
GPU (fp8tower.kernels.offline), with the code generation a streaming decode GEMM needs."""

import json
import os
import subprocess
import sys

import pytest

from fp8tower.kernels.offline import SMEM_PER_BLOCK

pytest.importorskip("triton")

SHAPES = ("10240x5120", "1024x5120", "5120x17408", "6144x5120")


def _compile_env() -> dict:
    """The environment of a compiling subprocess: this process imported triton under
    TRITON_INTERPRET=1 (conftest), and interpreted @jit functions cannot be compiled."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9 warns when unset
    return env


@pytest.fixture(scope="module")
def facts():
    env = _compile_env()
    cmd = [sys.executable, "-m", "fp8tower.kernels.offline", "--m", "1,8,32,64", "--priority"]
    for s in SHAPES:
        cmd += ["--shape", s]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)
    assert sum(r["role"] == "default" for r in rows) == len(SHAPES) * 4 * 4
    assert sum(r["role"] == "priority" for r in rows) > 0  # 10240x5120, 6144x5120 have some
    return rows


def _ids(rows):
    return [f"{r['scheme']} M={r['m']} {r['n']}x{r['k']}" for r in rows]


def test_defaults_fit_and_do_not_spill(facts):
    for r, name in zip(facts, _ids(facts)):
        assert r["spill_bytes"] in (0, None), name
        assert r["shared_bytes"] <= SMEM_PER_BLOCK, name
        assert r["programs_per_sm"] >= 1, name


def test_weights_stream_by_16_byte_async_copies(facts):
    """W tiles go global -> shared by cp.async 16 B (K % 16 == 0 here), no byte loads."""
    for r, name in zip(facts, _ids(facts)):
        ops = r["ptx_ops"]
        assert ops.get("cp.async.cg.shared.global", 0) > 0, (name, ops)
        assert "ld.global.b8" not in ops, (name, ops)


def test_dots_are_hopper_wgmma(facts):
    """FP8 x FP8 wgmma for the W8A8 schemes and weight_only's two-part x (the pre-pass split,
    2 rows a token, or WO_MODE 2); bf16 wgmma on upcast weights for weight_only's upcast."""
    for r, name in zip(facts, _ids(facts)):
        mma = [op for op in r["ptx_ops"] if op.startswith("wgmma.mma_async")]
        wo = r["scheme"] == "weight_only"
        upcast = wo and not r["x_fp8"] and r["config"].get("wo_mode", 0) != 2
        want = "bf16.bf16" if upcast else "e4m3.e4m3"
        assert mma and all(op.endswith(want) for op in mma), (name, mma)
        rows = 2 * r["m"] if wo and r["x_fp8"] else r["m"]
        assert f"n{max(16, 1 << (rows - 1).bit_length())}k" in mma[0], (name, mma)


_WHOLE_TILES = r"""
import json, torch
from fp8tower.formats import Scheme
from fp8tower.kernels import configs, offline
from fp8tower.problem import GemmProblem
out = []
for scheme, mode in (("per_tensor", {"prequant": True}), ("per_tensor", {"prequant": False}),
                     ("channel_token", {}), ("channel_token", {"fused_amax": True}),
                     ("block128", {}), ("weight_only", {})):
    p = GemmProblem(1, 16384, 5120, Scheme(scheme), capability=(9, 0),
                    static_act_scale=scheme == "per_tensor")
    cfg = {**configs.default_config(p), "split_k": 1, **mode}
    out.append([scheme, cfg, offline.compile_gemm(p, cfg).loads_after_loop])
    if scheme == "per_tensor" and mode["prequant"]:  # a layer with a bias (Qwen2's q/k/v)
        out.append([scheme + "+bias", cfg, offline.compile_gemm(p, cfg, bias=True).loads_after_loop])
print(json.dumps(out))
"""


def test_no_load_waits_after_the_k_loop():
    """Without split-K nothing is loaded after the K loop, for any scheme or way of taking x:
    the epilogue's scales come before it (kernels/fp8_gemm.py), so no program's tail waits
    for memory. (Split-K's last split loads the partials there: that is its reduction.)"""
    env = _compile_env()
    out = subprocess.run([sys.executable, "-c", _WHOLE_TILES], capture_output=True, text=True,
                         env=env, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)
    assert len(rows) == 7
    for scheme, cfg, loads in rows:
        assert loads == 0, (scheme, cfg)


def test_loads_after_loop_counts_the_loads_past_the_last_back_edge():
    from fp8tower.kernels.offline import loads_after_loop

    ptx = ("ld.global.b32 {%r1}, [%rd1];\n$L__BB0_2:\n  wgmma;\n  @%p2 bra \t$L__BB0_2;\n"
           "$L__BB0_3:\n  @%p3 ld.global.b32 {%r2}, [%rd2];\n  st.global.b32 [%rd3], %r2;\n")
    assert loads_after_loop(ptx) == 1
    assert loads_after_loop(ptx.replace("bra \t$L__BB0_2", "bra \t$L__BB0_3")) == 2  # forward


def test_programs_per_sm_estimate_matches_the_build(facts):
    """kernels.configs.programs_per_sm (which the tuner's wave-fitting configs rely on) agrees
    with the compiled shared memory and registers for the default tile and its variants."""
    checked = 0
    for r, name in zip(facts, _ids(facts)):
        if r["scheme"] == "weight_only" and r["m"] >= 32:
            continue  # compiles smaller; wave_fits skips weight_only
        row1 = r["scheme"] != "weight_only" or r["config"].get("wo_mode", 0) == 2
        if r["m"] == 1 and row1 and not r["x_fp8"]:
            # one token quantized (or split) in the GEMM (fp8_gemm.row1) stages a 1-row x: it compiles
            # smaller (3 programs per SM for 64x256x4), while the estimate keeps the 16-row x
            # that the wave rule's defaults were measured with (configs.programs_per_sm)
            assert r["programs_per_sm"] >= r["estimated_programs_per_sm"], (name, r["config"])
            continue
        assert r["estimated_programs_per_sm"] == r["programs_per_sm"], (name, r["config"])
        checked += 1
    assert checked >= 40


_LAUNCH = """
import json, sys, torch
from fp8tower.backends import triton_gemm
from fp8tower.formats import quantize_weight
from fp8tower.kernels import offline
from fp8tower.problem import GemmProblem
scheme, m, n, k = sys.argv[1], *map(int, sys.argv[2:5])
w = quantize_weight(torch.randn(n, k) * 0.02, scheme, act_scale=0.05 if scheme == "per_tensor" else None)
x = torch.randn(m, k, dtype=torch.bfloat16)
cfg = json.loads(sys.argv[5])
with offline.offline_target((9, 0)):  # the launch compiles, then fails: nothing to run on
    try:
        triton_gemm._run(x, w, triton_gemm._prepare(w), config=cfg, out_dtype=torch.bfloat16)
    except AttributeError as e:
        print("compiled, not launched:", e)
"""


def test_precompile_builds_what_a_launch_looks_up(tmp_path, monkeypatch):
    """offline.precompile builds each distinct variant once, in worker processes, into
    triton's on-disk cache; the backend's own launch path (real tensors, the JIT's own
    specialization) then finds every one there and builds nothing new."""
    from fp8tower.kernels import offline
    from fp8tower.kernels.configs import default_config
    from fp8tower.problem import GemmProblem

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    cases = [("per_tensor", 1, 1024, 5120), ("per_tensor", 8, 1024, 5120),
             ("channel_token", 1, 12288, 5120), ("block128", 32, 1024, 5120),
             ("weight_only", 64, 6144, 5120)]
    jobs = []
    for scheme, m, n, k in cases:
        p = GemmProblem(m, n, k, scheme, capability=(9, 0))
        cfg = default_config(p)
        if scheme == "weight_only":  # its upcast: the split's pre-pass has no torch fallback
            # (on CPU tensors here it would compile, then stop, before the GEMM)
            cfg = {f: v for f, v in cfg.items() if f not in ("pdl", "prefetch", "wo_mode")} \
                | {"prequant": False}
        jobs.append((p, cfg))
    report = offline.precompile(jobs, workers=2)
    # per_tensor M = 1 and M = 8 share BLOCK_M 16 but not a build: one token is quantized
    # as a vector (fp8_gemm.row1)
    assert (report.jobs, report.variants, report.failures) == (5, 5, [])
    assert "built 5 of 5" in report.summary()
    cubins = sorted(tmp_path.rglob("*.cubin"))
    assert len(cubins) == 5
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    for (scheme, m, n, k), (_, cfg) in zip(cases, jobs):
        out = subprocess.run([sys.executable, "-c", _LAUNCH, scheme, str(m), str(n), str(k),
                              json.dumps(cfg)],
                             capture_output=True, text=True, env=env, timeout=300, check=False)
        assert "compiled, not launched" in out.stdout, out.stderr[-2000:]
        assert sorted(tmp_path.rglob("*.cubin")) == cubins, scheme  # found, not rebuilt


@pytest.mark.parametrize(("args", "message"), [
    (["--shape", "10x"], "expected NxK"),
    (["--shape", "64x64", "--m", "a"], "expected integers"),
    (["--shape", "64x64", "--scheme", "nope"], "unknown scheme 'nope'"),
    # non-positive sizes were a 12-line GemmProblem traceback
    (["--shape", "0x5120"], "shape '0x5120': expected NxK with N, K >= 1"),
    (["--shape", "64x-64"], "shape '64x-64': expected NxK with N, K >= 1"),
    (["--shape", "64x64", "--m", "1,-1"], "'1,-1': expected integers >= 1"),
])
def test_offline_cli_bad_input(args, message, capsys):
    from fp8tower.kernels import offline

    with pytest.raises(SystemExit) as e:
        offline.main(args)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("wo_mode", [0, 3])
def test_weight_only_split_at_m64_is_one_128_row_tile_without_spills(wo_mode):
    """weight_only's split x at M = 64 (128 FP8 rows) runs as one 128-row tile, so W streams
    once (configs.SPLIT_BLOCK_M_MAX): it builds for sm_90 without spills, one program a SM,
    with scales per 1x128 group and per token (wo_mode 3, the default there)."""
    code = (
        "import json, dataclasses\n"
        "from fp8tower.kernels import configs, offline\n"
        "from fp8tower.problem import GemmProblem\n"
        "p = GemmProblem(64, 16384, 5120, 'weight_only')\n"
        "cfg = {'block_n': 64, 'block_k': 256, 'split_k': 1, 'num_warps': 4, 'num_stages': 3,\n"
        f"       'prequant': True, 'pdl': True, 'prefetch': 2, 'wo_mode': {wo_mode}}}\n"
        "f = offline.compile_gemm(p, cfg)\n"
        "print(json.dumps({**dataclasses.asdict(f), 'block_m': configs.block_m_for(128, split=True)}))\n"
    )
    r = _printed_json(code)
    assert r["block_m"] == 128 and r["x_fp8"]
    assert r["spill_bytes"] in (0, None) and r["shared_bytes"] <= SMEM_PER_BLOCK
    assert r["programs_per_sm"] >= 1
    assert r["grid_programs"] == 16384 // 64  # one M tile: no second pass over W


def _printed_json(code: str):
    """The JSON a compiling subprocess running ``code`` prints last."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_compile_env(), timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ptx_ops(script: str) -> dict:
    """The PTX op counts (offline._ptx_summary) a compiling subprocess prints."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=_compile_env(), timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


_STANDIN = r"""
import json, torch
from triton.runtime.jit import MockTensor
from fp8tower.kernels import offline
from fp8tower.tower import standin
with offline.offline_target((9, 0)):
    c = standin._standin_rows_elementwise_add.warmup(
        MockTensor(torch.bfloat16, [32, 16384]), MockTensor(torch.bfloat16, [32, 16384]),
        MockTensor(torch.bfloat16, [32, 6144]), 6144, 16384, 16384,
        BLOCK=standin.BLOCK, INTERPRET_BF16=False, num_warps=4, grid=(1,))
print(json.dumps(offline._ptx_summary(c.asm["ptx"])))
"""


def test_the_rows_standin_streams_16_bytes_a_load_without_pdl():
    """tower/standin.py's kernel on sm_90 (column slices of a 16384-wide output, as the
    merged 27B tower's GDN stand-in reads them): 16-byte loads and stores, no griddepcontrol
    (launched as a foreign kernel is)."""
    ops = _ptx_ops(_STANDIN)
    assert ops.get("ld.global.v4.b32") == 2 and ops.get("st.global.v4.b32") == 1, ops
    assert not any(op.startswith("griddepcontrol") for op in ops), ops


_STANDIN_FP8 = r"""
import json, torch
from triton.runtime.jit import MockTensor
from fp8tower.kernels import offline
from fp8tower.tower import standin
with offline.offline_target((9, 0)):
    c = standin._standin_rows_elementwise_add_fp8.warmup(
        MockTensor(torch.bfloat16, [32, 16384]), MockTensor(torch.bfloat16, [32, 16384]),
        MockTensor(torch.float8_e4m3fn, [32, 6144]), MockTensor(torch.float32, [1]), 6144,
        16384, 16384, BLOCK=standin.BLOCK, FMAX=448.0, INTERPRET_BF16=False, num_warps=4,
        grid=(1,))
print(json.dumps(offline._ptx_summary(c.asm["ptx"])))
"""


def test_the_rows_fp8_standin_streams_16_bytes_a_load_without_pdl():
    """The producer-fused stand-in (--standin rows_fp8) on sm_90: the same 16-byte loads as
    the rows stand-in, its 8 FP8 codes a thread stored at once, the hardware's saturating
    e4m3 conversion, no griddepcontrol (launched as a foreign producer is)."""
    ops = _ptx_ops(_STANDIN_FP8)
    assert ops.get("ld.global.v4.b32") == 2 and ops.get("st.global.v2.b32") == 1, ops
    assert ops.get("cvt.rn.satfinite.e4m3x2.f32") == 4, ops
    assert not any(op.startswith("griddepcontrol") for op in ops), ops


def test_eager_twins_of_the_deep_pair_fit_for_every_x_dtype():
    """An eager twin quantizes x in the GEMM, staging x as it comes (the pair staged FP8):
    per_tensor's and channel_token's twins of the deep tile's pair at M = 8 build for sm_90
    within a block's shared memory for bf16, fp16 and fp32 x (fp32 on 4 stages took 238,592
    B of 232,448: nn/plan._fit_x runs it on 3)."""
    code = (
        "import json, torch\n"
        "from fp8tower.formats import Scheme\n"
        "from fp8tower.kernels import configs, offline\n"
        "from fp8tower.nn.plan import _fit_x\n"
        "from fp8tower.problem import GemmProblem\n"
        "out = []\n"
        "for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):\n"
        "    for dtype in (torch.bfloat16, torch.float16, torch.float32):\n"
        "        p = GemmProblem(8, 4096, 4096, scheme, capability=(9, 0), act_dtype=dtype,\n"
        "                        static_act_scale=scheme is Scheme.PER_TENSOR)\n"
        "        # eager_one_launch's twin of the pair (its Triton check needs a GPU here)\n"
        "        own = {'prequant': False}\n"
        "        if scheme is Scheme.CHANNEL_TOKEN:\n"
        "            own['fused_amax'] = True\n"
        "        cfg = _fit_x(p, configs.deep_tile(p, own))\n"
        "        f = offline.compile_gemm(p, cfg)\n"
        "        out.append([str(p.key()), cfg['num_stages'], f.x_fp8, f.shared_bytes,\n"
        "                    f.spill_bytes])\n"
        "print(json.dumps(out))\n"
    )
    rows = _printed_json(code)
    assert len(rows) == 6
    for key, stages, x_fp8, shared, spill in rows:
        assert not x_fp8 and stages >= 3, key
        assert shared <= SMEM_PER_BLOCK and spill in (0, None), (key, stages, shared)
